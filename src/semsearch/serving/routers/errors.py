"""The service's error answers: every failure becomes a JSON ``{"error": ...}`` answer (a shard
or the vector store down: 503 with ``Retry-After``)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...index.bundle.coordinator import ShardUnavailable
from ...index.pgstore import PgStoreError


class BadRequest(Exception):
    """A client error answered with ``status`` and ``{"error": message}``."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message, self.status = message, status


async def bad_request(_: Request, e: BadRequest) -> JSONResponse:
    return JSONResponse({"error": e.message}, status_code=e.status)


async def store_down(_: Request, e: PgStoreError) -> JSONResponse:
    # the vector store's server is unreachable: the store reconnects on a later request
    return JSONResponse({"error": f"vector store unavailable: {e}"}, status_code=503, headers={"Retry-After": "1"})


async def shard_down(_: Request, e: ShardUnavailable) -> JSONResponse:
    # every replica of one shard is gone: an answer without its documents would look complete
    return JSONResponse({"error": str(e), "missing_shard": e.shard}, status_code=503, headers={"Retry-After": "1"})


async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
    first = e.errors()[0] if e.errors() else {}
    where = ".".join(str(x) for x in first.get("loc", ()) if x != "query")
    return JSONResponse({"error": f"{where}: {first.get('msg', 'invalid request')}"}, status_code=422)


async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
    # keep the exception's headers: the router's 405 carries ``Allow`` (RFC 9110 requires it),
    # which names HEAD beside GET (``http.HeadAsGet`` answers it)
    headers = dict(e.headers or {})
    allow = [m.strip() for m in headers.get("Allow", "").split(",") if m.strip()]
    if "GET" in allow and "HEAD" not in allow:
        headers["Allow"] = ", ".join([*allow, "HEAD"])
    return JSONResponse({"error": str(e.detail)}, status_code=e.status_code, headers=headers or None)


def add_error_handlers(app: FastAPI) -> None:
    """The handlers above, each for its exception."""
    app.add_exception_handler(BadRequest, bad_request)  # type: ignore[arg-type]  # handler of a subclass
    app.add_exception_handler(PgStoreError, store_down)  # type: ignore[arg-type]
    app.add_exception_handler(ShardUnavailable, shard_down)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, invalid)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]
