"""The search service on a tiny bundle: search, sources, timings, explain, health, metrics,
OpenAPI, 4xx answers with JSON bodies on bad input."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from semsearch.serving import create_app


@pytest.fixture
def client(make_bundle, tmp_path):
    with TestClient(create_app(make_bundle(tmp_path / "b"))) as c:
        yield c


def test_search_returns_tagged_hits_and_timings(client):
    r = client.get("/search", params={"q": "red cat", "k": 5})
    assert r.status_code == 200
    body = r.json()
    assert 1 <= len(body["hits"]) <= 5 and [h["rank"] for h in body["hits"]] == list(range(1, len(body["hits"]) + 1))
    for h in body["hits"]:
        assert h["source"] in ("LEXICAL", "SEMANTIC", "BOTH")
        assert (h["lexical_score"] is not None) == (h["source"] != "SEMANTIC")
        assert (h["semantic_score"] is not None) == (h["source"] != "LEXICAL")
    top = body["hits"][0]["title"] + " " + body["hits"][0]["text"]
    assert "red" in top or "cat" in top
    assert {"lexical_ms", "semantic_ms", "merge_ms", "total_ms"} <= body["timing_ms"].keys()
    scores = [h["score"] for h in client.get("/search", params={"q": "red cat", "k": 50, "merge": "union"}).json()["hits"]]
    assert len(scores) > 5


def test_explain_health_metrics_openapi_page(client):
    doc = client.get("/search", params={"q": "red cat", "k": 1}).json()["hits"][0]["doc_id"]
    e = client.get("/explain", params={"q": "red cat", "doc_id": doc}).json()
    assert e["model"] == "clsm" and "matching_neurons" in e and e["document_words"]
    assert client.get("/explain", params={"q": "red cat", "doc_id": "nope"}).status_code == 404
    h = client.get("/health").json()
    assert h["status"] == "ok" and h["models"] == ["clsm"] and h["documents"] > 0
    m = client.get("/metrics")
    assert m.headers["content-type"].startswith("text/plain")
    assert 'semsearch_requests_total{path="/search",status="200"} 1' in m.text
    assert 'semsearch_requests_total{path="/explain",status="404"} 1' in m.text
    assert "semsearch_request_seconds_count" in m.text and 'le="+Inf"' in m.text
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/search", "/explain", "/health", "/metrics"} <= paths.keys()
    page = client.get("/")
    assert page.status_code == 200 and "<form" in page.text and "http" not in page.text.split("<script>")[0].lower()
    for page_url, asset in [("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")]:
        html = client.get(page_url).text  # served from the package's files, no CDN
        assert f"/docs-static/{asset}" in html and "cdn" not in html.lower()
        js = client.get(f"/docs-static/{asset}")
        assert js.status_code == 200 and len(js.content) > 100_000


def test_every_scorer_of_the_hybrid_is_a_merge(client):
    """One vocabulary: the service's merge takes index.hybrid's scorers (union, rrf, interpolate)."""
    for merge in ("union", "rrf", "interpolate"):
        r = client.get("/search", params={"q": "red cat", "k": 5, "merge": merge})
        assert r.status_code == 200 and r.json()["merge"] == merge and r.json()["hits"]


@pytest.mark.parametrize("query,status", [
    ("q=", 400), ("q=%20%20", 400), ("", 400), ("q=" + "a" * 10_000, 413), ("q=red%FF%FEcat", 400),
    ("q=red&k=0", 422), ("q=red&k=1001", 422), ("q=red&k=ten", 422), ("q=red&merge=max", 422),
])
def test_bad_input_gets_4xx_with_json_error(client, query, status):
    r = client.get("/search?" + query)
    assert r.status_code == status and isinstance(r.json()["error"], str) and r.json()["error"]


@pytest.mark.parametrize("q", ["'; DROP TABLE documents; --", "<script>alert(1)</script>", "../../etc/passwd",
                               "{{7*7}} ${jndi:ldap://x}", "red\x00cat", "über café ñandú 🐈"])
def test_injection_looking_queries_are_plain_text(client, q):
    r = client.get("/search", params={"q": q, "k": 3})
    assert r.status_code == 200 and r.json()["query"] == q


@pytest.mark.parametrize("model", ["clsm", "dssm"])
def test_concurrent_searches_and_explains_all_succeed(make_bundle, tmp_path, model):
    """Many requests at once (the encoders' caches are not thread-safe; the bundle serialises per model)."""
    from concurrent.futures import ThreadPoolExecutor

    qs = [f"red cat {' '.join(f'new{i}word{j}' for j in range(30))}" for i in range(200)]  # unseen words grow the caches
    with TestClient(create_app(make_bundle(tmp_path / "b", model=model))) as client, ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(lambda q: client.get("/search", params={"q": q, "k": 5}).status_code, qs))
        codes += list(pool.map(lambda q: client.get("/explain", params={"q": q, "doc_id": "d01"}).status_code, qs))
    assert codes == [200] * (2 * len(qs))
