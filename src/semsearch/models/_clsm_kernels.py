"""Compiled (numba) kernels of CLSM's convolution and max-pooling (Shen et al. 2014 §3.3-3.4) on
the CPU, fused: for every text and filter the max over its word positions of Σⱼ slots[rows[p, j]]
and the position holding it, without writing the (positions x K) convolution out and reading it
back; and the backward, which gives each window slot row the gradient of the texts whose winning
positions read it, gathered row by row (a scatter over the texts into the rows would send each
row's cache lines back and forth between the threads). Both release the GIL and take a slice of
the work (texts, or slot rows, so no two calls write the same element), so ``device.run_split``
spreads them over the torch threads. Imported lazily (numba's import and cache load are not free)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def window_max(
    slots: np.ndarray,
    pad: np.ndarray,
    rows: np.ndarray,
    starts: np.ndarray,
    local: np.ndarray,
    best: np.ndarray,
    winner: np.ndarray,
    t0: int,
    t1: int,
) -> None:  # pragma: no cover - compiled
    """Texts ``t0``..``t1``: text i's positions are ``rows[starts[i]:starts[i + 1]]``, each a
    window of slot rows (row r < len(slots) is ``slots[r]``, else the padding's ``pad[r -
    len(slots)]``); ``best[i, k]`` = the max over them of the window's slot sum in filter k,
    ``winner[i, k]`` the first position holding it, counted within the text (``local`` =
    ``arange(longest text)`` in ``winner``'s dtype, ``winner_dtype``: a byte for titles, so the
    backward reads a quarter of what global int32 positions cost). The sum adds the slots in
    window order, as ``embedding_bag(mode="sum")`` does."""
    k_dim = slots.shape[1]
    w_dim = rows.shape[1]
    n_slots = slots.shape[0]
    acc = np.empty(k_dim, dtype=slots.dtype)
    for i in range(t0, t1):
        s, e = starts[i], starts[i + 1]
        bi, wi = best[i], winner[i]
        for p in range(s, e):
            pi = local[p - s]
            if w_dim == 3:  # the papers' window: its three slots summed and compared in one pass
                # (the general passes below write and re-read ``acc``)
                r0, r1, r2 = rows[p, 0], rows[p, 1], rows[p, 2]
                a = slots[r0] if r0 < n_slots else pad[r0 - n_slots]
                b = slots[r1] if r1 < n_slots else pad[r1 - n_slots]
                c = slots[r2] if r2 < n_slots else pad[r2 - n_slots]
                if p == s:
                    for k in range(k_dim):
                        bi[k] = (a[k] + b[k]) + c[k]
                        wi[k] = pi
                else:
                    for k in range(k_dim):
                        v = (a[k] + b[k]) + c[k]
                        gt = v > bi[k]
                        bi[k] = v if gt else bi[k]
                        wi[k] = pi if gt else wi[k]
                continue
            r = rows[p, 0]
            src = slots[r] if r < n_slots else pad[r - n_slots]
            for k in range(k_dim):
                acc[k] = src[k]
            for j in range(1, w_dim):
                r = rows[p, j]
                src = slots[r] if r < n_slots else pad[r - n_slots]
                for k in range(k_dim):
                    acc[k] += src[k]
            if p == s:
                for k in range(k_dim):
                    bi[k] = acc[k]
                    wi[k] = pi
            else:
                for k in range(k_dim):
                    v = acc[k]
                    gt = v > bi[k]
                    bi[k] = v if gt else bi[k]
                    wi[k] = pi if gt else wi[k]


@njit(cache=True, nogil=True)
def word_windows(
    ptr: np.ndarray, words: np.ndarray, window: int, pad: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Each word position's window (``models.neural.WindowFeatures.batch``): text i's words are
    ``words[ptr[i]:ptr[i + 1]]`` (indices into the batch's distinct words); returns ``windows``
    (window, positions) of word indices, ``pad`` outside the text and at the one position of an
    empty text, ``segment`` (each position's text) and ``starts`` (text i's positions begin at
    ``starts[i]``). One pass, instead of a masked gather per window slot."""
    n = len(ptr) - 1
    starts = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        starts[i + 1] = starts[i] + max(ptr[i + 1] - ptr[i], 1)
    total = starts[n]
    windows = np.full((window, total), pad, dtype=np.int64)
    segment = np.empty(total, dtype=np.int64)
    half = (window - 1) // 2
    for i in range(n):
        s, length, o = ptr[i], ptr[i + 1] - ptr[i], starts[i]
        for p in range(max(length, 1)):
            segment[o + p] = i
            for j in range(window):
                q = p + j - half
                if 0 <= q < length:
                    windows[j, o + p] = words[s + q]
    return windows, segment, starts


@njit(cache=True, nogil=True)
def slot_occurrences(
    rows: np.ndarray, n_rows: int, starts: np.ndarray, local: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Every window slot of every position, grouped by slot row (a counting sort, one pass over
    ``rows``): row r is read at positions ``pos[ptr[r]:ptr[r + 1]]`` (ascending; counted within
    their texts, in ``local``'s dtype as ``window_max``'s winners), of texts ``text[...]`` — the
    transpose of ``rows``, so the backward can gather each row's gradient instead of scattering
    into it."""
    n_pos, w_dim = rows.shape
    ptr = np.zeros(n_rows + 1, dtype=np.int64)
    for p in range(n_pos):
        for j in range(w_dim):
            ptr[rows[p, j] + 1] += 1
    for r in range(n_rows):
        ptr[r + 1] += ptr[r]
    fill = ptr[:-1].copy()
    pos = np.empty(n_pos * w_dim, dtype=local.dtype)
    text = np.empty(n_pos * w_dim, dtype=np.int32)
    for i in range(len(starts) - 1):
        for p in range(starts[i], starts[i + 1]):
            lp = local[p - starts[i]]
            for j in range(w_dim):
                r = rows[p, j]
                f = fill[r]
                pos[f] = lp
                text[f] = i
                fill[r] = f + 1
    return ptr, pos, text


@njit(cache=True, nogil=True)
def window_max_grad(
    g: np.ndarray,
    winner: np.ndarray,
    ptr: np.ndarray,
    pos: np.ndarray,
    text: np.ndarray,
    gs: np.ndarray,
    cuts: np.ndarray,
    c0: int,
    c1: int,
) -> None:  # pragma: no cover - compiled
    """Slot rows ``cuts[c0]`` to ``cuts[c1]`` of the gradient ``gs`` (each written once, no zeroing
    needed): row r sums, over the positions reading it (``slot_occurrences``), the gradient of
    that position's text in the filters the position won (the max's gradient; positions and
    winners both counted within the text). The rows' reads are ascending in text, so each sum
    adds in the order a scatter over the texts would, and the filters' loop is one vectorised
    compare-and-add over a text's gradient row."""
    k_dim = g.shape[1]
    zero = np.float32(0.0)
    for r in range(cuts[c0], cuts[c1]):
        out = gs[r]
        for k in range(k_dim):
            out[k] = zero
        for o in range(ptr[r], ptr[r + 1]):
            p = pos[o]
            gi = g[text[o]]
            wi = winner[text[o]]
            for k in range(k_dim):
                out[k] += gi[k] if wi[k] == p else zero


def winner_dtype(longest: int) -> type:
    """The smallest integer type holding a position within a text of ``longest`` positions."""
    return np.int8 if longest <= 127 else np.int16 if longest <= 32767 else np.int32


def balanced_cuts(ptr: np.ndarray, parts: int) -> np.ndarray:
    """Row boundaries cutting ``slot_occurrences``' rows into at most ``parts`` runs of about
    equal reads (the padding's rows, read at every text's ends, weigh as much as hundreds of
    words' rows), one per thread of ``run_split(..., grain=1)``. Fewer when one row's reads
    outweigh a run's share (cuts that fall inside the same row merge)."""
    n = len(ptr) - 1
    inner = np.searchsorted(ptr, np.linspace(0, ptr[-1], parts + 1)[1:-1])
    return np.unique(np.concatenate([[0], np.clip(inner, 0, n), [n]])).astype(np.int64)
