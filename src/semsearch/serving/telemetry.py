"""The service's telemetry: its Prometheus metrics and the ASGI middleware that counts every request
(the IR measures, NDCG and the rest, are ``evaluation.metrics``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from starlette.types import ASGIApp, Message, Receive, Scope, Send

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
NOSNIFF = (b"x-content-type-options", b"nosniff")


class Measure:
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
            "Searches run together in one search_many call of a pass (micro-batching; one call per distinct settings).",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.events = Counter(
            "semsearch_events",
            "Impressions and clicks by outcome: logged (buffered for the event log) or dropped "
            "(its buffer was full, or the log's writer failed).",
            ["kind", "outcome"],
            registry=self.registry,
        )
        self.shard_calls = Counter(
            "semsearch_shard_calls",
            "A sharded bundle's calls to its shards by shard, round (stage1, rescore, complete, documents) and "
            "outcome (ok, or failed: the shard did not answer).",
            ["shard", "round", "outcome"],
            registry=self.registry,
        )
        self.shard_seconds = Histogram(
            "semsearch_shard_call_seconds",
            "Time from a round's call to a shard to its answer, by shard.",
            ["shard"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self._children: dict[tuple[str, int], Any] = {}
        self._event_children: dict[tuple[str, str], Any] = {}

    def shard_call(self, shard: int, round_: str, seconds: float, ok: bool) -> None:
        """One call of a sharded bundle's round to one shard (``ShardedBundle.observe``)."""
        self.shard_calls.labels(str(shard), round_, "ok" if ok else "failed").inc()
        self.shard_seconds.labels(str(shard)).observe(seconds)

    def event(self, kind: str, outcome: str) -> None:
        child = self._event_children.get((kind, outcome))
        if child is None:
            child = self._event_children[(kind, outcome)] = self.events.labels(kind, outcome)
        child.inc()

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
