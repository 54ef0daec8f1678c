"""Linear projection models of Gao et al. 2011 (§4, §5 Table 2): a query and a title are TF-IDF
term vectors x mapped to k = 100 dimensions by one matrix A (V x k), and relevance is
cos(Aᵀx_Q, Aᵀx_D). They differ only in how A is learned from the clickthrough (query, title)
pairs of ``TrainingData``:

- ``lsa``: PCA of the TF-IDF vectors of queries and titles taken as separate documents (the pair
  information is not used; the paper uses PCA rather than a plain SVD, §5.2).
- ``cl-lsa``: the same PCA on each query concatenated with its title (Dumais et al. 1997).
- ``opca``: oriented PCA (Diamantaras & Kung 1996; Platt et al. 2010): the generalised eigenproblem
  C a = λ (N + εI) a, C the covariance of all query and title vectors, N the noise covariance
  (1/n) Σ (x_Q − x_D)(x_Q − x_D)ᵀ of the pairs — directions with much variance but little
  difference between a query and its title. V x V matrices are out of reach (40k² doubles), so
  the problem is solved exactly inside the span of the leading ``reduce`` (default 200) PCA
  directions: C and N are projected there (C is diagonal there), ε = ``reg``·tr(N)/m, and
  ``scipy.linalg.eigh(C, N + εI)`` gives the k directions. This restriction is our
  approximation; the eigenvectors keep eigh's scaling aᵀ(N + εI)a = 1 (noise-whitened). The
  defaults (reduce = 200, reg = 0.3) were picked on homedepot's dev split among reduce ∈
  {100, 150, 200, 300} x reg ∈ {0.01 … 10}; all lay within ±0.003 dev NDCG@10 of each other.
- ``s2net``: the discriminative projection model (DPM) trained with S2Net (Yih et al. 2011): A
  starts from the LSA solution and minimises log(1 + exp(−γΔ)), Δ = cos(AᵀQ, AᵀD⁺) − cos(AᵀQ, AᵀD⁻),
  γ = 10, over each positive pair with 4 random titles of the pool as D⁻ (re-drawn every epoch),
  minibatch Adam (lr 0.01, picked on dev among 3e-4 … 3e-2) in torch with sparse inputs, early
  stopping on the dev set's NDCG@10 (the paper stops on a held-out 0.5 % of its click pairs; the
  optimiser is our choice). Random negatives are easy: the training loss falls fast and dev
  NDCG peaks after a few epochs.

The projection is applied to uncentred vectors (Aᵀx, as in the paper's cosine); PCA centres only
to find the directions.

Common to all: the vocabulary is the 40k terms with the highest document frequency over the
training queries and titles, weights (1 + log tf)·log(N/df) with N and df from the same texts,
rows L2-normalised; projected vectors are L2-normalised, so a score is a cosine (a text with no
known term projects to 0 and scores 0). The "+ VSM" rows of Table 2 are experiment-spec
interpolation rows: weight·cos_VSM + (1 − weight)·cos_projected on raw scores."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from ..progress import track
from ..text import Analyzer, Vocabulary, count_matrix
from .base import Model, ModelDirError, best_k, id_ranks, read_config, write_config

_NPZ = "projection.npz"
_JSON = "projection.json"


def tfidf_matrix(id_lists: Sequence[Sequence[int]], idf: np.ndarray) -> sp.csr_matrix:
    """Rows of term ids -> L2-normalised (1 + log tf)·idf CSR (float64); empty rows stay zero."""
    m = count_matrix(id_lists, len(idf), dtype=np.float64)
    m.data = (1.0 + np.log(m.data)) * idf[m.indices]
    norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
    return (sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ m).tocsr()


def pca(X: sp.spmatrix | np.ndarray, k: int, *, seed: int = 0, method: str = "auto",
        n_iter: int = 10, oversample: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` principal directions of the rows of ``X`` (columns of a V x k orthonormal
    matrix) and the variances along them, largest first. The centring is implicit, so a sparse X
    stays sparse. ``method``: "arpack" (``scipy.sparse.linalg.svds``, exact to its tolerance),
    "randomized" (Halko, Martinsson & Tropp 2011: subspace iteration on a random block of
    k + ``oversample`` columns, ``n_iter`` rounds, orthonormalised on the V side only), or "auto":
    ARPACK up to k = 128 (on homedepot's 71k x 16k TF-IDF: ~3 s at k = 100), randomized above
    (~9 s at k = 200, where ARPACK takes longer). Small problems always take a dense SVD. Each
    direction's sign makes its largest-magnitude entry positive (deterministic output)."""
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
        Xc = (X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)) - mean
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
            op = spla.LinearOperator((n, V), dtype=np.float64, matvec=lambda v: mul(np.reshape(v, (-1, 1))).ravel(),
                                     rmatvec=lambda u: rmul(np.reshape(u, (-1, 1))).ravel())
            _, s, vt = spla.svds(op, k=k, v0=rng.standard_normal(min(n, V)), which="LM", solver="arpack")
            order = np.argsort(-s)
            comps, s = vt[order].T, s[order]
    signs = np.sign(comps[np.argmax(np.abs(comps), axis=0), np.arange(comps.shape[1])])
    comps = comps * np.where(signs == 0, 1.0, signs)
    return np.ascontiguousarray(comps), s**2 / max(n, 1)


class ProjectionModel(Model):
    """Shared machinery (module docstring): vocabulary, idf, projection A, encoders, indexing a
    collection as unit vectors, cosine scoring, save/load. Subclasses implement ``_learn``."""

    def __init__(self, analyzer: str | Analyzer = "paper", *, dim: int = 100, max_terms: int = 40_000,
                 seed: int = 0, **settings: Any):
        self.analyzer = Analyzer.named(analyzer) if isinstance(analyzer, str) else analyzer
        if int(dim) < 1 or int(max_terms) < 1:
            raise ValueError(f"{self.name}: dim and max_terms must be >= 1")
        self.dim, self.max_terms, self.seed = int(dim), int(max_terms), int(seed)
        self.settings = self._check_settings(settings)
        self.vocab: Vocabulary | None = None
        self.idf: np.ndarray | None = None
        self.A: np.ndarray | None = None  # V x k, float32
        self._ids: list[str] = []
        self._position: dict[str, int] = {}
        self._docs: np.ndarray | None = None  # n x k unit rows

    extra: dict[str, Any] = {}
    """Subclass settings and their defaults."""

    def _check_settings(self, settings: dict[str, Any]) -> dict[str, Any]:
        unknown = set(settings) - set(self.extra)
        if unknown:
            raise ValueError(f"{self.name}: unknown settings {sorted(unknown)}; known: {sorted(self.extra)}")
        return {**self.extra, **settings}

    def config(self) -> dict[str, Any]:
        return {"dim": self.dim, "max_terms": self.max_terms, "seed": self.seed, **self.settings}

    # -- features ---------------------------------------------------------------------------------
    def _ids_of(self, texts: Sequence[str]) -> list[list[int]]:
        assert self.vocab is not None
        return [self.vocab.encode(self.analyzer(t)) for t in texts]

    def tfidf(self, texts: Sequence[str]) -> sp.csr_matrix:
        """Texts -> L2-normalised TF-IDF rows over the model's vocabulary."""
        if self.vocab is None or self.idf is None:
            raise RuntimeError(f"{self.name}: not trained; call fit() or load()")
        return tfidf_matrix(self._ids_of(texts), self.idf)

    def _project(self, X: sp.csr_matrix) -> np.ndarray:
        assert self.A is not None
        Z = np.asarray(X @ self.A, dtype=np.float32)
        norms = np.linalg.norm(Z, axis=1, keepdims=True)
        return Z / np.where(norms > 0, norms, 1.0)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length k-dimensional vectors (float32); zero for a text with no known term."""
        return self._project(self.tfidf(texts))

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._project(self.tfidf(texts))

    def _require_trained(self) -> None:
        if self.vocab is None or self.idf is None or self.A is None:
            raise RuntimeError(f"{self.name}: not trained; call fit() or load()")

    # -- training ---------------------------------------------------------------------------------
    def fit(self, data: Any, dev: Any = None, progress: bool = False) -> dict[str, Any]:
        """Learn the vocabulary, idf and projection from ``data`` (positive query-title pairs);
        ``dev`` (an EvalSet) is used by S2Net's early stopping only. Returns the training log."""
        start = time.perf_counter()
        queries, titles = data.pair_texts()
        q_tok = [self.analyzer(t) for t in queries]
        d_tok = [self.analyzer(t) for t in titles]
        # Vocabulary: the max_terms highest-DF terms of the clickthrough texts (queries and titles).
        self.vocab = Vocabulary.build([set(t) for t in q_tok + d_tok], max_size=self.max_terms)
        if len(self.vocab) == 0:
            raise ValueError(f"{self.name}: the training texts have no terms")
        q_ids = [self.vocab.encode(t) for t in q_tok]
        d_ids = [self.vocab.encode(t) for t in d_tok]
        df = np.bincount([i for x in q_ids + d_ids for i in set(x)], minlength=len(self.vocab)).astype(np.float64)
        self.idf = np.log(len(q_ids) + len(d_ids)) - np.log(np.maximum(df, 1.0))
        Xq, Xd = tfidf_matrix(q_ids, self.idf), tfidf_matrix(d_ids, self.idf)
        log: dict[str, Any] = {"pairs": len(q_ids), "vocabulary": len(self.vocab), "dim": self.dim}
        A, more = self._learn(Xq, Xd, q_ids, d_ids, data, dev, progress)
        self.A = np.ascontiguousarray(A, dtype=np.float32)
        log.update(more)
        log["seconds"] = time.perf_counter() - start
        return log

    def _learn(self, Xq: sp.csr_matrix, Xd: sp.csr_matrix, q_ids: list[list[int]], d_ids: list[list[int]],
               data: Any, dev: Any, progress: bool) -> tuple[np.ndarray, dict[str, Any]]:
        raise NotImplementedError

    # -- collection -------------------------------------------------------------------------------
    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        if len(doc_ids) != len(texts):
            raise ValueError(f"{len(doc_ids)} doc ids but {len(texts)} texts")
        if len(set(doc_ids)) != len(doc_ids):
            raise ValueError("duplicate document ids")
        self._docs = self.encode_documents(texts)
        self._ids = list(doc_ids)
        self._position = {d: i for i, d in enumerate(self._ids)}

    @property
    def doc_ids(self) -> Sequence[str]:
        return self._ids

    def _doc_matrix(self) -> np.ndarray:
        if self._docs is None:
            raise RuntimeError(f"{self.name}: no collection indexed; call index() first")
        return self._docs

    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        if len(queries) != len(candidates):
            raise ValueError(f"{len(queries)} queries but {len(candidates)} candidate lists")
        docs = self._doc_matrix()
        Q = self.encode_queries(queries)
        out = []
        for q, cands in zip(Q, candidates):
            try:
                pos = np.fromiter((self._position[d] for d in cands), dtype=np.int64, count=len(cands))
            except KeyError as e:
                raise ValueError(f"candidate document {e.args[0]!r} is not in the indexed collection") from None
            out.append((docs[pos] @ q).astype(np.float64))
        return out

    def retrieve(self, queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        """Exact top-k by cosine over the whole collection (dense matrix product per batch)."""
        if k < 1:
            raise ValueError("k must be at least 1")
        docs = self._doc_matrix()
        order = id_ranks(self._ids)
        out = []
        Q = self.encode_queries(queries)
        for start in range(0, len(Q), 256):
            S = Q[start : start + 256] @ docs.T
            for s in S:
                out.append([(self._ids[i], float(s[i])) for i in best_k(s, order, k)])
        return out

    # -- persistence ------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        self._require_trained()
        assert self.vocab is not None and self.idf is not None and self.A is not None
        d = Path(path)
        write_config(d, {"model": self.name, "analyzer": self.analyzer.config(), "settings": self.config()})
        arrays = {"A": self.A, "idf": self.idf}
        if self._docs is not None:
            arrays["docs"] = self._docs
        np.savez_compressed(d / _NPZ, **arrays)
        (d / _JSON).write_text(json.dumps({"terms": self.vocab.terms, "doc_ids": self._ids}, ensure_ascii=False),
                               encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "ProjectionModel":
        d = Path(path)
        cfg = read_config(d, expect=cls.name)
        model = cls(Analyzer.from_config(cfg.get("analyzer", {})), **cfg.get("settings", {}))
        try:
            meta = json.loads((d / _JSON).read_text(encoding="utf-8"))
            with np.load(d / _NPZ, allow_pickle=False) as z:
                model.A, model.idf = z["A"], z["idf"]
                docs = z["docs"] if "docs" in z.files else None
            model.vocab = Vocabulary(meta["terms"])
            if model.A.shape[0] != len(model.vocab) or len(model.idf) != len(model.vocab):
                raise ValueError("projection does not match the vocabulary")
            if docs is not None:
                if len(docs) != len(meta["doc_ids"]):
                    raise ValueError("document vectors do not match the document ids")
                model._docs, model._ids = docs, list(meta["doc_ids"])
                model._position = {x: i for i, x in enumerate(model._ids)}
        except (OSError, KeyError, ValueError, TypeError) as e:
            raise ModelDirError(f"{d}: corrupt or missing projection model ({e})") from None
        return model


class LSA(ProjectionModel):
    """LSA by PCA of the queries' and titles' TF-IDF vectors, each text its own document
    (Gao et al. 2011 §5.2, Table 2 row 2)."""
    name = "lsa"

    def _learn(self, Xq, Xd, q_ids, d_ids, data, dev, progress):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        A, var = pca(sp.vstack([Xq, Xd]).tocsr(), self.dim, seed=self.seed)
        return A, {"pca_seconds": time.perf_counter() - t0, "explained_variance": float(var.sum()),
                   "texts": Xq.shape[0] + Xd.shape[0]}


class CLLSA(ProjectionModel):
    """Cross-language LSA: PCA of each query concatenated with its title (Table 2 row 4)."""
    name = "cl-lsa"

    def _learn(self, Xq, Xd, q_ids, d_ids, data, dev, progress):  # type: ignore[no-untyped-def]
        assert self.idf is not None
        t0 = time.perf_counter()
        X = tfidf_matrix([q + d for q, d in zip(q_ids, d_ids)], self.idf)
        A, var = pca(X, self.dim, seed=self.seed)
        return A, {"pca_seconds": time.perf_counter() - t0, "explained_variance": float(var.sum())}


class OPCA(ProjectionModel):
    """Oriented PCA (Table 2 row 6): generalised eigenvectors of (C, N + εI) inside the leading
    ``reduce`` PCA directions (module docstring)."""
    name = "opca"

    extra = {"reduce": 200, "reg": 0.3}

    def _learn(self, Xq, Xd, q_ids, d_ids, data, dev, progress):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        m = max(self.dim, int(self.settings["reduce"]))
        U, var = pca(sp.vstack([Xq, Xd]).tocsr(), m, seed=self.seed)
        m = U.shape[1]
        C, N, eps = opca_matrices(Xq, Xd, U, float(self.settings["reg"]))
        k = min(self.dim, m)
        vals, W = scipy.linalg.eigh(C, N + eps * np.eye(m), subset_by_index=[m - k, m - 1])
        order = np.argsort(-vals)
        vals, W = vals[order], W[:, order]
        signs = np.sign(W[np.argmax(np.abs(W), axis=0), np.arange(k)])
        W = W * np.where(signs == 0, 1.0, signs)
        return U @ W, {"reduce": m, "epsilon": eps, "eigenvalues": vals[:10].tolist(),
                       "seconds_eigh": time.perf_counter() - t0}


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


class S2Net(ProjectionModel):
    """Discriminative projection model trained with S2Net (Table 2 row 8; module docstring).
    Settings: ``gamma`` (10), ``negatives`` (4), ``epochs`` (max), ``patience`` (epochs without a
    better dev NDCG@10 before stopping), ``batch_size``, ``lr`` (Adam)."""
    name = "s2net"

    extra = {"gamma": 10.0, "negatives": 4, "epochs": 20, "patience": 3, "batch_size": 1024, "lr": 0.01}

    def _learn(self, Xq, Xd, q_ids, d_ids, data, dev, progress):  # type: ignore[no-untyped-def]
        import torch

        assert self.idf is not None and self.vocab is not None
        st = self.settings
        t0 = time.perf_counter()
        A0, _ = pca(sp.vstack([Xq, Xd]).tocsr(), self.dim, seed=self.seed)
        log: dict[str, Any] = {"init": "lsa", "init_seconds": time.perf_counter() - t0, "epochs": []}
        pool = tfidf_matrix(self._ids_of(data.doc_texts), self.idf)
        pos_doc = np.array([data.doc_index[d] for _, d in data.positives], dtype=np.int64)
        q_index: dict[str, int] = {}
        pair_query = np.array([q_index.setdefault(q, len(q_index)) for q, _ in data.positives], dtype=np.int64)
        pos_keys = np.unique(pair_query * len(data.doc_ids) + pos_doc)
        gen = torch.Generator().manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        A = torch.nn.Parameter(torch.from_numpy(A0.astype(np.float32)))
        opt = torch.optim.Adam([A], lr=float(st["lr"]))
        tq, tpool = _torch_csr(Xq), _torch_csr(pool)
        n, J, gamma, bs = Xq.shape[0], int(st["negatives"]), float(st["gamma"]), int(st["batch_size"])
        dev_eval = _DevScorer(self, dev, data) if dev is not None else None
        best_score, best_A, best_epoch, waited = -np.inf, A0.astype(np.float32), 0, 0
        if dev_eval is not None:
            self.A = A0.astype(np.float32)
            best_score = dev_eval()
            log["dev_ndcg@10_init"] = best_score
        stopped = f"reached {st['epochs']} epochs"
        for epoch in range(1, int(st["epochs"]) + 1):
            start = time.perf_counter()
            neg = _sample_negatives(rng, n, J, len(data.doc_ids), pos_keys, pair_query)
            perm = torch.randperm(n, generator=gen).numpy()
            batches = range(0, n, bs)
            total, count = 0.0, 0
            for b in (track(batches, f"S2Net epoch {epoch}", total=len(batches)) if progress else batches):
                idx = perm[b : b + bs]
                q = _rows(tq, idx)
                docs = _rows(tpool, np.concatenate([pos_doc[idx][:, None], neg[idx]], axis=1).ravel())
                zq = torch.nn.functional.normalize(torch.sparse.mm(q, A), dim=1)
                zd = torch.nn.functional.normalize(torch.sparse.mm(docs, A), dim=1).view(len(idx), J + 1, -1)
                cos = torch.einsum("bk,bjk->bj", zq, zd)
                delta = cos[:, :1] - cos[:, 1:]
                loss = torch.nn.functional.softplus(-gamma * delta).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(idx)
                count += len(idx)
            secs = time.perf_counter() - start
            entry = {"epoch": epoch, "loss": total / max(count, 1), "seconds": secs, "pairs_per_s": n / max(secs, 1e-9)}
            if dev_eval is not None:
                self.A = A.detach().numpy().copy()
                entry["dev_ndcg@10"] = score = dev_eval()
                if score > best_score + 1e-5:
                    best_score, best_A, best_epoch, waited = score, self.A.copy(), epoch, 0
                else:
                    waited += 1
            else:
                best_A, best_epoch = A.detach().numpy().copy(), epoch
            log["epochs"].append(entry)
            if dev_eval is not None and waited >= int(st["patience"]):
                stopped = f"early stop after epoch {epoch}: dev NDCG@10 did not improve for {waited} epochs"
                break
        log.update(best_epoch=best_epoch, best_dev_ndcg10=None if dev_eval is None else best_score, stopped=stopped,
                   seconds_per_epoch=float(np.mean([e["seconds"] for e in log["epochs"]])) if log["epochs"] else 0.0)
        return best_A, log


def _torch_csr(X: sp.csr_matrix):  # type: ignore[no-untyped-def]
    """scipy CSR -> (indptr, indices, data) numpy arrays for fast row gathering."""
    X = X.tocsr()
    return X.indptr.astype(np.int64), X.indices.astype(np.int64), X.data.astype(np.float32), X.shape[1]


def _rows(m, idx: np.ndarray):  # type: ignore[no-untyped-def]
    """Rows ``idx`` of a CSR triple as a torch sparse COO tensor (len(idx) x V)."""
    import torch

    indptr, indices, data, V = m
    starts, ends = indptr[idx], indptr[idx + 1]
    lengths = ends - starts
    rows = np.repeat(np.arange(len(idx)), lengths)
    src = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths) + np.arange(lengths.sum())
    ix = torch.from_numpy(np.vstack([rows, indices[src]]))
    return torch.sparse_coo_tensor(ix, torch.from_numpy(data[src]), (len(idx), V), check_invariants=False).coalesce()


def _sample_negatives(rng: np.random.Generator, n: int, J: int, pool: int, pos_keys: np.ndarray,
                      pair_query: np.ndarray) -> np.ndarray:
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
    """Dev-set NDCG@10 (exp gain) of the model's current A: encodes the dev queries and their
    candidate titles (texts from the training pool) and ranks by cosine."""

    def __init__(self, model: ProjectionModel, dev: Any, data: Any):
        from ..evaluation import evaluate

        self.model, self.evaluate = model, evaluate
        idx = data.doc_index
        self.qids = [q for q in dev.queries if dev.candidates.get(q)]
        self.cands = {q: [d for d in dev.candidates[q] if d in idx] for q in self.qids}
        self.qrels = dev.qrels
        self.Xq = model.tfidf([dev.queries[q] for q in self.qids])
        docs = sorted({d for c in self.cands.values() for d in c})
        self.doc_pos = {d: i for i, d in enumerate(docs)}
        self.Xd = model.tfidf([data.doc_texts[idx[d]] for d in docs])

    def __call__(self) -> float:
        Q, D = self.model._project(self.Xq), self.model._project(self.Xd)
        run = {}
        for i, q in enumerate(self.qids):
            c = self.cands[q]
            s = D[[self.doc_pos[d] for d in c]] @ Q[i]
            run[q] = {d: float(v) for d, v in zip(c, s)}
        if not run:
            return 0.0
        return float(self.evaluate(run, self.qrels, ["ndcg@10"]).mean["ndcg@10"])
