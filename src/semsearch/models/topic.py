"""Topic models as document language models for ranking: PLSA and LDA (trained on titles only)
and the bilingual topic models BLTM, BLTM-PR and BLTM-PR-1V (trained on query–title pairs) of
Gao, Toutanova & Yih 2011, "Clickthrough-based latent semantic models for web search" (SIGIR),
as the CLSM paper's Table 5 rows 3-7 and the 2011 paper's Table 1 use them.

Registered models (``create_model(name, **params)``; every one ranks the same way, below):

- ``plsa``: PLSA (Hofmann 1999) learned by MAP-EM with Dirichlet priors α on θ and β on φ
  (Gao 2011 §5.2: α = 1.1, β = 1.01 — "LDA with MAP inference"), on the distinct titles of the
  training pairs ("documents only", CLSM §5.2).
- ``lda``: LDA (Blei et al. 2003) by gensim's online variational Bayes (``LdaModel``), on the same
  titles; α = 50/T and η = 0.01 as the LDA document model the CLSM paper cites (Wei & Croft 2006).
  gensim is needed to ``fit`` only; unseen titles get θ from our vectorised variational E-step.
- ``bltm``: the bilingual topic model (Gao 2011 §3.1): each query–title pair shares θ ~ Dir(α),
  query words come from φᵠ_z and title words from φᴰ_z. ``pr = True`` is BLTM-PR (§3.2: posterior
  regularisation makes each pair's query and title put the same expected fraction of tokens on
  every topic); ``one_vocab = True`` merges the two vocabularies into one φ (BLTM-PR-1V, §5.2).

Ranking (Gao 2011 Eq. 14-17): P(Q|D) = Π_q [λ·P(q|C) + (1−λ)·(μ·P_ML(q|D) + (1−μ)·Σ_z φᵠ_z,q·θ_D,z)],
scored as Σ_q log(...) over the query's words (with repeats). P(q|C) is the word's relative
frequency in the indexed collection (half a count for a word the collection never saw, so no
factor is ever 0 while λ > 0), P_ML(q|D) = tf/|D| (0 for an empty title), φᵠ is φ for
PLSA/LDA (one vocabulary) and the query-side φ for BLTM, and θ_D comes from folding the title in
with φ fixed (20 MAP-EM iterations, or LDA's variational E-step). ``mu`` and ``lam`` are the only
``with_params`` parameters: changing them reuses the trained model and the folded-in θ. μ = 0
gives the topic-model-only rows of Table 1; μ = 1 is the Jelinek-Mercer unigram model (UM).
Defaults μ = 0.8, λ = 0.5 (typical of what dev tuning picks on Home Depot); specs tune them.

A model's ``Params`` are what it is (``topics``, the prior ``alpha`` folding-in uses,
``fold_iterations``, ``one_vocab``, ``mu``, ``lam``, ``threads``); EM and its settings live in
``training.topic`` (``fit_texts`` / ``fit_pairs``, or ``training.fit``). Models save as npz + JSON
(``save``/``load``, ``semsearch.models.load_model``), with the indexed collection's θ when there
is one."""

from __future__ import annotations

import copy
import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import scipy.sparse as sp

from ..params import ParamError, Params, param
from ..text import Analyzer, Vocabulary, count_matrix
from . import topic_em as em
from .base import (
    SAVED_DATA_ERRORS,
    Model,
    ModelDirError,
    config_params,
    positions,
    read_config,
    same_length,
    seal,
    write_config,
)
from .lexical import LexicalIndex

_NPZ = "topic.npz"
_JSON = "topic.json"
_THETA = "theta.npz"
_CACHE_LIMIT = 200_000  # cached per-(query, candidates) score components shared by with_params copies


def default_threads() -> int:
    """Threads for the E-step: the CPUs this process may use, at most 2 (the project's machines)."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(2, n))


@dataclass(frozen=True)
class TopicParams(Params):
    """What a topic model is: T topics, the θ prior α (MAP; folding-in uses it), folding-in
    iterations, the ranking mixture μ (unigram document model) and λ (background), threads."""

    analyzer: Literal["paper", "english", "cjk"] | dict[str, Any] = "paper"  # a name, or Analyzer.config()
    topics: int = param(100, ge=1)
    alpha: float = 1.1
    fold_iterations: int = param(20, ge=1)
    mu: float = param(0.8, ge=0, le=1)  # weight of the unigram document model
    lam: float = param(0.5, gt=0, lt=1)  # weight of the background model
    threads: int | None = param(None, ge=1)  # E-step threads (None: ``default_threads()``)

    def check(self) -> None:
        if self.alpha < 1.0:
            raise ParamError(
                f"{self._label('alpha')}: MAP-EM needs alpha >= 1 (a Dirichlet prior whose mode "
                f"exists), got {self.alpha}"
            )


class PLSAParams(TopicParams):
    kind = "plsa"


@dataclass(frozen=True)
class LDAParams(TopicParams):
    """LDA: ``alpha`` None means 50/T (Wei & Croft 2006); folding-in by 50 variational steps."""

    kind = "lda"

    alpha: float | None = param(None, gt=0)  # type: ignore[assignment]  # None: 50/T
    fold_iterations: int = param(50, ge=1)

    def check(self) -> None:
        pass  # variational Bayes: any positive α


@dataclass(frozen=True)
class BLTMParams(TopicParams):
    """BLTM: ``one_vocab`` merges the query and title vocabularies into one φ (BLTM-PR-1V)."""

    kind = "bltm"

    one_vocab: bool = False


class TopicModel(Model):
    """Shared by the topic models: the mixture ranking function, indexing (folding-in), the
    score cache shared by ``with_params`` copies, save/load. ``_fold_in`` gives θ of a count matrix
    over ``doc_vocab`` (LDA overrides it); ``training.topic`` learns them (``set_trained``)."""

    Params: ClassVar[type[TopicParams]] = TopicParams

    def __init__(self, **params: Any):
        self.p = self.Params.from_mapping(params, where=self.name)
        a = self.p.analyzer
        self.analyzer = Analyzer.named(a) if isinstance(a, str) else Analyzer.from_config(a)
        self.threads = self.p.threads or default_threads()
        # trained state
        self.query_vocab: Vocabulary | None = None
        self.doc_vocab: Vocabulary | None = None
        self.phi_query: np.ndarray | None = None  # topics x query vocabulary: P(q|z) for scoring
        self.arrays: dict[str, np.ndarray] = {}  # what folding-in needs (subclass-specific)
        # collection state
        self._index: LexicalIndex | None = None
        self._theta: np.ndarray | None = None
        self._cache: dict[Any, Any] = {}  # (query, candidates) -> score components; "csc" -> counts by column

    # -- parameters -------------------------------------------------------------------------
    @property
    def topics(self) -> int:
        return self.p.topics

    def params(self) -> dict[str, Any]:
        return {"mu": self.p.mu, "lam": self.p.lam}

    def with_params(self, **params: Any) -> TopicModel:
        """A copy with other mixture weights ``mu``/``lam``; shares the trained model, the folded-in
        θ and the score cache (so a grid over them costs no retraining and little rescoring)."""
        other = set(params) - {"mu", "lam"}
        if other:
            raise ValueError(
                f"{self.name}: only mu and lam can change after training; {sorted(other)} "
                "are training parameters (construct and fit a new model)"
            )
        clone = copy.copy(self)
        clone.p = self.p.replace(where=self.name, **params)
        return clone

    def set_trained(
        self, query_vocab: Vocabulary, doc_vocab: Vocabulary, phi_query: np.ndarray, arrays: dict[str, np.ndarray]
    ) -> None:
        """The trained state: vocabularies, φ of the query side, what folding-in needs."""
        self.query_vocab, self.doc_vocab = query_vocab, doc_vocab
        self.phi_query = np.ascontiguousarray(phi_query, dtype=np.float32)
        self.arrays = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in arrays.items()}
        self._index, self._theta, self._cache = None, None, {}

    @property
    def trained(self) -> bool:
        return self.phi_query is not None

    def _require_trained(self) -> None:
        if not self.trained:
            raise RuntimeError(f"{self.name}: not trained; call fit() first (or load a saved model)")

    # -- collection ---------------------------------------------------------------------------
    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        """Index the collection: term counts for P_ML and P(q|C), and θ_D of every document by
        folding it in with the trained model (vectorised over the whole collection)."""
        self._require_trained()
        same_length(doc_ids, texts, "doc ids", "texts")
        if len(set(doc_ids)) != len(doc_ids):
            raise ValueError("duplicate document ids")
        tokens = [self.analyzer(t) for t in texts]
        vocab = Vocabulary.build(tokens)
        ix = LexicalIndex(self.analyzer, vocab, doc_ids, count_matrix([vocab.encode(t) for t in tokens], len(vocab)))
        assert self.doc_vocab is not None
        counts = count_matrix([self.doc_vocab.encode(t) for t in tokens], len(self.doc_vocab))
        self._use_index(ix, self._fold_in(counts))

    def _use_index(self, ix: LexicalIndex, theta: np.ndarray) -> None:
        if theta.shape != (len(ix), self.topics):
            raise ValueError(f"θ {theta.shape} does not match {len(ix)} documents x {self.topics} topics")
        if not np.isfinite(theta).all():
            raise ValueError("folding-in produced non-finite θ")
        self._index, self._theta, self._cache = ix, theta, {}

    def _fold_in(self, counts: sp.csr_matrix) -> np.ndarray:
        """MAP folding-in with the title-side φ (``phi_doc``, or the one φ when there is one): PLSA
        and BLTM; LDA folds in by its variational E-step."""
        phi_d = self.arrays.get("phi_doc", self.phi_query)
        assert phi_d is not None
        return em.fold_in(counts, phi_d, self.p.alpha, self.p.fold_iterations, threads=self.threads)

    def fold_in(self, texts: Sequence[str]) -> np.ndarray:
        """θ (float32, texts x topics) of arbitrary texts under the trained model."""
        self._require_trained()
        assert self.doc_vocab is not None
        counts = count_matrix([self.doc_vocab.encode(self.analyzer(t)) for t in texts], len(self.doc_vocab))
        return self._fold_in(counts)

    @property
    def doc_ids(self) -> Sequence[str]:
        return self.lexical_index.doc_ids

    @property
    def lexical_index(self) -> LexicalIndex:
        if self._index is None:
            raise RuntimeError(f"{self.name}: no collection indexed; call index() first")
        return self._index

    @property
    def theta(self) -> np.ndarray:
        """θ_D (documents x topics) of the indexed collection."""
        _ = self.lexical_index  # raises when no collection is indexed
        assert self._theta is not None
        return self._theta

    # -- scoring --------------------------------------------------------------------------------
    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """log P(Q|D) of Gao 2011 Eq. 14-17 (see the module docstring) for each query's candidates."""
        same_length(queries, candidates, "queries", "candidate lists")
        ix = self.lexical_index
        mu, lam = self.p.mu, self.p.lam
        out = []
        for q, docs in zip(queries, candidates):
            docs = tuple(docs)
            key = (q, docs)
            comp = self._cache.get(key)
            if comp is None:
                pos = positions(ix.position, docs)
                comp = self._components(q, pos)
                if len(docs) <= 1000:
                    if len(self._cache) >= _CACHE_LIMIT:
                        for old in [k for k in self._cache if k != "csc"]:
                            del self._cache[old]
                    self._cache[key] = comp
            weights, p_c, p_ml, p_topic = comp
            if len(weights) == 0:
                out.append(np.zeros(len(docs)))
                continue
            p = lam * p_c[None, :] + (1.0 - lam) * (mu * p_ml + (1.0 - mu) * p_topic)
            out.append(np.log(p) @ weights)
        return out

    def _components(self, query: str, pos: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per distinct query word: its count, P(q|C); per candidate and word: P_ML(q|D), P_topic(q|D)."""
        ix = self.lexical_index
        assert self.query_vocab is not None and self.phi_query is not None and self._theta is not None
        counts = Counter(self.analyzer(query))
        terms = list(counts)
        weights = np.array([counts[t] for t in terms], dtype=np.float64)
        n = len(pos)
        if not terms:
            z = np.zeros(0)
            return weights, z, np.zeros((n, 0)), np.zeros((n, 0))
        cid = np.array([ix.vocab.ids.get(t, -1) for t in terms], dtype=np.int64)
        mid = np.array([self.query_vocab.ids.get(t, -1) for t in terms], dtype=np.int64)
        cf = ix.cf
        total = max(float(cf.sum()), 1.0)
        p_c = np.where(cid >= 0, np.maximum(cf[np.maximum(cid, 0)], 0.5), 0.5) / total
        p_ml = np.zeros((n, len(terms)))
        known = np.flatnonzero(cid >= 0)
        if len(known) and n:
            if n > 1000:  # many candidates (full retrieval): slice the words' columns first
                tf = self._counts_csc[:, cid[known]].toarray()[pos]
            else:
                tf = ix.counts[pos][:, cid[known]].toarray()
            p_ml[:, known] = tf.astype(np.float64) / np.maximum(ix.doc_len[pos], 1.0)[:, None]
        p_topic = np.zeros((n, len(terms)))
        modelled = np.flatnonzero(mid >= 0)
        if len(modelled) and n:
            p_topic[:, modelled] = self._theta[pos].astype(np.float64) @ self.phi_query[:, mid[modelled]].astype(
                np.float64
            )
        return weights, p_c, p_ml, p_topic

    @property
    def _counts_csc(self) -> sp.csc_matrix:
        """The collection's counts by column (built on first use by full retrieval; the cache
        dict is shared with ``with_params`` copies)."""
        if "csc" not in self._cache:
            self._cache["csc"] = self.lexical_index.counts.tocsc()
        return self._cache["csc"]

    # -- persistence ------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """config.json (parameters), topic.npz + topic.json (the trained model: φ arrays and the
        vocabularies), and, when a collection is indexed, its lexical index and θ."""
        d = Path(path)
        write_config(d, {"model": self.name, "params": self.p.as_dict(), "trained": self.trained})
        if not self.trained:
            seal(d)
            return
        assert self.query_vocab is not None and self.doc_vocab is not None and self.phi_query is not None
        np.savez_compressed(d / _NPZ, phi_query=self.phi_query, **self.arrays)  # type: ignore[arg-type]  # numpy stub
        same = self.query_vocab.terms == self.doc_vocab.terms
        meta = {"query_terms": self.query_vocab.terms, "doc_terms": None if same else self.doc_vocab.terms}
        (d / _JSON).write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
        if self._index is not None and self._theta is not None:
            self._index.save(d)
            np.savez_compressed(d / _THETA, theta=self._theta)
        seal(d)

    @classmethod
    def load(cls, path: str | Path) -> TopicModel:
        d = Path(path)
        cfg = read_config(d, expect=cls.name)
        try:
            model = cls(**config_params(cfg, cls.Params, "train"))
        except (TypeError, ValueError) as e:
            raise ModelDirError(f"{d}: bad model config ({e})") from None
        if not cfg.get("trained"):
            return model
        try:
            meta = json.loads((d / _JSON).read_text(encoding="utf-8"))
            with np.load(d / _NPZ, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            qv = Vocabulary(meta["query_terms"])
            dv = qv if meta.get("doc_terms") is None else Vocabulary(meta["doc_terms"])
            phi_query = arrays.pop("phi_query")
        except SAVED_DATA_ERRORS as e:
            raise ModelDirError(f"{d}: corrupt or missing topic model ({e})") from None
        if phi_query.shape != (model.topics, len(qv)):
            raise ModelDirError(f"{d}: φ has shape {phi_query.shape}, expected {model.topics} x {len(qv)}")
        model.set_trained(qv, dv, phi_query, arrays)
        if (d / _THETA).is_file():
            ix = LexicalIndex.load(d)
            try:
                with np.load(d / _THETA, allow_pickle=False) as z:
                    theta = z["theta"]
            except SAVED_DATA_ERRORS as e:
                raise ModelDirError(f"{d}: corrupt θ ({e})") from None
            model._use_index(ix, theta)
        return model


class PLSA(TopicModel):
    """PLSA by MAP-EM (Gao 2011 §5.2 row 2-3; CLSM 2014 Table 5 rows 3-4), trained on the distinct
    titles of the training pairs."""

    name = "plsa"
    Params = PLSAParams


class LDA(TopicModel):
    """LDA by gensim's online variational Bayes (CLSM 2014 Table 5 rows 5-6; the paper used Gibbs
    sampling), trained on the distinct titles of the training pairs; titles are folded in by the
    variational E-step."""

    name = "lda"
    Params = LDAParams

    def _fold_in(self, counts: sp.csr_matrix) -> np.ndarray:
        from scipy.special import digamma

        lam = self.arrays["lambda"].astype(np.float64)
        exp_elog_beta = np.exp(digamma(lam) - digamma(lam.sum(axis=1, keepdims=True)))
        return em.fold_in_vb(counts, exp_elog_beta, self.arrays["alpha"], self.p.fold_iterations, threads=self.threads)


class BLTM(TopicModel):
    """The bilingual topic model (Gao 2011 §3; Table 1 rows 4-9; CLSM 2014 Table 5 row 7 is
    BLTM-PR), trained on query–title pairs by MAP-EM (with posterior regularisation: BLTM-PR);
    ``one_vocab``: one vocabulary for queries and titles (BLTM-PR-1V)."""

    name = "bltm"
    Params = BLTMParams
