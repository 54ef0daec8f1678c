"""What the routers share: the ``JSON`` answer, the ``Direct`` route of the hot path, and the
reading of query parameters that handlers check themselves (strict UTF-8, ASCII integers) with the
OpenAPI entries documenting them."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import parse_qsl

import orjson
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from .errors import BadRequest

NON_BLANK = r"[^\s\x1c-\x1f\x85]"
"""A character ``str.strip`` keeps (JSON Schema's ECMA ``\\s`` lacks \\x1c-\\x1f and \\x85): a query must have one."""


class JSON(JSONResponse):
    """JSON by orjson, without FastAPI's response validation and encoding pass (the hot path). A
    ``JSONResponse`` so that FastAPI documents the route's ``response_model`` under it; handlers
    return it built, which FastAPI passes through without validating."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


class Direct(APIRoute):
    """A route whose endpoint takes the ``Request`` and returns a built ``Response``: FastAPI
    documents it like any route (parameters, response model) but calls the endpoint as is, without
    solving dependencies or reading a body (/search: the hot path)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        return self.endpoint


def strict_query(request: Request) -> dict[str, str]:
    """Query parameters decoded as strict UTF-8 (Starlette would silently replace bad bytes); a
    repeated one: its last value."""
    return dict(strict_pairs(request))


def strict_pairs(request: Request) -> list[tuple[str, str]]:
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


def integer(params: dict[str, str], name: str, default: int) -> int:
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


def query_text(params: dict[str, str], name: str, limit: int) -> str:
    """Parameter ``name``: not blank (else 400), at most ``limit`` characters (else 422)."""
    q = params.get(name, "")
    if not q.strip():
        raise BadRequest(f"parameter {name!r} is missing or empty")
    if len(q) > limit:  # the schema's maxLength: a validation error like the others (422)
        raise BadRequest(f"parameter {name!r} is {len(q)} characters long; the limit is {limit}", 422)
    return q


def query_param(name: str, description: str, schema: dict[str, Any], *, required: bool = False) -> dict[str, Any]:
    """One query parameter of the OpenAPI document, written as FastAPI writes the ones it validates
    (for a handler that reads and checks its parameters itself)."""
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": {**schema, "description": description, "title": name.title()},
    }


def query_doc(max_query_chars: int) -> dict[str, Any]:
    """The bounds of a query text that its handler checks itself (to answer with its own statuses
    and messages), only documented (``json_schema_extra``: no FastAPI validation); ``required`` is
    set in ``openapi.contract``."""
    return {"minLength": 1, "maxLength": max_query_chars, "pattern": NON_BLANK}
