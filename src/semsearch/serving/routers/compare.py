"""``GET /search`` when the service compares two bundles (``serving.compare``): A and B's
team-draft interleaving, or the user's arm's bundle alone (ab); each hit says its team, the answer
its arm. Its parameters and documentation are the plain /search's (``routers.search``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...index.hybrid import HybridHit
from ...index.searcher import SearchRequest
from ..compare import TEAMS, ComparedResult
from ..events import new_nonce
from ..state import ServiceState, service_of
from .common import JSON
from .search import add_search_route, hit_json, read


def _hits(
    state: ServiceState, page_hits: list[tuple[int, HybridHit]], result: ComparedResult, start: int
) -> list[dict[str, Any]]:
    """The page's hits, each from its team's bundle, marked with the words that team searched."""
    highlighters = state.highlighters
    # the words each shown team searched (its bundle's spelling correction and analyzer)
    terms = {t: highlighters[t].terms(result.searched[t]) for t in {t for t, _ in page_hits}}
    rows = state.batcher.searcher.hits(result)
    hits = [
        {**hit_json(start + i + 1, h, row, highlighters[t], terms[t]), "team": TEAMS[t]}
        for i, ((t, h), row) in enumerate(zip(page_hits, rows, strict=True))
    ]
    return hits


async def compared(request: Request) -> Response:
    """/search comparing A and B (``routers.search.SEARCH_DOC``): the compared pair
    (``serving.compare.ComparedPair``) answers, interleaved or the user's arm's bundle alone."""
    state = service_of(request)
    batcher, bundles, events, max_k = state.batcher, state.bundles, state.events, state.max_k
    text, kk, start, merge, model, client, flt, facets = read(request, state)
    nonce = new_nonce()  # the search id's random part, drawn first: it seeds the interleaving
    wanted = SearchRequest(
        text, kk, offset=start, model=model, merge_by=merge, filters=flt, facets=facets, client=client, nonce=nonce
    )
    result = await batcher.search(wanted)
    assert isinstance(result, ComparedResult)  # (the compared pair's answer)
    arm, lead, timing = result.arm, result, result.timing
    page_hits = list(zip(result.teams, result.hits, strict=True))
    served_by = None if result.team is None else state.identities[result.team]
    # A's when interleaved (B's hits carry B's scores); the serving team's in ab
    scores = state.score_by(merge, bundles[result.team or 0])
    hits = _hits(state, page_hits, result, start)
    more = len(page_hits) == kk and start + 2 * kk <= max_k
    search_id = None
    if events is not None:
        search_id = events.impression(
            text,
            tuple(str(h.doc_id) for _, h in page_hits),
            tuple(str(h.sources.name) for _, h in page_hits),
            k=kk,
            offset=start,
            client_id=client,
            arm=arm,
            teams=tuple(TEAMS[t] for t, _ in page_hits),
            nonce=nonce,
            served_by=served_by,
        )
    return JSON(
        {
            "search_id": search_id,
            "query": text,
            "corrected_query": lead.query if lead.query != text else None,
            "k": kk,
            "offset": start,
            "merge": merge,
            "score_by": scores,
            "next_offset": start + kk if more else None,
            "hits": hits,
            "filters": flt.expressions(),
            "facets": lead.facets or {},
            "timing_ms": timing,
            "arm": arm,
        }
    )


def router(state: ServiceState) -> APIRouter:
    """/search comparing the served bundle (A) with ``state.compare``'s (B)."""
    r = APIRouter()
    add_search_route(r, state, compared)
    return r
