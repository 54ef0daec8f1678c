"""The service's routes, one router per concern over the shared ``state.ServiceState``: /search
(``search``; comparing two bundles: ``compare``), /explain (``explain``), /events (``events``), the
document writes (``documents``), /health, /ready and /metrics (``operations``) and the search page
(``page``); with the error answers (``errors``) and the OpenAPI document's additions (``openapi``)."""

from __future__ import annotations

from fastapi import FastAPI

from ..state import ServiceState
from . import compare, documents, events, explain, operations, page, search
from .errors import add_error_handlers
from .openapi import REQUIRED, contract


def install(app: FastAPI, state: ServiceState) -> None:
    """The error handlers and routers of the service over ``state`` on ``app``, and its OpenAPI
    document (``openapi.contract``)."""
    add_error_handlers(app)
    app.include_router(compare.router(state) if state.compare is not None else search.router(state))
    for concern in (explain, events, documents, operations, page):
        app.include_router(concern.router(state))
    id_field = documents.id_field(state)
    app.openapi = lambda: contract(FastAPI.openapi(app), REQUIRED, state.stored, id_field)  # type: ignore[method-assign]  # override


__all__ = ["install"]
