"""The service's answers as pydantic models: the OpenAPI contract a client generates code from.

They document what ``app.py`` returns; /search and /explain build their JSON directly (orjson, no
validation pass on the hot path), so the contract tests (schemathesis, tests/serving/test_contract.py)
check that the answers match these models. ``extra="forbid"``: an undocumented field is a contract
break, not a silent addition."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, WithJsonSchema, create_model, model_validator

from .events import CLIENT_ID


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorBody(_Model):
    """Every 4xx answer (bad parameters, unknown document, too long a query, wrong method)."""

    error: str = Field(description="What was wrong, naming the parameter.")


class SearchHit(_Model):
    rank: int = Field(ge=1, description="Absolute 1-based rank.")
    doc_id: str
    title: str
    text: str
    source: Literal["LEXICAL", "SEMANTIC", "BOTH"] = Field(description="Which stage found the document.")
    score: float = Field(description="The ranker's score if the bundle has one, else the merged score (score_by).")
    lexical_score: float | None = Field(description="Null when only the semantic stage found it.")
    semantic_score: float | None = Field(description="Null when only the lexical stage found it.")
    lexical_rank: int | None
    semantic_rank: int | None
    highlight_field: Literal["title", "text"] = Field(
        description="The field `highlights` index: title, or text when the title is empty."
    )
    highlights: list[tuple[int, int]] = Field(
        description="[start, end) spans of matching words in UTF-16 code units (JavaScript string indices)."
    )
    fields: dict[str, Any] = Field(
        default_factory=dict,
        description="The document's stored fields: a table's facets (keyword text or a list of it), numeric "
        "fields (number or null) and other columns, as the bundle's manifest 'schema' names them; {} for "
        "a collection of id, title and text.",
    )
    team: Literal["A", "B"] | None = Field(
        default=None,
        description="When the service compares two bundles (serve A --compare B): the one that contributed "
        "this hit (interleave) or served this user (ab); absent otherwise.",
    )


class FacetCounts(_Model):
    """A facet field's counts among the search's stage-1 candidates under its filter."""

    values: list[tuple[str, int]] = Field(description="The top values as [value, count], count descending, then value.")
    distinct: int = Field(ge=0, description="How many distinct values the candidates have.")


class NumericRange(_Model):
    """A numeric field's range among the search's stage-1 candidates under its filter."""

    min: float | None = Field(description="Null when no candidate has a value.")
    max: float | None
    count: int = Field(ge=0, description="Candidates with a (non-null) value.")


class SearchResponse(_Model):
    search_id: str | None = Field(
        description="This answer's id, for POST /events (query_id) when a result is clicked; "
        "null when the service logs no events."
    )
    query: str
    corrected_query: str | None = Field(
        description="The query as searched when its spelling was corrected against the "
        "documents' words (null: searched as typed)."
    )
    k: int
    offset: int
    merge: Literal["union", "rrf", "interpolate"]
    score_by: Literal["ranker", "union", "rrf", "interpolate"] = Field(description="What a hit's score is.")
    next_offset: int | None = Field(description="The next page's offset; null on the last page.")
    hits: list[SearchHit]
    filters: list[str] = Field(
        default_factory=list,
        description="The filter searched with, in canonical form (one expression per value or range, by field); "
        "[] when unfiltered.",
    )
    facets: dict[str, FacetCounts | NumericRange] = Field(
        default_factory=dict,
        description="Per facet field its top values (facets=N of them) and per numeric field its range, among "
        "the query's stage-1 candidates (lexical top n ∪ semantic top n) under the filter; {} when the bundle "
        "has no facet or numeric fields or facets=0.",
    )
    timing_ms: dict[str, float] = Field(
        description="Milliseconds per stage (lexical_ms, semantic_ms, merge_ms, total_ms, ...) "
        "of the pass that ran this search; batch: how many distinct searches that "
        "pass ran together; queue_ms: how long this one waited for it. When two bundles are "
        "interleaved, B's stages have the same names prefixed b_."
    )
    arm: str | None = Field(
        default=None,
        description="When the service compares two bundles: interleave, or the user's A/B bucket "
        "(control-1, control-2: A; experiment-1, experiment-2: B); absent otherwise.",
    )


class ClickEvent(_Model):
    """POST /events: a user's action on a result shown by a search (OpenSearch UBI's event fields)."""

    query_id: str = Field(
        min_length=1, max_length=200, description="The search_id of the /search answer that showed the result."
    )
    action_name: Literal["click"] = Field(description="What the user did; only click for now.")
    object_id: str = Field(min_length=1, max_length=1000, description="The result's doc_id.")
    position: int = Field(
        ge=1, description="The result's 1-based rank (its rank in the answer); it must be on that answer's page."
    )
    client_id: str | None = Field(
        default=None,
        pattern=CLIENT_ID,
        description="An opaque key of the client (1-64 letters, digits, - or _), as sent to /search "
        "in X-Client-Id; never the client's address.",
    )


class EventAccepted(_Model):
    status: Literal["accepted"] = Field(description="The event is buffered for the event log.")


class Contribution(_Model):
    feature: str
    value: float
    contribution: float


class RankerExplanation(_Model):
    """/explain with a ranker: its score = bias + the contributions (nulls when stage 1 missed the document)."""

    explained_by: Literal["ranker"]
    doc_id: str
    score: float | None
    bias: float | None
    source: Literal["LEXICAL", "SEMANTIC", "BOTH"] | None
    lexical_score: float | None
    semantic_score: float | None
    lexical_rank: int | None
    semantic_rank: int | None
    contributions: list[Contribution]


class WordContribution(_Model):
    word: str
    position: int
    contribution: float = Field(description="cosine(full text) - cosine(text without this word).")


class Neuron(_Model):
    neuron: int
    activation: float
    position: int
    word: str
    window: str


class MatchingNeuron(_Model):
    neuron: int
    query_activation: float
    document_activation: float
    query_word: str
    document_word: str
    query_window: str
    document_window: str


class NeuralExplanation(_Model):
    """/explain with a DSSM/CLSM model: per-word contributions; the neuron fields only for CLSM."""

    doc_id: str
    model: str
    cosine: float | None = Field(description="Null when not a number (a text with no features).")
    query_words: list[WordContribution]
    document_words: list[WordContribution]
    query_neurons: list[Neuron] | None = None
    document_neurons: list[Neuron] | None = None
    matching_neurons: list[MatchingNeuron] | None = None


class Health(_Model):
    status: Literal["ok"]
    documents: int
    lexical: dict[str, str] | None = Field(description="The lexical model's manifest entry (name, path), null if none.")
    models: list[str]
    dataset: str | None
    uptime_s: float
    pid: int


class Ready(_Model):
    status: Literal["ready"]
    documents: int


class NotReady(_Model):
    status: Literal["not ready"]


MAX_BATCH = 1000
MAX_ID_CHARS = 256
MAX_TEXT_CHARS = 20_000
FieldValue = str | int | float | bool | None | list[str]
ID_PATTERN = r"^(?!\.\.?$)(?=.*[^\s])[^\x00-\x1f\x7f-\x9f/]+$"
ID_DOC = (
    "an existing id is replaced; not blank, no control characters or '/', not '.' or '..' (it is a path "
    "segment of DELETE /documents/{doc_id})."
)


class DocumentIn(_Model):
    """One document to add or replace (``POST /documents``)."""

    model_config = ConfigDict(extra="forbid", regex_engine="python-re")  # (the id's pattern looks ahead)

    id: str = Field(
        min_length=1, max_length=MAX_ID_CHARS, pattern=ID_PATTERN, description=f"The document's id: {ID_DOC}"
    )
    title: str = Field("", max_length=MAX_TEXT_CHARS, description="The title.")
    text: str = Field("", max_length=MAX_TEXT_CHARS, description="The body text.")
    fields: dict[str, FieldValue] = Field(
        default_factory=dict,
        description="Stored fields, only those the bundle's manifest 'schema' names (facets, numeric, stored); "
        "none for a collection of id, title and text.",
    )


class DocumentsIn(_Model):
    documents: list[DocumentIn] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description="The documents (at most 1000, 4 MiB in all); an id given twice: the later one is kept.",
    )


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


def _text(value: Any) -> str:
    """A searched column's value: text (null: empty), at most ``MAX_TEXT_CHARS`` characters."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"expected text or null (a searched column), got {_short(value)}")
    if len(value) > MAX_TEXT_CHARS:
        raise ValueError(f"longer than {MAX_TEXT_CHARS} characters")
    return value


def _facet(value: Any) -> str | list[str] | None:
    """A facet column's value as the build reads it (``data.table``): a string (blank: null) or a
    list of strings (blanks dropped)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v for v in value if v.strip()]
    raise ValueError(f"expected a string, a list of strings or null (a facet column), got {_short(value)}")


def _number(value: Any) -> int | float | None:
    """A numeric column's value: an int or a finite float (not a boolean, not text), or null."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number or null (a numeric column), got {_short(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")
    return value


_TEXT = {"anyOf": [{"type": "string", "maxLength": MAX_TEXT_CHARS}, {"type": "null"}]}
Text = Annotated[str, PlainValidator(_text), WithJsonSchema(_TEXT)]
Facet = Annotated[
    str | list[str] | None,
    PlainValidator(_facet),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}, {"type": "null"}]}),
]
Number = Annotated[
    int | float | None, PlainValidator(_number), WithJsonSchema({"anyOf": [{"type": "number"}, {"type": "null"}]})
]


def rows_body(schema: Mapping[str, Any]) -> type[BaseModel]:
    """``POST /documents``'s body for a bundle built from a table (``index build --data
    catalog.csv --id ... --fields ...``): ``{"documents": [row, ...]}``, each row in the
    catalogue's own shape, its columns as the bundle manifest's ``schema`` names them (the id
    column, the searched ``fields``, ``facets``, ``numeric`` and ``stored`` columns); any other
    column is refused (the row's model: ``DocumentRow``, the body's: ``DocumentRowsIn``)."""
    id_col, fields = schema["id"], list(schema.get("fields", []))
    facets, numeric = list(schema.get("facets", [])), list(schema.get("numeric", []))
    columns: dict[str, tuple[Any, Any]] = {
        "c0": (
            str,
            Field(
                alias=id_col,
                min_length=1,
                max_length=MAX_ID_CHARS,
                pattern=ID_PATTERN,
                description=f"The id column: {ID_DOC}",
            ),
        )
    }
    searched = (
        f"Searched (the first of {', '.join(fields)} is each hit's title, the others joined make its text, "
        f"as the build joins them); text or null, at most {MAX_TEXT_CHARS:,} characters."
    )
    kinds: list[tuple[str, Any, str]] = []
    for name in dict.fromkeys([*fields, *facets, *numeric, *schema.get("stored", [])]):
        if name in numeric:
            kinds.append((name, Number, "A numeric column (filters by range): a number or null."))
        elif name in fields:
            kinds.append((name, Text, searched))
        elif name in facets:
            kinds.append((name, Facet, "A facet column (filters and counts): a string, a list of strings or null."))
        else:
            kinds.append((name, Any, "A stored column, returned with hits: any JSON value."))
    for i, (name, kind, doc) in enumerate(kinds, 1):
        columns[f"c{i}"] = (kind, Field(None, alias=name, description=doc))
    known = [id_col, *(name for name, _, _ in kinds)]

    def known_columns(cls: type[BaseModel], data: Any) -> Any:
        """An unknown column named, with the columns there are (before any other error)."""
        if isinstance(data, dict):
            unknown = [k for k in data if k not in known]
            if unknown:
                raise ValueError(
                    f"unknown column {unknown[0]!r}: this bundle's documents are rows of the table it was built "
                    f"from, with the columns {', '.join(known)}"
                )
        return data

    row: type[BaseModel] = create_model(  # type: ignore[call-overload]
        "DocumentRow",
        __config__=ConfigDict(extra="forbid", regex_engine="python-re"),
        __validators__={"known_columns": model_validator(mode="before")(known_columns)},
        __doc__=(
            f"One document in the catalogue's own shape, a row of the table the bundle was built from: "
            f"{id_col!r} its id; {', '.join(map(repr, fields))} searched; a missing facet or numeric column "
            "is null, a missing searched column empty. Any other column is refused."
        ),
        **columns,
    )
    body: type[BaseModel] = create_model(
        "DocumentRowsIn",
        __config__=ConfigDict(extra="forbid"),
        documents=(
            list[row],  # type: ignore[valid-type]  # a model made here
            Field(
                min_length=1,
                max_length=MAX_BATCH,
                description="The rows (at most 1000, 4 MiB in all); an id given twice: the later one is kept.",
            ),
        ),
    )
    return body


class DocumentsAccepted(_Model):
    status: Literal["accepted"]
    seq: int = Field(ge=1, description="The change's sequence number in the change log (durable once answered).")
    upserted: int = Field(ge=1, description="How many documents were added or replaced.")
    documents: int = Field(
        ge=0,
        description="Documents this worker serves as it answers: after the change with wait=true, "
        "possibly before it otherwise (the change is durable either way and searched within a second).",
    )


class DocumentDeleted(_Model):
    status: Literal["deleted"]
    seq: int = Field(ge=1, description="The change's sequence number in the change log (durable once answered).")
    doc_id: str
    documents: int = Field(
        ge=0,
        description="Documents this worker serves as it answers: after the change with wait=true, "
        "possibly before it otherwise (the change is durable either way and searched within a second).",
    )


def errors(*statuses: int) -> dict[int | str, dict[str, object]]:
    """``responses=`` entries documenting ``ErrorBody`` for these statuses."""
    what = {
        400: "Missing, empty or undecodable parameter, or a request body that is not UTF-8.",
        401: "Missing or wrong API key (X-API-Key header; writes: the write key, X-Write-Key).",
        404: "No such document or file, or (POST /events) no such search id: forged, expired or before a restart.",
        405: "Method not allowed (with an Allow header).",
        409: "The service logs no events (started without --events).",
        413: "A request body over 64 KiB (POST /documents: 4 MiB).",
        414: "URL longer than 8,192 bytes.",
        422: (
            "Parameter or body field out of range, too long or of the wrong type, a filter that does not read "
            "against the bundle's fields (named), or a query parameter the endpoint does not declare "
            "(POST /events: a position not on the page)."
        ),
        429: "Over the per-client rate limit (with a Retry-After header).",
        503: (
            "The vector store's PostgreSQL server is unreachable (with Retry-After; the service reconnects by itself)."
        ),
    }
    return {s: {"model": ErrorBody, "description": what[s]} for s in statuses}


def json_errors(*statuses: int) -> dict[int | str, dict[str, object]]:
    """``errors`` for a route whose own answers are not JSON (the page, ``/metrics``): the error
    body documented as ``application/json``, which it is, not under the route's media type."""
    ref = {"schema": {"$ref": "#/components/schemas/ErrorBody"}}
    return {
        s: {"description": entry["description"], "content": {"application/json": ref}}
        for s, entry in errors(*statuses).items()
    }
