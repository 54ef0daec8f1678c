"""Two rankers compared online by simulated users, all numpy over all impressions at once.

`online_comparison` runs, on two rankers' runs over judged queries (Zipf-like traffic), team-draft
interleaving (Radlinski et al. 2008) and an A/B split of the clicked-search rate, each with the
impressions after which p < 0.05 holds to the end of a run (`clicks.power`), and offline
counterfactual estimates of A − B from logs of a mix of both (`clicks.counterfactual`).
`simulate_ab` draws the search log of an A/B test in the 2020 paper's Table 7 layout (users
bucketed by `clicks.abtest.BucketLayout`), which `clicks.abtest.ab_table` reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .abtest import BucketLayout
from .counterfactual import counterfactual_difference
from .interleaving import credit, outcomes, team_draft_batch
from .power import detection_summary, impressions_to_significance, prefix_sign_test_p, prefix_two_proportion_p
from .simulate import PositionBasedUser, QueryStream, Rankings


def _codes(run: Mapping[str, Sequence[str]], qids: Sequence[str], vocab: dict[str, int], k: int) -> np.ndarray:
    out = np.full((len(qids), k), -1, dtype=np.int64)
    for i, q in enumerate(qids):
        for j, d in enumerate(list(run.get(q, []))[:k]):
            out[i, j] = vocab.setdefault(d, len(vocab))
    return out


def _grade_of(
    codes: np.ndarray, qids: Sequence[str], qrels: Mapping[str, Mapping[str, int]], vocab: dict[str, int]
) -> np.ndarray:
    """Grades of a (queries, K) code matrix (0 for unjudged or empty)."""
    back = {c: d for d, c in vocab.items()}
    g = np.zeros(codes.shape, dtype=np.int8)
    for i, q in enumerate(qids):
        judged = qrels.get(q, {})
        for j, c in enumerate(codes[i]):
            if c >= 0:
                g[i, j] = max(0, int(judged.get(back[int(c)], 0)))
    return g


def _counterfactual(
    a: np.ndarray,
    b: np.ndarray,
    ga: np.ndarray,
    gb: np.ndarray,
    user: Any,
    n: int,
    seed: int,
    *,
    mix: float,
) -> dict[str, Any]:
    """A − B estimated offline (``clicks.counterfactual.counterfactual_difference``, DCG utility) from
    ``n`` logged impressions in which A's list is shown with probability ``mix``, else B's. Each
    logged cell's propensity is its position's examination times the probability that the logger
    shows that document at all (1/2 for a document of one list only, with ``mix`` = 1/2), so IPS is
    unbiased for both candidates' utilities wherever that probability is positive (Joachims et
    al. 2017; Li et al. 2011's logging-policy propensities)."""
    k = a.shape[1]
    rng = np.random.default_rng([seed, 10_000])
    q = QueryStream(a.shape[0], 1.0, seed + 10_000).sample(n, rng)
    show_a = rng.random(n) < mix
    docs = np.where(show_a[:, None], a[q], b[q])
    grades = np.where(show_a[:, None], ga[q], gb[q])
    clicks = user.clicks(grades, docs >= 0, rng)
    ranks = np.arange(1, k + 1)[None, None, :]
    hit_a = (docs[:, :, None] == a[q][:, None, :]) & (docs >= 0)[:, :, None]
    hit_b = (docs[:, :, None] == b[q][:, None, :]) & (docs >= 0)[:, :, None]
    shown_p = mix * hit_a.any(2) + (1 - mix) * hit_b.any(2)
    propensity = user.examination_probabilities(k)[None, :] * np.where(shown_p > 0, shown_p, 1.0)
    # no clipping (the estimator's default since issue 58: unbiased, and the test of the sign
    # needs no variance cut); 200 resamples give an interval beside p in under a second per 200k impressions
    est = counterfactual_difference(
        clicks,
        propensity,
        (hit_a * ranks).max(2),
        (hit_b * ranks).max(2),
        metric="dcg",
        k=k,
        n_bootstrap=200,
        seed=seed,
    )
    return {**est.to_json(), "p_ips": est.p_value(), "share_from_a": mix}


def online_comparison(
    run_a: Mapping[str, Sequence[str]],
    run_b: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Mapping[str, int]],
    *,
    user: Any,
    runs: int,
    horizon: int,
    ab_factor: int,
    seed: int,
    counterfactual: bool = True,
    log_impressions: int = 200_000,
    exponent: float = 1.0,
    k: int = 10,
) -> dict[str, Any]:
    """Simulated online comparison of rankers A and B on ``qrels``' queries (Zipf-like traffic):
    in each of ``runs`` runs, team-draft interleaving (Radlinski et al. 2008) for ``horizon``
    impressions and an A/B split of the clicked-search rate for ``ab_factor`` times as many (queries
    drawn Zipf-like with ``exponent``, each run its own popularity order), each
    with the impressions after which p < 0.05 holds to the end of the run
    (``clicks.power.impressions_to_significance``, rule "sustained"). With ``counterfactual``,
    also the offline estimate of A − B (IPS with a bootstrap interval, DCG utility) from the log
    of a 50/50 split between A and B shown to the same users (``counterfactual``), and from a log
    of B alone (``counterfactual_from_b``: documents only A ranks are never seen there)."""
    qids = [q for q in qrels if q in run_a and q in run_b]
    vocab: dict[str, int] = {}
    a, b = _codes(run_a, qids, vocab, k), _codes(run_b, qids, vocab, k)
    ga, gb = _grade_of(a, qids, qrels, vocab), _grade_of(b, qids, qrels, vocab)
    inter, ab, wins, clicked_a, clicked_b = [], [], [0, 0, 0], [], []
    for r in range(runs):
        rng = np.random.default_rng([seed, r])
        stream = QueryStream(len(qids), exponent, seed + r)
        q = stream.sample(horizon, rng)
        ids, teams = team_draft_batch(a[q], b[q], k, rng)
        grades = np.zeros(ids.shape, dtype=np.int8)
        for j in range(k):  # each interleaved document's grade, from whichever list it came
            col = ids[:, j]
            in_a = a[q] == col[:, None]
            in_b = b[q] == col[:, None]
            grades[:, j] = np.where(in_a.any(1), (ga[q] * in_a).max(1), np.where(in_b.any(1), (gb[q] * in_b).max(1), 0))
        clicks = user.clicks(grades, ids >= 0, rng)
        o = outcomes(*credit(teams, clicks))
        wins[0] += int((o > 0).sum())
        wins[1] += int((o < 0).sum())
        wins[2] += int((o == 0).sum())
        inter.append(impressions_to_significance(prefix_sign_test_p(o)))
        n_ab = horizon * ab_factor // 2
        qa, qb = stream.sample(n_ab, rng), stream.sample(n_ab, rng)
        ca = user.clicks(ga[qa], a[qa] >= 0, rng).any(1)
        cb = user.clicks(gb[qb], b[qb] >= 0, rng).any(1)
        clicked_a.append(float(ca.mean()))
        clicked_b.append(float(cb.mean()))
        # B is the control: a better A raises the experiment's clicked-search rate
        ab.append(impressions_to_significance(prefix_two_proportion_p(cb, ca), impressions_per_step=2))
    di, da = detection_summary(inter), detection_summary(ab)
    median = di.median
    result: dict[str, Any] = {
        "queries": len(qids),
        "runs": runs,
        "horizon": horizon,
        "interleaving": {
            "median_impressions": median,
            "detected": di.detected,
            "per_run": list(di.per_run),
            "wins_a": wins[0],
            "wins_b": wins[1],
            "ties": wins[2],
        },
        "ab": {
            "horizon": horizon * ab_factor,
            "median_impressions": da.median,
            "detected": da.detected,
            "per_run": list(da.per_run),
            "clicked_rate_a": float(np.mean(clicked_a)),
            "clicked_rate_b": float(np.mean(clicked_b)),
            "impressions_for_interleaving_power": (
                da.impressions_for(di.power_at(median)) if math.isfinite(median) else math.inf
            ),
        },
    }
    if counterfactual:
        result["counterfactual"] = _counterfactual(a, b, ga, gb, user, log_impressions, seed, mix=0.5)
        result["counterfactual_from_b"] = _counterfactual(a, b, ga, gb, user, log_impressions, seed, mix=0.0)
    return result


def simulate_ab(
    control: Rankings,
    experiment: Rankings,
    n_searches: int,
    n_users: int,
    *,
    eta: float = 1.0,
    epsilon: float = 0.1,
    exponent: float = 1.0,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(user keys, query texts, clicks per search) of ``n_searches`` searches: queries drawn by a
    `QueryStream` over the rankings' queries (the same in both `clicks.Rankings`, row for row),
    users uniformly among ``n_users`` keys ``u0``, ``u1``, ...; a user in an experiment bucket
    sees ``experiment``'s list, else ``control``'s (`BucketLayout`)."""
    if control.query_ids != experiment.query_ids:
        raise ValueError("the two rankings must list the same queries in the same order")
    rng = np.random.default_rng(seed)
    keys = np.array([f"u{i}" for i in range(n_users)])
    arm_of = BucketLayout().arm(keys)
    q = QueryStream(len(control.query_ids), exponent, seed).sample(n_searches, rng)
    u = rng.integers(0, n_users, n_searches)
    exp = arm_of[u] == 1
    docs = np.where(exp[:, None], experiment.docs[q], control.docs[q])
    grades = np.where(exp[:, None], experiment.grades[q], control.grades[q])
    user = PositionBasedUser(max_grade=max(control.max_grade, experiment.max_grade), eta=eta, epsilon=epsilon)
    clicks = user.clicks(grades, docs >= 0, rng).sum(axis=1)
    return keys[u], np.asarray(control.queries)[q], clicks
