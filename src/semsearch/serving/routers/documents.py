"""``POST /documents`` and ``DELETE /documents/{doc_id}`` (``index.live``): each answered once the
change is fsync'd in the change log, and seen by this worker's next search (the other workers'
within a poll of the log). A service without writes answers both with 404 saying so."""

from __future__ import annotations

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


def upsert(body: schemas.DocumentsIn, state: State, wait: bool = Query(False, description=WAIT_DOC)) -> dict[str, Any]:
    """Adds each document, or replaces the one with its id, encoded with the bundle's served
    encoders. The answer comes once the change is written and fsync'd in the change log (a
    crash after it loses nothing); every worker's searches see it within a second (with
    ``wait``: this worker's next search). A merge later folds the changes into the bundle."""
    live, allowed_fields = _writable(state), state.stored or []
    for i, d in enumerate(body.documents):
        extra = sorted(set(d.fields) - set(allowed_fields))
        if extra:
            raise BadRequest(
                f"documents[{i}].fields: {extra[0]!r} is not a stored field of this bundle "
                f"(its schema names {', '.join(allowed_fields) or 'none'})",
                422,
            )
    # an id given twice: the later document wins, as two upserts one after the other
    docs = list({d.id: Document(d.id, d.title, d.text, dict(d.fields)) for d in body.documents}.values())
    try:
        seq = live.upsert(docs, wait=wait)
    except ValueError as e:
        raise BadRequest(f"documents: {e}", 422) from None
    return {"status": "accepted", "seq": seq, "upserted": len(docs), "documents": len(live)}


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
    """The write routes when the service takes writes (a write key: 401 listed), else their 404s."""
    r = APIRouter()
    live = state.live
    if not (live is not None and live.writes):
        r.add_api_route("/documents/{doc_id:path}", writes_off, methods=["DELETE"], include_in_schema=False)
        r.add_api_route("/documents", writes_off, methods=["POST"], include_in_schema=False)
        return r
    keyed = (401,) * (state.exposure.write_key is not None)
    limited = (429,) * (429 in state.guarded)
    r.add_api_route(
        "/documents",
        upsert,
        methods=["POST"],
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
