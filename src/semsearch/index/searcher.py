"""One search protocol for every kind of index the service serves: a loaded ``Bundle``, a
``LiveIndex`` (a bundle with its changes), a ``ShardedBundle`` (its shards searched and merged)
and a compared pair (``serving.compare``). Each is a ``Searcher``: it answers a ``SearchRequest``
(every search option, checked once, here) with a ``Result``, and a batch of requests with one
result each; what the kinds do beyond searching they declare in ``capabilities``.

``SearchBase`` holds what every searcher shares: the convenience forms
``search("cordless drill", k=5)`` and ``search_many(queries, k)`` (building requests), the
grouping of a batch into runs of equal options, the checks that need the searcher (a model it
has, a spelling corrector, the mask's length) and the cut of each page at its ``offset``; a
searcher writes only ``search_group``, the search of several queries under one set of options."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from ..models.postings import check_allowed
from .filters import Filter, Tally
from .hybrid import SCORERS, HybridHit

if TYPE_CHECKING:
    from ..text import SpellCorrector
    from .filters import FilterIndex

N_LEXICAL, N_SEMANTIC = 300, 20
"""Stage-1 depths of a search without a two-stage ranker (the BERT paper's Sec. 4.4)."""


@dataclass(frozen=True)
class Hit:
    """One hit as plain values (``hits``): its rank from 1, id, score and document."""

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
    """With ``facets`` asked: the facet counts of the query's stage-1 candidates under its filter
    (``FilterIndex.counts``); else None."""
    tally: Tally | None = None
    """The counts behind ``facets``, untruncated (``Tally``: a served delta adds its own)."""

    def cut(self, offset: int) -> None:
        """Keep the hits from ``offset`` on (a request's page; the result is the caller's own)."""
        if offset:
            self.hits = self.hits[offset:]


def check_query(query: str) -> None:
    """A query must not be blank (``str.strip`` leaves something)."""
    if not query.strip():
        raise ValueError("empty query")


@dataclass(frozen=True, eq=False)  # (no field-wise ==: a mask is an array; ``options`` compares requests)
class SearchRequest:
    """One search and every option it takes; the options a searcher does not need to know are
    checked when the request is made (a blank query, ``k`` < 1, ``offset`` < 0, an unknown
    ``merge_by``, ``facets`` < 0), the others by the searcher (``SearchBase.check``).

    Args:
        query: the query text (not blank).
        k: the hits returned, >= 1 (the page: ranks ``offset + 1`` to ``offset + k``).
        offset: 0-based rank of the first hit returned; the search ranks ``offset + k`` hits
            (``depth``) and the answer is the page cut from them.
        model: the encoder whose semantic stage runs (None: the searcher's first, if any).
        merge_by: "union" (lexical order, semantic-only hits after), "rrf" or "interpolate"
            (weight 0.5, min-max).
        n_lexical: lexical stage-1 depth (at least ``depth``).
        n_semantic: semantic stage-1 depth.
        correct: search the query spell-corrected (``SpellCorrector``; None: as the searcher was
            loaded).
        allowed: bool per document position (the corpus's order), True where a document may be
            returned (None: all); applied inside every stage's top-k.
        filters: filter expressions on the facet and numeric fields (``index.filters``: e.g.
            ``["brand:DEWALT", "price:[10,100]"]``) or a parsed ``Filter``; AND'ed with ``allowed``.
        facets: count the top this many values of each facet field among the query's stage-1
            candidates under the filter (``Result.facets``; 0: no counts).
        client: the client's opaque key (a compared pair's ab mode buckets users by it).
        nonce: the search's random draw (a compared pair seeds its interleaving with it, and
            buckets a search without a client by it); None: a search of its own."""

    query: str
    k: int = 10
    offset: int = 0
    model: str | None = None
    merge_by: str = "union"
    n_lexical: int = N_LEXICAL
    n_semantic: int = N_SEMANTIC
    correct: bool | None = None
    allowed: np.ndarray | None = None
    filters: Filter | str | tuple[str, ...] | None = None
    facets: int = 0
    client: str | None = None
    nonce: str | None = None

    def __post_init__(self) -> None:
        check_query(self.query)
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.offset < 0:
            raise ValueError(f"offset must be >= 0, got {self.offset}")
        if self.merge_by not in SCORERS:
            raise ValueError(f"merge must be one of {', '.join(SCORERS)}, got {self.merge_by!r}")
        if self.facets < 0:
            raise ValueError(f"facets must be >= 0, got {self.facets}")
        if self.filters is not None and not isinstance(self.filters, Filter | str):
            object.__setattr__(self, "filters", tuple(self.filters))  # (expressions: hashable)

    @property
    def depth(self) -> int:
        """The hits a searcher ranks for this request: ``offset + k`` (the page is cut from them)."""
        return self.offset + self.k

    @property
    def options(self) -> tuple[Any, ...]:
        """Everything but the query, the page's place and the search's own draw (``offset``,
        ``client``, ``nonce``): requests with equal options are searched together (one
        ``search_group``, at their common ``depth``), each cut at its own offset. A mask counts by
        identity (one array for a batch)."""
        return (
            self.depth,
            self.model,
            self.merge_by,
            self.n_lexical,
            self.n_semantic,
            self.correct,
            None if self.allowed is None else id(self.allowed),
            self.filters,
            self.facets,
        )

    def result_key(self, *documents: Any) -> tuple[Any, ...]:
        """The key a searcher keeps this request's result under (``ResultCache``), beside the
        query as searched: the options that shape the ranking, with ``documents`` standing for
        the documents it may return (hashable: a mask's digest, a filter), which the searcher
        computes (``correct`` is in the query searched)."""
        return (self.depth, self.model, self.merge_by, self.n_lexical, self.n_semantic, self.facets, *documents)


@dataclass(frozen=True)
class Capabilities:
    """What a searcher does beyond searching (the service reads these, never the searcher's class).

    ``writes``: takes document changes (``upsert``, ``delete``); ``explain``: the bundle it
    serves (``BundleSearcher.base``, a compared pair's A) answers ``explain`` and
    ``explain_rank`` (a sharded bundle's refuse); ``fallible``: a search may fail because a
    vector store or a shard elsewhere does not answer (the service's 503); ``remote``: a search
    waits on other processes (the service runs its passes in threads, and reports each call
    through ``Observed.observe``)."""

    writes: bool = False
    explain: bool = False
    fallible: bool = False
    remote: bool = False


@runtime_checkable
class Searcher(Protocol):
    """What answers searches: ``search_requests`` (a batch: one result per request, in order) and
    ``search_request`` (one), the rows of a result's hits, and what else it can do."""

    @property
    def capabilities(self) -> Capabilities: ...

    def search_request(self, request: SearchRequest) -> Result: ...

    def search_requests(self, requests: Sequence[SearchRequest]) -> list[Result]: ...

    def hits(self, result: Result) -> list[Hit]: ...


@runtime_checkable
class BundleSearcher(Searcher, Protocol):
    """A searcher over one bundle's documents and models (a ``Bundle`` or a ``ShardedBundle``):
    what the service describes and checks its requests against."""

    path: Any
    manifest: dict[str, Any]
    ranker: Any
    lexical: Any
    filters: FilterIndex
    corrector: SpellCorrector | None

    @property
    def semantic(self) -> Mapping[str, Any]: ...

    @property
    def base(self) -> Any:
        """The plain bundle searched in this process (a ``Bundle``: itself), or None (a sharded
        bundle: its documents are in its shards)."""

    @property
    def filterable(self) -> bool: ...

    def __len__(self) -> int: ...

    def explainable_models(self) -> list[str]: ...

    def explain(self, query: str, doc_id: str, *, model: str | None = None, top: int = 5) -> dict[str, Any]: ...

    def explain_rank(self, query: str, doc_id: str, *, top: int = 10, model: str | None = None) -> dict[str, Any]: ...

    def close(self) -> None: ...


@runtime_checkable
class Observed(Protocol):
    """A searcher whose calls to other processes can be watched: ``observe`` is called with
    (shard, round, seconds, answered) for each (the service's metrics)."""

    observe: Any


class SearchBase:
    """The search entry points every searcher shares (the module docstring). A subclass gives
    ``search_group`` and, for ``check``, ``semantic`` (its models by name), ``corrector`` and
    its length; ``check`` may be widened (a searcher refusing an option)."""

    semantic: Mapping[str, Any]
    corrector: SpellCorrector | None

    def search(self, query: str, k: int = 10, **options: Any) -> Result:
        """The result of ``SearchRequest(query, k, **options)`` (its fields are the options)."""
        return self.search_requests([SearchRequest(query, k, **options)])[0]

    def search_many(self, queries: Sequence[str], k: int = 10, **options: Any) -> list[Result]:
        """One result per query, each ``SearchRequest(query, k, **options)``, searched together
        (one encoder call, one vector search, one ranker prediction for all)."""
        for i, q in enumerate(queries):
            try:
                check_query(q)
            except ValueError:
                raise ValueError("empty query" if len(queries) == 1 else f"empty query at position {i}") from None
        return self.search_requests([SearchRequest(q, k, **options) for q in queries])

    def search_request(self, request: SearchRequest) -> Result:
        """The result of one request."""
        return self.search_requests([request])[0]

    def search_requests(self, requests: Sequence[SearchRequest]) -> list[Result]:
        """One result per request, in order: the requests of equal ``options`` checked once and
        searched together (``search_group``), each result cut to its request's page."""
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(r.options, []).append(i)
        out: list[Result | None] = [None] * len(requests)
        for at in groups.values():
            first = requests[at[0]]
            self.check(first)
            found = self.search_group([requests[i] for i in at])
            for i, result in zip(at, found, strict=True):
                result.cut(requests[i].offset)
                out[i] = result
        return out  # type: ignore[return-value]  # filled

    def check(self, request: SearchRequest) -> None:
        """What this searcher refuses of a request before any work: a model it does not have,
        ``correct`` without a spelling corrector, a mask not of its length."""
        if request.model is not None and request.model not in self.semantic:
            raise ValueError(f"no model {request.model!r} in this bundle (has {', '.join(self.semantic) or 'none'})")
        if request.correct and self.corrector is None:
            raise ValueError("this bundle has no spelling corrector (build it again to have one)")
        check_allowed(request.allowed, len(self))  # type: ignore[arg-type]  # (every searcher has a length)

    def search_group(self, requests: Sequence[SearchRequest]) -> list[Result]:
        """Search ``requests`` (equal ``options``, checked; the first's are read) together: each
        result's hits are its ``depth`` best (``search_requests`` cuts the page), a result of
        its own (the caller may cut it)."""
        raise NotImplementedError


__all__ = [
    "N_LEXICAL",
    "N_SEMANTIC",
    "BundleSearcher",
    "Capabilities",
    "Hit",
    "Observed",
    "Result",
    "SearchBase",
    "SearchRequest",
    "Searcher",
    "check_query",
]
