"""Lexical baselines over a sparse inverted index: BM25, unigram language model (query
likelihood with Dirichlet or Jelinek-Mercer smoothing), TF-IDF cosine (VSM); plus a seeded
random order as the floor every table should show.

Scoring is "eager" (as bm25s): at index time every (document, term) pair gets its model weight,
stored term-major (an inverted index as a CSR matrix); retrieval walks the query terms' postings
in a compiled kernel (``postings.PostingsTopK``: the sums of ``Q @ W`` and a bounded top-k heap),
re-ranking given candidates multiplies their rows of the document-major copy."""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import scipy.sparse as sp

from ..params import ParamError, Params, param
from ..text import Analyzer, Vocabulary, count_matrix, detect_analyzer
from .base import (
    CONFIG,
    SAVED_DATA_ERRORS,
    Model,
    ModelDirError,
    positions,
    read_config,
    same_length,
    seal,
    write_config,
)
from .doc_ids import DocIds, IdPositions
from .postings import PostingsTopK, Prune, rows_dot

_INDEX_NPZ = "lexical.npz"
_INDEX_JSON = "lexical.json"
_STATS_NPZ = "stats.npz"  # a shard's collection-wide statistics (LexicalModel.subset)


@dataclass(frozen=True)
class CollectionStats:
    """The background statistics lexical weights use: number of documents, document and
    collection frequency per term, mean document length. Usually the indexed collection's own;
    see ``LexicalIndex.stats`` for taking them from a subset."""

    n_docs: int
    df: np.ndarray
    cf: np.ndarray
    avgdl: float


def analyzed(
    doc_ids: Sequence[str], texts: Sequence[str], analyzer: Analyzer | None = None
) -> tuple[Analyzer, Vocabulary, list[list[int]]]:
    """A collection analysed for an index: (analyzer, the collection's vocabulary, term ids per
    text); ValueError for misaligned or duplicate doc ids."""
    same_length(doc_ids, texts, "doc ids", "texts")
    if len(set(doc_ids)) != len(doc_ids):
        raise ValueError("duplicate document ids")
    analyzer = analyzer or Analyzer()
    tokens = [analyzer(t) for t in texts]
    vocab = Vocabulary.build(tokens)
    return analyzer, vocab, [vocab.encode(t) for t in tokens]


class _NewIds(dict):
    """term -> provisional id; a term not yet seen gets the next id."""

    def __missing__(self, term: str) -> int:
        i = self[term] = len(self)
        return i


def analyzed_counts(texts: Iterable[str], analyzer: Analyzer) -> tuple[Vocabulary, sp.csr_matrix]:
    """The vocabulary (``Vocabulary.build``'s: most frequent first, ties alphabetical) and the
    count matrix (``count_matrix``'s: CSR, documents x terms, float32, sorted and summed) of
    ``texts``, in one streaming pass: each text's terms become provisional ids as it is analysed
    (4 bytes per token, not a list of str per text), renumbered once the frequencies are known."""
    term_id = _NewIds()
    flat = array("i")
    lengths = array("q")
    for text in texts:
        terms = analyzer(text)
        flat.extend(map(term_id.__getitem__, terms))  # (C-level lookups; new terms get the next id)
        lengths.append(len(terms))
    provisional = np.frombuffer(flat, dtype=np.int32) if len(flat) else np.zeros(0, dtype=np.int32)
    cf = np.bincount(provisional, minlength=len(term_id))
    terms = list(term_id)
    del term_id
    order = sorted(range(len(terms)), key=lambda i: (-cf[i], terms[i]))
    renumber = np.empty(len(terms), dtype=np.int32)
    renumber[order] = np.arange(len(terms), dtype=np.int32)
    indices = renumber[provisional]
    del provisional, flat
    indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.frombuffer(lengths, dtype=np.int64) if len(lengths) else np.zeros(0, dtype=np.int64), out=indptr[1:])
    if indptr[-1] < 2**31:
        indptr = indptr.astype(np.int32)
    counts = sp.csr_matrix((np.ones(len(indices), dtype=np.float32), indices, indptr), shape=(len(lengths), len(terms)))
    counts.sum_duplicates()  # (sorts each row's term ids, then sums repeats)
    return Vocabulary([terms[i] for i in order]), counts


class LexicalIndex:
    """Analysed term counts of a collection (CSR, documents x terms), its doc ids (``DocIds``,
    compact) and derived statistics."""

    def __init__(self, analyzer: Analyzer, vocab: Vocabulary, doc_ids: Sequence[str], counts: sp.csr_matrix):
        if counts.shape != (len(doc_ids), len(vocab)):
            raise ValueError(f"count matrix {counts.shape} does not match {len(doc_ids)} docs x {len(vocab)} terms")
        self.analyzer = analyzer
        self.vocab = vocab
        self.doc_ids = doc_ids if isinstance(doc_ids, DocIds) else DocIds(doc_ids)
        self.counts = counts

    @classmethod
    def build(cls, doc_ids: Sequence[str], texts: Sequence[str], analyzer: Analyzer | None = None) -> LexicalIndex:
        """The index of ``texts`` (``doc_ids[i]`` is text ``i``'s); ValueError for misaligned or
        duplicate ids. Same vocabulary and counts as ``analyzed`` + ``count_matrix``, streamed."""
        same_length(doc_ids, texts, "doc ids", "texts")
        ids = doc_ids if isinstance(doc_ids, DocIds) else DocIds(doc_ids)
        if ids.first_duplicate() is not None:
            raise ValueError("duplicate document ids")
        analyzer = analyzer or Analyzer()
        vocab, counts = analyzed_counts(texts, analyzer)
        return cls(analyzer, vocab, ids, counts)

    def __len__(self) -> int:
        return len(self.doc_ids)

    @cached_property
    def doc_len(self) -> np.ndarray:
        return np.asarray(self.counts.sum(axis=1), dtype=np.float64).ravel()

    @cached_property
    def df(self) -> np.ndarray:
        return np.bincount(self.counts.indices, minlength=len(self.vocab)).astype(np.float64)

    @cached_property
    def cf(self) -> np.ndarray:
        return np.bincount(self.counts.indices, weights=self.counts.data, minlength=len(self.vocab))

    def stats(self, exclude: Sequence[int] | np.ndarray | None = None) -> CollectionStats:
        """Statistics of the collection, or of the collection without documents ``exclude``
        (positions). Excluding a query's own judged pool estimates unbiased background statistics
        when the corpus is itself a union of per-query pools (TREC DL's texts): see the lexical
        models' parameter ``stats = "exclude-query-pool"``."""
        if exclude is None or len(exclude) == 0:
            return CollectionStats(len(self), self.df, self.cf, float(self.doc_len.mean()) if len(self) else 0.0)
        keep = np.ones(len(self), dtype=bool)
        keep[np.asarray(exclude, dtype=np.int64)] = False
        sub = self.counts[keep]
        df = np.bincount(sub.indices, minlength=len(self.vocab)).astype(np.float64)
        cf = np.bincount(sub.indices, weights=sub.data, minlength=len(self.vocab))
        return CollectionStats(int(keep.sum()), df, cf, float(self.doc_len[keep].mean()) if keep.any() else 0.0)

    def nnz_rows(self, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Document index of every stored (document, term) count of documents ``lo`` to ``hi``
        (computed when asked: 4 bytes per count is too much to keep)."""
        hi = len(self) if hi is None else hi
        return np.repeat(np.arange(lo, hi, dtype=np.int32), np.diff(self.counts.indptr[lo : hi + 1]))

    @property
    def position(self) -> IdPositions:
        """doc id -> position (a mapping over ``doc_ids``; no dict is built)."""
        return self.doc_ids.position

    @cached_property
    def id_order(self) -> np.ndarray:
        """Rank of each document's id in sorted order: the tie-breaker (doc id ascending)."""
        return self.doc_ids.ranks

    def query_counts(self, queries: Sequence[str]) -> sp.csr_matrix:
        """Queries -> CSR (n x terms) counts; terms outside the collection are dropped."""
        return count_matrix([self.vocab.encode(self.analyzer(q)) for q in queries], len(self.vocab))

    def save(self, path: Path) -> None:
        np.savez_compressed(
            path / _INDEX_NPZ, indptr=self.counts.indptr, indices=self.counts.indices, data=self.counts.data
        )
        meta = {"analyzer": self.analyzer.config(), "terms": self.vocab.terms, "doc_ids": list(self.doc_ids)}
        (path / _INDEX_JSON).write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> LexicalIndex:
        try:
            meta = json.loads((path / _INDEX_JSON).read_text(encoding="utf-8"))
            with np.load(path / _INDEX_NPZ, allow_pickle=False) as z:
                shape = (len(meta["doc_ids"]), len(meta["terms"]))
                counts = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=shape)
            return cls(Analyzer.from_config(meta["analyzer"]), Vocabulary(meta["terms"]), meta["doc_ids"], counts)
        except SAVED_DATA_ERRORS as e:
            raise ModelDirError(f"{path}: corrupt or missing lexical index ({e})") from None


ANALYZER_NAMES = ("paper", "english", "cjk", "auto")
"""The analyzers an indexed model takes by name (``auto``: resolved when the collection is indexed)."""


@dataclass(frozen=True)
class AnalyzedParams(Params):
    """Parameters of every model over an analysed index: the analyzer, by name ('paper',
    'english', 'cjk', or 'auto': 'cjk' or 'paper' as ``text.detect_analyzer`` picks for the
    indexed collection) or as its saved config (``Analyzer.config()``)."""

    analyzer: str | dict = "paper"

    def check(self) -> None:
        if isinstance(self.analyzer, str) and self.analyzer not in ANALYZER_NAMES:
            names = ", ".join(map(repr, ANALYZER_NAMES))
            raise ParamError(f"{self._label('analyzer')} must be one of {names}, got {self.analyzer!r}")
        if isinstance(self.analyzer, dict):
            try:
                Analyzer.from_config(self.analyzer)
            except ValueError as e:
                raise ParamError(f"{self._label('analyzer')}: {e}") from None


class IndexedModel(Model):
    """Shared machinery of models that rank over an analysed index of the collection: typed
    parameters (``Params``), the analyzer, the index (built, shared between models, or loaded),
    and npz + JSON persistence. ``index_class`` builds, saves and loads it."""

    index_class: Any = None
    Params: ClassVar[type[AnalyzedParams]] = AnalyzedParams

    def __init__(self, analyzer: str | dict | Analyzer = "paper", **params: Any):
        if isinstance(analyzer, Analyzer):
            analyzer = analyzer.config()
        if isinstance(analyzer, dict):  # a saved config: by name where it has one
            named = ("paper", "english", "cjk")
            analyzer = next((n for n in named if Analyzer.named(n).config() == analyzer), analyzer)
        self.p = self.Params.from_mapping({"analyzer": analyzer, **params})  # errors name the kind
        a = self.p.analyzer
        # 'auto': the papers' analyzer until a collection is indexed (``index`` picks)
        if a == "auto":
            self.analyzer = Analyzer()
        else:
            self.analyzer = Analyzer.named(a) if isinstance(a, str) else Analyzer.from_config(a)
        self._index: Any = None

    def params(self) -> dict[str, Any]:
        return self.p.as_dict()

    def with_params(self, **params: Any) -> IndexedModel:
        clone = type(self)(**{**self.p.as_dict(), **params})
        if self._index is not None:
            clone.use_index(self._index)
        return clone

    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        """Analyse and index the collection; with analyzer 'auto' the analyzer is picked for it
        first (``detect_analyzer``: 'cjk' or 'paper'), and saved as the one picked."""
        if self.p.analyzer == "auto":
            self.analyzer = Analyzer.named(detect_analyzer(texts))
        self.use_index(self.index_class.build(doc_ids, texts, self.analyzer))

    def use_index(self, index: Any) -> None:
        """Rank over an already built index (shared between models with the same analyzer; a
        model with analyzer 'auto' takes the index's)."""
        if self.p.analyzer == "auto":
            self.analyzer = index.analyzer
        if index.analyzer != self.analyzer:
            raise ValueError(f"index analyzer {index.analyzer} differs from the model's {self.analyzer}")
        self._index = index

    @property
    def indexed(self) -> bool:
        return self._index is not None

    def _require_index(self) -> Any:
        if self._index is None:
            raise RuntimeError(f"{self.name}: no collection indexed; call index() first")
        return self._index

    @property
    def doc_ids(self) -> Sequence[str]:
        return self._require_index().doc_ids

    def save(self, path: str | Path) -> None:
        d = Path(path)
        params = {k: v for k, v in self.p.as_dict().items() if k != "analyzer"}
        write_config(d, {"model": self.name, "params": params, "analyzer": self.analyzer.config()})
        self._require_index().save(d)
        seal(d)

    @classmethod
    def load(cls, path: str | Path) -> IndexedModel:
        d = Path(path)
        cfg = read_config(d, expect=cls.name)
        # only names the parameters still have (older configs may carry others); the analyzer is saved apart
        params = {k: v for k, v in cfg.get("params", {}).items() if k in cls.Params.names() and k != "analyzer"}
        model = cls(cfg.get("analyzer", {}), **params)
        model.use_index(cls.index_class.load(d))
        return model


@dataclass(frozen=True)
class LexicalParams(AnalyzedParams):
    """``stats``: the background statistics terms are weighted with: the collection's own, or,
    per query, the collection without the documents pooled for that query ("exclude-query-pool":
    for corpora that are a union of per-query pools, e.g. TREC DL's texts; see ``use_pools``)."""

    stats: Literal["collection", "exclude-query-pool"] = "collection"


class LexicalModel(IndexedModel):
    """Shared machinery: subclasses give per-(doc, term) weights, query weights and an optional
    per-document addend (multiplied per query by ``_addend_scale``)."""

    index_class = LexicalIndex
    Params: ClassVar[type[LexicalParams]] = LexicalParams
    p: LexicalParams

    def __init__(self, analyzer: str | dict | Analyzer = "paper", **params: Any):
        super().__init__(analyzer, **params)
        self._stats: CollectionStats | None = None
        self._pools: Mapping[str, Collection[str]] | None = None

    def with_params(self, **params: Any) -> LexicalModel:
        clone: LexicalModel = super().with_params(**params)  # type: ignore[assignment]  # same class
        clone._stats, clone._pools = self._stats, self._pools
        clone.pruning = self.pruning
        return clone

    def with_stats(self, stats: CollectionStats | None) -> LexicalModel:
        """A copy that weights terms with other background statistics (None: the index's own)."""
        clone: LexicalModel = self.with_params()
        clone._stats = stats
        return clone

    @property
    def collection_stats(self) -> CollectionStats:
        """The background statistics terms are weighted with: ``with_stats``'s, else the index's."""
        return self._stats or self.lexical_index.stats()

    def subset(self, lo: int, hi: int) -> LexicalModel:
        """This model over its documents at positions ``lo`` to ``hi`` (a shard of the collection),
        weighting terms with the whole collection's statistics: the same vocabulary (term ids
        index the statistics' arrays), so each document scores exactly as in the whole index.
        The statistics are saved with the shard (``save``)."""
        ix = self.lexical_index
        if not 0 <= lo <= hi <= len(ix):
            raise ValueError(f"subset: positions {lo}..{hi} outside the {len(ix)} documents")
        part = LexicalIndex(ix.analyzer, ix.vocab, ix.doc_ids[lo:hi], ix.counts[lo:hi])
        clone: LexicalModel = self.with_params()
        clone.use_index(part)
        clone._stats = self.collection_stats
        return clone

    def save(self, path: str | Path) -> None:
        """The index and config; a model weighting with other statistics than its index's own
        (``with_stats``, ``subset``) keeps them in ``stats.npz``."""
        d = Path(path)
        if self._stats is not None:
            d.mkdir(parents=True, exist_ok=True)
            st = self._stats
            np.savez(d / _STATS_NPZ, n_docs=st.n_docs, df=st.df, cf=st.cf, avgdl=st.avgdl)
        else:
            (d / _STATS_NPZ).unlink(missing_ok=True)
        super().save(d)

    @classmethod
    def load(cls, path: str | Path) -> LexicalModel:
        model = super().load(path)
        assert isinstance(model, LexicalModel)
        f = Path(path) / _STATS_NPZ
        if f.is_file():
            try:
                with np.load(f, allow_pickle=False) as z:
                    st = CollectionStats(int(z["n_docs"]), z["df"], z["cf"], float(z["avgdl"]))
            except SAVED_DATA_ERRORS as e:
                raise ModelDirError(f"{f}: corrupt collection statistics ({e})") from None
            if len(st.df) != len(model.lexical_index.vocab) or len(st.cf) != len(st.df):
                raise ModelDirError(
                    f"{f}: statistics of {len(st.df)} terms, the index has {len(model.lexical_index.vocab)}"
                )
            model._stats = st  # noqa: SLF001  # same class
        return model

    def prepare(self) -> None:
        """Build the retrieval kernel and the document-major weights now (else the first search
        and the first candidate scoring build them)."""
        self._top_k  # noqa: B018
        self._doc_major  # noqa: B018

    def use_pools(self, pools: Mapping[str, Collection[str]]) -> None:
        """Each query's pool (query text -> doc ids, ``data.query_pools``): the documents that
        ``stats = "exclude-query-pool"`` leaves out of that query's statistics."""
        self._pools = pools

    def _for_query(self, query: str) -> LexicalModel:
        """This model with ``query``'s pool-excluded statistics (a query without a pool: all)."""
        if self._pools is None:
            raise ValueError(f"{self.name}: stats = 'exclude-query-pool' needs each query's pool (use_pools)")
        ix = self.lexical_index
        pos = ix.doc_ids.positions(list(self._pools.get(query, ())))
        exclude = np.unique(pos[pos >= 0])
        return self.with_params(stats="collection").with_stats(ix.stats(exclude=exclude))

    def use_index(self, index: LexicalIndex) -> None:
        super().use_index(index)
        self._stats = None
        for cached in ("_postings", "_doc_major", "_addend", "_query_cache", "_top_k"):
            self.__dict__.pop(cached, None)

    @property
    def pruning(self) -> Prune:
        """Which top-k kernel retrieval runs (``PostingsTopK.prune``): "auto" (default: pruning
        for the queries with many postings), "on" (block-max MaxScore for every query) or "off"
        (every posting scored). A speed setting, not a parameter: every setting returns the same
        hits and scores."""
        return self.__dict__.get("_pruning", "auto")

    @pruning.setter
    def pruning(self, value: Prune) -> None:
        if value not in ("auto", "on", "off"):
            raise ValueError(f"pruning must be 'auto', 'on' or 'off', got {value!r}")
        self.__dict__["_pruning"] = value
        if "_top_k" in self.__dict__:
            self._top_k.prune = value

    @property
    def lexical_index(self) -> LexicalIndex:
        return self._require_index()

    #: counts weighted at a time when the postings are built (bounds the float64 temporaries)
    WEIGHT_CHUNK = 1 << 22

    @cached_property
    def _postings(self) -> sp.csr_matrix:
        """Term-major weights (terms x documents, float32): the inverted index the queries walk.
        Weighted a chunk of documents at a time, into one float32 array beside the counts' own
        index arrays, then transposed: the only copy kept."""
        ix = self.lexical_index
        st = self.collection_stats
        c = ix.counts
        data = np.empty(c.nnz, dtype=np.float32)
        lo = 0
        while lo < len(ix):
            hi = int(np.searchsorted(c.indptr, c.indptr[lo] + self.WEIGHT_CHUNK, side="right")) - 1
            hi = min(len(ix), max(hi, lo + 1))
            a, b = int(c.indptr[lo]), int(c.indptr[hi])
            data[a:b] = self._doc_weights(ix, st, c.data[a:b].astype(np.float64), ix.nnz_rows(lo, hi), c.indices[a:b])
            lo = hi
        if data.all():
            w = sp.csr_matrix((data, c.indices, c.indptr), shape=c.shape)  # (shares the counts' index arrays)
        else:
            w = sp.csr_matrix((data, c.indices.copy(), c.indptr.copy()), shape=c.shape)
            w.eliminate_zeros()
        return w.T.tocsr()

    @cached_property
    def _doc_major(self) -> sp.csr_matrix:
        """Document-major weights (documents x terms) for scoring given candidates; built on first
        use, so retrieval alone never holds this second copy. Term ids ascend in each row
        (``rows_dot`` merges them with the query's)."""
        m = self._postings.T.tocsr()
        m.sort_indices()
        return m

    @cached_property
    def _addend(self) -> np.ndarray | None:
        return self._doc_addend(self.lexical_index)

    def _doc_weights(
        self, ix: LexicalIndex, st: CollectionStats, tf: np.ndarray, docs: np.ndarray, terms: np.ndarray
    ) -> np.ndarray:
        """Weight of each stored (document, term) count; ``tf``, ``docs``, ``terms`` are per non-zero."""
        raise NotImplementedError

    def _query_weights(self, ix: LexicalIndex, qcounts: sp.csr_matrix) -> sp.csr_matrix:
        return qcounts

    @classmethod
    def _weighs_queries(cls) -> bool:
        """This kind overrides ``_query_weights``: its query weights are not the term counts."""
        return cls._query_weights is not LexicalModel._query_weights

    def _doc_addend(self, ix: LexicalIndex) -> np.ndarray | None:
        return None

    # -- scoring ---------------------------------------------------------------------------
    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        same_length(queries, candidates, "queries", "candidate lists")
        if self.p.stats == "exclude-query-pool":
            return [self._for_query(q).score([q], [c])[0] for q, c in zip(queries, candidates)]
        ix = self.lexical_index
        return self.score_positions(queries, [positions(ix.position, docs) for docs in candidates])

    def score_positions(self, queries: Sequence[str], candidates: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``score`` with the candidates given as positions in the indexed collection (a caller
        scoring the same candidates with several models looks their ids up once)."""
        if self.p.stats == "exclude-query-pool":
            ids = self.lexical_index.doc_ids
            return self.score(queries, [[str(d) for d in ids.take(p)] if len(p) else [] for p in candidates])
        weights, addend = self._doc_major, self._addend
        out = []
        for query, pos in zip(queries, candidates):
            # only the candidates' rows of the document-major weights meet the query's terms, not
            # every posting of those terms (the served ranker scores a few hundred candidates a search)
            terms, w, scale = self._query_terms(query)
            row = rows_dot(weights.indptr, weights.indices, weights.data, pos, terms, w)
            if addend is not None:
                row = row + scale * addend[pos]
            out.append(row.astype(np.float64))
        return out

    def _query_terms(self, query: str) -> tuple[np.ndarray, np.ndarray, float]:
        """A query's term ids, their weights (``_query_weights``) and its addend scale, cached per
        query text (a search scores the same query against several candidate lists; building the
        one-row sparse matrix cost more than the scoring)."""
        cache = self.__dict__.setdefault("_query_cache", {})
        hit = cache.get(query)
        if hit is None:
            ix = self.lexical_index
            if not self._weighs_queries():  # the counts: no scipy matrix
                ids = ix.vocab.encode(ix.analyzer(query))
                counts: dict[int, int] = {}
                for t in ids:  # (a few terms: a dict counts them with less overhead than np.unique)
                    counts[t] = counts.get(t, 0) + 1
                terms = sorted(counts)
                hit = (
                    np.array(terms, dtype=np.int64),
                    np.array([counts[t] for t in terms], dtype=np.float64),
                    float(len(ids)),
                )
            else:
                qc = ix.query_counts([query])
                q = self._query_weights(ix, qc).astype(np.float32).tocsr()
                order = np.argsort(q.indices, kind="stable")  # ascending term ids (``rows_dot`` merges)
                hit = (q.indices[order].astype(np.int64), q.data[order].astype(np.float64), float(qc.sum()))
            if len(cache) >= 4096:
                cache.pop(next(iter(cache)), None)
            cache[query] = hit
        return hit

    @cached_property
    def _top_k(self) -> PostingsTopK:
        """The compiled retrieval kernel over ``_postings`` (same weights, same float32 sums)."""
        ix, w = self.lexical_index, self._postings
        return PostingsTopK(w.indptr, w.indices, w.data, len(ix), ix.id_order, self._addend, prune=self.pruning)

    def memory(self) -> dict[str, int]:
        """Bytes of the arrays this model and its index hold now, by part (what retrieval keeps
        resident: the postings, the kernel's block maxima, the doc ids; the counts; the
        document-major copy only once ``score`` has been used)."""
        ix = self.lexical_index

        def csr(m: sp.spmatrix) -> int:
            return int(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes)

        out = {
            "counts": csr(ix.counts),
            "doc_ids": ix.doc_ids.nbytes,
            "doc_stats": sum(int(a.nbytes) for k, a in ix.__dict__.items() if isinstance(a, np.ndarray)),
        }
        if "_postings" in self.__dict__:
            out["postings"] = csr(self._postings)
        if "_top_k" in self.__dict__:
            shared = self._postings.indices.nbytes + self._postings.data.nbytes + self._top_k.addend.nbytes
            out["kernel"] = self._top_k.nbytes() - int(shared)  # (the ranks, the block maxima)
        if "_doc_major" in self.__dict__:
            out["doc_major"] = csr(self._doc_major)
        addend = self.__dict__.get("_addend")
        if addend is not None:
            out["addend"] = int(addend.nbytes)
        return out

    def retrieve(self, queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        """Top-k among documents that match at least one query term (as Lucene/Anserini)."""
        if self.p.stats == "exclude-query-pool":
            if k < 1:
                raise ValueError("k must be at least 1")
            return [self._for_query(q).retrieve([q], k)[0] for q in queries]
        ids, scores, counts = self.retrieve_arrays(queries, k)
        return [list(zip(d[:n], s[:n])) for d, s, n in zip(ids.tolist(), scores.tolist(), counts.tolist())]

    def retrieve_arrays(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``retrieve`` as arrays, for bulk runs where building (id, score) tuples costs more than
        the search: doc ids (queries x k, object, ``""`` past a row's count), scores (float64, 0
        past the count) and each row's count. Not for ``stats = "exclude-query-pool"``."""
        docs, scores, counts = self.retrieve_positions(queries, k)  # (checks k and stats)
        ids = self.lexical_index.doc_ids.take(docs)  # (-1 past a row's count: blanked below)
        ids[docs < 0] = ""
        return ids, scores, counts

    @property
    def positional(self) -> bool:
        """Whether ``retrieve_positions`` and ``score_positions`` work on their own (not with
        ``stats = "exclude-query-pool"``, which scores each query apart by id)."""
        return self.p.stats != "exclude-query-pool"

    def retrieve_positions(
        self, queries: Sequence[str], k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``retrieve_arrays`` with the documents as positions in the indexed collection (int64,
        -1 past a row's count): a two-stage search looks up only the ids it returns. ``allowed``
        (bool per indexed document; None: all) keeps every query's top-k inside the documents it
        marks True, in the kernel (``PostingsTopK.search``), not by dropping hits after it."""
        if k < 1:
            raise ValueError("k must be at least 1")
        if not self.positional:
            raise ValueError(
                "retrieve_arrays / retrieve_positions: stats = 'exclude-query-pool' scores each query "
                "apart; use retrieve"
            )
        return self._top_k.search(*self._query_arrays(queries), k, allowed=allowed)

    def _query_arrays(self, queries: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The queries as the kernel takes them: CSR rows (row pointers, ascending term ids,
        float32 ``_query_weights``) and each query's addend scale (its count of known terms).
        Models whose query weights are the counts get them without building a scipy matrix (most
        of a single query's cost otherwise); the same arrays."""
        ix = self.lexical_index
        if self._weighs_queries():
            qc = ix.query_counts(queries)
            q = self._query_weights(ix, qc).astype(np.float32).tocsr()
            return q.indptr, q.indices, q.data, np.asarray(qc.sum(axis=1), dtype=np.float64).ravel()
        encode, analyzer, n_terms = ix.vocab.encode, ix.analyzer, len(ix.vocab)
        lists = [encode(analyzer(q)) for q in queries]
        lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        keys = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=int(lengths.sum()))
        keys += np.repeat(np.arange(len(lists), dtype=np.int64) * n_terms, lengths)
        keys, tf = np.unique(keys, return_counts=True)  # sorted: by query, then term id
        rows = keys // max(n_terms, 1)
        qptr = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=len(lists)), out=qptr[1:])
        return qptr, keys - rows * n_terms, tf.astype(np.float32), lengths.astype(np.float64)


class BM25(LexicalModel):
    """Okapi BM25 with Lucene's idf, log(1 + (N − df + 0.5)/(df + 0.5)), and tf saturation
    tf / (tf + k1·(1 − b + b·|d|/avgdl)); query terms count as often as they occur."""

    name = "bm25"

    @dataclass(frozen=True)
    class Params(LexicalParams):
        kind = "bm25"
        k1: float = param(0.9, ge=0)
        b: float = param(0.4, ge=0, le=1)

    p: Params

    def _doc_weights(self, ix, st, tf, docs, terms):
        k1, b = self.p.k1, self.p.b
        idf = np.log1p((st.n_docs - st.df + 0.5) / (st.df + 0.5))
        norm = k1 * (1.0 - b + b * ix.doc_len[docs] / max(st.avgdl, 1e-9))
        return idf[terms] * tf / (tf + norm)


class UnigramLM(LexicalModel):
    """Query likelihood with a unigram document model (Zhai & Lafferty 2001), rank-equivalent form.

    Dirichlet (``mu`` > 0): Σ_q∈d log(1 + tf/(μ·p(q|C))) + |Q|·log(μ/(|d| + μ)).
    Jelinek-Mercer (``mu`` = 0, ``lam`` in (0, 1)): Σ_q∈d log(1 + (1−λ)·tf/(λ·|d|·p(q|C))).
    Query terms absent from the collection add the same constant to every document and are dropped."""

    name = "ulm"

    @dataclass(frozen=True)
    class Params(LexicalParams):
        kind = "ulm"
        mu: float = param(2000.0, ge=0)  # Dirichlet prior
        lam: float = param(0.0, ge=0, lt=1)  # Jelinek-Mercer weight of the collection model

        def check(self) -> None:
            super().check()
            if (self.mu > 0) == (self.lam > 0):
                raise ParamError(
                    f"ulm takes exactly one of mu > 0 (Dirichlet) or lam in (0,1) (Jelinek-Mercer), "
                    f"got mu={self.mu}, lam={self.lam}"
                )

    p: Params

    def with_params(self, **params: Any) -> UnigramLM:
        if "lam" in params and params["lam"] > 0 and "mu" not in params:
            params["mu"] = 0.0  # switching to Jelinek-Mercer
        if "mu" in params and params["mu"] > 0 and "lam" not in params:
            params["lam"] = 0.0
        return super().with_params(**params)  # type: ignore[return-value]  # same class

    def _doc_weights(self, ix, st, tf, docs, terms):
        # A term the background never saw gets half a count, so log(0) cannot occur.
        p_c = np.maximum(st.cf, 0.5) / max(st.cf.sum(), 1.0)
        mu, lam = self.p.mu, self.p.lam
        if mu > 0:
            return np.log1p(tf / (mu * p_c[terms]))
        return np.log1p((1.0 - lam) * tf / (lam * ix.doc_len[docs] * p_c[terms]))

    def _doc_addend(self, ix: LexicalIndex) -> np.ndarray | None:
        mu = self.p.mu
        return np.log(mu / (ix.doc_len + mu)) if mu > 0 else None


class TfIdf(LexicalModel):
    """Vector space model: cosine of (1 + log tf)·idf vectors, idf = log(N/df) (both sides)."""

    name = "tfidf"

    @dataclass(frozen=True)
    class Params(LexicalParams):
        kind = "tfidf"

    def _idf(self, st: CollectionStats) -> np.ndarray:
        return np.log(max(st.n_docs, 1) / np.maximum(st.df, 0.5))

    def _doc_weights(self, ix, st, tf, docs, terms):
        w = (1.0 + np.log(tf)) * self._idf(st)[terms]
        norms = np.sqrt(np.bincount(docs, weights=w * w, minlength=len(ix)))
        return w / np.maximum(norms[docs], 1e-12)

    def _query_weights(self, ix: LexicalIndex, qcounts: sp.csr_matrix) -> sp.csr_matrix:
        q = qcounts.astype(np.float64)
        q.data = (1.0 + np.log(q.data)) * self._idf(self._stats or ix.stats())[q.indices]
        norms = np.sqrt(np.asarray(q.multiply(q).sum(axis=1)).ravel())
        return sp.diags(1.0 / np.maximum(norms, 1e-12)) @ q


class RandomOrder(Model):
    """A reproducible random score per (seed, query, document): the floor of every table."""

    name = "random"

    @dataclass(frozen=True)
    class Params(Params):
        kind = "random"
        seed: int = 0

    def __init__(self, **params: Any):
        self.p = self.Params.from_mapping(params)
        self.seed = self.p.seed
        self._ids: list[str] = []

    def params(self) -> dict[str, Any]:
        return self.p.as_dict()

    def with_params(self, **params: Any) -> RandomOrder:
        clone = RandomOrder(**{**self.params(), **params})
        clone._ids = self._ids
        return clone

    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        self._ids = list(doc_ids)

    @property
    def doc_ids(self) -> Sequence[str]:
        return self._ids

    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        out = []
        for q, docs in zip(queries, candidates):
            out.append(np.array([_unit_hash(f"{self.seed}\x00{q}\x00{d}") for d in docs]))
        return out

    def save(self, path: str | Path) -> None:
        write_config(path, {"model": self.name, "params": self.params(), "doc_ids": self._ids})

    @classmethod
    def load(cls, path: str | Path) -> RandomOrder:
        cfg = read_config(path, expect=cls.name)
        m = cls(**{k: v for k, v in cfg.get("params", {}).items() if k in cls.Params.names()})  # known names only
        ids = cfg.get("doc_ids", [])
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ModelDirError(f"{Path(path) / CONFIG}: 'doc_ids' must be a list of strings")
        m._ids = ids
        return m


def _unit_hash(s: str) -> float:
    """A stable float in [0, 1) from a string (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.blake2b(s.encode("utf-8"), digest_size=8).digest(), "big") / 2**64
