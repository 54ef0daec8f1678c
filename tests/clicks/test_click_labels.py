"""Learning from a click log (semsearch.clicks.labels): clicked pairs for the pair models, graded
labels with and without the position-bias correction, and a ranker learnt from a log whose logger
shows the relevant documents low: raw clicks are misled by position, the debiased labels are not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from semsearch.clicks import PBM_EXAMINATION, PositionBasedUser, Rankings, simulate, simulate_sessions
from semsearch.clicks.labels import (
    click_judgments,
    click_pairs,
    corpus_codes,
    examination_propensities,
    identified_share,
)
from semsearch.clicks.log import EventLogWriter
from semsearch.clicks.sessions import Sessions, read_sessions
from semsearch.data import Corpus
from semsearch.evaluation import evaluate
from semsearch.ranking.features import groups
from semsearch.ranking.lambdamart import LambdaMART
from semsearch.training.ranker import row_positions, train_booster

K = 10


def _sessions(docs: list[list[int]], clicks: list[list[int]], query: list[int], n_docs: int = 6) -> Sessions:
    return Sessions(
        docs=np.array(docs, np.int32),
        clicks=np.array(clicks, bool),
        query=np.array(query, np.int32),
        queries=["qa", "qb"],
        doc_ids=[f"d{i}" for i in range(n_docs)],
    )


def _corpus(n: int = 6) -> Corpus:
    ids = [f"d{i}" for i in range(n)]
    return Corpus(ids, [f"title {i}" for i in range(n)], [""] * n)


# -- clicked pairs --------------------------------------------------------------------------------


def test_every_click_is_a_positive_pair() -> None:
    s = _sessions([[0, 1, 2], [3, 4, -1], [0, 2, 1]], [[1, 0, 1], [0, 1, 0], [1, 0, 0]], [0, 1, 0])
    data = click_pairs(s, _corpus())
    assert sorted(data.positives) == sorted([("c0", "d0"), ("c0", "d2"), ("c1", "d4"), ("c0", "d0")])
    assert data.queries == {"c0": "qa", "c1": "qb"}
    assert data.pair_texts()[1][0].startswith("title")


def test_inverse_propensity_weights_repeat_clicks_in_expectation() -> None:
    n = 20_000
    s = Sessions(
        docs=np.tile(np.array([[0, 1]], np.int32), (n, 1)),
        clicks=np.tile(np.array([[True, True]]), (n, 1)),
        query=np.zeros(n, np.int32),
        queries=["q"],
        doc_ids=["d0", "d1"],
    )
    data = click_pairs(s, _corpus(2), propensities=[1.0, 0.4], seed=1)  # rank 2 counts 2.5
    d = np.asarray(data.positives.d)  # type: ignore[attr-defined]  # a PairList
    assert (d == 0).sum() == n
    assert (d == 1).sum() == pytest.approx(2.5 * n, rel=0.02)
    clipped = click_pairs(s, _corpus(2), propensities=[1.0, 0.01], max_weight=3.0)
    assert (np.asarray(clipped.positives.d) == 1).sum() == 3 * n  # type: ignore[attr-defined]


def test_empty_and_foreign_logs_are_refused() -> None:
    no_clicks = _sessions([[0, 1]], [[0, 0]], [0])
    with pytest.raises(ValueError, match="no clicks"):
        click_pairs(no_clicks, _corpus())
    with pytest.raises(ValueError, match="no clicks"):
        click_judgments(no_clicks)
    empty = Sessions(np.zeros((0, 2), np.int32), np.zeros((0, 2), bool), np.zeros(0, np.int32), [], [])
    with pytest.raises(ValueError, match="no impressions"):
        click_pairs(empty, _corpus())
    foreign = _sessions([[0, 7]], [[1, 0]], [0], n_docs=8)
    with pytest.raises(ValueError, match=r"2 of its 8 documents that are not in the collection \('d6', 'd7'\)"):
        corpus_codes(foreign, _corpus().ids)
    with pytest.raises(ValueError, match="not in the collection"):
        click_pairs(foreign, _corpus())


# -- graded labels ----------------------------------------------------------------------------------


def test_judgments_grade_raw_and_weighted_click_rates() -> None:
    # d0 at rank 1 in 4 impressions, clicked twice; d1 at rank 2, clicked once in 4
    s = _sessions([[0, 1]] * 4, [[1, 0], [1, 1], [0, 0], [0, 0]], [0, 0, 0, 0])
    raw = click_judgments(s, debias="none", levels=4)
    assert raw.qrels == {"c0": {"d0": 2, "d1": 1}}  # rates 0.5, 0.25 in 4 bins
    ipw = click_judgments(s, debias="ipw", propensities=[1.0, 0.25], levels=4)
    assert ipw.qrels == {"c0": {"d0": 2, "d1": 3}}  # d1: 0.25 / 0.25 = 1, capped in the top bin
    assert ipw.propensities == [1.0, 0.25]
    lgb = click_judgments(s, debias="lightgbm", levels=4)
    assert lgb.qrels == raw.qrels and lgb.positions == {"c0": {"d0": 1, "d1": 2}} and lgb.unshown == 3
    with pytest.raises(ValueError, match="debias must be one of"):
        click_judgments(s, debias="magic")  # type: ignore[arg-type]


def test_propensities_are_fitted_only_where_the_log_identifies_them() -> None:
    rankings = Rankings(
        query_ids=[f"q{i}" for i in range(40)],
        queries=[f"query {i}" for i in range(40)],
        doc_ids=[f"d{i}" for i in range(400)],
        docs=np.arange(400, dtype=np.int32).reshape(40, K),
        grades=np.random.default_rng(0).integers(0, 5, (40, K)).astype(np.int8),
        max_grade=4,
    )
    user = PositionBasedUser(max_grade=4)
    fixed = simulate_sessions(rankings, user, 20_000, seed=1, exponent=0.0)
    assert identified_share(fixed) == 0.0
    with pytest.raises(ValueError, match="one rank only.*give the propensities"):
        examination_propensities(fixed)
    shuffled = simulate_sessions(rankings, user, 100_000, seed=1, exponent=0.0, shuffle_rate=1.0)
    fitted = examination_propensities(shuffled)
    truth = np.asarray(PBM_EXAMINATION) / PBM_EXAMINATION[0]
    assert np.abs(fitted - truth).max() < 0.05
    given = examination_propensities(fixed, PBM_EXAMINATION)
    assert np.allclose(given, truth)
    with pytest.raises(ValueError, match="one value > 0 per rank"):
        examination_propensities(fixed, [0.5, 0.4])


def test_a_log_read_back_from_parquet_gives_the_same_pairs(tmp_path: Path) -> None:
    rankings = Rankings(
        query_ids=["q0", "q1"],
        queries=["red cat", "blue dog"],
        doc_ids=[f"d{i}" for i in range(6)],
        docs=np.array([[0, 1, 2], [3, 4, 5]], np.int32),
        grades=np.array([[3, 0, 1], [0, 3, 0]], np.int8),
        max_grade=3,
    )
    with EventLogWriter(tmp_path / "log") as w:
        direct = list(simulate(rankings, PositionBasedUser(max_grade=3), 500, seed=2, writer=w, start_ms=0))
    read = click_pairs(read_sessions(tmp_path / "log", top_n=3), _corpus())
    expected = sorted(
        (rankings.queries[c.query[r]], rankings.doc_ids[c.docs[r, j]])
        for c in direct
        for r, j in zip(*np.nonzero(c.clicks))
    )
    assert expected and sorted((read.queries[q], d) for q, d in read.positives) == expected


# -- a ranker learnt from a log that shows the relevant documents low ---------------------------------


def _world(seed: int, n_queries: int = 300) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """True grades 0-3 of K candidates per query, their features (a noisy relevance signal, and a
    copy of the logger's score) and the logger's score, which prefers the irrelevant documents."""
    rng = np.random.default_rng(seed)
    grades = rng.integers(0, 4, size=(n_queries, K))
    relevance = grades + rng.normal(0, 0.7, size=grades.shape)
    logger = -grades + rng.normal(0, 0.5, size=grades.shape)
    X = np.stack([relevance, logger + rng.normal(0, 0.1, size=grades.shape)], -1)
    return grades, X, logger


def _learnt_ndcg(seed: int, debias: str, impressions: int = 30_000) -> float:
    """Test nDCG@10 (true grades) of a LambdaMART learnt from a simulated position-based log of
    the adversarial logger over the first two thirds of the queries."""
    n_queries = 300
    grades, X, logger = _world(seed, n_queries)
    order = np.argsort(-logger, axis=1)
    doc_ids = [f"d{q}_{j}" for q in range(n_queries) for j in range(K)]
    docs = (np.arange(n_queries)[:, None] * K + order).astype(np.int32)
    shown_grades = np.take_along_axis(grades, order, 1).astype(np.int8)
    train_q, test_q = np.arange(200), np.arange(200, n_queries)
    rankings = Rankings(
        [f"q{i}" for i in train_q], [str(i) for i in train_q], doc_ids, docs[train_q], shown_grades[train_q], 3
    )
    user = PositionBasedUser(max_grade=3)
    log = simulate_sessions(rankings, user, impressions, seed=seed, exponent=0.0)
    prop = user.examination_probabilities(K) if debias == "ipw" else None
    judged = click_judgments(log, debias=debias, propensities=prop)  # type: ignore[arg-type]
    cands = {q: [f"d{t}_{c}" for c in range(K)] for q, t in judged.queries.items()}
    g = groups(cands, np.concatenate([X[int(judged.queries[q])] for q in cands]), judged.qrels)
    if debias == "lightgbm":
        g.position = row_positions(g, judged.positions, judged.unshown)
    booster = LambdaMART(["relevance", "logger"], num_boost_round=100, min_data_in_leaf=20, num_leaves=7)
    train_booster(booster, g)
    test = groups({f"t{q}": [f"d{q}_{c}" for c in range(K)] for q in test_q}, np.concatenate(X[test_q]))
    qrels = {f"t{q}": {f"d{q}_{c}": int(grades[q, c]) for c in range(K)} for q in test_q}
    return evaluate(test.to_run(booster.predict(test)), qrels, ["ndcg@10"]).mean["ndcg@10"]


@pytest.mark.parametrize("seed", [0, 1])
def test_debiased_clicks_beat_raw_clicks_when_the_logger_hides_the_relevant(seed: int) -> None:
    raw = _learnt_ndcg(seed, "none")
    ipw = _learnt_ndcg(seed, "ipw")
    lgb = _learnt_ndcg(seed, "lightgbm")
    # raw click-through rates reward the top ranks, where this logger puts the irrelevant: the
    # ranker learns the logger's score; both corrections learn relevance
    assert ipw > raw + 0.1, (raw, ipw)
    assert lgb > raw + 0.05, (raw, lgb)
    assert ipw > 0.9
