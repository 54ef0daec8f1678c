"""``POST /documents`` and ``DELETE /documents/{doc_id}`` (``index.live``): each answered once the
change is fsync'd in the change log, and seen by this worker's next search (the other workers'
within a poll of the log). A service without writes answers both with 404 saying so.

A document comes in the shape of the bundle's documents: ``id``, ``title``, ``text`` and
``fields`` for a collection of id, title and text (a BEIR folder, a TSV); for a bundle built from
a table, a row of that table, its columns as the manifest's ``schema`` names them
(``schemas.rows_body``: validated once, here), mapped onto the document the live index stores
as the build maps a row (``row_document``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import APIRouter, Query
from fastapi import Path as PathParam

from ...index.live import Document, LiveIndex
from .. import schemas
from ..state import ServiceState, State
from .errors import BadRequest

WAIT_DOC = (
    "Answer once this worker's searches see the change (default: once it is durable; every worker "
    "sees it within a second)."
)


def _writable(state: ServiceState) -> LiveIndex:
    assert state.live is not None  # the routes are there only with writes on (``router``)
    return state.live


UPSERT_DOC = """Adds each document, or replaces the one with its id, encoded with the bundle's served
encoders. The answer comes once the change is written and fsync'd in the change log (a crash
after it loses nothing); every worker's searches see it within a second (with ``wait``: this
worker's next search). A merge later folds the changes into the bundle."""


def upsert(body: schemas.DocumentsIn, state: State, wait: bool = Query(False, description=WAIT_DOC)) -> dict[str, Any]:
    """``UPSERT_DOC``, for a collection of id, title and text: each document's ``fields`` only
    the stored fields the bundle's schema names."""
    allowed_fields = state.stored or []
    for i, d in enumerate(body.documents):
        extra = sorted(set(d.fields) - set(allowed_fields))
        if extra:
            raise BadRequest(
                f"documents[{i}].fields: {extra[0]!r} is not a stored field of this bundle "
                f"(its schema names {', '.join(allowed_fields) or 'none'})",
                422,
            )
    return _upserted(state, [Document(d.id, d.title, d.text, dict(d.fields)) for d in body.documents], wait)


def row_document(row: Mapping[str, Any], schema: Mapping[str, Any]) -> Document:
    """The document a table's row (validated: ``schemas.rows_body``) is, as the build reads a
    row (``data.table``): the first searched column its title, the others joined by a space
    (the blank ones left out) its text; its facets, numbers and other columns its stored
    fields, a missing facet or numeric column null."""
    fields, facets, numeric = schema.get("fields", []), schema.get("facets", []), schema.get("numeric", [])
    parts = [_text(row.get(f)) for f in fields]
    stored: dict[str, Any] = {}
    for name, value in row.items():
        if name == schema["id"] or (name in fields and name not in facets and name not in numeric):
            continue
        stored[name] = (value.strip() or None) if name in facets and isinstance(value, str) else value
    for name in (*facets, *numeric):
        stored.setdefault(name, None)
    return Document(row[schema["id"]], parts[0] if parts else "", " ".join(p for p in parts[1:] if p.strip()), stored)


def _text(value: Any) -> str:
    """A searched column's text (a numeric one's number as text; null: empty)."""
    return "" if value is None else value if isinstance(value, str) else str(value)


def _row_upsert(schema: Mapping[str, Any], body_model: type[Any]) -> Any:
    """The ``POST /documents`` endpoint of a bundle built from a table, its body ``body_model``
    (``schemas.rows_body``)."""

    def upsert_rows(body: Any, state: State, wait: bool = Query(False, description=WAIT_DOC)) -> dict[str, Any]:
        rows = [r.model_dump(by_alias=True, exclude_unset=True) for r in body.documents]
        return _upserted(state, [row_document(r, schema) for r in rows], wait)

    # FastAPI reads the body's model from the annotation
    upsert_rows.__annotations__ = {**upsert_rows.__annotations__, "body": body_model}
    upsert_rows.__doc__ = UPSERT_DOC + " Each document is a row of the table the bundle was built from."
    return upsert_rows


def _upserted(state: ServiceState, documents: Sequence[Document], wait: bool) -> dict[str, Any]:
    """The documents upserted (an id given twice: the later one, as two upserts one after the other)."""
    live = _writable(state)
    docs = list({d.id: d for d in documents}.values())
    try:
        seq = live.upsert(docs, wait=wait)
    except ValueError as e:
        raise BadRequest(f"documents: {e}", 422) from None
    return {"status": "accepted", "seq": seq, "upserted": len(docs), "documents": len(live)}


def table_schema(state: ServiceState) -> Mapping[str, Any] | None:
    """The manifest's ``schema`` of a bundle built from a table (its documents are its rows), or
    None (a collection of id, title and text)."""
    schema = state.live.base.manifest.get("schema") if state.live is not None else None
    return schema if isinstance(schema, dict) and isinstance(schema.get("id"), str) else None


def id_field(state: ServiceState) -> str:
    """The name of an upserted document's id in ``POST /documents``' body: the table's id column, else ``id``."""
    schema = table_schema(state)
    return schema["id"] if schema is not None else "id"


def delete(
    state: State,
    doc_id: str = PathParam(description="The document's id (unknown: 404)."),
    wait: bool = Query(False, description=WAIT_DOC),
) -> dict[str, Any]:
    """Deletes the document; answered once the change is fsync'd in the change log, seen by
    every worker's searches within a second (with ``wait``: this worker's next search)."""
    live = _writable(state)
    try:
        seq = live.delete(doc_id, wait=wait)
    except KeyError:
        raise BadRequest(f"no document {doc_id!r}", 404) from None
    return {"status": "deleted", "seq": seq, "doc_id": doc_id, "documents": len(live)}


def writes_off() -> None:
    raise BadRequest("this service takes no document changes (start it with serve --allow-writes)", 404)


def router(state: ServiceState) -> APIRouter:
    """The write routes when the service takes writes (a write key: 401 listed), else their 404s;
    ``POST /documents`` takes the bundle's documents in their own shape (the module docstring)."""
    r = APIRouter()
    live = state.live
    if not (live is not None and live.writes):
        r.add_api_route("/documents/{doc_id:path}", writes_off, methods=["DELETE"], include_in_schema=False)
        r.add_api_route("/documents", writes_off, methods=["POST"], include_in_schema=False)
        return r
    keyed = (401,) * (state.exposure.write_key is not None)
    limited = (429,) * (429 in state.guarded)
    schema = table_schema(state)
    endpoint = upsert if schema is None else _row_upsert(schema, schemas.rows_body(schema))
    r.add_api_route(
        "/documents",
        endpoint,
        methods=["POST"],
        name="upsert",
        description=UPSERT_DOC,
        summary="Add or replace documents (durable when answered)",
        response_model=schemas.DocumentsAccepted,
        responses=schemas.errors(400, 413, 414, 422, *keyed, *limited),
    )
    r.add_api_route(
        "/documents/{doc_id}",
        delete,
        methods=["DELETE"],
        summary="Delete a document (durable when answered)",
        response_model=schemas.DocumentDeleted,
        responses=schemas.errors(400, 404, 414, 422, *keyed, *limited),
    )
    return r
