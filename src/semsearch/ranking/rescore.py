"""Stage 3 of the served search: a cross-encoder re-scores the top few of the ranked list.

The 2020 semantic-retrieval paper's online system ends with its most expensive model on the
fewest documents (§3.3): here a trained BERT(rel) (``models.transformer.CrossEncoder``) reads each
(query, title) pair of the first ``depth`` hits the stage-2 ranker returned and re-orders them by
its score; the hits below ``depth`` keep the ranker's order and score. A cross-encoder costs one
transformer pass per pair, so the service runs it only when asked (``semsearch serve --rescore``).

By default the re-scored hits are ordered by a blend of both views, z(ranker) + w·z(cross-encoder),
each standardised over the query's re-scored hits: the cross-encoder's order alone does not beat
the ranker's on Home Depot dev, the blend does (README, "Stage 3"); ``weight`` = inf keeps the
cross-encoder's order alone."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar

import numpy as np


class PairScorer(Protocol):
    """What stage 3 needs of a model: scores of aligned (query, document text) pairs."""

    name: str

    def score_pairs(self, queries: Sequence[str], docs: Sequence[str]) -> np.ndarray: ...


H = TypeVar("H")


def is_pair_scorer(model: Any) -> bool:
    """Whether ``model`` can be a stage-3 re-scorer (a cross-encoder: it scores text pairs)."""
    return callable(getattr(model, "score_pairs", None))


def check_weight(weight: float, where: str = "rescore weight") -> float:
    """A stage-3 blend weight: a number > 0, or inf (the cross-encoder's order alone)."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or math.isnan(weight) or weight <= 0:
        raise ValueError(f"{where} must be a number > 0, or inf for the cross-encoder's order alone; got {weight!r}")
    return float(weight)


def _z(x: np.ndarray) -> np.ndarray:
    """Standardised over one query's re-scored hits (a constant list: centred only)."""
    sd = float(x.std())
    return (x - x.mean()) / (sd if sd > 0 else 1.0)


def rescore_top(
    scorer: PairScorer,
    queries: Sequence[str],
    ranked: Sequence[Sequence[H]],
    depth: int,
    text: Callable[[H], str],
    weight: float = math.inf,
) -> list[list[H]]:
    """Each query's first ``depth`` hits re-ordered by ``scorer`` (one call for every pair of
    every query: the service's micro-batch); the rest of each list unchanged. ``weight``: their
    new score is z(their score) + weight · z(the scorer's), both standardised over those hits;
    inf: the scorer's score alone. Ties keep the ranker's order. ``text``: a hit's document text.

    Args:
        scorer: scores (query, text) pairs.
        queries: the query texts.
        ranked: each query's ranked hits.
        depth: hits re-scored per query.
        text: a hit's document text.
        weight: the scorer's weight in the blend (inf: the scorer alone).

    Returns:
        Each query's hits, the first ``depth`` re-ordered."""
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    weight = check_weight(weight)
    tops = [list(hits[:depth]) for hits in ranked]
    qs = [q for q, top in zip(queries, tops) for _ in top]
    if not qs:
        return [list(hits) for hits in ranked]
    scores = np.asarray(scorer.score_pairs(qs, [text(h) for top in tops for h in top]), dtype=np.float64)
    out, at = [], 0
    for hits, top in zip(ranked, tops):
        s = scores[at : at + len(top)]
        at += len(top)
        if not math.isinf(weight):
            s = _z(np.array([h.score for h in top], dtype=np.float64)) + weight * _z(s)  # type: ignore[attr-defined]  # hits with a score
        order = sorted(range(len(top)), key=lambda i: (-s[i], i))
        out.append([replace(top[i], score=float(s[i])) for i in order] + list(hits[depth:]))  # type: ignore[type-var]  # dataclass hits
    return out


__all__ = ["PairScorer", "check_weight", "is_pair_scorer", "rescore_top"]
