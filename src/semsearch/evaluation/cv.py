"""Hyperparameter selection over queries: k-fold cross-validation (the papers' 2-fold CV) or a dev split.

"Results on one half obtained with settings optimised on the other half": every setting's run is
computed once over all queries and evaluated once; each fold then takes the setting with the best
mean metric on the other folds' queries, and its run supplies that fold's test queries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from semsearch.evaluation.metrics import canonical_metric, evaluate
from semsearch.types import Part, Qrels, Run

__all__ = ["CVResult", "QueryFold", "cross_validate", "kfold_queries", "tune"]


@dataclass(frozen=True)
class CVResult:
    """Cross-validated run and how it was assembled."""

    run: Run
    """Test-fold queries of each fold, taken from that fold's chosen setting."""
    chosen: list[str]
    """Setting chosen for each fold (tuned on the other folds)."""
    fold_scores: list[dict[str, float]]
    """Per fold: setting -> mean metric on the fold's training (other folds') queries."""
    folds: list[tuple[list[str], list[str]]]
    """Per fold: (training query ids, test query ids)."""


def kfold_queries(qids: Iterable[str], k: int = 2, seed: int = 0) -> list[tuple[list[str], list[str]]]:
    """Split query ids into k folds; returns (train, test) per fold, each list sorted.

    The ids are de-duplicated and sorted before a seeded shuffle, so the split depends only on
    the set of ids, k and seed. Fold sizes differ by at most one.
    """
    ids = sorted(set(qids))
    if k < 2:
        raise ValueError(f"k must be >= 2, got {k}")
    if len(ids) < k:
        raise ValueError(f"need at least k={k} queries, got {len(ids)}")
    perm = np.random.default_rng(seed).permutation(len(ids))
    tests = [sorted(ids[i] for i in part) for part in np.array_split(perm, k)]
    return [(sorted(q for j, t in enumerate(tests) if j != i for q in t), test) for i, test in enumerate(tests)]


@dataclass(frozen=True)
class QueryFold(Part):
    """Fold ``i`` of ``n`` of a split's queries (counted from 1, written ``"I/N"`` as every
    ``Part``), as ``kfold_queries`` (seed 0) splits them. A model trained with fold I/N held out
    (``semsearch train --hold-out``) never saw that fold's queries, so a stage-2 ranker learning
    its trust in the model from them (``index build --ranker-param train_fold=I/N``) sees the
    scores it will meet on new queries."""

    noun: ClassVar[str] = "fold"
    min_n: ClassVar[int] = 2

    def queries(self, qids: Iterable[str]) -> list[str]:
        """The fold's queries among ``qids`` (sorted)."""
        return kfold_queries(qids, self.n, seed=0)[self.index][1]


def _per_query(runs_by_params: Mapping[str, Run], qrels: Qrels, metric: str, gain: str) -> dict[str, dict[str, float]]:
    """setting -> query id -> metric value, over the judged queries (a missing query scores 0)."""
    if not runs_by_params:
        raise ValueError("runs_by_params is empty")
    key = canonical_metric(metric)
    return {p: evaluate(r, qrels, [key], gain=gain).per_query[key] for p, r in runs_by_params.items()}


def _best(scores: Mapping[str, float]) -> str:
    """Key with the highest score; ties go to the first key in order."""
    best = next(iter(scores))
    for p, v in scores.items():
        if v > scores[best]:
            best = p
    return best


def tune(
    runs_by_params: Mapping[str, Run], qrels: Qrels, metric: str = "ndcg@10", *, gain: str = "exp"
) -> tuple[str, dict[str, float]]:
    """Pick the setting with the best mean metric on ``qrels`` (a dev split); ties -> first key.

    Returns (best key, setting -> mean metric).
    """
    per_query = _per_query(runs_by_params, qrels, metric, gain)
    scores = {p: float(np.mean(list(v.values()))) for p, v in per_query.items()}
    return _best(scores), scores


def cross_validate(
    runs_by_params: Mapping[str, Run],
    qrels: Qrels,
    metric: str = "ndcg@10",
    *,
    k: int = 2,
    seed: int = 0,
    gain: str = "exp",
) -> CVResult:
    """k-fold CV over the judged queries of ``qrels`` (those with a relevant document).

    ``runs_by_params`` maps a setting label to its run over all queries. For each fold the setting
    with the best mean ``metric`` on the other folds (ties -> first key) is chosen, and its run,
    restricted to the fold's test queries, goes into the combined run, which thereby covers every
    judged query the chosen runs retrieved for (per-query dicts are shallow-copied).

    Args:
        runs_by_params: setting label -> its run over all queries.
        qrels: the judgments; only queries with a relevant document are folded.
        metric: the metric a fold's setting is chosen by.
        k: the number of folds.
        seed: seed of the query split (``kfold_queries``).
        gain: nDCG gain, "exp" or "linear".

    Returns:
        The combined run, each fold's chosen setting and the folds."""
    per_query = _per_query(runs_by_params, qrels, metric, gain)
    folds = kfold_queries(next(iter(per_query.values())), k=k, seed=seed)
    run: Run = {}
    chosen: list[str] = []
    fold_scores: list[dict[str, float]] = []
    for train, test in folds:
        scores = {p: float(np.mean([v[q] for q in train])) for p, v in per_query.items()}
        best = _best(scores)
        source = runs_by_params[best]
        run.update({q: dict(source[q]) for q in test if q in source})
        chosen.append(best)
        fold_scores.append(scores)
    return CVResult(run=run, chosen=chosen, fold_scores=fold_scores, folds=folds)
