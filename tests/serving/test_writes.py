"""The write endpoints (``serve --allow-writes``): ``POST /documents`` and ``DELETE
/documents/{id}`` change what the next search finds, refuse bad bodies by field (422), unknown
ids (404) and a missing write key (401); without --allow-writes they answer 404 saying so."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from semsearch.params import ParamError
from semsearch.serving import create_app
from semsearch.serving.exposure import Exposure
from semsearch.serving.options import ServeOptions

KEY = "w" * 20


@pytest.fixture
def bundle(make_bundle, tmp_path):  # type: ignore[no-untyped-def]
    return make_bundle(tmp_path / "b")


def _ids(client, q):  # type: ignore[no-untyped-def]
    r = client.get("/search", params={"q": q, "k": 50})
    assert r.status_code == 200, r.text
    return [h["doc_id"] for h in r.json()["hits"]]


def test_upsert_and_delete_change_the_next_search(bundle, tmp_path):
    with TestClient(create_app(bundle, allow_writes=True, changes=tmp_path / "c")) as client:
        n = client.get("/health").json()["documents"]
        doc = {"id": "new1", "title": "zorblax lamp", "text": "zorblax"}
        r = client.post("/documents", params={"wait": "true"}, json={"documents": [doc]})
        assert r.status_code == 200, r.text
        assert r.json() == {"status": "accepted", "seq": 1, "upserted": 1, "documents": n + 1}
        hits = client.get("/search", params={"q": "zorblax"}).json()["hits"]
        assert hits[0]["doc_id"] == "new1" and hits[0]["title"] == "zorblax lamp"
        assert client.delete("/documents/new1", params={"wait": "true"}).json()["seq"] == 2
        assert "new1" not in _ids(client, "zorblax")
        assert client.delete("/documents/new1").status_code == 404
        assert client.delete("/documents/d00", params={"wait": "true"}).status_code == 200
        assert "d00" not in _ids(client, "red")
        assert client.get("/health").json()["documents"] == n - 1
        assert {"/documents", "/documents/{doc_id}"} <= set(client.get("/openapi.json").json()["paths"])


def test_without_wait_a_change_is_searched_within_a_second(bundle, tmp_path):
    import time

    with TestClient(create_app(bundle, allow_writes=True, changes=tmp_path / "c")) as client:
        r = client.post("/documents", json={"documents": [{"id": "new1", "title": "zorblax lamp"}]})
        assert r.status_code == 200
        start = time.monotonic()
        while "new1" not in _ids(client, "zorblax"):
            assert time.monotonic() - start < 5, "not visible"  # (1 s, with room for a loaded machine)
            time.sleep(0.05)


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ({"documents": []}, "documents"),
        ({"documents": [{"title": "x"}]}, "id"),
        ({"documents": [{"id": "a", "title": 3}]}, "title"),
        ({"documents": [{"id": "a", "title": "x", "colour": "red"}]}, "colour"),
        ({"documents": [{"id": "a", "title": "x", "fields": {"brand": "acme"}}]}, "brand"),
        ({"documents": [{"id": "  ", "title": "x"}]}, "id"),
        ({"documents": [{"id": "..", "title": "x"}]}, "id"),
        ({"documents": [{"id": "a/b", "title": "x"}]}, "id"),
    ],
)
def test_bad_bodies_get_422_naming_the_field(bundle, tmp_path, body, names):
    with TestClient(create_app(bundle, allow_writes=True, changes=tmp_path / "c")) as client:
        r = client.post("/documents", json=body)
        assert r.status_code == 422, r.text
        assert names in r.json()["error"]


def test_writes_need_the_write_key_when_one_is_set(bundle, tmp_path):
    app = create_app(bundle, allow_writes=True, changes=tmp_path / "c", exposure=Exposure("r" * 20, 0.0, KEY))
    with TestClient(app) as client:
        doc = {"documents": [{"id": "n", "title": "zorblax"}]}
        assert client.post("/documents", json=doc, headers={"X-API-Key": "r" * 20}).status_code == 401
        assert client.delete("/documents/d01", headers={"X-API-Key": "r" * 20}).status_code == 401
        ok = client.post("/documents", params={"wait": 1}, json=doc, headers={"X-Write-Key": KEY})
        assert ok.status_code == 200
        assert client.get("/search", params={"q": "zorblax"}, headers={"X-Write-Key": KEY}).status_code == 401
        ok = client.get("/search", params={"q": "zorblax"}, headers={"X-API-Key": "r" * 20})
        assert ok.json()["hits"][0]["doc_id"] == "n"


def test_without_allow_writes_the_endpoints_say_so(bundle):
    with TestClient(create_app(bundle)) as client:
        r = client.post("/documents", json={"documents": [{"id": "n", "title": "x"}]})
        assert r.status_code == 404 and "--allow-writes" in r.json()["error"]
        assert client.delete("/documents/d01").status_code == 404
        assert "/documents" not in client.get("/openapi.json").json()["paths"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"host": "0.0.0.0", "expose": True, "api_key": "r" * 20, "allow_writes": True}, "write key"),
        ({"allow_writes": True, "api_key": KEY, "write_key": KEY}, "differ"),
        ({"write_key": KEY}, "--allow-writes"),
        ({"changes": "/tmp/x"}, "--allow-writes"),
        ({"allow_writes": True, "compare": "/tmp/b", "events": "/tmp/e"}, "--compare"),
    ],
)
def test_serve_options_check_the_write_settings(fields, message):
    with pytest.raises(ParamError, match=message):
        ServeOptions.from_mapping({"bundle": "/tmp/b", **fields})


# -- a bundle built from a table takes its rows (issue 60 item 6) --------------------------------------
CATALOG = [
    ("A1", "Cordless drill 18V", "Brushless motor", "DEWALT", "99.5", "yellow"),
    ("A2", "Cordless drill 12V compact", "Light drill for small jobs", "RYOBI", "59", "green"),
    ("A3", "Hammer drill", "Drills masonry and concrete", "DEWALT", "149", ""),
]


@pytest.fixture
def catalog(tmp_path):  # type: ignore[no-untyped-def]
    """``index build --data catalog.csv --id sku --fields name,description --facets brand --numeric price``."""
    from typer.testing import CliRunner

    from semsearch.cli import app as cli

    lines = ["sku,name,description,brand,price,color"] + [",".join(r) for r in CATALOG]
    (tmp_path / "catalog.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["--id", "sku", "--fields", "name,description", "--facets", "brand", "--numeric", "price"]
    r = CliRunner().invoke(
        cli, ["index", "build", "--data", str(tmp_path / "catalog.csv"), "--out", str(tmp_path / "t"), *args]
    )
    assert r.exit_code == 0, r.output
    return tmp_path / "t"


def test_a_catalog_bundle_takes_its_own_rows(catalog, tmp_path):
    with TestClient(create_app(catalog, allow_writes=True, changes=tmp_path / "c")) as client:
        row = {
            "sku": "Z1",
            "name": "Zorblax drill",
            "description": "A drill that zorbs",
            "brand": " ACME ",
            "price": 12,
        }
        r = client.post("/documents", params={"wait": "true"}, json={"documents": [row]})
        assert r.status_code == 200, r.text
        hit = client.get("/search", params={"q": "zorblax"}).json()["hits"][0]
        # mapped as the build maps a row: the first searched column the title, the others the text;
        # the facet trimmed as the build trims it, a missing stored column absent
        assert (hit["doc_id"], hit["title"], hit["text"]) == ("Z1", "Zorblax drill", "A drill that zorbs")
        assert hit["fields"] == {"brand": "ACME", "price": 12}
        one = client.get("/search", params=[("q", "drill"), ("filter", "brand:ACME")]).json()["hits"]
        assert [h["doc_id"] for h in one] == ["Z1"]
        # a row of the table replaced by the same row changed: what the build stored, now the new values
        old = client.get("/search", params={"q": "hammer"}).json()["hits"][0]
        assert old["doc_id"] == "A3" and old["fields"] == {"brand": "DEWALT", "price": 149, "color": ""}
        new = {
            "sku": "A3",
            "name": "Hammer drill",
            "description": "SDS plus",
            "brand": ["DEWALT", "PRO"],
            "color": "red",
        }
        assert client.post("/documents", params={"wait": "true"}, json={"documents": [new]}).status_code == 200
        hit = client.get("/search", params={"q": "hammer"}).json()["hits"][0]
        assert hit["text"] == "SDS plus" and hit["fields"] == {
            "brand": ["DEWALT", "PRO"],
            "price": None,
            "color": "red",
        }
        assert [
            h["doc_id"] for h in client.get("/search", params=[("q", "drill"), ("filter", "brand:PRO")]).json()["hits"]
        ] == ["A3"]
        assert client.delete("/documents/Z1", params={"wait": "true"}).status_code == 200
        assert "Z1" not in _ids(client, "zorblax")
        # the OpenAPI contract's body is the table's row, and its links read the id column
        doc = client.get("/openapi.json").json()
        row_schema = doc["components"]["schemas"]["DocumentRow"]
        assert set(row_schema["properties"]) == {"sku", "name", "description", "brand", "price", "color"}
        assert row_schema["required"] == ["sku"] and row_schema["additionalProperties"] is False
        links = doc["paths"]["/documents"]["post"]["responses"]["200"]["links"]
        assert links["SearchUpserted"]["parameters"] == {"q": "$request.body#/documents/0/sku"}
        assert "DocumentIn" not in doc["components"]["schemas"]
        # the changes merge into the bundle as a rebuild of the same rows would hold them
        client.app.state.service.live.merge()  # type: ignore[attr-defined]
        hit = client.get("/search", params={"q": "hammer"}).json()["hits"][0]
        assert hit["fields"] == {"brand": ["DEWALT", "PRO"], "price": None, "color": "red"}


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ({"sku": "a", "name": "x", "colour": "red"}, "unknown column 'colour'"),
        ({"id": "a", "title": "x"}, "unknown column 'id'"),  # the id/title/text shape is not this bundle's
        ({"name": "x"}, "sku: Field required"),
        ({"sku": "a", "price": "12"}, "price: Value error, expected a number"),
        ({"sku": "a", "price": True}, "price: Value error, expected a number"),
        ({"sku": "a", "brand": 3}, "brand: Value error, expected a string, a list of strings or null"),
        ({"sku": "a", "name": ["x"]}, "name: Value error, expected text"),
        ({"sku": "a/b", "name": "x"}, "sku"),
    ],
)
def test_a_catalog_row_is_refused_naming_the_column(catalog, tmp_path, row, says):
    with TestClient(create_app(catalog, allow_writes=True, changes=tmp_path / "c")) as client:
        r = client.post("/documents", json={"documents": [row]})
        assert r.status_code == 422, r.text
        assert says in r.json()["error"], r.json()
