"""Metrics vs pytrec_eval (linear gain, run query set, no score ties), plus the project's own rules."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import mannwhitneyu

from semsearch.evaluation import auc, evaluate

CUTS = (1, 3, 5, 10, 25)
# ours -> pytrec_eval measure (output key uses "_" for ".")
CUT_PAIRS = {
    "ndcg@{k}": "ndcg_cut.{k}",
    "recall@{k}": "recall.{k}",
    "p@{k}": "P.{k}",
    "map@{k}": "map_cut.{k}",
    "success@{k}": "success.{k}",
}
UNCUT_PAIRS = {"ndcg": "ndcg", "mrr": "recip_rank", "map": "map"}


def random_case(seed: int) -> tuple[dict, dict]:
    """Random run/qrels with distinct scores, labels 0..3, unjudged and unretrieved docs,
    queries only in the run, only in the qrels, and with no relevant document.

    No negative labels: they make pytrec_eval-terrier 0.5.x hang or misbehave on repeated
    evaluation in one process (see test_negative_labels for our handling)."""
    rng = np.random.default_rng(seed)
    run, qrels = {}, {}
    for qi in range(int(rng.integers(1, 12))):
        q = f"q{qi}"
        pool = [f"d{j}" for j in range(int(rng.integers(1, 40)))]
        n_ret = int(rng.integers(1, len(pool) + 1))
        ret = rng.choice(pool, n_ret, replace=False)
        scores = rng.permutation(n_ret * 3)[:n_ret] / 7.0 - 1.0  # distinct, some negative
        if rng.random() < 0.9:
            run[q] = {str(d): float(s) for d, s in zip(ret, scores)}
        if rng.random() < 0.9:
            judged = rng.choice(pool, int(rng.integers(1, len(pool) + 1)), replace=False)
            qrels[q] = {str(d): int(rng.integers(0, 4)) for d in judged}
    run.setdefault("q0", {"d0": 1.0})
    qrels.setdefault("q0", {"d0": 1})
    run["only_in_run"] = {"d0": 1.0}
    qrels["only_in_qrels"] = {"d0": 2}
    return run, qrels


def trec(run: dict, qrels: dict, measures: set[str], level: int = 1) -> dict:
    return pytrec_eval.RelevanceEvaluator(qrels, measures, relevance_level=level).evaluate(run)


def truncate(run: dict, k: int) -> dict:
    return {q: dict(sorted(d.items(), key=lambda x: -x[1])[:k]) for q, d in run.items()}


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), level=st.sampled_from([1, 2]))
def test_every_metric_matches_pytrec_eval(seed: int, level: int) -> None:
    run, qrels = random_case(seed)
    ours_names = [o.format(k=k) for o in CUT_PAIRS for k in CUTS] + list(UNCUT_PAIRS)
    measures = {t.format(k=k) for t in CUT_PAIRS.values() for k in CUTS} | set(UNCUT_PAIRS.values())
    ref = trec(run, qrels, measures, level)
    res = evaluate(run, qrels, ours_names, gain="linear", queries="run", rel_threshold=level)

    assert set(ref) == run.keys() & qrels.keys()
    assert res.n_queries == len(ref)
    pairs = {o.format(k=k): t.format(k=k).replace(".", "_") for o, t in CUT_PAIRS.items() for k in CUTS}
    pairs |= UNCUT_PAIRS
    for ours, theirs in pairs.items():
        for q in ref:
            assert res.per_query[ours][q] == pytest.approx(ref[q][theirs], abs=1e-12), (ours, q)
        assert res.mean[ours] == pytest.approx(np.mean([ref[q][theirs] for q in ref]), abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.sampled_from(CUTS))
def test_mrr_at_k_is_recip_rank_of_the_top_k(seed: int, k: int) -> None:
    run, qrels = random_case(seed)
    ref = trec(truncate(run, k), qrels, {"recip_rank"})
    res = evaluate(run, qrels, [f"mrr@{k}"], queries="run")
    for q in ref:
        assert res.per_query[f"mrr@{k}"][q] == pytest.approx(ref[q]["recip_rank"], abs=1e-12)


def test_ties_broken_by_doc_id_ascending_unlike_trec_eval() -> None:
    run = {"q": {"b": 1.0, "a": 1.0, "c": 0.5}}
    qrels = {"q": {"a": 1}}
    assert evaluate(run, qrels, ["mrr"]).mean["mrr"] == 1.0  # order a, b, c
    assert trec(run, qrels, {"recip_rank"})["q"]["recip_rank"] == 0.5  # trec_eval: b, a, c
    qrels_b = {"q": {"b": 1}}
    assert evaluate(run, qrels_b, ["mrr"]).mean["mrr"] == 0.5
    # ties among many documents, relevant ones interleaved by id
    run = {"q": {f"d{i:02d}": float(i // 4) for i in range(12)}}  # groups of 4 tied scores
    qrels = {"q": {"d05": 1, "d10": 2}}
    # order: d08 d09 d10 d11 | d04 d05 d06 d07 | d00 ... -> d10 at rank 3, d05 at rank 6
    res = evaluate(run, qrels, ["mrr", "map", "ndcg"], gain="linear")
    assert res.mean["mrr"] == pytest.approx(1 / 3)
    assert res.mean["map"] == pytest.approx((1 / 3 + 2 / 6) / 2)
    dcg = 2 / math.log2(4) + 1 / math.log2(7)
    assert res.mean["ndcg"] == pytest.approx(dcg / (2 + 1 / math.log2(3)))


def test_exp_gain_hand_computed() -> None:
    run = {"q": {"b": 0.9, "a": 0.8, "x": 0.7, "d": 0.6}}  # c (label 1) not retrieved
    qrels = {"q": {"a": 3, "b": 0, "c": 1, "d": 2, "e": -1}}
    res = evaluate(run, qrels, ["ndcg@1", "ndcg@2", "ndcg@4", "ndcg"])
    idcg = [7.0, 7 + 3 / math.log2(3), 7 + 3 / math.log2(3) + 1 / math.log2(4)]
    dcg4 = 7 / math.log2(3) + 3 / math.log2(5)
    assert res.mean["ndcg@1"] == 0.0
    assert res.mean["ndcg@2"] == pytest.approx((7 / math.log2(3)) / idcg[1])
    assert res.mean["ndcg@4"] == pytest.approx(dcg4 / idcg[2])
    assert res.mean["ndcg"] == pytest.approx(dcg4 / idcg[2])
    lin = evaluate(run, qrels, ["ndcg@4"], gain="linear").mean["ndcg@4"]
    assert lin == pytest.approx((3 / math.log2(3) + 2 / math.log2(5)) / (3 + 2 / math.log2(3) + 1 / 2))


def test_negative_labels_give_zero_gain_and_are_not_relevant() -> None:
    run = {"q": {"a": 2.0, "b": 1.0}}
    qrels = {"q": {"a": -1, "b": 1, "c": -2}}
    for gain in ("exp", "linear"):
        res = evaluate(run, qrels, ["ndcg", "ndcg@1", "mrr", "recall@1", "map"], gain=gain)
        assert res.mean["ndcg"] == pytest.approx(1 / math.log2(3))  # trec_eval gives the same
        assert res.mean["ndcg@1"] == 0.0
        assert res.mean["mrr"] == 0.5
        assert res.mean["recall@1"] == 0.0
        assert res.mean["map"] == 0.5


def test_query_sets_judged_vs_run() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 0}, "q3": {"c": 2}}
    run = {"q1": {"a": 1.0}, "q2": {"b": 1.0}, "q4": {"z": 1.0}}
    judged = evaluate(run, qrels, ["mrr", "recall@10"])  # q1 and q3 (q3 not retrieved -> 0)
    assert judged.n_queries == 2
    assert judged.per_query["mrr"] == {"q1": 1.0, "q3": 0.0}
    assert judged.mean["mrr"] == 0.5
    by_run = evaluate(run, qrels, ["mrr", "recall@10"], queries="run")  # q1 and q2 (no relevant -> 0)
    assert by_run.n_queries == 2
    assert by_run.per_query["recall@10"] == {"q1": 1.0, "q2": 0.0}
    assert by_run.mean["mrr"] == 0.5
    # threshold decides which queries are judged
    assert evaluate(run, qrels, ["mrr"], rel_threshold=2).per_query["mrr"] == {"q3": 0.0}


def test_empty_query_run_and_cut_beyond_depth() -> None:
    res = evaluate({"q": {}, "r": {"a": 1.0}}, {"q": {"a": 1}, "r": {"a": 1}}, ["p@5", "ndcg@100", "map"])
    assert res.per_query["p@5"] == {"q": 0.0, "r": 0.2}
    assert res.per_query["ndcg@100"] == {"q": 0.0, "r": 1.0}


@pytest.mark.parametrize("bad", ["foo", "ndcg@0", "recall", "p", "success", "p@x", "ndcg@-1", "mrr@"])
def test_invalid_metric_lists_valid_forms(bad: str) -> None:
    with pytest.raises(ValueError, match="valid forms"):
        evaluate({"q": {"a": 1.0}}, {"q": {"a": 1}}, [bad])


def test_errors_and_names() -> None:
    with pytest.raises(ValueError, match="run is empty"):
        evaluate({}, {"q": {"a": 1}}, ["mrr"])
    with pytest.raises(ValueError, match="qrels are empty"):
        evaluate({"q": {"a": 1.0}}, {}, ["mrr"])
    with pytest.raises(ValueError, match="no qrels query"):
        evaluate({"q": {"a": 1.0}}, {"q": {"a": 0}}, ["mrr"])
    with pytest.raises(ValueError, match="share no query"):
        evaluate({"x": {"a": 1.0}}, {"q": {"a": 1}}, ["mrr"], queries="run")
    with pytest.raises(ValueError, match="gain"):
        evaluate({"q": {"a": 1.0}}, {"q": {"a": 1}}, ["mrr"], gain="log")
    with pytest.raises(ValueError, match="NaN"):
        evaluate({"q": {"a": float("nan")}}, {"q": {"a": 1}}, ["mrr"])
    res = evaluate({"q": {"a": 1.0}}, {"q": {"a": 1}}, ["NDCG@10", "P@1", "MRR"])
    assert list(res.mean) == ["ndcg@10", "p@1", "mrr"]
    assert json.loads(json.dumps(res.to_dict()))["mean"] == res.mean


def test_speed_1200_queries() -> None:
    rng = np.random.default_rng(0)
    run = {f"q{i}": dict(zip([f"d{j}" for j in range(200)], rng.random(200).tolist())) for i in range(1200)}
    qrels = {f"q{i}": {f"d{j}": int(rng.integers(0, 4)) for j in rng.choice(400, 20)} for i in range(1200)}
    t = time.perf_counter()
    evaluate(run, qrels, ["ndcg@10", "ndcg", "recall@100", "mrr", "map", "p@10", "success@10"])
    assert time.perf_counter() - t < 1.0


def brute_auc(y: np.ndarray, s: np.ndarray) -> float:
    pos, neg = s[y == 1], s[y == 0]
    return float(((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])).mean())


def test_auc_hand_examples() -> None:
    assert auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == 0.75
    assert auc([0, 1], [0.5, 0.5]) == 0.5
    assert auc([True, False, True], [3, 1, 2]) == 1.0
    assert auc([1, 0, 1], [0, 1, 1]) == 0.25  # one tie (1/2) and one loss
    with pytest.raises(ValueError, match="both classes"):
        auc([1, 1], [0.1, 0.2])
    with pytest.raises(ValueError, match="binary"):
        auc([0, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="equal length"):
        auc([0, 1], [0.1])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_auc_equals_mann_whitney_u(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    y = np.r_[0, 1, rng.integers(0, 2, n - 2)]
    s = rng.integers(0, 6, n).astype(float)  # many ties
    u = mannwhitneyu(s[y == 1], s[y == 0]).statistic
    assert auc(y, s) == pytest.approx(u / ((y == 1).sum() * (y == 0).sum()))
    assert auc(y, s) == pytest.approx(brute_auc(y, s))
