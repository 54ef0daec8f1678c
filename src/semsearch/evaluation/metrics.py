"""Ranking metrics (nDCG, Recall, P, MRR, MAP, Success) and ROC AUC, vectorised over queries.

Conventions (DESIGN.md, "Evaluation conventions"):

* Ranking inside a query: score descending, ties broken by document id ASCENDING, so runs are
  deterministic. trec_eval / pytrec_eval break ties by document id DESCENDING, so values differ
  from theirs only when a run has tied scores.
* nDCG: discount ``log2(rank + 1)``; gain ``2^label - 1`` (``gain="exp"``, the papers) or
  ``label`` (``gain="linear"``, trec_eval's ``ndcg`` / ``ndcg_cut``). Negative labels give 0 gain.
  The ideal DCG uses every judged document of the query in the qrels, as trec_eval does; nDCG
  ignores ``rel_threshold`` (also as trec_eval). ``mrr@k`` (no trec_eval measure) is
  ``recip_rank`` of the run cut to its top k.
* Binary metrics count a document as relevant when ``label >= rel_threshold`` (trec_eval's
  default level is 1). Recall and MAP divide by the number of relevant documents in the qrels;
  P@k divides by k even when fewer than k documents were retrieved (both as trec_eval).
* Query set: ``queries="judged"`` (papers) averages over every qrels query with at least one
  relevant document, a query missing from the run scoring 0; ``queries="run"`` (pytrec_eval,
  BEIR) averages over queries present in both run and qrels, queries without relevant documents
  scoring 0 and counting.

Every metric is read off one matrix of ranked labels (queries x depth) built by `_ranked_labels`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import rankdata

from semsearch.types import Qrels, Run

__all__ = ["EvalResult", "VALID_METRICS", "auc", "canonical_metric", "evaluate", "parse_metric"]

VALID_METRICS = ("ndcg", "ndcg@k", "recall@k", "p@k", "mrr", "mrr@k", "map", "map@k", "success@k")
"""The metric names `parse_metric` accepts, k a positive integer cut-off."""
_NEEDS_CUT = {"recall", "p", "success"}
_NO_LABELS = np.zeros(0, dtype=np.int64)
_METRIC_RE = re.compile(r"^(ndcg|recall|p|mrr|map|success)(?:@([1-9]\d*))?$")


@dataclass(frozen=True)
class EvalResult:
    """Per-query and mean metric values of one run; metric names are canonical (lower case)."""

    per_query: dict[str, dict[str, float]]
    """metric -> query id -> value (query ids sorted)."""
    mean: dict[str, float]
    """metric -> mean over the evaluated queries."""
    n_queries: int
    gain: str = "exp"
    queries: str = "judged"
    rel_threshold: int = 1

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-serialisable dict of everything in the result."""
        return {
            "mean": dict(self.mean),
            "per_query": {m: dict(v) for m, v in self.per_query.items()},
            "n_queries": self.n_queries,
            "gain": self.gain,
            "queries": self.queries,
            "rel_threshold": self.rel_threshold,
        }


def parse_metric(name: str) -> tuple[str, int | None]:
    """Split ``"ndcg@10"`` into ``("ndcg", 10)``; case-insensitive; ValueError on unknown forms."""
    m = _METRIC_RE.match(name.strip().lower())
    if m is None or (m.group(1) in _NEEDS_CUT and m.group(2) is None):
        raise ValueError(f"unknown metric {name!r}; valid forms: {', '.join(VALID_METRICS)} (k a positive integer)")
    return m.group(1), (int(m.group(2)) if m.group(2) else None)


def canonical_metric(name: str) -> str:
    """Canonical key of a metric name, e.g. ``"NDCG@10"`` -> ``"ndcg@10"``, ``"P@5"`` -> ``"p@5"``."""
    base, k = parse_metric(name)
    return f"{base}@{k}" if k else base


def _gain(labels: np.ndarray, gain: str) -> np.ndarray:
    """Gain of each label: 2^label - 1 ("exp") or label ("linear"); negative labels give 0."""
    pos = np.maximum(labels, 0).astype(np.float64)
    return np.exp2(pos) - 1.0 if gain == "exp" else pos


def _ranked_labels(run_q: Mapping[str, float], qrels_q: Mapping[str, int]) -> np.ndarray:
    """Labels in ranking order (score desc, doc id asc), up to the last positively labelled doc.

    Only the run's positively labelled documents are placed, at rank 1 + #higher scores + #tied
    scores with a smaller doc id: one float sort per query and no label lookup per retrieved doc.
    Every other position holds 0 (no gain, not relevant), which is all the metrics need.
    """
    hits = [(d, lab) for d, lab in qrels_q.items() if lab > 0 and d in run_q]
    if not hits:
        return _NO_LABELS
    scores = np.fromiter(run_q.values(), dtype=np.float64, count=len(run_q))
    srt = np.sort(scores)
    if np.isnan(srt[-1]):
        raise ValueError("run scores contain NaN")
    s = np.array([run_q[d] for d, _ in hits], dtype=np.float64)
    lo, hi = np.searchsorted(srt, s, "left"), np.searchsorted(srt, s, "right")
    ranks = len(srt) - hi  # 0-based: number of documents scoring strictly higher
    tied = np.flatnonzero(hi - lo > 1)
    if tied.size:  # break ties by doc id ascending; only then pay for a string array
        ids = np.array(list(run_q))
        for i in tied:
            ranks[i] += np.count_nonzero((scores == s[i]) & (ids < hits[i][0]))
    out = np.zeros(ranks.max() + 1, dtype=np.int64)
    out[ranks] = [lab for _, lab in hits]
    return out


def _stack(rows: list[np.ndarray], cap: int | None) -> np.ndarray:
    """Pad 1-d label arrays with 0 (not relevant, no gain) into a matrix, at most ``cap`` wide."""
    longest = max(1, max(map(len, rows)))
    depth = longest if cap is None else min(longest, cap)
    out = np.zeros((len(rows), depth), dtype=np.int64)
    for i, r in enumerate(rows):
        n = min(len(r), depth)
        out[i, :n] = r[:n]
    return out


def _at(cum: np.ndarray, k: int | None) -> np.ndarray:
    """Column k-1 of a cumulative matrix (the last column when k is None or past the depth)."""
    depth = cum.shape[1]
    return cum[:, depth - 1 if k is None else min(k, depth) - 1]


def _safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, 0 where den is 0."""
    return np.divide(num, den, out=np.zeros_like(num, dtype=np.float64), where=den > 0)


def evaluate(
    run: Run,
    qrels: Qrels,
    metrics: Sequence[str],
    *,
    gain: str = "exp",
    rel_threshold: int = 1,
    queries: str = "judged",
) -> EvalResult:
    """Evaluate ``run`` against ``qrels`` with the given metrics (see the module docstring).

    Args:
        run: query id -> {doc id: score}.
        qrels: query id -> {doc id: grade}.
        metrics: metric names, e.g. "ndcg@10", "recall@100", "map".
        gain: nDCG gain, "exp" (2^grade - 1) or "linear" (the grade).
        rel_threshold: the lowest grade binary metrics count as relevant.
        queries: which queries are averaged: "judged" or those present in the run.

    Returns:
        Per-query values and their means per metric."""
    if isinstance(metrics, str):
        metrics = [metrics]
    parsed = {canonical_metric(m): parse_metric(m) for m in metrics}
    if not parsed:
        raise ValueError("no metrics given")
    if gain not in ("exp", "linear"):
        raise ValueError(f"gain must be 'exp' or 'linear', not {gain!r}")
    if queries not in ("judged", "run"):
        raise ValueError(f"queries must be 'judged' or 'run', not {queries!r}")
    if rel_threshold < 1:
        raise ValueError("rel_threshold must be >= 1 (unjudged documents count as label 0)")
    if not run:
        raise ValueError("run is empty")
    if not qrels:
        raise ValueError("qrels are empty")

    n_rel = {q: sum(1 for v in docs.values() if v >= rel_threshold) for q, docs in qrels.items()}
    if queries == "judged":
        qids = sorted(q for q, n in n_rel.items() if n > 0)
        if not qids:
            raise ValueError(f"no qrels query has a document with label >= {rel_threshold}")
    else:
        qids = sorted(run.keys() & qrels.keys())
        if not qids:
            raise ValueError("run and qrels share no query id")

    empty: dict[str, float] = {}
    rows = [_ranked_labels(run.get(q, empty), qrels[q]) for q in qids]
    cuts = [k for _, k in parsed.values()]
    cap = None if None in cuts else max(k for k in cuts if k is not None)  # only cut metrics: the deepest cut
    labels = _stack(rows, cap)
    depth = labels.shape[1]
    rank = np.arange(1, depth + 1, dtype=np.float64)
    rel = labels >= rel_threshold
    rel_cum = np.cumsum(rel, axis=1)
    big_r = np.array([n_rel[q] for q in qids], dtype=np.float64)

    values: dict[str, np.ndarray] = {}
    if any(n == "ndcg" for n, _ in parsed.values()):
        disc = 1.0 / np.log2(rank + 1.0)
        dcg_cum = np.cumsum(_gain(labels, gain) * disc, axis=1)
        ideal_rows = [np.sort(np.fromiter(qrels[q].values(), dtype=np.int64))[::-1] for q in qids]
        ideal = _stack(ideal_rows, cap)
        idcg_cum = np.cumsum(_gain(ideal, gain) / np.log2(np.arange(2, ideal.shape[1] + 2)), axis=1)
    if any(n == "mrr" for n, _ in parsed.values()):
        first = np.where(rel.any(axis=1), rel.argmax(axis=1) + 1, np.inf)
    if any(n == "map" for n, _ in parsed.values()):
        ap_cum = np.cumsum(np.where(rel, rel_cum / rank, 0.0), axis=1)

    for key, (name, k) in parsed.items():
        if name == "ndcg":
            values[key] = _safe_div(_at(dcg_cum, k), _at(idcg_cum, k))
        elif name == "recall":
            values[key] = _safe_div(_at(rel_cum, k).astype(np.float64), big_r)
        elif name == "p":
            assert k is not None  # P needs a cut (parse_metric)
            values[key] = _at(rel_cum, k) / float(k)
        elif name == "success":
            values[key] = (_at(rel_cum, k) > 0).astype(np.float64)
        elif name == "mrr":
            values[key] = np.where(first <= (k or np.inf), 1.0 / first, 0.0)
        else:  # map
            values[key] = _safe_div(_at(ap_cum, k), big_r)

    return EvalResult(
        per_query={m: dict(zip(qids, v.tolist())) for m, v in values.items()},
        mean={m: float(v.mean()) for m, v in values.items()},
        n_queries=len(qids),
        gain=gain,
        queries=queries,
        rel_threshold=rel_threshold,
    )


def auc(y_true: Sequence[int] | np.ndarray, scores: Sequence[float] | np.ndarray) -> float:
    """ROC AUC of binary labels vs scores via the Mann-Whitney U statistic (ties: average rank).

    Equals the probability that a random positive outscores a random negative, ties counting 1/2.
    """
    y = np.asarray(y_true)
    s = np.asarray(scores, dtype=np.float64)
    if y.ndim != 1 or y.shape != s.shape:
        raise ValueError(f"y_true and scores must be 1-d of equal length, got {y.shape} and {s.shape}")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("y_true must be binary (0/1 or bool)")
    if np.isnan(s).any():
        raise ValueError("scores contain NaN")
    pos = y.astype(bool)
    n_pos = int(pos.sum())
    n_neg = pos.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("auc needs both classes present in y_true")
    u = rankdata(s)[pos].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))
