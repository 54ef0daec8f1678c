"""``GET /search`` over one bundle: hits ``[offset, offset + k)`` of its ranking, with the query
terms that matched in each hit marked (``text.highlight``), what their scores are (``score_by``)
and, with an event log, the answer logged as an impression under its ``search_id``. The reading
and checking of its parameters (``read``) and its documentation (``add_search_route``) are also
the compared /search's (``routers.compare``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine
from typing import Any, NamedTuple

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...index.filters import MAX_FILTERS, Filter, FilterError
from ...index.hybrid import SCORERS, HybridHit
from ...index.searcher import Hit, SearchRequest
from .. import schemas
from ..events import CLIENT_HEADER, CLIENT_ID, valid_client_id
from ..highlighter import Highlighter
from ..state import ServiceState, service_of
from .common import JSON, Direct, integer, query_doc, query_param, query_text, strict_pairs
from .errors import BadRequest

MAX_FILTER_CHARS = 200
"""Longest filter expression accepted (longer: 422)."""
MAX_FACETS = 100
"""Most values a facet field's counts list (``facets``)."""
CLIENT_DOC = (
    "An opaque key of the client (1-64 letters, digits, - or _; the page's is random), logged with "
    "the impression when the service logs events; never the client's address."
)
SEARCH_DOC = """Hits ``[offset, offset + k)`` of the ranking, with source (LEXICAL, SEMANTIC, BOTH),
score (the ranker's if the bundle has one, else the merged one: ``score_by`` says which),
stage scores and ranks, highlight spans and timings (ms).

``rank`` is the absolute 1-based rank. ``highlights``: ``[start, end)`` spans, in UTF-16
code units (JavaScript string indices), of the words of ``highlight_field`` (``title``, or
``text`` when the title is empty) whose normalised form is a query term under the bundle's
lexical analyzer. ``k`` is cut to ``max_k - offset`` (no hit past the depth limit is served;
the answer says the ``k`` searched). ``next_offset``: the next page's offset, null when this page is the
last (fewer than k hits, or past the depth limit).

Pages are cut from ``Bundle.search(q, offset + k)`` (ties broken by doc id), so they
continue each other exactly while offset + k stays within the lexical stage's depth (300
candidates); deeper, Bundle.search deepens that stage to offset + k, which keeps the union's
order but may reorder rrf, interpolate or a ranker's list past rank 300.

Runs on the event loop itself (``async``), not in FastAPI's thread pool (its hand-offs and
GIL switches cost more than they overlap); the searches that arrive together run as one
pass (``SearchBatcher``), whose stage times ``timing_ms`` gives, with ``batch`` (how many
distinct searches the pass ran) and ``queue_ms`` (how long this one waited for it)."""
"""/search's description in the OpenAPI document (the same whether or not two bundles are compared)."""


class Asked(NamedTuple):
    """A /search request's parameters, read and checked (``read``)."""

    text: str
    kk: int
    start: int
    merge: str
    model: str | None
    client: str | None
    flt: Filter
    facets: int


def _k(params: dict[str, str], max_k: int) -> int:
    k = integer(params, "k", 10)
    if not 1 <= k <= max_k:
        raise BadRequest(f"parameter 'k' must be in [1, {max_k}], got {k}", 422)
    return k


def _offset(params: dict[str, str], max_k: int) -> int:
    offset = integer(params, "offset", 0)
    if not 0 <= offset < max_k:
        raise BadRequest(f"parameter 'offset' must be in [0, {max_k - 1}], got {offset}", 422)
    return offset


def _facets(params: dict[str, str], filterable: bool) -> int:
    n = integer(params, "facets", 10 if filterable else 0)
    if not 0 <= n <= MAX_FACETS:
        raise BadRequest(f"parameter 'facets' must be in [0, {MAX_FACETS}], got {n}", 422)
    return n if filterable else 0


def _filter(pairs: list[tuple[str, str]], state: ServiceState) -> Filter:
    """The ``filter`` parameters parsed against the bundle's fields (and, compared, B's)."""
    b, compare, filterable = state.bundle, state.compare, state.filterable
    exprs = [v for name, v in pairs if name == "filter"]
    if not exprs:
        return Filter()
    for e in exprs:
        if len(e) > MAX_FILTER_CHARS:
            raise BadRequest(f"parameter 'filter' {e[:40]!r}...: longer than {MAX_FILTER_CHARS} characters", 422)
    if not filterable and b.filters.fields:
        raise BadRequest(
            "parameter 'filter': this service cannot filter (a filter runs inside both stages, which needs the "
            "faiss vector store and, when two bundles are compared, facet fields in both)",
            422,
        )
    try:
        flt = b.filters.parse(exprs)
        if compare is not None:
            compare.other.filters.mask(compare.other.filters.parse(exprs))
    except FilterError as e:
        raise BadRequest(f"parameter 'filter': {e}", 422) from None
    return flt


def read(request: Request, state: ServiceState) -> Asked:
    """The request's parameters, each checked (400 or 422 naming the first bad one)."""
    max_k, models, compare = state.max_k, state.models, state.compare
    pairs = strict_pairs(request)
    params = dict(pairs)
    text, start = query_text(params, "q", state.max_query_chars), _offset(params, max_k)
    kk = min(_k(params, max_k), max_k - start)  # the depth limit: a page ends at rank max_k
    client = request.headers.get(CLIENT_HEADER)
    if not valid_client_id(client):
        raise BadRequest(f"header {CLIENT_HEADER} must be 1-64 letters, digits, '-' or '_'", 422)
    merge, model = params.get("merge", "union"), params.get("model")
    if merge not in SCORERS:
        raise BadRequest(f"parameter 'merge' must be one of {', '.join(SCORERS)}", 422)
    if model is not None and model not in models:
        where = "both compared bundles" if compare is not None else "this bundle"
        raise BadRequest(f"no model {model!r} in {where}", 422)
    flt, facets = _filter(pairs, state), _facets(params, state.filterable)
    return Asked(text, kk, start, merge, model, client, flt, facets)


def hit_json(rank: int, h: HybridHit, row: Hit, highlighter: Highlighter, terms: frozenset[str]) -> dict[str, Any]:
    """One hit of a /search answer: its absolute ``rank``, stage scores and ranks, stored document
    (``row``) and the spans of ``terms`` (``Highlighter.terms``) in its title, or its text when the
    title is empty; the compared /search adds the hit's team."""
    field = "title" if row.title else "text"
    return {
        "rank": rank,
        "doc_id": h.doc_id,
        "title": row.title,
        "text": row.text,
        "source": h.sources.name,
        "score": h.score,
        "lexical_score": h.lexical,
        "semantic_score": h.semantic,
        "lexical_rank": h.lexical_rank,
        "semantic_rank": h.semantic_rank,
        "fields": row.fields,
        "highlight_field": field,
        "highlights": highlighter.spans(terms, row.title or row.text),
    }


async def search(request: Request) -> Response:
    """/search over the served bundle (``SEARCH_DOC``)."""
    state = service_of(request)
    batcher, highlighter, events, max_k = state.batcher, state.highlighter, state.events, state.max_k
    text, kk, start, merge, model, client, flt, facets = read(request, state)
    # one deterministic ranking, cut: the top offset + k, then the page (ties broken by id)
    result = await batcher.search(
        SearchRequest(text, kk, offset=start, model=model, merge_by=merge, filters=flt, facets=facets)
    )
    page_hits = result.hits
    terms = highlighter.terms(result.query)  # the words searched (spell-corrected or as typed)
    rows = batcher.searcher.hits(result)
    hits = [hit_json(start + row.rank, h, row, highlighter, terms) for row, h in zip(rows, page_hits, strict=True)]
    more = len(page_hits) == kk and start + 2 * kk <= max_k
    search_id = None
    if events is not None:  # the impression goes to the log's buffer; its thread writes it
        search_id = events.impression(
            text,
            tuple(str(h.doc_id) for h in page_hits),  # tuples of strings: the cyclic GC stops tracking them
            tuple(str(h.sources.name) for h in page_hits),
            k=kk,
            offset=start,
            client_id=client,
        )
    return JSON(
        {
            "search_id": search_id,
            "query": text,
            "corrected_query": result.query if result.query != text else None,
            "k": kk,
            "offset": start,
            "merge": merge,
            "score_by": state.score_by(merge),
            "next_offset": start + kk if more else None,
            "hits": hits,
            "filters": flt.expressions(),
            "facets": result.facets or {},
            "timing_ms": result.timing,
        }
    )


def _filter_param(state: ServiceState) -> dict[str, Any]:
    """The repeatable ``filter`` parameter's OpenAPI entry: the bundle's filterable fields."""
    b, filterable = state.bundle, state.filterable
    return {
        **query_param(
            "filter",
            "Filter on a facet or numeric field, repeatable: field:value (a facet equals the value), "
            "field:[lo,hi] (a numeric field within lo and hi, inclusive; * leaves an end open) or "
            "field:number. Expressions on one field are OR'ed, on different fields AND'ed; applied inside "
            "both stages' top-k. This bundle's fields: "
            + (
                f"facets {', '.join(b.filters.facets) or 'none'}; numeric {', '.join(b.filters.numeric) or 'none'}"
                if filterable
                else "none (no filter is accepted)"
            )
            + ". A filter that does not read against them: 422 naming it.",
            {
                "type": "array",
                "items": {
                    "type": "string",
                    "maxLength": MAX_FILTER_CHARS,
                    # (a filterable field's name first: the rest is checked by the handler)
                    **(
                        {"pattern": r"^\s*(?:" + "|".join(re.escape(f) for f in b.filters.fields) + r")\s*:\s*\S"}
                        if filterable
                        else {}
                    ),
                },
                "maxItems": MAX_FILTERS if filterable else 0,
            },
        ),
        "style": "form",
        "explode": True,
    }


def search_params(state: ServiceState) -> list[dict[str, Any]]:
    """/search's parameters as the OpenAPI document lists them (the handler reads and checks them itself)."""
    max_query_chars, max_k, models = state.max_query_chars, state.max_k, state.models
    model_schema: dict[str, Any] = (
        {"type": "string", "enum": models} if models else {"anyOf": [{"type": "string"}, {"type": "null"}]}
    )
    return [
        query_param(
            "q",
            f"Query text, not blank, at most {max_query_chars} characters (blank or missing: 400; longer: 422).",
            {"type": "string", **query_doc(max_query_chars)},
            required=True,
        ),
        query_param(
            "k",
            f"Number of hits, 1 to {max_k}; cut to {max_k} - offset (the depth limit: hits past rank {max_k} "
            "are never served; the answer's k says how many were asked for after the cut).",
            {"type": "integer", "minimum": 1, "maximum": max_k, "default": 10},
        ),
        query_param(
            "offset",
            f"0-based rank of the first hit (paging), below {max_k}; k is cut so that offset + k <= {max_k}.",
            {"type": "integer", "minimum": 0, "maximum": max_k - 1, "default": 0},
        ),
        query_param(
            "merge",
            "union (lexical order, semantic-only hits after), rrf or interpolate.",
            {"type": "string", "enum": list(SCORERS), "default": "union"},
        ),
        query_param("model", "Neural model of the bundle (default: the first).", model_schema),
        _filter_param(state),
        query_param(
            "facets",
            f"Values counted per facet field among the stage-1 candidates under the filter, 0 to {MAX_FACETS} "
            "(0: no counts); ignored (no counts) when the bundle has no facet or numeric fields.",
            {"type": "integer", "minimum": 0, "maximum": MAX_FACETS, "default": 10},
        ),
        {
            "name": CLIENT_HEADER,
            "in": "header",
            "required": False,
            "description": CLIENT_DOC,
            "schema": {"type": "string", "pattern": CLIENT_ID, "description": CLIENT_DOC, "title": CLIENT_HEADER},
        },
    ]


def add_search_route(
    router: APIRouter, state: ServiceState, endpoint: Callable[[Request], Coroutine[Any, Any, Response]]
) -> None:
    """/search on ``router`` answered by ``endpoint``, documented by ``SEARCH_DOC`` and ``search_params``.

    The endpoint reads and checks its parameters itself (``search_params`` documents them; FastAPI
    validating them first cost more than the handler's own checks), and returns a ``JSON``
    response; its route is a ``Direct`` one (no dependency solving or encoding pass on the hot
    path); response_model documents the answer."""
    router.add_api_route(
        "/search",
        endpoint,
        methods=["GET"],
        name="search",  # the operation id's stem, whichever endpoint answers
        summary="Lexical ∪ semantic search",
        description=SEARCH_DOC,
        response_class=JSON,
        response_model=schemas.SearchResponse,
        responses=schemas.errors(400, 414, 422, *state.guarded, *state.store_errors),
        openapi_extra={"parameters": search_params(state)},
        route_class_override=Direct,
    )


def router(state: ServiceState) -> APIRouter:
    """/search over the served bundle alone (compared with another: ``routers.compare``)."""
    r = APIRouter()
    add_search_route(r, state, search)
    return r
