"""The service's OpenAPI document as FastAPI generates it from the routes, with what the routes
cannot say themselves (``contract``): the query parameters their handlers check as required, the
stored fields an upserted document may carry, and the links between the write endpoints and
/search."""

from __future__ import annotations

from typing import Any

REQUIRED = {("/search", "q"), ("/explain", "q"), ("/explain", "doc_id")}
"""The (path, query parameter) pairs the handlers require themselves (400 when missing)."""


def contract(
    schema: dict[str, Any], required: set[tuple[str, str]], stored: list[str] | None = None, id_field: str = "id"
) -> dict[str, Any]:
    """The generated OpenAPI schema with the (path, query parameter) pairs in ``required`` marked
    required and without a default: the handlers check them themselves, to answer 400 rather than
    FastAPI's 422, so FastAPI sees them as optional. ``stored``: the stored fields an upserted
    document may carry (its ``fields`` names no others); ``id_field``: an upserted document's id
    (a table's id column when the documents are its rows)."""
    doc = schema.get("components", {}).get("schemas", {}).get("DocumentIn")
    if doc is not None and stored is not None:
        fields = doc["properties"]["fields"]
        value = fields.get("additionalProperties", {})
        fields["properties"] = {name: value for name in stored}
        fields["additionalProperties"] = False
    for path, name in required:
        for op in schema["paths"].get(path, {}).values():
            for p in op.get("parameters", ()):
                if p["name"] == name and p["in"] == "query":
                    p["required"] = True
                    p["schema"].pop("default", None)
    _write_links(schema, id_field)
    return schema


def _write_links(schema: dict[str, Any], id_field: str) -> None:
    """OpenAPI links between the write endpoints and /search (when both are served), the chains a
    client (and schemathesis' stateful phase) follows: a document upserted, searched by its id,
    deleted from a search's first hit, searched again by its id."""
    paths = schema["paths"]
    upsert = paths.get("/documents", {}).get("post")
    delete = paths.get("/documents/{doc_id}", {}).get("delete")
    search = paths.get("/search", {}).get("get")
    if not (upsert and delete and search):
        return

    def link(op: dict[str, Any], status: str, name: str, target: dict[str, Any], params: dict[str, str]) -> None:
        op["responses"][status].setdefault("links", {})[name] = {
            "operationId": target["operationId"],
            "parameters": params,
        }

    upserted = f"$request.body#/documents/0/{id_field.replace('~', '~0').replace('/', '~1')}"  # (a JSON pointer)
    link(upsert, "200", "SearchUpserted", search, {"q": upserted})
    link(upsert, "200", "DeleteUpserted", delete, {"doc_id": upserted})
    link(search, "200", "DeleteFirstHit", delete, {"doc_id": "$response.body#/hits/0/doc_id"})
    link(delete, "200", "SearchDeleted", search, {"q": "$response.body#/doc_id"})
