"""HTTP search service over a bundle (BERT paper Sec. 2.2 / 4.4, Table 8: lexical ∪ semantic hits,
each tagged with its source).

Everything is loaded at startup; the request path only reads (no writes). ``/search`` runs on the
event loop and each search runs its lexical stage there while its semantic stage runs in one of
the bundle's threads; the other handlers are plain functions in FastAPI's thread pool. Bad input
gets a 4xx answer with a JSON body ``{"error": "..."}``. ``/search`` pages with ``offset``, marks the
query terms that matched in each hit (``text.highlight``) and says what its scores are (``score_by``);
``/explain`` gives the ranker's feature contributions to a hit's score when the bundle has a ranker. ``/metrics`` is the Prometheus text format
(prometheus_client), added up over all worker processes when there are several."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from contextlib import asynccontextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Union
from urllib.parse import parse_qsl

import orjson
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..index.bundle import Bundle, Result
from ..index.hybrid import SCORERS
from ..index.pgstore import PgStoreError
from ..text.highlight import Span, query_terms, utf16_spans, word_terms
from ..text.normalize import Analyzer
from . import schemas
from .exposure import Exposure, Guard

MAX_QUERY_CHARS = 1000
MAX_K = 1000
NON_BLANK = r"[^\s\x1c-\x1f\x85]"
"""A character ``str.strip`` keeps (JSON Schema's ECMA ``\\s`` lacks \\x1c-\\x1f and \\x85): a query must have one."""
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH_CAP = 64
"""Most searches one pass of a worker runs together (``SearchBatcher``)."""
GATHER_TURNS = 4
"""Turns of the event loop a search pass waits for more searches (``SearchBatcher``): on make
serve's bundle at 50 clients, passes of 8 became passes of ~24 and 1,380 req/s 1,830 (p99 46 ->
40 ms); one client waits ~80 us more (p50 1.71 -> 1.79 ms)."""
GC_YOUNG = 20_000
"""Allocations between the cyclic GC's young-generation passes in a serving worker."""
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
STOPPED = "semsearch: server stopped cleanly"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
STATIC = Path(__file__).with_name("static")
PAGE = STATIC / "index.html"
ASSETS = {"search.js": "text/javascript; charset=utf-8", "search.css": "text/css; charset=utf-8"}
DOCS_STATIC = "/docs-static"
# The search page and its assets: scripts only from this origin (no inline script, no eval), no
# plugins, no framing. /docs and /redoc (fastapi-offline's inline script) do not get it.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
PAGE_HEADERS = {"Content-Security-Policy": CSP, "Referrer-Policy": "no-referrer"}
NOSNIFF = (b"x-content-type-options", b"nosniff")


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
    solving dependencies or reading a body (/search; an endpoint that does nothing: 63 against 90
    us a request here)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        return self.endpoint  # type: ignore[return-value]


class _Measure:
    """Pure ASGI middleware counting every HTTP request into ``Metrics`` and adding
    ``X-Content-Type-Options: nosniff`` to every answer (Starlette's ``BaseHTTPMiddleware`` costs a
    task and a stream per request)."""

    def __init__(self, app: ASGIApp, metrics: Metrics, paths: Callable[[], set[str]]):
        self.app, self.metrics, self._paths_of = app, metrics, paths
        self._paths: set[str] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t, status = time.perf_counter(), 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), NOSNIFF]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            if self._paths is None:
                self._paths = self._paths_of()
            path = scope["path"] if scope["path"] in self._paths else "other"
            self.metrics.observe(path, status, time.perf_counter() - t)


class BadRequest(Exception):
    """A client error answered with ``status`` and ``{"error": message}``."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message, self.status = message, status


class Metrics:
    """Request counts by path and status and a latency histogram (prometheus_client). When
    $PROMETHEUS_MULTIPROC_DIR is set (``semsearch serve --workers N`` sets it), every worker
    process writes its values there and ``text`` adds up all of them."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "semsearch_requests", "HTTP requests by path and status.", ["path", "status"], registry=self.registry
        )
        self.seconds = Histogram(
            "semsearch_request_seconds", "Request latency.", buckets=BUCKETS, registry=self.registry
        )
        self.batch = Histogram(
            "semsearch_search_batch",
            "Searches run together in one pass (micro-batching).",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self._children: dict[tuple[str, int], Any] = {}

    def observe(self, path: str, status: int, seconds: float) -> None:
        child = self._children.get((path, status))
        if child is None:
            child = self._children[(path, status)] = self.requests.labels(path, str(status))
        child.inc()
        self.seconds.observe(seconds)

    def text(self) -> str:
        registry = self.registry
        if os.environ.get(MULTIPROC_ENV):
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry).decode("utf-8")


class Highlighter:
    """/search's highlight spans with the bundle's lexical analyzer (``text.highlight``). It uses a
    copy of the analyzer, under its own lock: analyzers keep a stemming cache that is not
    thread-safe, and the search stages hold the original's. Without a lexical model: lower-case
    alphanumeric equality. The analysis of each title word is kept (``WORDS`` of them): a page of
    ten hits analyses a hundred words one by one, and that was most of a cached search's time."""

    WORDS = 1 << 16

    def __init__(self, lexical: Any) -> None:
        a = getattr(lexical, "analyzer", None)
        self.analyzer: Any = Analyzer.from_config(a.config()) if isinstance(a, Analyzer) else a if callable(a) else None
        analyze = self.analyzer or Analyzer()
        # tuples, not the analyzer's lists: a tuple of strings is untracked by the cyclic GC, and
        # 65k cached lists made each full collection of a busy worker cost ~20 ms (the p99 tail)
        self._word = lru_cache(maxsize=self.WORDS)(lambda word: tuple(analyze(word)))
        # each title's words with their terms, kept per text: the same titles recur in pages, and
        # analysing their words one by one was ~0.2 ms of a search
        self._words_of = lru_cache(maxsize=self.WORDS)(lambda text: word_terms(text, self._word))
        self._lock = threading.Lock()

    def terms(self, query: str) -> frozenset[str]:
        with self._lock:
            return query_terms(query, self.analyzer)

    def spans(self, terms: frozenset[str], text: str) -> list[Span]:
        """Matching words of ``text`` as ``[start, end)`` in UTF-16 code units (JavaScript indices)."""
        if not terms or not text:
            return []
        with self._lock:
            words = self._words_of(text)
        return utf16_spans(text, [(a, b) for a, b, ts in words if not terms.isdisjoint(ts)])


class SearchBatcher:
    """Dynamic micro-batching of one worker's searches (``/search``): the searches that arrive while
    a pass runs wait for the next pass, which takes all of them (at most ``cap``, same settings)
    and searches them together (``Bundle.search_many``: one encoder call, one vector search, one
    ranker prediction). A pass starts ``turns`` turns of the event loop after its first search
    arrived (default ``GATHER_TURNS``), so that the requests read in the meantime join it: a
    request read in one turn reaches the batcher in a later one (uvicorn runs each request as a
    task), and a pass started at once took only those already waiting, so 25 clients per worker
    settled into three passes of 8 where one of 25 costs a fifth less a search. Passes run on the
    event loop, one at a time, and the loop reads, parses and answers requests between them."""

    def __init__(
        self,
        bundle: Bundle,
        cap: int = BATCH_CAP,
        observe: Callable[[int], None] | None = None,
        turns: int = GATHER_TURNS,
    ) -> None:
        if turns < 1:
            raise ValueError(f"turns must be >= 1, got {turns}")
        self.bundle, self.cap, self.observe, self.turns = bundle, cap, observe, turns
        self._waiting: list[tuple[tuple[int, str | None, str], str, float, asyncio.Future[Result]]] = []
        self._scheduled = False

    def search(self, query: str, k: int, model: str | None, merge: str) -> asyncio.Future[Result]:
        """A future of ``Bundle.search(query, k, model=model, merge_by=merge)``'s result, with the
        ms it waited for its pass (``timing["queue_ms"]``)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        self._waiting.append(((k, model, merge), query, time.perf_counter(), future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._after, self.turns)
        return future

    def _after(self, turns: int) -> None:
        """The pass, ``turns`` turns of the loop from the one that scheduled it."""
        if turns > 1:
            asyncio.get_running_loop().call_soon(self._after, turns - 1)
        else:
            self._run()

    def _run(self) -> None:
        """One pass: the first waiting search's settings, with every other waiting search of the
        same settings up to ``cap``; what is left gets the next pass."""
        key = self._waiting[0][0]
        batch = [w for w in self._waiting if w[0] == key][: self.cap]
        taken = {id(w) for w in batch}
        self._waiting = [w for w in self._waiting if id(w) not in taken]
        self._scheduled = bool(self._waiting)
        if self._scheduled:
            asyncio.get_running_loop().call_soon(self._after, self.turns)
        start = time.perf_counter()
        try:
            results = self.bundle.search_many([w[1] for w in batch], key[0], model=key[1], merge_by=key[2])
        except Exception as e:  # noqa: BLE001 — each waiting handler answers it (e.g. the vector store is down)
            for w in batch:
                if not w[3].done():
                    w[3].set_exception(e)
            return
        if self.observe is not None:
            self.observe(len(batch))
        for (_, _, arrived, future), r in zip(batch, results):
            r.timing["queue_ms"] = 1000 * (start - arrived)
            if not future.done():  # (cancelled: the client went away)
                future.set_result(r)


def _strict_query(request: Request) -> dict[str, str]:
    """Query parameters decoded as strict UTF-8 (Starlette would silently replace bad bytes)."""
    try:
        pairs = parse_qsl(
            request.scope.get("query_string", b"").decode("latin-1"),
            keep_blank_values=True,
            encoding="utf-8",
            errors="strict",
        )
    except UnicodeDecodeError:
        raise BadRequest("query string is not valid UTF-8") from None
    return dict(pairs)


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
    if len(q) > limit:
        raise BadRequest(f"parameter {name!r} is {len(q)} characters long; the limit is {limit}", 413)
    return q


def create_app(
    bundle: str | Path | Bundle,
    *,
    store: str | None = None,
    max_query_chars: int = MAX_QUERY_CHARS,
    max_k: int = MAX_K,
    exposure: Exposure | None = None,
) -> FastAPI:
    """The service for one bundle (a path, loaded and verified now, or a loaded ``Bundle``), with
    the guards of ``exposure`` (API key, rate limit; None: none, for loopback)."""
    exposure = exposure or Exposure()
    b = bundle if isinstance(bundle, Bundle) else Bundle.load(bundle, store=store)
    metrics = Metrics()
    page = PAGE.read_text(encoding="utf-8")
    assets = {name: (STATIC / name).read_bytes() for name in ASSETS}
    started = time.time()
    highlighter = Highlighter(b.lexical)
    batcher = SearchBatcher(b, observe=metrics.batch.observe)

    def score_by(merge: str) -> str:
        """What a hit's ``score`` is: the ranker's when the bundle has one, else the merge's."""
        return "ranker" if b.ranker is not None else merge

    ready = threading.Event()  # set while the loaded bundle is being served: startup done, no shutdown yet

    @asynccontextmanager
    async def lifespan(_: FastAPI):  # type: ignore[no-untyped-def]
        # the loaded bundle (indexes, documents, models: millions of objects) lives as long as the
        # process: keep it out of the garbage collector's scans, whose full passes over it paused
        # searches for hundreds of ms under load
        gc.collect()
        gc.freeze()
        # a request's objects die by reference counting; young-generation passes 700 allocations
        # apart (the default) ran ~90 times a second per busy worker for nothing
        thresholds = gc.get_threshold()
        gc.set_threshold(GC_YOUNG, *thresholds[1:])
        ready.set()
        yield
        gc.set_threshold(*thresholds)
        ready.clear()
        b.close()  # graceful shutdown: in-flight searches finish, then the threads stop
        print(STOPPED, file=sys.stderr, flush=True)

    # FastAPIOffline: /docs (Swagger UI 5) and /redoc from files in the package, not FastAPI's
    # default CDN, so they work on a machine without network
    app = FastAPIOffline(
        title="semsearch",
        version=__version__,
        lifespan=lifespan,
        static_url=DOCS_STATIC,
        description="Lexical ∪ semantic search over a semsearch bundle.",
    )
    app.state.bundle, app.state.metrics = b, metrics

    # the guard runs inside the measuring middleware, so refusals (401, 413, 414, 429) are counted too
    app.add_middleware(Guard, exposure=exposure)  # type: ignore[arg-type]
    app.add_middleware(_Measure, metrics=metrics, paths=lambda: {r.path for r in app.routes})  # type: ignore[attr-defined]
    guarded = (401,) * (exposure.api_key is not None) + (429,) * (exposure.rate > 0)
    store_errors = (503,) * (b.store == "postgres")  # the PostgreSQL server may be down

    @app.exception_handler(BadRequest)
    async def bad_request(_: Request, e: BadRequest) -> JSONResponse:
        return JSONResponse({"error": e.message}, status_code=e.status)

    @app.exception_handler(PgStoreError)
    async def store_down(_: Request, e: PgStoreError) -> JSONResponse:
        # the vector store's server is unreachable: the store reconnects on a later request
        return JSONResponse({"error": f"vector store unavailable: {e}"}, status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "query")
        return JSONResponse({"error": f"{where}: {first.get('msg', 'invalid request')}"}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        # keep the exception's headers: the router's 405 carries ``Allow`` (RFC 9110 requires it)
        return JSONResponse({"error": str(e.detail)}, status_code=e.status_code, headers=e.headers)

    def _k(params: dict[str, str]) -> int:
        k = _integer(params, "k", 10)
        if not 1 <= k <= max_k:
            raise BadRequest(f"parameter 'k' must be in [1, {max_k}], got {k}", 422)
        return k

    def _offset(params: dict[str, str], k: int) -> int:
        offset = _integer(params, "offset", 0)
        if not 0 <= offset <= max_k - k:
            raise BadRequest(
                f"parameter 'offset' must be in [0, {max_k - k}] (offset + k at most {max_k}), got {offset}", 422
            )
        return offset

    models = list(b.semantic)
    # Bounds the handlers check themselves (to answer with their own statuses and messages) are only
    # documented here (``json_schema_extra``: no FastAPI validation); ``required`` is set in ``contract``.
    q_doc = {"minLength": 1, "maxLength": max_query_chars, "pattern": NON_BLANK}

    def model_doc(schema: dict[str, Any]) -> None:
        """``model``: one of the bundle's model names (a string, not ``anyOf`` string or null)."""
        if models:
            schema.pop("anyOf", None)
            schema.update(type="string", enum=models)

    model_schema: dict[str, Any] = (
        {"type": "string", "enum": models} if models else {"anyOf": [{"type": "string"}, {"type": "null"}]}
    )
    search_params = [
        _query_param(
            "q",
            f"Query text, not blank, at most {max_query_chars} characters (blank or missing: 400; longer: 413).",
            {"type": "string", **q_doc},
            required=True,
        ),
        _query_param(
            "k", f"Number of hits, 1 to {max_k}.", {"type": "integer", "minimum": 1, "maximum": max_k, "default": 10}
        ),
        _query_param(
            "offset",
            f"0-based rank of the first hit (paging); offset + k at most {max_k} (else 422).",
            {"type": "integer", "minimum": 0, "maximum": max_k - 1, "default": 0},
        ),
        _query_param(
            "merge",
            "union (lexical order, semantic-only hits after), rrf or interpolate.",
            {"type": "string", "enum": list(SCORERS), "default": "union"},
        ),
        _query_param("model", "Neural model of the bundle (default: the first).", model_schema),
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
        lexical analyzer. ``next_offset``: the next page's offset, null when this page is the
        last (fewer than k hits, or past the depth limit).

        Pages are cut from ``Bundle.search(q, offset + k)`` (ties broken by doc id), so they
        continue each other exactly while offset + k stays within the lexical stage's depth (300
        candidates); deeper, Bundle.search deepens that stage to offset + k, which keeps the union's
        order but may reorder rrf, interpolate or a ranker's list past rank 300.

        Runs on the event loop itself (``async``), not in FastAPI's thread pool (its hand-offs and
        GIL switches cost more than they overlap); the searches that arrive together run as one
        pass (``SearchBatcher``), whose stage times ``timing_ms`` gives, with ``batch`` (how many
        distinct searches the pass ran) and ``queue_ms`` (how long this one waited for it)."""
        params = _strict_query(request)
        text, kk = _text(params, "q", max_query_chars), _k(params)
        start = _offset(params, kk)
        merge, model = params.get("merge", "union"), params.get("model")
        if merge not in SCORERS:
            raise BadRequest(f"parameter 'merge' must be one of {', '.join(SCORERS)}", 422)
        if model is not None and model not in b.semantic:
            raise BadRequest(f"no model {model!r} in this bundle", 422)
        # one deterministic ranking, cut: the top offset + k, then the page (Bundle.search breaks ties by id)
        result = await batcher.search(text, start + kk, model, merge)
        page_hits = result.hits[start:]
        terms = highlighter.terms(result.query)  # the words searched (spell-corrected or as typed)
        hits = []
        for row, h in zip(b.hits(Result(page_hits, result.timing)), page_hits):
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
                    "highlight_field": field,
                    "highlights": highlighter.spans(terms, shown),
                }
            )
        more = len(page_hits) == kk and start + 2 * kk <= max_k
        return _JSON(
            {
                "query": text,
                "corrected_query": result.query if result.query != text else None,
                "k": kk,
                "offset": start,
                "merge": merge,
                "score_by": score_by(merge),
                "next_offset": start + kk if more else None,
                "hits": hits,
                "timing_ms": result.timing,
            }
        )

    app.router.add_api_route(
        "/search",
        search,
        methods=["GET"],
        summary="Lexical ∪ semantic search",
        response_class=_JSON,
        response_model=schemas.SearchResponse,
        responses=schemas.errors(400, 413, 414, 422, *guarded, *store_errors),
        openapi_extra={"parameters": search_params},
        route_class_override=_Direct,
    )

    @app.get(
        "/explain",
        summary="Why the ranker scores a document so, or why the neural model matches it",
        response_class=_JSON,
        response_model=Union[schemas.RankerExplanation, schemas.NeuralExplanation],
        responses=schemas.errors(400, 404, 413, 414, 422, *guarded, *store_errors),
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
            description="Explain this neural model of the bundle (DSSM/CLSM) rather than the ranker.",
            json_schema_extra=model_doc,
        ),
    ) -> Response:
        """With a ranker (and no ``model``): the ranker's score, bias and its ``top`` feature
        contributions by absolute size, with the hit's source and stage scores and ranks
        (``explained_by: "ranker"``). Otherwise CLSM: most active max-pool neurons, their winning
        words, neurons shared by both sides; any encoder: per-word contributions to the cosine."""
        params = _strict_query(request)
        text = _text(params, "q", max_query_chars)
        try:
            if b.ranker is not None and model is None:
                return _JSON({**b.explain_rank(text, doc_id, top=top), "explained_by": "ranker"})  # type: ignore[attr-defined]
            return _JSON(b.explain(text, doc_id, model=model, top=top))
        except KeyError as e:
            raise BadRequest(str(e.args[0]) if e.args else f"no document {doc_id!r}", 404) from None
        except ValueError as e:
            raise BadRequest(str(e), 422) from None

    @app.get("/health", summary="Liveness and what is loaded", response_model=schemas.Health)
    def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "documents": len(b.corpus),
            "lexical": b.manifest.get("lexical"),
            "models": [m["name"] for m in b.manifest.get("models", [])],
            "dataset": b.manifest.get("dataset"),
            "uptime_s": round(time.time() - started, 1),
            "pid": os.getpid(),
        }

    @app.get(
        "/ready",
        summary="Readiness: 200 once the bundle is loaded and served, 503 otherwise",
        response_model=schemas.Ready,
        responses={
            503: {"model": schemas.NotReady, "description": "Not serving yet (starting) or any more (shutting down)."}
        },
    )
    def readiness() -> JSONResponse:
        """For load balancers and orchestrators: send traffic only while this answers 200. The bundle
        is loaded and verified before the server listens; 503 before startup ends and from shutdown on."""
        if ready.is_set():
            return JSONResponse({"status": "ready", "documents": len(b.corpus)})
        return JSONResponse({"status": "not ready"}, status_code=503)

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        summary="Prometheus metrics (text format)",
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **schemas.errors(414, *guarded)},
    )
    def prometheus() -> PlainTextResponse:
        return PlainTextResponse(metrics.text(), media_type="text/plain; version=0.0.4")

    @app.get(
        "/",
        response_class=HTMLResponse,
        summary="The search page (HTML)",
        responses={200: {"content": {"text/html": {"schema": {"type": "string"}}}}},
    )
    def home() -> HTMLResponse:
        return HTMLResponse(page, headers=PAGE_HEADERS)

    @app.get("/static/{name}", include_in_schema=False)
    def asset(name: str) -> Response:
        if name not in assets:
            raise BadRequest(f"no such file: {name}", 404)
        return Response(assets[name], media_type=ASSETS[name], headers=PAGE_HEADERS)

    required = {("/search", "q"), ("/explain", "q"), ("/explain", "doc_id")}
    app.openapi = lambda: contract(FastAPI.openapi(app), required)  # type: ignore[method-assign]
    return app


def contract(schema: dict[str, Any], required: set[tuple[str, str]]) -> dict[str, Any]:
    """The generated OpenAPI schema with the (path, query parameter) pairs in ``required`` marked
    required and without a default: the handlers check them themselves, to answer 400 rather than
    FastAPI's 422, so FastAPI sees them as optional."""
    for path, name in required:
        for op in schema["paths"].get(path, {}).values():
            for p in op.get("parameters", ()):
                if p["name"] == name and p["in"] == "query":
                    p["required"] = True
                    p["schema"].pop("default", None)
    return schema


BUNDLE_ENV, STORE_ENV = "SEMSEARCH_BUNDLE", "SEMSEARCH_STORE"


def app_from_env() -> FastAPI:
    """App factory for uvicorn worker processes (``semsearch serve --workers N``): the bundle path
    and store come from $SEMSEARCH_BUNDLE / $SEMSEARCH_STORE, the guards from $SEMSEARCH_API_KEY /
    $SEMSEARCH_RATE_LIMIT, since workers import the app by name."""
    return create_app(os.environ[BUNDLE_ENV], store=os.environ.get(STORE_ENV) or None, exposure=Exposure.from_env())
