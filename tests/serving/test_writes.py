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
