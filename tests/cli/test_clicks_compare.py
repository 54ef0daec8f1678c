"""``semsearch clicks compare LOG_DIR`` on logs written record by record: the interleaving counts
(wins, ties, Δ_AB, sign test, per query) credit each click to the team of the clicked hit, pages
past the first included; the A/B table (Table 7) buckets users as the service did; clear errors
for a log without compare impressions, an old log (no ``hit_teams`` column, still readable), a
missing folder and another salt."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.cli import clicks as clicks_cli
from semsearch.clicks.abtest import DEFAULT_SALT, BucketLayout, bucket_of
from semsearch.clicks.interleaving import sign_test_p
from semsearch.clicks.log import IMPRESSION_SCHEMA, Event, EventLogWriter, Impression, write_segment
from semsearch.clicks.sessions import read_log
from semsearch.serving.compare import arm_name

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def sid(i: int) -> str:
    return f"{i:016x}.1700000000.0.3.{'x' * 22}"


def write_interleaved(path: Path) -> Path:
    """Six interleaved impressions of two queries; wins: drill A, A, B (tie, no click); lamp A, tie."""
    with EventLogWriter(path) as w:
        for i, (q, teams, clicked) in enumerate(
            [
                ("drill", "ABA", [1]),  # A
                ("drill", "BAB", [2, 2]),  # A (one click, repeated)
                ("drill", "ABB", [2, 3]),  # B: two clicks on B's hits
                ("drill", "AAB", []),  # no click: no preference
                ("lamp", "BAA", [3]),  # A
                ("lamp", "ABA", [1, 2]),  # tie: one each
            ]
        ):
            hits = [f"{q}-{j}" for j in range(3)]
            w.append(Impression(sid(i), q, hits, arm="interleave", k=3, hit_teams=list(teams)))
            for p in clicked:
                w.append(Event(sid(i), hits[p - 1], p))
        w.append(Impression(sid(9), "drill", ["d-x"], k=1))  # not a comparison: left out
        w.append(Event(sid(0), "wrong-doc", 2))  # not the document shown there: not counted
        w.append(
            Impression(
                f"{10:016x}.1700000000.2.2.{'x' * 22}",
                "lamp",
                ["p3", "p4"],
                offset=2,
                k=2,
                arm="interleave",
                hit_teams=["B", "A"],
            )
        )
        w.append(Event(f"{10:016x}.1700000000.2.2.{'x' * 22}", "p3", 3))  # page 2: position 3 is hit 1, B's
    return path


def test_interleaving_counts_and_json(tmp_path) -> None:
    log = write_interleaved(tmp_path / "log")
    r = invoke("clicks", "compare", str(log), "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    inter = got["interleave"]
    assert got["ab"] is None and got["impressions"] == 8
    assert (inter["n_impressions"], inter["n_clicked"]) == (7, 6)
    assert (inter["wins_a"], inter["wins_b"], inter["ties"]) == (3, 2, 1)
    assert inter["delta"] == pytest.approx((3 + 0.5) / 6 - 0.5)
    assert inter["p_value"] == pytest.approx(sign_test_p(3, 2))
    assert inter["per_query"] == {
        "drill": {"wins_a": 2, "wins_b": 1, "ties": 0},
        "lamp": {"wins_a": 1, "wins_b": 1, "ties": 1},
    }
    text = invoke("clicks", "compare", str(log), "--queries", "1").output
    assert "| A vs B | 7 | 6 | 3 | 2 | 1 | +0.0833 |" in text
    assert "| drill | 3 | 2 | 1 | 0 |" in text and "| lamp |" not in text and "1 more not shown" in text


def test_ab_table_buckets_users_as_the_service(tmp_path) -> None:
    salt = "s-2"
    layout = BucketLayout(salt=salt)
    users = [f"u{i}" for i in range(40)]
    with EventLogWriter(tmp_path / "log") as w:
        for i in range(200):
            user = users[i % len(users)]
            bucket = int(bucket_of([user], 4, salt)[0])
            arm = arm_name(layout, bucket)
            team = "A" if bucket in layout.control else "B"
            w.append(Impression(sid(i), f"q{i % 7}", ["a", "b"], client_id=user, arm=arm, k=2, hit_teams=[team] * 2))
            if team == "A" or i % 4 == 0:  # A's users click every search, B's one in four
                w.append(Event(sid(i), "a", 1, client_id=user))
        anon = sid(999)
        arm = arm_name(layout, int(bucket_of([anon[:16]], 4, salt)[0]))  # no client id: the search id's nonce
        w.append(Impression(anon, "q0", ["a"], arm=arm, k=1, hit_teams=["A" if arm.startswith("control") else "B"]))
    got = json.loads(invoke("clicks", "compare", str(tmp_path / "log"), "--json", "--salt", salt).output)
    rows = got["ab"]["rows"]
    assert got["interleave"] is None and got["ab"]["layout"]["salt"] == salt
    assert rows["control (all)"]["all"]["rate"] == 1.0 and rows["experiment (all)"]["all"]["rate"] < 0.5
    assert sum(rows[f"{a} {i}"]["all"]["searches"] for a in ("control", "experiment") for i in (1, 2)) == 201
    comparison = got["ab"]["comparisons"][0]
    assert comparison["label"] == "experiment vs control" and comparison["p"] < 0.05
    text = invoke("clicks", "compare", str(tmp_path / "log"), "--salt", salt).output
    assert "## A/B buckets" in text and "| control 1 |" in text and "Wilson score" in text
    r = invoke("clicks", "compare", str(tmp_path / "log"))
    assert r.exit_code == 2 and f"not in the bucket salt {DEFAULT_SALT!r} gives their user" in r.output


def test_logs_without_a_comparison_are_refused_clearly(tmp_path) -> None:
    old = tmp_path / "old"  # written before hit_teams: still reads, with nulls
    write_segment(
        old,
        "impressions",
        pa.Table.from_pylist(
            [{"query_id": sid(0), "timestamp": 0, "user_query": "drill", "k": 1, "offset": 0, "hit_ids": ["a"]}],
            IMPRESSION_SCHEMA,
        ),
    )
    assert read_log(old, "impressions").column("hit_teams").to_pylist() == [None]
    r = invoke("clicks", "compare", str(old))
    assert r.exit_code == 2 and "none of its 1 impressions is of a comparison" in r.output
    assert "serve A --compare B --events DIR" in r.output
    r = invoke("clicks", "compare", str(tmp_path / "nowhere"))
    assert r.exit_code == 2 and "no such event log directory" in r.output
    (tmp_path / "empty").mkdir()
    r = invoke("clicks", "compare", str(tmp_path / "empty"))
    assert r.exit_code == 2 and "no impression segments" in r.output


def test_the_commands_salt_is_the_evaluation_default() -> None:
    assert clicks_cli.DEFAULT_SALT == DEFAULT_SALT
    r = invoke("clicks", "--help")
    assert r.exit_code == 0 and "compare" in r.output
