"""Compiled (numba) kernel of the DBN's EM: one pass over the sessions per iteration, each
session's forward-backward in a few local arrays, the posteriors summed straight into per-pair
totals (no (sessions × ranks) temporaries). Imported lazily: numba's import and cache load cost
a fraction of a second."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def dbn_em_sums(
    cell: np.ndarray,
    clicks: np.ndarray,
    length: np.ndarray,
    a: np.ndarray,
    s: np.ndarray,
    gamma: float,
    attracted: np.ndarray,
    satisfied: np.ndarray,
) -> tuple[float, float, float]:
    """The E-step of the DBN for every session: adds P(A_r = 1 | C) to ``attracted[cell]`` and
    P(S_r = 1 | C) to ``satisfied[cell]`` (both zeroed by the caller), and returns the expected
    transitions E_r = 1, S_r = 0 → E_{r+1} = 1 and E_r = 1, S_r = 0 inside the lists (γ's
    numerator and denominator) and the log-likelihood of the sessions. Session i's list is
    ``cell[i, :length[i]]``."""
    n, positions = cell.shape
    f1 = np.empty(positions + 1)
    f0 = np.empty(positions + 1)
    b1 = np.empty(positions + 1)
    b0 = np.empty(positions + 1)
    pe = np.empty(positions)
    moved = 0.0
    could = 0.0
    loglik = 0.0
    for i in range(n):
        m = length[i]
        if m == 0:
            continue
        f1[0] = 1.0
        f0[0] = 0.0
        for r in range(m):
            u = cell[i, r]
            if clicks[i, r]:
                step = f1[r] * a[u]
                tau = gamma * (1.0 - s[u])
                f1[r + 1] = step * tau
                f0[r + 1] = step * (1.0 - tau)
            else:
                step = f1[r] * (1.0 - a[u])
                f1[r + 1] = step * gamma
                f0[r + 1] = step * (1.0 - gamma) + f0[r]
        b1[m] = 1.0
        b0[m] = 1.0
        for r in range(m - 1, -1, -1):
            u = cell[i, r]
            if clicks[i, r]:
                tau = gamma * (1.0 - s[u])
                b1[r] = a[u] * (tau * b1[r + 1] + (1.0 - tau) * b0[r + 1])
                b0[r] = 0.0
            else:
                b1[r] = (1.0 - a[u]) * (gamma * b1[r + 1] + (1.0 - gamma) * b0[r + 1])
                b0[r] = b0[r + 1]
        lik = max(b1[0], 1e-300)
        loglik += np.log(lik)
        for r in range(m):
            pe[r] = f1[r] * b1[r] / lik
        for r in range(m):
            u = cell[i, r]
            ps = 0.0
            if clicks[i, r]:
                attracted[u] += 1.0
                stop = s[u] * b0[r + 1]
                go = (1.0 - s[u]) * (gamma * b1[r + 1] + (1.0 - gamma) * b0[r + 1])
                ps = stop / max(stop + go, 1e-300)
                satisfied[u] += ps
            else:
                attracted[u] += a[u] * (1.0 - pe[r])
            if r + 1 < m:
                moved += pe[r + 1]
                could += pe[r] - ps
    return moved, could, loglik
