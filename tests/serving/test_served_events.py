"""Events from the served search (serving/events.py, ``serve --events DIR``): every /search answer
carries a signed search id and is logged as an impression, cached answers too; ``POST /events``
logs a click after checking the id (any worker can: the id is signed with the service's secret)
and that the position was on the page; unknown, forged or expired ids get 404, a position off the
page 422, a service without events 409; the key and the rate limit guard /events when exposed;
the real ``semsearch serve --events`` killed with SIGKILL leaves only whole segments and loses at
most the last flush interval's events."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from semsearch.cli import app as cli
from semsearch.clicks import log as click_log
from semsearch.clicks.log import EventLogWriter, Impression, segments
from semsearch.clicks.sessions import read_log, read_sessions
from semsearch.serving import create_app
from semsearch.serving.events import ID_TTL_S, SearchIds, UnknownSearch
from semsearch.serving.exposure import Exposure
from waiting import WAIT_S, wait_until

KEY = "k" * 20 + "-secret-0123456789"
SECRET = "s" * 32
CLIENT = "client-0123456789abcdef"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bundle(make_bundle, tmp_path):  # type: ignore[no-untyped-def]
    return make_bundle(tmp_path / "b")


def click(search: dict, i: int = 0, **extra: object) -> dict:
    """The click body for the i-th hit of a /search answer."""
    h = search["hits"][i]
    body = {"query_id": search["search_id"], "action_name": "click", "object_id": h["doc_id"], "position": h["rank"]}
    return body | extra


def test_search_logs_an_impression_and_click_an_event(bundle, tmp_path) -> None:
    log = tmp_path / "events"
    with TestClient(create_app(bundle, events=log, events_flush_seconds=0.2)) as c:
        s = c.get("/search", params={"q": "red cat", "k": 3}, headers={"X-Client-Id": CLIENT}).json()
        again = c.get("/search", params={"q": "red cat", "k": 3}).json()  # the result cache's answer
        page2 = c.get("/search", params={"q": "red cat", "k": 3, "offset": 3}).json()
        assert re.fullmatch(r"[0-9a-f]{16}\.\d+\.0\.3\.[A-Za-z0-9_-]{22}", s["search_id"])
        assert len({s["search_id"], again["search_id"], page2["search_id"]}) == 3
        r = c.post("/events", json=click(s, 1, client_id=CLIENT))
        assert r.status_code == 202 and r.json() == {"status": "accepted"}
        assert c.post("/events", json=click(page2, 0)).status_code == 202  # rank 4 on page 2
        metrics = c.get("/metrics").text
        assert 'semsearch_events_total{kind="impressions",outcome="logged"} 3.0' in metrics
        assert 'semsearch_events_total{kind="events",outcome="logged"} 2.0' in metrics
    # the app's shutdown flushed the buffers
    imps = read_log(log, "impressions").to_pylist()
    assert [i["query_id"] for i in imps] == [s["search_id"], again["search_id"], page2["search_id"]]
    first = imps[0]
    assert first["user_query"] == "red cat" and first["client_id"] == CLIENT and first["arm"] is None
    assert (first["k"], first["offset"]) == (3, 0) and imps[2]["offset"] == 3 and imps[1]["client_id"] is None
    assert first["hit_ids"] == [h["doc_id"] for h in s["hits"]]
    assert first["hit_stages"] == [h["source"] for h in s["hits"]]
    assert first["bundle"] == "b" and re.fullmatch(r"[0-9a-f]{16}", first["bundle_version"])
    assert imps[1]["hit_ids"] == first["hit_ids"]  # the cached answer is logged as shown
    evs = read_log(log, "events").to_pylist()
    assert [(e["query_id"], e["object_id"], e["position"], e["client_id"]) for e in evs] == [
        (s["search_id"], s["hits"][1]["doc_id"], 2, CLIENT),
        (page2["search_id"], page2["hits"][0]["doc_id"], 4, None),
    ]
    sessions = read_sessions(log, top_n=6)  # the clicks join their impressions
    assert sessions.clicks.sum() == 2
    # nothing about the client's address anywhere in the log
    assert not any("127.0.0.1" in str(v) or "testclient" in str(v) for row in imps + evs for v in row.values())


def test_unknown_forged_and_expired_ids_get_404(bundle, tmp_path) -> None:
    app = create_app(bundle, events=tmp_path / "events", event_secret=SECRET)
    with TestClient(app) as c:
        s = c.get("/search", params={"q": "red cat", "k": 3}).json()
        sid = s["search_id"]
        nonce, issued, offset, shown, mac = sid.split(".")
        forged = [
            "nope",
            f"{nonce}.{issued}.{offset}.9.{mac}",  # more hits claimed
            f"{nonce}.{int(issued) + 1}.{offset}.{shown}.{mac}",  # another time
            f"{'0' * 16}.{issued}.{offset}.{shown}.{mac}",
            SearchIds("t" * 32).issue(0, 3),  # another service's secret (or before a restart)
        ]
        for bad in forged:
            r = c.post("/events", json=click(s) | {"query_id": bad})
            assert r.status_code == 404 and "search id" in r.json()["error"], bad
        app.state.service.events.ids.clock = lambda: time.time() + ID_TTL_S + 10
        r = c.post("/events", json=click(s))
        assert r.status_code == 404 and "expired" in r.json()["error"]
    # another worker of the same service (same secret, nothing shared) accepts the id
    with TestClient(create_app(bundle, events=tmp_path / "events", event_secret=SECRET)) as other:
        assert other.post("/events", json=click(s)).status_code == 202


def test_positions_off_the_page_and_bad_bodies_get_422(bundle, tmp_path) -> None:
    with TestClient(create_app(bundle, events=tmp_path / "events")) as c:
        s = c.get("/search", params={"q": "red cat", "k": 3, "offset": 3}).json()
        shown = len(s["hits"])
        for position in (1, 3, 4 + shown):
            r = c.post("/events", json=click(s) | {"position": position})
            assert r.status_code == 422 and f"positions 4-{3 + shown}" in r.json()["error"], position
        for body, where in [
            (click(s) | {"position": 0}, "body.position"),
            (click(s) | {"position": 4.5}, "body.position"),
            (click(s) | {"action_name": "view"}, "body.action_name"),
            (click(s) | {"client_id": "has space"}, "body.client_id"),
            (click(s) | {"extra": 1}, "body.extra"),
            ({k: v for k, v in click(s).items() if k != "object_id"}, "body.object_id"),
        ]:
            r = c.post("/events", json=body)
            assert r.status_code == 422 and r.json()["error"].startswith(where), body
        r = c.post("/events", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 422
        r = c.get("/search", params={"q": "red"}, headers={"X-Client-Id": "a b"})
        assert r.status_code == 422 and "X-Client-Id" in r.json()["error"]

        def chunks():  # type: ignore[no-untyped-def]  # no Content-Length: cut off as it is read
            for _ in range(100):
                yield b"x" * 1000

        assert c.post("/events", content=chunks(), headers={"content-type": "application/json"}).status_code == 413
        assert c.get("/events").status_code == 405


def test_without_events_search_ids_are_null_and_events_409(bundle) -> None:
    with TestClient(create_app(bundle)) as c:
        s = c.get("/search", params={"q": "red cat"}).json()
        assert s["search_id"] is None
        r = c.post("/events", json=click(s) | {"query_id": "x"})
        assert r.status_code == 409 and "--events" in r.json()["error"]


def test_exposed_service_guards_events_with_the_key_and_the_rate(bundle, tmp_path) -> None:
    with TestClient(create_app(bundle, exposure=Exposure(KEY, rate=1.0), events=tmp_path / "events")) as c:
        s = c.get("/search", params={"q": "red cat"}, headers={"X-API-Key": KEY}).json()
        r = c.post("/events", json=click(s))
        assert r.status_code == 401 and r.headers["www-authenticate"] == 'ApiKey header="X-API-Key"'
        assert c.post("/events", json=click(s), headers={"X-API-Key": KEY}).status_code == 202
        r = c.post("/events", json=click(s), headers={"X-API-Key": KEY})  # burst of 2 spent
        assert r.status_code == 429 and "retry-after" in r.headers
    with TestClient(create_app(bundle, exposure=Exposure(KEY, rate=1.0), events=tmp_path / "events")) as c:
        responses = c.get("/openapi.json").json()["paths"]["/events"]["post"]["responses"]
        assert {"202", "401", "404", "409", "422", "429"} <= set(responses)


def test_a_full_buffer_drops_instead_of_waiting(tmp_path, monkeypatch) -> None:
    """append(block=False) on a writer whose disk has fallen behind returns False at once."""
    release, writing = threading.Event(), threading.Event()
    real = click_log.write_segment

    def slow(*a, **k):  # type: ignore[no-untyped-def]
        writing.set()
        release.wait(30)
        return real(*a, **k)

    monkeypatch.setattr(click_log, "write_segment", slow)
    w = EventLogWriter(tmp_path, flush_rows=2, max_pending_rows=2, flush_seconds=60)
    rec = Impression(query_id="q", user_query="x", hit_ids=["d"])
    assert w.append(rec, block=False) and w.append(rec, block=False)
    assert writing.wait(WAIT_S)  # both rows taken for a segment that the disk has not written yet
    t = time.monotonic()
    assert w.append(rec, block=False) is False and time.monotonic() - t < 1
    release.set()
    w.close()
    assert read_log(tmp_path, "impressions").num_rows == 2


def test_serve_options_and_flags_for_events(bundle, tmp_path) -> None:
    from semsearch.params import ParamError
    from semsearch.serving.options import ServeOptions

    o = ServeOptions.from_mapping(
        {"bundle": str(bundle), "events": str(tmp_path / "ev"), "events_flush_seconds": 0.5, "event_secret": SECRET}
    )
    assert SECRET not in repr(o) and o.events_flush_seconds == 0.5
    assert ServeOptions(str(bundle)).events is None
    for raw, message in [
        ({"events_flush_seconds": 0}, "--events-flush-seconds must be > 0"),
        ({"events_flush_seconds": float("inf")}, "--events-flush-seconds must be a number of seconds"),
        ({"events": str(bundle / "manifest.json")}, "not a directory"),
        ({"event_secret": "short"}, "event secret must be at least 16"),
    ]:
        with pytest.raises(ParamError, match=re.escape(message)):
            ServeOptions.from_mapping({"bundle": str(bundle), **raw})
    r = CliRunner().invoke(cli, ["serve", str(bundle), "--events-flush-seconds", "1"])
    assert r.exit_code == 2 and "--events-flush-seconds needs --events" in r.output
    r = CliRunner().invoke(cli, ["serve", str(bundle), "--events", str(tmp_path), "--events-flush-seconds", "0"])
    assert r.exit_code == 2 and "--events-flush-seconds must be > 0" in r.output


def test_search_ids_check_themselves() -> None:
    clock = [1_000_000.0]
    ids = SearchIds(SECRET, clock=lambda: clock[0])
    sid = ids.issue(10, 7)
    assert ids.verify(sid) == (10, 7)
    clock[0] += ID_TTL_S - 1
    assert ids.verify(sid) == (10, 7)
    clock[0] += 2
    with pytest.raises(UnknownSearch, match="expired"):
        ids.verify(sid)
    with pytest.raises(UnknownSearch, match="not an id"):
        ids.verify("x" * 10_000)


@pytest.mark.parametrize("secret", [SECRET, "k" * 16, "long" * 40])
def test_search_id_macs_are_hmac_sha256_of_the_fields(secret: str) -> None:
    """The MAC made from the precomputed keyed states is the documented HMAC-SHA256 (keys longer
    than SHA-256's block hashed first, as RFC 2104 says)."""
    nonce, issued, offset, shown, mac = SearchIds(secret).issue(20, 10).split(".")
    digest = hmac.new(secret.encode(), f"{nonce}|{issued}|{offset}|{shown}".encode(), hashlib.sha256).digest()
    assert mac == base64.urlsafe_b64encode(digest[:16]).rstrip(b"=").decode()
    assert (offset, shown) == ("20", "10") and len(nonce) == 16


FLUSH_S = 0.5
SLACK_S = 1.5
"""What a segment may take to be written on a loaded 2-core machine, beyond the flush interval."""


def test_sigkill_of_the_served_search_leaves_whole_segments_and_loses_at_most_a_flush_interval(bundle, tmp_path):
    """The real ``semsearch serve --events DIR --workers 2`` under searches and clicks (new
    connections: they land on either worker), killed with SIGKILL (the parent and both workers,
    no shutdown): every segment in DIR reads whole, and every impression and click answered more
    than ``FLUSH_S + SLACK_S`` before the kill is in the log (the bound: a worker writes its
    buffer at most ``--events-flush-seconds`` after a row arrives, plus the write itself)."""
    log = tmp_path / "events"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "semsearch.cli", "serve", str(bundle), "--port", str(port), "--workers", "2"]
    cmd += ["--events", str(log), "--events-flush-seconds", str(FLUSH_S)]
    said = tmp_path / "serve.log"
    with open(said, "wb") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    answered: list[tuple[float, str, str]] = []  # (time answered, kind, search id)
    pids: set[int] = set()

    def announced() -> bool:  # "serving BUNDLE on http://HOST:PORT/ (2 workers…)": both workers ready
        assert proc.poll() is None, said.read_text(errors="replace")[-3000:]
        return f":{port}/ (" in said.read_text(errors="replace")

    try:
        wait_until(announced, lambda: f"semsearch serve to announce port {port}: {said.read_text()[-3000:]}")
        words = ["red", "cat", "blue", "dog", "green", "lamp", "house", "tree"]
        # traffic for 4 s at least, and until both workers have answered 20 searches and clicks
        end, give_up, i = time.time() + 4.0, time.time() + WAIT_S, 0
        while time.time() < end or (time.time() < give_up and not (len(pids) == 2 and len(answered) > 20)):
            q = f"{words[i % 8]} {words[(i // 8) % 8]}"
            with httpx.Client(timeout=10) as c:  # a new connection each time: either worker
                s = c.get(base + "/search", params={"q": q, "k": 5}).json()
                answered.append((time.time(), "impressions", s["search_id"]))
                pids.add(c.get(base + "/health").json()["pid"])
            if s["hits"] and i % 2 == 0:
                with httpx.Client(timeout=10) as c:
                    r = c.post(base + "/events", json=click(s, i % len(s["hits"])))
                    assert r.status_code == 202, r.text  # whichever worker checks the id
                answered.append((time.time(), "events", s["search_id"]))
            i += 1
    finally:
        killed = time.time()
        os.killpg(proc.pid, signal.SIGKILL)  # the service's own process group: parent and workers
        proc.wait(30)
    assert len(pids) == 2 and len(answered) > 20
    for kind in ("impressions", "events"):
        for seg in segments(log, kind):
            pq.read_table(seg)  # whole: a torn file would not read
        logged = set(read_log(log, kind).column("query_id").to_pylist())
        sent = [(t, sid) for t, k, sid in answered if k == kind]
        lost = [(round(killed - t, 2), sid) for t, sid in sent if sid not in logged]
        oldest = max((age for age, _ in lost), default=0)
        print(f"{kind}: {len(sent)} answered, {len(lost)} lost, the oldest {oldest} s before the kill")
        assert all(age <= FLUSH_S + SLACK_S for age, _ in lost), lost
        assert len(logged) >= len([1 for t, _ in sent if killed - t > FLUSH_S + SLACK_S]) > 0


def test_an_unwritable_event_log_fails_before_serving(bundle, tmp_path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    r = CliRunner().invoke(cli, ["serve", str(bundle), "--port", "1", "--events", str(blocked / "log")])
    assert r.exit_code == 2 and f"--events {blocked / 'log'}: cannot write there" in r.output
