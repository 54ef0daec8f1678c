"""The power of online comparisons: `prefix_sign_test_p`, `prefix_two_proportion_p` and
`impressions_to_significance` find after how many impressions a simulated run reaches p < alpha;
`detection_summary` reports the median over runs; `ab_sample_size` and
`interleaving_sample_size` are the normal approximations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.stats import binom, norm

__all__ = [
    "DetectionSummary",
    "ab_sample_size",
    "detection_summary",
    "impressions_to_significance",
    "interleaving_sample_size",
    "prefix_sign_test_p",
    "prefix_two_proportion_p",
]


def prefix_sign_test_p(outcome: np.ndarray) -> np.ndarray:
    """The two-sided sign test's p after each impression of ``outcome`` (+1 / -1 / 0 per
    impression, in arrival order), vectorised: entry i is `sign_test_p` of the first i + 1
    impressions. Under H0 the win count is Binomial(m, 1/2), symmetric, so the two-sided p is
    min(1, 2 P(X <= min(w, m - w))), which is what scipy.stats.binomtest returns for p = 1/2."""
    o = np.asarray(outcome)
    wa = np.cumsum(o == 1)
    m = wa + np.cumsum(o == -1)
    low = np.minimum(wa, m - wa)
    return np.where(m > 0, np.minimum(1.0, 2.0 * binom.cdf(low, np.maximum(m, 1), 0.5)), 1.0)


def prefix_two_proportion_p(control: np.ndarray, experiment: np.ndarray) -> np.ndarray:
    """The two-proportion z-test's p (pooled, two-sided) after each pair of searches: entry i
    compares the first i + 1 searches of ``control`` with the first i + 1 of ``experiment``
    (bool: the search got at least one click), i.e. after 2 (i + 1) impressions in all. The
    arrays are cut to the shorter length. p = 1 where the pooled rate is 0 or 1."""
    c = np.asarray(control, dtype=bool)
    e = np.asarray(experiment, dtype=bool)
    m = min(len(c), len(e))
    xc = np.cumsum(c[:m])
    xe = np.cumsum(e[:m])
    n = np.arange(1, m + 1, dtype=np.float64)
    pooled = (xc + xe) / (2 * n)
    se = np.sqrt(pooled * (1 - pooled) * 2 / n)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (xe - xc) / n / se
    return np.where(se > 0, 2 * norm.sf(np.abs(z)), 1.0)


def impressions_to_significance(
    p_values: np.ndarray,
    alpha: float = 0.05,
    *,
    rule: Literal["first", "sustained"] = "sustained",
    impressions_per_step: int = 1,
    min_impressions: int = 1,
) -> int | None:
    """After how many impressions a run is significant, from a test's p after each step of the run.

    ``rule="first"``: the first step with p < alpha. Checking after every impression and stopping
    at the first crossing inflates the false-positive rate far beyond alpha (optional stopping),
    so the default ``rule="sustained"`` returns the step after which p stays < alpha to the end
    of the run (the run's horizon is part of the definition: report it).

    Args:
        p_values: the test's p after each step, in order (`prefix_sign_test_p`, `prefix_two_proportion_p`).
        alpha: the significance level.
        rule: "first" or "sustained" (above).
        impressions_per_step: impressions a step adds (`prefix_sign_test_p`: 1; `prefix_two_proportion_p`: 2).
        min_impressions: the fewest impressions a step must have reached to be considered.

    Returns:
        The impressions up to the step found; None when the run never (or not lastingly) reaches alpha.

    Raises:
        ValueError: ``rule`` is neither "first" nor "sustained" (checked once a step has p < alpha).
    """
    p = np.asarray(p_values, dtype=np.float64)
    steps = np.arange(1, len(p) + 1) * impressions_per_step
    ok = (p < alpha) & (steps >= min_impressions)
    if not ok.any():
        return None
    if rule == "first":
        return int(steps[int(np.argmax(ok))])
    if rule != "sustained":
        raise ValueError(f"rule must be 'first' or 'sustained', got {rule!r}")
    if not ok[-1]:
        return None
    bad = np.flatnonzero(~ok)
    return int(steps[0 if len(bad) == 0 else bad[-1] + 1])


@dataclass(frozen=True)
class DetectionSummary:
    """Impressions to significance over simulated runs: the median (inf when more than half the
    runs never got there within the horizon), the share of runs detected, the per-run values."""

    runs: int
    detected: int
    median: float
    per_run: tuple[int | None, ...]

    @property
    def share_detected(self) -> float:
        return self.detected / self.runs if self.runs else 0.0

    def power_at(self, impressions: float) -> float:
        """Share of runs significant within ``impressions``: the simulated power at that size."""
        hits = sum(1 for v in self.per_run if v is not None and v <= impressions)
        return hits / self.runs if self.runs else 0.0

    def impressions_for(self, power: float) -> float:
        """The fewest impressions within which at least a share ``power`` of the runs were
        significant (inf if that share never was). "A/B needs M impressions for the same power"
        as interleaving at N is ``ab.impressions_for(interleaving.power_at(N))``."""
        if not 0 < power <= 1:
            raise ValueError(f"power must be in (0, 1], got {power}")
        values = sorted(math.inf if v is None else float(v) for v in self.per_run)
        return values[math.ceil(power * len(values) - 1e-9) - 1] if values else math.inf


def detection_summary(per_run: Sequence[int | None]) -> DetectionSummary:
    """Median over runs of `impressions_to_significance`, an undetected run counting as
    infinitely many impressions (so the median is what half the runs reach: it is the number of
    impressions at which the test has 50 % power in the simulation)."""
    values = np.array([math.inf if v is None else float(v) for v in per_run])
    med = float(np.median(values)) if len(values) else math.inf
    return DetectionSummary(len(values), int(np.isfinite(values).sum()), med, tuple(per_run))


def ab_sample_size(p_control: float, p_experiment: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Total impressions (both arms, split equally) for a two-sided two-proportion z-test at
    level ``alpha`` to detect clicked-search rates ``p_control`` vs ``p_experiment`` with
    probability ``power`` (the normal approximation, e.g. Fleiss, Levin & Paik, Statistical
    Methods for Rates and Proportions, without continuity correction):
    n per arm = (z_{1−α/2} √(2 p̄ q̄) + z_{power} √(p1 q1 + p2 q2))² / (p1 − p2)²."""
    if p_control == p_experiment:
        raise ValueError("the rates must differ")
    za, zb = norm.isf(alpha / 2), norm.ppf(power)
    pbar = (p_control + p_experiment) / 2
    num = za * math.sqrt(2 * pbar * (1 - pbar)) + zb * math.sqrt(
        p_control * (1 - p_control) + p_experiment * (1 - p_experiment)
    )
    return 2 * math.ceil(num**2 / (p_control - p_experiment) ** 2)


def interleaving_sample_size(p_win_a: float, p_win_b: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Impressions for the two-sided sign test at level ``alpha`` to detect, with probability
    ``power``, rankers whose interleaved impressions are won by A with probability ``p_win_a``
    and by B with ``p_win_b`` (the rest tie or get no click). Normal approximation: with
    q = p_a / (p_a + p_b), the non-tied impressions needed are
    m = (z_{1−α/2} · 0.5 + z_{power} √(q (1 − q)))² / (q − 0.5)², and n = m / (p_a + p_b)."""
    s = p_win_a + p_win_b
    if s <= 0 or p_win_a == p_win_b:
        raise ValueError("need p_win_a != p_win_b and p_win_a + p_win_b > 0")
    q = p_win_a / s
    za, zb = norm.isf(alpha / 2), norm.ppf(power)
    m = (za * 0.5 + zb * math.sqrt(q * (1 - q))) ** 2 / (q - 0.5) ** 2
    return math.ceil(m / s)
