"""Negative documents for the softmax-over-cosine loss (CLSM §4, Eq. 5: D⁺ plus J unclicked).

Random negatives come from the document pool, never a positive of the same query. To encode
each sampled document once per batch, a batch first draws ``pool`` distinct random documents and
every query takes its J negatives among them: each query's negatives are still uniform over the
collection, and J = 50 costs about what J = 4 does."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..arrays import runs


def sample_pool(rng: np.random.Generator, n_docs: int, size: int) -> np.ndarray:
    """``size`` distinct document rows drawn uniformly (all rows when the pool is smaller)."""
    if size >= n_docs:
        return np.arange(n_docs, dtype=np.int64)
    return np.sort(rng.choice(n_docs, size=size, replace=False)).astype(np.int64)


class PositiveKeys:
    """Every (query row, positive document row) pair as one sorted int64 key (``q << 32 | d``), so
    a whole batch's drawn documents are checked against their queries' positives in one
    ``searchsorted`` instead of building and sorting the batch's keys anew (``np.isin``)."""

    def __init__(self, q_rows: np.ndarray, d_rows: np.ndarray):
        q, d = np.asarray(q_rows, dtype=np.int64), np.asarray(d_rows, dtype=np.int64)
        if len(q) and (q.min() < 0 or q.max() >= 1 << 31 or d.min() < 0 or d.max() >= 1 << 32):
            raise ValueError("PositiveKeys: query rows must lie in [0, 2^31) and document rows in [0, 2^32)")
        self.keys = np.unique((q << 32) | d)

    @classmethod
    def of_sets(cls, positives: Sequence[set[int]]) -> PositiveKeys:
        """Query row ``i``'s positives are ``positives[i]``."""
        q = np.fromiter((i for i, ps in enumerate(positives) for _ in ps), dtype=np.int64)
        d = np.fromiter((d for ps in positives for d in ps), dtype=np.int64, count=len(q))
        return cls(q, d)

    def isin(self, q_rows: np.ndarray, docs: np.ndarray) -> np.ndarray:
        """Whether ``docs[i, ...]`` is a positive of query row ``q_rows[i]``, elementwise."""
        k = (np.asarray(q_rows, dtype=np.int64).reshape(-1, *([1] * (docs.ndim - 1))) << 32) | docs
        at = np.minimum(np.searchsorted(self.keys, k), max(len(self.keys) - 1, 0))
        return self.keys[at] == k if len(self.keys) else np.zeros(k.shape, dtype=bool)

    def among(self, q_rows: np.ndarray, docs: np.ndarray) -> np.ndarray:
        """(len(q_rows), len(docs)): whether ``docs[c]`` is a positive of query row ``q_rows[i]``,
        as ``isin(q_rows, docs[None, :])``, but from each query's own run of keys (its few
        positives) matched to the columns holding them, not one lookup per entry (``isin`` would
        binary-search every (query, document) entry of in-batch negatives' mask)."""
        q, d = np.asarray(q_rows, dtype=np.int64), np.asarray(docs, dtype=np.int64)
        out = np.zeros((len(q), len(d)), dtype=bool)
        lo, hi = np.searchsorted(self.keys, q << 32), np.searchsorted(self.keys, (q + 1) << 32)
        row, within = runs(hi - lo)
        pos = lo[row] + within  # each query's keys
        order = np.argsort(d, kind="stable")
        sorted_docs, positive = d[order], self.keys[pos] & 0xFFFFFFFF
        a, b = np.searchsorted(sorted_docs, positive, side="left"), np.searchsorted(sorted_docs, positive, side="right")
        at, within = runs(b - a)
        col = a[at] + within  # each (query, positive) pair's columns holding that document
        out[row[at], order[col]] = True
        return out


def random_negatives(
    rng: np.random.Generator,
    pool: np.ndarray,
    positives: Sequence[set[int]] | tuple[PositiveKeys, np.ndarray],
    j: int,
    *,
    tries: int = 8,
) -> np.ndarray:
    """(queries × J) indices into ``pool``: J random pool documents per query, avoiding that
    query's positive rows (resampled; a slot that keeps colliding is -1, which the loss masks).
    ``positives``: per query its positive rows, or (``PositiveKeys`` of all query rows, the
    batch's query rows) — the same draws either way.

    Args:
        rng: the random generator.
        pool: the batch's document pool.
        positives: per query its positive rows, or (``PositiveKeys``, the batch's query rows).
        j: negatives per query.
        tries: resampling rounds for colliding slots.

    Returns:
        (queries, J) indices into ``pool``, -1 where none was found."""
    if isinstance(positives, tuple):
        keys, owners = positives
    else:
        keys, owners = PositiveKeys.of_sets(positives), np.arange(len(positives), dtype=np.int64)
    b = len(owners)
    idx = rng.integers(0, len(pool), size=(b, j))
    bad = keys.isin(owners, pool[idx])
    for _ in range(tries):
        if not bad.any():
            break
        idx[bad] = rng.integers(0, len(pool), size=int(bad.sum()))
        bad = keys.isin(owners, pool[idx])
    idx[bad] = -1
    return idx


def drawn_documents(pool: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The documents of ``pool`` (``sample_pool``'s: distinct, ascending) that some query drew,
    and ``neg`` re-indexed into them (-1 kept): ``np.unique(pool[neg[neg >= 0]],
    return_inverse=True)`` by marking the drawn slots instead of sorting the draws. Only these are
    encoded: the others take no part in the loss."""
    drawn = neg >= 0
    picked = neg[drawn]
    mark = np.zeros(len(pool), dtype=bool)
    mark[picked] = True
    out = neg.copy()
    out[drawn] = (np.cumsum(mark) - 1)[picked]
    return pool[mark], out


def hard_negatives(rng: np.random.Generator, candidates: Sequence[Sequence[int]], h: int) -> np.ndarray:
    """(queries × h) document rows drawn from each query's judged-but-not-positive documents
    (-1 where a query has fewer than h)."""
    out = np.full((len(candidates), h), -1, dtype=np.int64)
    for i, c in enumerate(candidates):
        if len(c):
            take = rng.choice(len(c), size=min(h, len(c)), replace=False)
            out[i, : len(take)] = np.asarray(c, dtype=np.int64)[take]
    return out


def uniform_negatives(
    rng: np.random.Generator, population: np.ndarray, exclude: set[int], n: int, *, tries: int = 4
) -> np.ndarray:
    """Up to ``n`` distinct document rows drawn uniformly from ``population`` (rows), none in
    ``exclude`` (a query's judged documents): NEG_global over the corpus, NEG_cluster over the
    query's cluster (bert-semantic-retrieval-2020 §3.2.1). Fewer when the population runs out.

    Args:
        rng: the random generator.
        population: the rows drawn from.
        exclude: rows never drawn.
        n: rows wanted.
        tries: drawing rounds.

    Returns:
        The drawn rows."""
    if n <= 0 or len(population) == 0:
        return np.zeros(0, dtype=np.int64)
    if len(population) <= 4 * (n + len(exclude)):  # small population: filter, then draw
        pool = population[~np.isin(population, np.fromiter(exclude, dtype=np.int64, count=len(exclude)))]
        return rng.choice(pool, size=min(n, len(pool)), replace=False).astype(np.int64)
    for _ in range(tries):  # large population: draw a few extra, drop excluded
        draw = rng.choice(population, size=min(len(population), n + len(exclude) + 8), replace=False)
        keep = np.array([d for d in draw if int(d) not in exclude], dtype=np.int64)
        if len(keep) >= n:
            return keep[:n]
    return keep[:n]
