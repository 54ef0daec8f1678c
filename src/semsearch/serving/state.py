"""What the service's routers share (``ServiceState``): the served bundle and its live index, the
batcher, highlighter, metrics, event log and comparison of one worker, with its limits. ``create_app``
builds it and keeps it at ``app.state.service``; a handler reaches it through the ``State``
dependency (or ``service_of(request)`` on a route that solves none)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Annotated, cast

from fastapi import Depends, Request

from ..index.bundle import Bundle
from ..index.live import LiveIndex
from ..index.searcher import BundleSearcher
from .batching import SearchBatcher
from .compare import Comparison
from .events import EventLog, bundle_identity
from .exposure import Exposure
from .highlighter import Highlighter
from .telemetry import Metrics

MAX_QUERY_CHARS = 1000
MAX_K = 1000


def stored_fields(bundle: Bundle) -> list[str]:
    """The stored fields an upserted document may carry: the bundle schema's facets, numeric and
    stored columns (none for a collection of id, title and text)."""
    schema = bundle.manifest.get("schema") or {}
    return sorted({*schema.get("facets", []), *schema.get("numeric", []), *schema.get("stored", [])})


@dataclass
class ServiceState:
    """One worker's service over the loaded bundle ``bundle``.

    Attributes:
        bundle: the loaded bundle every search runs on.
        batcher: the micro-batcher the searches go through (over the served ``Searcher``: the
            live index, ``bundle`` itself, or the compared pair).
        highlighter: marks the title words that matched a query term.
        metrics: the worker's Prometheus metrics.
        exposure: the guards, whose refusals (401, 429) the OpenAPI document lists.
        events: the worker's event log (None: off; ``/events`` answers 409).
        compare: a second bundle (B) compared with ``bundle`` (A) on every search
            (``serving.compare``; None: ``bundle`` alone).
        live: ``bundle`` served with its changes and reloads (``index.live``; None: ``bundle`` as
            loaded); with writes on, ``POST /documents`` and ``DELETE /documents/{id}`` change it.
        max_query_chars: longest query accepted (longer: 422).
        max_k: largest ``k`` accepted, and the depth pages are cut from: ``offset`` below it, and
            ``k`` cut to ``max_k - offset`` (the answer's ``k`` says so).
        ready: set while the bundle is served (``/ready`` answers 200).
        started: when the service was built (``/health``'s uptime).

    What follows from them is fixed when the state is built, from the bundle as loaded (a reload
    changes none of it): ``filterable``, ``models``, ``explainable``, ``guarded``, ``store_errors``,
    ``stored`` and the compared bundles' ``bundles``, ``identities`` and ``highlighters``."""

    bundle: BundleSearcher
    batcher: SearchBatcher
    highlighter: Highlighter
    metrics: Metrics
    exposure: Exposure = field(default_factory=Exposure)
    events: EventLog | None = None
    compare: Comparison | None = None
    live: LiveIndex | None = None
    max_query_chars: int = MAX_QUERY_CHARS
    max_k: int = MAX_K
    ready: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        b, compare, live, exposure = self.bundle, self.compare, self.live, self.exposure
        self.filterable = b.filterable and all(x.filterable for x in ([compare.other] if compare else []))
        # compared bundles: a model named in a search must be one of both (each runs its own default otherwise)
        self.models = [m for m in b.semantic if compare is None or m in compare.other.semantic]
        # /explain's models: the bundle's (A's, when compared) DSSM/CLSM ones; its schema's enum and its
        # check are this list (without any, ``model`` is not a parameter of /explain)
        self.explainable = b.explainable_models()
        self.guarded = (401,) * (exposure.api_key is not None) + (429,) * (exposure.rate > 0)
        # the store / a shard may be down
        self.store_errors = (503,) * b.capabilities.fallible
        self.stored = stored_fields(live.base) if live is not None and live.writes else None
        self.bundles = (b, compare.other) if compare is not None else (b,)
        self.identities = [bundle_identity(x.path, x.manifest) for x in self.bundles]
        self.highlighters = (self.highlighter, compare.highlighter) if compare is not None else (self.highlighter,)

    def current(self) -> BundleSearcher:
        """The bundle served now (a reload swaps it)."""
        return self.live.base if self.live is not None else self.bundle

    def score_by(self, merge: str, bundle: BundleSearcher | None = None) -> str:
        """What a hit's ``score`` is: the ranker's when the bundle (None: ``bundle``) has one, else the merge's."""
        return "ranker" if (self.bundle if bundle is None else bundle).ranker is not None else merge


def service_of(request: Request) -> ServiceState:
    """The service state of the app answering ``request``."""
    return cast(ServiceState, request.app.state.service)


async def service(request: Request) -> ServiceState:
    """``service_of`` as a FastAPI dependency (``async``: solved on the event loop, no thread hand-off)."""
    return service_of(request)


State = Annotated[ServiceState, Depends(service)]
"""A handler's parameter annotated ``State`` receives the service state (not in the OpenAPI document)."""

__all__ = ["MAX_K", "MAX_QUERY_CHARS", "ServiceState", "State", "service", "service_of", "stored_fields"]
