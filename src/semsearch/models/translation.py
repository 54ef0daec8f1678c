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

Everything is vectorised over sparse matrices: EM works on the flat list of (query word,
title word) links of all pairs at once, and ranking multiplies the candidates' n-gram
distributions with the columns of the translation table that the query needs."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..progress import track
from ..text import Analyzer, Vocabulary, count_matrix
from .base import Model, ModelDirError, best_k, id_ranks, read_config, write_config
from .termdep import PositionalIndex

_NPZ = "translation.npz"
_JSON = "translation.json"
TINY = 1e-300
"""Floor for probabilities before log: a query word no channel can generate scores log(1e-300)."""
KEY_BASE = 1 << 20
"""n-gram keys: ((t1+1)·B + (t2+1))·B + (t3+1); vocabularies must stay below B − 1 terms."""


# ------------------------------------------------------------------------------------------------
# IBM Model 1
# ------------------------------------------------------------------------------------------------
@dataclass
class IBM1Result:
    """P(target | source) as CSR (source vocabulary x target vocabulary), P(target | NULL), log."""

    table: sp.csr_matrix
    null: np.ndarray
    log: dict[str, Any] = field(default_factory=dict)


def ibm1(
    source: sp.csr_matrix, target: sp.csr_matrix, *, iterations: int = 10, tol: float = 1e-4, null: bool = True,
    progress: bool = False, name: str = "IBM-1",
) -> IBM1Result:
    """IBM Model 1 by EM (Brown et al. 1993, §4) on aligned rows of count matrices: row p of
    ``source`` (pairs x V) generates row p of ``target`` (pairs x V), each target token choosing
    a source token (or NULL) uniformly and translating it with t(target|source).

    Each EM iteration is one pass over the flat array of links (target type, source type) of all
    pairs: posteriors t·c_w / Σ t·c_w, expected counts by ``bincount``, then t renormalised per
    source word. The log-likelihood Σ c_q·log(Σ_w c_w·t(q|w) / (|D| + 1)) of the parameters
    before each update is recorded; EM cannot decrease it. EM stops after ``iterations``, or
    when the relative improvement falls below ``tol`` (said in ``log["stopped"]``). Target
    tokens of a pair with an empty source and no NULL cannot be generated and are skipped."""
    if source.shape != target.shape:
        raise ValueError(f"source {source.shape} and target {target.shape} count matrices differ")
    n_pairs, V = source.shape
    source, target = source.tocsr(), target.tocsr()
    nq = np.diff(target.indptr)
    nd = np.diff(source.indptr)
    n_links_per_pair = nd + (1 if null else 0)
    e_pair = np.repeat(np.arange(n_pairs), nq)  # one entry per (pair, target type)
    e_term = target.indices.astype(np.int64)
    e_cnt = target.data.astype(np.float64)
    L = n_links_per_pair[e_pair]
    keep = L > 0
    e_pair, e_term, e_cnt, L = e_pair[keep], e_term[keep], e_cnt[keep], L[keep]
    skipped = float(target.data.sum() - e_cnt.sum())
    E = len(e_pair)
    link_e = np.repeat(np.arange(E), L)
    within = np.arange(len(link_e)) - np.repeat(np.cumsum(L) - L, L)
    is_null = within >= nd[e_pair[link_e]]
    src_pos = np.minimum(source.indptr[e_pair[link_e]] + within, max(len(source.indices) - 1, 0))
    w = np.where(is_null, V, source.indices[src_pos] if len(source.indices) else 0).astype(np.int64)
    cw = np.where(is_null, 1.0, source.data[src_pos] if len(source.data) else 0.0).astype(np.float64)
    keys = w * V + e_term[link_e]
    ukeys, pid = np.unique(keys, return_inverse=True)
    p_w, p_q = ukeys // V, ukeys % V
    # Uniform start: every target type seen with a source word is equally likely.
    fan = np.bincount(p_w, minlength=V + 1).astype(np.float64)
    t = 1.0 / fan[p_w]
    denom_len = source.sum(axis=1).A1[e_pair] + (1.0 if null else 0.0)
    tokens = float(e_cnt.sum())
    history: list[dict[str, float]] = []
    stopped = f"reached {iterations} iterations"
    chunks = _chunks(L, 8)
    prev_ll = -math.inf
    for it in range(1, iterations + 1):
        start = time.perf_counter()
        counts = np.zeros(len(ukeys))
        ll = 0.0
        last = history[-1] if history else None
        desc = (f"{name} EM {it}/{iterations}"
                + (f" · LL/token {last['ll_per_token']:.4f} · {last['tokens_per_s']:,.0f} tokens/s" if last else ""))
        steps = track(chunks, desc, total=len(chunks)) if progress else chunks
        for (e0, e1), (l0, l1) in steps:
            num = t[pid[l0:l1]] * cw[l0:l1]
            den = np.bincount(link_e[l0:l1] - e0, weights=num, minlength=e1 - e0)
            safe = np.maximum(den, TINY)
            ll += float(np.sum(e_cnt[e0:e1] * (np.log(safe) - np.log(denom_len[e0:e1]))))
            post = num / safe[link_e[l0:l1] - e0]
            counts += np.bincount(pid[l0:l1], weights=post * e_cnt[link_e[l0:l1]], minlength=len(ukeys))
        total = np.bincount(p_w, weights=counts, minlength=V + 1)
        t = counts / np.maximum(total[p_w], TINY)
        secs = time.perf_counter() - start
        history.append({"iteration": it, "log_likelihood": ll, "ll_per_token": ll / max(tokens, 1.0),
                        "seconds": secs, "tokens_per_s": tokens / max(secs, 1e-9)})
        if it > 1:
            gain = (ll - prev_ll) / max(abs(prev_ll), 1e-12)
            if gain < tol:
                stopped = (f"stopped after iteration {it}: log-likelihood improved by {gain:.2e} "
                           f"(relative) < tol {tol:g}" if gain >= 0 else
                           f"stopped after iteration {it}: log-likelihood decreased by {-gain:.2e} (numerical noise)")
                break
        prev_ll = ll
    # The last recorded LL is of the parameters before the final update; t is the updated table.
    is_src = p_w < V
    table = sp.csr_matrix((t[is_src], (p_w[is_src], p_q[is_src])), shape=(V, V))
    table.eliminate_zeros()
    nullp = np.zeros(V)
    nullp[p_q[~is_src]] = t[~is_src]
    log = {"iterations": history, "stopped": stopped, "pairs": int(n_pairs), "links": int(len(keys)),
           "parameters": int(len(ukeys)), "target_tokens": tokens, "skipped_target_tokens": skipped, "null": null}
    return IBM1Result(table, nullp, log)


def _chunks(L: np.ndarray, n: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Split entries (with ``L[e]`` consecutive links each) into ~n ranges: ((e0, e1), (l0, l1))."""
    E = len(L)
    ends = np.concatenate([[0], np.cumsum(L)])
    cuts = np.unique(np.linspace(0, E, n + 1).astype(np.int64))
    if len(cuts) < 2:
        return []
    return [((int(a), int(b)), (int(ends[a]), int(ends[b]))) for a, b in zip(cuts[:-1], cuts[1:])]


# ------------------------------------------------------------------------------------------------
# n-gram keys and the phrase pipeline
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


def phrase_key(ids: Sequence[int]) -> int:
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


def _grow_diag_final(nq: int, nd: int, qd: set[tuple[int, int]], dq: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Symmetrise two directional alignments (Koehn et al. 2003): start from the intersection,
    add union points next to the alignment whose query or title word is still unaligned, then
    any union point with an unaligned word."""
    union = qd | dq
    A = qd & dq
    aq = {i for i, _ in A}
    ad = {j for _, j in A}
    grown = True
    while grown:
        grown = False
        for i, j in sorted(A):
            for di in (-1, 0, 1):
                for dj in (-1, 0, 1):
                    p = (i + di, j + dj)
                    if (di or dj) and p in union and p not in A and (p[0] not in aq or p[1] not in ad):
                        A.add(p)
                        aq.add(p[0])
                        ad.add(p[1])
                        grown = True
    for i, j in sorted(union):
        if i not in aq or j not in ad:
            A.add((i, j))
            aq.add(i)
            ad.add(j)
    return A


def extract_phrases(q: Sequence[int], d: Sequence[int], A: set[tuple[int, int]], max_len: int) -> list[tuple[int, int]]:
    """Bi-phrases (query phrase key, title phrase key) consistent with alignment A (Och & Ney
    2004): the spans share at least one link and no link leaves them; title spans extend over
    unaligned title words. Both sides at most ``max_len`` words."""
    out = []
    aligned_d = {j for _, j in A}
    for i1 in range(len(q)):
        for i2 in range(i1, min(len(q), i1 + max_len)):
            js = [j for i, j in A if i1 <= i <= i2]
            if not js:
                continue
            j1, j2 = min(js), max(js)
            if j2 - j1 + 1 > max_len or any(j1 <= j <= j2 and not i1 <= i <= i2 for i, j in A):
                continue
            qk = phrase_key(q[i1 : i2 + 1])
            s = j1
            while s >= 0 and (s == j1 or s not in aligned_d):
                e = j2
                while e < len(d) and (e == j2 or e not in aligned_d) and e - s + 1 <= max_len:
                    out.append((qk, phrase_key(d[s : e + 1])))
                    e += 1
                s -= 1
    return out


# ------------------------------------------------------------------------------------------------
# models
# ------------------------------------------------------------------------------------------------
class _TranslationModel(Model):
    """Shared machinery: the training vocabulary and word table, indexing a collection as n-gram
    distributions over an extended vocabulary, caching per-query channel probabilities so that
    ``with_params`` (α, μ, β) re-scores without recomputation, save/load."""

    defaults: dict[str, float] = {"alpha": 0.2, "mu": 0.0}

    def __init__(self, analyzer: str | Analyzer = "paper", *, iterations: int = 10, tol: float = 1e-4,
                 null: bool = True, min_prob: float = 1e-4, **params: Any):
        self.analyzer = Analyzer.named(analyzer) if isinstance(analyzer, str) else analyzer
        self.iterations, self.tol, self.null, self.min_prob = int(iterations), float(tol), bool(null), float(min_prob)
        unknown = set(params) - set(self.defaults)
        if unknown:
            raise ValueError(f"{self.name}: unknown parameters {sorted(unknown)}; known: {sorted(self.defaults)}")
        self._params = {**self.defaults, **{k: float(v) for k, v in params.items()}}
        p = self._params
        if not 0 <= p["alpha"] <= 1 or not 0 <= p["mu"] <= 1 or not 0 <= p.get("beta", 0) <= 1:
            raise ValueError(f"{self.name}: alpha, mu and beta must be in [0, 1], got {p}")
        self.vocab: Vocabulary | None = None
        self.word_table: sp.csr_matrix | None = None  # P(q|w): source (title) word x target (query) word
        self._fit_null = np.zeros(0)
        self._state: dict[str, Any] = {}  # index-time arrays, shared by with_params clones
        self._cache: dict[Any, Any] = {}

    def _settings(self) -> dict[str, Any]:
        return {"iterations": self.iterations, "tol": self.tol, "null": self.null, "min_prob": self.min_prob}

    def params(self) -> dict[str, Any]:
        return dict(self._params)

    def with_params(self, **params: Any) -> "_TranslationModel":
        clone = type(self)(self.analyzer, **self._settings(), **{**self._params, **params})
        clone._copy_trained(self)
        clone._state, clone._cache = self._state, self._cache
        return clone

    def _copy_trained(self, other: "_TranslationModel") -> None:
        self.vocab, self.word_table = other.vocab, other.word_table

    # -- training ---------------------------------------------------------------------------------
    def _pairs(self, data: Any) -> tuple[list[list[str]], list[list[str]]]:
        queries, titles = data.pair_texts()
        return [self.analyzer(q) for q in queries], [self.analyzer(t) for t in titles]

    def _train_words(self, q_tok: list[list[str]], d_tok: list[list[str]], progress: bool) -> dict[str, Any]:
        self.vocab = Vocabulary.build(q_tok + d_tok)
        if len(self.vocab) >= KEY_BASE - 1:
            raise ValueError(f"vocabulary of {len(self.vocab)} terms is too large for n-gram keys")
        V = len(self.vocab)
        Q = count_matrix([self.vocab.encode(t) for t in q_tok], V, dtype=np.float64)
        D = count_matrix([self.vocab.encode(t) for t in d_tok], V, dtype=np.float64)
        res = ibm1(D, Q, iterations=self.iterations, tol=self.tol, null=self.null, progress=progress, name="IBM-1 P(q|w)")
        self.word_table = _prune(res.table, self.min_prob)
        self._fit_null = res.null  # P(q|NULL), for Viterbi alignments while training the PTM
        return {"vocabulary": V, "word_table_entries": int(self.word_table.nnz), "em": res.log}

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
            "doc_ids": doc_ids, "position": {d: i for i, d in enumerate(doc_ids)}, "ext": ext,
            "tokens": np.asarray(tokens, dtype=np.int64), "offsets": np.asarray(offsets, dtype=np.int64),
            "p_w": p_w.tocsr(), "T": T, "p_c": np.maximum(cf, 0.5) / max(cf.sum(), 1.0), "total": max(float(cf.sum()), 1.0),
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

    def _positions(self, docs: Sequence[str]) -> np.ndarray:
        pos = self._state["position"]
        try:
            return np.fromiter((pos[d] for d in docs), dtype=np.int64, count=len(docs))
        except KeyError as e:
            raise ValueError(f"candidate document {e.args[0]!r} is not in the indexed collection") from None

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
        if len(queries) != len(candidates):
            raise ValueError(f"{len(queries)} queries but {len(candidates)} candidate lists")
        self.doc_ids  # noqa: B018 - raises when nothing is indexed
        cands = [list(c) for c in candidates]
        key = ("batch", tuple(queries), tuple(map(tuple, cands)))
        prep = self._cache.get(key)
        if prep is None:
            prep = self._prepare([self._encode(q) for q in queries], [self._positions(c) for c in cands])
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
        a, mu = self._params["alpha"], self._params["mu"]
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
        write_config(d, {"model": self.name, "params": self._params, "analyzer": self.analyzer.config(),
                         "settings": self._settings()})
        np.savez_compressed(d / _NPZ, **self._arrays())
        meta: dict[str, Any] = {"terms": self.vocab.terms}
        if self._state:
            meta["doc_ids"] = self._state["doc_ids"]
            meta["collection_terms"] = self._state["ext"].terms[len(self.vocab):]
            np.savez_compressed(d / "collection.npz", tokens=self._state["tokens"], offsets=self._state["offsets"])
        (d / _JSON).write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "_TranslationModel":
        d = Path(path)
        cfg = read_config(d, expect=cls.name)
        model = cls(Analyzer.from_config(cfg.get("analyzer", {})), **cfg.get("settings", {}), **cfg.get("params", {}))
        try:
            meta = json.loads((d / _JSON).read_text(encoding="utf-8"))
            with np.load(d / _NPZ, allow_pickle=False) as z:
                model._restore(z, meta)
            if "doc_ids" in meta:
                with np.load(d / "collection.npz", allow_pickle=False) as z:
                    tokens, offsets = z["tokens"], z["offsets"]
                model._build_state(meta["doc_ids"], meta["collection_terms"], tokens, offsets)
        except (OSError, KeyError, ValueError, TypeError) as e:
            raise ModelDirError(f"{d}: corrupt or missing translation model ({e})") from None
        return model


def _prune(table: sp.csr_matrix, min_prob: float) -> sp.csr_matrix:
    """Drop translations below ``min_prob`` and renormalise rows (keeps the table small)."""
    t = table.tocsr(copy=True)
    t.data[t.data < min_prob] = 0.0
    t.eliminate_zeros()
    sums = np.asarray(t.sum(axis=1)).ravel()
    return (sp.diags(1.0 / np.where(sums > 0, sums, 1.0)) @ t).tocsr()


def _log(p: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(p, TINY))


class WordTranslationModel(_TranslationModel):
    """IBM-1 word translation model (module docstring); ``fit`` trains P(q|w) on the positive
    (query, title) pairs; ``alpha`` (background weight) and ``mu`` (literal-match / self-translation
    weight) apply via ``with_params``. Extra settings: ``iterations`` and ``tol`` of EM, ``null``
    (the NULL title word), ``min_prob`` (translations below it are pruned after training)."""
    name = "wtm"

    def fit(self, data: Any, dev: Any = None, progress: bool = False) -> dict[str, Any]:
        """Train on ``data.pair_texts()``; ``dev`` is unused (EM has no early stopping)."""
        start = time.perf_counter()
        q_tok, d_tok = self._pairs(data)
        log = self._train_words(q_tok, d_tok, progress)
        log["seconds"] = time.perf_counter() - start
        return log

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
    """Phrase translation model, phrases of up to ``max_len`` words (module docstring). ``fit``
    trains IBM-1 both ways, symmetrises Viterbi alignments, extracts and counts bi-phrases;
    ``alpha``, ``mu``, ``beta`` (phrase vs word channel) apply via ``with_params``."""
    name = "ptm"

    defaults = {"alpha": 0.2, "mu": 0.0, "beta": 0.5}

    def __init__(self, analyzer: str | Analyzer = "paper", *, max_len: int = 3, **kwargs: Any):
        super().__init__(analyzer, **kwargs)
        if not 1 <= int(max_len) <= 3:
            raise ValueError(f"ptm: max_len must be 1, 2 or 3, got {max_len}")
        self.max_len = int(max_len)
        self.src_keys: np.ndarray | None = None  # sorted title-phrase keys (table rows)
        self.tgt_keys: np.ndarray | None = None  # sorted query-phrase keys (table columns)
        self.phrase_table: sp.csr_matrix | None = None

    def _settings(self) -> dict[str, Any]:
        return {**super()._settings(), "max_len": self.max_len}

    def _copy_trained(self, other: "_TranslationModel") -> None:
        super()._copy_trained(other)
        assert isinstance(other, PhraseTranslationModel)
        self.src_keys, self.tgt_keys, self.phrase_table = other.src_keys, other.tgt_keys, other.phrase_table

    def fit(self, data: Any, dev: Any = None, progress: bool = False) -> dict[str, Any]:
        """Train on ``data.pair_texts()``; ``dev`` is unused."""
        start = time.perf_counter()
        q_tok, d_tok = self._pairs(data)
        log = self._train_words(q_tok, d_tok, progress)
        assert self.vocab is not None and self.word_table is not None
        V = len(self.vocab)
        q_ids = [self.vocab.encode(t) for t in q_tok]
        d_ids = [self.vocab.encode(t) for t in d_tok]
        Q = count_matrix(q_ids, V, dtype=np.float64)
        D = count_matrix(d_ids, V, dtype=np.float64)
        rev = ibm1(Q, D, iterations=self.iterations, tol=self.tol, null=self.null, progress=progress, name="IBM-1 P(w|q)")
        log["em_reverse"] = rev.log
        t0 = time.perf_counter()
        # Viterbi links both ways: each query word -> its best title word (P(q|w)), and each
        # title word -> its best query word (P(w|q)); NULL wins when it is more likely.
        qd = _viterbi(q_ids, d_ids, self.word_table, self._fit_null)
        dq = _viterbi(d_ids, q_ids, rev.table, rev.null)
        counts: dict[tuple[int, int], int] = {}
        pairs_iter = range(len(q_ids))
        for p in (track(pairs_iter, "extracting bi-phrases", total=len(q_ids)) if progress else pairs_iter):
            A = _grow_diag_final(len(q_ids[p]), len(d_ids[p]), qd[p], {(i, j) for j, i in dq[p]})
            for kq in extract_phrases(q_ids[p], d_ids[p], A, self.max_len):
                counts[kq] = counts.get(kq, 0) + 1
        if counts:
            keys = np.array(list(counts.keys()), dtype=np.int64)
            vals = np.array(list(counts.values()), dtype=np.float64)
        else:
            keys, vals = np.zeros((0, 2), np.int64), np.zeros(0)
        self.tgt_keys, tgt = np.unique(keys[:, 0], return_inverse=True)
        self.src_keys, src = np.unique(keys[:, 1], return_inverse=True)
        table = sp.csr_matrix((vals, (src, tgt)), shape=(len(self.src_keys), len(self.tgt_keys)))
        sums = np.asarray(table.sum(axis=1)).ravel()
        self.phrase_table = (sp.diags(1.0 / np.maximum(sums, TINY)) @ table).tocsr()
        log["phrases"] = {"bi_phrase_types": int(len(vals)), "bi_phrase_tokens": float(vals.sum()),
                          "title_phrases": int(len(self.src_keys)), "query_phrases": int(len(self.tgt_keys)),
                          "max_len": self.max_len, "extract_seconds": time.perf_counter() - t0}
        log["seconds"] = time.perf_counter() - start
        return log

    def _require_trained(self) -> None:
        super()._require_trained()
        if self.phrase_table is None:
            raise RuntimeError(f"{self.name}: not trained; call fit() or load()")

    def _index_more(self) -> None:
        """Document n-grams (n ≤ max_len) as a docs x n-gram count matrix, and the phrase table
        re-indexed so that its rows are those n-gram columns."""
        assert self.src_keys is not None and self.phrase_table is not None
        st = self._state
        tokens, offsets = st["tokens"], st["offsets"]
        rows, keys = [], []
        for n in range(1, self.max_len + 1):
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
        TG = sp.csr_matrix((pt.data[keep], (i[pt.row[keep]], pt.col[keep])), shape=(len(gkeys), len(self.tgt_keys))).tocsc()
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
        spans = [(i, j) for j in range(1, L + 1) for i in range(max(0, j - self.max_len), j)]
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
        a, mu, beta = self._params["alpha"], self._params["mu"], self._params["beta"]
        n, L = prep["n"], prep["L"]
        word, pc = self._word_matrix(prep), prep["pc"]
        best = np.full((n, L + 1), -np.inf)
        best[:, 0] = 0.0
        for s, (i, j) in enumerate(prep["spans"]):
            if beta == 0 and j - i > 1:
                continue
            p_word = np.prod(word[:, i:j], axis=1)
            p_phrase = a * np.prod(pc[:, i:j], axis=1) + (1.0 - a) * (mu * prep["sml"][:, s] + (1.0 - mu) * prep["str"][:, s])
            best[:, j] = np.maximum(best[:, j], best[:, i] + _log((1.0 - beta) * p_word + beta * p_phrase))
        return best[np.arange(n), prep["qlen"]]

    def _arrays(self) -> dict[str, np.ndarray]:
        assert self.phrase_table is not None and self.src_keys is not None and self.tgt_keys is not None
        t = self.phrase_table
        return {**super()._arrays(), "src_keys": self.src_keys, "tgt_keys": self.tgt_keys,
                "phrase_data": t.data, "phrase_indices": t.indices, "phrase_indptr": t.indptr}

    def _restore(self, z: Any, meta: dict[str, Any]) -> None:
        super()._restore(z, meta)
        self.src_keys, self.tgt_keys = z["src_keys"], z["tgt_keys"]
        self.phrase_table = sp.csr_matrix((z["phrase_data"], z["phrase_indices"], z["phrase_indptr"]),
                                          shape=(len(self.src_keys), len(self.tgt_keys)))

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
        return [(" ".join(self.vocab.terms[t] for t in key_terms(int(self.tgt_keys[row.indices[j]]))), float(row.data[j]))
                for j in order]


def _viterbi(tgt: list[list[int]], src: list[list[int]], table: sp.csr_matrix, null: np.ndarray) -> list[set[tuple[int, int]]]:
    """Per pair, the IBM-1 Viterbi links {(target position, source position)}: every target
    token links to its most probable source token (first on ties), unless NULL is more probable.
    Vectorised over all (target position, source position) pairs of all pairs at once."""
    nt = np.fromiter((len(x) for x in tgt), dtype=np.int64, count=len(tgt))
    ns = np.fromiter((len(x) for x in src), dtype=np.int64, count=len(src))
    out: list[set[tuple[int, int]]] = [set() for _ in tgt]
    if not len(tgt):
        return out
    t_flat = np.fromiter((i for x in tgt for i in x), dtype=np.int64, count=int(nt.sum()))
    s_flat = np.fromiter((i for x in src for i in x), dtype=np.int64, count=int(ns.sum()))
    t_off = np.concatenate([[0], np.cumsum(nt)])
    s_off = np.concatenate([[0], np.cumsum(ns)])
    pair_of_t = np.repeat(np.arange(len(tgt)), nt)
    reps = ns[pair_of_t]  # each target token meets every source token of its pair
    g = np.repeat(np.arange(len(t_flat)), reps)  # group = target token
    within = np.arange(len(g)) - np.repeat(np.cumsum(reps) - reps, reps)
    s_pos = s_off[pair_of_t[g]] + within
    V = table.shape[1]
    coo = table.tocoo()
    tkeys = coo.row.astype(np.int64) * V + coo.col
    order = np.argsort(tkeys)
    tkeys, tvals = tkeys[order], coo.data[order]
    look = s_flat[s_pos] * V + t_flat[g]
    i = np.minimum(np.searchsorted(tkeys, look), max(len(tkeys) - 1, 0))
    val = np.where((tkeys[i] == look) if len(tkeys) else False, tvals[i] if len(tvals) else 0.0, 0.0)
    best = np.lexsort((within, -val, g))  # per group: highest value, then first position
    first = best[np.concatenate([[True], g[best][1:] != g[best][:-1]])] if len(best) else best
    for k in first:
        tok = g[k]
        if val[k] > 0 and val[k] >= null[t_flat[tok]]:
            p = pair_of_t[tok]
            out[p].add((int(tok - t_off[p]), int(within[k])))
    return out
