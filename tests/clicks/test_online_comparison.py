"""Online comparison of rankers: team-draft interleaving and its credit, the sign test
(semsearch.clicks.interleaving), power helpers (clicks.power), A/B buckets (clicks.abtest),
counterfactual (IPS) estimates of rankers (clicks.counterfactual; its bandit estimators are in
test_counterfactual.py).

Clicks come from a tiny position-based simulator defined here (examination ρ by rank, P(click |
grade g) = 0.1 + 0.9 (2^g − 1) / (2^gmax − 1)); it is deliberately independent of the project's
own simulator so that the two can check each other.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
from scipy.stats import binomtest, chisquare

from semsearch.clicks.abtest import (
    BucketLayout,
    ab_table,
    bucket_of,
    clustered_rate_test,
    head_queries,
    two_proportion_ztest,
    wilson_interval,
)
from semsearch.clicks.counterfactual import (
    Estimate,
    candidate_ranks,
    counterfactual_difference,
    counterfactual_estimate,
    rank_weights,
)
from semsearch.clicks.interleaving import (
    NO_TEAM,
    TEAM_A,
    TEAM_B,
    credit,
    interleaving_summary,
    outcomes,
    sign_test_p,
    team_draft,
    team_draft_batch,
)
from semsearch.clicks.power import (
    ab_sample_size,
    detection_summary,
    impressions_to_significance,
    interleaving_sample_size,
    prefix_sign_test_p,
    prefix_two_proportion_p,
)

A, B = TEAM_A, TEAM_B

# ---------------------------------------------------------------- a tiny position-based click simulator

RHO = np.array([0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06])
GMAX = 3


def p_click(grades: np.ndarray) -> np.ndarray:
    """P(click | examined, grade g) = 0.1 + 0.9 (2^g − 1) / (2^gmax − 1)."""
    return 0.1 + 0.9 * (2.0 ** np.asarray(grades) - 1) / (2.0**GMAX - 1)


def simulate_clicks(grades: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(n, k) grades of the shown documents (-1 = nothing shown) -> (n, k) bool clicks under the
    position-based model: examined with ρ[rank], then clicked with p_click(grade)."""
    n, k = grades.shape
    examined = rng.random((n, k)) < RHO[:k]
    attracted = rng.random((n, k)) < p_click(np.maximum(grades, 0))
    return examined & attracted & (grades >= 0)


def collection(n_queries: int = 30, n_docs: int = 20, seed: int = 0) -> np.ndarray:
    """Grades (queries x docs), a few relevant documents per query."""
    rng = np.random.default_rng(seed)
    return rng.choice(4, size=(n_queries, n_docs), p=[0.55, 0.25, 0.12, 0.08])


def ideal(grades: np.ndarray) -> np.ndarray:
    """Per query, documents by grade descending (ties by id)."""
    return np.argsort(-grades, axis=1, kind="stable")


def shuffled(grades: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array([rng.permutation(grades.shape[1]) for _ in range(grades.shape[0])])


class Coins:
    """A stand-in generator whose coins are given (1 = A picks first in that round)."""

    def __init__(self, coins: list[int]) -> None:
        self.coins = coins

    def integers(self, low: int, high: int, size: int) -> np.ndarray:
        assert (low, high) == (0, 2) and size <= len(self.coins)
        return np.array(self.coins[:size])


# ---------------------------------------------------------------- team-draft


def test_team_draft_hand_cases() -> None:
    a, b = ["d1", "d2", "d3", "d4"], ["d2", "d5", "d1", "d6"]
    # round 1: A first (d1), B takes its top d2; round 2: B first (d2 shown -> d5), A (d1, d2 shown -> d3)
    assert team_draft(a, b, 4, Coins([1, 0])) == (["d1", "d2", "d5", "d3"], [A, B, B, A])
    # round 1: B first (d2), A (d1); round 2: A first (d1, d2 shown -> d3), B (d2 shown -> d5)
    assert team_draft(a, b, 4, Coins([0, 1])) == (["d2", "d1", "d3", "d5"], [B, A, A, B])
    # odd k: the last round has only its first pick
    assert team_draft(a, b, 3, Coins([1, 0])) == (["d1", "d2", "d5"], [A, B, B])
    # both want x and y: whoever picks first gets x, the other skips it; once A's ranking is used
    # up the merge stops (Alg. 2's loop condition), even mid-round
    assert team_draft(["x", "y", "z"], ["x", "y", "w"], 4, Coins([1, 1])) == (["x", "y", "z"], [A, B, A])
    assert team_draft(["x", "y", "z", "v"], ["x", "y", "w"], 4, Coins([1, 1])) == (["x", "y", "z", "w"], [A, B, A, B])
    # the merge stops when either ranking is used up (no extra slots for the longer one)
    assert team_draft(["x"], ["x", "y", "z"], 3, Coins([0, 1])) == (["x"], [B])
    assert team_draft(["x"], ["x", "y", "z"], 3, Coins([1, 0])) == (["x"], [A])
    assert team_draft([], ["x"], 3, Coins([1, 1])) == ([], [])
    assert team_draft(a, b, 0, Coins([])) == ([], [])


def test_team_draft_batch_matches_scalar_with_the_same_generator() -> None:
    rng = np.random.default_rng(3)
    n, docs = 200, 12
    a = np.array([rng.permutation(docs)[:8] for _ in range(n)])
    b = np.array([rng.permutation(docs)[:6] for _ in range(n)])
    b[::7, 3:] = -1  # some short rankings
    a[::5, 1] = a[::5, 0]  # and a ranking that repeats a document
    ids, teams = team_draft_batch(a, b, 7, np.random.default_rng(11))
    scalar = np.random.default_rng(11)  # row i's coins are the generator's i-th ceil(k/2) draws
    for i in range(n):
        sa = [str(d) for d in a[i] if d >= 0]
        sb = [str(d) for d in b[i] if d >= 0]
        got_ids, got_teams = team_draft(sa, sb, 7, scalar)
        assert [str(d) for d in ids[i] if d >= 0] == got_ids
        assert [int(t) for t in teams[i] if t != NO_TEAM] == got_teams
        assert (ids[i, len(got_ids) :] == -1).all()
    # every shown document comes from the team's own ranking and appears once
    for i in range(n):
        shown = ids[i][ids[i] >= 0]
        assert len(set(shown)) == len(shown)
        for d, t in zip(ids[i], teams[i]):
            if t == A:
                assert d in a[i]
            elif t == B:
                assert d in b[i]


def test_team_draft_rounds_are_balanced_and_deterministic() -> None:
    a = [f"a{i}" for i in range(10)]
    b = [f"b{i}" for i in range(10)]
    first = team_draft(a, b, 10, np.random.default_rng(5))
    assert first == team_draft(a, b, 10, np.random.default_rng(5))
    ids, teams = first
    assert len(ids) == 10
    for r in range(5):  # one document per team in every round
        assert sorted(teams[2 * r : 2 * r + 2]) == [A, B]
    # disjoint rankings: each team's documents keep their order
    assert [d for d, t in zip(ids, teams) if t == A] == a[:5]
    assert [d for d, t in zip(ids, teams) if t == B] == b[:5]


# ---------------------------------------------------------------- credit and aggregation


def test_credit_on_known_clicks() -> None:
    teams = np.array([[A, B, A, B], [B, A, B, A], [A, B, NO_TEAM, NO_TEAM], [A, B, A, B]])
    clicks = np.array([[1, 0, 0, 1], [1, 0, 1, 1], [0, 0, 1, 0], [0, 0, 0, 0]], dtype=bool)
    ca, cb = credit(teams, clicks)
    assert ca.tolist() == [1, 1, 0, 0]  # row 2: a click on an empty position counts for nobody
    assert cb.tolist() == [1, 2, 0, 0]
    assert outcomes(ca, cb).tolist() == [0, -1, 0, 0]
    # click counts (a document opened twice) and a single impression as 1-D arrays
    assert [x.tolist() for x in credit(np.array([A, B, A]), np.array([2, 1, 0]))] == [[2], [1]]
    with pytest.raises(ValueError, match="same shape"):
        credit(teams, clicks[:, :3])


def test_interleaving_summary_hand_case() -> None:
    queries = ["q1", "q1", "q1", "q2", "q2", "q3"]
    ca = np.array([2, 0, 1, 0, 1, 0])
    cb = np.array([0, 1, 1, 0, 0, 0])
    s = interleaving_summary(ca, cb, queries)
    # outcomes: A, B, tie (clicked), no click, A, no click
    assert (s.n_impressions, s.n_clicked, s.wins_a, s.wins_b, s.ties) == (6, 4, 2, 1, 1)
    assert s.delta == pytest.approx((2 + 0.5) / 4 - 0.5)
    assert s.p_value == pytest.approx(binomtest(2, 3, 0.5).pvalue)
    assert s.per_query == {"q1": (1, 1, 1), "q2": (1, 0, 0)}  # q3 had no clicks
    assert (s.query_wins_a, s.query_wins_b, s.query_ties) == (1, 0, 1)
    assert s.winner == "A"
    assert s.to_json()["per_query"]["q1"] == {"wins_a": 1, "wins_b": 1, "ties": 1}
    md = s.to_markdown("bm25", "dssm").splitlines()
    assert md[0].startswith("| Comparison | Impressions | With clicks | bm25 wins | dssm wins | Ties | Δ_AB | p |")
    assert md[2] == "| bm25 vs dssm | 6 | 4 | 2 | 1 | 1 | +0.1250 | 1 | 1 / 0 / 1 | 1 |"
    none = interleaving_summary(np.zeros(3, int), np.zeros(3, int))
    assert (none.delta, none.p_value, none.n_clicked) == (0.0, 1.0, 0)


@pytest.mark.parametrize("wins", [(0, 0), (3, 0), (60, 40), (41, 59), (500, 455), (7, 7)])
def test_sign_test_matches_scipy(wins: tuple[int, int]) -> None:
    wa, wb = wins
    expected = 1.0 if wa + wb == 0 else binomtest(wa, wa + wb, 0.5, alternative="two-sided").pvalue
    assert sign_test_p(wa, wb) == pytest.approx(expected, rel=1e-9)


def _interleave_and_click(
    grades: np.ndarray, rank_a: np.ndarray, rank_b: np.ndarray, n: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q = rng.integers(0, grades.shape[0], size=n)
    ids, teams = team_draft_batch(rank_a[q, :10], rank_b[q, :10], 10, rng)
    shown_grades = np.where(ids >= 0, grades[q[:, None], np.maximum(ids, 0)], -1)
    ca, cb = credit(teams, simulate_clicks(shown_grades, rng))
    return ca, cb, q


def test_interleaving_prefers_the_better_ranker_and_is_fair_between_equals() -> None:
    grades = collection()
    good, bad = ideal(grades), shuffled(grades, 1)
    ca, cb, q = _interleave_and_click(grades, good, bad, 3000, seed=2)
    s = interleaving_summary(ca, cb, [f"q{i}" for i in q], bootstrap=200, rng=np.random.default_rng(0))
    assert s.delta > 0.1 and s.p_value < 1e-6
    assert s.bootstrap_ci is not None and 0 < s.bootstrap_ci[0] < s.delta < s.bootstrap_ci[1]
    assert s.bootstrap_p is not None and s.bootstrap_p < 0.01
    assert s.query_wins_a > s.query_wins_b and s.query_p_value < 0.05
    assert "Δ_AB interval (query bootstrap)" in s.to_markdown()
    # the same ranking on both sides: a click credits either team with probability 1/2
    ca, cb, _ = _interleave_and_click(grades, good, good.copy(), 20000, seed=3)
    same = interleaving_summary(ca, cb)
    scores = np.concatenate([np.ones(same.wins_a), np.zeros(same.wins_b), np.full(same.ties, 0.5)])
    assert abs(same.delta) < 3 * scores.std() / math.sqrt(len(scores))
    assert same.p_value > 0.01


def test_team_draft_batch_handles_a_million_impressions() -> None:
    rng = np.random.default_rng(0)
    n = 1_000_000
    a = np.tile(np.arange(10), (n, 1))
    b = np.tile(np.array([1, 0, 2, 3, 11, 12, 4, 5, 6, 7]), (n, 1))
    ids, teams = team_draft_batch(a, b, 10, rng)
    clicks = rng.random((n, 10)) < RHO * 0.5
    ca, cb = credit(teams, clicks)
    s = interleaving_summary(ca, cb, rng.integers(0, 1000, size=n))
    assert s.n_impressions == n and s.n_clicked == int(clicks.any(axis=1).sum())
    assert (ids >= 0).all() and set(np.unique(teams).tolist()) == {A, B}


# ---------------------------------------------------------------- power


def test_prefix_sign_test_matches_scipy_at_every_prefix() -> None:
    o = np.random.default_rng(4).choice([1, -1, 0], p=[0.4, 0.3, 0.3], size=150)
    p = prefix_sign_test_p(o)
    for i in range(len(o)):
        wa, wb = int((o[: i + 1] == 1).sum()), int((o[: i + 1] == -1).sum())
        assert p[i] == pytest.approx(sign_test_p(wa, wb), rel=1e-9, abs=1e-15)


def test_prefix_two_proportion_matches_a_hand_computation() -> None:
    c = np.array([1, 0, 1, 1, 0, 0, 1, 0], dtype=bool)
    e = np.array([1, 1, 1, 1, 0, 1, 1, 1, 1], dtype=bool)  # one longer: cut
    p = prefix_two_proportion_p(c, e)
    assert len(p) == 8 and p[0] == 1.0  # both 1/1: pooled rate 1, nothing to test
    # after 8 each: control 4/8, experiment 7/8, pooled 11/16
    pooled = 11 / 16
    z = (7 / 8 - 4 / 8) / math.sqrt(pooled * (1 - pooled) * (2 / 8))
    assert p[-1] == pytest.approx(math.erfc(z / math.sqrt(2)))


def test_impressions_to_significance_rules() -> None:
    p = np.array([0.5, 0.04, 0.06, 0.03, 0.01, 0.02])
    assert impressions_to_significance(p, rule="first") == 2
    assert impressions_to_significance(p) == 4  # sustained: p < 0.05 from impression 4 on
    assert impressions_to_significance(p, impressions_per_step=2) == 8
    assert impressions_to_significance(p, rule="first", min_impressions=3) == 4
    assert impressions_to_significance(np.array([0.01, 0.2])) is None
    assert impressions_to_significance(np.array([0.01, 0.2]), rule="first") == 1
    assert impressions_to_significance(np.array([0.01, 0.01])) == 1
    assert impressions_to_significance(np.array([0.3, 0.3])) is None
    d = detection_summary([100, None, 300, 50, None])
    assert (d.runs, d.detected, d.median, d.share_detected) == (5, 3, 300.0, 0.6)
    assert detection_summary([None, None, 10]).median == math.inf
    assert (d.power_at(100), d.power_at(299), d.power_at(300), d.power_at(10**9)) == (0.4, 0.4, 0.6, 0.6)
    assert (d.impressions_for(0.2), d.impressions_for(0.4), d.impressions_for(0.5)) == (50.0, 100.0, 300.0)
    assert d.impressions_for(0.6) == 300.0 and d.impressions_for(0.8) == math.inf


def test_simulated_interleaving_detects_a_better_ranker() -> None:
    grades = collection()
    good, bad = ideal(grades), shuffled(grades, 1)
    found = []
    for run in range(5):
        ca, cb, _ = _interleave_and_click(grades, good, bad, 1500, seed=10 + run)
        found.append(impressions_to_significance(prefix_sign_test_p(outcomes(ca, cb))))
    summary = detection_summary(found)
    assert summary.detected == 5 and summary.median < 500


def test_interleaving_needs_fewer_impressions_than_ab() -> None:
    """The best document moved from rank 1 to rank 4: interleaving (sign test) reaches p < 0.05
    to stay with far fewer impressions than an A/B split on the clicked-search rate, as in the
    literature (Chapelle et al. 2012)."""
    grades = collection()
    good = ideal(grades)
    worse = good.copy()
    worse[:, [0, 3]] = worse[:, [3, 0]]
    inter, ab = [], []
    for run in range(6):
        ca, cb, _ = _interleave_and_click(grades, good, worse, 3000, seed=100 + run)
        inter.append(impressions_to_significance(prefix_sign_test_p(outcomes(ca, cb))))
        rng = np.random.default_rng(500 + run)
        q = rng.integers(0, grades.shape[0], size=(2, 1500))  # 3,000 impressions split in two arms
        control = simulate_clicks(grades[q[0][:, None], worse[q[0], :10]], rng).any(axis=1)
        experiment = simulate_clicks(grades[q[1][:, None], good[q[1], :10]], rng).any(axis=1)
        ab.append(impressions_to_significance(prefix_two_proportion_p(control, experiment), impressions_per_step=2))
    i, a = detection_summary(inter), detection_summary(ab)
    assert i.detected == 6 and 3 * i.median < a.median
    power = i.power_at(i.median)
    assert power >= 0.5 and a.impressions_for(power) > 3 * i.median


def test_sample_sizes_against_hand_computation_and_simulation() -> None:
    # 0.5 vs 0.6 at alpha 0.05, power 0.8: (1.95996 √0.495 + 0.84162 √0.49)² / 0.01 = 387.3 -> 388 an arm
    assert ab_sample_size(0.5, 0.6) == 2 * 388
    # q = 0.6: (1.95996 · 0.5 + 0.84162 √0.24)² / 0.01 = 193.8 non-tied, / 0.5 = 387.7 -> 388
    n = interleaving_sample_size(0.3, 0.2)
    assert n == 388
    rng = np.random.default_rng(0)
    o = rng.choice([1, -1, 0], p=[0.3, 0.2, 0.5], size=(400, n))
    wa, wb = (o == 1).sum(axis=1), (o == -1).sum(axis=1)
    power = np.mean([sign_test_p(x, y) < 0.05 for x, y in zip(wa, wb)])
    assert 0.72 < power < 0.88
    with pytest.raises(ValueError):
        ab_sample_size(0.5, 0.5)


# ---------------------------------------------------------------- A/B buckets


def test_wilson_interval_against_hand_computation() -> None:
    # 81 of 263, z = 1.959964: centre (0.307985 + 0.007303) / 1.014606 = 0.310749,
    # half 1.931748 · √(0.000810394 + 0.0000138842) = 0.055461
    assert wilson_interval(81, 263) == pytest.approx((0.310749 - 0.055461, 0.310749 + 0.055461), abs=2e-6)
    # 0 of 10: centre = half = 0.192073 / 1.384146 = 0.138766, so (0, 0.277533); 5 of 10: 0.5 ± 0.263407
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.277533), abs=2e-6)
    assert wilson_interval(5, 10) == pytest.approx((0.236593, 0.763407), abs=2e-6)
    assert wilson_interval(10, 10)[1] == 1.0 and wilson_interval(0, 0) == (0.0, 1.0)
    lo90, hi90 = wilson_interval(81, 263, confidence=0.90)
    assert 0.2553 < lo90 < hi90 < 0.3662  # narrower at 90 %


def test_two_proportion_ztest_against_hand_computation() -> None:
    # 40/100 vs 55/100: pooled 0.475, se = √(0.475 · 0.525 · 0.02) = 0.0706222, z = 0.15 / se
    z, p = two_proportion_ztest(40, 100, 55, 100)
    assert z == pytest.approx(0.15 / 0.0706222, rel=1e-6)
    assert p == pytest.approx(math.erfc(z / math.sqrt(2)))
    assert two_proportion_ztest(55, 100, 40, 100)[0] == pytest.approx(-z)
    assert two_proportion_ztest(0, 10, 0, 20) == (0.0, 1.0)
    assert two_proportion_ztest(0, 0, 3, 5) == (0.0, 1.0)


def test_clustered_rate_test_hand_case_and_clustering() -> None:
    # one search per user: the delta method reduces to the unpooled test with n − 1,
    # 0.15 / √(0.4 · 0.6 / 99 + 0.55 · 0.45 / 99) = 0.15 / 0.0701729
    clicked = np.r_[np.ones(40), np.zeros(60), np.ones(55), np.zeros(45)].astype(bool)
    arm = np.r_[np.zeros(100), np.ones(100)].astype(bool)
    z, p = clustered_rate_test(clicked, np.arange(200), ~arm, arm)
    assert z == pytest.approx(0.15 / 0.0701729, rel=1e-6) and p == pytest.approx(math.erfc(z / math.sqrt(2)))
    assert clustered_rate_test(clicked, np.zeros(200, int), ~arm, arm) == (0.0, 1.0)  # one user an arm
    # users who search 30 times each with their own click rate: no difference between the arms,
    # the search-level z-test rejects far more often than 5 %, the user-level one does not
    rng = np.random.default_rng(0)
    false_search, false_user = 0, 0
    for _ in range(40):
        users = np.repeat(np.arange(400), 30)
        clicked = rng.random(users.size) < rng.uniform(0.2, 0.9, size=400)[users]
        arm = (users % 2).astype(bool)
        x_c, x_e = int(clicked[~arm].sum()), int(clicked[arm].sum())
        false_search += two_proportion_ztest(x_c, int((~arm).sum()), x_e, int(arm.sum()))[1] < 0.05
        false_user += clustered_rate_test(clicked, users, ~arm, arm)[1] < 0.05
    assert false_search >= 8 and false_user <= 5, (false_search, false_user)


def test_bucket_assignment_is_stable_and_balanced() -> None:
    keys = [f"user-{i}" for i in range(100_000)]
    buckets = bucket_of(keys)
    # an independent computation of the documented rule
    for key in ("user-0", "user-42", "émile"):
        digest = hashlib.blake2b(b"semsearch-ab\0" + key.encode(), digest_size=8).digest()
        assert bucket_of([key])[0] == int.from_bytes(digest, "big") % 4
    assert bucket_of(keys[41:44]).tolist() == buckets[41:44].tolist()  # a key's bucket ignores the others
    assert (bucket_of(keys) == buckets).all()
    counts = np.bincount(buckets, minlength=4)
    assert chisquare(counts).pvalue > 0.001, counts
    assert chisquare(np.bincount(bucket_of(keys, 7), minlength=7)).pvalue > 0.001
    other = bucket_of(keys, salt="another experiment")
    assert 0.7 < (other != buckets).mean() < 0.8  # a new salt reshuffles (3/4 move with 4 buckets)
    layout = BucketLayout()
    arm = layout.arm(keys)
    assert ((arm == 0) == np.isin(buckets, [0, 1])).all() and ((arm == 1) == np.isin(buckets, [2, 3])).all()
    assert [layout.name(b) for b in range(4)] == ["control 1", "control 2", "experiment 1", "experiment 2"]
    assert (BucketLayout(5).arm(keys[:2000]) == -1).any()  # bucket 4 is in neither arm
    with pytest.raises(ValueError):
        BucketLayout(4, control=(0, 1), experiment=(1, 2))
    with pytest.raises(ValueError):
        BucketLayout(2, control=(0,), experiment=(2,))


def test_head_queries_rule() -> None:
    log = ["a"] * 5 + ["b"] * 3 + ["c", "d"]
    assert head_queries(log, 0.5) == {"a"}  # a alone is 5 of 10 searches
    assert head_queries(log, 0.6) == {"a", "b"}
    assert head_queries(log, 0.85) == {"a", "b", "c"}  # ties in frequency: by query
    assert head_queries(log, 1.0) == {"a", "b", "c", "d"}
    assert head_queries(log, 0.0) == set() and head_queries([], 0.5) == set()
    assert head_queries(["y", "x", "y", "x"], 0.5) == {"x"}


def _ab_log(n: int, lift: float, seed: int) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Searches by 5,000 users over Zipf-distributed queries; head queries get more clicks, and
    the experiment buckets add ``lift`` to every search's click probability."""
    rng = np.random.default_rng(seed)
    users = [f"u{i}" for i in rng.integers(0, 5000, size=n)]
    qid = np.minimum(rng.zipf(1.3, size=n), 2000) - 1
    queries = np.array([f"q{i}" for i in qid])
    base = np.where(qid < 5, 0.8, 0.55)
    arm = BucketLayout().arm(users)
    clicks = rng.random(n) < base + lift * (arm == 1)
    return users, queries, clicks.astype(np.int64) * rng.integers(1, 3, size=n), arm


def test_ab_table_on_a_simulated_log() -> None:
    users, queries, clicks, arm = _ab_log(60_000, 0.03, seed=0)
    t = ab_table(users, queries, clicks)
    assert list(t.rows) == [
        "control 1",
        "control 2",
        "experiment 1",
        "experiment 2",
        "control (all)",
        "experiment (all)",
    ]
    assert sum(t.rows[f"control {i}"]["all"].searches for i in (1, 2)) == t.rows["control (all)"]["all"].searches
    assert t.rows["control (all)"]["all"].searches == int((arm == 0).sum())
    assert t.rows["experiment (all)"]["all"].clicked == int(((clicks > 0) & (arm == 1)).sum())
    for cells in t.rows.values():
        assert cells["head"].searches + cells["tail"].searches == cells["all"].searches
        assert cells["head"].rate > cells["tail"].rate  # head queries click more in this log
        for r in cells.values():
            assert r.low < r.rate < r.high and (r.low, r.high) == wilson_interval(r.clicked, r.searches)
    head = head_queries(queries)
    assert t.n_head_queries == len(head) and t.rows["control 1"]["head"].searches == int(
        np.isin(queries, list(head))[np.array(BucketLayout().arm(users)) == 0].sum()
        - t.rows["control 2"]["head"].searches
    )
    by = {(c.label, c.segment): c for c in t.comparisons}
    exp_all = by["experiment vs control", "all"]
    assert exp_all.difference == pytest.approx(0.03, abs=0.01) and exp_all.p < 1e-6
    assert exp_all.z == pytest.approx(
        two_proportion_ztest(
            exp_all.control.clicked, exp_all.control.searches, exp_all.experiment.clicked, exp_all.experiment.searches
        )[0]
    )
    assert by["control 2 vs control 1 (A/A)", "all"].p > 0.001  # no difference between the controls
    assert exp_all.p_users < 1e-6 and exp_all.z_users == pytest.approx(exp_all.z, rel=0.1)  # ~12 searches a user
    md = t.to_markdown()
    assert "| z (users) | p (users) |" in md
    assert md.splitlines()[0].startswith("| Bucket | Searches | Clicked-search rate | 95 % CI | Head queries")
    assert "| control 1 |" in md and "| experiment vs control | tail |" in md and "Wilson" in md
    assert json.loads(json.dumps(t.to_json()))["rows"]["experiment 2"]["all"]["searches"] > 0
    # no lift: experiment vs control is not significant in this seeded log
    assert ab_table(*_ab_log(20_000, 0.0, seed=1)[:3]).comparisons[0].p > 0.05


# ---------------------------------------------------------------- counterfactual estimates


def test_candidate_ranks_hand_case() -> None:
    rankings = {"q1": ["d3", "d1", "d9"], "q2": ["d2"]}
    shown = [["d1", "d2", "d3"], ["d2", "d5"], ["d9", None, "d3"], ["d1"]]
    ranks = candidate_ranks(["q1", "q2", "q1", "q3"], shown, rankings)
    assert ranks.tolist() == [[2, 0, 1], [1, 0, 0], [3, 0, 1], [0, 0, 0]]


def test_ips_hand_case() -> None:
    clicks = np.array([[1, 0, 1]])
    prop = np.array([0.5, 0.25, 0.2])
    ranks = np.array([[2, 0, 1]])  # clicked docs ranked 2nd and 1st by the candidate
    est = counterfactual_estimate(clicks, prop, ranks)
    d2 = 1 / math.log2(3)
    assert est.clip is None and est.ips.value == pytest.approx(d2 / 0.5 + 1 / 0.2)  # no clipping by default
    clipped = counterfactual_estimate(clicks, prop, ranks, clip=4.0)
    assert clipped.ips.value == pytest.approx(d2 * 2 + 1 * 4.0)  # 1/0.2 = 5 clipped to 4
    assert (est.n_impressions, est.n_clicks, est.coverage) == (1, 2, 1.0)
    clicks_est = counterfactual_estimate(clicks, prop, ranks, metric="clicks")
    assert clicks_est.ips.value == pytest.approx(0.25 / 0.5 + 0.5 / 0.2)  # λ(r) = ρ_r
    assert counterfactual_estimate(clicks, prop, np.array([[2, 0, 11]])).coverage == 0.5  # rank 11 > k
    assert rank_weights([3.0, 2.0, 1.0], 3).tolist() == [0.0, 3.0, 2.0, 1.0]
    assert (est.ips.se, est.ips.z()) == (math.inf, 0.0)  # one impression: no standard error
    assert (Estimate(1.0, 0.0).z(1.0), Estimate(1.0, 0.0).z(0.5), Estimate(1.0, 0.5).z(0.5)) == (0.0, math.inf, 1.0)
    with pytest.raises(ValueError, match="propensity"):
        counterfactual_estimate(clicks, np.array([0.5, 0.25, 0.0]), ranks)
    with pytest.raises(ValueError, match="clicks"):
        counterfactual_estimate(clicks, np.tile(prop, (1, 1)), ranks, metric="clicks")
    for bad in (0.0, -1.0, math.nan, True):
        with pytest.raises(ValueError, match="clip"):
            counterfactual_estimate(clicks, prop, ranks, clip=bad)


def _logged(n: int, seed: int) -> tuple[np.ndarray, list[str], list[list[str]], np.ndarray, np.ndarray]:
    """A position-based log: a noisy logger shows 10 of each query's 20 documents, always in the
    same order for a query; users click by the simulator above."""
    grades = collection(seed=seed)
    rng = np.random.default_rng(seed)
    logger = np.argsort(-(grades + rng.normal(0, 1.5, size=grades.shape)), axis=1)[:, :10]
    q = rng.integers(0, grades.shape[0], size=n)
    shown_grades = grades[q[:, None], logger[q]]
    clicks = simulate_clicks(shown_grades, rng)
    queries = [f"q{i}" for i in q]
    shown = [[f"d{d}" for d in logger[i]] for i in q]
    return grades, queries, shown, clicks, p_click(shown_grades)


def _rankings(order: np.ndarray) -> dict[str, list[str]]:
    return {f"q{i}": [f"d{d}" for d in row] for i, row in enumerate(order)}


@pytest.mark.parametrize("metric", ["dcg", "clicks"])
def test_ips_is_unbiased_on_a_simulated_position_based_log(metric: str) -> None:
    grades, queries, shown, clicks, gamma = _logged(20_000, seed=0)
    truth = {}
    estimates = {}
    lam = rank_weights(metric, 10, RHO)
    for name, order in (("ideal", ideal(grades)), ("shuffled", shuffled(grades, 7))):
        ranks = candidate_ranks(queries, shown, _rankings(order))
        w = lam[np.where(ranks <= 10, ranks, 0)]
        truth[name] = float((w * gamma).sum(axis=1).mean())  # the estimand, from the simulator's γ
        est = counterfactual_estimate(clicks, RHO, ranks, metric=metric, n_bootstrap=200)
        estimates[name] = est
        assert abs(est.ips.z(truth[name])) < 3, (name, est.ips, truth[name])
        assert est.ips.interval is not None and est.ips.interval[0] < truth[name] < est.ips.interval[1]
        # clipping at 5 caps the weight of ranks 7-10 (ρ < 0.2): expectation Σ λ γ min(1, 5ρ)
        clipped = counterfactual_estimate(clicks, RHO, ranks, metric=metric, clip=5.0, n_bootstrap=0)
        clipped_truth = float((w * gamma * np.minimum(1.0, 5.0 * RHO)).sum(axis=1).mean())
        assert abs(clipped.ips.z(clipped_truth)) < 3 and clipped_truth < truth[name]
        assert clipped.ips.se < est.ips.se and clipped.ips.interval is None
        # ignoring the position bias (propensity 1) is far off: the test can tell a wrong weighting
        naive = counterfactual_estimate(clicks, np.ones(10), ranks, metric=metric)
        assert abs(naive.ips.z(truth[name])) > 10
    true_diff = truth["ideal"] - truth["shuffled"]
    assert true_diff > 0
    ranks_a = candidate_ranks(queries, shown, _rankings(ideal(grades)))
    ranks_b = candidate_ranks(queries, shown, _rankings(shuffled(grades, 7)))
    diff = counterfactual_difference(clicks, RHO, ranks_a, ranks_b, metric=metric, n_bootstrap=200)
    assert diff.ips.value == pytest.approx(estimates["ideal"].ips.value - estimates["shuffled"].ips.value)
    assert np.sign(diff.ips.value) == np.sign(true_diff)
    assert abs(diff.ips.z(true_diff)) < 3 and diff.p_value() < 1e-6
    assert diff.ips.interval is not None and diff.ips.interval[0] > 0  # the interval excludes no difference
    assert diff.ips.se < math.hypot(estimates["ideal"].ips.se, estimates["shuffled"].ips.se)  # pairing helps
    assert json.loads(json.dumps(diff.to_json()))["ips"]["value"] == pytest.approx(diff.ips.value)


def test_counterfactual_sign_agrees_for_a_small_difference() -> None:
    """Two candidates one swap apart at the top: the estimated difference has the true sign."""
    grades, queries, shown, clicks, gamma = _logged(20_000, seed=1)
    better = ideal(grades)
    worse = better.copy()
    worse[:, [0, 2]] = worse[:, [2, 0]]  # the best document moved to rank 3
    ra = candidate_ranks(queries, shown, _rankings(better))
    rb = candidate_ranks(queries, shown, _rankings(worse))
    lam = rank_weights("dcg", 10)
    true_diff = float(((lam[np.where(ra <= 10, ra, 0)] - lam[np.where(rb <= 10, rb, 0)]) * gamma).sum(axis=1).mean())
    diff = counterfactual_difference(clicks, RHO, ra, rb, n_bootstrap=0)
    clipped = counterfactual_difference(clicks, RHO, ra, rb, clip=10.0, n_bootstrap=0)
    assert true_diff > 0 and diff.ips.value > 0 and clipped.ips.value > 0
    assert abs(diff.ips.z(true_diff)) < 3
