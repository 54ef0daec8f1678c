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
  defaults (reduce = 200, reg = 0.3) are chosen on homedepot's dev split.
- ``s2net``: the discriminative projection model (DPM) trained with S2Net (Yih et al. 2011): A
  starts from the LSA solution and minimises log(1 + exp(−γΔ)), Δ = cos(AᵀQ, AᵀD⁺) − cos(AᵀQ, AᵀD⁻),
  γ = 10, over each positive pair with 4 random titles of the pool as D⁻ (re-drawn every epoch),
  minibatch Adam (lr 0.01, chosen on dev) in torch with sparse inputs, early
  stopping on the dev set's NDCG@10 (the paper stops on a held-out 0.5 % of its click pairs; the
  optimiser is our choice). Random negatives are easy: the training loss falls fast and dev
  NDCG peaks after a few epochs.

The projection is applied to uncentred vectors (Aᵀx, as in the paper's cosine); PCA centres only
to find the directions.

Common to all: the vocabulary is the 40k terms with the highest document frequency over the
training queries and titles, weights (1 + log tf)·log(N/df) with N and df from the same texts,
rows L2-normalised; projected vectors are L2-normalised, so a score is a cosine (a text with no
known term projects to 0 and scores 0). The "+ VSM" rows of Table 2 are experiment-spec
interpolation rows: weight·cos_VSM + (1 − weight)·cos_projected on raw scores.

A model's ``Params`` (analyzer, ``dim``, ``max_terms``) say what it is; how A is learned (seeds,
OPCA's ``reduce``/``reg``, S2Net's loop) are the trainer's arguments (``training.projection``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import scipy.sparse as sp

from ..params import Params, param
from ..text import Analyzer, Vocabulary, count_matrix
from .base import (
    SAVED_DATA_ERRORS,
    Model,
    ModelDirError,
    config_params,
    dense_top_k,
    id_ranks,
    positions,
    read_config,
    same_length,
    seal,
    write_config,
)

_NPZ = "projection.npz"
_JSON = "projection.json"


def tfidf_matrix(id_lists: Sequence[Sequence[int]], idf: np.ndarray) -> sp.csr_matrix:
    """Rows of term ids -> L2-normalised (1 + log tf)·idf CSR (float64); empty rows stay zero."""
    m = count_matrix(id_lists, len(idf), dtype=np.float64)
    m.data = (1.0 + np.log(m.data)) * idf[m.indices]
    norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
    return (sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ m).tocsr()


def project(X: sp.csr_matrix, A: np.ndarray) -> np.ndarray:
    """TF-IDF rows -> unit-length rows of XA (float32); a row with no known term stays zero."""
    Z = np.asarray(X @ A, dtype=np.float32)
    norms = np.linalg.norm(Z, axis=1, keepdims=True)
    return Z / np.where(norms > 0, norms, 1.0)


@dataclass(frozen=True)
class ProjectionParams(Params):
    """What a projection model is: its analyzer, k = ``dim`` and the vocabulary size."""

    analyzer: Literal["paper", "english", "cjk"] | dict[str, Any] = "paper"  # a name, or Analyzer.config()
    dim: int = param(100, ge=1)
    max_terms: int = param(40_000, ge=1)


class LSAParams(ProjectionParams):
    kind = "lsa"


class CLLSAParams(ProjectionParams):
    kind = "cl-lsa"


class OPCAParams(ProjectionParams):
    kind = "opca"


class S2NetParams(ProjectionParams):
    kind = "s2net"


class ProjectionModel(Model):
    """Shared machinery (module docstring): vocabulary, idf, projection A, encoders, indexing a
    collection as unit vectors, cosine scoring, save/load. ``training.projection`` learns
    ``vocab``, ``idf`` and ``A``."""

    Params: ClassVar[type[ProjectionParams]] = ProjectionParams

    def __init__(self, **params: Any):
        self.p = self.Params.from_mapping(params, where=self.name)
        a = self.p.analyzer
        self.analyzer = Analyzer.named(a) if isinstance(a, str) else Analyzer.from_config(a)
        self.vocab: Vocabulary | None = None
        self.idf: np.ndarray | None = None
        self.A: np.ndarray | None = None  # V x k, float32
        self._ids: list[str] = []
        self._position: dict[str, int] = {}
        self._docs: np.ndarray | None = None  # n x k unit rows

    def config(self) -> dict[str, Any]:
        return self.p.as_dict()

    # -- features ---------------------------------------------------------------------------------
    def tfidf(self, texts: Sequence[str]) -> sp.csr_matrix:
        """Texts -> L2-normalised TF-IDF rows over the model's vocabulary."""
        if self.vocab is None or self.idf is None:
            raise RuntimeError(f"{self.name}: not trained; call fit() or load()")
        return tfidf_matrix([self.vocab.encode(self.analyzer(t)) for t in texts], self.idf)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length k-dimensional vectors (float32); zero for a text with no known term."""
        X = self.tfidf(texts)
        assert self.A is not None
        return project(X, self.A)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode_queries(texts)

    def _require_trained(self) -> None:
        if self.vocab is None or self.idf is None or self.A is None:
            raise RuntimeError(f"{self.name}: not trained; call fit() or load()")

    # -- collection -------------------------------------------------------------------------------
    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        same_length(doc_ids, texts, "doc ids", "texts")
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
        same_length(queries, candidates, "queries", "candidate lists")
        docs = self._doc_matrix()
        Q = self.encode_queries(queries)
        out = []
        for q, cands in zip(Q, candidates):
            pos = positions(self._position, cands)
            out.append((docs[pos] @ q).astype(np.float64))
        return out

    def retrieve(self, queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        """Exact top-k by cosine over the whole collection (dense matrix product per batch)."""
        if k < 1:
            raise ValueError("k must be at least 1")
        docs = self._doc_matrix()
        order = id_ranks(self._ids)
        return dense_top_k(self.encode_queries(queries), docs, self._ids, order, k)

    # -- persistence ------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        self._require_trained()
        assert self.vocab is not None and self.idf is not None and self.A is not None
        d = Path(path)
        write_config(d, {"model": self.name, "params": self.p.as_dict()})
        arrays: dict[str, Any] = {"A": self.A, "idf": self.idf}
        if self._docs is not None:
            arrays["docs"] = self._docs
        np.savez_compressed(d / _NPZ, **arrays)
        (d / _JSON).write_text(
            json.dumps({"terms": self.vocab.terms, "doc_ids": self._ids}, ensure_ascii=False), encoding="utf-8"
        )
        seal(d)

    @classmethod
    def load(cls, path: str | Path) -> ProjectionModel:
        d = Path(path)
        cfg = read_config(d, expect=cls.name)
        model = cls(**config_params(cfg, cls.Params, "settings"))
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
        except SAVED_DATA_ERRORS as e:
            raise ModelDirError(f"{d}: corrupt or missing projection model ({e})") from None
        return model


class LSA(ProjectionModel):
    """LSA by PCA of the queries' and titles' TF-IDF vectors, each text its own document
    (Gao et al. 2011 §5.2, Table 2 row 2)."""

    name = "lsa"
    Params = LSAParams


class CLLSA(ProjectionModel):
    """Cross-language LSA: PCA of each query concatenated with its title (Table 2 row 4)."""

    name = "cl-lsa"
    Params = CLLSAParams


class OPCA(ProjectionModel):
    """Oriented PCA (Table 2 row 6): generalised eigenvectors of (C, N + εI) inside the leading
    ``reduce`` PCA directions (module docstring)."""

    name = "opca"
    Params = OPCAParams


class S2Net(ProjectionModel):
    """Discriminative projection model trained with S2Net (Table 2 row 8; module docstring)."""

    name = "s2net"
    Params = S2NetParams
