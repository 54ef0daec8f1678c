"""Two HTTP basics every route of the service keeps, as pure ASGI middleware (Starlette's
``BaseHTTPMiddleware`` costs a task and a stream per request):

- ``HeadAsGet``: ``HEAD`` is answered wherever ``GET`` is (RFC 9110 Sec. 9.3.2): the request is
  served as a ``GET`` and its answer's status and headers are sent without the body. FastAPI
  routes declare ``GET`` alone, and the OpenAPI document lists only ``GET``.
- ``KnownParameters``: a query parameter the operation does not declare is refused by name (422,
  ``unknown query parameter 'brand'``) rather than silently ignored, so that a misspelt ``ofset``
  or a filter the API does not have is not mistaken for one that applied. The declared names are
  read from the app's OpenAPI document (``declared_parameters``), so the contract and the check
  come from one source."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

Declared = Mapping[tuple[str, str], frozenset[str]]
"""(method, path) -> the query parameter names that operation declares."""


class HeadAsGet:
    """Serve ``HEAD`` as ``GET`` and drop the answer's body (status and headers kept, with the
    ``Content-Length`` the ``GET`` would have)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headless(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headless)


def declared_parameters(openapi: dict[str, Any]) -> dict[tuple[str, str], frozenset[str]]:
    """The query parameters of each operation of an OpenAPI document."""
    return {
        (method.upper(), path): frozenset(p["name"] for p in op.get("parameters", ()) if p.get("in") == "query")
        for path, item in openapi.get("paths", {}).items()
        for method, op in item.items()
        if isinstance(op, dict)
    }


class KnownParameters:
    """Refuse (422, naming it) a query parameter that the request's operation does not declare.
    ``declared`` is called once, at the first request (the OpenAPI document is complete by then).
    Requests to paths outside the document and to ``closed`` prefixes (the search page's assets,
    the API docs' files), which take no parameters, are checked against the empty set; any other
    request (an unknown path, an undeclared method) goes on to its 404 or 405."""

    def __init__(self, app: ASGIApp, declared: Callable[[], Declared], closed: tuple[str, ...] = ()) -> None:
        self.app, self._declared_of, self.closed = app, declared, closed
        self._declared: Declared | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = scope.get("query_string", b"") if scope["type"] == "http" else b""
        if not query:
            await self.app(scope, receive, send)
            return
        if self._declared is None:
            self._declared = self._declared_of()
        path = scope["path"]
        allowed = self._declared.get((scope["method"], path))
        if allowed is None and scope["method"] == "GET" and path.startswith(self.closed):
            allowed = frozenset()
        if allowed is not None:
            names = [n for n, _ in parse_qsl(query.decode("latin-1"), keep_blank_values=True, errors="replace")]
            unknown = [n for n in dict.fromkeys(names) if n not in allowed]
            if unknown:
                await refuse(send, unknown, allowed)
                return
        await self.app(scope, receive, send)


async def refuse(send: Send, unknown: list[str], allowed: frozenset[str]) -> None:
    """The 422 answer naming the first unknown parameter (and the others, if any)."""
    names = ", ".join(repr(n) for n in unknown)
    known = f"; this endpoint takes {', '.join(sorted(allowed))}" if allowed else "; this endpoint takes none"
    noun = "parameter" if len(unknown) == 1 else "parameters"
    body = orjson.dumps({"error": f"unknown query {noun} {names}{known}"})
    await send(
        {
            "type": "http.response.start",
            "status": 422,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


__all__ = ["HeadAsGet", "KnownParameters", "declared_parameters"]
