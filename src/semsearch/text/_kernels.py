"""Compiled (numba) kernels of letter-trigram featurisation, over UTF-8 bytes.

``WordTable`` tokenises a chunk of texts as one byte string: ASCII texts as they are, other texts
as their ``normalize.tokenize`` tokens joined by spaces. Either way a token is a maximal run of
bytes that are ASCII letters/digits or ≥ 0x80 (any byte of a multi-byte character — the
pre-tokenised texts hold only word characters there), ASCII upper case lowered: exactly
``tokenize``'s tokens. Words live in an open-addressing hash table over their bytes, trigrams in
one over their (≤ 12) bytes packed into two integers, so the per-token work — splitting,
lower-casing, hashing, look-up, the trigram bag — runs without Python objects. Imported lazily
(numba's import and cache load cost a fraction of a second)."""

from __future__ import annotations

import numpy as np
from numba import njit

_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)
_HASH = np.uint8(ord("#"))

TOKEN_BYTE = np.zeros(256, dtype=np.uint8)
"""1 for the bytes a token is made of: ASCII letters and digits, and every byte ≥ 0x80."""
TOKEN_BYTE[ord("0") : ord("9") + 1] = 1
TOKEN_BYTE[ord("a") : ord("z") + 1] = 1
TOKEN_BYTE[ord("A") : ord("Z") + 1] = 1
TOKEN_BYTE[0x80:] = 1
LOWER = np.arange(256, dtype=np.uint8)
"""ASCII upper case -> lower case, every other byte unchanged."""
LOWER[ord("A") : ord("Z") + 1] += 32


@njit(cache=True, inline="always")
def _fnv(buf: np.ndarray, start: int, end: int) -> np.uint64:
    h = _FNV_OFFSET
    for i in range(start, end):
        h = (h ^ np.uint64(buf[i])) * _FNV_PRIME
    return h


@njit(cache=True, inline="always")
def _find(buf, start, end, h, slots, keys, key_ptr, hashes):
    """The slot of the word ``buf[start:end]`` (hash ``h``) in ``slots``: its id there, or -1 for
    the empty slot it would take."""
    mask = len(slots) - 1
    i = np.int64(h & np.uint64(mask))
    n = end - start
    while True:
        w = slots[i]
        if w < 0:
            return i
        if hashes[w] == h and key_ptr[w + 1] - key_ptr[w] == n:
            k = key_ptr[w]
            same = True
            for j in range(n):
                if keys[k + j] != buf[start + j]:
                    same = False
                    break
            if same:
                return i
        i = (i + 1) & mask


@njit(cache=True, nogil=True)
def lookup_tokens(buf, text_ptr, max_words, n_words, grow, token_byte, lower, slots, keys, key_ptr, hashes):
    """Tokens of each text ``buf[text_ptr[i]:text_ptr[i+1] - 1]`` (lower-cased in place), its
    first ``max_words``; each text is followed by a byte that is not a token's (a space; the
    last text's may be missing), so a token's start is enough to find it again. With ``grow``,
    words met for the first time are added (ids from ``n_words`` on, in order of appearance)
    while the arrays have room; once they have none, or without ``grow`` (the table only read,
    so several threads may look up disjoint texts of one ``buf`` at once), the rest are left to
    ``add_words``. Returns (tokens per text, their word ids — a word left out is ``-1 - start``,
    its first byte —, how many such tokens, their bytes, the new word count)."""
    n = len(text_ptr) - 1
    bound = 0
    for t in range(n):
        bound += min(max_words, (text_ptr[t + 1] - text_ptr[t]) // 2)
    ids = np.empty(bound, dtype=np.int64)
    counts = np.zeros(n, dtype=np.int64)
    k = 0
    unknown, unknown_bytes = 0, 0
    room = grow
    for t in range(n):
        p, end = text_ptr[t], min(text_ptr[t + 1] - 1, len(buf))
        c = 0
        while p < end and c < max_words:
            while p < end and token_byte[buf[p]] == 0:
                p += 1
            if p == end:
                break
            s = p
            h = _FNV_OFFSET
            while p < end and token_byte[buf[p]] != 0:
                b = lower[buf[p]]
                buf[p] = b
                h = (h ^ np.uint64(b)) * _FNV_PRIME
                p += 1
            i = _find(buf, s, p, h, slots, keys, key_ptr, hashes)
            w = slots[i]
            if w < 0:
                if room and (
                    n_words == len(hashes)
                    or n_words + 1 == len(key_ptr)
                    or 2 * n_words + 2 > len(slots)
                    or key_ptr[n_words] + p - s > len(keys)
                ):
                    room = False  # from here on, every new word waits for add_words (keeps the order)
                if room:
                    w = n_words
                    at = key_ptr[w]
                    for j in range(p - s):
                        keys[at + j] = buf[s + j]
                    key_ptr[w + 1] = at + p - s
                    hashes[w] = h
                    slots[i] = w
                    n_words += 1
                else:
                    w = -1 - s
                    unknown += 1
                    unknown_bytes += p - s
            ids[k] = w
            k += 1
            c += 1
        counts[t] = c
    return counts, ids[:k], unknown, unknown_bytes, n_words


@njit(cache=True)
def add_words(buf, ids, n_words, token_byte, slots, keys, key_ptr, hashes):
    """Give every unknown token (``ids`` ``-1 - start``, as ``lookup_tokens`` leaves them) its
    word id, adding the words met for the first time in order of appearance. The arrays must
    have room for them (and ``slots`` stay at most half full). Returns the new word count."""
    for k in range(len(ids)):
        if ids[k] >= 0:
            continue
        s = -1 - ids[k]
        e = s
        while e < len(buf) and token_byte[buf[e]] != 0:
            e += 1
        h = _fnv(buf, s, e)
        i = _find(buf, s, e, h, slots, keys, key_ptr, hashes)
        w = slots[i]
        if w < 0:
            w = n_words
            at = key_ptr[w]
            for j in range(e - s):
                keys[at + j] = buf[s + j]
            key_ptr[w + 1] = at + e - s
            hashes[w] = h
            slots[i] = w
            n_words += 1
        ids[k] = w
    return n_words


@njit(cache=True)
def rehash(slots, hashes, n_words):
    """Place words ``0..n_words-1`` into empty ``slots`` (a larger table)."""
    mask = len(slots) - 1
    for w in range(n_words):
        i = np.int64(hashes[w] & np.uint64(mask))
        while slots[i] >= 0:
            i = (i + 1) & mask
        slots[i] = w


@njit(cache=True, inline="always")
def _pack(word, start, end):
    """Bytes ``start..end`` (≤ 12) of ``#word#`` as two integers (the length in the second)."""
    n = len(word)
    lo = np.uint64(0)
    hi = np.uint64(end - start) << np.uint64(32)
    for p in range(start, end):
        b = _HASH if p == 0 or p == n + 1 else word[p - 1]
        j = p - start
        if j < 8:
            lo |= np.uint64(b) << np.uint64(8 * j)
        else:
            hi |= np.uint64(b) << np.uint64(8 * (j - 8))
    return lo, hi


@njit(cache=True, inline="always")
def _tri_slot(lo, hi, tri_slots, tri_lo, tri_hi):
    mask = len(tri_slots) - 1
    i = np.int64(((lo * _FNV_PRIME) ^ (hi * np.uint64(0x9E3779B97F4A7C15))) >> np.uint64(17)) & mask
    while True:
        t = tri_slots[i]
        if t < 0 or (tri_lo[t] == lo and tri_hi[t] == hi):
            return i
        i = (i + 1) & mask


@njit(cache=True)
def trigram_table(data, ptr, tri_slots):
    """Trigram ``t`` = ``data[ptr[t]:ptr[t+1]]`` (UTF-8, ≤ 12 bytes) into the empty table
    ``tri_slots``; returns the packed keys (lo, hi). Trigrams longer than 12 bytes (lone
    surrogates of a loaded vocabulary) are left out: no token's trigram can equal them."""
    n = len(ptr) - 1
    tri_lo = np.zeros(n, dtype=np.uint64)
    tri_hi = np.zeros(n, dtype=np.uint64)
    for t in range(n):
        s, e = ptr[t], ptr[t + 1]
        if e - s > 12:
            continue
        lo, hi = np.uint64(0), np.uint64(e - s) << np.uint64(32)
        for j in range(e - s):
            if j < 8:
                lo |= np.uint64(data[s + j]) << np.uint64(8 * j)
            else:
                hi |= np.uint64(data[s + j]) << np.uint64(8 * (j - 8))
        tri_lo[t], tri_hi[t] = lo, hi
        tri_slots[_tri_slot(lo, hi, tri_slots, tri_lo, tri_hi)] = t
    return tri_lo, tri_hi


@njit(cache=True)
def word_trigram_ids(keys, key_ptr, first, last, tri_slots, tri_lo, tri_hi):
    """``TrigramHasher.word_ids`` of words ``first..last-1``: the trigrams of ``#word#`` (three
    characters, i.e. UTF-8 sequences) in the vocabulary, in order. Returns (per word its count,
    the ids)."""
    total = 0
    for w in range(first, last):
        total += key_ptr[w + 1] - key_ptr[w]
    out = np.empty(total, dtype=np.int64)
    counts = np.zeros(last - first, dtype=np.int64)
    starts = np.empty(total + 3, dtype=np.int64)  # character starts within #word#
    k = 0
    for w in range(first, last):
        word = keys[key_ptr[w] : key_ptr[w + 1]]
        n = len(word)
        m = 1
        starts[0] = 0
        for p in range(n):
            if word[p] & 0xC0 != 0x80:
                starts[m] = p + 1
                m += 1
        starts[m] = n + 1  # the closing #
        starts[m + 1] = n + 2  # the end: #word# has m + 1 characters, m - 1 trigrams
        c = 0
        for j in range(m - 1):  # characters j, j+1, j+2 of #word#
            lo, hi = _pack(word, starts[j], starts[j + 3])
            t = tri_slots[_tri_slot(lo, hi, tri_slots, tri_lo, tri_hi)]
            if t >= 0:
                out[k] = t
                k += 1
                c += 1
        counts[w - first] = c
    return counts, out[:k]


@njit(cache=True)
def text_bags(counts, ids, tri_ptr, tri):
    """Texts' trigram bags from their word ids (``counts`` words each): (indptr, trigram ids),
    each word's trigrams laid end to end, repeats kept."""
    n = len(counts)
    indptr = np.zeros(n + 1, dtype=np.int64)
    k = 0
    for t in range(n):
        s = 0
        for _ in range(counts[t]):
            w = ids[k]
            s += tri_ptr[w + 1] - tri_ptr[w]
            k += 1
        indptr[t + 1] = indptr[t] + s
    out = np.empty(indptr[n], dtype=np.int64)
    j = 0
    for k in range(len(ids)):
        w = ids[k]
        for q in range(tri_ptr[w], tri_ptr[w + 1]):
            out[j] = tri[q]
            j += 1
    return indptr, out


@njit(cache=True, nogil=True)
def bag_columns(ids, offsets, weights, n_cols, touched_only):
    """The transpose of ragged bags (``trigram.Bags.columns``), by a counting sort: for every
    column (vocabulary row) the bags holding it, ascending, each repeat a separate entry with its
    weight — scipy's ``csr_matrix(...).tocsc()`` without its checks and Python calls. Returns
    ``rows``, ``weights`` and per column its first entry (``starts``); with ``touched_only`` only
    the columns some bag holds (``touched``), else every column."""
    nnz = len(ids)
    ptr = np.zeros(n_cols + 1, dtype=np.int64)
    for e in range(nnz):
        ptr[ids[e] + 1] += 1
    n_touched = 0
    for c in range(n_cols):
        n_touched += ptr[c + 1] > 0
        ptr[c + 1] += ptr[c]
    fill = ptr[:-1].copy()
    rows = np.empty(nnz, dtype=np.int64)
    counts = np.empty(nnz, dtype=weights.dtype)
    for i in range(len(offsets) - 1):
        for e in range(offsets[i], offsets[i + 1]):
            c = ids[e]
            f = fill[c]
            rows[f] = i
            counts[f] = weights[e]
            fill[c] = f + 1
    if not touched_only:
        return rows, counts, ptr[:-1].copy(), np.zeros(0, dtype=np.int64)
    touched = np.empty(n_touched, dtype=np.int64)
    starts = np.empty(n_touched, dtype=np.int64)
    t = 0
    for c in range(n_cols):
        if ptr[c + 1] > ptr[c]:
            touched[t] = c
            starts[t] = ptr[c]
            t += 1
    return rows, counts, starts, touched
