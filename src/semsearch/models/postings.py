"""Compiled top-k over an inverted index: the lexical models' retrieval kernel.

A query's score for a document is the sum, over the query's terms in term-id order, of the query
weight times the document's stored term weight (``LexicalModel._postings``, terms x documents,
CSR, float32), plus an optional per-document addend times a per-query scale (the unigram LM's
length term). The results are exactly those of the formula this replaced — scipy's ``Q @ W``
then ``best_k``: the same documents, the same order (ties by doc id rank), the same float32 sums
to the bit; the tests hold it to that.

How: the query's postings are walked term by term into a float32 accumulator (a document's first
touch is noted in a list: weights are positive, so a zero means untouched); the touched scores are
then copied into one sequential array (resetting the accumulator), a min-heap of k finds the k-th
best score, and the documents at or above it — ties at the cut included — are heap-sorted by
(score desc, doc id rank). Batches run in parallel over queries (numba's threads,
``NUMBA_NUM_THREADS``), each thread with its own accumulator; the GIL is released, so a server's
threads also search concurrently.

Tried and left out: MaxScore in its term-at-a-time form (Turtle & Flood 1995; terms by decreasing
upper bound, the rest probed once they cannot lift an unseen document into the top k). On Home
Depot titles it skipped only 24-40 % of the postings at k=10 (3-10 % on SciFact), and its checks
and the term-id-order re-summing needed for identical scores cost more than that saved.

Why numba and not scipy + numpy: the sparse product materialises every matched (query, document)
score and ``best_k`` then partitions it in Python per query — the overhead, not the arithmetic,
was most of the time; bm25s's numba backend (the fastest peer) was ~2x faster single-threaded
for that reason. A C extension would do as well but needs a compiler at install time; numba
ships wheels."""

from __future__ import annotations

import threading

import numba
import numpy as np
from numba import prange

_F32 = np.float32


@numba.njit(cache=True, nogil=True)
def _better(s_a: float, r_a: int, s_b: float, r_b: int) -> bool:
    """Hit a ranks above hit b: higher score, or the same score and an earlier doc id."""
    return s_a > s_b or (s_a == s_b and r_a < r_b)


@numba.njit(cache=True, nogil=True)
def _sift_min(hs: np.ndarray, i: int, n: int) -> None:
    """Hole-based sift-down in a min-heap of scores (the smallest at the root)."""
    s = hs[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and hs[c + 1] < hs[c]:
            c += 1
        if hs[c] >= s:
            break
        hs[i] = hs[c]
        i = c
    hs[i] = s


@numba.njit(cache=True, nogil=True)
def _sift_best(hs: np.ndarray, hd: np.ndarray, hr: np.ndarray, i: int, n: int) -> None:
    """Hole-based sift-down in a heap with the best hit (score desc, rank asc) at the root."""
    s, d, r = hs[i], hd[i], hr[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _better(hs[c + 1], hr[c + 1], hs[c], hr[c]):
            c += 1
        if not _better(hs[c], hr[c], s, r):
            break
        hs[i], hd[i], hr[i] = hs[c], hd[c], hr[c]
        i = c
    hs[i], hd[i], hr[i] = s, d, r


@numba.njit(cache=True, nogil=True)
def _kth_best(cs: np.ndarray, n: int, k: int) -> float:
    """The k-th largest of the first ``n`` of ``cs`` (-inf if fewer): a min-heap of the best k."""
    if n < k:
        return -np.inf
    hs = cs[:k].copy()
    for i in range(k // 2 - 1, -1, -1):
        _sift_min(hs, i, k)
    for j in range(k, n):
        if cs[j] > hs[0]:
            hs[0] = cs[j]
            _sift_min(hs, 0, k)
    return hs[0]


@numba.njit(cache=True, nogil=True)
def _one_query(terms, weights, scale, indptr, indices, data, addend, ranks, k, acc, touched,
               out_docs, out_scores, walked) -> int:  # type: ignore[no-untyped-def]
    """Top ``k`` of one query (``terms`` ascending, positive or zero ``weights``) into
    ``out_docs`` / ``out_scores``, best first; returns how many. ``acc`` (zeros) and ``touched``
    are scratch of one entry per document, left as found; ``walked[0]`` counts the postings."""
    n_docs = len(acc)
    n_post = 0
    for i in range(len(terms)):
        if weights[i] != 0:  # a zero weight adds nothing anywhere (scipy adds exact zeros)
            n_post += indptr[terms[i] + 1] - indptr[terms[i]]
    walked[0] += n_post
    # long queries over small collections touch most documents: then a plain scan of the
    # accumulator beats noting first touches (a branch per posting) and gathering them
    dense = n_post >= n_docs  # (measured: 2x or 4x fewer postings already ran Home Depot titles slower)
    nt = 0
    for i in range(len(terms)):
        t, w = terms[i], weights[i]
        if w == 0:
            continue
        if dense:
            for p in range(indptr[t], indptr[t + 1]):
                acc[indices[p]] += w * data[p]
        else:
            for p in range(indptr[t], indptr[t + 1]):
                d = indices[p]
                if acc[d] == 0:
                    touched[nt] = d
                    nt += 1
                acc[d] += w * data[p]
    # the touched documents' scores, in one sequential array (the passes below read it, not acc)
    # (written out: numba's inline='always' helper for this ran the whole query 2x slower)
    has_addend = len(addend) > 0
    cs = np.empty(min(n_post, n_docs), dtype=np.float64)
    cd = np.empty(min(n_post, n_docs), dtype=np.int64)
    if dense:
        for d in range(n_docs):
            if acc[d] != 0:
                cs[nt] = np.float64(acc[d]) + (scale * addend[d] if has_addend else 0.0)
                cd[nt] = d
                nt += 1
                acc[d] = 0
    else:
        for j in range(nt):
            d = touched[j]
            cs[j] = np.float64(acc[d]) + (scale * addend[d] if has_addend else 0.0)
            cd[j] = d
            acc[d] = 0
    # every document at or above the k-th best score (ties at the cut included)
    cutoff = _kth_best(cs, nt, k)
    c = 0
    for j in range(nt):
        if cs[j] >= cutoff:
            cs[c], cd[c] = cs[j], cd[j]
            c += 1
    cr = np.empty(c, dtype=np.int64)
    for j in range(c):
        cr[j] = ranks[cd[j]]
    # best first: heap sort of the candidates, stopped after k
    for i in range(c // 2 - 1, -1, -1):
        _sift_best(cs, cd, cr, i, c)
    n_out = min(k, c)
    for j in range(n_out):
        out_scores[j], out_docs[j] = cs[0], cd[0]
        last = c - 1 - j
        cs[0], cd[0], cr[0] = cs[last], cd[last], cr[last]
        _sift_best(cs, cd, cr, 0, last)
    return n_out


@numba.njit(cache=True, nogil=True)
def _run(lo, hi, qptr, qterms, qweights, qscale, indptr, indices, data, addend, ranks, k,
         acc, touched, out_docs, out_scores, out_n, walked) -> None:  # type: ignore[no-untyped-def]
    """Queries ``lo`` to ``hi`` one after another with one scratch."""
    for q in range(lo, hi):
        a, b = qptr[q], qptr[q + 1]
        out_n[q] = _one_query(qterms[a:b], qweights[a:b], qscale[q], indptr, indices, data, addend, ranks, k,
                              acc, touched, out_docs[q], out_scores[q], walked[q:q + 1])


@numba.njit(cache=True, nogil=True, parallel=True)
def _batch(qptr, qterms, qweights, qscale, indptr, indices, data, addend, ranks, k,
           n_docs, n_chunks, out_docs, out_scores, out_n, walked) -> None:  # type: ignore[no-untyped-def]
    """Every query's top ``k`` (rows of the outputs); ``n_chunks`` contiguous runs of queries in
    parallel, each with its own scratch."""
    nq = len(qptr) - 1
    for c in prange(n_chunks):
        _run(c * nq // n_chunks, (c + 1) * nq // n_chunks, qptr, qterms, qweights, qscale, indptr, indices, data,
             addend, ranks, k, np.zeros(n_docs, dtype=np.float32), np.empty(n_docs, dtype=np.int32),
             out_docs, out_scores, out_n, walked)


class PostingsTopK:
    """Top-k retrieval over fixed term-major weights (``indptr``/``indices``/``data`` of a CSR
    terms x documents matrix), an optional per-document ``addend`` and doc id ``ranks``.
    Stored weights must be positive (BM25, the unigram LM and TF-IDF weights are; zeros are
    dropped before): the kernel reads a zero accumulator as an untouched document."""

    #: batches below this many queries run on the calling thread (no thread-pool start-up)
    PARALLEL_FROM = 64

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n_docs: int,
                 ranks: np.ndarray, addend: np.ndarray | None = None):
        self.indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        self.indices = np.ascontiguousarray(indices, dtype=np.int32)
        self.data = np.ascontiguousarray(data, dtype=_F32)
        if len(self.data) and not float(self.data.min()) > 0:
            raise ValueError("compiled top-k needs positive stored weights (drop zeros first)")
        self.n_docs = n_docs
        self.ranks = np.ascontiguousarray(ranks, dtype=np.int64)
        self.addend = np.zeros(0) if addend is None else np.ascontiguousarray(addend, dtype=np.float64)
        self._local = threading.local()  # per calling thread: scratch for a batch run on it

    def _scratch(self) -> tuple[np.ndarray, np.ndarray]:
        s = getattr(self._local, "s", None)
        if s is None:
            s = self._local.s = (np.zeros(self.n_docs, dtype=_F32), np.empty(self.n_docs, dtype=np.int32))
        return s

    def search(self, qptr: np.ndarray, qterms: np.ndarray, qweights: np.ndarray, qscale: np.ndarray,
               k: int, walked: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(doc positions, scores, counts): row ``i`` of the first two holds query ``i``'s best
        ``counts[i]`` hits, best first. Queries are CSR rows (``qptr``, ascending term ids,
        non-negative float32 weights). ``walked`` (int64, one per query, optional) receives the
        number of postings each query walked."""
        nq = len(qptr) - 1
        k = max(0, min(k, self.n_docs))
        docs = np.full((nq, k), -1, dtype=np.int64)
        scores = np.zeros((nq, k), dtype=np.float64)
        counts = np.zeros(nq, dtype=np.int64)
        if nq == 0 or k == 0:
            return docs, scores, counts
        qweights = np.ascontiguousarray(qweights, dtype=_F32)
        if len(qweights) and float(qweights.min()) < 0:
            raise ValueError("compiled top-k needs non-negative query weights")
        if walked is None:
            walked = np.zeros(nq, dtype=np.int64)
        args = (np.ascontiguousarray(qptr, dtype=np.int64), np.ascontiguousarray(qterms, dtype=np.int64), qweights,
                np.ascontiguousarray(qscale, dtype=np.float64), self.indptr, self.indices, self.data, self.addend,
                self.ranks, k)
        if nq >= self.PARALLEL_FROM and numba.get_num_threads() > 1:
            n_chunks = min(numba.get_num_threads() * 2, nq // 16)  # 2 per thread: a preempted thread delays less
            _batch(*args, self.n_docs, n_chunks, docs, scores, counts, walked)
        else:
            _run(0, nq, *args, *self._scratch(), docs, scores, counts, walked)
        return docs, scores, counts
