"""A small generated ranking for the click tests: random documents per query (the first query's
list cut short at 6) with random grades 0-4, seeded."""

from __future__ import annotations

import numpy as np

from semsearch.clicks import Rankings


def random_rankings(n_queries: int = 30, k: int = 10, n_docs: int = 200, seed: int = 1, short: bool = True) -> Rankings:
    rng = np.random.default_rng(seed)
    docs = np.stack([rng.choice(n_docs, k, replace=False) for _ in range(n_queries)]).astype(np.int32)
    if short:
        docs[0, 6:] = -1  # a short list
    grades = rng.integers(0, 5, docs.shape).astype(np.int8)
    grades[docs < 0] = 0
    return Rankings(
        [f"q{i}" for i in range(n_queries)],
        [f"query {i}" for i in range(n_queries)],
        [f"d{i}" for i in range(n_docs)],
        docs,
        grades,
        max_grade=4,
    )
