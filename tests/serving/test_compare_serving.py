"""Two bundles in one service (``serve A --compare B``, serving/compare.py): the options and flags
are checked and named; in interleave mode every answer is a team-draft interleaving (Radlinski et
al. 2008) reproducible from its search id, each hit logged with its team, and a simulated user
clicking through HTTP makes the better bundle win (sign test p < 0.05 over a few hundred
impressions, seeded); in ab mode each client id stays in its bucket and is served by its arm's
bundle alone; ``clicks compare`` reads the log back; a bundle over other documents is refused; the
real ``semsearch serve --compare`` with two workers loads both bundles in each."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from semsearch.cli import app as cli
from semsearch.clicks.abtest import DEFAULT_SALT, BucketLayout, bucket_of
from semsearch.clicks.log import Impression
from semsearch.clicks.sessions import read_log
from semsearch.data import open_dataset
from semsearch.data.beir import Corpus
from semsearch.index import build_bundle
from semsearch.index.bundle import Bundle
from semsearch.params import ParamError
from semsearch.plugins import create_model
from semsearch.serving import create_app, schemas
from semsearch.serving.compare import TEAMS, arm_name, check_same_documents, interleave, read_comparison, seed_of
from semsearch.serving.events import SearchIds
from semsearch.serving.options import ServeOptions
from semsearch.serving.routers import compare as compare_router

TOPICS = ["red", "blue", "green", "cat", "dog", "bird", "fish", "tree", "rock", "lamp", "door", "sofa"]
IMPRESSIONS = 300


@pytest.fixture
def pair(tiny_data, tmp_path) -> tuple[Path, Path]:
    """A: BM25 over the tiny set's documents; B: the same documents ranked at random (worse)."""
    corpus = open_dataset("tiny").corpus()
    a = build_bundle(corpus, [create_model("bm25", analyzer="english")], tmp_path / "A", dataset="tiny")
    b = build_bundle(corpus, [create_model("random")], tmp_path / "B", dataset="tiny")
    return a, b


@pytest.fixture
def seeded_ids(monkeypatch) -> None:
    """Search-id nonces from a seeded generator: the interleavings, and so the test, are reproducible."""
    rng = np.random.default_rng(5)
    monkeypatch.setattr(compare_router, "new_nonce", lambda: f"{int(rng.integers(0, 2**63)):016x}")


def relevant(query: str, title: str) -> bool:
    """The simulated user's judgement: every query word is in the title."""
    return set(query.split()) <= set(title.split())


def clicks_of(hits: list[dict], query: str, rng: np.random.Generator) -> list[dict]:
    """A position-biased user: examines hit i (0-based on the page) with probability 1 / (i + 1),
    clicks it when examined with probability 0.9 if relevant, 0.05 otherwise."""
    out = []
    for i, h in enumerate(hits):
        if rng.random() < 1 / (i + 1) and rng.random() < (0.9 if relevant(query, h["title"]) else 0.05):
            out.append(h)
    return out


def query(i: int) -> str:
    a, b = TOPICS[i % len(TOPICS)], TOPICS[(i * 5 + 1) % len(TOPICS)]
    return a if i % 3 == 0 or a == b else f"{a} {b}"


def post_click(c: TestClient, s: dict, h: dict, client: str | None = None) -> None:
    body = {"query_id": s["search_id"], "action_name": "click", "object_id": h["doc_id"], "position": h["rank"]}
    r = c.post("/events", json=body | ({"client_id": client} if client else {}))
    assert r.status_code == 202, r.text


def test_compare_options_are_checked_and_named_by_their_flags(pair, tmp_path) -> None:
    a, b = pair
    ok = ServeOptions.from_mapping({"bundle": str(a), "compare": str(b), "events": str(tmp_path / "ev")})
    assert (ok.compare_mode, ok.compare_salt) == ("interleave", DEFAULT_SALT)
    ab = {"bundle": str(a), "compare": str(b), "events": str(tmp_path / "ev"), "compare_mode": "ab"}
    assert ServeOptions.from_mapping(ab | {"compare_salt": "exp-7"}).compare_salt == "exp-7"
    for raw, message in [
        ({"compare": str(b)}, "--compare needs --events DIR"),
        ({"compare": " ", "events": str(tmp_path)}, "--compare needs a bundle directory"),
        ({"compare_mode": "ab"}, "--compare-mode needs --compare"),
        ({"compare_salt": "x"}, "--compare-salt needs --compare"),
        ({"compare": str(b), "events": str(tmp_path), "compare_mode": "split"}, "--compare-mode must be one of"),
        ({"compare": str(b), "events": str(tmp_path), "compare_salt": "x"}, "it needs --compare-mode ab"),
        ({"compare": str(b), "events": str(tmp_path), "compare_mode": "ab", "compare_salt": ""}, "must not be empty"),
    ]:
        with pytest.raises(ParamError, match=re.escape(message)):
            ServeOptions.from_mapping({"bundle": str(a), **raw})
    for flags, message in [
        (["--compare-mode", "ab"], "--compare-mode needs --compare"),
        (["--compare-salt", "s"], "--compare-salt needs --compare"),
        (["--compare", str(b)], "--compare needs --events DIR"),
        (["--compare", str(b), "--events", str(tmp_path / "ev"), "--compare-mode", "x"], "--compare-mode must be"),
    ]:
        r = CliRunner().invoke(cli, ["serve", str(a), "--port", "1", *flags])
        assert r.exit_code == 2 and message in r.output, (flags, r.output)


def test_interleaving_logs_teams_and_the_better_bundle_wins(pair, tmp_path, seeded_ids) -> None:
    a, b = pair
    log = tmp_path / "events"
    rng = np.random.default_rng(11)
    answers: list[dict] = []
    app = create_app(a, compare=b, events=log, events_flush_seconds=0.2)
    with TestClient(app) as c:
        for i in range(IMPRESSIONS):
            q, offset = query(i), 2 if i % 10 == 9 else 0
            s = c.get("/search", params={"q": q, "k": 4, "offset": offset}).json()
            assert s["arm"] == "interleave" and all(h["team"] in TEAMS for h in s["hits"])
            schemas.SearchResponse.model_validate(s)  # the documented answer, with its optional fields
            assert [h["rank"] for h in s["hits"]] == list(range(offset + 1, offset + 1 + len(s["hits"])))
            answers.append(s)
            for h in clicks_of(s["hits"], q, rng):
                post_click(c, s, h)
        doc = c.get("/openapi.json").json()["components"]["schemas"]
        assert "team" in doc["SearchHit"]["properties"] and "team" not in doc["SearchHit"]["required"]
        assert "arm" in doc["SearchResponse"]["properties"] and "arm" not in doc["SearchResponse"]["required"]
        r = c.get("/search", params={"q": "red", "model": "clsm"})
        assert r.status_code == 422 and "in both compared bundles" in r.json()["error"]
        other = app.state.service.compare.other
        # the log reproduces each page: both rankings of offset + k, the coins from the search id
        for s in answers[:40]:
            n = s["offset"] + s["k"]
            ranked = [[h.doc_id for h in x.search(s["query"], n).hits] for x in (app.state.service.bundle, other)]
            ids, teams = interleave(ranked[0], ranked[1], s["offset"], s["k"], seed_of(s["search_id"]))
            assert ids == [h["doc_id"] for h in s["hits"]] and [TEAMS[t] for t in teams] == [
                h["team"] for h in s["hits"]
            ]
    imps = {r["query_id"]: r for r in read_log(log, "impressions").to_pylist()}
    assert len(imps) == IMPRESSIONS
    for s in answers:
        r = imps[s["search_id"]]
        assert r["arm"] == "interleave" and r["bundle"] == "A+B" and r["offset"] == s["offset"]
        assert r["hit_ids"] == [h["doc_id"] for h in s["hits"]] and r["hit_teams"] == [h["team"] for h in s["hits"]]
    report = read_comparison(log)
    summary = report.interleaving
    assert summary is not None and report.ab is None
    print(summary.to_markdown())
    assert summary.n_impressions == IMPRESSIONS and summary.wins_a > 2 * summary.wins_b
    assert summary.p_value < 0.05 and summary.delta > 0.1
    r = CliRunner().invoke(cli, ["clicks", "compare", str(log), "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["ab"] is None and got["interleave"]["wins_a"] == summary.wins_a
    assert got["interleave"]["p_value"] == pytest.approx(summary.p_value)
    assert got["interleave"]["per_query"]["red"]["wins_a"] == summary.per_query["red"][0]
    text = CliRunner().invoke(cli, ["clicks", "compare", str(log)]).output
    assert "| A vs B | 300 |" in text and "Per query" in text and "| red |" in text


def test_ab_buckets_are_stable_per_client_and_served_by_their_arm(pair, tmp_path, seeded_ids) -> None:
    a, b = pair
    log, salt = tmp_path / "events", "exp-1"
    rng = np.random.default_rng(3)
    layout = BucketLayout(salt=salt)
    clients = [f"user-{i:03d}" for i in range(60)]
    seen: dict[str, set[str]] = {}
    app = create_app(a, compare=b, compare_mode="ab", compare_salt=salt, events=log, events_flush_seconds=0.2)
    with TestClient(app) as c:
        own = {"A": app.state.service.bundle, "B": app.state.service.compare.other}
        for i in range(4 * len(clients)):
            client, q = clients[i % len(clients)], query(i)
            s = c.get("/search", params={"q": q, "k": 4}, headers={"X-Client-Id": client}).json()
            schemas.SearchResponse.model_validate(s)
            seen.setdefault(client, set()).add(s["arm"])
            team = "A" if s["arm"].startswith("control") else "B"
            assert {h["team"] for h in s["hits"]} <= {team}
            assert [h["doc_id"] for h in s["hits"]] == [h.doc_id for h in own[team].search(q, 4).hits]
            for h in clicks_of(s["hits"], q, rng):
                post_click(c, s, h, client)
        anonymous = c.get("/search", params={"q": "red"}).json()  # bucketed by the search id's nonce
        assert anonymous["arm"] == arm_name(layout, int(bucket_of([anonymous["search_id"][:16]], 4, salt)[0]))
    for client, arms in seen.items():
        assert arms == {arm_name(layout, int(bucket_of([client], 4, salt)[0]))}, client  # one bucket per user
    assert {x for arms in seen.values() for x in arms} == {"control-1", "control-2", "experiment-1", "experiment-2"}
    imps = read_log(log, "impressions").to_pylist()
    for r in imps:
        team = "A" if r["arm"].startswith("control") else "B"
        assert r["hit_teams"] == [team] * len(r["hit_ids"]) and r["bundle"] == team
    report = read_comparison(log, salt=salt)
    assert report.interleaving is None and report.ab is not None
    rows = report.ab.rows
    assert set(rows) >= {"control 1", "control 2", "experiment 1", "experiment 2"}
    assert sum(rows[f"{arm} {i}"]["all"].searches for arm in ("control", "experiment") for i in (1, 2)) == len(imps)
    assert rows["control (all)"]["all"].rate > rows["experiment (all)"]["all"].rate  # A's users click more
    r = CliRunner().invoke(cli, ["clicks", "compare", str(log), "--salt", salt])
    assert r.exit_code == 0 and "| control 1 |" in r.output and "experiment vs control" in r.output, r.output
    r = CliRunner().invoke(cli, ["clicks", "compare", str(log)])  # not the service's salt
    assert r.exit_code == 2 and "give --salt as the service's --compare-salt" in r.output


def test_a_bundle_over_other_documents_is_refused(pair, tiny_data, tmp_path) -> None:
    a, _ = pair
    corpus = open_dataset("tiny").corpus()
    part = Corpus(corpus.ids[:40], corpus.titles[:40], corpus.texts[:40])
    other = build_bundle(part, [create_model("bm25", analyzer="english")], tmp_path / "C", dataset="tiny")
    with pytest.raises(ValueError, match=r"other documents than .* \(0 ids only in A|20 ids only in A"):
        create_app(Bundle.load(a), compare=other, events=tmp_path / "ev")
    r = CliRunner().invoke(cli, ["serve", str(a), "--port", "1", "--compare", str(other), "--events", str(tmp_path)])
    assert r.exit_code == 2 and "holds other documents" in r.output and "20 ids only in A" in r.output, r.output


def test_same_ids_with_other_texts_warn_and_records_check_their_teams(pair, tiny_data, tmp_path, capsys) -> None:
    a, _ = pair
    corpus = open_dataset("tiny").corpus()
    retitled = Corpus(corpus.ids, [t.upper() for t in corpus.titles], corpus.texts)
    other = build_bundle(retitled, [create_model("bm25", analyzer="english")], tmp_path / "D", dataset="tiny")
    check_same_documents(Bundle.load(a), Bundle.load(other))
    assert "the same document ids" in capsys.readouterr().err
    with pytest.raises(ValueError, match="2 hit_teams for 1 hit_ids"):
        Impression("s", "q", ["d1"], hit_teams=["A", "B"])
    with pytest.raises(ValueError, match="hit_teams are A, B or None"):
        Impression("s", "q", ["d1"], hit_teams=["C"])
    with pytest.raises(ValueError, match="nonce is 16 hex digits"):
        SearchIds("s" * 32).issue(0, 1, nonce="not-hex")
    sid = SearchIds("s" * 32).issue(0, 1, nonce="00000000000000ff")
    assert sid.startswith("00000000000000ff.") and seed_of(sid) == 255


def test_served_compare_loads_both_bundles_in_every_worker(pair, tmp_path, serve_bundle) -> None:
    """The real ``semsearch serve A --compare B --compare-mode ab --workers 2``: each worker
    serves both arms, a client keeps its bucket whichever worker answers, the log says so."""
    a, b = pair
    log = tmp_path / "events"
    flags = ["--workers", "2", "--compare", str(b), "--compare-mode", "ab", "--events", str(log)]
    flags += ["--events-flush-seconds", "0.2"]
    arms: dict[str, set[str]] = {}
    pids: set[int] = set()
    with serve_bundle(a, *flags) as (base, _):  # announced: both workers loaded
        for i in range(40):
            client = f"c{i % 8}"
            with httpx.Client(timeout=30) as c:  # a new connection each time: either worker
                s = c.get(base + "/search", params={"q": query(i)}, headers={"X-Client-Id": client}).json()
                arms.setdefault(client, set()).add(s["arm"])
                pids.add(c.get(base + "/health").json()["pid"])
    assert len(pids) == 2 and all(len(x) == 1 for x in arms.values())
    imps = read_log(log, "impressions").to_pylist()
    assert len(imps) == 40 and {r["arm"] for r in imps} == {x for v in arms.values() for x in v}
    assert {r["bundle"] for r in imps} <= {"A", "B"}
