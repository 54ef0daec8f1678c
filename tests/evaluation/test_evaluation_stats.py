"""Paired t-test, query folds, cross-validation / tuning, and result tables."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import ttest_rel

from semsearch.evaluation import (
    EvalResult,
    ResultTable,
    cross_validate,
    evaluate,
    kfold_queries,
    metric_header,
    paired_ttest,
    tune,
)

# ---------------------------------------------------------------- paired t-test


def test_ttest_matches_scipy_on_common_queries() -> None:
    rng = np.random.default_rng(0)
    a = {f"q{i}": float(v) for i, v in enumerate(rng.random(40))}
    b = {f"q{i}": float(v) for i, v in enumerate(rng.random(45)) if i >= 5}  # q0..q4 only in a
    res = paired_ttest(a, b)
    common = sorted(a.keys() & b.keys())
    ref = ttest_rel([a[q] for q in common], [b[q] for q in common])
    assert res.n == 35
    assert res.t == pytest.approx(ref.statistic)
    assert res.p == pytest.approx(ref.pvalue)
    assert res.mean_diff == pytest.approx(np.mean([a[q] - b[q] for q in common]))


def test_ttest_degenerate_cases() -> None:
    a = {"q1": 0.5, "q2": 0.2, "q3": 0.9}
    same = paired_ttest(a, dict(a))
    assert (same.t, same.p, same.n, same.mean_diff) == (0.0, 1.0, 3, 0.0)
    shifted = paired_ttest({q: v + 0.1 for q, v in a.items()}, a)
    assert (shifted.t, shifted.p, shifted.mean_diff) == (math.inf, 0.0, pytest.approx(0.1))
    with pytest.raises(ValueError, match=">= 2 common"):
        paired_ttest({"q1": 1.0, "q2": 0.0}, {"q1": 0.0, "q3": 1.0})


# ---------------------------------------------------------------- folds and CV


def test_kfold_deterministic_disjoint_and_complete() -> None:
    qids = [f"q{i}" for i in range(11)]
    folds = kfold_queries(qids, k=3, seed=7)
    assert folds == kfold_queries(list(reversed(qids)) + qids[:3], k=3, seed=7)  # order/dupes ignored
    tests = [set(t) for _, t in folds]
    assert set().union(*tests) == set(qids)
    assert sum(map(len, tests)) == len(qids)  # disjoint
    assert max(map(len, tests)) - min(map(len, tests)) <= 1
    for train, test in folds:
        assert set(train) == set(qids) - set(test)
        assert train == sorted(train) and test == sorted(test)
    assert kfold_queries(qids, k=2, seed=0) != kfold_queries(qids, k=2, seed=1)
    with pytest.raises(ValueError):
        kfold_queries(qids, k=1)
    with pytest.raises(ValueError):
        kfold_queries(["q1"], k=2)


def _cv_case() -> tuple[dict, dict, list[str], list[str]]:
    """Setting A ranks the relevant doc first on fold 0's test queries and last elsewhere; B the
    reverse; C is mediocre everywhere. Each fold must pick the setting that wins on the OTHER fold."""
    qids = [f"q{i:02d}" for i in range(20)]
    qrels = {q: {"rel": 1, "n1": 0} for q in qids}
    (_, t0), (_, t1) = kfold_queries(qids, k=2, seed=0)
    good = {"rel": 3.0, "n1": 2.0, "n2": 1.0}
    bad = {"rel": 1.0, "n1": 2.0, "n2": 3.0}
    mid = {"rel": 2.0, "n1": 3.0, "n2": 1.0}
    runs = {
        "A": {q: dict(good if q in t0 else bad) for q in qids},
        "B": {q: dict(good if q in t1 else bad) for q in qids},
        "C": {q: dict(mid) for q in qids},
    }
    return runs, qrels, t0, t1


def test_cross_validate_picks_setting_tuned_on_other_fold() -> None:
    runs, qrels, t0, t1 = _cv_case()
    cv = cross_validate(runs, qrels, "mrr", k=2, seed=0)
    assert [t for _, t in cv.folds] == [t0, t1]
    assert cv.chosen == ["B", "A"]  # fold 0 tuned on t1 (B best there), fold 1 tuned on t0
    assert cv.fold_scores[0]["B"] == 1.0 and cv.fold_scores[0]["A"] == pytest.approx(1 / 3)
    assert cv.fold_scores[0]["C"] == 0.5
    assert set(cv.run) == set(qrels)  # every query covered
    assert all(cv.run[q] == runs["B"][q] for q in t0)
    assert all(cv.run[q] == runs["A"][q] for q in t1)
    assert cv.run[t0[0]] is not runs["B"][t0[0]]  # per-query dicts copied
    # the honest CV score is poor here: each half gets the setting that is bad on it
    assert evaluate(cv.run, qrels, ["mrr"]).mean["mrr"] == pytest.approx(1 / 3)


def test_cross_validate_ties_go_to_first_key_and_tune() -> None:
    runs, qrels, _, _ = _cv_case()
    same = {"x": runs["C"], "y": runs["C"]}
    assert cross_validate(same, qrels, "mrr").chosen == ["x", "x"]
    best, scores = tune(runs, qrels, "MRR")
    assert scores == {"A": pytest.approx(2 / 3), "B": pytest.approx(2 / 3), "C": 0.5}
    assert best == "A"
    assert tune({"C": runs["C"], "A": runs["A"]}, qrels, "mrr")[0] == "A"
    with pytest.raises(ValueError):
        tune({}, qrels, "mrr")


# ---------------------------------------------------------------- tables


def _result(values: np.ndarray, metric: str = "ndcg@10", gain: str = "exp") -> EvalResult:
    per_q = {f"q{i:02d}": float(v) for i, v in enumerate(values)}
    return EvalResult({metric: per_q}, {metric: float(np.mean(values))}, len(values), gain=gain)


def _two_metric(v1: np.ndarray, v2: np.ndarray) -> EvalResult:
    a, b = _result(v1), _result(v2, "recall@10")
    return EvalResult({**a.per_query, **b.per_query}, {**a.mean, **b.mean}, a.n_queries)


@pytest.fixture()
def table() -> ResultTable:
    alt = np.tile([1.0, -1.0], 15)
    base = np.linspace(0.2, 0.5, 30)
    bm25 = base
    dssm = base + 0.1 + 0.01 * alt  # clearly better than BM25
    model = dssm + np.tile([0.2, -0.19], 15)  # higher mean than DSSM but not significant
    worse = base - 0.05 + 0.01 * alt  # significantly LOWER than BM25
    t = ResultTable(baselines=["BM25", "DSSM"])
    t.add("BM25", _two_metric(bm25, bm25), paper={"NDCG@10": 0.301})
    t.add("DSSM", _two_metric(dssm, bm25))
    t.add("Model", _two_metric(model, bm25 + 0.001 * alt), paper={"ndcg@10": 0.42})
    t.add("Worse", _two_metric(worse, bm25))
    return t


def test_table_preconditions(table: ResultTable) -> None:
    pq = {label: r.result.per_query["ndcg@10"] for label, r in table.rows.items()}
    assert paired_ttest(pq["DSSM"], pq["BM25"]).p < 0.05
    assert paired_ttest(pq["Model"], pq["BM25"]).p < 0.05
    assert paired_ttest(pq["Model"], pq["DSSM"]).p > 0.05
    assert paired_ttest(pq["Worse"], pq["BM25"]).p < 0.05


def test_markdown_markers_only_where_significant_and_higher(table: ResultTable) -> None:
    md = table.to_markdown()
    lines = md.splitlines()
    assert lines[0] == "| Model | NDCG@10 | NDCG@10 (paper) | Recall@10 |"
    assert lines[1] == "|---|---:|---:|---:|"
    rows = {line.split(" | ")[0][2:]: line.strip("| ").split(" | ") for line in lines[2:6]}
    assert rows["BM25"][1:] == ["0.350", "0.301", "0.350"]
    assert rows["DSSM"][1] == "0.450α"  # beats BM25, not itself
    assert rows["Model"][1].endswith("α") and "β" not in rows["Model"][1]  # DSSM gap not significant
    assert rows["Model"][2] == "0.420"
    assert rows["Worse"][1] == "0.300" and rows["Worse"][2] == ""  # significant but lower: no marker
    assert rows["Model"][3] == "0.350"  # Recall: tiny alternating gap, not significant
    foot = lines[-1]
    assert "α = BM25" in foot and "β = DSSM" in foot and "n = 30 queries" in foot
    assert "p < 0.05" in foot and "2^label − 1" in foot
    assert "(paper)" not in table.to_markdown(show_paper=False)
    assert table.to_markdown(columns=["recall@10"]).splitlines()[0] == "| Model | Recall@10 |"


def test_json_round_trip(table: ResultTable) -> None:
    data = table.to_json()
    assert json.loads(json.dumps(data, ensure_ascii=False)) == data
    assert data["baselines"] == [{"label": "BM25", "marker": "α"}, {"label": "DSSM", "marker": "β"}]
    rows = {r["label"]: r for r in data["rows"]}
    assert set(rows["BM25"]["p_values"]) == {"DSSM"}
    pq = {label: r.result.per_query["ndcg@10"] for label, r in table.rows.items()}
    p_model_dssm = paired_ttest(pq["Model"], pq["DSSM"]).p
    assert rows["Model"]["p_values"]["DSSM"]["ndcg@10"] == pytest.approx(p_model_dssm)
    assert rows["Model"]["markers"] == {"ndcg@10": "α", "recall@10": ""}
    assert rows["Model"]["paper"] == {"ndcg@10": 0.42}
    assert rows["Worse"]["mean"]["ndcg@10"] == pytest.approx(0.30)


def test_table_errors_and_headers() -> None:
    t = ResultTable(baselines=["missing"])
    t.add("x", _result(np.array([0.1, 0.2])))
    with pytest.raises(ValueError, match="baselines without a row"):
        t.to_markdown()
    with pytest.raises(ValueError, match="duplicate"):
        t.add("x", _result(np.array([0.1, 0.2])))
    names = ["ndcg@1", "ndcg", "recall@10", "p@5", "mrr", "map@100", "success@10"]
    assert [metric_header(m) for m in names] == ["NDCG@1", "NDCG", "Recall@10", "P@5", "MRR", "MAP@100", "Success@10"]
    no_baselines = ResultTable().add("y", _result(np.array([0.1, 0.2])))
    assert "Markers" not in no_baselines.to_markdown()
    assert no_baselines.to_json()["rows"][0]["p_values"] == {}
