"""Merging rankings from several models: score interpolation and reciprocal rank fusion.

Interpolation is the papers' "model + BM25" / "projection + VSM" combination; RRF (Cormack et al.
2009) needs no score calibration. Both take and return runs (query -> doc -> score)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..types import Run


def _normalise(scores: dict[str, float], norm: str) -> dict[str, float]:
    if norm == "none" or not scores:
        return scores
    v = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    if norm == "minmax":
        lo, span = v.min(), v.max() - v.min()
        v = (v - lo) / span if span > 0 else np.zeros_like(v)
    elif norm == "zscore":
        sd = v.std()
        v = (v - v.mean()) / sd if sd > 0 else np.zeros_like(v)
    else:
        raise ValueError(f"norm must be 'none', 'minmax' or 'zscore', got {norm!r}")
    return dict(zip(scores, v.tolist()))


def interpolate(runs: Sequence[Run], weights: Sequence[float], *, norm: str = "minmax") -> Run:
    """Σ_i w_i·s_i(q, d) with each run's scores normalised per query (``norm``); a document missing
    from a run takes that run's lowest normalised score for the query."""
    if len(runs) != len(weights) or not runs:
        raise ValueError("interpolate needs one weight per run")
    out: Run = {}
    for q in sorted(set().union(*runs)):
        parts = [_normalise(r.get(q, {}), norm) for r in runs]
        docs = set().union(*parts)
        fused = dict.fromkeys(docs, 0.0)
        for w, p in zip(weights, parts):
            floor = min(p.values()) if p else 0.0
            for d in docs:
                fused[d] += w * p.get(d, floor)
        out[q] = fused
    return out


def rrf(runs: Sequence[Run], *, k: int = 60) -> Run:
    """Reciprocal rank fusion: Σ_i 1 / (k + rank_i(d)), ranks from each run's own order."""
    from ..data import ranked

    out: Run = {}
    for run in runs:
        for q, scores in run.items():
            fused = out.setdefault(q, {})
            for r, (d, _) in enumerate(ranked(scores), 1):
                fused[d] = fused.get(d, 0.0) + 1.0 / (k + r)
    return out
