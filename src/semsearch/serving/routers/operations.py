"""What operators and orchestrators ask: ``/health`` (liveness and what is loaded), ``/ready``
(whether to send traffic) and ``/metrics`` (Prometheus text format)."""

from __future__ import annotations

import os
import time
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse

from .. import schemas
from ..state import ServiceState, State


def health(state: State) -> dict[str, Any]:
    b, live, started = state.bundle, state.live, state.started
    bb = state.current()
    return {
        "status": "ok",
        "documents": len(live) if live is not None else len(b),
        "lexical": bb.manifest.get("lexical"),
        "models": [m["name"] for m in bb.manifest.get("models", [])],
        "dataset": bb.manifest.get("dataset"),
        "uptime_s": round(time.time() - started, 1),
        "pid": os.getpid(),
    }


def readiness(state: State) -> JSONResponse:
    """For load balancers and orchestrators: send traffic only while this answers 200. The bundle
    is loaded and verified before the server listens; 503 before startup ends and from shutdown on."""
    b, live = state.bundle, state.live
    if state.ready.is_set():
        return JSONResponse({"status": "ready", "documents": len(live) if live is not None else len(b)})
    return JSONResponse({"status": "not ready"}, status_code=503)


def prometheus(state: State) -> PlainTextResponse:
    return PlainTextResponse(state.metrics.text(), media_type="text/plain; version=0.0.4")


def router(state: ServiceState) -> APIRouter:
    """The three routes (every operation refuses a query parameter it does not declare: 422,
    ``http.KnownParameters``)."""
    r = APIRouter()
    r.add_api_route(
        "/health",
        health,
        methods=["GET"],
        summary="Liveness and what is loaded",
        response_model=schemas.Health,
        responses=schemas.errors(422),
    )
    r.add_api_route(
        "/ready",
        readiness,
        methods=["GET"],
        summary="Readiness: 200 once the bundle is loaded and served, 503 otherwise",
        response_model=schemas.Ready,
        responses={
            503: {"model": schemas.NotReady, "description": "Not serving yet (starting) or any more (shutting down)."},
            **schemas.errors(422),
        },
    )
    r.add_api_route(
        "/metrics",
        prometheus,
        methods=["GET"],
        response_class=PlainTextResponse,
        summary="Prometheus metrics (text format)",
        responses={
            200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
            **schemas.json_errors(414, 422, *state.guarded),
        },
    )
    return r
