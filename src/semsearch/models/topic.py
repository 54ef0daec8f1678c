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

Training (``fit(data, dev=None, progress=False)`` with a ``TrainingData``; ``fit_texts`` /
``fit_pairs`` take texts directly; ``dev`` is not used): MAP-EM from random (flat-Dirichlet)
θ and φ (``seed``), at most ``iterations`` (100) iterations, stopping once the relative change of
the log-likelihood falls below ``tol`` (1e-3) but not before ``min_iterations`` (20; from random
starts EM first lingers near the symmetric saddle). The E-step is vectorised over the sparse
counts in bounded chunks spread over ``threads`` threads (``topic_em``). The returned log (JSON)
has per iteration the log-likelihood, MAP objective, seconds and tokens/s (and for BLTM-PR the
constraint's residuals), and why EM stopped. ``topics`` above what the data support (more than
the non-empty training documents or distinct words) is a ValueError. An identical training run
(same class, training parameters and texts) within one process is reused from a small memo, so a
table's "μ = 0" row and its mixture row train once. Models save as npz + JSON (``save``/``load``,
``semsearch.models.load_model``), with the indexed collection's θ when there is one."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sys
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from ..progress import enabled as progress_enabled
from ..progress import track
from ..text import Analyzer, Vocabulary, count_matrix
from . import topic_em as em
from .base import Model, ModelDirError, read_config, write_config
from .lexical import LexicalIndex

_NPZ = "topic.npz"
_JSON = "topic.json"
_THETA = "theta.npz"
_CACHE_LIMIT = 200_000  # cached per-(query, candidates) score components shared by with_params copies


def default_threads() -> int:
    """Threads for the E-step: the CPUs this process may use, at most 2 (the project's machines)."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(2, n))


def _check_mix(mu: float, lam: float) -> tuple[float, float]:
    mu, lam = float(mu), float(lam)
    if not 0.0 <= mu <= 1.0:
        raise ValueError(f"mu (weight of the unigram document model) must be in [0, 1], got {mu}")
    if not 0.0 < lam < 1.0:
        raise ValueError(f"lam (weight of the background model) must be in (0, 1), got {lam}")
    return mu, lam


class TopicModel(Model):
    """Shared by the topic models: the mixture ranking function, indexing (folding-in), the
    score cache shared by ``with_params`` copies, the EM loop with progress, save/load.

    Subclasses define ``train_defaults``, ``fit`` (setting the trained state with ``_set_trained``)
    and ``_fold_in`` (θ of a count matrix over ``doc_vocab``)."""

    train_defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, analyzer: str | Analyzer = "paper", mu: float = 0.8, lam: float = 0.5,
                 threads: int | None = None, **train: Any):
        self.analyzer = Analyzer.named(analyzer) if isinstance(analyzer, str) else analyzer
        self.mu, self.lam = _check_mix(mu, lam)
        unknown = set(train) - set(self.train_defaults)
        if unknown:
            raise ValueError(f"{self.name}: unknown parameters {sorted(unknown)}; known: "
                             f"{sorted({*self.train_defaults, 'mu', 'lam', 'analyzer', 'threads'})}")
        self.train_params: dict[str, Any] = {**self.train_defaults, **train}
        self._validate_train(self.train_params)
        self.threads = int(threads) if threads else default_threads()
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
    def _validate_train(self, p: dict[str, Any]) -> None:
        if int(p["topics"]) < 1:
            raise ValueError(f"{self.name}: topics must be at least 1, got {p['topics']}")
        for key in ("alpha", "beta"):
            if key in p and p[key] is not None and float(p[key]) < 1.0:
                raise ValueError(f"{self.name}: MAP-EM needs {key} >= 1 (a Dirichlet prior whose mode exists), "
                                 f"got {p[key]}")

    @property
    def topics(self) -> int:
        return int(self.train_params["topics"])

    def params(self) -> dict[str, Any]:
        return {"mu": self.mu, "lam": self.lam}

    def with_params(self, **params: Any) -> "TopicModel":
        """A copy with other mixture weights ``mu``/``lam``; shares the trained model, the folded-in
        θ and the score cache (so a grid over them costs no retraining and little rescoring)."""
        other = set(params) - {"mu", "lam"}
        if other:
            raise ValueError(f"{self.name}: only mu and lam can change after training; {sorted(other)} "
                             "are training parameters (construct and fit a new model)")
        clone = copy.copy(self)
        clone.mu, clone.lam = _check_mix(params.get("mu", self.mu), params.get("lam", self.lam))
        return clone

    # -- training helpers -----------------------------------------------------------------------
    def _set_trained(self, query_vocab: Vocabulary, doc_vocab: Vocabulary, phi_query: np.ndarray,
                     arrays: dict[str, np.ndarray]) -> None:
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

    def _check_topics(self, n_docs: int, n_words: int, what: str) -> None:
        """A clear error when the data cannot support the topic count."""
        limit = min(n_docs, n_words)
        if self.topics > limit:
            raise ValueError(
                f"{self.name}: {self.topics} topics but the training data has only {n_docs} non-empty "
                f"{what} and {n_words} distinct words; use at most {limit} topics or more data")

    def _memo_key(self, texts: Sequence[str]) -> str:
        h = hashlib.sha1(json.dumps([self.name, self.train_params, self.analyzer.config()],
                                    sort_keys=True, default=str).encode())
        for t in texts:
            h.update(t.encode("utf-8", "replace"))
            h.update(b"\x00")
        return h.hexdigest()

    def _document_counts(self, texts: Sequence[str]) -> tuple[Vocabulary, sp.csr_matrix]:
        """Training vocabulary and document-word counts, empty documents dropped (they carry no
        information about φ); checks the topic count against what the data supports."""
        tokens = [self.analyzer(t) for t in texts]
        vocab = Vocabulary.build(tokens, min_count=int(self.train_params["min_count"]))
        counts = _counts(tokens, vocab)
        counts = counts[np.diff(counts.indptr) > 0]
        self._check_topics(counts.shape[0], len(vocab), "documents")
        return vocab, counts

    def _memo_get(self, key: str) -> dict[str, Any] | None:
        hit = _FIT_MEMO.get(key)
        if hit is None:
            return None
        _FIT_MEMO.move_to_end(key)
        state, log = hit
        self._set_trained(*state)
        return {**log, "reused": "identical training run earlier in this process (in-memory memo)"}

    def _memo_put(self, key: str, log: dict[str, Any]) -> None:
        assert self.query_vocab is not None and self.doc_vocab is not None and self.phi_query is not None
        _FIT_MEMO[key] = ((self.query_vocab, self.doc_vocab, self.phi_query, self.arrays), log)
        while len(_FIT_MEMO) > _FIT_MEMO_SIZE:
            _FIT_MEMO.popitem(last=False)

    # -- collection ---------------------------------------------------------------------------
    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        """Index the collection: term counts for P_ML and P(q|C), and θ_D of every document by
        folding it in with the trained model (vectorised over the whole collection)."""
        self._require_trained()
        if len(doc_ids) != len(texts):
            raise ValueError(f"{len(doc_ids)} doc ids but {len(texts)} texts")
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
        raise NotImplementedError

    def _fold_in_map(self, counts: sp.csr_matrix) -> np.ndarray:
        """MAP folding-in with the title-side φ (``phi_doc``, or the one φ when there is one)."""
        phi_d = self.arrays.get("phi_doc", self.phi_query)
        assert phi_d is not None
        return em.fold_in(counts, phi_d, float(self.train_params["alpha"]), int(self.train_params["fold_iterations"]),
                          threads=self.threads)

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
        self.lexical_index
        assert self._theta is not None
        return self._theta

    # -- scoring --------------------------------------------------------------------------------
    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """log P(Q|D) of Gao 2011 Eq. 14-17 (see the module docstring) for each query's candidates."""
        if len(queries) != len(candidates):
            raise ValueError(f"{len(queries)} queries but {len(candidates)} candidate lists")
        ix = self.lexical_index
        mu, lam = self.mu, self.lam
        out = []
        for q, docs in zip(queries, candidates):
            docs = tuple(docs)
            key = (q, docs)
            comp = self._cache.get(key)
            if comp is None:
                try:
                    pos = np.fromiter((ix.position[d] for d in docs), dtype=np.int64, count=len(docs))
                except KeyError as e:
                    raise ValueError(f"candidate document {e.args[0]!r} is not in the indexed collection") from None
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
            p_topic[:, modelled] = self._theta[pos].astype(np.float64) @ self.phi_query[:, mid[modelled]].astype(np.float64)
        return weights, p_c, p_ml, p_topic

    @property
    def _counts_csc(self) -> sp.csc_matrix:
        """The collection's counts by column (built on first use by full retrieval; the cache
        dict is shared with ``with_params`` copies)."""
        if "csc" not in self._cache:
            self._cache["csc"] = self.lexical_index.counts.tocsc()
        return self._cache["csc"]

    # -- EM loop ---------------------------------------------------------------------------------
    def _em(self, step: Callable[[], tuple[float, float, dict[str, Any]]], iterations: int, tol: float,
            tokens: int, progress: bool, min_iterations: int = 0) -> dict[str, Any]:
        """Run ``step`` (one EM iteration: log-likelihood, objective, extras) up to ``iterations``
        times; from iteration ``min_iterations`` on, stop when the log-likelihood's relative change
        falls below ``tol`` (the log-likelihood, not the MAP objective: with many topics the prior
        terms dwarf it). Shows a progress bar and, on a terminal, one line per iteration."""
        history: list[dict[str, Any]] = []
        stopped = f"reached the iteration limit ({iterations}) without the relative change falling below tol {tol:g}"
        show = progress and progress_enabled()
        steps = track(range(iterations), f"{self.name} EM ({self.topics} topics)", total=iterations) if progress else iter(range(iterations))
        prev: float | None = None
        try:
            for it in steps:
                t0 = time.perf_counter()
                ll, obj, extra = step()
                dt = max(time.perf_counter() - t0, 1e-9)
                rec = {"iteration": it + 1, "loglik": ll, "objective": obj, "seconds": round(dt, 4),
                       "tokens_per_s": round(tokens / dt, 1), **extra}
                history.append(rec)
                if show:
                    print(f"{self.name} iteration {it + 1}: log-likelihood {ll:.6g}, MAP objective {obj:.6g}, "
                          f"{tokens / dt:,.0f} tokens/s", file=sys.stderr, flush=True)
                if not np.isfinite(obj):
                    raise FloatingPointError(f"{self.name}: EM objective became {obj} at iteration {it + 1}")
                if prev is not None and it + 1 >= min_iterations:
                    rel = (ll - prev) / max(abs(prev), 1e-300)
                    if abs(rel) < tol:
                        stopped = (f"converged at iteration {it + 1}: relative change of the log-likelihood "
                                   f"{rel:.3g} below tol {tol:g}")
                        break
                prev = ll
        finally:
            close = getattr(steps, "close", None)
            if close:
                close()
        return {"iterations": history, "stopped": stopped}

    # -- persistence ------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """config.json (parameters), topic.npz + topic.json (the trained model: φ arrays and the
        vocabularies), and, when a collection is indexed, its lexical index and θ."""
        d = Path(path)
        write_config(d, {"model": self.name, "params": self.params(), "train": self.train_params,
                         "analyzer": self.analyzer.config(), "trained": self.trained})
        if not self.trained:
            return
        assert self.query_vocab is not None and self.doc_vocab is not None and self.phi_query is not None
        np.savez_compressed(d / _NPZ, phi_query=self.phi_query, **self.arrays)
        same = self.query_vocab.terms == self.doc_vocab.terms
        meta = {"query_terms": self.query_vocab.terms, "doc_terms": None if same else self.doc_vocab.terms}
        (d / _JSON).write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
        if self._index is not None and self._theta is not None:
            self._index.save(d)
            np.savez_compressed(d / _THETA, theta=self._theta)

    @classmethod
    def load(cls, path: str | Path) -> "TopicModel":
        d = Path(path)
        cfg = read_config(d, expect=cls.name)
        try:
            model = cls(Analyzer.from_config(cfg.get("analyzer", {})), **cfg.get("params", {}), **cfg.get("train", {}))
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
        except (OSError, KeyError, ValueError, TypeError) as e:
            raise ModelDirError(f"{d}: corrupt or missing topic model ({e})") from None
        if phi_query.shape != (model.topics, len(qv)):
            raise ModelDirError(f"{d}: φ has shape {phi_query.shape}, expected {model.topics} x {len(qv)}")
        model._set_trained(qv, dv, phi_query, arrays)
        if (d / _THETA).is_file():
            ix = LexicalIndex.load(d)
            try:
                with np.load(d / _THETA, allow_pickle=False) as z:
                    theta = z["theta"]
            except (OSError, KeyError, ValueError) as e:
                raise ModelDirError(f"{d}: corrupt θ ({e})") from None
            model._use_index(ix, theta)
        return model


_FIT_MEMO: OrderedDict[str, tuple[tuple[Any, ...], dict[str, Any]]] = OrderedDict()
_FIT_MEMO_SIZE = 2
"""Trained models kept by (class, training parameters, training texts): a table's "μ = 0" row and
its mixture row train the same model; the second reuses the first instead of repeating EM."""


def clear_fit_memo() -> None:
    """Forget the in-process memo of trained topic models."""
    _FIT_MEMO.clear()


def _distinct_titles(data: Any) -> list[str]:
    """The title side of the training pairs, each distinct document once, in first-seen order."""
    seen: dict[str, None] = {}
    for _, d in data.positives:
        seen.setdefault(d, None)
    idx = data.doc_index
    return [data.doc_texts[idx[d]] for d in seen]


def _counts(token_lists: Sequence[Sequence[str]], vocab: Vocabulary) -> sp.csr_matrix:
    m = count_matrix([vocab.encode(t) for t in token_lists], len(vocab), dtype=np.float64)
    return m


def _random_rows(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random distributions (rows x cols) drawn from the flat Dirichlet, to start EM from: from
    uniform θ and φ, EM never breaks the topics' symmetry, and from nearly uniform ones it lingers
    for many iterations near that saddle (worse with more topics)."""
    return em.normalize_rows(rng.standard_exponential((rows, cols)) + 1e-3)


# ------------------------------------------------------------------------------------------ PLSA
class PLSA(TopicModel):
    """PLSA by MAP-EM (Gao 2011 §5.2 row 2-3; CLSM 2014 Table 5 rows 3-4): trained on the distinct
    titles of the training pairs; ``alpha``/``beta`` are the Dirichlet priors on θ and φ."""
    name = "plsa"

    train_defaults: ClassVar[dict[str, Any]] = {
        "topics": 100, "iterations": 100, "min_iterations": 20, "tol": 1e-3, "alpha": 1.1, "beta": 1.01, "min_count": 1,
        "fold_iterations": 20, "seed": 0,
    }

    def fit(self, data: Any, dev: Any = None, progress: bool = False) -> dict[str, Any]:
        """Train on ``data`` (a ``TrainingData``): the title side of its positive pairs only.
        ``dev`` is not used: EM stops on its own objective. Returns the training log."""
        return self.fit_texts(_distinct_titles(data), progress=progress)

    def fit_texts(self, texts: Sequence[str], progress: bool = False) -> dict[str, Any]:
        """Train on documents ``texts`` (see ``fit``)."""
        key = self._memo_key(texts)
        hit = self._memo_get(key)
        if hit is not None:
            return hit
        p = self.train_params
        start = time.perf_counter()
        vocab, counts = self._document_counts(texts)
        T, alpha, beta = self.topics, float(p["alpha"]), float(p["beta"])
        rng = np.random.default_rng(int(p["seed"]))
        theta = _random_rows(rng, counts.shape[0], T)  # updated in place by each EM step
        state = {"phiT": np.ascontiguousarray(_random_rows(rng, T, len(vocab)).T)}  # words x topics
        chunks = em.make_chunks(counts, em.chunk_bounds(counts.indptr, em.max_nnz(T)))
        n_tokens = int(counts.sum())

        def step() -> tuple[float, float, dict[str, Any]]:
            state["phiT"], ll, obj = em.plsa_step(chunks, theta, state["phiT"], alpha, beta, self.threads)
            return ll, obj, {}

        loop = self._em(step, int(p["iterations"]), float(p["tol"]), n_tokens, progress, int(p["min_iterations"]))
        self._set_trained(vocab, vocab, state["phiT"].T, {})
        log = {"model": self.name, "topics": T, "documents": counts.shape[0], "dropped_empty": len(texts) - counts.shape[0],
               "vocabulary": len(vocab), "tokens": n_tokens, "trained_on": "distinct titles of the training pairs",
               "threads": self.threads, **loop, "seconds": round(time.perf_counter() - start, 2)}
        self._memo_put(key, log)
        return log

    def _fold_in(self, counts: sp.csr_matrix) -> np.ndarray:
        return self._fold_in_map(counts)


# ------------------------------------------------------------------------------------------- LDA
class LDA(TopicModel):
    """LDA by gensim's online variational Bayes (CLSM 2014 Table 5 rows 5-6; the paper used Gibbs
    sampling): trained on the distinct titles of the training pairs. ``alpha`` None means 50/T,
    ``eta`` 0.01 (Wei & Croft 2006). Titles are folded in by the variational E-step."""
    name = "lda"

    train_defaults: ClassVar[dict[str, Any]] = {
        "topics": 100, "passes": 10, "iterations": 50, "alpha": None, "eta": 0.01, "chunksize": 2000,
        "min_count": 1, "fold_iterations": 50, "seed": 0,
    }

    def _validate_train(self, p: dict[str, Any]) -> None:
        if int(p["topics"]) < 1:
            raise ValueError(f"{self.name}: topics must be at least 1, got {p['topics']}")
        if p["alpha"] is not None and float(p["alpha"]) <= 0 or float(p["eta"]) <= 0:
            raise ValueError(f"{self.name}: alpha and eta must be positive, got {p['alpha']}, {p['eta']}")

    def fit(self, data: Any, dev: Any = None, progress: bool = False) -> dict[str, Any]:
        """Train on the title side of ``data``'s positive pairs (``dev`` unused). Needs gensim."""
        return self.fit_texts(_distinct_titles(data), progress=progress)

    def fit_texts(self, texts: Sequence[str], progress: bool = False) -> dict[str, Any]:
        try:
            from gensim.models import LdaModel
        except ImportError:
            raise ImportError("the lda model trains with gensim: pip install gensim") from None
        import logging

        key = self._memo_key(texts)
        hit = self._memo_get(key)
        if hit is not None:
            return hit
        p = self.train_params
        start = time.perf_counter()
        vocab, counts = self._document_counts(texts)
        T = self.topics
        alpha = float(p["alpha"]) if p["alpha"] is not None else 50.0 / T
        corpus = to_gensim_corpus(counts)
        n_tokens = int(counts.sum())
        logging.getLogger("gensim").setLevel(logging.WARNING)
        sample = corpus[: min(len(corpus), 2000)]
        holder: dict[str, Any] = {}

        def step() -> tuple[float, float, dict[str, Any]]:
            if "lda" not in holder:
                holder["lda"] = LdaModel(corpus, num_topics=T, id2word=dict(enumerate(vocab.terms)),
                                         alpha=np.full(T, alpha), eta=float(p["eta"]), passes=1,
                                         iterations=int(p["iterations"]), chunksize=int(p["chunksize"]),
                                         random_state=int(p["seed"]), eval_every=None)
            else:
                holder["lda"].update(corpus, passes=1)
            bound = float(holder["lda"].bound(sample))
            return bound, bound, {}

        loop = self._em(step, int(p["passes"]), 0.0, n_tokens, progress)
        lda = holder["lda"]
        lam = lda.state.get_lambda()
        self._set_trained(vocab, vocab, lam / lam.sum(axis=1, keepdims=True),
                          {"lambda": lam, "alpha": np.asarray(lda.alpha, dtype=np.float64)})
        log = {"model": self.name, "topics": T, "documents": counts.shape[0], "vocabulary": len(vocab),
               "tokens": n_tokens, "alpha": alpha, "eta": float(p["eta"]), "trainer": "gensim LdaModel (online VB)",
               "note": ("one 'iteration' is one pass of online VB; its loglik/objective is gensim's variational "
                        "bound on the first 2,000 titles (with the topic-side terms, so not monotone in passes)"),
               **loop, "seconds": round(time.perf_counter() - start, 2)}
        self._memo_put(key, log)
        return log

    def _fold_in(self, counts: sp.csr_matrix) -> np.ndarray:
        from scipy.special import digamma

        lam = self.arrays["lambda"].astype(np.float64)
        exp_elog_beta = np.exp(digamma(lam) - digamma(lam.sum(axis=1, keepdims=True)))
        return em.fold_in_vb(counts, exp_elog_beta, self.arrays["alpha"], int(self.train_params["fold_iterations"]),
                             threads=self.threads)


def to_gensim_corpus(counts: sp.csr_matrix) -> list[list[tuple[int, float]]]:
    """CSR counts -> gensim's bag-of-words corpus (a list of (word id, count) lists)."""
    out = []
    for i in range(counts.shape[0]):
        lo, hi = counts.indptr[i], counts.indptr[i + 1]
        out.append(list(zip(counts.indices[lo:hi].tolist(), counts.data[lo:hi].tolist())))
    return out


# ------------------------------------------------------------------------------------------ BLTM
class BLTM(TopicModel):
    """The bilingual topic model (Gao 2011 §3; Table 1 rows 4-9; CLSM 2014 Table 5 row 7 is
    BLTM-PR): trained on query–title pairs by MAP-EM. ``pr``: posterior regularisation (BLTM-PR,
    ``pr_steps`` dual gradient steps per pair and EM iteration, warm-started, stopping early at
    ``pr_tol``); ``one_vocab``: one vocabulary for queries and titles (BLTM-PR-1V)."""
    name = "bltm"

    train_defaults: ClassVar[dict[str, Any]] = {
        "topics": 100, "iterations": 100, "min_iterations": 20, "tol": 1e-3, "alpha": 1.1, "beta": 1.01, "pr": False,
        "one_vocab": False, "pr_steps": 10, "pr_tol": 1e-3, "pr_method": "diag", "min_count": 1, "fold_iterations": 20, "seed": 0,
    }

    def _validate_train(self, p: dict[str, Any]) -> None:
        super()._validate_train(p)
        if p["pr_method"] not in ("diag", "gradient"):
            raise ValueError(f"{self.name}: pr_method must be 'diag' or 'gradient', got {p['pr_method']!r}")
        if int(p["pr_steps"]) < 0:
            raise ValueError(f"{self.name}: pr_steps must be >= 0, got {p['pr_steps']}")

    def fit(self, data: Any, dev: Any = None, progress: bool = False) -> dict[str, Any]:
        """Train on ``data``'s positive (query, title) pairs, one pair per positive (``dev`` unused)."""
        queries, titles = data.pair_texts()
        return self.fit_pairs(queries, titles, progress=progress)

    def fit_pairs(self, queries: Sequence[str], titles: Sequence[str], progress: bool = False) -> dict[str, Any]:
        """Train on aligned query and title texts (see ``fit``)."""
        if len(queries) != len(titles):
            raise ValueError(f"{len(queries)} queries but {len(titles)} titles")
        key = self._memo_key([*queries, "\x01", *titles])
        hit = self._memo_get(key)
        if hit is not None:
            return hit
        p = self.train_params
        start = time.perf_counter()
        one, pr = bool(p["one_vocab"]), bool(p["pr"])
        tq = [self.analyzer(t) for t in queries]
        td = [self.analyzer(t) for t in titles]
        mc = int(p["min_count"])
        if one:
            vq = vd = Vocabulary.build([*tq, *td], min_count=mc)
        else:
            vq, vd = Vocabulary.build(tq, min_count=mc), Vocabulary.build(td, min_count=mc)
        nq, nd = _counts(tq, vq), _counts(td, vd)
        keep = (np.diff(nq.indptr) > 0) | (np.diff(nd.indptr) > 0)
        nq, nd = nq[keep], nd[keep]
        self._check_topics(int(keep.sum()), min(len(vq), len(vd)), "pairs")
        T, alpha, beta = self.topics, float(p["alpha"]), float(p["beta"])
        rng = np.random.default_rng(int(p["seed"]))
        theta = _random_rows(rng, nq.shape[0], T)  # updated in place by each EM step
        state: dict[str, Any] = {"q": np.ascontiguousarray(_random_rows(rng, T, len(vq)).T)}  # words x topics
        state["d"] = state["q"] if one else np.ascontiguousarray(_random_rows(rng, T, len(vd)).T)
        lam = np.zeros((nq.shape[0], T)) if pr else None
        bounds = em.chunk_bounds(nq.indptr + nd.indptr, em.max_nnz(T, arrays=6))
        qc, dc = em.make_chunks(nq, bounds), em.make_chunks(nd, bounds)
        n_tokens = int(nq.sum() + nd.sum())

        def step() -> tuple[float, float, dict[str, Any]]:
            state["q"], state["d"], ll, obj, st = em.bltm_step(
                qc, dc, theta, state["q"], state["d"], alpha, beta, self.threads,
                one_vocab=one, lam=lam, pr_steps=int(p["pr_steps"]), pr_tol=float(p["pr_tol"]),
                pr_method=str(p["pr_method"]))
            extra = {}
            if pr:
                extra = {"pr_residual_max": st.max_residual, "pr_residual_mean": st.mean_residual,
                         "pr_mean_steps": st.mean_steps}
            return ll, obj, extra

        loop = self._em(step, int(p["iterations"]), float(p["tol"]), n_tokens, progress, int(p["min_iterations"]))
        self._set_trained(vq, vd, state["q"].T, {} if one else {"phi_doc": state["d"].T})
        variant = "BLTM" + ("-PR" if pr else "") + ("-1V" if one else "")
        log = {"model": self.name, "variant": variant, "topics": T, "pairs": int(keep.sum()),
               "dropped_empty": int((~keep).sum()), "query_vocabulary": len(vq), "title_vocabulary": len(vd),
               "tokens": n_tokens, "threads": self.threads, **loop,
               "seconds": round(time.perf_counter() - start, 2)}
        if pr:
            log["note"] = ("with PR the EM maximises the posterior-regularised objective; the logged objective "
                           "is the plain MAP objective, which need not increase monotonically")
        self._memo_put(key, log)
        return log

    def _fold_in(self, counts: sp.csr_matrix) -> np.ndarray:
        return self._fold_in_map(counts)
