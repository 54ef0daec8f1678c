"""Simulated clicks straight into arrays (semsearch.clicks.simulate.simulate_click_arrays): exactly
the pairs asked for, seeded, memory bounded by the pairs and one chunk; and their grades
(semsearch.clicks.labels.click_grades)."""

from __future__ import annotations

import tracemalloc

import numpy as np

from click_rankings import random_rankings
from semsearch.clicks.labels import click_grades
from semsearch.clicks.simulate import simulate_click_arrays


def test_exactly_the_pairs_asked_for_seeded():
    r = random_rankings()
    a = simulate_click_arrays(r, pairs=5_000, seed=3, chunk_size=700)
    b = simulate_click_arrays(r, pairs=5_000, seed=3, chunk_size=700)
    c = simulate_click_arrays(r, pairs=5_000, seed=4, chunk_size=700)
    assert len(a.q) == len(a.d) == 5_000 and a.q.dtype == a.d.dtype == np.int32
    assert np.array_equal(a.q, b.q) and np.array_equal(a.d, b.d)
    assert not np.array_equal(a.d, c.d)
    assert a.rank_counts.sum() == a.grade_counts.sum() == 5_000
    assert a.query_impressions.sum() == a.impressions and a.clicks >= 5_000
    # every pair is a document the logger showed its query
    assert np.all((r.docs[a.q] == a.d[:, None]).any(axis=1))
    # position bias: rank 1 gets more clicks than rank 10; higher grades more than grade 0 per shown cell
    assert a.rank_counts[0] > a.rank_counts[-1]


def test_by_impressions_keeps_every_click():
    r = random_rankings()
    a = simulate_click_arrays(r, pairs=0, impressions=3_000, seed=0, chunk_size=256)
    assert a.impressions == 3_000 and len(a.q) == a.clicks > 0


def test_memory_is_bounded_by_the_pairs_and_one_chunk():
    r = random_rankings(n_queries=50)
    tracemalloc.start()
    a = simulate_click_arrays(r, pairs=200_000, seed=0, chunk_size=2_000)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(a.q) == 200_000
    # the two int32 arrays (1.6 MB) plus a chunk's lists, nowhere near a Python object per click
    assert peak < 4_000_000, peak


def test_click_grades_grade_shown_titles_by_click_rate():
    r = random_rankings()
    a = simulate_click_arrays(r, pairs=20_000, seed=0)
    qrels = click_grades(r, a, levels=5)
    assert qrels and all(0 <= g <= 4 for judged in qrels.values() for g in judged.values())
    for qid, judged in qrels.items():
        i = r.query_ids.index(qid)
        assert set(judged) == {r.doc_ids[d] for d in r.docs[i] if d >= 0}
    # the most clicked grade-4 titles at rank 1 end above grade 0 on average
    hi = [g for i, q in enumerate(r.query_ids) if q in qrels for j, g in enumerate(qrels[q].values()) if j == 0]
    assert max(hi) >= 1
