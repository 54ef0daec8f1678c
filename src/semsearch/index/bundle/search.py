"""A loaded bundle (``Bundle.load``) and its searches: stage 1 (lexical ∪ semantic), the stage-2
ranker and the optional stage-3 cross-encoder."""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ...data import Corpus, DataFormatError, join_fields, load_corpus
from ...data.files import TMP_SUFFIX
from ...models import Model
from ...models.base import ModelDirError, best_k, id_ranks
from ...models.postings import check_allowed
from ...plugins import load_model
from ...ranking.rescore import check_weight, is_pair_scorer, rescore_top
from ...text import SpellCorrector
from ..filters import Filter, FilterIndex, Tally
from ..hybrid import SCORERS, Candidates, HybridHit, HybridRetriever
from ..semantic import SemanticRetriever
from ..vector import VectorIndex
from .manifest import MANIFEST, SHARDED, _same_name, _verify_files, read_manifest
from .options import QUERY_CACHE, RESULT_CACHE, LoadOptions
from .store import _open_store

N_LEXICAL, N_SEMANTIC = 300, 20
"""Stage-1 depths of a search without a two-stage ranker (the BERT paper's Sec. 4.4)."""


@dataclass(frozen=True)
class Hit:
    """One hit as plain values (``Bundle.hits``): its rank from 1, id, score and document."""

    rank: int
    doc_id: str
    score: float
    title: str
    text: str
    fields: dict[str, Any] = field(default_factory=dict)  # the document's stored fields (a table's other columns)


@dataclass
class Result:
    """One query's answer: hits (merged, best first) and the time each stage took (ms)."""

    hits: list[HybridHit]
    timing: dict[str, float] = field(default_factory=dict)
    query: str = ""  # the text searched: the query, spell-corrected when the bundle corrects queries
    facets: dict[str, Any] | None = None
    """With ``facets`` asked of ``search_many``: the facet counts of the query's stage-1 candidates
    under its filter (``FilterIndex.counts``); else None."""
    tally: Tally | None = None
    """The counts behind ``facets``, untruncated (``Tally``: a served delta adds its own)."""


class ResultCache:
    """The results of the ``size`` most recent distinct searches (0: none kept), by query and
    settings; ``answer`` gives each query its kept result or its fresh one, searched once per
    distinct query. Thread-safe: the service's passes share it."""

    def __init__(self, size: int):
        self.size = size
        self._kept: OrderedDict[tuple[Any, ...], Result] = OrderedDict()
        self._lock = threading.Lock()

    def answer(
        self,
        queries: Sequence[str],
        settings: tuple[Any, ...],
        t0: float,
        search: Callable[[list[str]], list[Result]],
    ) -> list[Result]:
        """Each of ``queries``' result under ``settings``: a kept one (its time ``cached_ms``, since
        ``t0``), else ``search``'s over the distinct queries not kept (then kept); every result a
        copy of its own, so a caller may cut its hits."""
        out: list[Result | None] = [None] * len(queries)
        if self.size > 0:
            with self._lock:
                for i, q in enumerate(queries):
                    hit = self._kept.get((q, *settings))
                    if hit is not None:
                        self._kept.move_to_end((q, *settings))
                        ms = 1000 * (time.perf_counter() - t0)
                        out[i] = Result(list(hit.hits), {"cached_ms": ms, "total_ms": ms}, q, hit.facets, hit.tally)
        todo = list(dict.fromkeys(q for q, r in zip(queries, out, strict=True) if r is None))  # each once
        if todo:
            found = dict(zip(todo, search(todo), strict=True))
            if self.size > 0:
                with self._lock:
                    for q, r in found.items():
                        self._kept[(q, *settings)] = r
                    while len(self._kept) > self.size:
                        self._kept.popitem(last=False)
            out = [
                r
                if r is not None
                else Result(list(found[q].hits), dict(found[q].timing), q, found[q].facets, found[q].tally)
                for q, r in zip(queries, out, strict=True)
            ]
        return out  # type: ignore[return-value]  # filled


def _top(hits: Sequence[HybridHit], scores: np.ndarray, k: int) -> list[int]:
    """Positions of the ``k`` best hits by (score desc, doc id): only the hits scoring at least the
    k-th best score (ties at the cut included) are sorted by that key, not all the candidates."""
    s = np.asarray(scores, dtype=np.float64)
    idx: Sequence[int] = range(len(s))
    if len(s) > k:
        kth = np.partition(-s, k - 1)[k - 1]
        idx = np.flatnonzero(-s <= kth).tolist()
    return sorted(idx, key=lambda i: (-float(s[i]), hits[i].doc_id))[:k]


def check_search(
    queries: Sequence[str], k: int, merge_by: str, correct: bool | None, facets: int, corrects: bool
) -> None:
    """What a bundle's ``search_many`` refuses before any work (its Raises): a blank query, ``k`` <
    1, an unknown ``merge_by``, ``correct`` without a spelling corrector (``corrects``: the
    bundle has one), ``facets`` < 0."""
    blank = [i for i, q in enumerate(queries) if not q.strip()]
    if blank:
        raise ValueError("empty query" if len(queries) == 1 else f"empty query at position {blank[0]}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if merge_by not in SCORERS:
        raise ValueError(f"merge must be one of {', '.join(SCORERS)}, got {merge_by!r}")
    if correct and not corrects:
        raise ValueError("this bundle has no spelling corrector (build it again to have one)")
    if facets < 0:
        raise ValueError(f"facets must be >= 0, got {facets}")


class Bundle:
    """A loaded bundle: documents, the lexical model, the semantic retrievers, the ranker."""

    QUERY_CACHE = QUERY_CACHE
    RESULT_CACHE = RESULT_CACHE

    def __init__(
        self,
        path: Path,
        manifest: dict[str, Any],
        corpus: Corpus,
        lexical: Model | None,
        semantic: Mapping[str, SemanticRetriever],
        ranker: Model | None,
        *,
        query_cache: int = QUERY_CACHE,
        result_cache: int = RESULT_CACHE,
        rescorer: Any = None,
        rescore_depth: int = 10,
        rescore: bool = False,
        rescore_weight: float = math.inf,
        corrector: SpellCorrector | None = None,
        correct_queries: bool = True,
    ):
        self.path, self.manifest, self.corpus = path, manifest, corpus
        self.corrector = corrector
        self.correct_queries = bool(correct_queries and corrector is not None)
        """Whether searches correct their queries' spelling by default (``search_many``'s ``correct``)."""
        self.store = "faiss"  # where the vectors are searched: faiss, or postgres (set by load)
        self.results = ResultCache(result_cache)
        """The recent distinct searches' results (``LoadOptions.result_cache`` of them; 0: none)."""
        for r in semantic.values():
            r.query_cache = query_cache
        self.lexical, self.semantic, self.ranker = lexical, dict(semantic), ranker
        if rescore and rescorer is None:
            raise ValueError(
                f"{path}: this bundle has no stage-3 cross-encoder to re-score with (build it with --rescorer)"
            )
        if rescore_depth < 1:
            raise ValueError(f"rescore depth must be >= 1, got {rescore_depth}")
        self.rescorer, self.rescore_depth, self.rescore = rescorer, rescore_depth, rescore
        self.rescore_weight = check_weight(rescore_weight)
        """Stage 3: the cross-encoder, how many of the ranked hits it re-scores, whether it runs, and
        its weight in their new score beside the ranker's (inf: its score alone)."""
        for name, m in [("lexical", lexical), *semantic.items(), ("ranker", ranker)]:
            # (a portable ranker indexes nothing: use_texts below points it at these documents)
            if m is not None and not getattr(m, "portable", False) and list(m.doc_ids) != corpus.ids:
                raise ModelDirError(f"{path}: {name} index and documents do not match (different document ids)")
        if ranker is not None and hasattr(ranker, "use_texts"):  # per-pair text features read the documents
            ranker.use_texts(corpus.ids, corpus.joined(manifest.get("fields", "title+text")))
        # encoders and analyzers keep in-memory caches (e.g. the trigram word table) that are not
        # thread-safe: one lock per stage model; lexical and semantic still run at the same time
        self._locks = {
            id(m): threading.Lock() for m in [lexical, *semantic.values(), ranker, rescorer] if m is not None
        }
        self.two_stage = bool(getattr(ranker, "stage_features", None))
        """The ranker re-ranks stage 1's merged hits with their stage scores (fills them in)."""
        if self.two_stage:
            for name, r in self.semantic.items():
                if not isinstance(r.vectors, VectorIndex):
                    raise ModelDirError(
                        f"{path}: a two-stage bundle scores candidates against the stored vectors of "
                        f"{name}; serve it with the faiss store, not {type(r.vectors).__name__}"
                    )
                r.vectors.stored_vectors()  # read them now, not during the first search
        # a two-stage search runs its stages one after the other: with one core per worker, handing
        # the semantic stage to a thread costs more than it overlaps
        self._hybrid = {
            name: HybridRetriever(
                lexical, sem, scorer="union", concurrent=not self.two_stage, locks=self._locks, complete=self.two_stage
            )
            for name, sem in (self.semantic.items() if self.semantic else [(None, None)])
        }
        self._id_ranks: np.ndarray | None = None  # each document's rank by id (ties), made on first use
        schema = manifest.get("schema") or {}
        self.filters = FilterIndex(
            corpus.stored if corpus.stored is not None else [{}] * len(corpus),
            schema.get("facets", []),
            schema.get("numeric", []),
        )
        """The documents' facet and numeric columns: what ``filters`` compile against (``index.filters``)."""

    @classmethod
    def load(
        cls,
        path: str | Path,
        options: LoadOptions | None = None,
        *,
        store: str | None = None,
        verify: bool | None = None,
        query_cache: int | None = None,
        result_cache: int | None = None,
        rescore: bool | None = None,
        rescore_depth: int | None = None,
        rescore_weight: float | None = None,
        correct_queries: bool | None = None,
    ) -> Bundle:
        """Read a bundle (or its ``.old`` backup left by a build killed mid-swap), check every
        file against the manifest's sha256 and each vector index against its encoder, and open it
        as ``options`` say; each keyword argument given (not None) changes that option (the defaults
        below are ``LoadOptions``'). A bundle built before the stage-3 blend, or with weight null,
        orders its re-scored hits by the cross-encoder alone unless the options name a weight.

        Args:
            path: the bundle's folder.
            options: how to open it (``LoadOptions``; None: its defaults).
            store: where the vectors are searched, "faiss" or "postgres" (default: the store it was built with).
            verify: check every file against the manifest's sha256 (default: True).
            query_cache: recent query embeddings each semantic retriever keeps, >= 0 (0: none; default ``QUERY_CACHE``).
            result_cache: recent distinct searches whose results are kept, >= 0 (0: none; default ``RESULT_CACHE``).
            rescore: run the bundle's stage-3 cross-encoder on each search's ranked hits (default: False).
            rescore_depth: the ranked hits stage 3 re-scores, >= 1 (default: the depth it was built with).
            rescore_weight: stage 3's blend weight beside the ranker's (inf: its score alone; default: as built).
            correct_queries: correct each query's spelling first, if the bundle has a corrector (default: True).

        Returns:
            The loaded bundle.

        Raises:
            ModelDirError: not a bundle (or a build's temporary folder), or a file missing, corrupt or unlike
                the manifest.
            ParamError: an unknown or invalid option.
            ValueError: ``rescore`` of a bundle without a stage-3 cross-encoder."""
        given = {
            "store": store,
            "verify": verify,
            "query_cache": query_cache,
            "result_cache": result_cache,
            "rescore": rescore,
            "rescore_depth": rescore_depth,
            "rescore_weight": rescore_weight,
            "correct_queries": correct_queries,
        }
        opts = options or LoadOptions()
        changes = {k: v for k, v in given.items() if v is not None}
        if changes:
            opts = opts.replace(where="Bundle.load", **changes)
        p = Path(path)
        if TMP_SUFFIX.search(p.name):
            raise ModelDirError(
                f"{p}: the temporary folder of a build (unfinished or killed), not a bundle; "
                "load the bundle it was building, or rebuild it"
            )
        backup = p.with_name(f".{p.name}.old")
        if not (p / MANIFEST).is_file() and (backup / MANIFEST).is_file():
            p = backup
        if not (p / MANIFEST).is_file() and (p / SHARDED).is_file():
            raise ModelDirError(f"{p}: a sharded bundle; serve it ('semsearch serve') or open it with ShardedBundle")
        if not (p / MANIFEST).is_file():
            raise ModelDirError(f"{p}: not a semsearch bundle (no {MANIFEST}); build one with 'semsearch index build'")
        manifest = read_manifest(p)
        if opts.verify:
            _verify_files(p, manifest["files"])
        try:
            corpus = load_corpus(p / "documents.jsonl", stored_fields=True)
            corpus.schema = manifest.get("schema")
        except (OSError, DataFormatError) as e:
            raise ModelDirError(f"{p}: unreadable documents.jsonl ({e})") from None
        if manifest.get("documents", len(corpus)) != len(corpus):
            raise ModelDirError(
                f"{p / MANIFEST}: 'documents' says {manifest['documents']}, documents.jsonl holds {len(corpus)}"
            )
        lex = manifest.get("lexical")
        lexical = load_model(p / lex["path"]) if lex else None
        if lex:
            _same_name(p, "lexical.name", lex["name"], lexical)
        store = opts.store or manifest.get("store", "faiss")
        semantic = {}
        for i, m in enumerate(manifest.get("models", [])):
            r = SemanticRetriever.load(p / m["path"])
            _same_name(p, f"models[{i}].name", m["name"], r.encoder)
            if r.dim != m["dim"]:
                raise ModelDirError(
                    f"{p / MANIFEST}: 'models[{i}].dim' says {m['dim']}, "
                    f"the {m['name']} encoder in {m['path']} embeds in {r.dim} dimensions"
                )
            _open_store(store, r, p / m["path"], m, manifest)
            semantic[m["name"]] = r
        rk = manifest.get("ranker")
        ranker = load_model(p / rk["path"]) if rk else None
        if rk:
            _same_name(p, "ranker.name", rk["name"], ranker)
        rs = manifest.get("rescorer")
        rescorer = load_model(p / rs["path"]) if rs else None
        if rs:
            _same_name(p, "rescorer.name", rs["name"], rescorer)
            if not is_pair_scorer(rescorer):
                raise ModelDirError(f"{p / MANIFEST}: 'rescorer' is a {rs['name']} model, not a cross-encoder")
        rescore_depth = opts.rescore_depth
        if rescore_depth is None:
            rescore_depth = int(rs["depth"]) if rs else 10
        if opts.rescore_weight is not None:
            weight = opts.rescore_weight
        elif not rs or rs.get("weight") is None:
            weight = math.inf
        else:
            try:
                weight = check_weight(rs["weight"], f"{p / MANIFEST}: rescorer.weight")
            except ValueError as e:
                raise ModelDirError(str(e)) from None
        sp = manifest.get("spelling")
        try:
            corrector = SpellCorrector.load(p / sp["path"]) if sp else None
        except ValueError as e:
            raise ModelDirError(str(e)) from None
        bundle = cls(
            p,
            manifest,
            corpus,
            lexical,
            semantic,
            ranker,
            query_cache=opts.query_cache,
            result_cache=opts.result_cache,
            rescorer=rescorer,
            rescore_depth=rescore_depth,
            rescore=opts.rescore,
            rescore_weight=weight,
            corrector=corrector,
            correct_queries=opts.correct_queries,
        )
        bundle.store = store
        return bundle

    @property
    def result_cache(self) -> int:
        """How many recent distinct searches' results are kept (``LoadOptions.result_cache``)."""
        return self.results.size

    @property
    def filterable(self) -> bool:
        """Whether searches take filters: the bundle has facet or numeric fields and both stages
        of every model search one positional collection (not the postgres store, not a sharded
        index), so the mask can go inside each stage's top-k."""
        return bool(self.filters.fields) and all(h.positional for h in self._hybrid.values())

    # -- search -----------------------------------------------------------------------------------
    def encoder(self, name: str | None = None) -> Any:
        """The named (default: first) encoder model of the bundle."""
        if not self.semantic:
            raise ValueError("this bundle has no neural model")
        if name is None:
            return next(iter(self.semantic.values())).encoder
        if name not in self.semantic:
            raise ValueError(f"no model {name!r} in this bundle (has {', '.join(self.semantic)})")
        return self.semantic[name].encoder

    def document_text(self, doc_id: str) -> str:
        """The document's text as the bundle indexed it (its ``fields``)."""
        i = self.corpus.index[doc_id]
        return join_fields(self.corpus.titles[i], self.corpus.texts[i], self.manifest.get("fields", "title+text"))

    def explainable_models(self) -> list[str]:
        """The models ``explain`` takes: the bundle's DSSM/CLSM ones, in the bundle's order."""
        from ...models.neural import NeuralEncoder

        return [name for name, retriever in self.semantic.items() if isinstance(retriever.encoder, NeuralEncoder)]

    def explain(self, query: str, doc_id: str, *, model: str | None = None, top: int = 5) -> dict[str, Any]:
        """``models.explain`` for a query and a bundle document with a DSSM/CLSM model of the bundle."""
        from ...models.explain import explain
        from ...models.neural import NeuralEncoder

        if doc_id not in self.corpus.index:
            raise KeyError(f"no document {doc_id!r}")
        name = model or next(iter(self.semantic), None)
        if name is None or name not in self.semantic:
            raise ValueError(f"no model {model!r} in this bundle" if model else "this bundle has no neural model")
        enc = self.semantic[name].encoder
        if not isinstance(enc, NeuralEncoder):
            raise ValueError(f"explain needs a DSSM or CLSM model, {name} is not one")
        with self._locks[id(self.semantic[name])]:
            return {"doc_id": doc_id, **explain(enc, self.searched(query), self.document_text(doc_id), top=top)}

    def searched(self, query: str, correct: bool | None = None) -> str:
        """The text a search for ``query`` runs with: spell-corrected when ``correct`` says so (None:
        as the bundle was loaded, ``correct_queries``), else ``query`` itself."""
        if self.correct_queries if correct is None else correct:
            return self.corrector.correct(query)  # type: ignore[union-attr]  # guarded
        return query

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        model: str | None = None,
        merge_by: str = "union",
        n_lexical: int = N_LEXICAL,
        n_semantic: int = N_SEMANTIC,
        correct: bool | None = None,
        allowed: np.ndarray | None = None,
        filters: Filter | str | Sequence[str] | None = None,
        facets: int = 0,
    ) -> Result:
        """Lexical top ``n_lexical`` and semantic top ``n_semantic`` (run concurrently by the
        ``HybridRetriever`` of ``model``), merged by ``merge_by``; re-ranked by the ranker if the
        bundle has one; the top ``k`` with their sources and a timing breakdown. The default merge,
        union, keeps the lexical ranking a weak encoder could spoil. A two-stage bundle (its ranker
        has stage features) retrieves at the depths its ranker was trained for, and every hit's
        score is the ranker's. ``search_many`` of one query.

        Args:
            query: the query text (not blank).
            k: the hits returned, >= 1.
            model: the encoder whose semantic stage runs (None: the bundle's first, if any).
            merge_by: "union" (lexical order, semantic-only hits after), "rrf" or "interpolate" (weight 0.5, min-max).
            n_lexical: lexical stage-1 depth (at least ``k``).
            n_semantic: semantic stage-1 depth.
            correct: search the query spell-corrected (``SpellCorrector``; None: as the bundle was loaded).
            allowed: bool per document position (the corpus's order), True where a document may be
                returned (None: all); applied inside every stage's top-k (``search_many``).
            filters: filter expressions on the facet and numeric fields (``index.filters``: e.g.
                ``["brand:DEWALT", "price:[10,100]"]``) or a parsed ``Filter``; AND'ed with ``allowed``.
            facets: count the top this many values of each facet field among the query's stage-1
                candidates under the filter (``Result.facets``; 0: no counts).

        Returns:
            The query's ``Result``: its hits, best first, the stage times in ms and the text searched.

        Raises:
            ValueError: a blank query, ``k`` < 1, an unknown ``merge_by`` or ``model``, or ``correct``
                without a spelling corrector in the bundle."""
        return self.search_many(
            [query],
            k,
            model=model,
            merge_by=merge_by,
            n_lexical=n_lexical,
            n_semantic=n_semantic,
            correct=correct,
            allowed=allowed,
            filters=filters,
            facets=facets,
        )[0]

    def search_many(
        self,
        queries: Sequence[str],
        k: int = 10,
        *,
        model: str | None = None,
        merge_by: str = "union",
        n_lexical: int = N_LEXICAL,
        n_semantic: int = N_SEMANTIC,
        correct: bool | None = None,
        allowed: np.ndarray | None = None,
        filters: Filter | str | Sequence[str] | None = None,
        facets: int = 0,
    ) -> list[Result]:
        """``search`` for several queries in one pass (the service's micro-batches): one encoder call
        and one vector search for all of them, one feature matrix and one ranker prediction for all
        their candidates. Each query gets the hits ``search`` gives it alone (a batched encoder may
        round its embedding in the last bit, so scores agree to float rounding); the timing is the
        batch's (``batch``: how many distinct queries it searched). A spell-corrected query is
        searched with the corrected text in every stage.

        ``allowed`` (one mask for the whole call: bool per document position in the corpus's
        order; None: all) keeps every stage inside the documents it marks True: the lexical
        kernel's and the vector search's top-k are taken over them alone (each stage's depth
        filled from them), and so are the ranker's candidates; the answer is the search of the
        collection holding only those documents (with the whole collection's statistics).
        ``filters`` (``index.filters``) compile to such a mask (cached per filter), AND'ed with
        ``allowed``. With ``facets`` > 0 each result carries the facet counts of its query's
        stage-1 candidates under the mask (the lexical ∪ semantic hits at the stage depths: the
        set the ranker orders), the top ``facets`` values per facet field.

        Args:
            queries: the query texts (none blank).
            k: the hits returned per query, >= 1.
            model: the encoder whose semantic stage runs (None: the bundle's first, if any).
            merge_by: "union" (lexical order, semantic-only hits after), "rrf" or "interpolate" (weight 0.5, min-max).
            n_lexical: lexical stage-1 depth (at least ``k``).
            n_semantic: semantic stage-1 depth.
            correct: search each query spell-corrected (``SpellCorrector``; None: as the bundle was loaded).
            allowed: the documents that may be returned (None: all).
            filters: filter expressions or a parsed ``Filter`` (None: none).
            facets: facet values counted per field (0: none).

        Returns:
            One ``Result`` per query, in order; ``Result.query`` is the text searched.

        Raises:
            ValueError: a blank query, ``k`` < 1, an unknown ``merge_by`` or ``model``, or ``correct``
                without a spelling corrector in the bundle.
            FilterError: a filter expression that does not read against the bundle's fields."""
        t0 = time.perf_counter()
        self.check_search(queries, k, merge_by, correct, facets)
        queries = [self.searched(q, correct) for q in queries]
        mask = check_allowed(allowed, len(self.corpus))
        if filters is not None:
            flt = filters if isinstance(filters, Filter) else self.filters.parse(filters)
            fmask = self.filters.mask(flt)
            if fmask is not None:
                mask = fmask if mask is None else mask & fmask
        # the mask is part of a cached result's key (by digest: the array itself is not hashable)
        mask_key = None if mask is None else hashlib.blake2b(np.packbits(mask).tobytes(), digest_size=16).digest()
        settings = (k, model, merge_by, n_lexical, n_semantic, mask_key, facets)
        return self.results.answer(
            queries,
            settings,
            t0,
            lambda todo: self._search(todo, k, model, merge_by, n_lexical, n_semantic, t0, mask, facets),
        )

    def check_search(self, queries: Sequence[str], k: int, merge_by: str, correct: bool | None, facets: int) -> None:
        """What ``search_many`` refuses before any work (``check_search``)."""
        check_search(queries, k, merge_by, correct, facets, self.corrector is not None)

    def __len__(self) -> int:
        return len(self.corpus)

    def hybrid(self, model: str | None = None) -> HybridRetriever:
        """The stage-1 retriever of ``model``'s encoder (None: the bundle's first; a bundle without
        an encoder has one, the lexical stage alone)."""
        hybrid = self._hybrid.get(model if model is not None else next(iter(self._hybrid)))
        if hybrid is None:
            raise ValueError(f"no model {model!r} in this bundle (has {', '.join(self.semantic) or 'none'})")
        return hybrid

    def lock(self, model: Any) -> threading.Lock:
        """The lock held around ``model``'s calls (one of the bundle's stage models: their caches
        are not thread-safe)."""
        return self._locks[id(model)]

    def _stage1(
        self,
        queries: list[str],
        k: int,
        model: str | None,
        merge_by: str,
        n_lexical: int,
        n_semantic: int,
        allowed: np.ndarray | None = None,
        every: bool = False,
    ) -> tuple[list[list[HybridHit]], dict[str, float]]:
        """Stage 1 of ``search_many`` (and of ``explain_rank``): each query's merged hits from
        ``model``'s hybrid, all of them when a ranker re-orders them or ``every`` says so (the
        caller cuts them), at the ranker's depths in a two-stage bundle."""
        hybrid = self.hybrid(model)
        if self.two_stage:
            n_lexical, n_semantic = self.ranker.n_lexical, self.ranker.n_semantic  # type: ignore[union-attr]  # two-stage
        else:
            n_lexical, n_semantic = max(n_lexical, k), max(n_semantic, 1)
        return hybrid.timed_search(
            queries,
            None if self.ranker is not None or every else self._kept(k),
            scorer=merge_by,
            n_lexical=n_lexical,
            n_semantic=n_semantic,
            allowed=allowed,
        )

    def _kept(self, k: int) -> int:
        """Hits a search keeps ranked before stage 3: ``k``, or the depth stage 3 re-scores if deeper."""
        return max(k, self.rescore_depth) if self.rescore else k

    def _ranked(
        self, hybrid: HybridRetriever, queries: list[str], k: int, allowed: np.ndarray | None = None
    ) -> tuple[list[list[HybridHit]], dict[str, float], list[Candidates]]:
        """A two-stage search on arrays (``HybridRetriever.candidates``, ``score_candidates``):
        each query's best ``k`` candidates by the ranker's score, ties by doc id, the only ones
        that become ``HybridHit``s (and the candidates). The same hits as stage 1's merged hits
        ranked one by one."""
        rk: Any = self.ranker
        cands, timing = hybrid.candidates(queries, n_lexical=rk.n_lexical, n_semantic=rk.n_semantic, allowed=allowed)
        t2 = time.perf_counter()
        with self._locks[id(rk)]:
            scores = rk.score_candidates(queries, cands)
        ids = hybrid.doc_ids
        if self._id_ranks is None:  # every model of a bundle indexes the corpus's ids in its order
            self._id_ranks = id_ranks(self.corpus.ids)
        ranks = self._id_ranks
        found = [c.hits(ids, best_k(s, ranks[c.positions], k), s) for c, s in zip(cands, scores, strict=True)]
        timing["rank_ms"] = 1000 * (time.perf_counter() - t2)
        return found, timing, cands

    def _search(
        self,
        queries: list[str],
        k: int,
        model: str | None,
        merge_by: str,
        n_lexical: int,
        n_semantic: int,
        t0: float,
        allowed: np.ndarray | None = None,
        facets: int = 0,
    ) -> list[Result]:
        hybrid = self.hybrid(model)
        counted: list[Tally | None] = [None] * len(queries)
        if self.two_stage and hybrid.positional:  # (the merge order does not matter: all re-ranked)
            found, timing, cands = self._ranked(hybrid, queries, self._kept(k), allowed)
            if facets:
                counted = [self.filters.tally(c.positions) for c in cands]
        else:
            found, timing = self._stage1(queries, k, model, merge_by, n_lexical, n_semantic, allowed, every=facets > 0)
            if facets:
                index = self.corpus.index
                counted = [
                    self.filters.tally(np.array([index[h.doc_id] for h in hits], dtype=np.int64)) for hits in found
                ]
                if self.ranker is None:
                    found = [hits[: self._kept(k)] for hits in found]
        if self.ranker is not None and "rank_ms" not in timing:
            t2 = time.perf_counter()
            with self._locks[id(self.ranker)]:
                scores = (
                    self.ranker.score_hits(queries, found)  # type: ignore[attr-defined]  # two-stage ranker
                    if self.two_stage
                    else self.ranker.score(queries, [[h.doc_id for h in hits] for hits in found])
                )
            ranked = []
            for hits, s in zip(found, scores, strict=True):
                ranked.append([replace(hits[i], score=float(s[i])) for i in _top(hits, s, self._kept(k))])
            found = ranked
            timing["rank_ms"] = 1000 * (time.perf_counter() - t2)
        if self.rescore:
            t3 = time.perf_counter()
            with self._locks[id(self.rescorer)]:
                found = rescore_top(
                    self.rescorer,
                    queries,
                    found,
                    self.rescore_depth,
                    lambda h: self.document_text(h.doc_id),
                    self.rescore_weight,
                )
            timing["rescore_ms"] = 1000 * (time.perf_counter() - t3)
        timing["total_ms"] = 1000 * (time.perf_counter() - t0)
        timing["batch"] = float(len(queries))
        return [
            Result(hits[:k], dict(timing), q, None if c is None else c.counts(facets), c)
            for q, hits, c in zip(queries, found, counted, strict=True)
        ]

    def explain_rank(self, query: str, doc_id: str, *, top: int = 10, model: str | None = None) -> dict[str, Any]:
        """Why a bundle with a LambdaMART ranker ranks ``doc_id`` where it does for ``query``: which stage found
        it, both stage scores and ranks, the ranker's score and the ``top`` feature contributions
        by size (LightGBM's per-prediction SHAP values; contributions + bias = score). A document
        stage 1 did not return has no ranker score (its ``source`` is None)."""
        if not hasattr(self.ranker, "explain_hits"):
            raise ValueError("this bundle has no LambdaMART ranker to explain")
        if doc_id not in self.corpus.index:
            raise KeyError(f"no document {doc_id!r}")
        if top < 1:
            raise ValueError(f"top must be >= 1, got {top}")
        if not query.strip():
            raise ValueError("empty query")
        query = self.searched(query)  # the text search() ranks
        rk: Any = self.ranker
        (hits,), _ = self._stage1([query], 1, model, "union", N_LEXICAL, N_SEMANTIC)  # as search() with its defaults
        at = next((i for i, h in enumerate(hits) if h.doc_id == doc_id), None)
        if at is None:
            return {
                "doc_id": doc_id,
                "score": None,
                "bias": None,
                "source": None,
                "lexical_score": None,
                "semantic_score": None,
                "lexical_rank": None,
                "semantic_rank": None,
                "contributions": [],
            }
        with self._locks[id(self.ranker)]:
            scores, X, contrib, base = rk.explain_hits(query, hits)
        h = hits[at]
        rows = sorted(
            (
                {"feature": f, "value": float(X[at, j]), "contribution": float(contrib[at, j])}
                for j, f in enumerate(rk.feature_names)
            ),
            key=lambda r: -abs(r["contribution"]),
        )
        return {
            "doc_id": doc_id,
            "score": float(scores[at]),
            "bias": float(base[at]),
            "source": h.sources.name,
            "lexical_score": h.lexical,
            "semantic_score": h.semantic,
            "lexical_rank": h.lexical_rank,
            "semantic_rank": h.semantic_rank,
            "contributions": rows[:top],
        }

    def hits(self, result: Result) -> list[Hit]:
        """Plain (rank, id, score, title, text, stored fields) rows for a result."""
        out = []
        for r, h in enumerate(result.hits, 1):
            i = self.corpus.index[h.doc_id]
            out.append(Hit(r, h.doc_id, h.score, self.corpus.titles[i], self.corpus.texts[i], self.corpus.fields(i)))
        return out

    def close(self) -> None:
        """Stop the search threads (graceful shutdown)."""
        for h in self._hybrid.values():
            h.close()
