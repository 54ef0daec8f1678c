"""``GET /search`` when the service compares two bundles (``serving.compare``): A and B's
team-draft interleaving, or the user's arm's bundle alone (ab); each hit says its team, the answer
its arm. Its parameters and documentation are the plain /search's (``routers.search``)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...index.bundle import Result
from ...index.hybrid import HybridHit
from ..compare import INTERLEAVE_ARM, TEAMS, interleave, seed_of
from ..events import new_nonce
from ..state import ServiceState, service_of
from .common import JSON
from .search import add_search_route, read


def _hits(
    state: ServiceState, page_hits: list[tuple[int, HybridHit]], results: list[Result], start: int
) -> list[dict[str, Any]]:
    """The page's hits, each from its team's bundle, marked with the words that team searched."""
    bundles, highlighters = state.bundles, state.highlighters
    # the words each shown team searched (its bundle's spelling correction and analyzer)
    terms = {t: highlighters[t].terms(results[t].query) for t in {t for t, _ in page_hits}}
    hits = []
    for i, (t, h) in enumerate(page_hits):
        corpus = bundles[t].corpus  # type: ignore[union-attr]  # compared bundles are plain ones (create_app)
        row = corpus.index[h.doc_id]
        title, body = corpus.titles[row], corpus.texts[row]
        hits.append(
            {
                "rank": start + i + 1,
                "doc_id": h.doc_id,
                "title": title,
                "text": body,
                "source": h.sources.name,
                "score": h.score,
                "lexical_score": h.lexical,
                "semantic_score": h.semantic,
                "lexical_rank": h.lexical_rank,
                "semantic_rank": h.semantic_rank,
                "fields": corpus.fields(row),
                "highlight_field": "title" if title else "text",
                "highlights": highlighters[t].spans(terms[t], title or body),
                "team": TEAMS[t],
            }
        )
    return hits


async def compared(request: Request) -> Response:
    """/search comparing A and B (``routers.search.SEARCH_DOC``)."""
    state = service_of(request)
    compare, batchers, bundles, events, max_k = (
        state.compare, state.batchers, state.bundles, state.events, state.max_k
    )  # fmt: skip
    assert compare is not None
    text, kk, start, merge, model, client, flt, facets = read(request, state)
    nonce = new_nonce()  # the search id's random part, drawn first: it seeds the interleaving
    served_by: tuple[str, str] | None = None
    if compare.mode == "interleave":
        results = await asyncio.gather(*(x.search(text, start + kk, model, merge, flt, facets) for x in batchers))
        found = [{h.doc_id: h for h in r.hits} for r in results]
        ranked = [[h.doc_id for h in r.hits] for r in results]
        ids, codes = interleave(ranked[0], ranked[1], start, kk, seed_of(nonce))
        page_hits = [(t, found[t][d]) for d, t in zip(ids, codes, strict=True)]
        arm, lead = INTERLEAVE_ARM, results[0]
        timing = {**lead.timing, **{f"b_{name}": ms for name, ms in results[1].timing.items()}}
        scores = state.score_by(merge)  # A's; B's hits carry B's scores
    else:
        arm, team = compare.assign(client, nonce)
        lead = await batchers[team].search(text, start + kk, model, merge, flt, facets)
        results = [lead, lead]
        page_hits = [(team, h) for h in lead.hits[start:]]
        timing, served_by = lead.timing, state.identities[team]
        scores = state.score_by(merge, bundles[team])
    hits = _hits(state, page_hits, results, start)
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
