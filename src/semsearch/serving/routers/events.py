"""``POST /events``: a click on a shown result, logged in the event log under its search's id."""

from __future__ import annotations

from fastapi import APIRouter

from .. import schemas
from ..events import UnknownSearch
from ..state import ServiceState, State
from .errors import BadRequest


async def post_event(click: schemas.ClickEvent, state: State) -> dict[str, str]:
    """Logs that a user opened the result ``object_id`` shown at ``position`` (its 1-based
    ``rank``) by the search ``query_id`` (the answer's ``search_id``). 202 once buffered for
    the event log; 404 when the search id is unknown (forged, altered, expired after 24 h, or
    issued before the service restarted); 422 when the position was not on that answer's page;
    409 when the service logs no events (started without ``--events``). Any worker checks the
    id (it is signed), so the click need not reach the worker that answered the search."""
    events = state.events
    if events is None:
        raise BadRequest("this service logs no events (it was started without --events): nothing recorded", 409)
    try:
        events.click(click.query_id, click.object_id, click.position, click.client_id)
    except UnknownSearch as e:
        raise BadRequest(str(e), 404) from None
    except ValueError as e:
        raise BadRequest(str(e), 422) from None
    return {"status": "accepted"}


def router(state: ServiceState) -> APIRouter:
    """/events, its refusals listed with the service's guards."""
    r = APIRouter()
    r.add_api_route(
        "/events",
        post_event,
        methods=["POST"],
        status_code=202,
        summary="Log a click on a result of a search (UBI event fields)",
        response_model=schemas.EventAccepted,
        responses=schemas.errors(400, 404, 409, 413, 414, 422, *state.guarded),
    )
    return r
