"""Counterfactual estimates of a candidate ranker from logged clicks under a position-based
examination model (Joachims, Swaminathan & Schnabel 2017; Wang et al. 2016):
`counterfactual_estimate` gives IPS, self-normalised IPS and clipped IPS of an additive utility
(DCG with click-relevance gains, or expected clicks), `counterfactual_difference` the paired
difference of two candidates; `candidate_ranks` maps a candidate's rankings onto the log.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy.stats import norm

__all__ = [
    "CounterfactualEstimate",
    "Estimate",
    "candidate_ranks",
    "counterfactual_difference",
    "counterfactual_estimate",
    "rank_weights",
]


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
