"""HTTP search service over a bundle (BERT paper Sec. 2.2 / 4.4, Table 8: lexical ∪ semantic hits,
each tagged with its source): ``create_app`` builds the FastAPI app for one loaded bundle.

Everything is loaded at startup; the request path only reads, except that with an event log
(``events``) it appends impressions and clicks to a bounded buffer that a thread writes out.
``/search`` runs on the event loop and each search runs its lexical stage there while its semantic
stage runs in one of the bundle's threads; the other handlers are plain functions in FastAPI's
thread pool (the handlers: ``routers``, one router per concern over the ``state.ServiceState``
they share; the micro-batching of searches: ``batching``; the metrics: ``telemetry``; the guards:
``exposure``). Bad input gets a 4xx answer with a JSON body ``{"error": "..."}``. ``/metrics`` is
the Prometheus text format, added up over all worker processes when there are several."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from fastapi_offline import FastAPIOffline

from .. import __version__
from ..clicks.abtest import DEFAULT_SALT
from ..index.bundle import MANIFEST, Bundle, LoadOptions
from ..index.bundle.coordinator import open_bundle
from ..index.filters import FacetClause, Filter, RangeClause
from ..index.live import LiveIndex
from ..index.searcher import BundleSearcher, Hit, Observed, Searcher, SearchRequest
from .batching import SearchBatcher
from .compare import ComparedPair, Comparison, check_same_documents
from .events import EventLog, bundle_identity, new_secret
from .exposure import BodyLimit, Exposure, Guard
from .highlighter import Highlighter
from .http import HeadAsGet, KnownParameters, declared_parameters
from .options import ServeOptions
from .routers import install
from .state import MAX_K, MAX_QUERY_CHARS, ServiceState
from .telemetry import MULTIPROC_ENV, Measure, Metrics

GC_YOUNG = 20_000
"""Allocations between the cyclic GC's young-generation passes in a serving worker."""
STOPPED = "semsearch: server stopped cleanly"
DOCS_STATIC = "/docs-static"


def create_app(
    bundle: str | Path | BundleSearcher,
    *,
    load: LoadOptions | None = None,
    max_query_chars: int = MAX_QUERY_CHARS,
    max_k: int = MAX_K,
    exposure: Exposure | None = None,
    events: str | Path | None = None,
    events_flush_seconds: float = 5.0,
    event_secret: str | None = None,
    compare: str | Path | Bundle | None = None,
    compare_mode: str = "interleave",
    compare_salt: str = DEFAULT_SALT,
    allow_writes: bool = False,
    changes: str | Path | None = None,
    merge_at: int = 0,
) -> FastAPI:
    """The service for one bundle. The event log's writer starts with the app's lifespan and is
    flushed and closed when it ends.

    Args:
        bundle: a bundle directory (loaded and verified now; a sharded bundle's with every shard
            in this process) or a loaded one (``BundleSearcher``: a ``Bundle`` or a
            ``ShardedBundle``, e.g. over Ray Serve shards).
        load: how a directory is loaded (None: ``LoadOptions()``).
        max_query_chars: longest query accepted (longer: 422).
        max_k: largest ``k`` accepted and the depth pages are cut from (``state.ServiceState``).
        exposure: the API key and rate limit (None: none, for loopback).
        events: the event-log directory (None: off; ``/events`` answers 409).
        events_flush_seconds: how often the log's buffered records are written.
        event_secret: the key of the search ids, the same in every worker of one service (None: a
            new one for this app alone; ``serving.events``).
        compare: a second bundle (B), loaded as ``load`` says, compared with ``bundle`` (A) on
            every search (``serving.compare``; None: none). Its documents must be A's
            (``ValueError`` otherwise).
        compare_mode: ``interleave`` (team-draft interleaving of A and B on every search) or ``ab``
            (each user served by A or B by bucket).
        compare_salt: the salt of the ab buckets.
        allow_writes: take document changes (``POST /documents``, ``DELETE /documents/{id}``),
            logged in ``changes`` (None: ``<bundle>.changes``; ``index.live``).
        changes: the change log's directory.
        merge_at: changed documents at which a background merge starts (0: never).

    Without ``compare``, a plain bundle is served through an ``index.LiveIndex``: each worker
    follows the change log and picks up a bundle rebuilt at the served path (``index.live``). The
    searches go to one ``index.Searcher``: the live index, the bundle, or the compared pair
    (``serving.compare.ComparedPair``).

    Returns:
        The FastAPI app, ready to serve."""
    exposure = exposure or Exposure()
    b, comparison = _bundles(bundle, load, compare, compare_mode, compare_salt, allow_writes)
    plain = b.base  # the plain bundle in this process (None: sharded, its documents in its shards)
    live = (
        LiveIndex(plain, changes, load=load, writes=allow_writes, merge_at=merge_at)
        if comparison is None
        and plain is not None
        and isinstance(plain.path, Path)
        and (plain.path / MANIFEST).is_file()
        else None
    )
    metrics = Metrics()
    if isinstance(b, Observed):  # its calls to other processes (a sharded bundle's shards) counted
        b.observe = metrics.shard_call
    log = None if events is None else _event_log(b, comparison, metrics, events, event_secret, events_flush_seconds)
    highlighter = Highlighter(b.lexical)
    served: Searcher = comparison.pair if comparison is not None else live or b
    batcher = SearchBatcher(served, observe=metrics.batch.observe)
    state = ServiceState(
        b,
        batcher,
        highlighter,
        metrics,
        exposure=exposure,
        events=log,
        compare=comparison,
        live=live,
        max_query_chars=max_query_chars,
        max_k=max_k,
    )
    # FastAPIOffline: /docs (Swagger UI 5) and /redoc from files in the package, not FastAPI's
    # default CDN, so they work on a machine without network
    app = FastAPIOffline(
        title="semsearch",
        version=__version__,
        lifespan=lifespan,
        static_url=DOCS_STATIC,
        description="Lexical ∪ semantic search over a semsearch bundle.",
    )
    app.state.service = state
    _add_middleware(app, state)
    install(app, state)
    return app


def _bundles(
    bundle: str | Path | BundleSearcher,
    load: LoadOptions | None,
    compare: str | Path | Bundle | None,
    compare_mode: str,
    compare_salt: str,
    allow_writes: bool,
) -> tuple[BundleSearcher, Comparison | None]:
    """The served bundle, loaded, and its comparison with ``compare`` (None: none); a sharded
    bundle is served for searches alone, a service taking writes serves one bundle."""
    b = open_bundle(bundle, load) if isinstance(bundle, str | Path) else bundle
    plain = b.base  # the plain bundle in this process (None: sharded, its documents in its shards)
    if plain is None and (compare is not None or allow_writes):
        raise ValueError(
            f"{b.path}: a sharded bundle is served for searches: not with "
            + ("--compare" if compare is not None else "--allow-writes (changes go to a plain bundle; docs/scaling.md)")
        )
    comparison = None
    if compare is not None and plain is not None:
        other = Bundle.load(compare, load) if isinstance(compare, str | Path) else compare
        check_same_documents(plain, other)
        comparison = Comparison(
            ComparedPair(plain, other, mode=compare_mode, salt=compare_salt),  # type: ignore[arg-type]  # checked by ComparedPair
            Highlighter(other.lexical),
        )
    if allow_writes and comparison is not None:
        raise ValueError("a service taking writes serves one bundle: not with compare")
    return b, comparison


def _event_log(
    b: BundleSearcher,
    comparison: Comparison | None,
    metrics: Metrics,
    events: str | Path,
    event_secret: str | None,
    events_flush_seconds: float,
) -> EventLog:
    """The worker's event log in ``events``, its records naming the served bundle (both, interleaved)."""
    name, version = bundle_identity(b.path, b.manifest)
    if comparison is not None and comparison.mode == "interleave":  # every list holds both
        other_name, other_version = bundle_identity(comparison.other.path, comparison.other.manifest)
        name, version = f"{name}+{other_name}", f"{version}+{other_version}"
    return EventLog(
        events,
        secret=event_secret or new_secret(),
        flush_seconds=events_flush_seconds,
        bundle=name,
        bundle_version=version,
        count=metrics.event,
    )


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The worker's serving time: its threads started (in the worker process: they do not
    survive a fork), ``ready`` set; at the end everything closed, the buffered events written."""
    state: ServiceState = app.state.service
    b, log, live, comparison, ready, batcher = (
        state.bundle, state.events, state.live, state.compare, state.ready, state.batcher
    )  # fmt: skip
    # before /ready: each compiled kernel a search (and a change) runs is compiled or loaded from
    # numba's cache now, not by the first request of each kind (in a thread, as the batcher runs
    # a remote searcher's passes: a sharded bundle's calls to Ray Serve shards wait, which a
    # deployment's event loop may not)
    app.state.warm_searches = await asyncio.to_thread(warm_up, state)
    # the OpenAPI document, generated once and kept by FastAPI: the check of query parameters
    # (``http.KnownParameters``) reads it at the first request that has any
    app.openapi()
    # the loaded bundle (indexes, documents, models: millions of objects) lives as long as the
    # process: keep it out of the garbage collector's scans, whose full passes over it would
    # pause searches under load
    gc.collect()
    gc.freeze()
    # a request's objects die by reference counting; young-generation passes at the default
    # threshold would run many times a second in a busy worker for nothing
    thresholds = gc.get_threshold()
    gc.set_threshold(GC_YOUNG, *thresholds[1:])
    if log is not None:
        log.start()  # here, in the worker process: the writer's thread does not survive a fork
    if live is not None:
        live.start()  # (likewise: the thread following the change log and the manifest)
    ready.set()
    yield
    gc.set_threshold(*thresholds)
    ready.clear()
    batcher.close()
    if live is not None:
        live.close()  # graceful shutdown: in-flight searches finish, then the threads stop
    else:
        b.close()
    if comparison is not None:
        comparison.other.close()
    if log is not None:
        log.close()  # the buffered events written
    print(STOPPED, file=sys.stderr, flush=True)


WARM_WORDS = 8
"""Words of the warm-up query (a document's first words: every stage finds something)."""


def warm_up(state: ServiceState) -> int:
    """Run each kind of search the service answers once, before it is ready, in this worker: on
    the served searcher (and, compared, on each bundle alone, as the ab arms search), per model,
    without a filter and (a bundle with facet or numeric fields) with one on the first hit's
    value, the hits' rows read and highlighted as /search does; then, on a live index that can
    change, the same searches on a scratch delta (``LiveIndex.warm``). The first search of each
    kind otherwise pays for loading or compiling its numba kernels and for its first calls
    (docs/serving.md has the figures). A failing warm-up search (a vector store down at start)
    is reported and the service starts anyway: it recovers as a search would. The searches run."""
    served = state.batcher.searcher
    bundle = state.current()
    query = _warm_query(bundle)
    facets = 10 if state.filterable else 0
    searchers = [served, *(state.bundles if state.compare is not None else ())]
    requests: list[SearchRequest] = []
    n = 0
    # the warm-up's calls to other processes (a sharded bundle's shards) are not the service's:
    # not counted in its metrics
    observed = state.bundle if isinstance(state.bundle, Observed) else None
    observe = observed.observe if observed is not None else None
    if observed is not None:
        observed.observe = None
    try:
        models: list[str | None] = [*state.models] or [None]  # (None: the bundle's own, a lexical one's none)
        for model in models:
            plain = SearchRequest(query, 10, model=model, facets=facets)
            for s in searchers:
                result = s.search_request(plain)
                rows = s.hits(result)
                terms = state.highlighter.terms(result.query)
                for row in rows:
                    state.highlighter.spans(terms, row.title or row.text)
                n += 1
                flt = _warm_filter(bundle, rows) if state.filterable else None
                if flt is not None:
                    s.search_request(replace(plain, filters=flt))
                    n += 1
                    if s is served:
                        requests.append(replace(plain, filters=flt))
            requests.append(plain)
        if state.live is not None:
            n += state.live.warm(requests)
    except Exception as e:  # noqa: BLE001  # reported; the first searches pay for what did not run
        print(f"semsearch: warm-up: {e}", file=sys.stderr, flush=True)
    finally:
        if observed is not None:
            observed.observe = observe
    return n


def _warm_query(bundle: BundleSearcher) -> str:
    """A query every stage finds something for: a document's first words (a sharded bundle's
    most frequent words, from its spelling corrector; else a word)."""
    plain = bundle.base
    if plain is not None:
        c = plain.corpus
        for i in range(min(len(c), 100)):
            words = f"{c.titles[i]} {c.texts[i]}".split()
            if words:
                return " ".join(words[:WARM_WORDS])[:MAX_QUERY_CHARS]
    if bundle.corrector is not None and bundle.corrector.counts:
        counts = bundle.corrector.counts
        return " ".join(sorted(counts, key=counts.__getitem__, reverse=True)[:WARM_WORDS])
    return "search"


def _warm_filter(bundle: BundleSearcher, rows: list[Hit]) -> Filter | None:
    """A filter on a facet value (else a numeric field's whole range) of the first hit, which
    allows it (None: the hits have no such value)."""
    fi = bundle.filters
    for row in rows[:1]:
        for name in fi.facets:
            v = row.fields.get(name)
            value = v if isinstance(v, str) else v[0] if isinstance(v, list) and v else None
            if value is not None:
                return Filter((FacetClause(name, (value,)),))
        for name in fi.numeric:
            if row.fields.get(name) is not None:
                return Filter((RangeClause(name, ((None, None),)),))
    return None


def _add_middleware(app: FastAPI, state: ServiceState) -> None:
    """The guards and measures every request goes through, outermost last."""
    # the guard runs inside the measuring middleware, so refusals (401, 413, 414, 429) are counted too
    # a chunked body (no Content-Length for the guard to check) is cut off at its path's limit as it is read
    # innermost: a query parameter the operation does not declare is refused by name (after the guards)
    app.add_middleware(
        KnownParameters,
        declared=lambda: declared_parameters(app.openapi()),
        closed=("/static/", DOCS_STATIC + "/", "/openapi.json"),
    )
    app.add_middleware(BodyLimit)
    app.add_middleware(Guard, exposure=state.exposure)
    # (each route's path, those of the included routers' routes too)
    app.add_middleware(
        Measure, metrics=state.metrics, paths=lambda: {r.path for r in iter_route_contexts(app.routes) if r.path}
    )
    app.add_middleware(HeadAsGet)  # outermost: HEAD answered wherever GET is, every answer without its body


def app_from_options(options: ServeOptions) -> FastAPI:
    """The app of one worker process of ``semsearch serve --workers N`` (uvicorn's factory, called
    in each worker with the ``ServeOptions`` the parent validated)."""
    return create_app(
        options.bundle,
        load=options.load,
        exposure=options.exposure,
        events=options.events,
        events_flush_seconds=options.events_flush_seconds,
        event_secret=options.event_secret,
        compare=options.compare,
        compare_mode=options.compare_mode,
        compare_salt=options.compare_salt,
        allow_writes=options.allow_writes,
        changes=options.changes,
        merge_at=options.merge_at if options.allow_writes else 0,
    )


__all__ = [
    "GC_YOUNG",
    "MAX_K",
    "MAX_QUERY_CHARS",
    "MULTIPROC_ENV",
    "Highlighter",
    "SearchBatcher",
    "app_from_options",
    "create_app",
    "warm_up",
]
