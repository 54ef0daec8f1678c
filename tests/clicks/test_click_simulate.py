"""Simulated users (semsearch.clicks.simulate): the query stream's Zipf frequencies, each click
model's click rates against its formula, rankings from a run and qrels, and the simulation
written through the event log and read back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from semsearch.clicks import (
    PBM_EXAMINATION,
    CascadeProfile,
    CascadeUser,
    DBNUser,
    PositionBasedUser,
    QueryStream,
    Rankings,
    graded_attraction,
    simulate,
    simulate_sessions,
)
from semsearch.clicks.log import EventLogWriter
from semsearch.clicks.sessions import read_log, read_sessions

N = 200_000


def _rates(user: object, grades: np.ndarray, seed: int = 0) -> np.ndarray:
    """Empirical click rate per rank over N impressions of one list of grades."""
    g = np.broadcast_to(grades, (N, len(grades)))
    clicks = user.clicks(g, np.ones(g.shape, bool), np.random.default_rng(seed))  # type: ignore[attr-defined]
    return clicks.mean(axis=0)


def _rankings(n_queries: int = 50, k: int = 10, n_docs: int = 2000, seed: int = 0) -> Rankings:
    rng = np.random.default_rng(seed)
    docs = np.stack([rng.choice(n_docs, k, replace=False) for _ in range(n_queries)]).astype(np.int32)
    return Rankings(
        query_ids=[f"q{i}" for i in range(n_queries)],
        queries=[f"query {i}" for i in range(n_queries)],
        doc_ids=[f"d{i}" for i in range(n_docs)],
        docs=docs,
        grades=rng.integers(0, 5, (n_queries, k)).astype(np.int8),
        max_grade=4,
    )


def test_query_stream_is_zipf_like_and_seeded() -> None:
    stream = QueryStream(20, exponent=1.0, seed=3)
    weights = 1.0 / np.arange(1, 21)
    assert np.allclose(stream.probabilities[stream.order], weights / weights.sum())
    draws = stream.sample(N, np.random.default_rng(0))
    freq = np.bincount(draws, minlength=20) / N
    assert np.abs(freq - stream.probabilities).max() < 0.005
    assert not np.array_equal(stream.order, np.arange(20))  # the head is a shuffle, not the first queries
    assert np.array_equal(QueryStream(20, 1.0, seed=3).order, stream.order)
    flat = QueryStream(20, exponent=0.0).probabilities
    assert np.allclose(flat, 1 / 20)
    steep = QueryStream(20, exponent=2.0, seed=3).probabilities
    assert steep.max() > stream.probabilities.max()


def test_graded_attraction_formula() -> None:
    # ε + (1 − ε)(2^g − 1)/(2^gmax − 1), ε = 0.1, gmax = 4
    assert np.allclose(graded_attraction(4), [0.1, 0.1 + 0.9 / 15, 0.1 + 0.9 * 3 / 15, 0.1 + 0.9 * 7 / 15, 1.0])
    assert np.allclose(graded_attraction(1, epsilon=0.0), [0.0, 1.0])


@pytest.mark.parametrize("eta", [1.0, 2.0])
def test_position_based_user_clicks_at_rho_to_the_eta_times_attraction(eta: float) -> None:
    grades = np.array([4, 0, 2, 4, 3, 1, 4, 4, 0, 2])
    rates = _rates(PositionBasedUser(max_grade=4, eta=eta), grades)
    expected = np.asarray(PBM_EXAMINATION) ** eta * graded_attraction(4)[grades]
    assert np.abs(rates - expected).max() < 0.005
    with pytest.raises(ValueError, match="10 ranks, not 11"):
        PositionBasedUser(4).clicks(np.zeros((2, 11), np.int8), np.ones((2, 11), bool), np.random.default_rng())


def test_cascade_profiles_follow_their_tables() -> None:
    top = np.full(10, 4)
    # perfect: clicks every grade-4 result and never stops; never clicks grade 0
    assert _rates(CascadeUser(4, "perfect"), top).min() == 1.0
    assert _rates(CascadeUser(4, "perfect"), np.zeros(10, int)).max() == 0.0
    # navigational on grade 4: click 0.95, stop after a click 0.9 → rank r clicked 0.95 (1 − 0.95·0.9)^(r−1)
    rates = _rates(CascadeUser(4, "navigational"), top)
    expected = 0.95 * (1 - 0.95 * 0.9) ** np.arange(10)
    assert np.abs(rates - expected).max() < 0.005
    # informational on grades 2 then 0...: click 0.7, stop 0.3; then click 0.4, stop 0.1
    rates = _rates(CascadeUser(4, "informational"), np.array([2, 0, 0]))
    go_on = 1 - 0.7 * 0.3
    assert np.allclose(rates, [0.7, go_on * 0.4, go_on * (1 - 0.4 * 0.1) * 0.4], atol=0.005)
    # binary grades read the table's first and last entries
    click, stop = CascadeUser(1, "navigational").tables()
    assert click.tolist() == [0.05, 0.95] and stop.tolist() == [0.2, 0.9]
    # Craswell's cascade: one click at most
    one = CascadeUser(4, CascadeProfile(click=(0.1, 0.3, 0.5, 0.7, 0.9), stop=(1.0,) * 5))
    g = np.random.default_rng(1).integers(0, 5, (N, 10))
    clicks = one.clicks(g, np.ones(g.shape, bool), np.random.default_rng(2))
    assert clicks.sum(axis=1).max() == 1


def test_dbn_user_continues_with_gamma_unless_satisfied() -> None:
    gamma = 0.8
    user = DBNUser(max_grade=4, gamma=gamma)
    a, s = user.tables()
    assert np.allclose(s, (2.0 ** np.arange(5) - 1) / 16)  # ERR's satisfaction
    grades = np.array([4, 2, 0, 3])
    examined, expected = 1.0, []
    for g in grades:
        expected.append(examined * a[g])
        examined *= gamma * (1 - a[g] * s[g])
    assert np.abs(_rates(user, grades) - np.array(expected)).max() < 0.005


def test_rankings_from_run_count_unjudged_as_grade_zero() -> None:
    run = {"q1": ["a", "b", "c"], "q2": ["c", "x"]}
    qrels = {"q1": {"a": 2, "c": 1}, "q2": {"x": -1}, "q3": {"z": 3}}
    r = Rankings.from_run(run, qrels, {"q1": "drill", "q2": "saw", "q3": "nail"}, k=3)
    assert r.queries == ["drill", "saw"] and r.max_grade == 3
    assert [[r.doc_ids[d] if d >= 0 else None for d in row] for row in r.docs] == [["a", "b", "c"], ["c", "x", None]]
    assert r.grades.tolist() == [[2, 0, 1], [0, 0, 0]]  # b unjudged, x negative: both 0
    with pytest.raises(ValueError, match="no text"):
        Rankings.from_run(run, qrels, {"q1": "drill"})
    with pytest.raises(ValueError, match="after an empty slot"):
        Rankings(["q"], ["t"], ["a"], np.array([[-1, 0]], np.int32), np.zeros((1, 2), np.int8), 1)


def test_simulation_is_seeded_chunked_and_shuffles_within_the_list() -> None:
    r = _rankings()
    user = PositionBasedUser(4)
    one = simulate_sessions(r, user, 5000, seed=7, chunk_size=1234)
    again = simulate_sessions(r, user, 5000, seed=7, chunk_size=1234)
    other = simulate_sessions(r, user, 5000, seed=8, chunk_size=1234)
    assert np.array_equal(one.clicks, again.clicks) and np.array_equal(one.query, again.query)
    assert not np.array_equal(one.clicks, other.clicks)
    assert [len(c) for c in simulate(r, user, 5000, chunk_size=1234)] == [1234] * 4 + [64]
    assert np.array_equal(one.docs, r.docs[one.query])  # no shuffling asked: the ranker's order
    mixed = simulate_sessions(r, user, 5000, seed=7, shuffle_rate=1.0)
    same_set = np.sort(mixed.docs, axis=1) == np.sort(r.docs[mixed.query], axis=1)
    assert same_set.all() and (mixed.docs != r.docs[mixed.query]).any(axis=1).mean() > 0.99
    short = Rankings(["q"], ["t"], ["a", "b"], np.array([[0, 1, -1]], np.int32), np.array([[4, 4, 0]], np.int8), 4)
    s = simulate_sessions(short, CascadeUser(4, "perfect"), 100, shuffle_rate=1.0)
    assert (s.docs[:, 2] == -1).all() and not s.clicks[:, 2].any() and s.clicks[:, :2].all()


def test_simulation_through_the_event_log_reads_back_as_the_same_sessions(tmp_path: Path) -> None:
    r = _rankings()
    with EventLogWriter(tmp_path, flush_rows=3000) as w:
        chunks = list(
            simulate(r, DBNUser(4), 10_000, seed=1, chunk_size=2500, writer=w, n_clients=7, start_ms=1_700_000_000_000)
        )
    logged = read_sessions(tmp_path)
    assert len(logged) == 10_000
    assert logged.search_ids is not None and logged.search_ids[:3].to_pylist() == ["sim1-0", "sim1-1", "sim1-2"]
    direct_docs = np.concatenate([np.asarray(r.doc_ids)[c.docs] for c in chunks])
    assert np.array_equal(np.asarray(logged.doc_ids)[logged.docs], direct_docs)
    assert np.array_equal(logged.clicks, np.concatenate([c.clicks for c in chunks]))
    direct_queries = np.concatenate([np.asarray(r.queries)[c.query] for c in chunks])
    assert np.array_equal(np.asarray(logged.queries)[logged.query], direct_queries)
    events = read_log(tmp_path, "events")
    assert events.num_rows == int(logged.clicks.sum())
    assert set(events.column("action_name").to_pylist()) == {"click"}
    imp = read_log(tmp_path, "impressions")
    assert set(imp.column("client_id").to_pylist()) <= {f"u{j}" for j in range(7)}
    assert set(imp.column("bundle").to_pylist()) == {"simulated"} and set(imp.column("k").to_pylist()) == {10}


def test_benchmark_script_runs_small(tmp_path: Path) -> None:
    """benchmarks/click_simulation.py end to end at 20,000 impressions (its JSON and summary rows)."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "click_simulation.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "click_simulation.py", "--impressions", "20000", "--queries", "100", "--chunk", "5000"]
    run = subprocess.run([*cmd, "--out", str(out)], cwd=root / "benchmarks", env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["impressions"] == 20_000 and result["log_per_s"] > 0
    assert set(result["fits"]) == {"PBM", "PBM unanchored", "UBM", "cascade", "DBN"}
    assert len(result["fits"]["PBM"]["examination_error"]) == 10
    assert result["recovery"]["sessions"] == 20_000 and len(result["recovery"]["error"]) == 10
    assert [row["met"] for row in result["summary"]][1] is None  # recovery is only judged at 1M sessions
