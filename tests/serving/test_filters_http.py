"""/search with filters and facet counts: the repeatable ``filter`` parameter (in the OpenAPI
document), 422s naming the bad filter, the answer's ``filters`` and ``facets``, micro-batches that
never mix filters, and the CLI's ``--filter``."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.index import SearchRequest
from semsearch.index.bundle import Bundle
from semsearch.serving import create_app
from semsearch.serving.batching import SearchBatcher

runner = CliRunner()
ROWS = [
    ("A1", "Cordless drill 18V", "DEWALT", "tools", "99.5"),
    ("A2", "Cordless drill 12V compact", "RYOBI", "tools", "59"),
    ("A3", "Hammer drill", "DEWALT", "tools", "149"),
    ("A4", "Drill bit set", "BOSCH", "accessories", "19.99"),
    ("A5", "Garden hose 50 ft", "RYOBI", "garden", ""),
    ("A6", "Drill press stand", "BOSCH", "tools", "210"),
]


@pytest.fixture
def catalog(tmp_path):  # type: ignore[no-untyped-def]
    lines = ["sku,name,brand,category,price"] + [",".join(r) for r in ROWS]
    (tmp_path / "c.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["--id", "sku", "--fields", "name", "--facets", "brand,category", "--numeric", "price"]
    r = runner.invoke(app, ["index", "build", "--data", str(tmp_path / "c.csv"), "--out", str(tmp_path / "b"), *args])
    assert r.exit_code == 0, r.output
    return tmp_path / "b"


def test_search_filters_and_facets(catalog) -> None:
    with TestClient(create_app(catalog)) as c:
        plain = c.get("/search", params={"q": "drill"}).json()
        assert plain["filters"] == []
        assert {h["doc_id"] for h in plain["hits"]} == {"A1", "A2", "A3", "A4", "A6"}
        assert plain["facets"]["brand"] == {"values": [["BOSCH", 2], ["DEWALT", 2], ["RYOBI", 1]], "distinct": 3}
        assert plain["facets"]["price"] == {"min": 19.99, "max": 210.0, "count": 5}
        one = c.get("/search", params=[("q", "drill"), ("filter", "brand:DEWALT")]).json()
        assert {h["doc_id"] for h in one["hits"]} == {"A1", "A3"}
        assert all(h["fields"]["brand"] == "DEWALT" for h in one["hits"])
        assert one["filters"] == ["brand:DEWALT"] and one["facets"]["brand"]["values"] == [["DEWALT", 2]]
        two = c.get(
            "/search",
            params=[
                ("q", "drill"),
                ("filter", "brand:RYOBI"),
                ("filter", "brand:DEWALT"),
                ("filter", "price:[50,100]"),
            ],
        ).json()
        assert {h["doc_id"] for h in two["hits"]} == {"A1", "A2"}
        assert two["filters"] == ["brand:DEWALT", "brand:RYOBI", "price:[50,100]"]
        assert (
            c.get("/search", params=[("q", "drill"), ("filter", "price:[150,*]")]).json()["hits"][0]["doc_id"] == "A6"
        )
        none = c.get("/search", params=[("q", "drill"), ("filter", "brand:NOBODY")]).json()
        assert none["hits"] == [] and none["facets"]["brand"] == {"values": [], "distinct": 0}
        few = c.get("/search", params={"q": "drill", "facets": "1"}).json()
        assert len(few["facets"]["brand"]["values"]) == 1
        assert c.get("/search", params={"q": "drill", "facets": "0"}).json()["facets"] == {}


@pytest.mark.parametrize(
    ("flt", "says"),
    [
        (
            "size:XL",
            "parameter 'filter': filter 'size:XL': no field 'size' to filter on (facet fields: brand, category",
        ),
        ("brand:[1,5]", "'brand' is a facet field"),
        ("price:cheap", "'price' is a numeric field"),
        ("price:[9,1]", "low end 9 is above its high end 1"),
        ("brand", "expected field:value"),
        ("brand:" + "x" * 300, "longer than 200 characters"),
    ],
)
def test_bad_filters_are_422_naming_them(catalog, flt: str, says: str) -> None:
    with TestClient(create_app(catalog)) as c:
        r = c.get("/search", params=[("q", "drill"), ("filter", flt)])
        assert r.status_code == 422 and says in r.json()["error"], r.text
        r = c.get("/search", params={"q": "drill", "facets": "101"})
        assert r.status_code == 422 and "facets" in r.json()["error"]


def test_openapi_declares_the_repeatable_filter(catalog) -> None:
    with TestClient(create_app(catalog)) as c:
        doc = c.get("/openapi.json").json()
        params = {p["name"]: p for p in doc["paths"]["/search"]["get"]["parameters"]}
        f = params["filter"]
        assert f["schema"]["type"] == "array" and f["explode"] and f["style"] == "form"
        assert "brand, category" in f["description"] and "price" in f["description"]
        assert params["facets"]["schema"]["maximum"] == 100
        answer = doc["components"]["schemas"]["SearchResponse"]["properties"]
        assert {"filters", "facets"} <= answer.keys()


def test_a_bundle_without_fields_refuses_any_filter(make_bundle, tmp_path) -> None:
    with TestClient(create_app(make_bundle(tmp_path / "b"))) as c:
        r = c.get("/search", params=[("q", "red cat"), ("filter", "brand:x")])
        assert r.status_code == 422 and "no facet or numeric fields" in r.json()["error"]
        ok = c.get("/search", params={"q": "red cat"}).json()
        assert ok["facets"] == {} and ok["filters"] == []
        doc = c.get("/openapi.json").json()
        f = next(p for p in doc["paths"]["/search"]["get"]["parameters"] if p["name"] == "filter")
        assert f["schema"]["maxItems"] == 0


def test_micro_batches_never_mix_filters(catalog) -> None:
    """Searches waiting together with different filters run in one pass but in different
    ``search_requests`` calls, each with its own filter; the same filter written in another order
    shares a call."""
    b = Bundle.load(catalog)
    sizes: list[int] = []
    batcher = SearchBatcher(b, observe=sizes.append)
    f1, f2 = b.filters.parse(["brand:DEWALT"]), b.filters.parse(["brand:RYOBI", "brand:BOSCH"])
    f2b = b.filters.parse(["brand:BOSCH", "brand:RYOBI"])

    async def run():  # type: ignore[no-untyped-def]
        return await asyncio.gather(
            batcher.search(SearchRequest("drill", 10, filters=f1, facets=5)),
            batcher.search(SearchRequest("drill", 10, filters=f2, facets=5)),
            batcher.search(SearchRequest("hammer drill", 10, filters=f2b, facets=5)),
            batcher.search(SearchRequest("drill", 10)),
        )

    passes: list[int] = []
    run_pass = batcher._run

    def counted() -> None:
        passes.append(len(batcher._waiting))
        run_pass()

    batcher._run = counted  # type: ignore[method-assign]
    r1, r2, r3, r4 = asyncio.run(run())
    assert passes == [4]  # one pass took all four: three search_many calls (one per filter), not three passes
    brand = {r[0]: r[2] for r in ROWS}
    assert {brand[h.doc_id] for h in r1.hits} == {"DEWALT"}
    assert {brand[h.doc_id] for h in r2.hits} <= {"RYOBI", "BOSCH"} and {brand[h.doc_id] for h in r3.hits} <= {
        "RYOBI",
        "BOSCH",
    }
    assert len(r4.hits) == 5 and r4.facets is None
    assert sorted(sizes) == [1, 1, 2]
    b.close()


def test_cli_search_filter(catalog) -> None:
    r = runner.invoke(app, ["search", "--index", str(catalog), "drill", "--json", "--filter", "brand:BOSCH"])
    assert r.exit_code == 0, r.output
    assert {json.loads(x)["doc_id"] for x in r.output.splitlines() if x.startswith("{")} == {"A4", "A6"}
    r = runner.invoke(app, ["search", "--index", str(catalog), "drill", "--filter", "colour:red"])
    assert r.exit_code == 2 and "no field 'colour' to filter on" in r.output


@pytest.mark.parametrize("mode", ["interleave", "ab"])
def test_compared_bundles_search_with_the_filter(catalog, mode: str) -> None:
    """Serving A against B (the same catalogue): both searched with the filter, every hit allowed."""
    with TestClient(create_app(catalog, compare=catalog, compare_mode=mode)) as c:
        r = c.get("/search", params=[("q", "drill"), ("filter", "category:tools"), ("filter", "price:[*,100]")])
        assert r.status_code == 200, r.text
        body = r.json()
        assert {h["doc_id"] for h in body["hits"]} == {"A1", "A2"} and body["filters"] == [
            "category:tools",
            "price:[*,100]",
        ]
        assert body["facets"]["category"]["values"] == [["tools", 2]]
        bad = c.get("/search", params=[("q", "drill"), ("filter", "colour:red")])
        assert bad.status_code == 422 and "colour" in bad.json()["error"]


def test_a_bundle_whose_stages_cannot_filter_refuses_filters(catalog, monkeypatch) -> None:
    """Stages that do not search one positional collection (the postgres store, a sharded index)
    cannot take the mask: a filter is a 422 saying so, not a 500."""
    from semsearch.index.hybrid import HybridRetriever

    monkeypatch.setattr(HybridRetriever, "positional", property(lambda self: False))
    with TestClient(create_app(catalog)) as c:
        r = c.get("/search", params=[("q", "drill"), ("filter", "brand:DEWALT")])
        assert r.status_code == 422 and "cannot filter" in r.json()["error"]
        assert c.get("/search", params={"q": "drill"}).json()["facets"] == {}
