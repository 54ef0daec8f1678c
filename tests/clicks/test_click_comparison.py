"""Two rankers compared online by simulated users (semsearch.clicks.comparison): interleaving, A/B
and counterfactual runs on two runs over judged queries, and the simulated A/B search log."""

from __future__ import annotations

import numpy as np

from click_rankings import random_rankings
from semsearch.clicks import PositionBasedUser, Rankings
from semsearch.clicks.abtest import ab_table
from semsearch.clicks.comparison import online_comparison, simulate_ab


def _runs(n_queries: int = 40, k: int = 10):
    """Qrels with one relevant document per query (grade 4 at 'd{q}-0', grade 2 at 'd{q}-1'), a
    ranker with them on top (A) and one with them at ranks 9-10 (B)."""
    qrels = {f"q{i}": {f"d{i}-0": 4, f"d{i}-1": 2} for i in range(n_queries)}
    good = {q: [f"d{q[1:]}-{j}" for j in range(k)] for q in qrels}
    bad = {q: ids[2:] + ids[:2] for q, ids in good.items()}
    return qrels, good, bad


def test_interleaving_finds_the_better_ranker_quickly_and_ab_needs_more():
    qrels, good, bad = _runs()
    user = PositionBasedUser(4)
    c = online_comparison(good, bad, qrels, user=user, runs=5, horizon=2000, ab_factor=5, seed=1)
    assert c["interleaving"]["detected"] == 5 and c["interleaving"]["wins_a"] > 3 * c["interleaving"]["wins_b"]
    assert c["interleaving"]["median_impressions"] < 500
    assert c["ab"]["clicked_rate_a"] > c["ab"]["clicked_rate_b"]
    assert c["ab"]["median_impressions"] > c["interleaving"]["median_impressions"]
    assert c["counterfactual"]["ips"]["value"] > 0 and c["counterfactual"]["p_ips"] < 0.05
    # B's log alone never shows what only A ranks high: there the estimate need not find A better
    assert c["counterfactual_from_b"]["coverage"] <= c["counterfactual"]["coverage"]
    # the same ranker on both sides: no lasting preference, the counterfactual difference is 0
    same = online_comparison(good, good, qrels, user=user, runs=5, horizon=2000, ab_factor=1, seed=2)
    assert same["interleaving"]["detected"] <= 1
    assert same["counterfactual"]["ips"]["value"] == 0


def test_simulated_ab_is_seeded_and_an_a_a_test_shows_no_difference():
    r = random_rankings()
    k1, q1, c1 = simulate_ab(r, r, 20_000, 2_000, seed=5)
    k2, q2, c2 = simulate_ab(r, r, 20_000, 2_000, seed=5)
    assert np.array_equal(c1, c2) and np.array_equal(k1, k2) and np.array_equal(q1, q2)
    t = ab_table(k1, q1, c1)
    assert set(t.rows) >= {"control 1", "control 2", "experiment 1", "experiment 2"}
    assert t.comparisons[0].p > 0.001  # the same ranker in both arms
    # a better experiment ranker (grades sorted down each list) gets more clicked searches
    full = random_rankings(short=False)
    order = np.argsort(-full.grades, axis=1, kind="stable")
    docs, grades = np.take_along_axis(full.docs, order, 1), np.take_along_axis(full.grades, order, 1)
    better = Rankings(full.query_ids, full.queries, full.doc_ids, docs, grades, 4)
    worse = Rankings(full.query_ids, full.queries, full.doc_ids, docs[:, ::-1].copy(), grades[:, ::-1].copy(), 4)
    k, q, c = simulate_ab(worse, better, 50_000, 5_000, seed=0)
    assert ab_table(k, q, c).comparisons[0].difference > 0.02
