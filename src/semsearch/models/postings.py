"""Compiled top-k over an inverted index: the lexical models' retrieval kernel.

A query's score for a document is the sum, over the query's terms in term-id order, of the query
weight times the document's stored term weight (``LexicalModel._postings``, terms x documents,
CSR, float32, doc ids ascending in each term's postings), plus an optional per-document addend
times a per-query scale (the unigram LM's length term). The results are exactly those of scipy's
``Q @ W`` then ``best_k``: the same documents, the same order (ties by doc id rank), the same
float32 sums to the bit; the tests hold it to that. Two kernels give them, chosen per query
(``PostingsTopK.prune``):

Exhaustive, term at a time: the query's postings are walked term by term into a float32
accumulator (a document's first touch is noted in a list: weights are positive, so a zero means
untouched; with at least as many postings as documents, no list: the whole accumulator is
scanned), then the touched scores go (resetting the accumulator) through a heap of the best k by
(score desc, doc id rank). The dense scan goes by runs of 32 documents: each run's largest
accumulator first, then the runs in bands of decreasing maxima, so the heap's threshold is high
early and a run whose maximum cannot reach it is only reset.

Pruned, document at a time: block-max MaxScore (Turtle & Flood 1995's MaxScore over postings cut
into blocks of 64 with each block's largest weight, as in Ding & Suel 2011's block-max WAND and
Lucene's MaxScoreBulkScorer). The query's terms are sorted by their largest contribution (query
weight x the term's max weight); once k documents are scored, the least terms whose bounds
together cannot reach the k-th score are "lazy": candidates come from the other ("essential")
terms' postings only, in doc id order, and a lazy term is probed for a candidate (skipping whole
blocks by their last doc id, then a short scan and a binary search in the block) only while the
candidate's bound — its essential contributions plus the lazy terms' bounds, tightened to the
probed block's max — can still reach the k-th score. A term whose absence alone keeps a document
below the k-th score is required; the shortest required list then leads alone. Windows up to the
nearest block end of the essential terms are skipped whole when their block maxima cannot reach
the k-th score (Ding & Suel's block-max skip). Identity with the exhaustive kernel:
  * a surviving candidate's score is re-summed exactly as the exhaustive kernel sums it: each
    term's float32 product, added in float32 in the query's term order, then the addend in
    float64;
  * bounds are safe against float rounding: the float32 sum of n non-negative products exceeds
    their exact sum by at most (n-1)·2^-24 of it and rounding is monotone, so a document is
    skipped only if bound·(1 + (n+2)·2^-23) + max(scale·addend) < the k-th score; a document
    that could tie the k-th score is never skipped (ties at the cut go by doc id rank, as the
    exhaustive kernel's);
  * the addend (unigram LM) is bounded by its largest value times the query's scale (the
    Dirichlet length term varies little across titles, so the bound stays tight).
Pruning pays on large collections and queries with many postings; per scored posting it costs
more than the exhaustive walk, so "auto" (the default) prunes a query only when its postings are
many for its k and the collection's size (``PostingsTopK.PRUNE_FROM``); "off" and "on" force one
kernel. ``benchmarks/lexical_scale.py`` measures both kernels and the pruned share of postings;
``benchmarks/bm25_speed.py`` the kernel against its peers.

Batches run in parallel over queries (numba's threads, ``NUMBA_NUM_THREADS``), each thread with
its own accumulator; the GIL is released, so a server's threads also search concurrently.

Why numba and not scipy + numpy: the sparse product materialises every matched (query, document)
score and ``best_k`` then partitions it in Python per query, and that overhead, not the
arithmetic, dominates. A C extension would do as well but needs a compiler at install time; numba
ships wheels."""

from __future__ import annotations

import threading
from typing import Any, Literal

import numba
import numpy as np
import scipy.sparse as sp
from numba import prange

_F32 = np.float32
_BLOCK = 64  # postings per block of the block-max index (a compile-time constant of the kernels)
_SCAN = 32  # documents per run of the exhaustive kernel's dense scan
_BANDS = 6  # bands of run maxima (halving from half the largest) before the rest


@numba.njit(cache=True, nogil=True)
def _below(theta: float, a_max: float) -> np.float32:
    """A float32 at or below every accumulator ``a`` with float64(a) + a_max >= ``theta`` (a
    float64 sum: its rounding error is far below the margin, 1e-9 of the magnitudes)."""
    t = theta - a_max - 1e-9 * (abs(theta) + abs(a_max))
    t32 = np.float32(t)
    if np.float64(t32) > t:
        t32 = np.nextafter(t32, np.float32(-np.inf))
    return t32


@numba.njit(cache=True, nogil=True)
def _one_query(
    terms,
    weights,
    scale,
    indptr,
    indices,
    data,
    addend,
    a_lo,
    a_hi,
    ranks,
    k,
    acc,
    touched,
    out_docs,
    out_scores,
    walked,
    allowed,
) -> int:
    """Top ``k`` of one query (``terms`` ascending, positive or zero ``weights``) into
    ``out_docs`` / ``out_scores``, best first; returns how many. ``acc`` (zeros) and ``touched``
    are scratch of one entry per document, left as found; ``walked[0]`` counts the postings.
    ``allowed`` (uint8 per document; empty: every document) keeps a document whose entry is 0 out
    of the heap: its score is summed (the walk is term at a time) but never competes."""
    n_docs = len(acc)
    masked = len(allowed) > 0
    n_post = 0
    for i in range(len(terms)):
        if weights[i] != 0:  # a zero weight adds nothing anywhere (scipy adds exact zeros)
            n_post += indptr[terms[i] + 1] - indptr[terms[i]]
    walked[0] += n_post
    # long queries over small collections touch most documents: then a plain scan of the
    # accumulator beats noting first touches (a branch per posting) and gathering them
    dense = n_post >= n_docs
    nt = 0
    for i in range(len(terms)):
        t, w = terms[i], weights[i]
        if w == 0:
            continue
        if dense:
            for p in range(indptr[t], indptr[t + 1]):
                acc[np.uint32(indices[p])] += w * data[p]  # (unsigned: no negative-index wraparound)
        else:
            for p in range(indptr[t], indptr[t + 1]):
                d = np.uint32(indices[p])
                if acc[d] == 0:
                    touched[nt] = d
                    nt += 1
                acc[d] += w * data[p]
    # The touched documents' scores (resetting the accumulator) into a heap of the best k
    # (score desc, doc id rank asc; the worst at the root, as the pruned kernel's): once full, a
    # document enters only if it reaches the root's score, so the scan's branch is predictable.
    # The dense scan (most documents touched) goes by runs of _SCAN documents: each run's
    # largest accumulator first (one pass), then the runs in bands of decreasing maxima (from
    # half the largest, halving), so the heap's threshold is high almost from the start (in
    # document order it rises slowly: k·ln(n/k) insertions); once the heap is full, a run whose
    # maximum cannot reach its root's score is only reset (``t32`` is a float32 at or below every
    # accumulator that can). The heap's insertion is written out in both scans: numba calls, not
    # inlines, a helper that takes arrays.
    has_addend = len(addend) > 0
    a_max = max(scale * a_hi, scale * a_lo) if has_addend else 0.0  # >= every scale * addend[d]
    hs = np.empty(k, dtype=np.float64)
    hd = np.empty(k, dtype=np.int64)
    hr = np.empty(k, dtype=np.int64)
    nh = 0
    theta = -np.inf  # the root's score once k documents are in
    t32 = np.float32(-np.inf)
    if dense:
        n_runs = (n_docs + _SCAN - 1) // _SCAN
        rmax = np.empty(n_runs, dtype=np.float32)
        top = np.float32(0)
        for r in range(n_runs):
            m = np.float32(0)
            for d in range(r * _SCAN, min(r * _SCAN + _SCAN, n_docs)):  # type: ignore[assignment]  # numba: d also a uint32
                v = acc[d]
                m = v if v > m else m
            rmax[r] = m
            top = m if m > top else top
        band = top * np.float32(0.5)
        for b in range(_BANDS + 1):
            if b == _BANDS:
                band = np.float32(-1)  # the last band: every run left
            for r in range(n_runs):
                if rmax[r] < band:  # (a run done is marked -1: below every band)
                    continue
                lo, hi = r * _SCAN, min(r * _SCAN + _SCAN, n_docs)
                if rmax[r] >= t32:
                    for d in range(lo, hi):  # type: ignore[assignment]  # numba: d also a uint32
                        a = acc[d]
                        acc[d] = 0
                        sc = np.float64(a) + (scale * addend[d] if has_addend else 0.0)
                        # (a zero: untouched, or every product underflowed, as the pruned
                        # kernel skips; tested second: once the heap is full, the first test
                        # is rarely passed)
                        if sc >= theta and a != 0 and (not masked or allowed[d]):
                            rk = ranks[d]
                            if nh < k:
                                hs[nh], hd[nh], hr[nh] = sc, d, rk
                                _sift_worst_up(hs, hd, hr, nh)
                                nh += 1
                                if nh < k:
                                    continue
                            elif _worse(hs[0], hr[0], sc, rk):
                                hs[0], hd[0], hr[0] = sc, d, rk
                                _sift_worst_down(hs, hd, hr, 0, k)
                            else:
                                continue
                            theta = hs[0]
                            t32 = _below(theta, a_max)
                else:
                    for d in range(lo, hi):  # type: ignore[assignment]  # numba: d also a uint32
                        acc[d] = 0
                rmax[r] = -1
            if b < _BANDS and nh == k and t32 > band:  # no run left can reach the heap
                for r in range(n_runs):
                    if rmax[r] >= 0:
                        for d in range(r * _SCAN, min(r * _SCAN + _SCAN, n_docs)):  # type: ignore[assignment]  # numba: d also a uint32
                            acc[d] = 0
                break
            band *= np.float32(0.5)
    else:
        for j in range(nt):
            d = touched[j]
            a = acc[d]
            acc[d] = 0
            sc = np.float64(a) + (scale * addend[d] if has_addend else 0.0)
            if sc >= theta and a != 0 and (not masked or allowed[d]):
                rk = ranks[d]
                if nh < k:
                    hs[nh], hd[nh], hr[nh] = sc, d, rk
                    _sift_worst_up(hs, hd, hr, nh)
                    nh += 1
                    if nh < k:
                        continue
                elif _worse(hs[0], hr[0], sc, rk):
                    hs[0], hd[0], hr[0] = sc, d, rk
                    _sift_worst_down(hs, hd, hr, 0, k)
                else:
                    continue
                theta = hs[0]
    # best first: pop the worst to the back
    for j in range(nh - 1, -1, -1):
        out_scores[j], out_docs[j] = hs[0], hd[0]
        hs[0], hd[0], hr[0] = hs[j], hd[j], hr[j]
        _sift_worst_down(hs, hd, hr, 0, j)
    return nh


@numba.njit(cache=True, nogil=True)
def _worse(s_a: float, r_a: int, s_b: float, r_b: int) -> bool:
    """Hit a ranks below hit b: lower score, or the same score and a later doc id."""
    return s_a < s_b or (s_a == s_b and r_a > r_b)


@numba.njit(cache=True, nogil=True)
def _sift_worst_down(hs: np.ndarray, hd: np.ndarray, hr: np.ndarray, i: int, n: int) -> None:
    """Hole-based sift-down in a heap with the worst hit (score asc, rank desc) at the root."""
    s, d, r = hs[i], hd[i], hr[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _worse(hs[c + 1], hr[c + 1], hs[c], hr[c]):
            c += 1
        if not _worse(hs[c], hr[c], s, r):
            break
        hs[i], hd[i], hr[i] = hs[c], hd[c], hr[c]
        i = c
    hs[i], hd[i], hr[i] = s, d, r


@numba.njit(cache=True, nogil=True)
def _sift_worst_up(hs: np.ndarray, hd: np.ndarray, hr: np.ndarray, i: int) -> None:
    """Hole-based sift-up in the worst-at-root heap."""
    s, d, r = hs[i], hd[i], hr[i]
    while i > 0:
        p = (i - 1) // 2
        if not _worse(s, r, hs[p], hr[p]):
            break
        hs[i], hd[i], hr[i] = hs[p], hd[p], hr[p]
        i = p
    hs[i], hd[i], hr[i] = s, d, r


@numba.njit(cache=True, nogil=True)
def _blocks(indptr, indices, data, block):
    """Block-max metadata of doc-id-ordered postings: per term its first block (``bptr``, one
    block per ``block`` postings), per block its last doc id and its largest weight, per term its
    largest weight; and whether every term's doc ids strictly increase (pruning needs that)."""
    n_terms = len(indptr) - 1
    bptr = np.empty(n_terms + 1, dtype=np.int64)
    bptr[0] = 0
    for t in range(n_terms):
        bptr[t + 1] = bptr[t] + (indptr[t + 1] - indptr[t] + block - 1) // block
    blast = np.empty(bptr[n_terms], dtype=np.int32)
    bmax = np.empty(bptr[n_terms], dtype=np.float32)
    tmax = np.zeros(n_terms, dtype=np.float32)
    ordered = True
    for t in range(n_terms):
        b = bptr[t]
        p, hi = indptr[t], indptr[t + 1]
        while p < hi:
            e = min(p + block, hi)
            m = data[p]
            for j in range(p + 1, e):
                if data[j] > m:
                    m = data[j]
                if indices[j] <= indices[j - 1]:
                    ordered = False
            if p > indptr[t] and indices[p] <= indices[p - 1]:
                ordered = False
            bmax[b], blast[b] = m, indices[e - 1]
            if m > tmax[t]:
                tmax[t] = m
            b += 1
            p = e
    return bptr, blast, bmax, tmax, ordered


@numba.njit(cache=True, nogil=True)
def _next_block(blast: np.ndarray, b: int, b_end: int, target: int) -> int:
    """First block in [b, b_end) whose last doc id is >= ``target`` (``b_end`` if none):
    galloping from ``b``, then binary search (the skip of a long posting list)."""
    if blast[b] >= target:
        return b
    lo, hi, step = b, b + 1, 1
    while hi < b_end and blast[hi] < target:
        lo = hi
        step *= 2
        hi = lo + step
    if hi > b_end:
        hi = b_end
    while hi - lo > 1:  # blast[lo] < target; the answer is in (lo, hi]
        mid = (lo + hi) // 2
        if blast[mid] >= target:
            hi = mid
        else:
            lo = mid
    return hi


@numba.njit(cache=True, nogil=True)
def _first_geq(indices: np.ndarray, lo: int, hi: int, target: int) -> int:
    """First position in [lo, hi) whose doc id is >= ``target`` (``hi`` if none): a few steps
    forward (lists of similar density: the next match is near), then binary search."""
    stop = min(lo + 4, hi)
    while lo < stop:
        if indices[lo] >= target:
            return lo
        lo += 1
    while lo < hi:
        mid = (lo + hi) // 2
        if indices[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True)
def _seek(indices, blast, j, cur, cd, lo, end, bf, be, target) -> int:
    """Moves term ``j``'s cursor to its first posting with doc id >= ``target`` (skipping whole
    blocks by their last doc id); returns the block it lands in (``be[j]`` once exhausted)."""
    b = _next_block(blast, bf[j] + (cur[j] - lo[j]) // _BLOCK, be[j], target)
    if b == be[j]:
        cur[j], cd[j] = end[j], len(blast) + 2**40  # (any value above every doc id)
        return b
    start = lo[j] + (b - bf[j]) * _BLOCK
    if start > cur[j]:
        cur[j] = start
    if indices[cur[j]] < target:
        cur[j] = _first_geq(indices, cur[j], min(start + _BLOCK, end[j]), target)
    cd[j] = indices[cur[j]]
    return b


@numba.njit(cache=True, nogil=True)
def _pruned_query(
    terms,
    weights,
    scale,
    indptr,
    indices,
    data,
    addend,
    a_lo,
    a_hi,
    ranks,
    k,
    bptr,
    blast,
    bmax,
    tmax,
    n_docs,
    out_docs,
    out_scores,
    walked,
    allowed,
) -> int:
    """``_one_query``'s answer, document at a time with block-max MaxScore (see the module
    docstring): the same hits, order and scores to the bit; ``walked[0]`` counts the postings
    scored. A candidate whose ``allowed`` entry is 0 (``allowed`` non-empty) is passed over
    unscored, so the k-th score, and with it every bound, comes from allowed documents only."""
    masked = len(allowed) > 0
    nq = len(terms)
    qi = np.empty(nq, dtype=np.int64)
    n = 0
    for i in range(nq):
        t = terms[i]
        if weights[i] != 0 and indptr[t + 1] > indptr[t]:
            qi[n] = i
            n += 1
    if n == 0:
        return 0
    # per query term (in the query's order): weight, cursor, its term's postings and blocks
    w = np.empty(n, dtype=np.float32)
    lo = np.empty(n, dtype=np.int64)
    end = np.empty(n, dtype=np.int64)
    bf = np.empty(n, dtype=np.int64)
    be = np.empty(n, dtype=np.int64)
    cur = np.empty(n, dtype=np.int64)
    cd = np.empty(n, dtype=np.int64)  # doc id at the cursor; above every doc id once exhausted
    ub = np.empty(n, dtype=np.float64)  # the term's largest contribution, as scoring computes it
    for j in range(n):
        i = qi[j]
        t = terms[i]
        w[j] = weights[i]
        lo[j], end[j], bf[j], be[j] = indptr[t], indptr[t + 1], bptr[t], bptr[t + 1]
        cur[j] = lo[j]
        cd[j] = indices[lo[j]]
        ub[j] = np.float64(w[j] * tmax[t])
    done = len(blast) + 2**40  # cd of an exhausted cursor
    order = np.argsort(ub, kind="mergesort")  # terms by upper bound, ascending
    cum = np.zeros(n + 1, dtype=np.float64)  # cum[m]: bound of the m least terms together
    for m in range(n):
        cum[m + 1] = cum[m] + ub[order[m]]
    # Safe bounds: a document's float32 sum of n products exceeds their exact sum by at most
    # (n-1)·2^-24 of it, float64 bound sums err by far less, the addend is bounded by its max
    # (times the query's scale), and float rounding is monotone; so a document is skipped only if
    # bound·(1 + (n+2)·2^-23) + max addend < the k-th score: it could neither beat nor tie it.
    margin = 1.0 + (n + 2) * 2.0**-23
    has_addend = len(addend) > 0
    a_max = max(scale * a_hi, scale * a_lo) if has_addend else 0.0  # >= every scale * addend[d]
    contrib = np.zeros(n, dtype=np.float32)
    hs = np.empty(k, dtype=np.float64)
    hd = np.empty(k, dtype=np.int64)
    hr = np.empty(k, dtype=np.int64)
    nh = 0
    theta = -np.inf  # the k-th best score so far (-inf until k documents are scored)
    # essential terms (their postings are the candidates) and lazy ones (probed per candidate,
    # largest bound first); lazy_ub bounds the lazy terms together
    ess = order[::-1].copy()
    n_ess = n
    lazy = np.empty(n, dtype=np.int64)
    n_lazy = 0
    lazy_ub = 0.0
    repartition = False
    wend = -1  # last doc id of the current block window
    last = -1  # the last candidate
    scored = 0
    while True:
        if repartition:
            repartition = False
            # MaxScore (Turtle & Flood 1995): the least terms whose bounds together cannot reach
            # theta are lazy, the rest essential. A term whose absence alone keeps a document
            # below theta is required: then its postings alone are the candidates (the shortest
            # required list leads; as Lucene's MaxScoreBulkScorer with a required clause).
            ne = 0
            while ne < n and cum[ne + 1] * margin + a_max < theta:
                ne += 1
            lead = -1
            for m in range(ne, n):
                j = order[m]
                if (cum[n] - ub[j]) * margin + a_max < theta and (lead < 0 or end[j] - cur[j] < end[lead] - cur[lead]):
                    lead = j
            n_lazy = 0
            if lead >= 0:
                ess[0] = lead
                n_ess = 1
                for m in range(n - 1, -1, -1):
                    if order[m] != lead:
                        lazy[n_lazy] = order[m]
                        n_lazy += 1
                lazy_ub = cum[n] - ub[lead]
            else:
                n_ess = 0
                for m in range(n - 1, ne - 1, -1):
                    ess[n_ess] = order[m]
                    n_ess += 1
                for m in range(ne - 1, -1, -1):
                    lazy[n_lazy] = order[m]
                    n_lazy += 1
                lazy_ub = cum[ne]
            if n_ess == 0:
                break  # no document left can reach the top k
            for m in range(n_ess):  # a term newly essential may lag: it resumes past the last candidate
                j = ess[m]
                if cd[j] <= last:
                    _seek(indices, blast, j, cur, cd, lo, end, bf, be, last + 1)
            wend = -1
        d = done
        for m in range(n_ess):
            if cd[ess[m]] < d:
                d = cd[ess[m]]
        if d >= n_docs:
            break
        last = d
        if nh == k and d > wend:
            # a new window: up to the nearest block end of the essential terms; every essential
            # term's postings in it lie in its current block, so its block max bounds them
            wend = n_docs
            s = lazy_ub
            for m in range(n_ess):
                j = ess[m]
                if cd[j] < n_docs:
                    b = bf[j] + (cur[j] - lo[j]) // _BLOCK
                    if blast[b] < wend:
                        wend = blast[b]
                    s += np.float64(w[j] * bmax[b])
            if s * margin + a_max < theta:  # nothing in the window can reach the top k: skip it
                for m in range(n_ess):
                    j = ess[m]
                    if cd[j] <= wend:
                        _seek(indices, blast, j, cur, cd, lo, end, bf, be, wend + 1)
                last = wend
                continue
        if masked and not allowed[d]:  # not a candidate: the essential cursors move past it
            for m in range(n_ess):
                j = ess[m]
                if cd[j] == d:
                    cur[j] += 1
                    cd[j] = indices[cur[j]] if cur[j] < end[j] else done
            continue
        # the essential terms' contributions (their cursors move past d)
        bound = lazy_ub
        for m in range(n_ess):
            j = ess[m]
            if cd[j] == d:
                c = w[j] * data[cur[j]]
                contrib[j] = c
                bound += c
                scored += 1
                cur[j] += 1
                cd[j] = indices[cur[j]] if cur[j] < end[j] else done
            else:
                contrib[j] = 0
        # the lazy terms, largest bound first, while d can still reach theta
        alive = True
        for m in range(n_lazy):
            if bound * margin + a_max < theta:
                alive = False
                break
            j = lazy[m]
            contrib[j] = 0
            if cd[j] < d:
                b = _next_block(blast, bf[j] + (cur[j] - lo[j]) // _BLOCK, be[j], d)
                if b == be[j]:
                    cur[j], cd[j] = end[j], done
                    bound -= ub[j]
                    continue
                start = lo[j] + (b - bf[j]) * _BLOCK
                if start > cur[j]:
                    cur[j], cd[j] = start, indices[start]
                # the block's max is a tighter bound than the term's (block-max MaxScore)
                if (bound - ub[j] + np.float64(w[j] * bmax[b])) * margin + a_max < theta:
                    alive = False
                    break
                if cd[j] < d:
                    cur[j] = _first_geq(indices, cur[j], min(start + _BLOCK, end[j]), d)
                    cd[j] = indices[cur[j]]  # (the block's last doc id is >= d)
            if cd[j] == d:
                c = w[j] * data[cur[j]]
                contrib[j] = c
                bound += np.float64(c) - ub[j]
                scored += 1
            else:
                bound -= ub[j]
        if not alive:
            continue
        # the exact score, summed as the exhaustive kernel does: float32, in the query's term order
        acc = np.float32(0.0)
        for j in range(n):
            acc += contrib[j]
        if acc == 0:
            continue  # (every product underflowed: the exhaustive kernel sees no touch either)
        sc = np.float64(acc) + (scale * addend[d] if has_addend else 0.0)
        r = ranks[d]
        if nh < k:
            hs[nh], hd[nh], hr[nh] = sc, d, r
            _sift_worst_up(hs, hd, hr, nh)
            nh += 1
            if nh < k:
                continue
        elif _worse(hs[0], hr[0], sc, r):
            hs[0], hd[0], hr[0] = sc, d, r
            _sift_worst_down(hs, hd, hr, 0, k)
        else:
            continue
        if hs[0] > theta:
            theta = hs[0]
            repartition = True
    walked[0] += scored
    # best first: pop the worst to the back
    for j in range(nh - 1, -1, -1):
        out_scores[j], out_docs[j] = hs[0], hd[0]
        hs[0], hd[0], hr[0] = hs[j], hd[j], hr[j]
        _sift_worst_down(hs, hd, hr, 0, j)
    return nh


@numba.njit(cache=True, nogil=True)
def _rows_query(
    terms, weights, scale, dptr, dterms, ddata, addend, ranks, k, cand, out_docs, out_scores, walked
) -> int:
    """``_one_query``'s answer over the documents ``cand`` only (ascending positions), read row by
    row from the document-major copy of the postings (``dptr``/``dterms``/``ddata``, term ids
    ascending in each row): each row merged with the query's terms, its products summed in float32
    in the query's term order as the exhaustive kernel sums them, so the same scores to the bit.
    What a filter that allows few documents takes: its cost is their rows, not the query's
    postings. ``walked[0]`` counts the row entries read."""
    nq = len(terms)
    has_addend = len(addend) > 0
    hs = np.empty(k, dtype=np.float64)
    hd = np.empty(k, dtype=np.int64)
    hr = np.empty(k, dtype=np.int64)
    nh = 0
    theta = -np.inf
    read = 0
    for i in range(len(cand)):
        d = cand[i]
        j, end = dptr[d], dptr[d + 1]
        read += end - j
        t = 0
        acc = np.float32(0)
        while j < end and t < nq:
            c, q = dterms[j], terms[t]
            if c < q:
                j += 1
            elif c > q:
                t += 1
            else:
                if weights[t] != 0:
                    acc += weights[t] * ddata[j]
                j += 1
                t += 1
        if acc == 0:
            continue  # (no query term, or every product underflowed: the exhaustive kernel's untouched)
        sc = np.float64(acc) + (scale * addend[d] if has_addend else 0.0)
        if sc < theta:
            continue
        rk = ranks[d]
        if nh < k:
            hs[nh], hd[nh], hr[nh] = sc, d, rk
            _sift_worst_up(hs, hd, hr, nh)
            nh += 1
            if nh < k:
                continue
        elif _worse(hs[0], hr[0], sc, rk):
            hs[0], hd[0], hr[0] = sc, d, rk
            _sift_worst_down(hs, hd, hr, 0, k)
        else:
            continue
        theta = hs[0]
    walked[0] += read
    for j in range(nh - 1, -1, -1):
        out_scores[j], out_docs[j] = hs[0], hd[0]
        hs[0], hd[0], hr[0] = hs[j], hd[j], hr[j]
        _sift_worst_down(hs, hd, hr, 0, j)
    return nh


@numba.njit(cache=True, nogil=True)
def _run(
    lo,
    hi,
    qptr,
    qterms,
    qweights,
    qscale,
    indptr,
    indices,
    data,
    addend,
    ranks,
    k,
    acc,
    touched,
    out_docs,
    out_scores,
    out_n,
    walked,
    prune,
    prune_from,
    bptr,
    blast,
    bmax,
    tmax,
    a_lo,
    a_hi,
    allowed,
    cand,
    dptr,
    dterms,
    ddata,
    cand_cost,
) -> None:
    """Queries ``lo`` to ``hi`` one after another with one scratch; ``prune`` 1: every query
    pruned, 0: none, -1: those with at least ``prune_from[0] + k * prune_from[1]`` postings.
    With a mask (``allowed`` non-empty) and the document-major rows (``dptr`` non-empty), a query
    whose postings outnumber the allowed documents' row entries (``cand_cost``) scores those rows
    instead (``_rows_query``): the same answer, the cheaper walk."""
    for q in range(lo, hi):
        a, b = qptr[q], qptr[q + 1]
        use = prune == 1
        n_post = 0
        for i in range(a, b):
            if qweights[i] != 0:
                n_post += indptr[qterms[i] + 1] - indptr[qterms[i]]
        if prune == -1:
            use = n_post >= prune_from[0] + k * prune_from[1]
        if len(dptr) > 0 and n_post > cand_cost:
            out_n[q] = _rows_query(
                qterms[a:b],
                qweights[a:b],
                qscale[q],
                dptr,
                dterms,
                ddata,
                addend,
                ranks,
                k,
                cand,
                out_docs[q],
                out_scores[q],
                walked[q : q + 1],
            )
        elif use:
            out_n[q] = _pruned_query(
                qterms[a:b],
                qweights[a:b],
                qscale[q],
                indptr,
                indices,
                data,
                addend,
                a_lo,
                a_hi,
                ranks,
                k,
                bptr,
                blast,
                bmax,
                tmax,
                len(acc),
                out_docs[q],
                out_scores[q],
                walked[q : q + 1],
                allowed,
            )
        else:
            out_n[q] = _one_query(
                qterms[a:b],
                qweights[a:b],
                qscale[q],
                indptr,
                indices,
                data,
                addend,
                a_lo,
                a_hi,
                ranks,
                k,
                acc,
                touched,
                out_docs[q],
                out_scores[q],
                walked[q : q + 1],
                allowed,
            )


@numba.njit(cache=True, nogil=True, parallel=True)
def _batch(
    qptr,
    qterms,
    qweights,
    qscale,
    indptr,
    indices,
    data,
    addend,
    ranks,
    k,
    n_docs,
    n_chunks,
    out_docs,
    out_scores,
    out_n,
    walked,
    prune,
    prune_from,
    bptr,
    blast,
    bmax,
    tmax,
    a_lo,
    a_hi,
    allowed,
    cand,
    dptr,
    dterms,
    ddata,
    cand_cost,
) -> None:
    """Every query's top ``k`` (rows of the outputs); ``n_chunks`` contiguous runs of queries in
    parallel, each with its own scratch."""
    nq = len(qptr) - 1
    for c in prange(n_chunks):
        _run(
            c * nq // n_chunks,
            (c + 1) * nq // n_chunks,
            qptr,
            qterms,
            qweights,
            qscale,
            indptr,
            indices,
            data,
            addend,
            ranks,
            k,
            np.zeros(n_docs, dtype=np.float32),
            np.empty(n_docs, dtype=np.int32),
            out_docs,
            out_scores,
            out_n,
            walked,
            prune,
            prune_from,
            bptr,
            blast,
            bmax,
            tmax,
            a_lo,
            a_hi,
            allowed,
            cand,
            dptr,
            dterms,
            ddata,
            cand_cost,
        )


Prune = Literal["auto", "on", "off"]
_PRUNE_CODE = {"auto": -1, "off": 0, "on": 1}


@numba.njit(cache=True, nogil=True)
def _rows_dot(indptr, indices, data, rows, qterms, qweights, out):
    """``out[i]`` = row ``rows[i]`` of a CSR matrix (column ids ascending in each row) dotted with a
    sparse query (``qterms`` ascending, ``qweights`` float64): a merge of the two sorted lists,
    summed in float64 in the row's column order (what scipy's ``W[rows] @ q`` sums, to the bit)."""
    nq = len(qterms)
    for i in range(len(rows)):
        r = rows[i]
        j, end = indptr[r], indptr[r + 1]
        t = 0
        acc = 0.0
        while j < end and t < nq:
            c, q = indices[j], qterms[t]
            if c < q:
                j += 1
            elif c > q:
                t += 1
            else:
                acc += np.float64(data[j]) * qweights[t]
                j += 1
                t += 1
        out[i] = acc


def rows_dot(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    rows: np.ndarray,
    qterms: np.ndarray,
    qweights: np.ndarray,
) -> np.ndarray:
    """Each of ``rows`` of a CSR matrix with sorted column ids dotted with one sparse query vector
    (``qterms`` ascending): the lexical models' scoring of a query's candidates (the served
    ranker's features), without scipy's row selection and product.

    Args:
        indptr: the CSR matrix's row pointers.
        indices: its column ids, ascending in each row.
        data: its values.
        rows: the rows scored.
        qterms: the query's term ids, ascending.
        qweights: their weights.

    Returns:
        One float64 dot product per row."""
    out = np.empty(len(rows), dtype=np.float64)
    if len(rows) and len(qterms):
        _rows_dot(indptr, indices, data, np.ascontiguousarray(rows, dtype=np.int64), qterms, qweights, out)
    elif len(rows):
        out[:] = 0.0
    return out


class PostingsTopK:
    """Top-k retrieval over fixed term-major weights (``indptr``/``indices``/``data`` of a CSR
    terms x documents matrix), an optional per-document ``addend`` and doc id ``ranks``.
    Stored weights must be positive (BM25, the unigram LM and TF-IDF weights are; zeros are
    dropped before): the kernel reads a zero accumulator as an untouched document.

    ``prune`` chooses the kernel per query: "off" walks every posting (term at a time), "on"
    runs block-max MaxScore (document at a time), "auto" prunes the queries with many postings
    for their k and the collection's size (``PRUNE_FROM``). The answers are the same either way
    (the tests hold them to it); pruning needs each term's doc ids ascending (a canonical CSR), else "auto"
    never prunes and "on" is refused."""

    #: batches below this many queries run on the calling thread (no thread-pool start-up)
    PARALLEL_FROM = 64
    #: postings per block of the block-max index
    BLOCK = _BLOCK
    #: "auto" prunes a query with at least ``(PRUNE_FROM + k * PRUNE_PER_K) * min(1, PRUNE_DOCS /
    #: n_docs)`` postings: pruning pays later at larger k (the k-th score rises slowly, so fewer
    #: documents are skipped) and earlier on larger collections (the exhaustive kernel's
    #: accumulator no longer fits the caches), hence the shrink; benchmarks/lexical_scale.py
    #: measures where it pays
    PRUNE_FROM = 40_000
    PRUNE_PER_K = 2_000
    PRUNE_DOCS = 2_000_000

    def __init__(
        self,
        indptr: np.ndarray,
        indices: np.ndarray,
        data: np.ndarray,
        n_docs: int,
        ranks: np.ndarray,
        addend: np.ndarray | None = None,
        prune: Prune = "auto",
    ):
        """Compile-ready arrays of one collection's postings (the class docstring).

        Args:
            indptr: row pointers of the terms x documents matrix.
            indices: doc ids, ascending in each term's postings.
            data: the positive float32 weights.
            n_docs: documents in the collection.
            ranks: each document's id rank, for ties.
            addend: a per-document addend (None: none).
            prune: "auto", "on" or "off"."""
        self.indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        self.indices = np.ascontiguousarray(indices, dtype=np.int32)
        self.data = np.ascontiguousarray(data, dtype=_F32)
        if len(self.data) and not float(self.data.min()) > 0:
            raise ValueError("compiled top-k needs positive stored weights (drop zeros first)")
        self.n_docs = n_docs
        self.ranks = np.ascontiguousarray(ranks, dtype=np.int32 if n_docs < 2**31 else np.int64)
        self.addend = np.zeros(0) if addend is None else np.ascontiguousarray(addend, dtype=np.float64)
        self._a_range = (float(self.addend.min()), float(self.addend.max())) if len(self.addend) else (0.0, 0.0)
        self.prune = prune
        self._local = threading.local()  # per calling thread: scratch for a batch run on it
        self._block_lock = threading.Lock()

    @property
    def prune(self) -> Prune:
        return self._prune

    @prune.setter
    def prune(self, value: Prune) -> None:
        if value not in _PRUNE_CODE:
            raise ValueError(f"prune must be one of {sorted(_PRUNE_CODE)}, got {value!r}")
        self._prune = value

    @property
    def blocks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
        """(per-term first block, per-block last doc id, per-block max weight, per-term max
        weight, doc ids ascending): built on first use, 8 bytes per ``BLOCK`` postings."""
        b = self.__dict__.get("_blocks")
        if b is None:
            with self._block_lock:
                b = self.__dict__.get("_blocks")
                if b is None:
                    b = self.__dict__["_blocks"] = _blocks(self.indptr, self.indices, self.data, _BLOCK)
        return b

    @property
    def doc_major(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The postings document by document (row pointers, term ids ascending in each row,
        weights): what a filtered query that allows few documents reads; built on first use
        (a filtered search), as large again as the postings."""
        m = self.__dict__.get("_doc_major")
        if m is None:
            with self._block_lock:
                m = self.__dict__.get("_doc_major")
                if m is None:
                    n_terms = len(self.indptr) - 1
                    t = sp.csr_matrix((self.data, self.indices, self.indptr), shape=(n_terms, self.n_docs)).T.tocsr()
                    t.sort_indices()
                    m = self.__dict__["_doc_major"] = (
                        np.ascontiguousarray(t.indptr, dtype=np.int64),
                        np.ascontiguousarray(t.indices, dtype=np.int64),
                        np.ascontiguousarray(t.data, dtype=_F32),
                    )
        return m

    def nbytes(self) -> int:
        """Bytes of the arrays held (not the per-thread scratch: 8 bytes per document each)."""
        blocks: tuple[np.ndarray, ...] = self.__dict__.get("_blocks", ())
        arrays: list[np.ndarray] = [self.indptr, self.indices, self.data, self.ranks, self.addend]
        arrays += [a for a in blocks[:4]]
        arrays += list(self.__dict__.get("_doc_major", ()))
        return int(sum(a.nbytes for a in arrays))

    def _scratch(self) -> tuple[np.ndarray, np.ndarray]:
        s = getattr(self._local, "s", None)
        if s is None:
            s = self._local.s = (np.zeros(self.n_docs, dtype=_F32), np.empty(self.n_docs, dtype=np.int32))
        return s

    def search(
        self,
        qptr: np.ndarray,
        qterms: np.ndarray,
        qweights: np.ndarray,
        qscale: np.ndarray,
        k: int,
        walked: np.ndarray | None = None,
        prune: Prune | None = None,
        allowed: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(doc positions, scores, counts): row ``i`` of the first two holds query ``i``'s best
        ``counts[i]`` hits, best first. Queries are CSR rows (``qptr``, ascending term ids,
        non-negative float32 weights). ``walked`` (int64, one per query, optional) receives the
        number of postings each query scored; ``prune`` overrides ``self.prune`` for this call.
        ``allowed`` (bool, one per document; None: all) restricts every query's hits to the
        documents marked True: exactly the unrestricted ranking of those documents alone (a
        filter inside the top-k, not hits dropped after it). Per query, the cheaper walk: the
        query's postings (a disallowed document never enters the heap), or, when the allowed
        documents' rows hold fewer entries than the query's postings, those rows
        (``doc_major``); the same hits and scores either way.

        Args:
            qptr: the queries' row pointers.
            qterms: their term ids, ascending in each row.
            qweights: their float32 weights.
            qscale: each query's addend scale.
            k: hits per query.
            walked: receives postings scored per query (optional).
            prune: overrides ``self.prune``.
            allowed: the documents that may be returned (None: all).

        Returns:
            (doc positions, scores, counts)."""
        nq = len(qptr) - 1
        mask = check_allowed(allowed, self.n_docs)
        k = max(0, min(k, self.n_docs if mask is None else int(np.count_nonzero(mask))))
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
        mode = self.prune if prune is None else prune
        if mode not in _PRUNE_CODE:
            raise ValueError(f"prune must be one of {sorted(_PRUNE_CODE)}, got {mode!r}")
        code = _PRUNE_CODE[mode]
        bptr, blast, bmax, tmax, ordered = self.blocks if code != 0 else _NO_BLOCKS
        if not ordered:
            if code == 1:
                raise ValueError("pruning needs each term's doc ids in ascending order")
            code = 0
        args = (
            np.ascontiguousarray(qptr, dtype=np.int64),
            np.ascontiguousarray(qterms, dtype=np.int64),
            qweights,
            np.ascontiguousarray(qscale, dtype=np.float64),
            self.indptr,
            self.indices,
            self.data,
            self.addend,
            self.ranks,
            k,
        )
        shrink = min(1.0, self.PRUNE_DOCS / max(self.n_docs, 1))
        thresholds = np.array([self.PRUNE_FROM * shrink, self.PRUNE_PER_K * shrink], dtype=np.int64)
        if mask is None:
            masking: tuple[Any, ...] = _NO_MASK
        else:
            cand = np.flatnonzero(mask)
            dptr, dterms, ddata = self.doc_major
            cost = int((dptr[cand + 1] - dptr[cand]).sum())
            masking = (mask.view(np.uint8), cand, dptr, dterms, ddata, cost)
        tail = (code, thresholds, bptr, blast, bmax, tmax, *self._a_range, *masking)
        if nq >= self.PARALLEL_FROM and numba.get_num_threads() > 1:
            n_chunks = min(numba.get_num_threads() * 2, nq // 16)  # 2 per thread: a preempted thread delays less
            _batch(*args, self.n_docs, n_chunks, docs, scores, counts, walked, *tail)
        else:
            _run(0, nq, *args, *self._scratch(), docs, scores, counts, walked, *tail)
        return docs, scores, counts


_NO_MASK = (
    np.zeros(0, dtype=np.uint8),
    np.zeros(0, dtype=np.int64),
    np.zeros(0, dtype=np.int64),
    np.zeros(0, dtype=np.int64),
    np.zeros(0, dtype=_F32),
    0,
)


def check_allowed(allowed: np.ndarray | None, n_docs: int) -> np.ndarray | None:
    """``allowed`` as a contiguous bool array of ``n_docs`` entries (None stays None: every
    document); a wrong length or dtype is refused, naming it."""
    if allowed is None:
        return None
    a = np.asarray(allowed)
    if a.dtype != np.bool_ or a.ndim != 1 or len(a) != n_docs:
        raise ValueError(
            f"allowed must be a bool array of {n_docs} entries (one per document), got {a.dtype} {a.shape}"
        )
    return np.ascontiguousarray(a)


_NO_BLOCKS = (
    np.zeros(1, dtype=np.int64),
    np.zeros(0, dtype=np.int32),
    np.zeros(0, dtype=_F32),
    np.zeros(0, dtype=_F32),
    True,
)
