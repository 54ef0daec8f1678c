"""The search page (``/``) and its assets (``/static/{name}``), each with the page's
Content-Security-Policy: scripts only from this origin (no inline script, no eval), no plugins, no
framing. /docs and /redoc (fastapi-offline's inline script) do not get it."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

from .. import schemas
from ..state import ServiceState
from .common import query_param
from .errors import BadRequest

STATIC = Path(__file__).parent.parent / "static"
PAGE = STATIC / "index.html"
ASSETS = {"search.js": "text/javascript; charset=utf-8", "search.css": "text/css; charset=utf-8"}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
PAGE_HEADERS = {"Content-Security-Policy": CSP, "Referrer-Policy": "no-referrer"}


def page_params() -> list[dict[str, Any]]:
    """The page's parameters in the OpenAPI document. The page's own address holds its state
    (search.js: stateFromUrl), read by its script, not by the server; any value is taken (a bad
    one falls back to the default)."""
    return [
        query_param(name, f"The page's {what} (read by the page's script; any value).", {"type": "string"})
        for name, what in (("q", "query"), ("k", "hits per page"), ("page", "page number"), ("merge", "merge"))
    ] + [
        {
            **query_param(
                "filter",
                "The page's active filters, repeatable (read by the page's script, sent to /search; any value).",
                {"type": "array", "items": {"type": "string"}},
            ),
            "style": "form",
            "explode": True,
        }
    ]


@cache
def files() -> tuple[str, dict[str, bytes]]:
    """The page's HTML and its assets' bytes, read once (at the first service built)."""
    return PAGE.read_text(encoding="utf-8"), {name: (STATIC / name).read_bytes() for name in ASSETS}


def home() -> HTMLResponse:
    return HTMLResponse(files()[0], headers=PAGE_HEADERS)


def asset(name: str) -> Response:
    assets = files()[1]
    if name not in assets:
        raise BadRequest(f"no such file: {name}", 404)
    return Response(assets[name], media_type=ASSETS[name], headers=PAGE_HEADERS)


def router(state: ServiceState) -> APIRouter:
    """The page and its assets (the page's files read now: a missing one fails the start)."""
    files()
    r = APIRouter()
    r.add_api_route(
        "/",
        home,
        methods=["GET"],
        response_class=HTMLResponse,
        summary="The search page (HTML)",
        responses={200: {"content": {"text/html": {"schema": {"type": "string"}}}}, **schemas.json_errors(422)},
        openapi_extra={"parameters": page_params()},
    )
    r.add_api_route("/static/{name}", asset, methods=["GET"], include_in_schema=False)
    return r
