"""Clickthrough-based translation models (Gao, He & Nie 2010; Gao et al. 2011 §5 Table 1 rows
10-11; CLSM paper Table 5 rows 10-11): a query is a "translation" of the titles clicked for it.

- ``wtm``, the word translation model: IBM Model 1 (Brown et al. 1993) translation probabilities
  P(q|w) from a title word w to a query word q, trained by EM on (query, title) pairs, and

      P(Q|D) = Π_q [ α·P(q|C) + (1−α)·( μ·P_ML(q|D) + (1−μ)·Σ_w P(q|w)·P_ML(w|D) ) ].

  μ = 0 is the pure translation row (the 2011 paper's shaded "μ = 0" row); since
  μ·P_ML(q|D) = Σ_w 1[q = w]·P_ML(w|D), μ is also the weight of an explicit self-translation
  1[q = w] mixed into the table (the fix Berger & Lafferty and Gao et al. discuss for the
  under-estimated P(w|w)). Training adds the IBM-1 NULL word to every title, so query words with
  no counterpart in the title do not distort the table; NULL is not used when ranking. A document
  word the training titles never contained has no translations; it translates to itself with
  probability 1, so unseen words still match literally.
- ``ptm``, the phrase translation model with phrases of up to three words. Following Gao et al.
  2010 §4 (standard SMT practice): IBM-1 word alignments are trained by EM in both directions,
  the Viterbi alignments are symmetrised (grow-diag-final, Koehn et al. 2003), every bi-phrase
  consistent with the alignment (≤ 3 words a side) is extracted, and P(q̃|w̃) is the relative
  frequency of the extracted pairs. Ranking takes the best segmentation S of the query into
  phrases q̃ of at most three words (dynamic programming over positions); each phrase comes
  either word by word from the WTM (probability 1 − β) or as a unit from the phrase model (β):

      P(Q|D) ≈ max_S Π_{q̃∈S} [ (1−β)·Π_{q∈q̃} P_W(q|D) + β·( α·Π_{q∈q̃} P(q|C) + (1−α)·P_P(q̃|D) ) ]
      P_W(q|D)  = α·P(q|C) + (1−α)·( μ·P_ML(q|D) + (1−μ)·Σ_w P(q|w)·P_ML(w|D) )       (the WTM)
      P_P(q̃|D) = μ·P_ML(q̃|D) + (1−μ)·Σ_w̃ P(q̃|w̃)·P_ML(w̃|D)

  where w̃ ranges over the title's n-grams (n ≤ 3, P_ML(w̃|D) = count / number of n-grams of D)
  and P_ML(q̃|D) counts q̃ itself among them (an exact phrase match). Both parts of a segment's
  probability are distributions over the same words, so segmentations of different lengths
  compete fairly. Simplifications, stated honestly: the paper's decoder maximises over document
  segmentations and alignments consistent with a Viterbi word alignment of (Q, D); we sum over
  all document phrases (as the WTM sums over words) and maximise over query segmentations only;
  the word-model back-off β is ours — the phrase table only scores phrase pairs seen in training
  (the weakness the CLSM paper notes) — and β = 0 gives exactly the WTM. α, μ, β apply through
  ``with_params``; the phrase length is fixed at training.

A model's ``Params`` are its analyzer, the mixture weights α, μ (, β) and the PTM's phrase length;
training (IBM-1 EM, alignments, phrase extraction) is ``training.translation``. Ranking is
vectorised over sparse matrices: it multiplies the candidates' n-gram distributions with the
columns of the translation table that the query needs."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import scipy.sparse as sp

from ..params import ParamError, Params, param
from ..text import Analyzer, Vocabulary
from .base import (
    SAVED_DATA_ERRORS,
    Model,
    ModelDirError,
    best_k,
    config_params,
    id_ranks,
    positions,
    read_config,
    same_length,
    seal,
    write_config,
)
from .termdep import PositionalIndex

_NPZ = "translation.npz"
_JSON = "translation.json"
TINY = 1e-300
"""Floor for probabilities before log: a query word no channel can generate scores log(1e-300)."""
KEY_BASE = 1 << 20
"""n-gram keys: ((t1+1)·B + (t2+1))·B + (t3+1); vocabularies must stay below B − 1 terms."""


# ------------------------------------------------------------------------------------------------
# n-gram keys
# ------------------------------------------------------------------------------------------------
def ngram_keys(tokens: np.ndarray, offsets: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, key) of every n-gram inside each row of a ragged token array (ids >= 0)."""
    lengths = np.diff(offsets)
    row_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    pos_in = np.arange(len(tokens), dtype=np.int64) - offsets[:-1][row_of]
    starts = np.flatnonzero(pos_in + n <= lengths[row_of])
    key = np.zeros(len(starts), dtype=np.int64)
    for k in range(n):
        key = key * KEY_BASE + tokens[starts + k].astype(np.int64) + 1
    return row_of[starts], key


def phrase_key(ids: Sequence[int] | np.ndarray) -> int:
    key = 0
    for t in ids:
        key = key * KEY_BASE + int(t) + 1
    return key


def key_terms(key: int) -> list[int]:
    out = []
    while key:
        out.append(key % KEY_BASE - 1)
        key //= KEY_BASE
    return out[::-1]


# ------------------------------------------------------------------------------------------------
# models
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WTMParams(Params):
    """The WTM's analyzer and mixture: background weight α, literal-match weight μ."""

    kind = "wtm"

    analyzer: Literal["paper", "english", "cjk"] | dict[str, Any] = "paper"  # a name, or Analyzer.config()
    alpha: float = 0.2
    mu: float = 0.0

    def check(self) -> None:
        for name in ("alpha", "mu", "beta"):
            v = getattr(self, name, 0.0)
            if not 0.0 <= v <= 1.0:
                raise ParamError(f"{self._label(name)}: alpha, mu and beta must be in [0, 1], got {v}")


@dataclass(frozen=True)
class PTMParams(WTMParams):
    """The PTM adds the phrase channel's weight β and the phrase length (fixed at training)."""

    kind = "ptm"

    beta: float = 0.5
    max_len: int = param(3, ge=1, le=3)


class _TranslationModel(Model):
    """Shared machinery: the training vocabulary and word table, indexing a collection as n-gram
    distributions over an extended vocabulary, caching per-query channel probabilities so that
    ``with_params`` (α, μ, β) re-scores without recomputation, save/load. ``training.translation``
    sets ``vocab`` and ``word_table`` (and the PTM's phrase table)."""

    Params: ClassVar[type[WTMParams]] = WTMParams
    mixture: ClassVar[tuple[str, ...]] = ("alpha", "mu")  # what with_params changes

    def __init__(self, **params: Any):
        self.p = self.Params.from_mapping(params, where=self.name)
        a = self.p.analyzer
        self.analyzer = Analyzer.named(a) if isinstance(a, str) else Analyzer.from_config(a)
        self.vocab: Vocabulary | None = None
        self.word_table: sp.csr_matrix | None = None  # P(q|w): source (title) word x target (query) word
        self._state: dict[str, Any] = {}  # index-time arrays, shared by with_params clones
        self._cache: dict[Any, Any] = {}

    def params(self) -> dict[str, Any]:
        return {k: getattr(self.p, k) for k in self.mixture}

    def with_params(self, **params: Any) -> _TranslationModel:
        """A copy with other mixture weights, sharing the trained tables, the index and the cache."""
        other = sorted(set(params) - set(self.mixture))
        if other:
            raise ValueError(f"{self.name}: unknown parameters {other}; with_params takes {', '.join(self.mixture)}")
        clone = copy.copy(self)
        clone.p = self.p.replace(where=self.name, **params)
        return clone

    def _require_trained(self) -> None:
        if self.vocab is None or self.word_table is None:
            raise RuntimeError(f"{self.name}: not trained; call fit() or load()")

    # -- indexing ---------------------------------------------------------------------------------
    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        self._require_trained()
        assert self.vocab is not None
        px = PositionalIndex.build(doc_ids, texts, self.analyzer)
        # Extended vocabulary: the training vocabulary, then collection words it lacks.
        extra = [t for t in px.vocab.terms if t not in self.vocab.ids]
        ext = Vocabulary(list(self.vocab.terms) + extra)
        remap = np.array([ext.ids[t] for t in px.vocab.terms], dtype=np.int64)
        tokens = remap[px.tokens] if len(px.tokens) else np.zeros(0, np.int64)
        self._build_state(list(doc_ids), extra, tokens, px.offsets)

    def _build_state(self, doc_ids: list[str], extra_terms: list[str], tokens: np.ndarray, offsets: np.ndarray) -> None:
        """Index-time arrays from the collection's token ids over the extended vocabulary."""
        assert self.vocab is not None and self.word_table is not None
        ext = Vocabulary(list(self.vocab.terms) + list(extra_terms))
        Vx, n = len(ext), len(doc_ids)
        if Vx >= KEY_BASE - 1:
            raise ValueError(f"{self.name}: {Vx} distinct words are too many for n-gram keys (< {KEY_BASE - 1})")
        lengths = np.diff(offsets)
        rows = np.repeat(np.arange(n), lengths)
        counts = sp.csr_matrix((np.ones(len(tokens)), (rows, tokens)), shape=(n, Vx))
        counts.sum_duplicates()
        p_w = sp.diags(1.0 / np.maximum(lengths, 1).astype(np.float64)) @ counts  # P_ML(w|D); empty title: zeros
        # Translation table over the extended vocabulary; a word with no trained translations
        # (never in a training title) translates to itself.
        V = len(self.vocab)
        T = sp.csr_matrix((self.word_table.data, self.word_table.indices, self.word_table.indptr), shape=(V, V))
        T.resize((Vx, Vx))
        no_row = np.flatnonzero(np.diff(T.indptr) == 0)
        T = (T + sp.csr_matrix((np.ones(len(no_row)), (no_row, no_row)), shape=(Vx, Vx))).tocsc()
        cf = np.asarray(counts.sum(axis=0)).ravel()
        self._state = {
            "doc_ids": doc_ids,
            "position": {d: i for i, d in enumerate(doc_ids)},
            "ext": ext,
            "tokens": np.asarray(tokens, dtype=np.int64),
            "offsets": np.asarray(offsets, dtype=np.int64),
            "p_w": p_w.tocsr(),
            "T": T,
            "p_c": np.maximum(cf, 0.5) / max(cf.sum(), 1.0),
            "total": max(float(cf.sum()), 1.0),
        }
        self._cache = {}
        self._index_more()

    def _index_more(self) -> None:
        """Subclass hook for further index-time arrays."""

    @property
    def doc_ids(self) -> Sequence[str]:
        if not self._state:
            raise RuntimeError(f"{self.name}: no collection indexed; call index() first")
        return self._state["doc_ids"]

    def _encode(self, text: str) -> np.ndarray:
        get = self._state["ext"].ids.get
        return np.array([get(t, -1) for t in self.analyzer(text)], dtype=np.int64)

    def _word_channel(self, q: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For query term ids ``q`` (−1 = unknown) and candidate rows ``at``: P(q|C) (len(q),),
        P_ML(q|D) and Σ_w P(q|w)·P_ML(w|D) (len(at) x len(q))."""
        st = self._state
        known = q >= 0
        pc = np.full(len(q), 0.5 / st["total"])
        pc[known] = st["p_c"][q[known]]
        ml = np.zeros((len(at), len(q)))
        tr = np.zeros((len(at), len(q)))
        if known.any() and len(at):
            cols = q[known]
            R = st["p_w"][at]
            ml[:, known] = R[:, cols].toarray()
            tr[:, known] = (R @ st["T"][:, cols]).toarray()
        return pc, ml, tr

    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Scores of every (query, candidate) of the batch at once. The channel probabilities
        of a batch are computed once and cached (shared with ``with_params`` clones), so a grid
        over α, μ, β re-scores with a few array operations."""
        same_length(queries, candidates, "queries", "candidate lists")
        self.doc_ids  # noqa: B018 - raises when nothing is indexed
        cands = [list(c) for c in candidates]
        key = ("batch", tuple(queries), tuple(map(tuple, cands)))
        prep = self._cache.get(key)
        if prep is None:
            prep = self._prepare(
                [self._encode(q) for q in queries], [positions(self._state["position"], c) for c in cands]
            )
            if len(self._cache) > 64:  # bounded: a few batches per grid are reused, not all
                self._cache.clear()
            self._cache[key] = prep
        flat = self._score_batch(prep) if prep["n"] else np.zeros(0)
        return np.split(flat, np.cumsum([len(c) for c in cands])[:-1]) if cands else []

    def retrieve(self, queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        """Top-k of the whole collection, one query at a time (every title is scored: the
        translation table can match a title that shares no word with the query)."""
        if k < 1:
            raise ValueError("k must be at least 1")
        ids = self.doc_ids
        every = np.arange(len(ids), dtype=np.int64)
        order = id_ranks(ids)
        out = []
        for q in queries:
            prep = self._prepare([self._encode(q)], [every])
            s = self._score_batch(prep) if prep["n"] else np.zeros(0)
            top = best_k(s, order, k)
            out.append([(ids[i], float(s[i])) for i in top])
        return out

    def _prepare(self, qs: list[np.ndarray], ats: list[np.ndarray]) -> dict[str, Any]:
        """Padded (pairs x max query length) arrays of P(q|C), P_ML(q|D), Σ_w P(q|w)·P_ML(w|D)
        and each pair's query length; one row per (query, candidate)."""
        sizes = [len(a) for a in ats]
        n, L = int(sum(sizes)), max((len(q) for q in qs), default=0)
        PC, ML, TR = np.ones((n, L)), np.zeros((n, L)), np.zeros((n, L))
        qlen = np.zeros(n, dtype=np.int64)
        row = 0
        for q, at in zip(qs, ats):
            if len(q) and len(at):
                pc, ml, tr = self._word_channel(q, at)
                sl = slice(row, row + len(at))
                PC[sl, : len(q)], ML[sl, : len(q)], TR[sl, : len(q)] = pc, ml, tr
            qlen[row : row + len(at)] = len(q)
            row += len(at)
        return {"n": n, "L": L, "qlen": qlen, "pc": PC, "ml": ML, "tr": TR, "qs": qs, "ats": ats}

    def _word_matrix(self, prep: dict[str, Any]) -> np.ndarray:
        """The WTM's per-position probability α·P(q|C) + (1−α)·(μ·P_ML + (1−μ)·P_tr)."""
        a, mu = self.p.alpha, self.p.mu
        return a * prep["pc"] + (1.0 - a) * (mu * prep["ml"] + (1.0 - mu) * prep["tr"])

    def _score_batch(self, prep: dict[str, Any]) -> np.ndarray:
        raise NotImplementedError

    # -- persistence ------------------------------------------------------------------------------
    def _arrays(self) -> dict[str, np.ndarray]:
        assert self.word_table is not None
        w = self.word_table
        return {"word_data": w.data, "word_indices": w.indices, "word_indptr": w.indptr}

    def _restore(self, z: Any, meta: dict[str, Any]) -> None:
        V = len(meta["terms"])
        self.vocab = Vocabulary(meta["terms"])
        self.word_table = sp.csr_matrix((z["word_data"], z["word_indices"], z["word_indptr"]), shape=(V, V))

    def save(self, path: str | Path) -> None:
        self._require_trained()
        assert self.vocab is not None
        d = Path(path)
        write_config(d, {"model": self.name, "params": self.p.as_dict()})
        np.savez_compressed(d / _NPZ, **self._arrays())  # type: ignore[arg-type]  # numpy stub
        meta: dict[str, Any] = {"terms": self.vocab.terms}
        if self._state:
            meta["doc_ids"] = self._state["doc_ids"]
            meta["collection_terms"] = self._state["ext"].terms[len(self.vocab) :]
            np.savez_compressed(d / "collection.npz", tokens=self._state["tokens"], offsets=self._state["offsets"])
        (d / _JSON).write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
        seal(d)

    @classmethod
    def load(cls, path: str | Path) -> _TranslationModel:
        d = Path(path)
        cfg = read_config(d, expect=cls.name)
        model = cls(**config_params(cfg, cls.Params, "settings"))
        try:
            meta = json.loads((d / _JSON).read_text(encoding="utf-8"))
            with np.load(d / _NPZ, allow_pickle=False) as z:
                model._restore(z, meta)
            if "doc_ids" in meta:
                with np.load(d / "collection.npz", allow_pickle=False) as z:
                    tokens, offsets = z["tokens"], z["offsets"]
                model._build_state(meta["doc_ids"], meta["collection_terms"], tokens, offsets)
        except SAVED_DATA_ERRORS as e:
            raise ModelDirError(f"{d}: corrupt or missing translation model ({e})") from None
        return model


def _log(p: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(p, TINY))


class WordTranslationModel(_TranslationModel):
    """IBM-1 word translation model (module docstring): P(q|w) from the positive (query, title)
    pairs; ``alpha`` (background weight) and ``mu`` (literal-match / self-translation weight) apply
    via ``with_params``."""

    name = "wtm"
    Params = WTMParams

    def _score_batch(self, prep: dict[str, Any]) -> np.ndarray:
        mask = np.arange(prep["L"])[None, :] < prep["qlen"][:, None]
        return np.where(mask, _log(self._word_matrix(prep)), 0.0).sum(axis=1)

    def translations(self, word: str, k: int = 10) -> list[tuple[str, float]]:
        """The ``k`` most likely query words for title word ``word`` (an explanation aid)."""
        self._require_trained()
        assert self.vocab is not None and self.word_table is not None
        i = self.vocab.ids.get(word)
        if i is None:
            return []
        row = self.word_table.getrow(i)
        order = np.argsort(-row.data, kind="stable")[:k]
        return [(self.vocab.terms[row.indices[j]], float(row.data[j])) for j in order]


class PhraseTranslationModel(_TranslationModel):
    """Phrase translation model, phrases of up to ``max_len`` words (module docstring): the phrase
    table from IBM-1 alignments both ways; ``alpha``, ``mu``, ``beta`` (phrase vs word channel)
    apply via ``with_params``."""

    name = "ptm"
    Params: ClassVar[type[PTMParams]] = PTMParams
    p: PTMParams
    mixture = ("alpha", "mu", "beta")
    src_keys: np.ndarray | None = None  # sorted title-phrase keys (table rows)
    tgt_keys: np.ndarray | None = None  # sorted query-phrase keys (table columns)
    phrase_table: sp.csr_matrix | None = None  # P(q̃|w̃)

    def _require_trained(self) -> None:
        super()._require_trained()
        if self.phrase_table is None:
            raise RuntimeError(f"{self.name}: not trained; call fit() or load()")

    def _index_more(self) -> None:
        """Document n-grams (n ≤ max_len) as a docs x n-gram count matrix, and the phrase table
        re-indexed so that its rows are those n-gram columns."""
        assert self.src_keys is not None and self.tgt_keys is not None and self.phrase_table is not None
        st = self._state
        tokens, offsets = st["tokens"], st["offsets"]
        rows, keys = [], []
        for n in range(1, self.p.max_len + 1):
            r, k = ngram_keys(tokens, offsets, n)
            rows.append(r)
            keys.append(k)
        row, key = np.concatenate(rows), np.concatenate(keys)
        gkeys, col = np.unique(key, return_inverse=True)
        n_docs = len(offsets) - 1
        G = sp.csr_matrix((np.ones(len(key)), (row, col)), shape=(n_docs, len(gkeys)))
        G.sum_duplicates()
        n_grams = np.asarray(G.sum(axis=1)).ravel()
        P = (sp.diags(1.0 / np.maximum(n_grams, 1.0)) @ G).tocsr()  # P_ML(w̃|D)
        # Table rows -> G columns (title phrases that occur in the collection).
        i = np.minimum(np.searchsorted(gkeys, self.src_keys), max(len(gkeys) - 1, 0))
        present = (gkeys[i] == self.src_keys) if len(gkeys) else np.zeros(len(self.src_keys), bool)
        pt = self.phrase_table.tocoo()
        keep = present[pt.row]
        TG = sp.csr_matrix(
            (pt.data[keep], (i[pt.row[keep]], pt.col[keep])), shape=(len(gkeys), len(self.tgt_keys))
        ).tocsc()
        st.update({"gkeys": gkeys, "p_g": P, "TG": TG})

    def _phrase_channel(self, qk: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For query-phrase keys (0 = has an unknown word): P_ML(q̃|D) and Σ_w̃ P(q̃|w̃)·P_ML(w̃|D)."""
        st = self._state
        assert self.tgt_keys is not None
        gkeys = st["gkeys"]
        ml = np.zeros((len(at), len(qk)))
        tr = np.zeros((len(at), len(qk)))
        if len(gkeys) and len(at):
            R = st["p_g"][at]
            gi = np.minimum(np.searchsorted(gkeys, qk), len(gkeys) - 1)
            in_c = (gkeys[gi] == qk) & (qk > 0)
            if in_c.any():
                ml[:, in_c] = R[:, gi[in_c]].toarray()
            if len(self.tgt_keys):
                ti = np.minimum(np.searchsorted(self.tgt_keys, qk), len(self.tgt_keys) - 1)
                in_t = (self.tgt_keys[ti] == qk) & (qk > 0)
                if in_t.any():
                    tr[:, in_t] = (R @ st["TG"][:, ti[in_t]]).toarray()
        return ml, tr

    def _prepare(self, qs: list[np.ndarray], ats: list[np.ndarray]) -> dict[str, Any]:
        """Adds, per query span [i, j) of 2..max_len words (padded like the word arrays), the
        phrase channel's P_ML(q̃|D) and Σ_w̃ P(q̃|w̃)·P_ML(w̃|D); spans are the same for all rows."""
        prep = super()._prepare(qs, ats)
        n, L = prep["n"], prep["L"]
        spans = [(i, j) for j in range(1, L + 1) for i in range(max(0, j - self.p.max_len), j)]
        SML, STR = np.zeros((n, len(spans))), np.zeros((n, len(spans)))
        row = 0
        for q, at in zip(qs, ats):
            own = [(s, i, j) for s, (i, j) in enumerate(spans) if j <= len(q)]
            if own and len(at):
                qk = np.array([phrase_key(q[i:j]) if (q[i:j] >= 0).all() else 0 for _, i, j in own], dtype=np.int64)
                ml, tr = self._phrase_channel(qk, at)
                cols = [s for s, _, _ in own]
                SML[row : row + len(at), cols], STR[row : row + len(at), cols] = ml, tr
            row += len(at)
        prep.update(spans=spans, sml=SML, str=STR)
        return prep

    def _score_batch(self, prep: dict[str, Any]) -> np.ndarray:
        """Best query segmentation per row by dynamic programming over positions (β = 0 uses
        single words only: every segmentation then scores the WTM's product)."""
        a, mu, beta = self.p.alpha, self.p.mu, self.p.beta
        n, L = prep["n"], prep["L"]
        word, pc = self._word_matrix(prep), prep["pc"]
        best = np.full((n, L + 1), -np.inf)
        best[:, 0] = 0.0
        for s, (i, j) in enumerate(prep["spans"]):
            if beta == 0 and j - i > 1:
                continue
            p_word = np.prod(word[:, i:j], axis=1)
            p_phrase = a * np.prod(pc[:, i:j], axis=1) + (1.0 - a) * (
                mu * prep["sml"][:, s] + (1.0 - mu) * prep["str"][:, s]
            )
            best[:, j] = np.maximum(best[:, j], best[:, i] + _log((1.0 - beta) * p_word + beta * p_phrase))
        return best[np.arange(n), prep["qlen"]]

    def _arrays(self) -> dict[str, np.ndarray]:
        assert self.phrase_table is not None and self.src_keys is not None and self.tgt_keys is not None
        t = self.phrase_table
        return {
            **super()._arrays(),
            "src_keys": self.src_keys,
            "tgt_keys": self.tgt_keys,
            "phrase_data": t.data,
            "phrase_indices": t.indices,
            "phrase_indptr": t.indptr,
        }

    def _restore(self, z: Any, meta: dict[str, Any]) -> None:
        super()._restore(z, meta)
        self.src_keys, self.tgt_keys = z["src_keys"], z["tgt_keys"]
        self.phrase_table = sp.csr_matrix(
            (z["phrase_data"], z["phrase_indices"], z["phrase_indptr"]), shape=(len(self.src_keys), len(self.tgt_keys))
        )

    def phrase_translations(self, phrase: str, k: int = 10) -> list[tuple[str, float]]:
        """The ``k`` most likely query phrases for a title phrase (an explanation aid)."""
        self._require_trained()
        assert self.vocab is not None and self.src_keys is not None and self.phrase_table is not None
        ids = self.vocab.encode(self.analyzer(phrase))
        if not ids or len(ids) != len(self.analyzer(phrase)):
            return []
        key = phrase_key(ids)
        i = int(np.searchsorted(self.src_keys, key))
        if i >= len(self.src_keys) or self.src_keys[i] != key:
            return []
        row = self.phrase_table.getrow(i)
        order = np.argsort(-row.data, kind="stable")[:k]
        assert self.tgt_keys is not None
        return [
            (" ".join(self.vocab.terms[t] for t in key_terms(int(self.tgt_keys[row.indices[j]]))), float(row.data[j]))
            for j in order
        ]
