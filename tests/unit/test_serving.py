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
    assert client.get("/ready").json() == {"status": "ready", "documents": h["documents"]}
    assert "/ready" in paths and "503" in paths["/ready"]["get"]["responses"]
    page = client.get("/")
    assert page.status_code == 200 and "<form" in page.text and "http" not in page.text.split("<script>")[0].lower()
    for page_url, asset in [("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")]:
        html = client.get(page_url).text  # served from the package's files, no CDN
        assert f"/docs-static/{asset}" in html and "cdn" not in html.lower()
        js = client.get(f"/docs-static/{asset}")
        assert js.status_code == 200 and len(js.content) > 100_000


def test_ready_only_while_serving(make_bundle, tmp_path):
    """/ready answers 503 before the app has started and after it has shut down, 200 in between."""
    app = create_app(make_bundle(tmp_path / "b"))
    client = TestClient(app)
    assert client.get("/ready").status_code == 503  # no lifespan startup yet
    with client:
        assert client.get("/ready").status_code == 200 and client.get("/health").status_code == 200
    assert client.get("/ready").status_code == 503


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


def test_metrics_add_up_over_worker_processes(tiny_data, tmp_path):
    """``semsearch serve --workers 2``: after N searches, /metrics counts N whichever worker
    answers (prometheus_client's multiprocess mode); its directory is removed at exit."""
    import os
    import re
    import signal
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    import httpx

    from semsearch.data import open_dataset
    from semsearch.index import build_bundle
    from semsearch.plugins import create_model

    bundle = build_bundle(open_dataset("tiny").corpus(), [create_model("bm25")], tmp_path / "b")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src = str(Path(__file__).resolve().parents[2] / "src")
    (tmp := tmp_path / "tmp").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
           "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    server = subprocess.Popen([sys.executable, "-m", "semsearch.cli", "serve", str(bundle), "--port", str(port),
                               "--workers", "2"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base, n = f"http://127.0.0.1:{port}", 30
    try:
        deadline = time.time() + 60
        while True:
            assert server.poll() is None and time.time() < deadline, "server did not start"
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        assert [p.name for p in tmp.iterdir()][0].startswith("semsearch-metrics-")
        for i in range(n):  # a new connection each: the kernel spreads them over the workers
            assert httpx.get(base + "/search", params={"q": f"red cat {i}", "k": 3}).status_code == 200
        for _ in range(6):
            text = httpx.get(base + "/metrics").text
            c = re.search(r'^semsearch_requests_total\{path="/search",status="200"\} (\S+)$', text, re.M)
            assert c and float(c.group(1)) == n, text
            count = re.search(r"^semsearch_request_seconds_count (\S+)$", text, re.M)
            assert count and float(count.group(1)) >= n
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert list(tmp.iterdir()) == [], server.stderr.read().decode(errors="replace")[-2000:] if server.stderr else ""
