"""Paired t-test over queries, the papers' significance test (p < 0.05)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy.stats import ttest_rel

__all__ = ["TTestResult", "paired_ttest"]


@dataclass(frozen=True)
class TTestResult:
    """Two-sided paired t-test of a vs b; ``mean_diff`` = mean(a - b), positive when a is better."""

    t: float
    p: float
    n: int
    mean_diff: float


def paired_ttest(a: Mapping[str, float], b: Mapping[str, float]) -> TTestResult:
    """Paired two-sided t-test (scipy.stats.ttest_rel) over the query ids present in both a and b.

    Degenerate cases scipy answers with NaN or a precision warning are defined instead: identical
    values give t = 0, p = 1; a constant non-zero difference gives t = +-inf, p = 0. "Identical"
    and "constant" allow floating-point noise (spread <= 1e-12 relative to the largest difference).
    """
    qids = sorted(a.keys() & b.keys())
    if len(qids) < 2:
        raise ValueError(f"paired t-test needs >= 2 common queries, got {len(qids)}")
    x = np.fromiter((a[q] for q in qids), dtype=np.float64, count=len(qids))
    y = np.fromiter((b[q] for q in qids), dtype=np.float64, count=len(qids))
    d = x - y
    mean_diff = float(d.mean())
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))
    if np.ptp(d) <= tol:  # (numerically) zero variance: scipy gives NaN or warns
        if abs(mean_diff) <= tol:
            return TTestResult(0.0, 1.0, len(qids), mean_diff)
        return TTestResult(math.copysign(math.inf, mean_diff), 0.0, len(qids), mean_diff)
    res = ttest_rel(x, y)
    return TTestResult(float(res.statistic), float(res.pvalue), len(qids), mean_diff)
