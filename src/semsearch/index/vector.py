"""k-nearest-neighbour vector index over faiss: exact (Flat), HNSW and IVF-PQ behind one class.

The BERT paper (Sec. 2.2 and 4.4) embeds every document title once, builds a faiss index, and
retrieves each query's top-k by k-NN search; this module is that index. Kinds:

* ``"flat"``: ``IndexFlatIP``, exact search, ties broken by doc id (the project's convention).
* ``"hnsw"``: ``IndexHNSWFlat`` (params ``M``, ``efConstruction``, ``efSearch``), approximate.
* ``"hnswsq"``: ``IndexHNSWSQ``, HNSW over 8-bit scalar-quantised vectors (same params as
  ``hnsw``): the graph walk reads a quarter of the bytes (``benchmarks/vector_speed.py`` measures
  its speed and recall against ``hnsw``); the ``efSearch`` best it
  finds (at least k) are re-scored with the full vectors (kept and read like ``ivfpq``'s below),
  so the hits' scores and order are exact.
* ``"ivfpq"``: ``IndexIVFPQ`` (params ``nlist``, ``m`` sub-quantisers, ``nbits``, ``nprobe``),
  approximate and compressed; trained by k-means on the first vectors added. With ``rerank`` =
  R > 0 (the default, 200) it searches the codes for a short list of R candidates and re-scores
  them exactly with the full vectors, which it keeps in ``vectors.npy`` beside the index and
  reads memory-mapped once loaded: resident memory is the codes (m bytes a document, plus 8 for
  its list entry) and the pages of the vectors actually re-scored; the file itself stays on disk
  (a page cache the kernel may drop). Scores are then exact, as are ``similarity`` and
  ``stored_vectors``. ``rerank = 0`` keeps the PQ approximations only.

Metric ``"ip"`` scores by dot product; ``"cosine"`` normalises vectors on add and on search, so
the inner product is the cosine; ``"l2"`` by Euclidean distance, reported as the negated squared
distance so that, as for the others, a higher score is nearer. Documents have string ids. An index saves to a directory
(``index.faiss`` + ``vector_index.json`` + ``ids.json``) and refuses to load for a different model
or dimension than the caller expects (``IndexMismatchError``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..data.files import write_json
from ..models.base import ModelDirError
from ..models.doc_ids import DocIds
from ..models.postings import check_allowed

META = "vector_index.json"
FAISS_FILE = "index.faiss"
IDS = "ids.json"
EXACT = "vectors.npy"  # ivfpq with rerank: the full vectors, memory-mapped once loaded
FORMAT = 1
KINDS = ("flat", "hnsw", "hnswsq", "ivfpq")
METRICS = ("ip", "cosine", "l2")
DEFAULTS: dict[str, dict[str, int]] = {
    "flat": {},
    "hnsw": {"M": 32, "efConstruction": 200, "efSearch": 128},
    "hnswsq": {"M": 32, "efConstruction": 200, "efSearch": 128},
    "ivfpq": {"nlist": 256, "m": 16, "nbits": 8, "nprobe": 16, "rerank": 200},
}

Hits = list[tuple[str, float]]


class IndexMismatchError(ModelDirError):
    """A saved vector index that belongs to another model or has another dimension."""


def set_threads(n: int) -> None:
    """Use ``n`` OpenMP threads in faiss (build and search) from now on."""
    import faiss

    if n < 1:
        raise ValueError("threads must be at least 1")
    faiss.omp_set_num_threads(int(n))


def as_matrix(x: Any, dim: int, what: str) -> np.ndarray:
    """``x`` as a C-contiguous float32 ``(n, dim)`` matrix (an empty 1-d array: 0 rows), or
    ValueError naming ``what`` for another shape or NaN / infinite values."""
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    if a.ndim == 1 and a.size == 0:
        a = a.reshape(0, dim)
    if a.ndim != 2 or a.shape[1] != dim:
        raise ValueError(f"{what} must be a (n, {dim}) matrix, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{what} contain NaN or infinite values")
    return a


def unit_rows(a: np.ndarray) -> np.ndarray:
    """``a``'s rows scaled to length 1 (a zero row stays zero): cosine as inner product."""
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    return a / np.maximum(norms, 1e-12)


class VectorIndex:
    """A faiss index of string-id'd vectors (see module docstring). ``model`` is the caller's
    identifier of the encoder the vectors come from; it is saved and checked on load."""

    def __init__(
        self,
        dim: int,
        kind: str = "flat",
        metric: str = "cosine",
        *,
        model: str = "",
        threads: int | None = None,
        **params: int,
    ):
        """An empty index (``add`` fills it; IVF-PQ trains on the first vectors added).

        Args:
            dim: the vector dimension.
            kind: "flat", "hnsw", "hnswsq" or "ivfpq".
            metric: "cosine", "ip" or "l2".
            model: the encoder's id, checked on load.
            threads: faiss threads (None: faiss's default).
            **params: the kind's parameters (module docstring)."""
        self.check_params(kind, params)
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
        if dim < 1:
            raise ValueError("dim must be at least 1")
        self.dim, self.kind, self.metric, self.model = int(dim), kind, metric, model
        self.params: dict[str, int] = {**DEFAULTS[kind], **{k: int(v) for k, v in params.items()}}
        if kind == "ivfpq" and dim % self.params["m"]:
            raise ValueError(f"ivfpq: m = {self.params['m']} sub-quantisers must divide dim = {dim}")
        self.threads = threads
        if threads is not None:
            set_threads(threads)
        # ids held compactly (one UTF-8 buffer; id -> position by binary search): at millions of
        # documents a list of str and a dict would cost several times the IVF-PQ codes
        self._ids = DocIds()
        self._ranks = np.zeros(0, dtype=np.int64)
        self._matrix: np.ndarray | None = None  # stored_vectors(), read on first use
        self._exact: np.ndarray | None = None  # hnswsq, ivfpq with rerank: the full (normalised) vectors
        self._faiss = self._new_faiss()

    @staticmethod
    def check_params(kind: str, params: Mapping[str, Any]) -> None:
        """ValueError unless ``kind`` is a known kind and ``params`` name only its parameters (what
        can be checked before the vectors, and so their dimension, exist)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        unknown = set(params) - set(DEFAULTS[kind])
        if unknown:
            raise ValueError(f"{kind} index has no parameters {sorted(unknown)}; known: {sorted(DEFAULTS[kind])}")

    # -- building -------------------------------------------------------------------------------
    def _new_faiss(self) -> Any:
        import faiss

        p = self.params
        ip = faiss.METRIC_L2 if self.metric == "l2" else faiss.METRIC_INNER_PRODUCT
        flat = faiss.IndexFlatL2 if self.metric == "l2" else faiss.IndexFlatIP
        if self.kind == "flat":
            return flat(self.dim)
        if self.kind in ("hnsw", "hnswsq"):
            ix = (
                faiss.IndexHNSWFlat(self.dim, p["M"], ip)
                if self.kind == "hnsw"
                else faiss.IndexHNSWSQ(self.dim, faiss.ScalarQuantizer.QT_8bit, p["M"], ip)  # type: ignore[arg-type]  # faiss stub
            )
            ix.hnsw.efConstruction = p["efConstruction"]
            ix.hnsw.efSearch = p["efSearch"]
            return ix
        if p["rerank"] < 0:
            raise ValueError(f"ivfpq: rerank must be >= 0 (0: no exact re-scoring), got {p['rerank']}")
        ivf = faiss.IndexIVFPQ(flat(self.dim), self.dim, p["nlist"], p["m"], p["nbits"], ip)
        ivf.nprobe = p["nprobe"]
        return ivf

    def train(self, vectors: np.ndarray) -> None:
        """IVF-PQ: k-means for the coarse lists and the product quantiser, on ``vectors``; HNSW-SQ:
        each dimension's range for the 8-bit codes."""
        if self.kind != "ivfpq":
            self._faiss.train(vectors)
            return
        need = max(self.params["nlist"], 2 ** self.params["nbits"])
        if len(vectors) < need:
            raise ValueError(
                f"ivfpq needs at least {need} vectors to train (nlist = {self.params['nlist']}, "
                f"2^nbits = {2 ** self.params['nbits']}), got {len(vectors)}; add more at once, "
                f"lower nlist/nbits, or use kind='flat'"
            )
        self._faiss.train(vectors)

    def add(self, doc_ids: Sequence[str], vectors: Any) -> None:
        """Add documents; an untrained IVF-PQ index trains on this first batch."""
        v = as_matrix(vectors, self.dim, "vectors")
        ids = [str(d) for d in doc_ids]
        if len(ids) != len(v):
            raise ValueError(f"{len(ids)} doc ids but {len(v)} vectors")
        if len(set(ids)) != len(ids) or (len(self._ids) and (self._ids.positions(ids) >= 0).any()):
            raise ValueError("doc ids must be unique within an index")
        if not ids:
            return
        if self.metric == "cosine":
            v = unit_rows(v)
        if not self._faiss.is_trained:
            self.train(v)
        self._faiss.add(v)
        self._matrix = None
        if self.reranks:
            self._exact = v.copy() if self._exact is None else np.vstack([self._exact, v])
        self._ids = DocIds([*self._ids, *ids] if len(self._ids) else ids)
        self._ranks = self._ids.ranks

    def add_parts(self, parts: Iterable[tuple[Sequence[str], Any]], total: int) -> None:
        """Fill an empty, trained index part by part (one encoded shard at a time, say) with
        ``total`` documents in all. The full vectors IVF-PQ re-scores with go into one matrix
        allocated once, so memory peaks at the collection's vectors plus one part (``add`` called
        part by part would copy the growing matrix each time). On any error the index is left
        empty, as it was."""
        import faiss

        if len(self._ids):
            raise ValueError("add_parts: the index must be empty")
        if not self._faiss.is_trained:
            raise ValueError("add_parts: train the index first (IVF-PQ: empty_copy of a trained one)")
        empty = faiss.clone_index(self._faiss)
        exact = np.empty((total, self.dim), dtype=np.float32) if self.reranks else None
        ids: list[str] = []
        try:
            for doc_ids, vectors in parts:
                v = as_matrix(vectors, self.dim, "vectors")
                part = [str(d) for d in doc_ids]
                if len(part) != len(v):
                    raise ValueError(f"{len(part)} doc ids but {len(v)} vectors")
                if len(ids) + len(v) > total:
                    raise ValueError(f"add_parts: more than the {total} documents announced")
                if self.metric == "cosine":
                    v = unit_rows(v)
                self._faiss.add(v)
                if exact is not None:
                    exact[len(ids) : len(ids) + len(v)] = v
                ids += part
            if len(ids) != total:
                raise ValueError(f"add_parts: {len(ids)} documents, {total} announced")
            compact = DocIds(ids)
            del ids
            if compact.first_duplicate() is not None:
                raise ValueError(f"doc ids must be unique within an index ({compact.first_duplicate()!r} repeats)")
        except BaseException:
            self._faiss = empty
            raise
        self._ids, self._ranks, self._exact, self._matrix = compact, compact.ranks, exact, None

    def empty_copy(self) -> VectorIndex:
        """An index with this one's settings and its trained state (IVF-PQ: the coarse and product
        quantizers) but no documents: the start of each shard of a ``ShardedVectorIndex``."""
        import faiss

        if len(self._ids):
            raise ValueError("empty_copy: copy the trained index before adding documents")
        twin = VectorIndex(self.dim, self.kind, self.metric, model=self.model, threads=self.threads, **self.params)
        twin._faiss = faiss.clone_index(self._faiss)
        return twin

    def subset(self, lo: int, hi: int) -> VectorIndex:
        """An index of this one's documents at positions ``lo`` to ``hi`` (a shard of the
        collection), searching them as this index does: ``flat`` holds the same stored vectors,
        ``ivfpq`` the same trained quantizers and the documents' own codes (copied list by list,
        not encoded again), and the same full vectors to re-score with. Then a shard's hits and
        scores are exactly the whole index's restricted to the shard (IVF-PQ with re-scoring:
        re-scoring its own short list, which holds at least the shard's part of the whole index's).
        HNSW kinds get a graph of their own over the shard: approximate, differently."""
        import faiss

        n = len(self._ids)
        if not 0 <= lo <= hi <= n:
            raise ValueError(f"subset: positions {lo}..{hi} outside the {n} documents")
        twin = VectorIndex(self.dim, self.kind, self.metric, model=self.model, threads=self.threads, **self.params)
        ids = self._ids[lo:hi]
        if self.kind == "ivfpq":
            twin._faiss = faiss.clone_index(self._faiss)
            twin._faiss.reset()
            src, dst = self._faiss.invlists, twin._faiss.invlists
            for li in range(src.nlist):
                size = src.list_size(li)
                if not size:
                    continue
                labels = faiss.rev_swig_ptr(src.get_ids(li), size).copy()
                codes = faiss.rev_swig_ptr(src.get_codes(li), size * src.code_size).copy()
                keep = np.flatnonzero((labels >= lo) & (labels < hi))
                if len(keep):
                    # (held in names until add_entries has copied them: a pointer keeps no array alive)
                    mine_ids = np.ascontiguousarray(labels[keep] - lo, dtype=np.int64)
                    mine = np.ascontiguousarray(codes.reshape(size, src.code_size)[keep])
                    dst.add_entries(li, len(keep), faiss.swig_ptr(mine_ids), faiss.swig_ptr(mine))
            twin._faiss.ntotal = hi - lo
            if self._exact is not None:
                twin._exact = np.array(self._exact[lo:hi], dtype=np.float32)
        else:
            v = np.ascontiguousarray(self.stored_vectors()[lo:hi], dtype=np.float32)  # (normalised once already)
            if not twin._faiss.is_trained and len(v):
                twin._faiss.train(v)
            twin._faiss.add(v)
            if twin.reranks:
                twin._exact = v.copy()
        twin._ids = DocIds(ids)
        twin._ranks = twin._ids.ranks
        return twin

    @classmethod
    def build(
        cls,
        doc_ids: Sequence[str],
        vectors: Any,
        kind: str = "flat",
        metric: str = "cosine",
        *,
        model: str = "",
        threads: int | None = None,
        **params: int,
    ) -> VectorIndex:
        """A new index of ``kind`` holding ``vectors``.

        Args:
            doc_ids: one id per vector.
            vectors: (n, dim) document vectors.
            kind: "flat", "hnsw", "hnswsq" or "ivfpq".
            metric: "cosine", "ip" or "l2".
            model: the encoder's id.
            threads: faiss threads.
            **params: the kind's parameters.

        Returns:
            The built index."""
        v = np.asarray(vectors, dtype=np.float32)
        if v.ndim != 2:
            raise ValueError(f"vectors must be a 2-d matrix, got shape {v.shape}")
        ix = cls(v.shape[1], kind, metric, model=model, threads=threads, **params)
        ix.add(doc_ids, v)
        return ix

    # -- searching ------------------------------------------------------------------------------
    @property
    def reranks(self) -> bool:
        """Whether searches re-score the index's short list with the full vectors (``_exact``)."""
        return self.kind == "hnswsq" or (self.kind == "ivfpq" and self.params.get("rerank", 0) > 0)

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def doc_ids(self) -> Sequence[str]:
        """The indexed ids in position order (a compact read-only sequence of str)."""
        return self._ids

    def set_search_params(self, **params: int) -> None:
        """Change search-time parameters: ``efSearch`` (hnsw) or ``nprobe`` (ivfpq)."""
        allowed = {"hnsw": {"efSearch"}, "hnswsq": {"efSearch"}, "ivfpq": {"nprobe", "rerank"}}.get(self.kind, set())
        if set(params) - allowed:
            raise ValueError(f"{self.kind} index: search parameters are {sorted(allowed) or 'none'}")
        if params.get("rerank", 0) < 0 or (params.get("rerank", 0) > 0 and self._exact is None and self._ids):
            raise ValueError("ivfpq: rerank needs the full vectors, kept only when the index was built with rerank > 0")
        for k, v in params.items():
            self.params[k] = int(v)
            if k == "rerank":
                continue
            if k == "efSearch":
                self._faiss.hnsw.efSearch = int(v)
            else:
                self._faiss.nprobe = int(v)

    def search(self, queries: Any, k: int) -> list[Hits]:
        """Per query vector, the top-``k`` (doc id, score) best first; ``k`` larger than the
        collection returns the whole collection (approximate kinds: as much as they find). Equal
        scores are ordered by doc id, and ties at the cut-off are resolved by doc id too (exactly
        so for ``flat``)."""
        return [list(zip(self._ids.take(p).tolist(), s.tolist())) for p, s in self.search_positions(queries, k)]

    def search_positions(
        self, queries: Any, k: int, allowed: np.ndarray | None = None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """``search`` with each query's hits as arrays: their positions in the index (int64, the
        order ids were added) and scores (float64), best first, ties by doc id. A two-stage
        search works on positions and looks up only the ids it returns.

        ``allowed`` (bool per indexed position; None: all) restricts the search to the positions
        it marks True, inside the search (``_filtered``), not by dropping hits after it."""
        if k < 1:
            raise ValueError("k must be at least 1")
        q = as_matrix(queries, self.dim, "query vectors")
        n = len(self._ids)
        mask = check_allowed(allowed, n)
        if len(q) == 0:
            return []
        if n == 0 or (mask is not None and not mask.any()):
            return [(np.zeros(0, np.int64), np.zeros(0)) for _ in range(len(q))]
        if self.metric == "cosine":
            q = unit_rows(q)
        k = min(k, n)
        if mask is not None:
            return self._filtered(q, k, mask)
        if self.reranks:
            return self._rescored(q, k)
        return self._flat_ties(q, k)

    #: a filter whose allowed documents' stored vectors take at most this many bytes is searched
    #: exactly (every allowed vector scored): a graph or list walk reads about as many vectors
    #: and, with most of the documents it meets disallowed, finds fewer of the allowed ones
    #: (Qdrant's filtered search switches to a full scan below a size in bytes likewise)
    EXACT_BYTES = 8 << 20
    #: a fixed number of allowed documents instead of ``EXACT_BYTES`` (None: by bytes)
    EXACT_BELOW: int | None = None
    #: a filtered graph/list walk widens ``efSearch`` / ``nprobe`` by the inverse of the allowed
    #: share, at most this many times, so it meets about as many allowed documents as unfiltered
    WIDEN_MAX = 8

    def _filtered(self, q: np.ndarray, k: int, mask: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """``search_positions`` inside ``mask``: few allowed documents (``EXACT_BYTES`` of vectors)
        are all scored against the stored vectors (exact, as ``flat``); more are searched by faiss with
        the mask as an id selector (a bitmap the walk consults before keeping a hit), ``efSearch``
        or ``nprobe`` widened by the inverse of the allowed share (``WIDEN_MAX`` at most), then
        re-scored as unfiltered searches are (hnswsq, ivfpq with ``rerank``); a query whose walk
        met fewer than ``k`` allowed documents is answered exactly instead."""
        import faiss

        fs: Any = faiss  # (the stubs lack the search parameters' keyword arguments)
        cand = np.flatnonzero(mask)
        k = min(k, len(cand))
        limit = self.EXACT_BYTES // (4 * self.dim) if self.EXACT_BELOW is None else self.EXACT_BELOW
        if len(cand) <= limit:
            return self._exact_over(q, k, cand)
        widen = min(float(self.WIDEN_MAX), len(mask) / len(cand))
        bits = np.packbits(mask, bitorder="little")  # (faiss reads bit i & 7 of byte i >> 3)
        sel = fs.IDSelectorBitmap(bits)
        params: Any
        if self.kind in ("hnsw", "hnswsq"):
            params = fs.SearchParametersHNSW(sel=sel, efSearch=int(max(self.params["efSearch"], k) * widen))
        elif self.kind == "ivfpq":
            nprobe = min(self.params["nlist"], int(np.ceil(self.params["nprobe"] * widen)))
            params = fs.SearchParametersIVF(sel=sel, nprobe=nprobe)
        else:
            params = fs.SearchParameters(sel=sel)
        try:
            found = (
                self._rescored(q, k, params, len(cand)) if self.reranks else self._flat_ties(q, k, params, len(cand))
            )
        finally:
            del params, sel, bits  # (faiss holds raw pointers to them during the search only)
        few = [i for i, (p, _) in enumerate(found) if len(p) < k]
        if few:  # a walk that met fewer than k allowed documents: those queries exactly
            for i, hit in zip(few, self._exact_over(q[few], k, cand)):
                found[i] = hit
        return found

    def _exact_over(self, q: np.ndarray, k: int, cand: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every query's best ``k`` of the positions ``cand`` scored against the stored vectors
        (exact; ivfpq without re-scoring: its decoded codes), best first, ties by doc id."""
        rows = self.stored_vectors()[cand]
        out = []
        for qv in q:
            s = self._score(rows, qv).astype(np.float64)
            idx: np.ndarray = np.arange(len(s))
            if len(s) > k:  # only the hits at or above the k-th score are sorted
                kth = np.partition(-s, k - 1)[k - 1]
                idx = np.flatnonzero(-s <= kth)
            order = idx[np.lexsort((self._ranks[cand[idx]], -s[idx]))[:k]]
            out.append((cand[order].astype(np.int64), s[order]))
        return out

    def _flat_ties(
        self, q: np.ndarray, k: int, params: Any = None, n: int | None = None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """faiss's top ``k`` (``params``: a filtered search over ``n`` allowed documents),
        fetched deeper while a tie at the last fetched score may continue past it (exact kinds)."""
        n = len(self._ids) if n is None else n
        fetch = min(n, k + 8)
        while True:
            scores, pos = self._faiss_search(q, fetch, params)
            if fetch == n or self.kind != "flat" or not (scores[:, k - 1] == scores[:, fetch - 1]).any():
                break
            fetch = min(n, fetch * 4)
        return self._best(pos, scores, k)

    def _best(self, pos: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per row of faiss's (queries, n) positions (-1: none) and scores, the best ``k`` found,
        best first, equal scores by doc id: one sort for all rows (a single row sorts on its own,
        with fewer array calls)."""
        if len(pos) == 1:
            p, s = pos[0], scores[0]
            if (p < 0).any():
                p, s = p[p >= 0], s[p >= 0]
            order = np.lexsort((self._ranks[p], -s))[:k]
            return [(p[order].astype(np.int64), s[order].astype(np.float64))]
        found = pos >= 0
        s = np.where(found, scores, -np.inf)
        order = np.lexsort((self._ranks[np.where(found, pos, 0)], -s), axis=-1)[:, :k]
        top_pos, top_s = np.take_along_axis(pos, order, 1), np.take_along_axis(s, order, 1).astype(np.float64)
        return [
            (top_pos[i, :c].astype(np.int64), top_s[i, :c]) for i, c in enumerate(np.minimum(found.sum(1), k).tolist())
        ]

    def _rescored(
        self, q: np.ndarray, k: int, params: Any = None, n: int | None = None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Exact re-scoring: the codes' top ``rerank`` (IVF-PQ) or ``efSearch`` (HNSW-SQ: the graph
        walk visits that many anyway) candidates, at least k, scored with the full vectors, best
        first, equal scores by doc id (``params``: a filtered search over ``n`` allowed documents,
        whose short list holds allowed ones only)."""
        assert self._exact is not None
        short = self.params["rerank"] if self.kind == "ivfpq" else self.params["efSearch"]
        _, pos = self._faiss_search(q, min(len(self._ids) if n is None else n, max(k, short)), params)
        found = pos >= 0
        if len(pos) * pos.shape[1] * self.dim > 1 << 24:  # a large pass: query by query, rows read in order
            return [self.rescore_positions(qv, p, k) for qv, p in zip(q, pos)]
        rows = self._exact[np.where(found, pos, 0)]  # (queries, short, dim) in one gather
        if self.metric == "l2":
            scores = -np.square(rows - q[:, None, :]).sum(-1)
        else:
            scores = np.matmul(rows, q[:, :, None])[:, :, 0]
        return self._best(pos, scores, k)

    def _faiss_search(self, q: np.ndarray, k: int, params: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """faiss's (scores, positions), scores higher-is-nearer (l2: the negated squared distance);
        ``params``: faiss search parameters (a filtered search's id selector)."""
        scores, pos = self._faiss.search(q, k) if params is None else self._faiss.search(q, k, params=params)
        return (-scores if self.metric == "l2" else scores), pos

    def _score(self, vectors: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Exact scores of stored ``vectors`` for query vector ``q`` (l2: negated squared distance)."""
        if self.metric == "l2":
            d = vectors - q
            return -np.einsum("ij,ij->i", d, d)
        return vectors @ q

    def short_list(self, queries: Any, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query vector, the ``k`` best positions by the index's own scores (IVF-PQ: the codes'),
        before any exact re-scoring, and those scores: what a sharded search merges into the whole
        index's short list, which ``rescore_positions`` then scores exactly where it is held."""
        q = as_matrix(queries, self.dim, "query vectors")
        if self.metric == "cosine":
            q = unit_rows(q)
        if not len(self._ids) or not len(q):
            return [(np.zeros(0, np.int64), np.zeros(0)) for _ in range(len(q))]
        scores, pos = self._faiss_search(q, min(len(self._ids), k))
        return [(p[p >= 0].astype(np.int64), s[p >= 0].astype(np.float64)) for s, p in zip(scores, pos)]

    def rescore_positions(self, qv: np.ndarray, p: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Candidates at positions ``p`` (-1: none) re-scored with the full vectors: the best
        ``k`` positions and scores, best first, equal scores by doc id. Public for the sharded
        searches, which merge the shards' ``short_list``s and re-score the merged one."""
        p = np.sort(p[p >= 0])  # sorted rows: the memory-mapped file is read in order
        s = self._score(self._exact[p], qv)  # type: ignore[index]  # kept vectors
        order = np.lexsort((self._ranks[p], -s))[:k]
        return p[order].astype(np.int64), np.asarray(s[order], dtype=np.float64)

    def similarity(self, query: Any, doc_ids: Sequence[str]) -> np.ndarray:
        """One query vector's score with each of ``doc_ids`` (the stored vectors; for cosine the
        cosine), so a stage-2 ranker has the semantic score of candidates the k-NN search did not
        return. Exact for flat, hnsw and re-scored ivfpq; ivfpq without re-scoring scores the
        quantised vectors. Unknown ids raise
        ``KeyError``."""
        pos = self._ids.positions(doc_ids)
        if (pos < 0).any():
            raise KeyError(doc_ids[int(np.flatnonzero(pos < 0)[0])])
        return self.similarity_positions(query, pos)

    def similarity_positions(self, query: Any, positions: np.ndarray) -> np.ndarray:
        """``similarity`` of the documents at ``positions`` (int, in the index)."""
        q = as_matrix(np.asarray(query, dtype=np.float32).reshape(1, -1), self.dim, "query vector")
        if len(q) != 1:
            raise ValueError(f"similarity takes one query vector, got {len(q)}")
        if self.metric == "cosine":
            q = unit_rows(q)
        if not len(positions):
            return np.zeros(0, dtype=np.float64)
        return self._score(self.stored_vectors()[positions], q[0]).astype(np.float64)

    def stored_vectors(self) -> np.ndarray:
        """All stored vectors (normalised for cosine; decoded for ivfpq) as one matrix, read from
        faiss on first use and kept until documents are added."""
        if self._exact is not None:
            return self._exact
        if self._matrix is None:
            if self.kind == "ivfpq":
                self._faiss.make_direct_map()
            self._matrix = (
                self._faiss.reconstruct_n(0, len(self._ids)) if len(self._ids) else np.zeros((0, self.dim), np.float32)
            )
        return self._matrix

    # -- size and persistence --------------------------------------------------------------------
    def nbytes(self) -> int:
        """Bytes of the serialised faiss index (the vectors/codes and graph/lists; ids excluded)."""
        import faiss

        return int(faiss.serialize_index(self._faiss).size)

    def bytes_per_doc(self) -> float:
        """Index bytes per indexed document (NaN for an empty index)."""
        return self.nbytes() / len(self._ids) if len(self._ids) else float("nan")

    def meta(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "kind": self.kind,
            "metric": self.metric,
            "dim": self.dim,
            "params": self.params,
            "count": len(self._ids),
            "model": self.model,
        }

    def save(self, path: str | Path) -> None:
        """Write ``index.faiss``, ``ids.json`` and ``vector_index.json`` into directory ``path``."""
        import faiss

        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self._faiss, str(d / FAISS_FILE))
        if self._exact is not None:
            np.save(d / EXACT, np.ascontiguousarray(self._exact, dtype=np.float32), allow_pickle=False)
        else:
            (d / EXACT).unlink(missing_ok=True)
        (d / IDS).write_text(json.dumps(list(self._ids), ensure_ascii=False) + "\n", encoding="utf-8")
        write_json(d / META, self.meta())

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        expect_model: str | None = None,
        expect_dim: int | None = None,
        threads: int | None = None,
    ) -> VectorIndex:
        """Read an index written by ``save``; ``expect_model`` / ``expect_dim`` refuse an index built
        for another encoder (``IndexMismatchError``). A corrupt directory raises ``ModelDirError``."""
        import faiss

        d = Path(path)
        try:
            meta = json.loads((d / META).read_text(encoding="utf-8"))
            ids = json.loads((d / IDS).read_text(encoding="utf-8"))
        except FileNotFoundError as e:
            raise ModelDirError(f"{d}: not a vector index (missing {Path(e.filename).name})") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ModelDirError(f"{d}: unreadable vector index metadata ({e})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ModelDirError(
                f"{d}: vector index format {meta.get('format') if isinstance(meta, dict) else '?'} is not {FORMAT}"
            )
        if expect_model is not None and meta.get("model") != expect_model:
            raise IndexMismatchError(f"{d}: index was built for model {meta.get('model')!r}, not {expect_model!r}")
        if expect_dim is not None and meta.get("dim") != expect_dim:
            raise IndexMismatchError(f"{d}: index has dimension {meta.get('dim')}, the model {expect_dim}")
        try:
            params = dict(meta["params"])
            if meta["kind"] == "ivfpq":
                params.setdefault("rerank", 0)  # saved before exact re-scoring existed
            ix = cls(
                int(meta["dim"]),
                meta["kind"],
                meta["metric"],
                model=str(meta.get("model", "")),
                threads=threads,
                **params,
            )
            ix._faiss = faiss.read_index(str(d / FAISS_FILE))
        except (KeyError, TypeError, ValueError, RuntimeError) as e:
            raise ModelDirError(f"{d}: corrupt vector index ({str(e).strip().splitlines()[0][:200]})") from None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ModelDirError(f"{d / IDS}: must be a list of distinct document ids")
        ids = DocIds(ids)
        if ids.first_duplicate() is not None:
            raise ModelDirError(
                f"{d / IDS}: must be a list of distinct document ids ({ids.first_duplicate()!r} repeats)"
            )
        if ix._faiss.ntotal != len(ids) or len(ids) != meta.get("count") or ix._faiss.d != ix.dim:
            raise ModelDirError(
                f"{d}: corrupt vector index (faiss holds {ix._faiss.ntotal} vectors of dimension "
                f"{ix._faiss.d}, metadata says {meta.get('count')} of {ix.dim}, {len(ids)} ids)"
            )
        if ix.kind in ("hnsw", "hnswsq"):
            ix._faiss.hnsw.efSearch = ix.params["efSearch"]
        elif ix.kind == "ivfpq":
            ix._faiss.nprobe = ix.params["nprobe"]
        if ix.reranks:
            try:
                ix._exact = np.load(d / EXACT, mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError) as e:
                raise ModelDirError(
                    f"{d / EXACT}: the full vectors {ix.kind} re-scores with are missing or "
                    f"unreadable ({str(e).splitlines()[0][:200]})"
                ) from None
            if ix._exact.shape != (len(ids), ix.dim) or ix._exact.dtype != np.float32:
                raise ModelDirError(
                    f"{d / EXACT}: holds {ix._exact.shape} {ix._exact.dtype}, the index "
                    f"{len(ids)} vectors of dimension {ix.dim} (float32)"
                )
        ix._ids = ids
        ix._ranks = ix._ids.ranks
        return ix


def recall_at_k(
    approx: Sequence[Sequence[tuple[str, Any]]], exact: Sequence[Sequence[tuple[str, Any]]], k: int
) -> float:
    """Mean over queries of |approx top-k ∩ exact top-k| / |exact top-k|: how much of exact
    search's answer an approximate index finds (index quality, not relevance)."""
    if len(approx) != len(exact):
        raise ValueError(f"{len(approx)} approximate but {len(exact)} exact hit lists")
    if k < 1:
        raise ValueError("k must be at least 1")
    vals = []
    for a, e in zip(approx, exact):
        truth = {d for d, _ in e[:k]}
        if truth:
            vals.append(len(truth & {d for d, _ in a[:k]}) / len(truth))
    return float(np.mean(vals)) if vals else float("nan")
