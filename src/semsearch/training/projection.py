"""Learning the projection models of ``models/projection.py`` (Gao et al. 2011 §4-5, Table 2):
the vocabulary (the ``max_terms`` highest-DF terms of the clickthrough queries and titles) and
idf, then A — by PCA (LSA, CL-LSA), oriented PCA inside the leading PCA directions (OPCA), or
S2Net's gradient training from the LSA solution on the one epoch loop (DPM; Yih et al. 2011)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch
import torch.nn.functional as F

from ..data import EvalSet, TrainingData
from ..device import model_device
from ..evaluation import evaluate
from ..models.projection import ProjectionModel, project, tfidf_matrix
from ..text import Vocabulary
from . import distributed
from .args import OPCAArgs, PCAArgs, S2NetArgs
from .loop import Checkpoint, epoch_loop


def train_projection(
    model: ProjectionModel,
    data: TrainingData,
    dev: EvalSet | None = None,
    *,
    args: PCAArgs | S2NetArgs,
    progress: bool = True,
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Learn ``model``'s vocabulary, idf and A from ``data``'s positive (query, title) pairs;
    ``dev`` early-stops S2Net (only S2Net checkpoints). Returns the training log.

    Args:
        model: the projection model trained in place.
        data: the training split and collection.
        dev: the dev queries (S2Net's early stopping).
        args: PCA-family or S2Net settings.
        progress: show progress.
        checkpoint_dir: where S2Net checkpoints (None: nowhere).
        resume: resume from the checkpoint.

    Returns:
        The training log."""
    if checkpoint_dir and not isinstance(args, S2NetArgs):
        raise ValueError(f"{model.name} learns in closed form and writes no checkpoints; train without --checkpoint")
    start = time.perf_counter()
    queries, titles = data.pair_texts()
    q_tok = [model.analyzer(t) for t in queries]
    d_tok = [model.analyzer(t) for t in titles]
    vocab = Vocabulary.build([set(t) for t in q_tok + d_tok], max_size=model.p.max_terms)
    if len(vocab) == 0:
        raise ValueError(f"{model.name}: the training texts have no terms")
    q_ids = [vocab.encode(t) for t in q_tok]
    d_ids = [vocab.encode(t) for t in d_tok]
    df = np.bincount([i for x in q_ids + d_ids for i in set(x)], minlength=len(vocab)).astype(np.float64)
    model.vocab, model.idf = vocab, np.log(len(q_ids) + len(d_ids)) - np.log(np.maximum(df, 1.0))
    Xq, Xd = tfidf_matrix(q_ids, model.idf), tfidf_matrix(d_ids, model.idf)
    log: dict[str, Any] = {"pairs": len(q_ids), "vocabulary": len(vocab), "dim": model.p.dim}
    t0 = time.perf_counter()
    if isinstance(args, S2NetArgs):
        ck = Checkpoint(Path(checkpoint_dir), vocab, resume) if checkpoint_dir else None
        A, more = _s2net(model, Xq, Xd, data, dev, args, progress, ck)
    elif isinstance(args, OPCAArgs):
        A, more = _opca(Xq, Xd, model.p.dim, args)
    else:  # LSA: queries and titles as separate documents; CL-LSA: each query concatenated with its title
        X = (
            tfidf_matrix([q + d for q, d in zip(q_ids, d_ids)], model.idf)
            if model.name == "cl-lsa"
            else sp.vstack([Xq, Xd]).tocsr()
        )
        A, var = pca(X, model.p.dim, seed=args.seed)
        more = {"pca_seconds": time.perf_counter() - t0, "explained_variance": float(var.sum()), "texts": X.shape[0]}
    model.A = np.ascontiguousarray(A, dtype=np.float32)
    log.update(more)
    log["seconds"] = time.perf_counter() - start
    return log


def pca(
    X: sp.spmatrix | np.ndarray, k: int, *, seed: int = 0, method: str = "auto", n_iter: int = 10, oversample: int = 50
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` principal directions of the rows of ``X`` (columns of a V x k orthonormal
    matrix) and the variances along them, largest first. The centring is implicit, so a sparse X
    stays sparse. ``method``: "arpack" (``scipy.sparse.linalg.svds``, exact to its tolerance),
    "randomized" (Halko, Martinsson & Tropp 2011: subspace iteration on a random block of
    k + ``oversample`` columns, ``n_iter`` rounds, orthonormalised on the V side only), or "auto":
    ARPACK up to k = 128, randomized above, where ARPACK takes longer
    (``benchmarks/projection_speed.py`` measures both). Small problems always take a dense SVD. Each
    direction's sign makes its largest-magnitude entry positive (deterministic output).

    Args:
        X: (n, V) rows, sparse or dense.
        k: directions wanted.
        seed: the randomized method's seed.
        method: "auto", "arpack" or "randomized".
        n_iter: the randomized method's rounds.
        oversample: its extra columns.

    Returns:
        (V, k) directions and their k variances."""
    n, V = X.shape
    if n == 0 or V == 0:
        raise ValueError("PCA of an empty matrix")
    if method not in ("auto", "randomized", "arpack"):
        raise ValueError(f"method must be 'auto', 'randomized' or 'arpack', got {method!r}")
    if method == "auto":
        method = "arpack" if k <= 128 else "randomized"
    mean = np.asarray(X.mean(axis=0)).ravel()
    k = min(k, n, V)
    if min(n, V) <= max(2 * k + 10, 200):
        Xc = (X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)) - mean  # type: ignore[union-attr]  # sparse
        _, s, vt = np.linalg.svd(Xc, full_matrices=False)
        comps, s = vt[:k].T, s[:k]
    else:
        Xs = sp.csr_matrix(X, dtype=np.float64)
        XT = Xs.T.tocsr()
        mul = lambda M: Xs @ M - np.outer(np.ones(n), mean @ M)  # noqa: E731 - centred X @ M
        rmul = lambda M: XT @ M - np.outer(mean, M.sum(axis=0))  # noqa: E731 - centred Xᵀ @ M
        rng = np.random.default_rng(seed)
        if method == "randomized":
            # Subspace iteration on the covariance XcᵀXc, orthonormalising only V-side blocks
            # (QR of an n x l block is the slow step otherwise), then Rayleigh-Ritz.
            Q, _ = np.linalg.qr(rng.standard_normal((V, min(k + oversample, V))))
            for _ in range(n_iter):
                Q, _ = np.linalg.qr(rmul(mul(Q)))
            Y = rmul(mul(Q))
            evals, evecs = np.linalg.eigh(Q.T @ Y)
            order = np.argsort(-evals)[:k]
            comps, s = Q @ evecs[:, order], np.sqrt(np.maximum(evals[order], 0.0))
        else:
            op = spla.LinearOperator(
                (n, V),
                dtype=np.float64,
                matvec=lambda v: mul(np.reshape(v, (-1, 1))).ravel(),
                rmatvec=lambda u: rmul(np.reshape(u, (-1, 1))).ravel(),
            )
            _, s, vt = spla.svds(op, k=k, v0=rng.standard_normal(min(n, V)), which="LM", solver="arpack")
            order = np.argsort(-s)
            comps, s = vt[order].T, s[order]
    signs = np.sign(comps[np.argmax(np.abs(comps), axis=0), np.arange(comps.shape[1])])
    comps = comps * np.where(signs == 0, 1.0, signs)
    return np.ascontiguousarray(comps), s**2 / max(n, 1)


def opca_matrices(Xq: sp.spmatrix, Xd: sp.spmatrix, U: np.ndarray, reg: float) -> tuple[np.ndarray, np.ndarray, float]:
    """In the span of U (V x m): the covariance C of all query and title vectors, the noise
    covariance N = (1/n) Σ (x_Q − x_D)(x_Q − x_D)ᵀ, and the ridge ε = reg·tr(N)/m."""
    Z = np.asarray(sp.vstack([Xq, Xd]) @ U)
    Zc = Z - Z.mean(axis=0)
    C = Zc.T @ Zc / max(len(Z), 1)
    Dz = np.asarray((Xq - Xd) @ U)
    N = Dz.T @ Dz / max(Xq.shape[0], 1)
    eps = reg * float(np.trace(N)) / max(U.shape[1], 1)
    return C, N, max(eps, 1e-12)


def _opca(Xq: sp.csr_matrix, Xd: sp.csr_matrix, dim: int, args: OPCAArgs) -> tuple[np.ndarray, dict[str, Any]]:
    """Generalised eigenvectors of (C, N + εI) inside the leading ``reduce`` PCA directions."""
    t0 = time.perf_counter()
    U, var = pca(sp.vstack([Xq, Xd]).tocsr(), max(dim, args.reduce), seed=args.seed)
    m = U.shape[1]
    C, N, eps = opca_matrices(Xq, Xd, U, args.reg)
    k = min(dim, m)
    vals, W = scipy.linalg.eigh(C, N + eps * np.eye(m), subset_by_index=[m - k, m - 1])
    order = np.argsort(-vals)
    vals, W = vals[order], W[:, order]
    signs = np.sign(W[np.argmax(np.abs(W), axis=0), np.arange(k)])
    W = W * np.where(signs == 0, 1.0, signs)
    return U @ W, {
        "reduce": m,
        "epsilon": eps,
        "eigenvalues": vals[:10].tolist(),
        "seconds_eigh": time.perf_counter() - t0,
    }


class _Projection(torch.nn.Module):
    """S2Net's one weight, A (V x k), as a module for the epoch loop."""

    def __init__(self, A: np.ndarray):
        super().__init__()
        self.A = torch.nn.Parameter(torch.from_numpy(A))


def _s2net(
    model: ProjectionModel,
    Xq: sp.csr_matrix,
    Xd: sp.csr_matrix,
    data: TrainingData,
    dev: EvalSet | None,
    args: S2NetArgs,
    progress: bool,
    ck: Checkpoint | None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """A from the LSA solution, then S2Net epochs (negatives re-drawn every epoch) on ``epoch_loop``;
    the LSA start is scored on dev first and kept if no epoch beats it by more than ``min_delta``."""
    t0 = time.perf_counter()
    A0, _ = pca(sp.vstack([Xq, Xd]).tocsr(), model.p.dim, seed=args.seed)
    log: dict[str, Any] = {"init": "lsa", "init_seconds": time.perf_counter() - t0}
    pool = model.tfidf(data.doc_texts)
    pos_doc = np.array([data.doc_index[d] for _, d in data.positives], dtype=np.int64)
    q_index: dict[str, int] = {}
    pair_query = np.array([q_index.setdefault(q, len(q_index)) for q, _ in data.positives], dtype=np.int64)
    pos_keys = np.unique(pair_query * len(data.doc_ids) + pos_doc)
    torch.manual_seed(args.seed)  # the minibatch order (saved with a checkpoint)
    rng = np.random.default_rng(args.seed)  # the negatives
    net = _Projection(A0.astype(np.float32))
    opt = (torch.optim.SGD if args.optimizer == "sgd" else torch.optim.Adam)(net.parameters(), lr=args.lr)
    tq, tpool = _csr(Xq), _csr(pool)
    n, J, bs = Xq.shape[0], args.negatives, args.batch_size

    def batches():
        neg = _sample_negatives(rng, n, J, len(data.doc_ids), pos_keys, pair_query)
        perm = torch.randperm(n).numpy()
        return ((perm[b : b + bs], neg) for b in range(0, n, bs))

    def loss(batch: tuple[np.ndarray, np.ndarray]) -> torch.Tensor:
        idx, neg = batch
        scale = distributed.loss_scale(len(idx))  # under torchrun: this rank's slice, its share of the mean
        idx = idx[distributed.shard(len(idx))]
        where = model_device(net)
        q = _rows(tq, idx, where)
        docs = _rows(tpool, np.concatenate([pos_doc[idx][:, None], neg[idx]], axis=1).ravel(), where)
        zq = F.normalize(torch.sparse.mm(q, net.A), dim=1)
        zd = F.normalize(torch.sparse.mm(docs, net.A), dim=1).view(len(idx), J + 1, -1)
        cos = torch.einsum("bk,bjk->bj", zq, zd)
        terms = F.softplus(-args.gamma * (cos[:, :1] - cos[:, 1:]))
        return terms.mean() if scale is None else terms.sum() * (scale / J)

    metric = args.dev_metric
    scorer = _DevScorer(model, dev, data, metric) if dev is not None else None

    def dev_score() -> dict[str, float]:
        assert scorer is not None
        s = scorer(net.A.detach().cpu().numpy())
        return {"dev": s, f"dev_{metric}": s}

    out = epoch_loop(
        net,
        opt,
        args,
        batches=batches,
        loss=loss,
        size=lambda b: len(b[0]),
        dev=dev_score if scorer is not None else None,
        title="S2Net",
        rng=rng,
        checkpoint=ck,
        progress=progress,
        dev_before=True,
        n_batches=lambda: -(-n // bs),
        sharded=True,
    )
    epochs = out["epochs"]
    if epochs and epochs[0]["epoch"] == 0:  # the LSA start's dev score
        log[f"dev_{metric}_init"] = epochs.pop(0)["dev"]
    stopped = out["stopped"]
    if not stopped.startswith("reached") and epochs:
        stopped = f"early stop after epoch {epochs[-1]['epoch']}: {stopped}"
    log.update(
        epochs=epochs,
        best_epoch=out["best_epoch"],
        stopped=stopped,
        seconds_per_epoch=float(np.mean([e["seconds"] for e in epochs])) if epochs else 0.0,
    )
    log[f"best_dev_{metric.replace('@', '')}"] = out["best_dev"] if scorer is not None else None
    return net.A.detach().cpu().numpy(), log


def _csr(X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """scipy CSR -> (indptr, indices, data, columns) numpy arrays for fast row gathering."""
    X = X.tocsr()
    return X.indptr.astype(np.int64), X.indices.astype(np.int64), X.data.astype(np.float32), X.shape[1]


def _rows(m: tuple[np.ndarray, np.ndarray, np.ndarray, int], idx: np.ndarray, device: torch.device) -> torch.Tensor:
    """Rows ``idx`` of a CSR triple as a torch sparse COO tensor (len(idx) x V) on ``device``."""
    indptr, indices, data, V = m
    starts, ends = indptr[idx], indptr[idx + 1]
    lengths = ends - starts
    rows = np.repeat(np.arange(len(idx)), lengths)
    src = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths) + np.arange(lengths.sum())
    ix = torch.from_numpy(np.vstack([rows, indices[src]]))
    return torch.sparse_coo_tensor(
        ix, torch.from_numpy(data[src]), (len(idx), V), check_invariants=False, device=device
    ).coalesce()


def _sample_negatives(
    rng: np.random.Generator, n: int, J: int, pool: int, pos_keys: np.ndarray, pair_query: np.ndarray
) -> np.ndarray:
    """J random pool documents for each of n pairs, re-drawn (up to 10 times) where one is a
    positive of the pair's query; ``pos_keys`` = query index · pool + document index of every
    positive."""
    neg = rng.integers(0, pool, size=(n, J))
    for _ in range(10):
        bad = np.isin(pair_query[:, None] * pool + neg, pos_keys)
        if not bad.any():
            break
        neg[bad] = rng.integers(0, pool, size=int(bad.sum()))
    return neg


class _DevScorer:
    """Dev-set ``metric`` of a projection A: the dev queries and their candidate titles (texts from
    the training pool) are encoded once, and ranked by cosine."""

    def __init__(self, model: ProjectionModel, dev: EvalSet, data: TrainingData, metric: str):
        idx = data.doc_index
        self.metric = metric
        self.qids = [q for q in dev.queries if dev.candidates.get(q)]
        self.cands = {q: [d for d in dev.candidates[q] if d in idx] for q in self.qids}
        self.qrels = dev.qrels
        self.Xq = model.tfidf([dev.queries[q] for q in self.qids])
        docs = sorted({d for c in self.cands.values() for d in c})
        self.doc_pos = {d: i for i, d in enumerate(docs)}
        self.Xd = model.tfidf([data.doc_texts[idx[d]] for d in docs])

    def __call__(self, A: np.ndarray) -> float:
        Q, D = project(self.Xq, A), project(self.Xd, A)
        run = {}
        for i, q in enumerate(self.qids):
            c = self.cands[q]
            s = D[[self.doc_pos[d] for d in c]] @ Q[i]
            run[q] = {d: float(v) for d, v in zip(c, s)}
        if not run:
            return 0.0
        return float(evaluate(run, self.qrels, [self.metric]).mean[self.metric])
