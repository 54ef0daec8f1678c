"""``GET /explain``: the ranker's feature contributions to a hit's score when the bundle has a
ranker, else (or with ``model``) why a DSSM/CLSM model matches the document."""

from __future__ import annotations

import inspect
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from .. import schemas
from ..state import ServiceState, State
from .common import JSON, query_doc, query_text, strict_query
from .errors import BadRequest


def explain(request: Request, state: ServiceState, doc_id: str, top: int, model: str | None) -> Response:
    """With a ranker (and no ``model``): the ranker's score, bias and its ``top`` feature
    contributions by absolute size, with the hit's source and stage scores and ranks
    (``explained_by: "ranker"``). Otherwise CLSM: most active max-pool neurons, their winning
    words, neurons shared by both sides; any encoder: per-word contributions to the cosine."""
    explainable = state.explainable
    params = strict_query(request)
    text = query_text(params, "q", state.max_query_chars)
    if model is not None and model not in explainable:  # the schema's enum (undeclared without any)
        raise BadRequest(
            f"no model {model!r} to explain in this bundle (explainable: {', '.join(explainable) or 'none'})", 422
        )
    bb = state.current()
    try:
        if bb.ranker is not None and model is None:
            return JSON({**bb.explain_rank(text, doc_id, top=top), "explained_by": "ranker"})
        return JSON(bb.explain(text, doc_id, model=model or next(iter(explainable), None), top=top))
    except KeyError as e:
        raise BadRequest(str(e.args[0]) if e.args else f"no document {doc_id!r}", 404) from None
    except ValueError as e:
        raise BadRequest(str(e), 422) from None


def router(state: ServiceState) -> APIRouter:
    """/explain, its parameters documented with the service's query limit and the bundle's
    explainable models (the endpoint's signature is their documentation; ``explain`` answers)."""
    r = APIRouter()
    max_query_chars, explainable = state.max_query_chars, state.explainable

    def explain_model_doc(schema: dict[str, Any]) -> None:
        """/explain's ``model``: one of the explainable models (a string, not ``anyOf`` string or null)."""
        schema.pop("anyOf", None)
        schema.update(type="string", enum=explainable)

    @r.get(
        "/explain",
        summary="Why the ranker scores a document so, or why the neural model matches it",
        response_class=JSON,
        response_model=schemas.RankerExplanation | schemas.NeuralExplanation,
        responses=schemas.errors(400, 404, 414, 422, *state.guarded, *state.store_errors),
        description=inspect.cleandoc(explain.__doc__ or ""),
    )
    def explain_pair(
        request: Request,
        state: State,
        q: str = Query(
            "",
            description=f"Query text, not blank, at most {max_query_chars} characters.",
            json_schema_extra=query_doc(max_query_chars),
        ),
        doc_id: str = Query("", description="Document id from /search (unknown: 404)."),
        top: int = Query(5, ge=1, le=50, description="Number of contributions or neurons."),
        model: str | None = Query(
            None,
            description="Explain this neural model of the bundle (one of its DSSM/CLSM models) rather than the "
            "ranker (default: the ranker, or without one the first such model).",
            json_schema_extra=explain_model_doc,
            include_in_schema=bool(explainable),
        ),
    ) -> Response:
        return explain(request, state, doc_id, top, model)

    return r
