"""The client trust policy (clicks.trust) and the labels it guards (clicks.labels.click_judgments):
on a tiny generated collection, honest position-based users with client ids and bought clicks
appended through the real EventLogWriter."""

from __future__ import annotations

import numpy as np
import pytest

from semsearch.clicks import EventLogWriter, PositionBasedUser, Rankings, read_sessions, simulate
from semsearch.clicks.labels import click_judgments
from semsearch.clicks.log import event_row, impression_row
from semsearch.clicks.trust import TrustPolicy, assess, attack_tables, read_activity

N_QUERIES, N_DOCS, K = 40, 400, 10


def _rankings() -> Rankings:
    """40 queries, each showing 10 of 400 documents; document d0 is shown, irrelevant, at rank 9
    of the first 20 queries (the attack's target)."""
    rng = np.random.default_rng(0)
    docs = np.stack([rng.choice(np.arange(1, N_DOCS), K, replace=False) for _ in range(N_QUERIES)]).astype(np.int32)
    grades = rng.integers(0, 5, (N_QUERIES, K)).astype(np.int8)
    docs[:20, 8], grades[:20, 8] = 0, 0
    return Rankings(
        [f"q{i}" for i in range(N_QUERIES)],
        [f"query {i}" for i in range(N_QUERIES)],
        [f"d{i}" for i in range(N_DOCS)],
        docs,
        grades,
        max_grade=4,
    )


def _honest(path, rankings: Rankings, impressions: int = 20_000, clients: int = 400) -> None:
    """Honest users: 20,000 impressions a second apart from 400 clients (about 3 searches a minute each)."""
    with EventLogWriter(path) as w:
        for _ in simulate(rankings, PositionBasedUser(4), impressions, seed=1, writer=w, n_clients=clients, start_ms=0):
            pass
    _respace(path)


def _respace(path) -> None:
    """The simulator stamps impressions 1 ms apart: spread them a second apart (human time)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for kind in ("impressions", "events"):
        for p in sorted((path / kind).glob("part-*.parquet")):
            t = pq.read_table(p)
            ms = pc.cast(t.column("timestamp"), pa.int64())
            i = t.schema.get_field_index("timestamp")
            t = t.set_column(i, t.schema.field(i), pc.cast(pc.multiply(ms, 1000), pa.timestamp("ms", tz="UTC")))
            pq.write_table(t, p)


def _attack(path, rankings: Rankings) -> None:
    shown = {rankings.queries[q]: [rankings.doc_ids[d] for d in rankings.docs[q]] for q in range(20)}
    imp, ev = attack_tables(shown, "d0", n_clients=50, searches=200, start_ms=0)
    with EventLogWriter(path) as w:
        w.append_table(imp)
        w.append_table(ev)


def _labels(path, guard: bool):
    sessions = read_sessions(path)
    clients = read_activity(path, sessions) if guard else None
    return click_judgments(sessions, debias="none", clients=clients)


def _grades(judged, doc: str = "d0") -> dict[str, int]:
    return {judged.queries[q]: g[doc] for q, g in judged.qrels.items() if doc in g}


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    rankings = _rankings()
    honest = tmp_path_factory.mktemp("honest")
    _honest(honest, rankings)
    attacked = tmp_path_factory.mktemp("attacked")
    _honest(attacked, rankings)
    _attack(attacked, rankings)
    return honest, attacked


def test_the_attacked_pairs_keep_their_honest_labels(logs):
    honest, attacked = logs
    before = _grades(_labels(honest, guard=True))
    assert before and max(before.values()) <= 1  # an irrelevant document, clicked by epsilon alone
    guarded = _labels(attacked, guard=True)
    assert _grades(guarded) == before
    t = guarded.trust
    assert t is not None and t.set_aside_clients == 50 and t.set_aside_impressions == 50 * 200
    assert t.set_aside_clicks == 50 * 200 and t.clients == 450
    assert t.reasons["one_document"] == 50 and t.reasons["never_skips"] == 50 and t.reasons["rate"] == 0
    # the whole labels, not only the target's, are the honest log's
    assert guarded.qrels == _labels(honest, guard=True).qrels
    # without the guard the attack lifts the irrelevant document on all but the head queries
    unguarded = _grades(_labels(attacked, guard=False))
    assert sum(unguarded[q] >= before[q] + 2 for q in before) >= 15


def test_honest_clients_are_not_set_aside(logs):
    honest, _ = logs
    judged = _labels(honest, guard=True)
    assert judged.trust is not None and judged.trust.clients == 400
    assert judged.trust.set_aside_clients == 0 and judged.trust.anonymous_impressions == 0


def _log_of(tmp_path, searches):
    """A log of (client, time ms, query, shown docs, clicked positions) rows."""
    with EventLogWriter(tmp_path) as w:
        for i, (client, ms, query, docs, clicks) in enumerate(searches):
            w.append_row("impressions", impression_row(f"s{i}", query, docs, client_id=client, timestamp=ms))
            for pos in clicks:
                w.append_row("events", event_row(f"s{i}", docs[pos - 1], pos, client_id=client, timestamp=ms + 2_000))
    return tmp_path


def _verdict(path, policy=None):
    sessions = read_sessions(path)
    activity = read_activity(path, sessions)
    a = assess(sessions, activity, policy or TrustPolicy())
    return {c: {r for r, broke in a.broke.items() if broke[i]} for i, c in enumerate(activity.client_ids)}


def test_each_rule(tmp_path):
    rng = np.random.default_rng(0)
    docs = [f"d{i}" for i in range(10)]
    rows = []
    # a person: 60 searches, gaps of 10-120 s, clicks on most, the document following the query
    t = 0
    for i in range(60):
        t += int(rng.integers(10_000, 120_000))
        q = int(rng.integers(0, 30))
        rows.append(("person", t, f"q{q}", [f"d{q}-{j}" for j in range(10)], [1] if i % 3 else []))
    rows += [("fast", 1000 * i, f"q{i}", docs, []) for i in range(40)]  # 40 searches in 40 s
    rows += [("clicker", 60_000 * i + int(rng.integers(0, 30_000)), f"q{i}", [f"x{i}-{j}" for j in range(10)], [2])
             for i in range(60)]  # fmt: skip
    rows += [("metronome", 30_000 * i, f"q{i % 7}", [f"y{i}-{j}" for j in range(10)], []) for i in range(60)]
    rows += [("pusher", 100_000 * i, f"q{i}", ["z", *docs[1:]], [1]) for i in range(6)]
    verdict = _verdict(_log_of(tmp_path, rows))
    assert verdict == {
        "person": set(),
        "fast": {"rate"},
        "clicker": {"never_skips"},
        "metronome": {"fixed_intervals"},
        "pusher": {"one_document"},
    }
    loose = TrustPolicy(max_searches_per_minute=60, min_document_queries=7)
    assert _verdict(tmp_path, loose)["fast"] == set() and _verdict(tmp_path, loose)["pusher"] == set()


def test_a_client_counts_once_per_pair_and_its_weight_is_bounded(tmp_path):
    docs = [f"d{i}" for i in range(10)]
    rows = [("fan", 100_000 * i, "q", docs, [3]) for i in range(30)]  # one client, 30 searches, always d2
    rows += [(f"u{j}", 5_000 + 100_000 * j, "q", docs, [1]) for j in range(3)]  # three clients, d0 once each
    sessions = read_sessions(_log_of(tmp_path, rows))
    raw = click_judgments(sessions, debias="none", levels=5)
    assert raw.qrels["c0"]["d2"] == 4 and raw.qrels["c0"]["d0"] == 0  # 30 of 33 impressions
    guarded = click_judgments(sessions, debias="none", levels=5, clients=read_activity(tmp_path, sessions))
    assert guarded.qrels["c0"]["d2"] == 1 and guarded.qrels["c0"]["d0"] == 3  # 1 of 4 clients, 3 of 4
    assert guarded.trust is not None and guarded.trust.set_aside_clients == 0  # 30 searches: too few to judge
    # bounded weight: a client over many queries weighs as many as max_client_queries
    many = [("wide", 1_000_000 * i, f"q{i}", docs, [1]) for i in range(40)]
    many += [("narrow", 500_000 + 1_000_000 * i, f"q{i}", docs, []) for i in range(40)]
    path = _log_of(tmp_path / "b", many)
    s = read_sessions(path)
    policy = TrustPolicy(max_client_queries=10, min_document_queries=50)
    j = click_judgments(s, debias="none", clients=read_activity(path, s), policy=policy)
    assert j.trust is not None and j.trust.bounded_clients == 2
    # both weigh 10/40: the click rate of d0 is still their mean, 1/2
    assert {g["d0"] for g in j.qrels.values()} == {2}


def test_a_log_without_client_ids_labels_as_before(tmp_path):
    rankings = _rankings()
    with EventLogWriter(tmp_path) as w:
        for _ in simulate(rankings, PositionBasedUser(4), 5_000, seed=2, writer=w, start_ms=0):
            pass
    sessions = read_sessions(tmp_path)
    plain = click_judgments(sessions, debias="none")
    guarded = click_judgments(sessions, debias="none", clients=read_activity(tmp_path, sessions))
    assert plain.trust is None and guarded.qrels == plain.qrels
    assert guarded.trust is not None and guarded.trust.anonymous_impressions == 5_000
    assert guarded.trust.clients == 0 and guarded.trust.set_aside_clients == 0


def test_policy_checks():
    with pytest.raises(ValueError, match="max_searches_per_minute"):
        TrustPolicy(max_searches_per_minute=0)
    with pytest.raises(ValueError, match="max_document_share"):
        TrustPolicy(max_document_share=1.5)
    with pytest.raises(ValueError, match="min_interval_spread"):
        TrustPolicy(min_interval_spread=-1)
    with pytest.raises(ValueError, match="not shown"):
        attack_tables({"q": ["a", "b"]}, "c")
