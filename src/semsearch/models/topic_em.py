"""Sparse, chunked E-step kernels of the topic models of ``topic.py``: MAP folding-in of unseen
documents (Gao et al. 2011 §5.2) and LDA's variational E-step (Blei et al. 2003, as gensim's
``LdaModel.inference``) for folding-in with a trained LDA model; ``training.topic`` builds MAP-EM
for PLSA and BLTM (§3.1, Eq. 4-8) and BLTM-PR's projection (§3.2, Eq. 9-13) on the same pieces.

Everything works on the non-zeros of a (documents x words) count matrix: for each stored count
n_dw the posterior over topics is p(z|d,w) = θ_dz·φ_zw / s_dw with s_dw = Σ_z θ_dz·φ_zw, and the
expected counts the M-step needs are

    n_dz = θ_dz · Σ_w (n_dw/s_dw)·φ_zw   = θ ⊙ (R @ φᵀ)       (R: the counts with data n_dw/s_dw)
    n_zw = φ_zw · Σ_d (n_dw/s_dw)·θ_dz   = φ ⊙ (Rᵀ @ θ)ᵀ

so no (non-zeros x topics) posterior is ever stored: only s (one row-wise dot product per
non-zero, over gathered rows of θ and φᵀ) and two sparse-dense products. Rows are processed in
chunks with a bounded number of non-zeros (memory ≈ ``budget_mb`` per thread) and the chunks are
spread over a thread pool (numpy and scipy's sparse kernels release the GIL)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import scipy.sparse as sp
from scipy.special import digamma

TINY = 1e-300  # floor of a token's likelihood s_dw before log / division (never reached with θ, φ > 0)
DEFAULT_BUDGET_MB = 64.0  # per thread: gathered (non-zeros x topics) float64 arrays of one chunk

R = TypeVar("R")


@dataclass(frozen=True)
class Chunk:
    """Rows ``r0:r1`` of a count matrix, with the words re-indexed to the chunk's distinct words
    (so a chunk's word accumulator has only ``len(words)`` rows)."""

    r0: int
    r1: int
    indptr: np.ndarray  # local row pointer (starts at 0)
    rows: np.ndarray  # local row of each non-zero
    local: np.ndarray  # position in ``words`` of each non-zero's word
    words: np.ndarray  # distinct global word ids of the chunk
    data: np.ndarray  # counts (float64)
    length: np.ndarray  # tokens per row (float64)

    @property
    def n_rows(self) -> int:
        return self.r1 - self.r0

    def matrix(self, values: np.ndarray) -> sp.csr_matrix:
        """The chunk's (rows x distinct words) CSR matrix holding ``values`` (one per non-zero)."""
        return sp.csr_matrix((values, self.local, self.indptr), shape=(self.n_rows, len(self.words)))


def chunk_bounds(indptr: np.ndarray, max_nnz: int) -> list[tuple[int, int]]:
    """Contiguous row ranges with at most ``max_nnz`` non-zeros each (a longer row gets its own)."""
    n = len(indptr) - 1
    out, start = [], 0
    while start < n:
        end = int(np.searchsorted(indptr, indptr[start] + max_nnz, side="right")) - 1
        end = min(max(end, start + 1), n)
        out.append((start, end))
        start = end
    return out


def max_nnz(topics: int, budget_mb: float = DEFAULT_BUDGET_MB, arrays: int = 4) -> int:
    """Non-zeros per chunk so that ``arrays`` gathered (non-zeros x topics) float64 arrays fit the budget."""
    return max(256, int(budget_mb * 2**20 / (8 * topics * arrays)))


def make_chunks(counts: sp.csr_matrix, bounds: Sequence[tuple[int, int]]) -> list[Chunk]:
    """Cut ``counts`` (CSR, float) into the row ranges ``bounds``."""
    out = []
    data = counts.data.astype(np.float64)
    for r0, r1 in bounds:
        lo, hi = counts.indptr[r0], counts.indptr[r1]
        indptr = (counts.indptr[r0 : r1 + 1] - lo).astype(np.int64)
        cols = counts.indices[lo:hi]
        words, local = np.unique(cols, return_inverse=True)
        d = data[lo:hi]
        rows = np.repeat(np.arange(r1 - r0, dtype=np.int64), np.diff(indptr))
        length = np.bincount(rows, weights=d, minlength=r1 - r0) if len(d) else np.zeros(r1 - r0)
        out.append(Chunk(r0, r1, indptr, rows, local.astype(np.int64).ravel(), words, d, length))
    return out


def run_groups(work: Callable[[list[int]], R], n_items: int, threads: int) -> list[R]:
    """Split item indices 0..n_items-1 round-robin into ``threads`` groups and run ``work`` on each
    group in its own thread (one accumulator per thread, no locks)."""
    threads = max(1, min(threads, n_items))
    groups = [list(range(i, n_items, threads)) for i in range(threads)]
    if threads == 1:
        return [work(groups[0])]
    with ThreadPoolExecutor(threads) as ex:
        return list(ex.map(work, groups))


def rowdot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise dot products of two equally shaped matrices."""
    return np.einsum("ij,ij->i", a, b)


def normalize_rows(m: np.ndarray) -> np.ndarray:
    """Rows scaled to sum to 1, in place; an all-zero row becomes uniform (never NaN)."""
    s = m.sum(axis=1, keepdims=True)
    zero = s[:, 0] <= 0
    if zero.any():
        m[zero] = 1.0
        s[zero] = m.shape[1]
    m /= s
    return m


def side(ch: Chunk, weights: np.ndarray, gathered: np.ndarray, phiT_w: np.ndarray):
    """One side of an E-step on a chunk: token likelihoods s = Σ_z weights_dz·φ_zw (floored), the
    ratio matrix R (n/s) and R @ φᵀ (rows x topics)."""
    s = rowdot(weights[ch.rows], gathered)
    np.maximum(s, TINY, out=s)
    r = ch.matrix(ch.data / s)
    return s, r, r @ phiT_w


# ---------------------------------------------------------------------------------- folding-in
def fold_in(
    counts: sp.csr_matrix,
    phi: np.ndarray,
    alpha: float,
    iterations: int = 20,
    *,
    threads: int = 2,
    budget_mb: float = DEFAULT_BUDGET_MB,
) -> np.ndarray:
    """θ of unseen documents under fixed φ (Gao 2011 §5.2: "folding-in with 20 EM iterations"):
    MAP-EM on θ alone, θ_dz ∝ θ_dz·Σ_w (n_dw/s_dw)·φ_zw + α − 1, from uniform θ. Chunks of
    documents are independent, so each chunk runs all its iterations at once. Empty documents
    get the prior's mode (uniform). Returns float32 (documents x topics).

    Args:
        counts: (documents, words) term counts.
        phi: (topics, words) φ.
        alpha: the Dirichlet prior on θ.
        iterations: EM iterations.
        threads: worker threads.
        budget_mb: scratch memory per chunk, in MB.

    Returns:
        (documents, topics) θ, float32."""
    topics = phi.shape[0]
    phiT = np.ascontiguousarray(phi.T, dtype=np.float64)
    chunks = make_chunks(counts, chunk_bounds(counts.indptr, max_nnz(topics, budget_mb, 2)))
    out = np.empty((counts.shape[0], topics), dtype=np.float32)

    def work(group: list[int]) -> None:
        for i in group:
            ch = chunks[i]
            phiT_w = phiT[ch.words]
            g = phiT_w[ch.local]
            th = np.full((ch.n_rows, topics), 1.0 / topics)
            for _ in range(iterations):
                _, _, d = side(ch, th, g, phiT_w)
                th = normalize_rows(th * d + (alpha - 1.0))
            out[ch.r0 : ch.r1] = th

    run_groups(work, len(chunks), threads)
    return out


def fold_in_vb(
    counts: sp.csr_matrix,
    exp_elog_beta: np.ndarray,
    alpha: np.ndarray,
    iterations: int = 50,
    tol: float = 1e-3,
    *,
    threads: int = 2,
    budget_mb: float = DEFAULT_BUDGET_MB,
) -> np.ndarray:
    """LDA's variational E-step for unseen documents (Blei et al. 2003 §5.2; gensim's
    ``LdaModel.inference``): γ_dz = α_z + exp(E[log θ_dz])·Σ_w n_dw·exp(E[log β_zw]) / s_dw, with
    s_dw = Σ_z exp(E[log θ_dz])·exp(E[log β_zw]), iterated from γ = α + |d|/T until the mean
    change of γ is below ``tol``. Returns the posterior mean θ = γ/Σγ, float32.

    Args:
        counts: (documents, words) term counts.
        exp_elog_beta: (topics, words) exp(E[log β]).
        alpha: (topics,) the Dirichlet prior.
        iterations: the most E-step iterations.
        tol: stop once γ's mean change is below it.
        threads: worker threads.
        budget_mb: scratch memory per chunk, in MB.

    Returns:
        (documents, topics) θ, float32."""
    topics = exp_elog_beta.shape[0]
    ebT = np.ascontiguousarray(exp_elog_beta.T, dtype=np.float64)
    alpha = np.asarray(alpha, dtype=np.float64)
    chunks = make_chunks(counts, chunk_bounds(counts.indptr, max_nnz(topics, budget_mb, 2)))
    out = np.empty((counts.shape[0], topics), dtype=np.float32)

    def work(group: list[int]) -> None:
        for i in group:
            ch = chunks[i]
            eb_w = ebT[ch.words]
            g = eb_w[ch.local]
            gamma = alpha[None, :] + ch.length[:, None] / topics
            for _ in range(iterations):
                e = np.exp(digamma(gamma) - digamma(gamma.sum(axis=1, keepdims=True)))
                _, _, d = side(ch, e, g, eb_w)
                new = alpha[None, :] + e * d
                change = float(np.abs(new - gamma).mean())
                gamma = new
                if change < tol:
                    break
            out[ch.r0 : ch.r1] = gamma / gamma.sum(axis=1, keepdims=True)

    run_groups(work, len(chunks), threads)
    return out
