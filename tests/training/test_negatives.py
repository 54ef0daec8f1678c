"""Random negatives: the keyed lookup (``PositiveKeys``, what the trainers pass) draws exactly what
the per-query sets did, and never a query's own positive."""

from __future__ import annotations

import numpy as np
import pytest

from semsearch.training.negatives import PositiveKeys, random_negatives


def _reference(rng, pool, positives, j, tries=8):
    """random_negatives before the keyed lookup: the batch's keys built and ``np.isin``-ed anew."""
    b = len(positives)
    big = int(pool.max()) + 1
    keys = np.fromiter((i * big + d for i, ps in enumerate(positives) for d in ps if d < big), dtype=np.int64)
    rowkey = np.arange(b, dtype=np.int64)[:, None] * big
    idx = rng.integers(0, len(pool), size=(b, j))
    bad = np.isin(rowkey + pool[idx], keys)
    for _ in range(tries):
        if not bad.any():
            break
        idx[bad] = rng.integers(0, len(pool), size=int(bad.sum()))
        bad = np.isin(rowkey + pool[idx], keys)
    idx[bad] = -1
    return idx


@pytest.mark.parametrize("j", [1, 4, 50])
def test_keyed_positives_draw_what_the_sets_drew(j):
    gen = np.random.default_rng(j)
    n_queries, n_docs = 300, 400
    q_rows = np.repeat(np.arange(n_queries), gen.integers(1, 6, n_queries))
    d_rows = gen.integers(0, n_docs, len(q_rows))  # repeats included
    sets = [set() for _ in range(n_queries)]
    for q, d in zip(q_rows, d_rows):
        sets[q].add(int(d))
    keys = PositiveKeys(q_rows, d_rows)
    for seed in range(5):
        batch = gen.choice(n_queries, 64)
        pool = np.sort(gen.choice(n_docs, 40, replace=False))  # small: many collisions to redraw
        want = _reference(np.random.default_rng(seed), pool, [sets[q] for q in batch], j)
        assert (random_negatives(np.random.default_rng(seed), pool, (keys, batch), j) == want).all()
        assert (random_negatives(np.random.default_rng(seed), pool, [sets[q] for q in batch], j) == want).all()
        drawn = np.where(want >= 0, pool[want.clip(min=0)], -1)
        assert all(int(d) not in sets[q] for q, row in zip(batch, drawn) for d in row if d >= 0)


def test_a_pool_of_positives_only_leaves_every_slot_empty():
    keys = PositiveKeys(np.array([0, 0, 1]), np.array([5, 7, 5]))
    neg = random_negatives(np.random.default_rng(0), np.array([5, 7]), (keys, np.array([0])), 3)
    assert (neg == -1).all()
    assert not PositiveKeys(np.zeros(0, np.int64), np.zeros(0, np.int64)).isin(np.array([0]), np.array([[1, 2]])).any()


@pytest.mark.parametrize("j", [0, 1, 4, 50])
def test_drawn_documents_are_the_unique_draws(j):
    """``drawn_documents`` marks instead of sorting: the same documents and re-indexed draws as
    ``np.unique(..., return_inverse=True)``, the empty slots (-1) kept."""
    from semsearch.training.negatives import drawn_documents, sample_pool

    rng = np.random.default_rng(j)
    pool = sample_pool(rng, 500, 120)
    neg = rng.integers(0, len(pool), size=(30, j))
    neg[rng.random(neg.shape) < 0.1] = -1
    used, out = drawn_documents(pool, neg)
    want, inverse = np.unique(pool[neg[neg >= 0]], return_inverse=True)
    assert np.array_equal(used, want) and used.dtype == pool.dtype
    assert np.array_equal(out[neg >= 0], inverse.reshape(-1)) and (out[neg < 0] == -1).all() and out.shape == neg.shape
    assert np.array_equal(used[out[neg >= 0]], pool[neg[neg >= 0]])


def test_positive_keys_refuse_rows_outside_their_bits():
    with pytest.raises(ValueError, match="document rows"):
        PositiveKeys(np.array([0]), np.array([1 << 32]))
    with pytest.raises(ValueError, match="query rows"):
        PositiveKeys(np.array([-1]), np.array([0]))


def test_positives_among_a_batch_are_the_outer_lookup():
    """``among`` (in-batch negatives' mask) equals a per-query set lookup over every (query,
    document) entry, with repeated queries and documents, rows without positives and an empty key
    set; and ``isin`` over the outer product agrees."""
    rng = np.random.default_rng(0)
    for trial in range(200):
        n_q, n_d = int(rng.integers(1, 20)), int(rng.integers(1, 30))
        q = rng.integers(0, n_q, int(rng.integers(0, 50)))
        d = rng.integers(0, n_d, len(q))
        sets = [set(d[q == i].tolist()) for i in range(n_q + 2)]
        keys = PositiveKeys(q, d)
        rows = rng.integers(0, n_q + 2, int(rng.integers(1, 15)))
        docs = rng.integers(0, n_d + 2, int(rng.integers(0, 20)))
        want = np.array([[int(x) in sets[r] for x in docs] for r in rows], dtype=bool).reshape(len(rows), len(docs))
        assert np.array_equal(keys.among(rows, docs), want), trial
        assert np.array_equal(keys.isin(rows, docs[None, :]), want), trial
    assert PositiveKeys(np.array([0]), np.array([3])).among(np.array([0, 0]), np.array([3, 1, 3])).tolist() == [
        [True, False, True],
        [True, False, True],
    ]
