"""Compiled paths of the served ranker's features: the same numbers as the code they replaced."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from semsearch.models.postings import rows_dot


def test_rows_dot_is_scipys_product_to_the_bit() -> None:
    rng = np.random.default_rng(0)
    W = sp.random(300, 80, density=0.08, format="csr", random_state=1, dtype=np.float32)
    W.sort_indices()
    for _ in range(20):
        rows = rng.integers(0, 300, size=int(rng.integers(0, 60)))
        terms = np.unique(rng.integers(0, 80, size=int(rng.integers(0, 6)))).astype(np.int64)
        w = rng.random(len(terms))
        qv = np.zeros(80)
        qv[terms] = w
        want = (W[rows] @ qv) if len(rows) else np.zeros(0)
        got = rows_dot(W.indptr, W.indices, W.data, rows, terms, w)
        assert got.dtype == np.float64 and np.array_equal(got, want)
