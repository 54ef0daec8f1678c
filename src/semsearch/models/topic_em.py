"""Sparse, chunked EM kernels for the topic models of ``topic.py``: MAP-EM for PLSA and BLTM
(Gao et al. 2011 §3.1, Eq. 4-8), the posterior-regularisation projection of BLTM-PR (§3.2,
Eq. 9-13), MAP folding-in of unseen documents (§5.2), and LDA's variational E-step (Blei et al.
2003, as gensim's ``LdaModel.inference``) for folding-in with a trained LDA model.

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


def _side(ch: Chunk, weights: np.ndarray, gathered: np.ndarray, phiT_w: np.ndarray):
    """One side of an E-step on a chunk: token likelihoods s = Σ_z weights_dz·φ_zw (floored), the
    ratio matrix R (n/s) and R @ φᵀ (rows x topics)."""
    s = rowdot(weights[ch.rows], gathered)
    np.maximum(s, TINY, out=s)
    r = ch.matrix(ch.data / s)
    return s, r, r @ phiT_w


# ---------------------------------------------------------------------------------------- PLSA
def normalize_cols(m: np.ndarray) -> np.ndarray:
    """Columns scaled to sum to 1, in place (an all-zero column becomes uniform)."""
    normalize_rows(m.T)
    return m


def _sum_into(parts: list[np.ndarray]) -> np.ndarray:
    """Sum of equally shaped arrays, accumulated into the first (no new allocation)."""
    out = parts[0]
    for p in parts[1:]:
        out += p
    return out


def plsa_step(
    chunks: Sequence[Chunk], theta: np.ndarray, phiT: np.ndarray, alpha: float, beta: float, threads: int
) -> tuple[np.ndarray, float, float]:
    """One MAP-EM iteration of PLSA (Hofmann 1999 with Dirichlet priors, Gao 2011 §5.2).

    ``theta`` (docs x topics) is updated in place, chunk by chunk, once that chunk's E-step is
    done (each row is read by its own chunk only); ``phiT`` is φ transposed (words x topics, so
    gathering a word's topic vector reads contiguous memory). Returns the new φᵀ (a new array),
    and the log-likelihood Σ n·log s and MAP objective (log-likelihood + (α−1)Σlog θ +
    (β−1)Σlog φ) of the parameters given. Memory: θ and φᵀ, one words x topics accumulator per
    thread, and the chunks' gathered arrays."""

    def work(group: list[int]) -> tuple[np.ndarray, float, float]:
        word_acc = np.zeros_like(phiT)
        ll = prior = 0.0
        for i in group:
            ch = chunks[i]
            th = theta[ch.r0 : ch.r1]
            phiT_w = phiT[ch.words]
            s, r, d = _side(ch, th, phiT_w[ch.local], phiT_w)
            ll += float(ch.data @ np.log(s))
            prior += _log_prior(th, alpha)
            word_acc[ch.words] += r.T @ th
            d *= th
            d += alpha - 1.0
            theta[ch.r0 : ch.r1] = normalize_rows(d)
        return word_acc, ll, prior

    parts = run_groups(work, len(chunks), threads)
    ll = sum(p[1] for p in parts)
    objective = ll + sum(p[2] for p in parts) + _log_prior(phiT, beta)
    new_phiT = _sum_into([p[0] for p in parts])
    new_phiT *= phiT
    new_phiT += beta - 1.0
    return normalize_cols(new_phiT), ll, objective


def _log_prior(m: np.ndarray, a: float) -> float:
    """(a − 1)·Σ log m: the Dirichlet log density up to a constant (0 when a = 1)."""
    return 0.0 if a == 1.0 else float((a - 1.0) * np.log(np.maximum(m, TINY)).sum())


# ---------------------------------------------------------------------------------------- BLTM
@dataclass
class PRStats:
    """How well the PR projection met its constraints: per pair the largest |fraction of query
    tokens on z − fraction of title tokens on z| after the last dual step."""

    max_residual: float = 0.0
    mean_residual: float = 0.0
    mean_steps: float = 0.0
    pairs: int = 0


def _pr_setup(cq: Chunk, cd: Chunk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per pair of a chunk: 1/|Q| and 1/|D| as columns (0 where either side is empty: such a pair
    is not constrained) and whether the pair is constrained."""
    active = (cq.length > 0) & (cd.length > 0)
    inv_q = np.where(active, 1.0 / np.maximum(cq.length, 1.0), 0.0)[:, None]
    inv_d = np.where(active, 1.0 / np.maximum(cd.length, 1.0), 0.0)[:, None]
    return inv_q, inv_d, active


def bltm_step(
    q_chunks: Sequence[Chunk], d_chunks: Sequence[Chunk], theta: np.ndarray, phiQT: np.ndarray,
    phiDT: np.ndarray, alpha: float, beta: float, threads: int, *, one_vocab: bool = False,
    lam: np.ndarray | None = None, pr_steps: int = 20, pr_tol: float = 1e-3, pr_method: str = "diag",
) -> tuple[np.ndarray, np.ndarray, float, float, PRStats]:
    """One MAP-EM iteration of the bilingual topic model (Gao 2011 §3.1): pair i's query tokens and
    title tokens share θ_i; query words come from φᵠ, title words from φᴰ, given transposed
    (``phiQT``: query words x topics, ``phiDT``: title words x topics; the same array under
    ``one_vocab``). ``theta`` (pairs x topics) is updated in place. Returns the new φᵠᵀ and φᴰᵀ
    (the same array under ``one_vocab``), the log-likelihood and MAP objective of the parameters
    given (unprojected posteriors), and PR statistics.

    With ``lam`` (pairs x topics dual variables, updated in place and so warm-started across EM
    iterations) each pair's posteriors are first projected by posterior regularisation (§3.2,
    Eq. 9-13) onto the set where the expected fraction of query tokens on each topic equals that
    of title tokens: q(z|w∈Q) ∝ p(z|w)·exp(−λ_z/|Q|), q(z|w∈D) ∝ p(z|w)·exp(λ_z/|D|). Because
    p(z|w) ∝ θ_z·φ_z,w, this is the ordinary E-step with θ tilted per side, so each dual step costs
    one E-step over the chunk. λ maximises the concave dual, whose gradient is
    fraction_Q(z) − fraction_D(z): ``pr_method = "gradient"`` is plain gradient ascent (the paper's)
    with the safe step 1/L, L = (1/|Q| + 1/|D|)/2 bounding the dual's curvature; ``"diag"`` (the
    default) scales each coordinate by the diagonal of the curvature, fraction_Q(z)/|Q| +
    fraction_D(z)/|D| (an upper bound of the Hessian at the current λ), with the step clipped to
    twice the safe step: it meets the constraint to ~1e-3 in ~10 steps where plain gradient ascent
    needs hundreds. At most ``pr_steps`` steps per chunk, fewer once every pair's largest
    violation is below ``pr_tol``. Pairs with an empty query or title are not constrained."""

    def work(group: list[int]):  # type: ignore[no-untyped-def]
        acc_q = np.zeros_like(phiQT)
        acc_d = acc_q if one_vocab else np.zeros_like(phiDT)
        ll, prior, res_max, res_sum, steps_sum, n_pr = 0.0, 0.0, 0.0, 0.0, 0.0, 0
        for i in group:
            cq, cd = q_chunks[i], d_chunks[i]
            th = theta[cq.r0 : cq.r1]
            pq_w, pd_w = phiQT[cq.words], phiDT[cd.words]
            gq, gd = pq_w[cq.local], pd_w[cd.local]
            sq, rq, dq = _side(cq, th, gq, pq_w)
            sd, rd, dd = _side(cd, th, gd, pd_w)
            ll += float(cq.data @ np.log(sq)) + float(cd.data @ np.log(sd))
            prior += _log_prior(th, alpha)
            aq = ad = th
            if lam is not None:
                lm = lam[cq.r0 : cq.r1]
                inv_q, inv_d, active = _pr_setup(cq, cd)
                if active.any():
                    eta = np.where(active, 2.0 / np.maximum(inv_q[:, 0] + inv_d[:, 0], 1e-12), 0.0)[:, None]
                    cap = 2.0 * eta
                    inactive = (~active)[:, None].astype(np.float64)  # keeps 0/0 out of unconstrained rows
                    for step in range(pr_steps + 1):
                        aq, ad = _tilt(th, -lm * inv_q), _tilt(th, lm * inv_d)
                        sq, rq, dq = _side(cq, aq, gq, pq_w)
                        sd, rd, dd = _side(cd, ad, gd, pd_w)
                        grad = aq * dq * inv_q - ad * dd * inv_d
                        worst = np.abs(grad).max(axis=1)
                        if step == pr_steps or worst.max() < pr_tol:
                            break
                        if pr_method == "diag":
                            h = aq * dq * inv_q * inv_q + ad * dd * inv_d * inv_d
                            lm += np.clip(grad / (h + 1e-3 * (inv_q + inv_d) + inactive), -cap, cap)
                        else:
                            lm += eta * grad
                    res_max = max(res_max, float(worst[active].max()))
                    res_sum += float(worst[active].sum())
                    steps_sum += step * int(active.sum())
                    n_pr += int(active.sum())
            acc_q[cq.words] += rq.T @ aq
            acc_d[cd.words] += rd.T @ ad
            new = aq * dq
            new += ad * dd
            new += alpha - 1.0
            theta[cq.r0 : cq.r1] = normalize_rows(new)  # after every use of this chunk's θ rows
        return acc_q, (None if one_vocab else acc_d), ll, prior, res_max, res_sum, steps_sum, n_pr

    parts = run_groups(work, len(q_chunks), threads)
    ll = sum(p[2] for p in parts)
    n_pr = sum(p[7] for p in parts)
    stats = PRStats(
        max((p[4] for p in parts), default=0.0), sum(p[5] for p in parts) / max(n_pr, 1),
        sum(p[6] for p in parts) / max(n_pr, 1), n_pr,
    )
    objective = ll + sum(p[3] for p in parts) + _log_prior(phiQT, beta)
    new_q = _sum_into([p[0] for p in parts])
    new_q *= phiQT
    new_q += beta - 1.0
    normalize_cols(new_q)
    if one_vocab:
        return new_q, new_q, ll, objective, stats
    objective += _log_prior(phiDT, beta)
    new_d = _sum_into([p[1] for p in parts])
    new_d *= phiDT
    new_d += beta - 1.0
    return new_q, normalize_cols(new_d), ll, objective, stats


def _tilt(theta: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """θ ⊙ exp(exponent), each row rescaled by its largest factor (no overflow; posteriors are
    invariant to a per-row scale)."""
    return theta * np.exp(exponent - exponent.max(axis=1, keepdims=True))


def pr_fractions(
    q_chunks: Sequence[Chunk], d_chunks: Sequence[Chunk], theta: np.ndarray, phiQT: np.ndarray,
    phiDT: np.ndarray, lam: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Expected fraction of each pair's query tokens and of its title tokens on each topic under
    the (projected, when ``lam`` is given) posteriors: what the PR constraint equates."""
    fq, fd = np.zeros_like(theta), np.zeros_like(theta)
    for cq, cd in zip(q_chunks, d_chunks):
        th = theta[cq.r0 : cq.r1]
        aq = ad = th
        if lam is not None:
            lm = lam[cq.r0 : cq.r1]
            inv_q, inv_d, _ = _pr_setup(cq, cd)
            aq, ad = _tilt(th, -lm * inv_q), _tilt(th, lm * inv_d)
        pq_w, pd_w = phiQT[cq.words], phiDT[cd.words]
        _, _, dq = _side(cq, aq, pq_w[cq.local], pq_w)
        _, _, dd = _side(cd, ad, pd_w[cd.local], pd_w)
        fq[cq.r0 : cq.r1] = aq * dq / np.maximum(cq.length, 1e-12)[:, None]
        fd[cd.r0 : cd.r1] = ad * dd / np.maximum(cd.length, 1e-12)[:, None]
    return fq, fd


# ---------------------------------------------------------------------------------- folding-in
def fold_in(
    counts: sp.csr_matrix, phi: np.ndarray, alpha: float, iterations: int = 20, *, threads: int = 2,
    budget_mb: float = DEFAULT_BUDGET_MB,
) -> np.ndarray:
    """θ of unseen documents under fixed φ (Gao 2011 §5.2: "folding-in with 20 EM iterations"):
    MAP-EM on θ alone, θ_dz ∝ θ_dz·Σ_w (n_dw/s_dw)·φ_zw + α − 1, from uniform θ. Chunks of
    documents are independent, so each chunk runs all its iterations at once. Empty documents
    get the prior's mode (uniform). Returns float32 (documents x topics)."""
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
                _, _, d = _side(ch, th, g, phiT_w)
                th = normalize_rows(th * d + (alpha - 1.0))
            out[ch.r0 : ch.r1] = th

    run_groups(work, len(chunks), threads)
    return out


def fold_in_vb(
    counts: sp.csr_matrix, exp_elog_beta: np.ndarray, alpha: np.ndarray, iterations: int = 50,
    tol: float = 1e-3, *, threads: int = 2, budget_mb: float = DEFAULT_BUDGET_MB,
) -> np.ndarray:
    """LDA's variational E-step for unseen documents (Blei et al. 2003 §5.2; gensim's
    ``LdaModel.inference``): γ_dz = α_z + exp(E[log θ_dz])·Σ_w n_dw·exp(E[log β_zw]) / s_dw, with
    s_dw = Σ_z exp(E[log θ_dz])·exp(E[log β_zw]), iterated from γ = α + |d|/T until the mean
    change of γ is below ``tol``. Returns the posterior mean θ = γ/Σγ, float32."""
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
                _, _, d = _side(ch, e, g, eb_w)
                new = alpha[None, :] + e * d
                change = float(np.abs(new - gamma).mean())
                gamma = new
                if change < tol:
                    break
            out[ch.r0 : ch.r1] = gamma / gamma.sum(axis=1, keepdims=True)

    run_groups(work, len(chunks), threads)
    return out
