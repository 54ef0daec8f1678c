"""The service's handlers: /search, /explain, /events, /health, /ready, /metrics, the search page
and its assets, with the error handlers that turn each failure into a JSON ``{"error": ...}``
answer. ``/search`` pages with ``offset``, marks the query terms that matched in each hit
(``text.highlight``), says what its scores are (``score_by``) and, with an event log, logs the
answer as an impression under its ``search_id``; ``POST /events`` logs a click on a shown result;
``/explain`` gives the ranker's feature contributions to a hit's score when the bundle has a
ranker."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import orjson
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..index.bundle import Bundle
from ..index.bundle.coordinator import ShardUnavailable
from ..index.filters import MAX_FILTERS, Filter, FilterError
from ..index.hybrid import SCORERS
from ..index.live import Document, LiveIndex
from ..index.pgstore import PgStoreError
from ..index.searcher import BundleSearcher, SearchRequest
from . import schemas
from .batching import SearchBatcher
from .compare import TEAMS, ComparedResult, Comparison
from .events import CLIENT_HEADER, CLIENT_ID, EventLog, UnknownSearch, bundle_identity, new_nonce, valid_client_id
from .exposure import Exposure
from .highlighter import Highlighter
from .telemetry import Metrics

MAX_QUERY_CHARS = 1000
MAX_K = 1000
MAX_FILTER_CHARS = 200
"""Longest filter expression accepted (longer: 422)."""
MAX_FACETS = 100
"""Most values a facet field's counts list (``facets``)."""
NON_BLANK = r"[^\s\x1c-\x1f\x85]"
"""A character ``str.strip`` keeps (JSON Schema's ECMA ``\\s`` lacks \\x1c-\\x1f and \\x85): a query must have one."""
STATIC = Path(__file__).with_name("static")
PAGE = STATIC / "index.html"
ASSETS = {"search.js": "text/javascript; charset=utf-8", "search.css": "text/css; charset=utf-8"}
# The search page and its assets: scripts only from this origin (no inline script, no eval), no
# plugins, no framing. /docs and /redoc (fastapi-offline's inline script) do not get it.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
PAGE_HEADERS = {"Content-Security-Policy": CSP, "Referrer-Policy": "no-referrer"}
CLIENT_DOC = (
    "An opaque key of the client (1-64 letters, digits, - or _; the page's is random), logged with "
    "the impression when the service logs events; never the client's address."
)


class _JSON(JSONResponse):
    """JSON by orjson, without FastAPI's response validation and encoding pass (the hot path). A
    ``JSONResponse`` so that FastAPI documents the route's ``response_model`` under it; handlers
    return it built, which FastAPI passes through without validating."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


class _Direct(APIRoute):
    """A route whose endpoint takes the ``Request`` and returns a built ``Response``: FastAPI
    documents it like any route (parameters, response model) but calls the endpoint as is, without
    solving dependencies or reading a body (/search: the hot path)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        return self.endpoint


class BadRequest(Exception):
    """A client error answered with ``status`` and ``{"error": message}``."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message, self.status = message, status


def _strict_query(request: Request) -> dict[str, str]:
    """Query parameters decoded as strict UTF-8 (Starlette would silently replace bad bytes); a
    repeated one: its last value."""
    return dict(_strict_pairs(request))


def _strict_pairs(request: Request) -> list[tuple[str, str]]:
    """Query parameters as (name, value) pairs in order, decoded as strict UTF-8."""
    try:
        return parse_qsl(
            request.scope.get("query_string", b"").decode("latin-1"),
            keep_blank_values=True,
            encoding="utf-8",
            errors="strict",
        )
    except UnicodeDecodeError:
        raise BadRequest("query string is not valid UTF-8") from None


def _integer(params: dict[str, str], name: str, default: int) -> int:
    """Parameter ``name`` as an integer (ASCII digits: ``int`` alone would take other scripts' digits)."""
    value = params.get(name)
    if value is None:
        return default
    try:
        if value.isascii():
            return int(value)
    except ValueError:
        pass
    raise BadRequest(f"parameter {name!r} must be an integer", 422)


def _query_param(name: str, description: str, schema: dict[str, Any], *, required: bool = False) -> dict[str, Any]:
    """One query parameter of the OpenAPI document, written as FastAPI writes the ones it validates
    (for a handler that reads and checks its parameters itself)."""
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": {**schema, "description": description, "title": name.title()},
    }


def _text(params: dict[str, str], name: str, limit: int) -> str:
    q = params.get(name, "")
    if not q.strip():
        raise BadRequest(f"parameter {name!r} is missing or empty")
    if len(q) > limit:  # the schema's maxLength: a validation error like the others (422)
        raise BadRequest(f"parameter {name!r} is {len(q)} characters long; the limit is {limit}", 422)
    return q


def add_routes(
    app: FastAPI,
    b: BundleSearcher,
    *,
    batcher: SearchBatcher,
    highlighter: Highlighter,
    metrics: Metrics,
    ready: threading.Event,
    exposure: Exposure,
    events: EventLog | None = None,
    max_query_chars: int = MAX_QUERY_CHARS,
    max_k: int = MAX_K,
    compare: Comparison | None = None,
    live: LiveIndex | None = None,
) -> None:
    """Add the error handlers and routes of the service for one loaded bundle to ``app``.

    Args:
        app: the FastAPI app the routes are added to.
        b: the loaded bundle every search runs on.
        batcher: the micro-batcher the searches go through (over the served ``Searcher``: the
            live index, ``b`` itself, or the compared pair).
        highlighter: marks the title words that matched a query term.
        metrics: the worker's Prometheus metrics.
        ready: set while the bundle is served (``/ready`` answers 200).
        exposure: the guards, whose refusals (401, 429) the OpenAPI document lists.
        events: the worker's event log (None: off; ``/events`` answers 409).
        max_query_chars: longest query accepted (longer: 422).
        max_k: largest ``k`` accepted, and the depth pages are cut from: ``offset`` below it, and
            ``k`` cut to ``max_k - offset`` (the answer's ``k`` says so).
        compare: a second bundle (B) compared with ``b`` (A) on every search (``serving.compare``;
            None: ``b`` alone).
        live: ``b`` served with its changes and reloads (``index.live``; None: ``b`` as loaded);
            with writes on, ``POST /documents`` and ``DELETE /documents/{id}`` change it."""

    def current() -> BundleSearcher:
        """The bundle served now (a reload swaps it)."""
        return live.base if live is not None else b

    page = PAGE.read_text(encoding="utf-8")
    assets = {name: (STATIC / name).read_bytes() for name in ASSETS}
    started = time.time()

    def score_by(merge: str, bundle: BundleSearcher = b) -> str:
        """What a hit's ``score`` is: the ranker's when the bundle has one, else the merge's."""
        return "ranker" if bundle.ranker is not None else merge

    guarded = (401,) * (exposure.api_key is not None) + (429,) * (exposure.rate > 0)
    store_errors = (503,) * b.capabilities.fallible  # the store / a shard may be down

    @app.exception_handler(BadRequest)
    async def bad_request(_: Request, e: BadRequest) -> JSONResponse:
        return JSONResponse({"error": e.message}, status_code=e.status)

    @app.exception_handler(PgStoreError)
    async def store_down(_: Request, e: PgStoreError) -> JSONResponse:
        # the vector store's server is unreachable: the store reconnects on a later request
        return JSONResponse({"error": f"vector store unavailable: {e}"}, status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(ShardUnavailable)
    async def shard_down(_: Request, e: ShardUnavailable) -> JSONResponse:
        # every replica of one shard is gone: an answer without its documents would look complete
        return JSONResponse({"error": str(e), "missing_shard": e.shard}, status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "query")
        return JSONResponse({"error": f"{where}: {first.get('msg', 'invalid request')}"}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        # keep the exception's headers: the router's 405 carries ``Allow`` (RFC 9110 requires it),
        # which names HEAD beside GET (``http.HeadAsGet`` answers it)
        headers = dict(e.headers or {})
        allow = [m.strip() for m in headers.get("Allow", "").split(",") if m.strip()]
        if "GET" in allow and "HEAD" not in allow:
            headers["Allow"] = ", ".join([*allow, "HEAD"])
        return JSONResponse({"error": str(e.detail)}, status_code=e.status_code, headers=headers or None)

    def _k(params: dict[str, str]) -> int:
        k = _integer(params, "k", 10)
        if not 1 <= k <= max_k:
            raise BadRequest(f"parameter 'k' must be in [1, {max_k}], got {k}", 422)
        return k

    filterable = b.filterable and all(x.filterable for x in ([compare.other] if compare else []))

    def _filter(pairs: list[tuple[str, str]]) -> Filter:
        """The ``filter`` parameters parsed against the bundle's fields (and, compared, B's)."""
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

    def _facets(params: dict[str, str]) -> int:
        n = _integer(params, "facets", 10 if filterable else 0)
        if not 0 <= n <= MAX_FACETS:
            raise BadRequest(f"parameter 'facets' must be in [0, {MAX_FACETS}], got {n}", 422)
        return n if filterable else 0

    def _offset(params: dict[str, str]) -> int:
        offset = _integer(params, "offset", 0)
        if not 0 <= offset < max_k:
            raise BadRequest(f"parameter 'offset' must be in [0, {max_k - 1}], got {offset}", 422)
        return offset

    # compared bundles: a model named in a search must be one of both (each runs its own default otherwise)
    models = [m for m in b.semantic if compare is None or m in compare.other.semantic]
    # /explain's models: the bundle's (A's, when compared) DSSM/CLSM ones; its schema's enum and its
    # check are this list (without any, ``model`` is not a parameter of /explain)
    explainable = b.explainable_models()
    # Bounds the handlers check themselves (to answer with their own statuses and messages) are only
    # documented here (``json_schema_extra``: no FastAPI validation); ``required`` is set in ``contract``.
    q_doc = {"minLength": 1, "maxLength": max_query_chars, "pattern": NON_BLANK}

    def explain_model_doc(schema: dict[str, Any]) -> None:
        """/explain's ``model``: one of the explainable models (a string, not ``anyOf`` string or null)."""
        schema.pop("anyOf", None)
        schema.update(type="string", enum=explainable)

    model_schema: dict[str, Any] = (
        {"type": "string", "enum": models} if models else {"anyOf": [{"type": "string"}, {"type": "null"}]}
    )
    search_params = [
        _query_param(
            "q",
            f"Query text, not blank, at most {max_query_chars} characters (blank or missing: 400; longer: 422).",
            {"type": "string", **q_doc},
            required=True,
        ),
        _query_param(
            "k",
            f"Number of hits, 1 to {max_k}; cut to {max_k} - offset (the depth limit: hits past rank {max_k} "
            "are never served; the answer's k says how many were asked for after the cut).",
            {"type": "integer", "minimum": 1, "maximum": max_k, "default": 10},
        ),
        _query_param(
            "offset",
            f"0-based rank of the first hit (paging), below {max_k}; k is cut so that offset + k <= {max_k}.",
            {"type": "integer", "minimum": 0, "maximum": max_k - 1, "default": 0},
        ),
        _query_param(
            "merge",
            "union (lexical order, semantic-only hits after), rrf or interpolate.",
            {"type": "string", "enum": list(SCORERS), "default": "union"},
        ),
        _query_param("model", "Neural model of the bundle (default: the first).", model_schema),
        {
            **_query_param(
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
        },
        _query_param(
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

    # The handler reads and checks its parameters itself (``search_params`` documents them; FastAPI
    # validating them first cost more than the handler's own checks), and returns a ``_JSON``
    # response; its route is a ``_Direct`` one (no dependency solving or encoding pass on the hot
    # path); response_model documents the answer.
    async def search(request: Request) -> Response:
        """Hits ``[offset, offset + k)`` of the ranking, with source (LEXICAL, SEMANTIC, BOTH),
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
        pairs = _strict_pairs(request)
        params = dict(pairs)
        text, start = _text(params, "q", max_query_chars), _offset(params)
        kk = min(_k(params), max_k - start)  # the depth limit: a page ends at rank max_k
        client = request.headers.get(CLIENT_HEADER)
        if not valid_client_id(client):
            raise BadRequest(f"header {CLIENT_HEADER} must be 1-64 letters, digits, '-' or '_'", 422)
        merge, model = params.get("merge", "union"), params.get("model")
        if merge not in SCORERS:
            raise BadRequest(f"parameter 'merge' must be one of {', '.join(SCORERS)}", 422)
        if model is not None and model not in models:
            where = "both compared bundles" if compare is not None else "this bundle"
            raise BadRequest(f"no model {model!r} in {where}", 422)
        flt, facets = _filter(pairs), _facets(params)
        # one deterministic ranking, cut: the top offset + k, then the page (ties broken by id)
        wanted = SearchRequest(text, kk, offset=start, model=model, merge_by=merge, filters=flt, facets=facets)
        if compare is not None:
            return await compared(wanted, client, flt)
        result = await batcher.search(wanted)
        page_hits = result.hits
        terms = highlighter.terms(result.query)  # the words searched (spell-corrected or as typed)
        hits = []
        rows = batcher.searcher.hits(result)
        for row, h in zip(rows, page_hits, strict=True):
            field = "title" if row.title else "text"
            shown = row.title or row.text
            hits.append(
                {
                    "rank": start + row.rank,
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
                    "highlights": highlighter.spans(terms, shown),
                }
            )
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
        return _JSON(
            {
                "search_id": search_id,
                "query": text,
                "corrected_query": result.query if result.query != text else None,
                "k": kk,
                "offset": start,
                "merge": merge,
                "score_by": score_by(merge),
                "next_offset": start + kk if more else None,
                "hits": hits,
                "filters": flt.expressions(),
                "facets": result.facets or {},
                "timing_ms": result.timing,
            }
        )

    bundles = (b, compare.other) if compare is not None else (b,)
    identities = [bundle_identity(x.path, x.manifest) for x in bundles]
    highlighters = (highlighter, compare.highlighter) if compare is not None else (highlighter,)

    async def compared(wanted: SearchRequest, client: str | None, flt: Filter) -> Response:
        """/search comparing A and B (``serving.compare``): their interleaving, or the user's arm's
        bundle alone (``ComparedPair``); each hit says its team, the answer its arm."""
        nonce = new_nonce()  # the search id's random part, drawn first: it seeds the interleaving
        result = await batcher.search(replace(wanted, client=client, nonce=nonce))
        assert isinstance(result, ComparedResult)  # (the compared pair's answer)
        text, kk, start, merge = wanted.query, wanted.k, wanted.offset, wanted.merge_by
        arm, lead, timing = result.arm, result, result.timing
        page_hits = list(zip(result.teams, result.hits, strict=True))
        served_by = None if result.team is None else identities[result.team]
        # A's when interleaved (B's hits carry B's scores); the serving team's in ab
        scores = score_by(merge, bundles[result.team or 0])
        # the words each shown team searched (its bundle's spelling correction and analyzer)
        terms = {t: highlighters[t].terms(result.searched[t]) for t in {t for t, _ in page_hits}}
        hits = []
        for i, ((t, h), row) in enumerate(zip(page_hits, batcher.searcher.hits(result), strict=True)):
            title, body = row.title, row.text
            hits.append(
                {
                    "rank": start + i + 1,
                    "doc_id": h.doc_id,
                    "title": title,
                    "text": body,
                    "source": h.sources.name,
                    "score": h.score,
                    "lexical_score": h.lexical,
                    "semantic_score": h.semantic,
                    "lexical_rank": h.lexical_rank,
                    "semantic_rank": h.semantic_rank,
                    "fields": row.fields,
                    "highlight_field": "title" if title else "text",
                    "highlights": highlighters[t].spans(terms[t], title or body),
                    "team": TEAMS[t],
                }
            )
        more = len(page_hits) == kk and start + 2 * kk <= max_k
        search_id = None
        if events is not None:
            search_id = events.impression(
                text,
                tuple(str(h.doc_id) for _, h in page_hits),
                tuple(str(h.sources.name) for _, h in page_hits),
                k=kk,
                offset=start,
                client_id=client,
                arm=arm,
                teams=tuple(TEAMS[t] for t, _ in page_hits),
                nonce=nonce,
                served_by=served_by,
            )
        return _JSON(
            {
                "search_id": search_id,
                "query": text,
                "corrected_query": lead.query if lead.query != text else None,
                "k": kk,
                "offset": start,
                "merge": merge,
                "score_by": scores,
                "next_offset": start + kk if more else None,
                "hits": hits,
                "filters": flt.expressions(),
                "facets": lead.facets or {},
                "timing_ms": timing,
                "arm": arm,
            }
        )

    app.router.add_api_route(
        "/search",
        search,
        methods=["GET"],
        summary="Lexical ∪ semantic search",
        response_class=_JSON,
        response_model=schemas.SearchResponse,
        responses=schemas.errors(400, 414, 422, *guarded, *store_errors),
        openapi_extra={"parameters": search_params},
        route_class_override=_Direct,
    )

    @app.get(
        "/explain",
        summary="Why the ranker scores a document so, or why the neural model matches it",
        response_class=_JSON,
        response_model=schemas.RankerExplanation | schemas.NeuralExplanation,
        responses=schemas.errors(400, 404, 414, 422, *guarded, *store_errors),
    )
    def explain_pair(
        request: Request,
        q: str = Query(
            "", description=f"Query text, not blank, at most {max_query_chars} characters.", json_schema_extra=q_doc
        ),
        doc_id: str = Query("", description="Document id from /search (unknown: 404)."),
        top: int = Query(5, ge=1, le=50, description="Number of contributions or neurons."),
        model: str | None = Query(
            None,
            description="Explain this neural model of the bundle (one of its DSSM/CLSM models) rather than the "
            "ranker (default: the ranker, or without one the first such model).",
            json_schema_extra=explain_model_doc,
            include_in_schema=bool(explainable),
        ),
    ) -> Response:
        """With a ranker (and no ``model``): the ranker's score, bias and its ``top`` feature
        contributions by absolute size, with the hit's source and stage scores and ranks
        (``explained_by: "ranker"``). Otherwise CLSM: most active max-pool neurons, their winning
        words, neurons shared by both sides; any encoder: per-word contributions to the cosine."""
        params = _strict_query(request)
        text = _text(params, "q", max_query_chars)
        if model is not None and model not in explainable:  # the schema's enum (undeclared without any)
            raise BadRequest(
                f"no model {model!r} to explain in this bundle (explainable: {', '.join(explainable) or 'none'})", 422
            )
        bb = current()
        try:
            if bb.ranker is not None and model is None:
                return _JSON({**bb.explain_rank(text, doc_id, top=top), "explained_by": "ranker"})
            return _JSON(bb.explain(text, doc_id, model=model or next(iter(explainable), None), top=top))
        except KeyError as e:
            raise BadRequest(str(e.args[0]) if e.args else f"no document {doc_id!r}", 404) from None
        except ValueError as e:
            raise BadRequest(str(e), 422) from None

    @app.post(
        "/events",
        status_code=202,
        summary="Log a click on a result of a search (UBI event fields)",
        response_model=schemas.EventAccepted,
        responses=schemas.errors(400, 404, 409, 413, 414, 422, *guarded),
    )
    async def post_event(click: schemas.ClickEvent) -> dict[str, str]:
        """Logs that a user opened the result ``object_id`` shown at ``position`` (its 1-based
        ``rank``) by the search ``query_id`` (the answer's ``search_id``). 202 once buffered for
        the event log; 404 when the search id is unknown (forged, altered, expired after 24 h, or
        issued before the service restarted); 422 when the position was not on that answer's page;
        409 when the service logs no events (started without ``--events``). Any worker checks the
        id (it is signed), so the click need not reach the worker that answered the search."""
        if events is None:
            raise BadRequest("this service logs no events (it was started without --events): nothing recorded", 409)
        try:
            events.click(click.query_id, click.object_id, click.position, click.client_id)
        except UnknownSearch as e:
            raise BadRequest(str(e), 404) from None
        except ValueError as e:
            raise BadRequest(str(e), 422) from None
        return {"status": "accepted"}

    if live is not None and live.writes:
        add_write_routes(app, live, guarded, exposure)
    else:

        @app.api_route("/documents", methods=["POST"], include_in_schema=False)
        @app.api_route("/documents/{doc_id:path}", methods=["DELETE"], include_in_schema=False)
        def writes_off() -> None:
            raise BadRequest("this service takes no document changes (start it with serve --allow-writes)", 404)

    # every operation refuses a query parameter it does not declare (422, ``http.KnownParameters``)
    @app.get(
        "/health", summary="Liveness and what is loaded", response_model=schemas.Health, responses=schemas.errors(422)
    )
    def health() -> dict[str, Any]:
        bb = current()
        return {
            "status": "ok",
            "documents": len(live) if live is not None else len(b),
            "lexical": bb.manifest.get("lexical"),
            "models": [m["name"] for m in bb.manifest.get("models", [])],
            "dataset": bb.manifest.get("dataset"),
            "uptime_s": round(time.time() - started, 1),
            "pid": os.getpid(),
        }

    @app.get(
        "/ready",
        summary="Readiness: 200 once the bundle is loaded and served, 503 otherwise",
        response_model=schemas.Ready,
        responses={
            503: {"model": schemas.NotReady, "description": "Not serving yet (starting) or any more (shutting down)."},
            **schemas.errors(422),
        },
    )
    def readiness() -> JSONResponse:
        """For load balancers and orchestrators: send traffic only while this answers 200. The bundle
        is loaded and verified before the server listens; 503 before startup ends and from shutdown on."""
        if ready.is_set():
            return JSONResponse({"status": "ready", "documents": len(live) if live is not None else len(b)})
        return JSONResponse({"status": "not ready"}, status_code=503)

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        summary="Prometheus metrics (text format)",
        responses={
            200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
            **schemas.json_errors(414, 422, *guarded),
        },
    )
    def prometheus() -> PlainTextResponse:
        return PlainTextResponse(metrics.text(), media_type="text/plain; version=0.0.4")

    # the page's own address holds its state (search.js: stateFromUrl), read by its script, not by
    # the server; any value is taken (a bad one falls back to the default)
    page_params = [
        _query_param(name, f"The page's {what} (read by the page's script; any value).", {"type": "string"})
        for name, what in (("q", "query"), ("k", "hits per page"), ("page", "page number"), ("merge", "merge"))
    ] + [
        {
            **_query_param(
                "filter",
                "The page's active filters, repeatable (read by the page's script, sent to /search; any value).",
                {"type": "array", "items": {"type": "string"}},
            ),
            "style": "form",
            "explode": True,
        }
    ]

    @app.get(
        "/",
        response_class=HTMLResponse,
        summary="The search page (HTML)",
        responses={200: {"content": {"text/html": {"schema": {"type": "string"}}}}, **schemas.json_errors(422)},
        openapi_extra={"parameters": page_params},
    )
    def home() -> HTMLResponse:
        return HTMLResponse(page, headers=PAGE_HEADERS)

    @app.get("/static/{name}", include_in_schema=False)
    def asset(name: str) -> Response:
        if name not in assets:
            raise BadRequest(f"no such file: {name}", 404)
        return Response(assets[name], media_type=ASSETS[name], headers=PAGE_HEADERS)

    required = {("/search", "q"), ("/explain", "q"), ("/explain", "doc_id")}
    stored = stored_fields(live.base) if live is not None and live.writes else None
    app.openapi = lambda: contract(FastAPI.openapi(app), required, stored)  # type: ignore[method-assign]  # override


WAIT_DOC = (
    "Answer once this worker's searches see the change (default: once it is durable; every worker "
    "sees it within a second)."
)


def add_write_routes(app: FastAPI, live: LiveIndex, guarded: tuple[int, ...], exposure: Exposure) -> None:
    """``POST /documents`` and ``DELETE /documents/{doc_id}`` (``index.live``): each answered once
    the change is fsync'd in the change log, and seen by this worker's next search (the other
    workers' within a poll of the log)."""
    from fastapi import Path as PathParam

    keyed = (401,) * (exposure.write_key is not None)
    limited = (429,) * (429 in guarded)
    allowed_fields = stored_fields(live.base)

    @app.post(
        "/documents",
        summary="Add or replace documents (durable when answered)",
        response_model=schemas.DocumentsAccepted,
        responses=schemas.errors(400, 413, 414, 422, *keyed, *limited),
    )
    def upsert(body: schemas.DocumentsIn, wait: bool = Query(False, description=WAIT_DOC)) -> dict[str, Any]:
        """Adds each document, or replaces the one with its id, encoded with the bundle's served
        encoders. The answer comes once the change is written and fsync'd in the change log (a
        crash after it loses nothing); every worker's searches see it within a second (with
        ``wait``: this worker's next search). A merge later folds the changes into the bundle."""
        for i, d in enumerate(body.documents):
            extra = sorted(set(d.fields) - set(allowed_fields))
            if extra:
                raise BadRequest(
                    f"documents[{i}].fields: {extra[0]!r} is not a stored field of this bundle "
                    f"(its schema names {', '.join(allowed_fields) or 'none'})",
                    422,
                )
        # an id given twice: the later document wins, as two upserts one after the other
        docs = list({d.id: Document(d.id, d.title, d.text, dict(d.fields)) for d in body.documents}.values())
        try:
            seq = live.upsert(docs, wait=wait)
        except ValueError as e:
            raise BadRequest(f"documents: {e}", 422) from None
        return {"status": "accepted", "seq": seq, "upserted": len(docs), "documents": len(live)}

    @app.delete(
        "/documents/{doc_id}",
        summary="Delete a document (durable when answered)",
        response_model=schemas.DocumentDeleted,
        responses=schemas.errors(400, 404, 414, 422, *keyed, *limited),
    )
    def delete(
        doc_id: str = PathParam(description="The document's id (unknown: 404)."),
        wait: bool = Query(False, description=WAIT_DOC),
    ) -> dict[str, Any]:
        """Deletes the document; answered once the change is fsync'd in the change log, seen by
        every worker's searches within a second (with ``wait``: this worker's next search)."""
        try:
            seq = live.delete(doc_id, wait=wait)
        except KeyError:
            raise BadRequest(f"no document {doc_id!r}", 404) from None
        return {"status": "deleted", "seq": seq, "doc_id": doc_id, "documents": len(live)}


def stored_fields(bundle: Bundle) -> list[str]:
    """The stored fields an upserted document may carry: the bundle schema's facets, numeric and
    stored columns (none for a collection of id, title and text)."""
    schema = bundle.manifest.get("schema") or {}
    return sorted({*schema.get("facets", []), *schema.get("numeric", []), *schema.get("stored", [])})


def contract(schema: dict[str, Any], required: set[tuple[str, str]], stored: list[str] | None = None) -> dict[str, Any]:
    """The generated OpenAPI schema with the (path, query parameter) pairs in ``required`` marked
    required and without a default: the handlers check them themselves, to answer 400 rather than
    FastAPI's 422, so FastAPI sees them as optional. ``stored``: the stored fields an upserted
    document may carry (its ``fields`` names no others)."""
    doc = schema.get("components", {}).get("schemas", {}).get("DocumentIn")
    if doc is not None and stored is not None:
        fields = doc["properties"]["fields"]
        value = fields.get("additionalProperties", {})
        fields["properties"] = {name: value for name in stored}
        fields["additionalProperties"] = False
    for path, name in required:
        for op in schema["paths"].get(path, {}).values():
            for p in op.get("parameters", ()):
                if p["name"] == name and p["in"] == "query":
                    p["required"] = True
                    p["schema"].pop("default", None)
    _write_links(schema)
    return schema


def _write_links(schema: dict[str, Any]) -> None:
    """OpenAPI links between the write endpoints and /search (when both are served), the chains a
    client (and schemathesis' stateful phase) follows: a document upserted, searched by its id,
    deleted from a search's first hit, searched again by its id."""
    paths = schema["paths"]
    upsert = paths.get("/documents", {}).get("post")
    delete = paths.get("/documents/{doc_id}", {}).get("delete")
    search = paths.get("/search", {}).get("get")
    if not (upsert and delete and search):
        return

    def link(op: dict[str, Any], status: str, name: str, target: dict[str, Any], params: dict[str, str]) -> None:
        op["responses"][status].setdefault("links", {})[name] = {
            "operationId": target["operationId"],
            "parameters": params,
        }

    link(upsert, "200", "SearchUpserted", search, {"q": "$request.body#/documents/0/id"})
    link(upsert, "200", "DeleteUpserted", delete, {"doc_id": "$request.body#/documents/0/id"})
    link(search, "200", "DeleteFirstHit", delete, {"doc_id": "$response.body#/hits/0/doc_id"})
    link(delete, "200", "SearchDeleted", search, {"q": "$response.body#/doc_id"})
