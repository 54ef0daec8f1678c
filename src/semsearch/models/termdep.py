"""Term-dependency baselines of the CLSM paper's Table 5 (Shen et al. 2014, §5.2, rows 8-9):

- ``mrf``: the Markov random field sequential dependence model (SDM; Metzler & Croft 2005):
  unigram, ordered-window (#1) and unordered-window (#uw8) features of adjacent query-term pairs,
  each a Dirichlet-smoothed log-probability, mixed with weights λ_T, λ_O, λ_U.
- ``lce``: latent concept expansion (Metzler & Croft 2007) with single-term concepts: the SDM
  ranks the whole collection, the top documents are pseudo-relevant, expansion terms are weighted
  by the SDM posterior of those documents, and the expanded query re-scores the candidates.

Both need word positions, so the collection is kept as a ``PositionalIndex``: every document's
token ids in one flat int32 array with padding between documents (windows never cross a document
boundary), plus an inverted list of positions per term. Window counts are computed for all
documents at once per query pair with numpy and cached, so re-scoring under other λ/μ is cheap.
The translation models (``translation.py``) reuse the same index for their n-gram statistics."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..params import param
from ..text import Analyzer, Vocabulary
from .base import SAVED_DATA_ERRORS, ModelDirError, best_k, id_ranks, positions, same_length
from .lexical import AnalyzedParams, IndexedModel, analyzed

_POS_NPZ = "positional.npz"
_POS_JSON = "positional.json"
PAD = -1
MAX_WINDOW = 16
"""Padding between documents in the flat token array: the widest window a query pair can use."""


class PositionalIndex:
    """Token id sequences of a collection (for windows and n-grams) and its count matrix."""

    def __init__(
        self, analyzer: Analyzer, vocab: Vocabulary, doc_ids: Sequence[str], tokens: np.ndarray, lengths: np.ndarray
    ):
        """A collection's token ids, concatenated, and its documents' lengths.

        Args:
            analyzer: the analyzer the tokens came from.
            vocab: the vocabulary the token ids index.
            doc_ids: the documents' ids.
            tokens: every document's term ids, one document after another.
            lengths: tokens per document."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if len(lengths) != len(doc_ids) or int(lengths.sum()) != len(tokens):
            raise ValueError("token array does not match the document lengths")
        self.analyzer = analyzer
        self.vocab = vocab
        self.doc_ids = list(doc_ids)
        self.tokens = np.asarray(tokens, dtype=np.int32)  # concatenated, no padding
        self.lengths = lengths

    @classmethod
    def build(cls, doc_ids: Sequence[str], texts: Sequence[str], analyzer: Analyzer | None = None) -> PositionalIndex:
        analyzer, vocab, ids = analyzed(doc_ids, texts, analyzer)
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter((i for x in ids for i in x), dtype=np.int32, count=int(lengths.sum()))
        return cls(analyzer, vocab, doc_ids, flat, lengths)

    def __len__(self) -> int:
        return len(self.doc_ids)

    # -- derived arrays --------------------------------------------------------------------------
    @cached_property
    def offsets(self) -> np.ndarray:
        """Start of each document in ``tokens`` (length n + 1)."""
        return np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)

    def doc_tokens(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    @cached_property
    def padded(self) -> tuple[np.ndarray, np.ndarray]:
        """(flat tokens with ``MAX_WINDOW`` PADs before, between and after documents, start of
        each document in it)."""
        n = len(self)
        starts = self.offsets[:-1] + MAX_WINDOW * (np.arange(n, dtype=np.int64) + 1)
        flat = np.full(len(self.tokens) + MAX_WINDOW * (n + 1), PAD, dtype=np.int32)
        pos = np.repeat(starts - self.offsets[:-1], self.lengths) + np.arange(len(self.tokens))
        flat[pos] = self.tokens
        return flat, starts

    @cached_property
    def term_positions(self) -> tuple[np.ndarray, np.ndarray]:
        """Inverted lists: positions (in ``padded[0]``) of term t are ``pos[ptr[t]:ptr[t+1]]``."""
        flat, _ = self.padded
        real = np.flatnonzero(flat != PAD)
        order = np.argsort(flat[real], kind="stable")
        pos = real[order]
        ptr = np.concatenate([[0], np.cumsum(np.bincount(flat[real], minlength=len(self.vocab)))])
        return ptr.astype(np.int64), pos.astype(np.int64)

    @cached_property
    def counts(self) -> sp.csr_matrix:
        """Documents x terms counts (float64)."""
        rows = np.repeat(np.arange(len(self), dtype=np.int64), self.lengths)
        m = sp.csr_matrix(
            (np.ones(len(self.tokens)), (rows, self.tokens.astype(np.int64))), shape=(len(self), len(self.vocab))
        )
        m.sum_duplicates()
        return m

    @cached_property
    def counts_csc(self) -> sp.csc_matrix:
        return self.counts.tocsc()

    @cached_property
    def cf(self) -> np.ndarray:
        return np.bincount(self.tokens, minlength=len(self.vocab)).astype(np.float64)

    @cached_property
    def total(self) -> float:
        """Collection length |C| in tokens (at least 1, so probabilities stay finite)."""
        return float(max(len(self.tokens), 1))

    @cached_property
    def position(self) -> dict[str, int]:
        return {d: i for i, d in enumerate(self.doc_ids)}

    @cached_property
    def id_order(self) -> np.ndarray:
        return id_ranks(self.doc_ids)

    # -- lookups -----------------------------------------------------------------------------------
    def positions_of(self, doc_ids: Sequence[str]) -> np.ndarray:
        return positions(self.position, doc_ids)

    def encode(self, text: str) -> np.ndarray:
        """Analysed query -> term ids, -1 for terms the collection never uses (order kept)."""
        get = self.vocab.ids.get
        return np.array([get(t, -1) for t in self.analyzer(text)], dtype=np.int64)

    def term_tf(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        """(documents containing ``term``, its counts there); empty for an unknown term."""
        if term < 0:
            return np.zeros(0, np.int64), np.zeros(0)
        c = self.counts_csc
        lo, hi = c.indptr[term], c.indptr[term + 1]
        return c.indices[lo:hi].astype(np.int64), c.data[lo:hi]

    def pair_tf(self, a: int, b: int, ordered: bool, window: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-document counts of the pair (a, b): ordered = ``#1(a b)`` (b right after a);
        unordered = ``#uwN(a b)``, the occurrences of a with some b at distance 1..N-1 on either
        side (Metzler & Croft's window of N tokens holding both terms)."""
        if a < 0 or b < 0:
            return np.zeros(0, np.int64), np.zeros(0)
        if not ordered and not 2 <= window <= MAX_WINDOW:
            raise ValueError(f"window must be in [2, {MAX_WINDOW}], got {window}")
        flat, starts = self.padded
        ptr, allpos = self.term_positions
        pa = allpos[ptr[a] : ptr[a + 1]]
        if ordered:
            hit = flat[pa + 1] == b
        else:
            hit = np.zeros(len(pa), dtype=bool)
            for d in range(1, window):
                hit |= (flat[pa + d] == b) | (flat[pa - d] == b)
        if not hit.any():
            return np.zeros(0, np.int64), np.zeros(0)
        docs = np.searchsorted(starts, pa[hit], side="right") - 1
        u, c = np.unique(docs, return_counts=True)
        return u.astype(np.int64), c.astype(np.float64)

    # -- persistence -------------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        np.savez_compressed(path / _POS_NPZ, tokens=self.tokens, lengths=self.lengths)
        meta = {"analyzer": self.analyzer.config(), "terms": self.vocab.terms, "doc_ids": self.doc_ids}
        (path / _POS_JSON).write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> PositionalIndex:
        try:
            meta = json.loads((path / _POS_JSON).read_text(encoding="utf-8"))
            with np.load(path / _POS_NPZ, allow_pickle=False) as z:
                tokens, lengths = z["tokens"], z["lengths"]
            return cls(
                Analyzer.from_config(meta["analyzer"]), Vocabulary(meta["terms"]), meta["doc_ids"], tokens, lengths
            )
        except SAVED_DATA_ERRORS as e:
            raise ModelDirError(f"{path}: corrupt or missing positional index ({e})") from None


def lookup(docs: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """values[docs == at[i]] for each i (0 where absent); ``docs`` sorted ascending."""
    out = np.zeros(len(at), dtype=np.float64)
    if len(docs) == 0 or len(at) == 0:
        return out
    i = np.minimum(np.searchsorted(docs, at), len(docs) - 1)
    hit = docs[i] == at
    out[hit] = values[i[hit]]
    return out


class _PositionalModel(IndexedModel):
    """Shared machinery: an ``IndexedModel`` over a positional index, with a statistics cache
    that copies made by ``with_params`` share (it is keyed by what it depends on)."""

    index_class = PositionalIndex

    def __init__(self, analyzer: str | dict | Analyzer = "paper", **params: Any):
        super().__init__(analyzer, **params)
        self._cache: dict[Any, Any] = {}

    def with_params(self, **params: Any) -> _PositionalModel:
        clone: _PositionalModel = super().with_params(**params)  # type: ignore[assignment]  # same class
        clone._cache = self._cache
        return clone

    def use_index(self, index: PositionalIndex) -> None:
        super().use_index(index)
        self._cache = {}

    @property
    def positional_index(self) -> PositionalIndex:
        return self._require_index()


class SequentialDependence(_PositionalModel):
    """MRF sequential dependence model (Metzler & Croft 2005, §3-4; CLSM Table 5 row 8):

        score(Q, D) = λ_T Σ_i f_T(q_i, D) + λ_O Σ_i f_O(q_i q_i+1, D) + λ_U Σ_i f_U(q_i q_i+1, D)
        f_X(e, D)  = log[(tf_X(e, D) + μ·cf_X(e)/|C|) / (|D| + μ)]

    f_T counts the term, f_O the exact bigram (#1), f_U the pair in any order within ``window``
    tokens (#uw8). A count never seen in the collection is floored at half an occurrence, so the
    log is always finite. A one-word query has no pair features (plain Dirichlet query likelihood).
    The λ are not renormalised (rank-equivalent) so that a grid can tune them freely."""

    name = "mrf"

    @dataclass(frozen=True)
    class Params(AnalyzedParams):
        kind = "mrf"
        lambda_t: float = param(0.85, ge=0)
        lambda_o: float = param(0.10, ge=0)
        lambda_u: float = param(0.05, ge=0)
        mu: float = param(2500.0, gt=0)
        window: int = param(8, ge=2, le=MAX_WINDOW)  # the unordered window #uwN

    p: Params

    # -- feature statistics (cached per term / pair) -------------------------------------------
    def _stat(self, key: tuple) -> tuple[np.ndarray, np.ndarray, float]:
        """(docs, tf, collection probability) of a term (``("t", a)``) or a pair
        (``("o"|"u", a, b, window)``), cached on the index."""
        cache = self._cache.setdefault("stats", {})
        if key not in cache:
            ix = self.positional_index
            if key[0] == "t":
                docs, tf = ix.term_tf(key[1])
            else:
                docs, tf = ix.pair_tf(key[1], key[2], ordered=key[0] == "o", window=int(key[3]))
            cache[key] = (docs, tf, max(float(tf.sum()), 0.5) / ix.total)
        return cache[key]

    def _keys(self, q: np.ndarray) -> tuple[list[tuple], list[tuple], list[tuple]]:
        w = self.p.window
        pairs = list(zip(q[:-1].tolist(), q[1:].tolist()))
        return ([("t", int(t)) for t in q], [("o", a, b, 0) for a, b in pairs], [("u", a, b, w) for a, b in pairs])

    def _feature(self, key: tuple, at: np.ndarray | None) -> np.ndarray:
        """f(e, D) for candidate documents ``at`` (None: every document)."""
        ix = self.positional_index
        mu = self.p.mu
        docs, tf, pc = self._stat(key)
        if at is None:
            dl = ix.lengths.astype(np.float64)
            out = np.log(mu * pc / (dl + mu))
            out[docs] = np.log((tf + mu * pc) / (dl[docs] + mu))
            return out
        return np.log((lookup(docs, tf, at) + mu * pc) / (ix.lengths[at] + mu))

    def features(self, query: str, at: np.ndarray | None) -> np.ndarray:
        """(3, n) sums of f_T, f_O, f_U over the query for documents ``at`` (None: all)."""
        ix = self.positional_index
        n = len(ix) if at is None else len(at)
        q = ix.encode(query)
        out = np.zeros((3, n))
        for row, keys in enumerate(self._keys(q)):
            for key in keys:
                out[row] += self._feature(key, at)
        return out

    @property
    def _weights(self) -> np.ndarray:
        return np.array([self.p.lambda_t, self.p.lambda_o, self.p.lambda_u])

    def _sdm(self, query: str, at: np.ndarray | None) -> np.ndarray:
        key = ("f", self.p.mu, self.p.window, query, None if at is None else at.tobytes())
        feats = self._cache.get(key) if at is not None else None
        if feats is None:
            feats = self.features(query, at)
            if at is not None:
                self._cache[key] = feats
        return self._weights @ feats

    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        same_length(queries, candidates, "queries", "candidate lists")
        ix = self.positional_index
        return [self._sdm(q, ix.positions_of(list(c))) for q, c in zip(queries, candidates)]

    def _score_all(self, query: str) -> np.ndarray:
        """The query's score for every document of the collection."""
        return self._weights @ self.features(query, None)

    def retrieve(self, queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        """Top-k of the whole collection (every document is scored: SDM smooths every term)."""
        if k < 1:
            raise ValueError("k must be at least 1")
        ix = self.positional_index
        out = []
        for q in queries:
            s = self._score_all(q)
            out.append([(ix.doc_ids[i], float(s[i])) for i in best_k(s, ix.id_order, k)])
        return out


class LatentConceptExpansion(SequentialDependence):
    """Latent concept expansion with single-term concepts (Metzler & Croft 2007, §3; CLSM Table 5
    row 9), on top of the SDM above:

    1. rank the whole collection with the SDM; the top ``fb_docs`` documents R are pseudo-relevant;
    2. weight each term e of R (query terms excluded) by
       Σ_{D∈R} exp(SDM(Q, D)) · P_μ(e|D) · P(e|C)^(−fb_idf), where P_μ is the Dirichlet-smoothed
       document model — the exp of the SDM's f_T(e, D) — and P(e|C)^(−fb_idf) is the paper's
       collection-frequency penalty on common concepts (fb_idf = 0 turns it off);
    3. keep the ``fb_terms`` best terms, weights normalised to sum to 1 (ŵ_e), and score
       score(Q, D) = SDM(Q, D) + fb_weight · Σ_e ŵ_e · f_T(e, D).

    Simplifications: only single-term concepts (the paper also expands with two-term concepts),
    and the expansion is one additive feature weighted by ``fb_weight`` instead of separately
    trained λ's for expansion unigrams. All three parameters apply through ``with_params``."""

    name = "lce"

    @dataclass(frozen=True)
    class Params(SequentialDependence.Params):
        kind = "lce"
        fb_docs: int = param(10, ge=1)  # pseudo-relevant documents
        fb_terms: int = param(10, ge=0)  # expansion concepts kept
        fb_weight: float = param(0.5, ge=0)  # weight of the expansion feature
        fb_idf: float = param(0.0, ge=0)  # collection-frequency penalty exponent

    p: Params

    def _sdm_key(self) -> tuple:
        p = self.p
        return (p.mu, p.window, p.lambda_t, p.lambda_o, p.lambda_u)

    def _feedback(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """Top-50 documents of the whole collection by SDM and their scores (cached)."""
        key = ("fb", self._sdm_key(), query)
        if key not in self._cache:
            s = super()._score_all(query)  # plain SDM, not the expanded query
            top = best_k(s, self.positional_index.id_order, 50)
            self._cache[key] = (top, s[top])
        return self._cache[key]

    def _concept_weights(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """Every candidate concept (a term of the feedback documents, query terms excluded) with
        its unnormalised LCE weight, best first (cached; ``fb_terms`` only cuts this list)."""
        p = self.p
        key = ("fbw", self._sdm_key(), p.fb_docs, p.fb_idf, query)
        if key in self._cache:
            return self._cache[key]
        ix = self.positional_index
        q = ix.encode(query)
        out = (np.zeros(0, np.int64), np.zeros(0))
        if len(q) and len(ix):
            top, scores = self._feedback(query)
            top, scores = top[: p.fb_docs], scores[: p.fb_docs]
            rows = ix.counts[top]
            terms = np.unique(rows.indices)
            terms = terms[~np.isin(terms, q)]
            if len(top) and len(terms):
                post = np.exp(scores - scores.max())  # exp(SDM), scaled for range
                mu, pc = p.mu, np.maximum(ix.cf[terms], 0.5) / ix.total
                p_d = (rows[:, terms].toarray() + mu * pc) / (ix.lengths[top][:, None] + mu)
                w = (post @ p_d) * pc ** (-p.fb_idf)
                order = np.lexsort((terms, -w))
                out = (terms[order], w[order])
        self._cache[key] = out
        return out

    def expansion(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """(term ids, normalised weights ŵ) of the expansion concepts; empty for an empty query."""
        terms, w = self._concept_weights(query)
        k = self.p.fb_terms
        terms, w = terms[:k], w[:k]
        return terms, (w / w.sum() if w.sum() > 0 else w)

    def _expansion_feature(self, query: str, at: np.ndarray | None) -> np.ndarray:
        """Σ_e ŵ_e·f_T(e, D) for documents ``at`` (None: all), cached for candidate lists."""
        p = self.p
        key = ("fbf", self._sdm_key(), p.fb_docs, p.fb_idf, p.fb_terms, query, None if at is None else at.tobytes())
        if key in self._cache:
            return self._cache[key]
        ix = self.positional_index
        terms, w = self.expansion(query)
        n = len(ix) if at is None else len(at)
        out = np.zeros(n)
        if len(terms):
            mu, pc = p.mu, np.maximum(ix.cf[terms], 0.5) / ix.total
            tf = (ix.counts_csc[:, terms] if at is None else ix.counts[at][:, terms]).toarray()
            dl = (ix.lengths if at is None else ix.lengths[at]).astype(np.float64)
            out = np.log((tf + mu * pc) / (dl[:, None] + mu)) @ w
        if at is not None:
            self._cache[key] = out
        return out

    def _expanded(self, query: str, at: np.ndarray | None) -> np.ndarray:
        base = super()._sdm(query, at) if at is not None else self._weights @ self.features(query, None)
        if self.p.fb_weight == 0:
            return base
        return base + self.p.fb_weight * self._expansion_feature(query, at)

    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        same_length(queries, candidates, "queries", "candidate lists")
        ix = self.positional_index
        return [self._expanded(q, ix.positions_of(list(c))) for q, c in zip(queries, candidates)]

    def _score_all(self, query: str) -> np.ndarray:
        return self._expanded(query, None)
