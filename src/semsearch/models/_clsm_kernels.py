"""Compiled (numba) kernels of CLSM's convolution and max-pooling (Shen et al. 2014 §3.3-3.4) on
the CPU, fused: for every text and filter the max over its word positions of Σⱼ slots[rows[p, j]]
and the position holding it, without writing the (positions x K) convolution out and reading it
back; and the backward, which adds each text's gradient to the window slots of its winning
positions. Both release the GIL and take a slice of the work (texts, or filters, so no two calls
write the same element), so ``device.run_split`` spreads them over the torch threads. Imported lazily
(numba's import and cache load cost a fraction of a second)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def window_max(slots: np.ndarray, pad: np.ndarray, rows: np.ndarray, starts: np.ndarray, best: np.ndarray,
               winner: np.ndarray, t0: int, t1: int) -> None:  # pragma: no cover - compiled
    """Texts ``t0``..``t1``: text i's positions are ``rows[starts[i]:starts[i + 1]]``, each a
    window of slot rows (row r < len(slots) is ``slots[r]``, else the padding's ``pad[r -
    len(slots)]``); ``best[i, k]`` = the max over them of the window's slot sum in filter k,
    ``winner[i, k]`` the first position holding it. The sum adds the slots in window order, as
    ``embedding_bag(mode="sum")`` does."""
    k_dim = slots.shape[1]
    w_dim = rows.shape[1]
    n_slots = slots.shape[0]
    acc = np.empty(k_dim, dtype=slots.dtype)
    for i in range(t0, t1):
        s, e = starts[i], starts[i + 1]
        for p in range(s, e):
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
                    best[i, k] = acc[k]
                    winner[i, k] = p
            else:
                for k in range(k_dim):
                    v = acc[k]
                    b = best[i, k]
                    gt = v > b
                    best[i, k] = v if gt else b
                    winner[i, k] = p if gt else winner[i, k]


@njit(cache=True, nogil=True)
def window_max_grad(g: np.ndarray, rows: np.ndarray, winner: np.ndarray, gs: np.ndarray, gpad: np.ndarray,
                    k0: int, k1: int) -> None:  # pragma: no cover - compiled
    """Filters ``k0``..``k1`` of the slots' gradient (``gs``, and the padding's ``gpad``; both
    zeroed): text i's gradient in filter k goes to every window slot of its winning position
    ``winner[i, k]`` (the max's gradient)."""
    w_dim = rows.shape[1]
    n_slots = gs.shape[0]
    for i in range(g.shape[0]):
        for k in range(k0, k1):
            p = winner[i, k]
            v = g[i, k]
            for j in range(w_dim):
                r = rows[p, j]
                if r < n_slots:
                    gs[r, k] += v
                else:
                    gpad[r - n_slots, k] += v
