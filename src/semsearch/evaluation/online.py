"""Comparing rankers online: team-draft interleaving, A/B buckets, counterfactual estimates, power.

Pure functions on arrays; the service (``serve A --compare B``) and the simulation command wire
them to the event log. Four parts:

* **Team-draft interleaving** (Radlinski, Kurup & Joachims 2008, "How does clickthrough data
  reflect retrieval quality?", CIKM): `team_draft` / `team_draft_batch` merge two rankings,
  `credit` gives each click to the team that contributed the clicked document, and
  `interleaving_summary` aggregates impressions into per-query wins, the preference
  Δ_AB of Chapelle, Joachims, Radlinski & Yue 2012 ("Large-scale validation and analysis of
  interleaved search evaluation", TOIS) and a two-sided binomial sign test.
* **A/B buckets** in the 2020 semantic-retrieval paper's Table 7 layout (two control and two
  experiment buckets of live traffic, clicked-search rate per bucket): `bucket_of` hashes a user
  key to a bucket, `ab_table` gives the rate per bucket on all, head and tail queries with Wilson
  intervals and tests of experiment against control (two-proportion z-test over searches, and
  `clustered_rate_test` over users), as an `ABTable` with a Markdown rendering.
* **Counterfactual estimates** of a candidate ranker from logged clicks under a position-based
  examination model (Joachims, Swaminathan & Schnabel 2017; Wang et al. 2016):
  `counterfactual_estimate` gives IPS, self-normalised IPS and clipped IPS of an additive
  utility (DCG with click-relevance gains, or expected clicks), `counterfactual_difference` the
  paired difference of two candidates; `candidate_ranks` maps a candidate's rankings onto the log.
* **Power**: `prefix_sign_test_p`, `prefix_two_proportion_p` and `impressions_to_significance`
  find after how many impressions a simulated run reaches p < alpha; `detection_summary`
  reports the median over runs; `ab_sample_size` and `interleaving_sample_size` are the normal
  approximations.

Team codes are ``TEAM_A = 0`` and ``TEAM_B = 1``; ``NO_TEAM = -1`` marks empty positions.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy.stats import binom, binomtest, norm

__all__ = [
    "ABComparison",
    "ABTable",
    "BucketLayout",
    "CounterfactualEstimate",
    "DEFAULT_SALT",
    "DetectionSummary",
    "Estimate",
    "InterleavingSummary",
    "NO_TEAM",
    "Rate",
    "SEGMENTS",
    "TEAM_A",
    "TEAM_B",
    "ab_sample_size",
    "ab_table",
    "bucket_of",
    "candidate_ranks",
    "clustered_rate_test",
    "counterfactual_difference",
    "counterfactual_estimate",
    "credit",
    "detection_summary",
    "head_queries",
    "impressions_to_significance",
    "interleaving_sample_size",
    "interleaving_summary",
    "outcomes",
    "prefix_sign_test_p",
    "prefix_two_proportion_p",
    "rank_weights",
    "sign_test_p",
    "team_draft",
    "team_draft_batch",
    "two_proportion_ztest",
    "wilson_interval",
]

TEAM_A = 0
TEAM_B = 1
NO_TEAM = -1


# ---------------------------------------------------------------- team-draft interleaving


def _rounds(k: int) -> int:
    return (k + 1) // 2


def team_draft(a: Sequence[str], b: Sequence[str], k: int, rng: np.random.Generator) -> tuple[list[str], list[int]]:
    """Team-draft interleaving of rankings ``a`` and ``b`` cut to ``k`` (Radlinski et al. 2008, Alg. 2).

    The list is built in rounds. At the start of each round both teams have contributed equally
    many documents; a fair coin decides which team picks first, then the other picks. A team
    picks its highest-ranked document not already in the list (duplicates are skipped, so a
    document both rankers want goes to whichever picks it first). As in the paper's Algorithm 2,
    the merge stops, before any pick, as soon as either ranking has no document left that is not
    in the list (so the longer ranking never fills the page alone), or at ``k`` documents.

    Randomness: exactly ``ceil(k / 2)`` coins are drawn, up front, as
    ``rng.integers(0, 2, size=ceil(k / 2))``; coin 1 means A picks first in that round. So the
    result depends only on the inputs and the generator's state, and `team_draft_batch` on one
    row with the same generator gives the same list.

    Why it is fair: within a round each team contributes one document and the order is a coin
    toss, so when A and B rank identically a click is equally likely to credit either team
    (the test of this is in tests/unit/test_online.py).

    Returns the interleaved document ids and, per position, the team that contributed it
    (`TEAM_A` or `TEAM_B`).
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    coins = rng.integers(0, 2, size=_rounds(k))
    shown: list[str] = []
    teams: list[int] = []
    seen: set[str] = set()
    ia = ib = 0
    for t in range(k):
        while ia < len(a) and a[ia] in seen:
            ia += 1
        while ib < len(b) and b[ib] in seen:
            ib += 1
        if ia == len(a) or ib == len(b):
            break
        first = TEAM_A if coins[t // 2] == 1 else TEAM_B
        team = first if t % 2 == 0 else 1 - first
        doc = a[ia] if team == TEAM_A else b[ib]
        shown.append(doc)
        teams.append(team)
        seen.add(doc)
    return shown, teams


def _advance(lists: np.ndarray, ptr: np.ndarray, shown: np.ndarray) -> np.ndarray:
    """Move each row's pointer past documents already in ``shown`` (rows x positions so far)."""
    if shown.shape[1] == 0:
        return ptr
    width = lists.shape[1]
    ptr = ptr.copy()
    # a pointer sits on the first document not shown before the last pick, so at first only that
    # pick can be a duplicate; after a step any earlier document can be, for the rows that moved
    cur = lists[np.arange(len(ptr)), np.minimum(ptr, width - 1)]
    idx = np.flatnonzero((ptr < width) & (cur >= 0) & (cur == shown[:, -1]))
    while len(idx):
        ptr[idx] += 1
        cur = lists[idx, np.minimum(ptr[idx], width - 1)]
        idx = idx[(ptr[idx] < width) & (cur >= 0) & (shown[idx] == cur[:, None]).any(axis=1)]
    return ptr


def team_draft_batch(a: np.ndarray, b: np.ndarray, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`team_draft` for many impressions at once, on integer document codes.

    ``a`` and ``b``: (n, La) and (n, Lb) non-negative document codes, each row one impression's
    ranking, padded on the right with -1. Draws ``rng.integers(0, 2, size=(n, ceil(k / 2)))``
    (row i's coins are row i's rounds, as in `team_draft`). Returns ``ids`` (n, k) int64 and
    ``teams`` (n, k) int8, both -1 where a row's list ended early. The loop runs over the k
    positions; each position is numpy work over all rows.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[0]:
        raise ValueError(f"a and b must be (n, L) arrays with the same n, got {a.shape} and {b.shape}")
    n = a.shape[0]
    coins = rng.integers(0, 2, size=(n, _rounds(k)))
    ids = np.full((n, k), -1, dtype=np.int64)
    teams = np.full((n, k), NO_TEAM, dtype=np.int8)
    if a.shape[1] == 0 or b.shape[1] == 0:
        return ids, teams
    rows = np.arange(n)
    pa = np.zeros(n, dtype=np.int64)
    pb = np.zeros(n, dtype=np.int64)
    active = np.ones(n, dtype=bool)
    for t in range(k):
        pa = _advance(a, pa, ids[:, :t])
        pb = _advance(b, pb, ids[:, :t])
        ca = a[rows, np.minimum(pa, a.shape[1] - 1)]
        cb = b[rows, np.minimum(pb, b.shape[1] - 1)]
        active &= (pa < a.shape[1]) & (ca >= 0) & (pb < b.shape[1]) & (cb >= 0)
        if not active.any():
            break
        first = np.where(coins[:, t // 2] == 1, TEAM_A, TEAM_B)
        team = first if t % 2 == 0 else 1 - first
        ids[active, t] = np.where(team == TEAM_A, ca, cb)[active]
        teams[active, t] = team[active]
    return ids, teams


def credit(teams: np.ndarray, clicks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Clicks credited to A and to B per impression: a click on a document credits the team that
    contributed it (Radlinski et al. 2008).

    ``teams``: (n, k) or (k,) team codes per position (-1 = empty); ``clicks``: same shape, bool
    or click counts (a document clicked twice counts twice). Clicks on empty positions count for
    nobody. Returns two int64 arrays of length n (a scalar impression gives arrays of length 1).
    """
    t = np.atleast_2d(np.asarray(teams))
    c = np.atleast_2d(np.asarray(clicks)).astype(np.int64)
    if t.shape != c.shape:
        raise ValueError(f"teams and clicks must have the same shape, got {t.shape} and {c.shape}")
    return (c * (t == TEAM_A)).sum(axis=1), (c * (t == TEAM_B)).sum(axis=1)


def outcomes(clicks_a: np.ndarray, clicks_b: np.ndarray) -> np.ndarray:
    """Per impression +1 (A wins: more clicks credited to A), -1 (B wins) or 0 (tie, including
    impressions without clicks), int8."""
    return np.sign(np.asarray(clicks_a, dtype=np.int64) - np.asarray(clicks_b, dtype=np.int64)).astype(np.int8)


def sign_test_p(wins_a: int, wins_b: int) -> float:
    """Two-sided binomial sign test of wins_a vs wins_b under H0 P(A wins | not tied) = 1/2
    (scipy.stats.binomtest); 1.0 when there is nothing to test."""
    n = int(wins_a) + int(wins_b)
    return 1.0 if n == 0 else float(binomtest(int(wins_a), n, 0.5).pvalue)


@dataclass(frozen=True)
class InterleavingSummary:
    """Interleaving outcome over impressions (see `interleaving_summary` for the definitions)."""

    n_impressions: int
    n_clicked: int
    wins_a: int
    wins_b: int
    ties: int
    delta: float
    p_value: float
    per_query: dict[str, tuple[int, int, int]]
    query_wins_a: int
    query_wins_b: int
    query_ties: int
    query_p_value: float
    bootstrap_ci: tuple[float, float] | None = None
    bootstrap_p: float | None = None

    @property
    def winner(self) -> Literal["A", "B", "tie"]:
        """The ranker preferred by Δ_AB (without regard to significance)."""
        return "A" if self.delta > 0 else "B" if self.delta < 0 else "tie"

    def to_markdown(self, a: str = "A", b: str = "B") -> str:
        """One-row table (``a`` vs ``b``) with a footnote defining the columns."""
        header = ["Comparison", "Impressions", "With clicks", f"{a} wins", f"{b} wins", "Ties", "Δ_AB", "p"]
        header += [f"Queries won {a} / {b} / tied", "p (queries)"]
        row = [f"{a} vs {b}", f"{self.n_impressions:,}", f"{self.n_clicked:,}", f"{self.wins_a:,}"]
        row += [f"{self.wins_b:,}", f"{self.ties:,}", f"{self.delta:+.4f}", f"{self.p_value:.3g}"]
        row += [f"{self.query_wins_a:,} / {self.query_wins_b:,} / {self.query_ties:,}", f"{self.query_p_value:.3g}"]
        if self.bootstrap_ci is not None:
            header += ["Δ_AB interval (query bootstrap)", "p (bootstrap)"]
            row += [f"{self.bootstrap_ci[0]:+.4f} – {self.bootstrap_ci[1]:+.4f}", f"{self.bootstrap_p:.3g}"]
        lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1), "| " + " | ".join(row) + " |"]
        note = (
            "Team-draft interleaving (Radlinski et al. 2008): a click credits the ranker that contributed "
            "the document; an impression with clicks is won by the ranker with more credited clicks. "
            "Δ_AB = (wins + ties / 2) / impressions with clicks − 0.5 (Chapelle et al. 2012), > 0 when "
            f"{a} is preferred; p: two-sided binomial sign test over non-tied impressions; queries are won "
            "by the ranker with more impression wins, p (queries): sign test over non-tied queries."
        )
        return "\n".join(lines) + "\n\n" + note + "\n"

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "per_query"}
        d["per_query"] = {q: {"wins_a": w[0], "wins_b": w[1], "ties": w[2]} for q, w in self.per_query.items()}
        return d


def _delta(wins_a: np.ndarray | float, ties: np.ndarray | float, clicked: np.ndarray | float) -> Any:
    with np.errstate(invalid="ignore", divide="ignore"):
        d = (np.asarray(wins_a, dtype=np.float64) + 0.5 * np.asarray(ties)) / np.asarray(clicked) - 0.5
    return np.where(np.asarray(clicked) > 0, d, 0.0)


def interleaving_summary(
    clicks_a: np.ndarray,
    clicks_b: np.ndarray,
    queries: Sequence[str] | np.ndarray | None = None,
    *,
    bootstrap: int = 0,
    rng: np.random.Generator | None = None,
    confidence: float = 0.95,
) -> InterleavingSummary:
    """Aggregate interleaved impressions (credited clicks per impression, from `credit`).

    * An impression with clicks is a win for A when A's credited clicks exceed B's, a win for B
      in the reverse case, a tie otherwise. Impressions without clicks express no preference and
      are left out of everything but ``n_impressions``, as in Chapelle et al. 2012.
    * ``delta`` = Δ_AB = (wins_A + ties / 2) / (wins_A + wins_B + ties) − 0.5 (Chapelle et al.
      2012): in [−0.5, 0.5], > 0 when A is preferred.
    * ``p_value``: two-sided binomial sign test of wins_A against wins_B over the non-tied
      impressions (scipy.stats.binomtest, H0: each non-tied impression is won by A with
      probability 1/2, which holds when A and B are equally good because team-draft is fair).
      Impressions are treated as independent; when a few queries dominate the traffic, the
      per-query aggregates below are the more conservative view.
    * ``per_query``: query -> (wins_A, wins_B, ties) over its impressions with clicks. A query is
      won by the ranker with more impression wins (Radlinski et al. 2008 aggregate per query the
      same way); ``query_p_value`` is the sign test over the non-tied queries.
    * ``bootstrap_ci`` and ``bootstrap_p``: the query bootstrap resamples queries with
      replacement (their impressions travel together, so correlation within a query is kept) and
      reports the percentile interval of Δ_AB and a two-sided bootstrap p: twice the smaller
      share of resampled Δ_AB at or below / at or above 0, capped at 1.

    Everything is counted with numpy over the arrays.

    Args:
        clicks_a: clicks credited to A per impression, 1-D.
        clicks_b: clicks credited to B per impression, 1-D, as long as ``clicks_a``.
        queries: each impression's query (None: all impressions belong to one query "").
        bootstrap: how many times the query bootstrap resamples (0: no bootstrap, its fields None).
        rng: the bootstrap's random generator (None: ``np.random.default_rng(0)``).
        confidence: the bootstrap interval's confidence level, in (0, 1).

    Returns:
        The ``InterleavingSummary`` with the fields above.

    Raises:
        ValueError: ``clicks_a``, ``clicks_b`` and ``queries`` are not 1-D with one entry per impression.
    """
    ca = np.asarray(clicks_a, dtype=np.int64)
    cb = np.asarray(clicks_b, dtype=np.int64)
    if ca.shape != cb.shape or ca.ndim != 1:
        raise ValueError(f"clicks_a and clicks_b must be 1-D of the same length, got {ca.shape} and {cb.shape}")
    n = ca.shape[0]
    qs = np.zeros(n, dtype=np.int64) if queries is None else np.asarray(queries)
    if qs.shape != (n,):
        raise ValueError(f"queries must have one entry per impression ({n}), got shape {qs.shape}")
    names, inverse = np.unique(qs, return_inverse=True)
    if queries is None:
        names = np.array([""])
    o = outcomes(ca, cb)
    clicked = (ca + cb) > 0
    nq = len(names)
    qa = np.bincount(inverse, weights=o == 1, minlength=nq).astype(np.int64)
    qb = np.bincount(inverse, weights=o == -1, minlength=nq).astype(np.int64)
    qt = np.bincount(inverse, weights=clicked & (o == 0), minlength=nq).astype(np.int64)
    wins_a, wins_b, ties = int(qa.sum()), int(qb.sum()), int(qt.sum())
    n_clicked = wins_a + wins_b + ties
    query_a, query_b = int((qa > qb).sum()), int((qb > qa).sum())
    query_t = int(((qa == qb) & (qa + qb + qt > 0)).sum())
    boot_ci: tuple[float, float] | None = None
    boot_p: float | None = None
    if bootstrap > 0:
        gen = rng if rng is not None else np.random.default_rng(0)
        qc = qa + qb + qt
        deltas = np.empty(bootstrap)
        chunk = max(1, 2_000_000 // max(nq, 1))
        for s in range(0, bootstrap, chunk):
            m = min(chunk, bootstrap - s)
            w = gen.multinomial(nq, np.full(nq, 1.0 / nq), size=m)
            deltas[s : s + m] = _delta(w @ qa, w @ qt, w @ qc)
        tail = (1.0 - confidence) / 2.0
        lo, hi = np.quantile(deltas, [tail, 1.0 - tail])
        boot_ci = (float(lo), float(hi))
        boot_p = float(min(1.0, 2.0 * min((deltas <= 0).mean(), (deltas >= 0).mean())))
    return InterleavingSummary(
        n_impressions=n,
        n_clicked=n_clicked,
        wins_a=wins_a,
        wins_b=wins_b,
        ties=ties,
        delta=float(_delta(wins_a, ties, n_clicked)),
        p_value=sign_test_p(wins_a, wins_b),
        per_query={str(q): (int(x), int(y), int(z)) for q, x, y, z in zip(names, qa, qb, qt) if x + y + z > 0},
        query_wins_a=query_a,
        query_wins_b=query_b,
        query_ties=query_t,
        query_p_value=sign_test_p(query_a, query_b),
        bootstrap_ci=boot_ci,
        bootstrap_p=boot_p,
    )


# ---------------------------------------------------------------- power


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


# ---------------------------------------------------------------- A/B buckets (2020 paper, Table 7)


DEFAULT_SALT = "semsearch-ab"


def bucket_of(keys: Sequence[str] | np.ndarray, n_buckets: int = 4, salt: str = DEFAULT_SALT) -> np.ndarray:
    """Bucket of each user key: the first 8 bytes of BLAKE2b(salt + NUL + key), as an unsigned
    big-endian integer, mod ``n_buckets`` (int64 array).

    Stable: the same key, salt and number of buckets give the same bucket on every machine and
    run (no process-seeded ``hash()``); a new salt reshuffles users for a new experiment. The
    64-bit digest is uniform, so buckets are balanced up to a bias of n_buckets / 2^64. Each
    distinct key is hashed once."""
    if n_buckets < 1:
        raise ValueError(f"n_buckets must be >= 1, got {n_buckets}")
    names, inverse = np.unique(np.asarray(keys, dtype=str), return_inverse=True)
    prefix = salt.encode() + b"\0"
    digests = np.fromiter(
        (
            int.from_bytes(hashlib.blake2b(prefix + str(k).encode(), digest_size=8).digest(), "big") % n_buckets
            for k in names
        ),
        dtype=np.int64,
        count=len(names),
    )
    return digests[inverse.reshape(-1)]


def head_queries(queries: Sequence[str] | np.ndarray, share: float = 0.5) -> set[str]:
    """The head: the most frequent queries, taken in order of frequency (ties by query string),
    until they cover at least ``share`` of all searches; the rest is the tail. So with
    ``share=0.5`` the head is the smallest set of top queries making up half the traffic."""
    if not 0 <= share <= 1:
        raise ValueError(f"share must be in [0, 1], got {share}")
    names, counts = np.unique(np.asarray(queries, dtype=str), return_counts=True)
    if len(names) == 0 or share == 0:
        return set()
    order = np.lexsort((names, -counts))  # count descending, then query ascending
    covered = np.cumsum(counts[order])
    n_head = int(np.searchsorted(covered, share * covered[-1] - 1e-9)) + 1
    return {str(q) for q in names[order[:n_head]]}


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (Wilson 1927; Agresti & Coull 1998):
    (p̂ + z²/2n ± z √(p̂(1 − p̂)/n + z²/4n²)) / (1 + z²/n), with z the two-sided normal quantile.
    Unlike the Wald interval it stays inside [0, 1] and covers well near 0 and 1. (0, 1) for n = 0."""
    if n == 0:
        return 0.0, 1.0
    z = float(norm.isf((1 - confidence) / 2))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # at p̂ = 0 (p̂ = 1) the lower (upper) bound is exactly 0 (1); say so rather than round
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def clustered_rate_test(
    clicked: np.ndarray, users: np.ndarray, control: np.ndarray, experiment: np.ndarray
) -> tuple[float, float]:
    """Experiment vs control clicked-search rate with users, the unit of randomisation, as the
    unit of analysis: a user's searches share the user's habits, so they are not independent
    and the search-level z-test understates the variance when users search several times.

    Each arm's rate R = Σ_u x_u / Σ_u n_u (x_u clicked searches, n_u searches of user u in the
    arm) gets the delta-method variance of a ratio of means, Var(R) ≈ s²(x_u − R n_u) / (N n̄²)
    over the arm's N users (Deng, Knoblich & Lu 2018, "Applying the delta method in metric
    analytics", KDD); z = (R_e − R_c) / √(Var_e + Var_c), two-sided normal p. ``users``: an
    integer code per search; ``control``/``experiment``: bool masks of the searches. Returns
    (z, p); (0, 1) when an arm has fewer than two users or no variance."""
    c = np.asarray(clicked, dtype=np.float64)
    u = np.asarray(users)

    def arm(sel: np.ndarray) -> tuple[float, float]:
        _, inv = np.unique(u[sel], return_inverse=True)
        x = np.bincount(inv.reshape(-1), weights=c[sel])
        n = np.bincount(inv.reshape(-1)).astype(np.float64)
        if len(n) < 2:
            return 0.0, math.inf
        r = float(x.sum() / n.sum())
        return r, float((x - r * n).var(ddof=1) / (len(n) * n.mean() ** 2))

    (rc, vc), (re, ve) = arm(np.asarray(control, dtype=bool)), arm(np.asarray(experiment, dtype=bool))
    se = math.sqrt(vc + ve)
    if not 0 < se < math.inf:
        return 0.0, 1.0
    z = (re - rc) / se
    return z, float(2 * norm.sf(abs(z)))


def two_proportion_ztest(x_control: int, n_control: int, x_experiment: int, n_experiment: int) -> tuple[float, float]:
    """Two-sided two-proportion z-test with the pooled rate: z = (p_e − p_c) / √(p (1 − p)
    (1/n_c + 1/n_e)). Returns (z, p); (0, 1) when a group is empty or the pooled rate is 0 or 1."""
    if n_control == 0 or n_experiment == 0:
        return 0.0, 1.0
    pooled = (x_control + x_experiment) / (n_control + n_experiment)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_control + 1 / n_experiment))
    if se == 0:
        return 0.0, 1.0
    z = (x_experiment / n_experiment - x_control / n_control) / se
    return z, float(2 * norm.sf(abs(z)))


@dataclass(frozen=True)
class BucketLayout:
    """How user keys map to buckets and which buckets are control and which experiment. The
    default is the 2020 paper's Table 7: four buckets, two control, two experiment."""

    n_buckets: int = 4
    control: tuple[int, ...] = (0, 1)
    experiment: tuple[int, ...] = (2, 3)
    salt: str = DEFAULT_SALT

    def __post_init__(self) -> None:
        used = self.control + self.experiment
        if len(set(used)) != len(used) or not all(0 <= b < self.n_buckets for b in used):
            raise ValueError(f"control {self.control} and experiment {self.experiment} must be distinct buckets")
        if not self.control or not self.experiment:
            raise ValueError("need at least one control and one experiment bucket")

    def name(self, bucket: int) -> str:
        """``control 1``, ``control 2``, ``experiment 1``, ...; ``unused 4`` for the others."""
        for role, group in (("control", self.control), ("experiment", self.experiment)):
            if bucket in group:
                return f"{role} {group.index(bucket) + 1}"
        return f"unused {bucket}"

    def arm(self, keys: Sequence[str] | np.ndarray) -> np.ndarray:
        """Per key 0 (control), 1 (experiment) or -1 (a bucket in neither): which ranker serves it."""
        b = bucket_of(keys, self.n_buckets, self.salt)
        out = np.full(b.shape, -1, dtype=np.int8)
        out[np.isin(b, self.control)] = 0
        out[np.isin(b, self.experiment)] = 1
        return out


SEGMENTS = ("all", "head", "tail")


@dataclass(frozen=True)
class Rate:
    """Clicked-search rate of a group of searches, with its Wilson interval."""

    searches: int
    clicked: int
    low: float
    high: float

    @property
    def rate(self) -> float:
        return self.clicked / self.searches if self.searches else 0.0

    @classmethod
    def of(cls, clicked: int, searches: int, confidence: float) -> Rate:
        return cls(searches, clicked, *wilson_interval(clicked, searches, confidence))


@dataclass(frozen=True)
class ABComparison:
    """Experiment vs control (or control 1 vs control 2, the A/A check) on one segment:
    difference and relative lift of the clicked-search rate; ``z`` and ``p`` of the pooled
    two-proportion z-test with searches as the unit, ``z_users`` and ``p_users`` of the same
    difference with users as the unit (`clustered_rate_test`)."""

    segment: str
    label: str
    control: Rate
    experiment: Rate
    z: float
    p: float
    z_users: float = 0.0
    p_users: float = 1.0

    @property
    def difference(self) -> float:
        return self.experiment.rate - self.control.rate

    @property
    def lift(self) -> float:
        return self.difference / self.control.rate if self.control.rate else math.inf


@dataclass(frozen=True)
class ABTable:
    """Clicked-search rate per bucket and segment (all / head / tail queries) and the tests; the
    2020 paper's Table 7 layout with head and tail columns added. Render with `to_markdown`."""

    layout: BucketLayout
    rows: dict[str, dict[str, Rate]]
    comparisons: tuple[ABComparison, ...]
    head_share: float
    n_head_queries: int
    n_queries: int
    confidence: float

    def to_markdown(self) -> str:
        """Rows = buckets then the pooled arms, columns = clicked-search rate (%) with its
        interval per segment; then the tests and a footnote with the definitions."""
        pct = round(self.confidence * 100)
        header = ["Bucket", "Searches"]
        for seg in SEGMENTS:
            name = "Clicked-search rate" if seg == "all" else f"{seg.capitalize()} queries"
            header += [name, f"{pct} % CI"]
        lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
        for label, cells in self.rows.items():
            row = [label, f"{cells['all'].searches:,}"]
            for seg in SEGMENTS:
                r = cells[seg]
                row += [f"{100 * r.rate:.2f} %", f"{100 * r.low:.2f}–{100 * r.high:.2f}"]
            lines.append("| " + " | ".join(row) + " |")
        tests = [
            "| Test | Segment | Δ rate (points) | Lift | z | p | z (users) | p (users) |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for c in self.comparisons:
            test = [c.label, c.segment, f"{100 * c.difference:+.2f}", f"{100 * c.lift:+.2f} %", f"{c.z:.2f}"]
            test += [f"{c.p:.3g}", f"{c.z_users:.2f}", f"{c.p_users:.3g}"]
            tests.append("| " + " | ".join(test) + " |")
        note = (
            "Clicked-search rate: share of searches with at least one click; intervals are Wilson score "
            f"intervals at {pct} %. Head: the most frequent queries (ties by query) that together make up "
            f"{100 * self.head_share:g} % of all searches ({self.n_head_queries:,} of {self.n_queries:,} "
            "distinct queries); tail: the rest. Tests, experiment buckets pooled against control buckets "
            "pooled and the control buckets against each other (A/A): two-sided two-proportion z-test "
            "(pooled) with searches as the unit, and with users as the unit (delta method, per-user "
            "clicked and total searches), which allows for searches of one user being alike. "
            f"Users are assigned by BLAKE2b of their key with salt {self.layout.salt!r} "
            f"mod {self.layout.n_buckets}."
        )
        return "\n".join(lines) + "\n\n" + "\n".join(tests) + "\n\n" + note + "\n"

    def to_json(self) -> dict[str, Any]:
        def rate(r: Rate) -> dict[str, Any]:
            return {"searches": r.searches, "clicked": r.clicked, "rate": r.rate, "low": r.low, "high": r.high}

        return {
            "layout": {
                "n_buckets": self.layout.n_buckets,
                "control": list(self.layout.control),
                "experiment": list(self.layout.experiment),
                "salt": self.layout.salt,
            },
            "confidence": self.confidence,
            "head_share": self.head_share,
            "n_head_queries": self.n_head_queries,
            "n_queries": self.n_queries,
            "rows": {label: {s: rate(r) for s, r in cells.items()} for label, cells in self.rows.items()},
            "comparisons": [
                {
                    "label": c.label,
                    "segment": c.segment,
                    "control": rate(c.control),
                    "experiment": rate(c.experiment),
                    "difference": c.difference,
                    "lift": c.lift,
                    "z": c.z,
                    "p": c.p,
                    "z_users": c.z_users,
                    "p_users": c.p_users,
                }
                for c in self.comparisons
            ],
        }


def ab_table(
    user_keys: Sequence[str] | np.ndarray,
    queries: Sequence[str] | np.ndarray,
    clicks: np.ndarray,
    layout: BucketLayout | None = None,
    *,
    head_share: float = 0.5,
    confidence: float = 0.95,
) -> ABTable:
    """The A/B table of a search log: one entry per search, with the user's key, the query and its clicks.

    Per bucket, and pooled per arm, the clicked-search rate (share of searches with at least one
    click; the 2020 paper's Table 7 metric) with Wilson intervals, on all searches, head queries
    and tail queries (`head_queries` over the whole log, so the split is the same in every
    bucket). Comparisons: experiment arm vs control arm on each segment, and control 1 vs
    control 2 (an A/A check: with a sound assignment and a valid test it is significant in
    about 5 % of logs) when there are two or more control buckets; each by the search-level
    `two_proportion_ztest` and by the user-level `clustered_rate_test`, the one to trust when
    users search several times. Searches of unused buckets are left out.

    Args:
        user_keys: each search's user key, bucketed by `bucket_of` with the layout's salt.
        queries: each search's query.
        clicks: each search's number of clicks (or a bool: clicked).
        layout: the buckets and which are control and experiment (None: ``BucketLayout()``).
        head_share: the share of all searches the head queries make up (`head_queries`), in [0, 1].
        confidence: the Wilson intervals' confidence level, in (0, 1).

    Returns:
        The ``ABTable`` of rates and tests.

    Raises:
        ValueError: ``user_keys``, ``queries`` and ``clicks`` differ in length, or ``head_share`` is out of [0, 1].
    """
    lay = layout if layout is not None else BucketLayout()
    qs = np.asarray(queries, dtype=str)
    clicked = np.asarray(clicks) > 0
    if len(qs) != len(clicked) or len(user_keys) != len(clicked):
        raise ValueError(
            f"user_keys, queries and clicks need one entry per search, got {len(user_keys)}, {len(qs)}, {len(clicked)}"
        )
    bucket = bucket_of(user_keys, lay.n_buckets, lay.salt)
    head = head_queries(qs, head_share)
    is_head = np.isin(qs, np.array(sorted(head), dtype=str))
    masks = {"all": np.ones(len(qs), dtype=bool), "head": is_head, "tail": ~is_head}

    def rates(sel: np.ndarray) -> dict[str, Rate]:
        return {s: Rate.of(int((clicked & sel & m).sum()), int((sel & m).sum()), confidence) for s, m in masks.items()}

    rows = {lay.name(b): rates(bucket == b) for b in lay.control + lay.experiment}
    arms = {"control": np.isin(bucket, lay.control), "experiment": np.isin(bucket, lay.experiment)}
    if len(lay.control) > 1 or len(lay.experiment) > 1:
        rows.update({f"{arm} (all)": rates(sel) for arm, sel in arms.items()})
    ctrl, exp = rates(arms["control"]), rates(arms["experiment"])
    _, users = np.unique(np.asarray(user_keys, dtype=str), return_inverse=True)
    users = users.reshape(-1)
    comps = []
    for s in SEGMENTS:
        z, p = two_proportion_ztest(ctrl[s].clicked, ctrl[s].searches, exp[s].clicked, exp[s].searches)
        zu, pu = clustered_rate_test(clicked, users, arms["control"] & masks[s], arms["experiment"] & masks[s])
        comps.append(ABComparison(s, "experiment vs control", ctrl[s], exp[s], z, p, zu, pu))
    if len(lay.control) > 1:
        b1, b2 = lay.control[0], lay.control[1]
        c1, c2 = rows[lay.name(b1)]["all"], rows[lay.name(b2)]["all"]
        z, p = two_proportion_ztest(c1.clicked, c1.searches, c2.clicked, c2.searches)
        zu, pu = clustered_rate_test(clicked, users, bucket == b1, bucket == b2)
        comps.append(ABComparison("all", "control 2 vs control 1 (A/A)", c1, c2, z, p, zu, pu))
    return ABTable(lay, rows, tuple(comps), head_share, len(head), int(len(np.unique(qs))), confidence)


# ---------------------------------------------------------------- counterfactual estimates


def candidate_ranks(
    queries: Sequence[str] | np.ndarray,
    shown: Sequence[Sequence[str | None]] | np.ndarray,
    rankings: Mapping[str, Sequence[str]],
) -> np.ndarray:
    """Where the candidate ranks each logged document: (n, K) int32, entry (i, j) the 1-based
    rank of ``shown[i][j]`` in ``rankings[queries[i]]``, 0 when the candidate does not rank it,
    the query has no ranking, or nothing was shown there (None or ""). ``shown`` may be ragged
    (rows shorter than K are padded); K is the longest row. One dictionary per distinct query."""
    qs = np.asarray(queries, dtype=str)
    rows = [list(r) for r in shown]
    if len(rows) != len(qs):
        raise ValueError(f"queries and shown need one entry per impression, got {len(qs)} and {len(rows)}")
    width = max((len(r) for r in rows), default=0)
    out = np.zeros((len(rows), width), dtype=np.int32)
    names, inverse = np.unique(qs, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(names) + 1))
    for g, q in enumerate(names):
        ranking = rankings.get(str(q))
        if not ranking:
            continue
        rank_of: dict[str | None, int] = {}
        for r, d in enumerate(ranking, start=1):
            rank_of.setdefault(d, r)
        for i in order[bounds[g] : bounds[g + 1]]:
            row = rows[i]
            out[i, : len(row)] = [rank_of.get(d, 0) if d else 0 for d in row]
    return out


def rank_weights(
    metric: str | Sequence[float] | np.ndarray, k: int, examination: np.ndarray | None = None
) -> np.ndarray:
    """λ by candidate rank, as an array indexed by rank (entry 0, "not ranked", is 0; ranks
    beyond ``k`` weigh 0): ``"dcg"`` λ(r) = 1 / log2(1 + r); ``"clicks"`` λ(r) = ρ_r, the
    examination probability of rank r (``examination``, ranks beyond it weigh 0); or the
    weights λ(1..k) themselves."""
    lam = np.zeros(k + 1)
    r = np.arange(1, k + 1)
    if isinstance(metric, str):
        if metric == "dcg":
            lam[1:] = 1.0 / np.log2(1.0 + r)
        elif metric == "clicks":
            if examination is None or np.ndim(examination) != 1:
                raise ValueError("metric 'clicks' needs the examination probability per rank (1-D)")
            m = min(k, len(examination))
            lam[1 : m + 1] = np.asarray(examination, dtype=np.float64)[:m]
        else:
            raise ValueError(f"metric must be 'dcg', 'clicks' or an array of weights, got {metric!r}")
    else:
        w = np.asarray(metric, dtype=np.float64)
        if w.shape != (k,):
            raise ValueError(f"weights must have one entry per rank 1..{k}, got shape {w.shape}")
        lam[1:] = w
    return lam


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its standard error over impressions."""

    value: float
    se: float

    def z(self, reference: float = 0.0) -> float:
        """(value − reference) / se; ±inf (0 at the reference) when the standard error is 0."""
        d = self.value - reference
        if self.se > 0:
            return d / self.se
        return 0.0 if d == 0 else math.copysign(math.inf, d)


@dataclass(frozen=True)
class CounterfactualEstimate:
    """IPS, self-normalised IPS and clipped IPS of one candidate (or, from
    `counterfactual_difference`, of candidate A minus candidate B) on one log; see
    `counterfactual_estimate` for the estimands."""

    metric: str
    k: int
    clip: float
    ips: Estimate
    snips: Estimate
    clipped: Estimate
    n_impressions: int
    n_clicks: int
    coverage: float

    def p_value(self, estimator: Literal["ips", "snips", "clipped"] = "ips") -> float:
        """Two-sided normal p of the estimate against 0 (for a difference: of no difference)."""
        est: Estimate = getattr(self, estimator)
        return float(2 * norm.sf(abs(est.z()))) if est.se > 0 else float(est.value == 0)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: getattr(self, k) for k in ("metric", "k", "clip", "n_impressions", "n_clicks")}
        d["coverage"] = self.coverage
        for name in ("ips", "snips", "clipped"):
            est: Estimate = getattr(self, name)
            d[name] = {"value": est.value, "se": est.se}
        return d


def _inverse_propensity(clicks: np.ndarray, propensity: np.ndarray) -> np.ndarray:
    prop = np.asarray(propensity, dtype=np.float64)
    if prop.ndim not in (1, 2) or prop.shape[-1] < clicks.shape[1]:
        raise ValueError(f"propensities of shape {prop.shape} for a log of shape {clicks.shape}")
    rho = np.broadcast_to(prop[..., : clicks.shape[1]], clicks.shape)
    if ((rho <= 0) & (clicks > 0)).any():
        raise ValueError("a click at a position with propensity <= 0: the examination model cannot explain the log")
    inv = np.zeros(clicks.shape)
    np.divide(1.0, rho, out=inv, where=rho > 0)
    return inv


def _terms(
    clicks: np.ndarray, inv: np.ndarray, ranks: np.ndarray, lam: np.ndarray, clip: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per impression: Σ c λ / ρ, Σ c / ρ (the self-normaliser), Σ c λ min(1/ρ, clip)."""
    r = np.asarray(ranks)
    if r.shape != clicks.shape:
        raise ValueError(f"ranks must have the log's shape {clicks.shape}, got {r.shape}")
    w = lam[np.clip(r, 0, len(lam) - 1) * (r < len(lam))]
    cw = clicks * w
    return (cw * inv).sum(axis=1), (clicks * inv).sum(axis=1), (cw * np.minimum(inv, clip)).sum(axis=1)


def _mean(x: np.ndarray) -> Estimate:
    n = len(x)
    return Estimate(float(x.mean()) if n else 0.0, float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else math.inf)


def _ratio(x: np.ndarray, y: np.ndarray) -> Estimate:
    """Σx / Σy with the delta-method standard error √(Var(x − R y) / n) / ȳ."""
    n, ybar = len(x), float(y.mean()) if len(y) else 0.0
    if ybar == 0:
        return Estimate(0.0, math.inf)
    ratio = float(x.sum() / y.sum())
    se = float((x - ratio * y).std(ddof=1) / math.sqrt(n) / ybar) if n > 1 else math.inf
    return Estimate(ratio, se)


def _prepare(
    clicks: np.ndarray, propensity: np.ndarray, metric: str | Sequence[float] | np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    c = np.asarray(clicks)
    if c.ndim != 2:
        raise ValueError(f"clicks must be (impressions, positions), got shape {c.shape}")
    c = c.astype(np.float64)
    prop = np.asarray(propensity, dtype=np.float64)
    lam = rank_weights(metric, k, prop if prop.ndim == 1 else None)
    return c, _inverse_propensity(c, prop), lam, metric if isinstance(metric, str) else "weights"


def counterfactual_estimate(
    clicks: np.ndarray,
    propensity: np.ndarray,
    ranks: np.ndarray,
    *,
    metric: str | Sequence[float] | np.ndarray = "dcg",
    k: int = 10,
    clip: float = 10.0,
) -> CounterfactualEstimate:
    """Offline estimate of a candidate ranker's utility from a click log under the position-based
    examination model (Joachims, Swaminathan & Schnabel 2017, "Unbiased learning-to-rank with
    biased feedback", WSDM; Wang, Bendersky, Metzler & Najork 2016, "Learning to rank with
    selection bias in personal search", SIGIR).

    Model: P(c_ij = 1) = ρ_ij γ_ij, where ρ_ij is the examination probability of the logged
    position and γ_ij = P(click | examined) is the document's click-relevance for the query.

    Estimand (``metric`` sets λ, `rank_weights`): with r_ij the candidate's rank of the document
    shown at (i, j),

        U = (1/n) Σ_i Σ_j λ(r_ij) γ_ij,

    the average over the logged impressions of an additive utility of the candidate's ranking
    (Joachims et al. 2017's additive ranking metrics). ``"dcg"``: DCG@k with gain γ,
    λ(r) = 1/log2(1 + r); ``"clicks"``: λ(r) = ρ_r, the expected number of clicks on the
    candidate's top k (of the logged documents) if it served the same impressions to users with
    the same examination (requires 1-D propensities). Only
    documents the logger showed enter: a document the candidate ranks but the log never showed
    has unknown γ and counts as 0, so compare candidates on documents the logger covers
    (``coverage``: the share of clicks on documents the candidate ranks within k).

    * ``ips``: Σ_i Σ_j c_ij λ(r_ij) / ρ_ij / n. Unbiased for U given the impressions, because
      E[c_ij / ρ_ij] = γ_ij whenever ρ_ij > 0 and is the true examination probability
      (Joachims et al. 2017); standard error = sd of the per-impression terms / √n.
    * ``clipped``: 1/ρ replaced by min(1/ρ, clip) (Joachims et al. 2017, after Strehl et al.
      2010). Its expectation is (1/n) Σ λ γ min(1, clip ρ): never above U when λ ≥ 0, equal to U
      when clip ≥ 1/min ρ; it trades that bias for a lower variance.
    * ``snips``: self-normalised, Σ c λ / ρ divided by Σ c / ρ (Swaminathan & Joachims 2015;
      Wang et al. 2016's weighted metrics): it estimates Σ λ γ / Σ γ, λ averaged over the
      click-relevance of the logged documents (with "dcg", the mean discount of a relevant
      document), consistent but not unbiased; delta-method standard error. Its normaliser does
      not depend on the candidate, so on one log it orders candidates exactly as ``ips``.

    Args:
        clicks: (n, K) clicks, bool or counts, on the documents the logger showed at positions 1..K.
        propensity: ρ, each position's examination probability (from a click model): (K,), or (n, K) per impression.
        ranks: (n, K) the candidate's rank of each shown document (`candidate_ranks`; 0 = not ranked).
        metric: λ by candidate rank (`rank_weights`): "dcg", "clicks" or the weights λ(1..k) themselves.
        k: the candidate's depth: ranks beyond ``k`` weigh 0.
        clip: the cap on 1/ρ in the ``clipped`` estimate.

    Returns:
        The three estimates with their standard errors, the log's counts and ``coverage``.

    Raises:
        ValueError: arrays of mismatched shapes, a click at a position with propensity <= 0, or a ``metric``
            it cannot use (unknown, "clicks" without 1-D propensities, or not one weight per rank 1..k).
    """
    c, inv, lam, name = _prepare(clicks, propensity, metric, k)
    x, y, xc = _terms(c, inv, np.asarray(ranks), lam, clip)
    r = np.asarray(ranks)
    ranked = (r >= 1) & (r <= k)
    n_clicks = float(c.sum())
    return CounterfactualEstimate(
        metric=name,
        k=k,
        clip=clip,
        ips=_mean(x),
        snips=_ratio(x, y),
        clipped=_mean(xc),
        n_impressions=c.shape[0],
        n_clicks=int(n_clicks),
        coverage=float((c * ranked).sum() / n_clicks) if n_clicks else 0.0,
    )


def counterfactual_difference(
    clicks: np.ndarray,
    propensity: np.ndarray,
    ranks_a: np.ndarray,
    ranks_b: np.ndarray,
    *,
    metric: str | Sequence[float] | np.ndarray = "dcg",
    k: int = 10,
    clip: float = 10.0,
) -> CounterfactualEstimate:
    """Candidate A minus candidate B on the same log (the estimands of `counterfactual_estimate`),
    paired by impression so the standard errors account for the shared clicks; ``p_value()``
    tests for no difference.

    Args:
        clicks: (n, K) clicks, bool or counts, as in `counterfactual_estimate`.
        propensity: ρ per position, (K,) or (n, K), as in `counterfactual_estimate`.
        ranks_a: (n, K) candidate A's rank of each shown document (`candidate_ranks`; 0 = not ranked).
        ranks_b: (n, K) candidate B's rank of each shown document.
        metric: λ by candidate rank (`rank_weights`): "dcg", "clicks" or the weights λ(1..k) themselves.
        k: the candidates' depth: ranks beyond ``k`` weigh 0.
        clip: the cap on 1/ρ in the ``clipped`` estimate.

    Returns:
        A's estimates minus B's; ``coverage`` is the smaller of the two candidates'.

    Raises:
        ValueError: as `counterfactual_estimate`.
    """
    c, inv, lam, name = _prepare(clicks, propensity, metric, k)
    xa, y, xca = _terms(c, inv, np.asarray(ranks_a), lam, clip)
    xb, _, xcb = _terms(c, inv, np.asarray(ranks_b), lam, clip)
    n_clicks = float(c.sum())
    cov = [
        float((c * ((np.asarray(r) >= 1) & (np.asarray(r) <= k))).sum() / n_clicks) if n_clicks else 0.0
        for r in (ranks_a, ranks_b)
    ]
    return CounterfactualEstimate(
        metric=name,
        k=k,
        clip=clip,
        ips=_mean(xa - xb),
        snips=_ratio(xa - xb, y),
        clipped=_mean(xca - xcb),
        n_impressions=c.shape[0],
        n_clicks=int(n_clicks),
        coverage=min(cov),
    )
