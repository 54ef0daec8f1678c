"""Counterfactual (off-policy) estimates of a policy's value from a logged log, with the
literature's estimators and names.

* `off_policy_estimate`: logged bandit feedback (rounds of context, action, reward and the
  logger's propensity, optionally at a slot position, as in Open Bandit Pipeline's
  ``bandit_feedback``): IPS/IPW (Horvitz & Thompson 1952; Precup et al. 2000), SNIPS
  (Swaminathan & Joachims 2015), DM, DR (Dudík, Langford & Li 2011) and self-normalised DR, for
  a deterministic or stochastic evaluation policy, with a reward model's predictions as input,
  opt-in weight clipping, standard errors and seeded bootstrap percentile intervals.
* `counterfactual_estimate` / `counterfactual_difference`: a candidate ranker's additive utility
  (DCG with click-relevance gains, or expected clicks) from a position-based click log
  (Joachims, Swaminathan & Schnabel 2017), alone or as the paired difference of two candidates;
  `candidate_ranks` maps a candidate's rankings onto the log.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy.stats import norm

__all__ = [
    "OFF_POLICY_ESTIMATORS",
    "CounterfactualEstimate",
    "Estimate",
    "OffPolicyEstimate",
    "candidate_ranks",
    "counterfactual_difference",
    "counterfactual_estimate",
    "off_policy_estimate",
    "rank_weights",
]

OffPolicyEstimator = Literal["ips", "snips", "dm", "dr", "sndr"]
OFF_POLICY_ESTIMATORS: tuple[OffPolicyEstimator, ...] = ("ips", "snips", "dm", "dr", "sndr")


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
    """A point estimate with its standard error and, when bootstrapped, a percentile interval
    ``(low, high)`` covering 1 − alpha."""

    value: float
    se: float
    interval: tuple[float, float] | None = None

    def z(self, reference: float = 0.0) -> float:
        """(value − reference) / se; ±inf (0 at the reference) when the standard error is 0."""
        d = self.value - reference
        if self.se > 0:
            return d / self.se
        return 0.0 if d == 0 else math.copysign(math.inf, d)

    def p_value(self, reference: float = 0.0) -> float:
        """Two-sided normal p of the estimate against ``reference``."""
        if self.se > 0:
            return float(2 * norm.sf(abs(self.z(reference))))
        return float(self.value == reference)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"value": self.value, "se": self.se}
        if self.interval is not None:
            d["low"], d["high"] = self.interval
        return d


@dataclass(frozen=True)
class _Terms:
    """Per-round terms of an estimator of the form mean(a) + mean(u) / mean(v): every estimator
    here is one (u = None: the plain mean of ``a``). The point value is computed as
    mean(a + u / mean(v)), the order of operations Open Bandit Pipeline uses, so equal inputs
    give equal bits."""

    a: np.ndarray
    u: np.ndarray | None = None
    v: np.ndarray | None = None

    def value(self) -> float:
        if self.u is None or self.v is None:
            return float(self.a.mean())
        vbar = float(self.v.mean())
        return float((self.a + self.u / vbar).mean()) if vbar != 0 else math.nan

    def se(self) -> float:
        """√(Var(influence) / n), the delta method for the ratio term (influence
        a + (u − R v) / v̄ with R = ū / v̄); inf with fewer than two rounds."""
        n = len(self.a)
        if n < 2:
            return math.inf
        if self.u is None or self.v is None:
            return float(self.a.std(ddof=1) / math.sqrt(n))
        vbar = float(self.v.mean())
        if vbar == 0:
            return math.inf
        ratio = float(self.u.mean()) / vbar
        return float((self.a + (self.u - ratio * self.v) / vbar).std(ddof=1) / math.sqrt(n))

    def resampled(self, idx: np.ndarray) -> np.ndarray:
        """The estimator on each row of bootstrap indices ``idx`` (b, n): the self-normaliser is
        recomputed on each resample, as the estimator itself would be."""
        out = self.a[idx].mean(axis=1)
        if self.u is not None and self.v is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                out = out + self.u[idx].mean(axis=1) / self.v[idx].mean(axis=1)
        return out


def _check_bootstrap(n_bootstrap: int, alpha: float) -> None:
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, int | np.integer) or n_bootstrap < 0:
        raise ValueError(f"n_bootstrap must be an integer >= 0 (0: no interval), got {n_bootstrap!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1) (the interval covers 1 - alpha), got {alpha!r}")


def _check_clip(clip: float | None) -> None:
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, int | float) or not clip > 0):
        raise ValueError(f"clip must be None (no clipping) or a number > 0, got {clip!r}")


def _bootstrap(
    terms: Mapping[str, _Terms], n_bootstrap: int, alpha: float, seed: int
) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap intervals (Efron & Tibshirani 1993), one set of resamples shared by
    every estimator. The resamples are drawn by ``np.random.RandomState(seed)``, whose stream numpy
    keeps fixed across versions, exactly as Open Bandit Pipeline's
    ``estimate_confidence_interval_by_bootstrap`` draws them: with the same seed, a plain-mean
    estimator's interval is obp's ``estimate_interval`` to the bit."""
    if n_bootstrap == 0 or not terms:
        return {}
    n = len(next(iter(terms.values())).a)
    if n == 0:
        return {}
    rs = np.random.RandomState(seed)
    chunk = max(1, (1 << 22) // n)  # rows of indices per draw: about 32 MB of int64 at a time
    samples: dict[str, list[np.ndarray]] = {name: [] for name in terms}
    for start in range(0, n_bootstrap, chunk):
        idx = rs.randint(0, n, size=(min(chunk, n_bootstrap - start), n))
        for name, t in terms.items():
            samples[name].append(t.resampled(idx))
    out = {}
    for name, parts in samples.items():
        s = np.concatenate(parts)
        out[name] = (float(np.percentile(s, 100 * (alpha / 2))), float(np.percentile(s, 100 * (1.0 - alpha / 2))))
    return out


@dataclass(frozen=True)
class OffPolicyEstimate:
    """One evaluation policy's value on one log by each estimator of `off_policy_estimate` (``dm``,
    ``dr`` and ``sndr`` are None without a reward model)."""

    ips: Estimate
    snips: Estimate
    dm: Estimate | None
    dr: Estimate | None
    sndr: Estimate | None
    n_rounds: int
    clip: float | None
    alpha: float
    n_bootstrap: int
    seed: int
    mean_weight: float

    def get(self, estimator: OffPolicyEstimator) -> Estimate:
        """The named estimate; ValueError when that estimator was not computed."""
        if estimator not in OFF_POLICY_ESTIMATORS:
            raise ValueError(f"estimator must be one of {OFF_POLICY_ESTIMATORS}, got {estimator!r}")
        est: Estimate | None = getattr(self, estimator)
        if est is None:
            raise ValueError(f"{estimator} needs a reward model's predictions (estimated_rewards)")
        return est

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            k: getattr(self, k) for k in ("n_rounds", "clip", "alpha", "n_bootstrap", "seed", "mean_weight")
        }
        for name in OFF_POLICY_ESTIMATORS:
            est: Estimate | None = getattr(self, name)
            if est is not None:
                d[name] = est.to_json()
        return d


def _policy_at_logged(
    policy: np.ndarray, n: int, n_actions: int, position: np.ndarray | None
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(deterministic actions (n,), or None; action probabilities at each round's position (n, A),
    or None)."""
    if np.issubdtype(policy.dtype, np.integer):
        if policy.shape != (n,):
            raise ValueError(f"policy: deterministic actions need shape ({n},), got {policy.shape}")
        if n and (policy.min() < 0 or policy.max() >= n_actions):
            raise ValueError(f"policy: actions must lie in [0, {n_actions}), got {policy.min()}..{policy.max()}")
        return policy, None
    if not np.issubdtype(policy.dtype, np.floating) or policy.ndim not in (2, 3) or policy.shape[0] != n:
        raise ValueError(
            f"policy must be integer actions ({n},) or float probabilities ({n}, n_actions[, len_list]), "
            f"got {policy.dtype} {policy.shape}"
        )
    if policy.shape[1] != n_actions:
        raise ValueError(f"policy: {policy.shape[1]} actions, but the log and reward model have {n_actions}")
    if policy.ndim == 3:
        if position is None and policy.shape[2] > 1:
            raise ValueError("policy has a distribution per position: position is required")
        pos = np.zeros(n, dtype=np.int64) if position is None else position
        if n and pos.max() >= policy.shape[2]:
            raise ValueError(f"position {pos.max()} beyond the policy's {policy.shape[2]} positions")
        pi = policy[np.arange(n), :, pos]
    else:
        pi = policy
    if not np.isfinite(pi).all() or (pi < 0).any() or not np.allclose(pi.sum(axis=1), 1.0, atol=1e-6):
        raise ValueError("policy: action probabilities must be finite, >= 0 and sum to 1 at every round")
    return None, pi


def off_policy_estimate(
    reward: np.ndarray,
    action: np.ndarray,
    pscore: np.ndarray,
    policy: np.ndarray,
    *,
    position: np.ndarray | None = None,
    estimated_rewards: np.ndarray | None = None,
    clip: float | None = None,
    n_bootstrap: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> OffPolicyEstimate:
    """The value V(π) = E_x E_{a~π(·|x)} [r] of an evaluation policy π, estimated from rounds
    logged by another policy π_0 (logged bandit feedback; the inputs and estimands of Open Bandit
    Pipeline, Saito et al. 2021, whose names are in brackets).

    With w_i = π(a_i | x_i) / π_0(a_i | x_i) the importance weight of the logged action
    (min(w_i, ``clip``) when clipped) and q̂(x, a) the reward model's prediction:

    * ``ips`` [IPW]: (1/n) Σ w_i r_i, unbiased when π_0 > 0 wherever π > 0 (Horvitz & Thompson
      1952; Precup, Sutton & Singh 2000).
    * ``snips`` [SNIPW]: Σ w_i r_i / Σ w_i, the self-normalised IPS of Swaminathan & Joachims
      (2015): the sum of the importance weights, whose expectation is n, normalises; biased but
      consistent, with a lower variance when weights are large.
    * ``dm`` [DM]: (1/n) Σ_i Σ_a π(a | x_i) q̂(x_i, a), the reward model's value of π: as good
      as the model.
    * ``dr`` [DR]: DM + (1/n) Σ w_i (r_i − q̂(x_i, a_i)) (Dudík, Langford & Li 2011): unbiased
      when the propensities are right, whatever the model, and of lower variance than IPS when
      the model is good.
    * ``sndr`` [SNDR]: DM + Σ w_i (r_i − q̂(x_i, a_i)) / Σ w_i, DR's correction self-normalised.

    Clipping (Strehl et al. 2010; Ionides 2008) is opt-in: it trades bias (a lower value when
    rewards are ≥ 0) for variance. Standard errors are the per-round terms' (delta method for
    the self-normalised ratio); with ``n_bootstrap`` > 0, each estimate also carries a percentile
    bootstrap interval covering 1 − ``alpha`` (`_bootstrap`: seeded, obp's resampling; the
    self-normalisers are recomputed on every resample, where obp keeps the full log's).

    Args:
        reward: (n,) the logged reward (a click: 0/1).
        action: (n,) the logged action, integers in [0, n_actions).
        pscore: (n,) π_0(a_i | x_i), the logging policy's probability of the logged action (at the
            logged position), in (0, 1].
        policy: the evaluation policy: (n,) integer actions it takes (deterministic), or float
            action probabilities (n, n_actions), or (n, n_actions, len_list) per position (obp's
            ``action_dist``).
        position: (n,) the logged slot of each round (obp's ``position``), integers from 0; None: one slot.
        estimated_rewards: q̂, (n, n_actions) or (n, n_actions, len_list) (obp's
            ``estimated_rewards_by_reg_model``); needed by ``dm``, ``dr`` and ``sndr``.
        clip: the cap on w; None (default): no clipping.
        n_bootstrap: bootstrap resamples (0: no interval).
        alpha: the intervals cover 1 − alpha.
        seed: the bootstrap's seed.

    Returns:
        Each estimator's value, standard error and interval, and the mean importance weight (near
        1 when the propensities are right and nothing is clipped: a check of the log).

    Raises:
        ValueError: naming the parameter: mismatched shapes, actions out of range, a propensity
            outside (0, 1], probabilities that are not a distribution, or a bad ``clip``,
            ``n_bootstrap`` or ``alpha``.
    """
    _check_clip(clip)
    _check_bootstrap(n_bootstrap, alpha)
    r = np.asarray(reward, dtype=np.float64)
    a = np.asarray(action)
    p = np.asarray(pscore, dtype=np.float64)
    pol = np.asarray(policy)
    n = len(r)
    if r.ndim != 1 or n == 0:
        raise ValueError(f"reward must be 1-D with one entry per round (at least one), got shape {r.shape}")
    for name, arr in (("action", a), ("pscore", p)):
        if arr.shape != (n,):
            raise ValueError(f"{name} must have shape ({n},) like reward, got {arr.shape}")
    if not np.issubdtype(a.dtype, np.integer) or (n and a.min() < 0):
        raise ValueError("action must hold integers >= 0")
    if not (np.isfinite(p).all() and (p > 0).all() and (p <= 1).all()):
        raise ValueError("pscore must lie in (0, 1] at every round")
    pos: np.ndarray | None = None
    if position is not None:
        pos = np.asarray(position)
        if pos.shape != (n,) or not np.issubdtype(pos.dtype, np.integer) or (n and pos.min() < 0):
            raise ValueError(f"position must hold ({n},) integers >= 0, got {pos.dtype} {pos.shape}")
    q: np.ndarray | None = None
    if estimated_rewards is not None:
        q = np.asarray(estimated_rewards, dtype=np.float64)
        if q.ndim not in (2, 3) or q.shape[0] != n:
            raise ValueError(f"estimated_rewards must be ({n}, n_actions[, len_list]), got {q.shape}")
        if q.ndim == 3:
            if pos is None and q.shape[2] > 1:
                raise ValueError("estimated_rewards has predictions per position: position is required")
            qpos = np.zeros(n, dtype=np.int64) if pos is None else pos
            if n and qpos.max() >= q.shape[2]:
                raise ValueError(f"position {qpos.max()} beyond estimated_rewards' {q.shape[2]} positions")
            q = q[np.arange(n), :, qpos]
    n_actions = (
        q.shape[1]
        if q is not None
        else pol.shape[1]
        if pol.ndim > 1
        else int(max(a.max(initial=-1), pol.max(initial=-1)) + 1)
    )
    if n and a.max() >= n_actions:
        raise ValueError(f"action {a.max()} beyond the {n_actions} actions of the policy / reward model")
    det, pi = _policy_at_logged(pol, n, n_actions, pos)
    rows = np.arange(n)
    taken = (det == a).astype(np.float64) if det is not None else pi[rows, a]  # type: ignore[index]
    w = taken / p
    if clip is not None:
        w = np.minimum(w, clip)
    terms: dict[str, _Terms] = {"ips": _Terms(r * w), "snips": _Terms(np.zeros(n), r * w, w)}
    if q is not None:
        # Σ_a π(a|x) q̂(x, a) as np.average, obp's operation: equal inputs, equal bits
        dm = q[rows, det] if det is not None else np.average(q, weights=pi, axis=1)
        residual = w * (r - q[rows, a])
        terms["dm"] = _Terms(dm)
        terms["dr"] = _Terms(dm + residual)
        terms["sndr"] = _Terms(dm, residual, w)
    intervals = _bootstrap(terms, n_bootstrap, alpha, seed)
    est = {name: Estimate(t.value(), t.se(), intervals.get(name)) for name, t in terms.items()}
    return OffPolicyEstimate(
        ips=est["ips"],
        snips=est["snips"],
        dm=est.get("dm"),
        dr=est.get("dr"),
        sndr=est.get("sndr"),
        n_rounds=n,
        clip=clip,
        alpha=alpha,
        n_bootstrap=int(n_bootstrap),
        seed=seed,
        mean_weight=float(w.mean()) if n else math.nan,
    )


@dataclass(frozen=True)
class CounterfactualEstimate:
    """IPS of one candidate ranker's utility (or, from `counterfactual_difference`, of candidate A
    minus candidate B) on one position-based click log; see `counterfactual_estimate`."""

    metric: str
    k: int
    clip: float | None
    ips: Estimate
    n_impressions: int
    n_clicks: int
    coverage: float

    def p_value(self) -> float:
        """Two-sided normal p of the IPS estimate against 0 (for a difference: of no difference)."""
        return self.ips.p_value()

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: getattr(self, k) for k in ("metric", "k", "clip", "n_impressions", "n_clicks")}
        d["coverage"] = self.coverage
        d["ips"] = self.ips.to_json()
        return d


def _inverse_propensity(clicks: np.ndarray, propensity: np.ndarray, clip: float | None) -> np.ndarray:
    prop = np.asarray(propensity, dtype=np.float64)
    if prop.ndim not in (1, 2) or prop.shape[-1] < clicks.shape[1]:
        raise ValueError(f"propensity of shape {prop.shape} for a log of shape {clicks.shape}")
    rho = np.broadcast_to(prop[..., : clicks.shape[1]], clicks.shape)
    if ((rho <= 0) & (clicks > 0)).any():
        raise ValueError(
            "propensity: a click at a position with propensity <= 0 (the examination model cannot explain it)"
        )
    inv = np.zeros(clicks.shape)
    np.divide(1.0, rho, out=inv, where=rho > 0)
    return inv if clip is None else np.minimum(inv, clip)


def _utility_terms(clicks: np.ndarray, inv: np.ndarray, ranks: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """Per impression: Σ_j c_ij λ(r_ij) / ρ_ij."""
    r = np.asarray(ranks)
    if r.shape != clicks.shape:
        raise ValueError(f"ranks must have the log's shape {clicks.shape}, got {r.shape}")
    w = lam[np.clip(r, 0, len(lam) - 1) * (r < len(lam))]
    return (clicks * w * inv).sum(axis=1)


def _coverage(clicks: np.ndarray, ranks: np.ndarray, k: int) -> float:
    n_clicks = float(clicks.sum())
    r = np.asarray(ranks)
    return float((clicks * ((r >= 1) & (r <= k))).sum() / n_clicks) if n_clicks else 0.0


def _prepare(
    clicks: np.ndarray,
    propensity: np.ndarray,
    metric: str | Sequence[float] | np.ndarray,
    k: int,
    clip: float | None,
    n_bootstrap: int,
    alpha: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    _check_clip(clip)
    _check_bootstrap(n_bootstrap, alpha)
    c = np.asarray(clicks)
    if c.ndim != 2:
        raise ValueError(f"clicks must be (impressions, positions), got shape {c.shape}")
    c = c.astype(np.float64)
    prop = np.asarray(propensity, dtype=np.float64)
    lam = rank_weights(metric, k, prop if prop.ndim == 1 else None)
    return c, _inverse_propensity(c, prop, clip), lam, metric if isinstance(metric, str) else "weights"


def _ips(x: np.ndarray, n_bootstrap: int, alpha: float, seed: int) -> Estimate:
    t = _Terms(x)
    interval = _bootstrap({"ips": t}, n_bootstrap, alpha, seed).get("ips")
    return Estimate(t.value() if len(x) else 0.0, t.se(), interval)


def counterfactual_estimate(
    clicks: np.ndarray,
    propensity: np.ndarray,
    ranks: np.ndarray,
    *,
    metric: str | Sequence[float] | np.ndarray = "dcg",
    k: int = 10,
    clip: float | None = None,
    n_bootstrap: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> CounterfactualEstimate:
    """Offline IPS estimate of a candidate ranker's utility from a click log under the
    position-based examination model (Joachims, Swaminathan & Schnabel 2017, "Unbiased
    learning-to-rank with biased feedback", WSDM; Wang, Bendersky, Metzler & Najork 2016).

    Model: P(c_ij = 1) = ρ_ij γ_ij, where ρ_ij is the probability that the logged document at
    (i, j) is examined there (its position's examination, times the probability that the logger
    shows it at all when the logger is random) and γ_ij = P(click | examined) its click-relevance.

    Estimand (``metric`` sets λ, `rank_weights`): with r_ij the candidate's rank of the document
    shown at (i, j), U = (1/n) Σ_i Σ_j λ(r_ij) γ_ij, the mean over the logged impressions of an
    additive utility of the candidate's ranking. ``"dcg"``: DCG@k with gain γ; ``"clicks"``:
    λ(r) = ρ_r, the expected clicks on the candidate's top k (1-D propensities). Only documents
    the logger showed enter: one the log never showed counts 0, so compare candidates on
    documents the logger covers (``coverage``: the share of clicks on documents the candidate
    ranks within k).

    ``ips`` = (1/n) Σ_i Σ_j c_ij λ(r_ij) / ρ_ij is unbiased for U because E[c_ij / ρ_ij] = γ_ij
    whenever ρ_ij > 0 is the true examination probability (Joachims et al. 2017). With ``clip``,
    1/ρ is replaced by min(1/ρ, clip) (Strehl et al. 2010): expectation (1/n) Σ λ γ min(1, clip ρ),
    never above U when λ ≥ 0, equal to U when clip ≥ 1/min ρ. There is no self-normalised form
    here: its normaliser, the mean of the examination events' weights, is not observed (clicks are
    not examinations); for logs with known action probabilities, use `off_policy_estimate`.

    Args:
        clicks: (n, K) clicks, bool or counts, on the documents the logger showed at positions 1..K.
        propensity: ρ, each position's examination probability (from a click model): (K,), or (n, K) per impression.
        ranks: (n, K) the candidate's rank of each shown document (`candidate_ranks`; 0 = not ranked).
        metric: λ by candidate rank (`rank_weights`): "dcg", "clicks" or the weights λ(1..k) themselves.
        k: the candidate's depth: ranks beyond ``k`` weigh 0.
        clip: the cap on 1/ρ; None (default): no clipping.
        n_bootstrap: bootstrap resamples of the impressions for a percentile interval (0: none).
        alpha: the interval covers 1 − alpha.
        seed: the bootstrap's seed.

    Returns:
        The IPS estimate with its standard error and interval, the log's counts and ``coverage``.

    Raises:
        ValueError: naming the parameter: mismatched shapes, a click at a position with propensity
            <= 0, a ``metric`` it cannot use, or a bad ``clip``, ``n_bootstrap`` or ``alpha``.
    """
    c, inv, lam, name = _prepare(clicks, propensity, metric, k, clip, n_bootstrap, alpha)
    x = _utility_terms(c, inv, np.asarray(ranks), lam)
    return CounterfactualEstimate(
        metric=name,
        k=k,
        clip=clip,
        ips=_ips(x, n_bootstrap, alpha, seed),
        n_impressions=c.shape[0],
        n_clicks=int(c.sum()),
        coverage=_coverage(c, ranks, k),
    )


def counterfactual_difference(
    clicks: np.ndarray,
    propensity: np.ndarray,
    ranks_a: np.ndarray,
    ranks_b: np.ndarray,
    *,
    metric: str | Sequence[float] | np.ndarray = "dcg",
    k: int = 10,
    clip: float | None = None,
    n_bootstrap: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> CounterfactualEstimate:
    """Candidate A minus candidate B on the same log (the IPS of `counterfactual_estimate`), paired
    by impression so the standard error and the bootstrap interval account for the shared
    clicks; ``p_value()`` tests for no difference.

    Args:
        clicks: (n, K) clicks, bool or counts, as in `counterfactual_estimate`.
        propensity: ρ per position, (K,) or (n, K), as in `counterfactual_estimate`.
        ranks_a: (n, K) candidate A's rank of each shown document (`candidate_ranks`; 0 = not ranked).
        ranks_b: (n, K) candidate B's rank of each shown document.
        metric: λ by candidate rank (`rank_weights`): "dcg", "clicks" or the weights λ(1..k) themselves.
        k: the candidates' depth: ranks beyond ``k`` weigh 0.
        clip: the cap on 1/ρ; None (default): no clipping.
        n_bootstrap: bootstrap resamples of the impressions (0: no interval).
        alpha: the interval covers 1 − alpha.
        seed: the bootstrap's seed.

    Returns:
        A's estimate minus B's; ``coverage`` is the smaller of the two candidates'.

    Raises:
        ValueError: as `counterfactual_estimate`.
    """
    c, inv, lam, name = _prepare(clicks, propensity, metric, k, clip, n_bootstrap, alpha)
    x = _utility_terms(c, inv, np.asarray(ranks_a), lam) - _utility_terms(c, inv, np.asarray(ranks_b), lam)
    return CounterfactualEstimate(
        metric=name,
        k=k,
        clip=clip,
        ips=_ips(x, n_bootstrap, alpha, seed),
        n_impressions=c.shape[0],
        n_clicks=int(c.sum()),
        coverage=min(_coverage(c, ranks_a, k), _coverage(c, ranks_b, k)),
    )
