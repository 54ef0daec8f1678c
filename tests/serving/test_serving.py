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
    scores = [
        h["score"] for h in client.get("/search", params={"q": "red cat", "k": 50, "merge": "union"}).json()["hits"]
    ]
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


@pytest.mark.parametrize(
    "query,status",
    [
        ("q=", 400),
        ("q=%20%20", 400),
        ("", 400),
        ("q=" + "a" * 5_000, 422),  # over the schema's maxLength: a validation error
        ("q=" + "a" * 10_000, 414),
        ("q=red%FF%FEcat", 400),
        ("q=red&k=0", 422),
        ("q=red&k=1001", 422),
        ("q=red&k=ten", 422),
        ("q=red&k=%D9%A5", 422),
        ("q=red&offset=1.0", 422),
        ("q=red&merge=max", 422),
    ],
)
def test_bad_input_gets_4xx_with_json_error(client, query, status):
    r = client.get("/search?" + query)
    assert r.status_code == status and isinstance(r.json()["error"], str) and r.json()["error"]


@pytest.mark.parametrize(
    "q",
    [
        "'; DROP TABLE documents; --",
        "<script>alert(1)</script>",
        "../../etc/passwd",
        "{{7*7}} ${jndi:ldap://x}",
        "red\x00cat",
        "über café ñandú 🐈",
    ],
)
def test_injection_looking_queries_are_plain_text(client, q):
    r = client.get("/search", params={"q": q, "k": 3})
    assert r.status_code == 200 and r.json()["query"] == q


@pytest.mark.parametrize("model", ["clsm", "dssm"])
def test_concurrent_searches_and_explains_all_succeed(make_bundle, tmp_path, model):
    """Many requests at once (the encoders' caches are not thread-safe; the bundle serialises per model)."""
    from concurrent.futures import ThreadPoolExecutor

    qs = [
        f"red cat {' '.join(f'new{i}word{j}' for j in range(30))}" for i in range(200)
    ]  # unseen words grow the caches
    with TestClient(create_app(make_bundle(tmp_path / "b", model=model))) as client, ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(lambda q: client.get("/search", params={"q": q, "k": 5}).status_code, qs))
        codes += list(pool.map(lambda q: client.get("/explain", params={"q": q, "doc_id": "d01"}).status_code, qs))
    assert codes == [200] * (2 * len(qs))


def test_metrics_add_up_over_worker_processes(tiny_data, tmp_path, serve_bundle):
    """``semsearch serve --workers 2``: after N searches, /metrics counts N whichever worker
    answers (prometheus_client's multiprocess mode); its directory is removed at exit."""
    import re

    import httpx

    from semsearch.data import open_dataset
    from semsearch.index import build_bundle
    from semsearch.plugins import create_model

    bundle = build_bundle(open_dataset("tiny").corpus(), [create_model("bm25")], tmp_path / "b")
    (tmp := tmp_path / "tmp").mkdir()
    n = 30
    with serve_bundle(bundle, "--workers", "2", env={"TMPDIR": str(tmp), "PROMETHEUS_MULTIPROC_DIR": None}) as (
        base,
        server,
    ):
        assert [p.name for p in tmp.iterdir()][0].startswith("semsearch-metrics-")
        for i in range(n):  # a new connection each: the kernel spreads them over the workers
            assert httpx.get(base + "/search", params={"q": f"red cat {i}", "k": 3}, timeout=60).status_code == 200
        for _ in range(6):
            text = httpx.get(base + "/metrics", timeout=60).text
            c = re.search(r'^semsearch_requests_total\{path="/search",status="200"\} (\S+)$', text, re.M)
            assert c and float(c.group(1)) == n, text
            count = re.search(r"^semsearch_request_seconds_count (\S+)$", text, re.M)
            assert count and float(count.group(1)) >= n
    assert list(tmp.iterdir()) == [], server.stderr.read().decode(errors="replace")[-2000:] if server.stderr else ""


# -- paging, highlights, score_by, the ranker's explanation ----------------------------------------


def test_pages_continue_one_ranking_without_overlap_or_gap(client):
    """offset + k of one deterministic ranking: consecutive pages concatenate to the top of a
    single deeper search; ranks are absolute."""
    for merge in ("union", "rrf", "interpolate"):
        whole = client.get("/search", params={"q": "red cat", "k": 12, "merge": merge}).json()
        assert whole["offset"] == 0 and len(whole["hits"]) == 12
        paged = []
        for offset in (0, 4, 8):
            body = client.get("/search", params={"q": "red cat", "k": 4, "offset": offset, "merge": merge}).json()
            assert body["offset"] == offset and body["next_offset"] == offset + 4
            assert [h["rank"] for h in body["hits"]] == list(range(offset + 1, offset + 5))
            paged += body["hits"]
        assert [(h["doc_id"], h["score"]) for h in paged] == [(h["doc_id"], h["score"]) for h in whole["hits"]]
    everything = client.get("/search", params={"q": "red cat", "k": 1000}).json()["hits"]
    n = len(everything)
    last = client.get("/search", params={"q": "red cat", "k": 7, "offset": n - 3}).json()
    assert [h["doc_id"] for h in last["hits"]] == [h["doc_id"] for h in everything[-3:]]
    assert last["next_offset"] is None  # fewer than k: the last page
    past = client.get("/search", params={"q": "red cat", "k": 5, "offset": n + 5}).json()
    assert past["hits"] == [] and past["next_offset"] is None


@pytest.mark.parametrize(
    "query,message",
    [
        ("q=red&offset=-1", "'offset' must be in [0, 999]"),
        ("q=red&offset=1000", "'offset' must be in [0, 999], got 1000"),
        ("q=red&offset=ten", "offset"),
        ("q=red&offset=", "offset"),
        ("q=red&offset=1.5", "offset"),
    ],
)
def test_bad_offset_gets_422_naming_it(client, query, message):
    r = client.get("/search?" + query)
    assert r.status_code == 422 and message in r.json()["error"]


def test_highlights_mark_the_query_terms_that_matched(client):
    """The bundle's BM25 uses the english analyzer: 'cats' and 'reds' match 'cat' and 'red', the
    stop word 'a' matches nothing; spans index the title."""
    body = client.get("/search", params={"q": "a reds cats", "k": 10}).json()
    assert body["score_by"] == "union"
    for h in body["hits"]:
        assert h["highlight_field"] == "title"
        marked = [h["title"][a:b] for a, b in h["highlights"]]
        assert set(marked) <= {"red", "cat"} and set(marked) == {"red", "cat"} & set(h["title"].split())


def test_serving_keeps_the_garbage_collector_cheap(make_bundle, tmp_path):
    """What a worker caches for ever after startup is untracked by the cyclic GC (a full
    collection over 65k cached lists paused a busy worker ~20 ms every 1.5 s: the p99 tail), the
    stemmer keeps no cache of its own (ours is a str -> str dict), and while serving the young
    generation is collected every GC_YOUNG allocations, the old thresholds back at shutdown."""
    import gc

    from semsearch.serving.app import GC_YOUNG, Highlighter
    from semsearch.text import Analyzer

    assert Analyzer.named("english")._stemmer.maxCacheSize == 0
    h = Highlighter(type("Lex", (), {"analyzer": Analyzer.named("english")})())
    title = "Cordless drills with 2 batteries"
    assert [title[a:b] for a, b in h.spans(h.terms("drill battery"), title)] == ["drills", "batteries"]
    gc.collect()
    gc.collect()  # (a tuple is untracked once the tuples in it are: nested ones take a pass each)
    assert not gc.is_tracked(h._word("drills")) and not gc.is_tracked(h._words_of(title))

    before = gc.get_threshold()
    with TestClient(create_app(make_bundle(tmp_path / "b"))) as c:
        assert gc.get_threshold() == (GC_YOUNG, *before[1:])
        assert c.get("/search", params={"q": "red cat"}).status_code == 200
    assert gc.get_threshold() == before


def _corpus_bundle(tmp_path, ids, titles, texts, analyzer="english"):  # type: ignore[no-untyped-def]
    from semsearch.data import Corpus, open_dataset
    from semsearch.index import build_bundle
    from semsearch.plugins import create_model

    c = open_dataset("tiny").corpus()
    corpus = Corpus([*c.ids, *ids], [*c.titles, *titles], [*c.texts, *texts])
    return build_bundle(corpus, [create_model("bm25", analyzer=analyzer)], tmp_path / "b")


def test_highlights_in_utf16_units_and_text_when_no_title(tiny_data, tmp_path):
    """Offsets count UTF-16 code units (JavaScript string indices): an emoji counts 2. A hit
    without a title is highlighted in its text."""
    path = _corpus_bundle(tmp_path, ["e1", "e2"], ["🐈🐕 Red cats, 🐈 running", ""], ["x", "The red CAT ran"])
    with TestClient(create_app(path)) as c:
        hits = {h["doc_id"]: h for h in c.get("/search", params={"q": "cat running", "k": 100}).json()["hits"]}
    e1, e2 = hits["e1"], hits["e2"]
    assert e1["highlight_field"] == "title" and e1["highlights"] == [[9, 13], [18, 25]]
    units = e1["title"].encode("utf-16-le")
    assert [units[2 * a : 2 * b].decode("utf-16-le") for a, b in e1["highlights"]] == ["cats", "running"]
    assert e2["highlight_field"] == "text" and [e2["text"][a:b] for a, b in e2["highlights"]] == ["CAT"]


def test_paging_stops_at_the_depth_limit(tiny_data, tmp_path):
    """offset + k is at most max_k: the last full page before it has no next page, and a page
    reaching past it is cut there (k in the answer says so), not refused (each parameter is in
    its documented bounds)."""
    with TestClient(create_app(_corpus_bundle(tmp_path, [], [], []), max_k=10)) as c:
        body = c.get("/search", params={"q": "red", "k": 5, "offset": 5}).json()
        assert len(body["hits"]) == 5 and body["next_offset"] is None
        assert c.get("/search", params={"q": "red", "k": 5}).json()["next_offset"] == 5
        cut = c.get("/search", params={"q": "red", "k": 5, "offset": 6})
        assert cut.status_code == 200
        body = cut.json()
        assert body["k"] == 4 and len(body["hits"]) == 4 and body["next_offset"] is None
        assert [h["rank"] for h in body["hits"]] == [7, 8, 9, 10]
        assert c.get("/search", params={"q": "red", "k": 10, "offset": 9}).json()["k"] == 1
        r = c.get("/search", params={"q": "red", "k": 5, "offset": 10})
        assert r.status_code == 422 and "'offset' must be in [0, 9]" in r.json()["error"]


def test_highlights_without_a_lexical_model_are_lowercase_equality(make_bundle, tmp_path):
    from semsearch.index.bundle import Bundle

    b = Bundle.load(make_bundle(tmp_path / "b"))
    semantic_only = Bundle(b.path, b.manifest, b.corpus, None, b.semantic, None)
    with TestClient(create_app(semantic_only)) as c:
        body = c.get("/search", params={"q": "RED cats", "k": 20}).json()
    assert body["hits"] and {h["source"] for h in body["hits"]} == {"SEMANTIC"}
    for h in body["hits"]:  # 'cats' is not 'cat' without the stemmer
        assert [h["title"][a:b] for a, b in h["highlights"]] == [w for w in h["title"].split() if w == "red"]


class FakeRanker:
    """A stand-in ranker: the number of query words in the title, ties broken by the bundle."""

    name = "fake"

    def __init__(self, corpus) -> None:  # type: ignore[no-untyped-def]
        self.doc_ids = list(corpus.ids)
        self.titles = dict(zip(corpus.ids, corpus.titles))

    def score(self, queries, candidates):  # type: ignore[no-untyped-def]
        import numpy as np

        return [
            np.array([float(sum(w in self.titles[d].split() for w in q.split())) for d in docs])
            for q, docs in zip(queries, candidates)
        ]


def ranked_bundle(path):  # type: ignore[no-untyped-def]
    """The bundle at ``path`` with a FakeRanker and a fake ``explain_rank`` (recording its calls),
    as Bundle.explain_rank is specified: KeyError for an unknown id, ValueError for bad input."""
    from semsearch.index.bundle import Bundle

    b = Bundle.load(path)
    rb = Bundle(b.path, b.manifest, b.corpus, b.lexical, b.semantic, FakeRanker(b.corpus))
    calls = []

    def explain_rank(query: str, doc_id: str, *, top: int = 5) -> dict:
        calls.append((query, doc_id, top))
        if doc_id not in rb.corpus.index:
            raise KeyError(f"no document {doc_id!r}")
        if query.strip() == "bad":
            raise ValueError("bad query")
        contributions = [
            {"feature": "bm25", "value": 2.5, "contribution": 1.25},
            {"feature": "<b>cosine</b>", "value": 0.5, "contribution": -0.25},
            {"feature": "doc_len", "value": 9.0, "contribution": 0.125},
        ][:top]
        return {
            "doc_id": doc_id,
            "score": 1.125,
            "bias": 0.125,
            "source": "BOTH",
            "lexical_score": 2.5,
            "semantic_score": 0.5,
            "lexical_rank": 1,
            "semantic_rank": 3,
            "contributions": contributions,
        }

    rb.explain_rank = explain_rank  # type: ignore[attr-defined]
    rb.explain_calls = calls  # type: ignore[attr-defined]
    return rb


def test_with_a_ranker_scores_are_its_and_explain_gives_its_contributions(make_bundle, tmp_path):
    rb = ranked_bundle(make_bundle(tmp_path / "b"))
    with TestClient(create_app(rb)) as c:
        body = c.get("/search", params={"q": "red cat", "k": 5, "merge": "rrf"}).json()
        assert body["score_by"] == "ranker" and body["merge"] == "rrf"
        scores = [h["score"] for h in body["hits"]]
        assert scores == sorted(scores, reverse=True) and scores[0] == 2.0  # the fake ranker's: both words
        page2 = c.get("/search", params={"q": "red cat", "k": 5, "offset": 5, "merge": "rrf"}).json()["hits"]
        whole = c.get("/search", params={"q": "red cat", "k": 10, "merge": "rrf"}).json()["hits"]
        assert [h["doc_id"] for h in body["hits"] + page2] == [h["doc_id"] for h in whole]
        doc = body["hits"][0]["doc_id"]
        e = c.get("/explain", params={"q": "red cat", "doc_id": doc, "top": 2}).json()
        assert e["explained_by"] == "ranker" and e["doc_id"] == doc and e["bias"] == 0.125
        assert [x["feature"] for x in e["contributions"]] == ["bm25", "<b>cosine</b>"]
        assert rb.explain_calls == [("red cat", doc, 2)]
        assert c.get("/explain", params={"q": "red cat", "doc_id": "nope"}).status_code == 404
        r = c.get("/explain", params={"q": "bad", "doc_id": doc})
        assert r.status_code == 422 and r.json()["error"] == "bad query"
        assert c.get("/explain", params={"q": "", "doc_id": doc}).status_code == 400
        neural = c.get("/explain", params={"q": "red cat", "doc_id": doc, "model": "clsm"}).json()
        assert neural["model"] == "clsm" and "matching_neurons" in neural  # a named model: the DSSM/CLSM explain


def test_without_a_ranker_explain_is_the_neural_models(client):
    body = client.get("/search", params={"q": "red cat", "k": 1, "merge": "rrf"}).json()
    assert body["score_by"] == "rrf"
    e = client.get("/explain", params={"q": "red cat", "doc_id": body["hits"][0]["doc_id"]}).json()
    assert "explained_by" not in e and e["model"] == "clsm"


# -- the OpenAPI contract (tests/serving/test_contract.py runs schemathesis against it) ---------------


def test_answers_validate_against_the_documented_models(make_bundle, tmp_path):
    """What the handlers return (orjson, unvalidated on the hot path) matches the response models
    in /openapi.json: both /explain shapes (ranker; CLSM and DSSM), search, health, ready, errors."""
    from semsearch.serving import schemas

    rb = ranked_bundle(make_bundle(tmp_path / "b"))
    with TestClient(create_app(rb)) as c:
        body = c.get("/search", params={"q": "red cat", "k": 5, "merge": "rrf"}).json()
        schemas.SearchResponse.model_validate(body)
        doc = body["hits"][0]["doc_id"]
        ranker = c.get("/explain", params={"q": "red cat", "doc_id": doc, "top": 2}).json()
        schemas.RankerExplanation.model_validate(ranker)
        clsm = c.get("/explain", params={"q": "red cat", "doc_id": doc, "model": "clsm"}).json()
        assert schemas.NeuralExplanation.model_validate(clsm).matching_neurons is not None
        schemas.Health.model_validate(c.get("/health").json())
        schemas.Ready.model_validate(c.get("/ready").json())
        for url, status in [
            ("/search?q=", 400),
            ("/search?q=" + "a" * 1001, 422),
            ("/search?q=a&k=0", 422),
            ("/explain?q=red&doc_id=nope", 404),
        ]:
            r = c.get(url)
            assert r.status_code == status and schemas.ErrorBody.model_validate(r.json()).error
    with TestClient(create_app(make_bundle(tmp_path / "d", model="dssm"))) as c:
        dssm = schemas.NeuralExplanation.model_validate(
            c.get("/explain", params={"q": "red cat", "doc_id": "d01"}).json()
        )
        assert dssm.query_words and dssm.matching_neurons is None  # no neurons: not a CLSM


def test_openapi_documents_required_bounded_parameters_and_errors(client):
    spec = client.get("/openapi.json").json()
    search = spec["paths"]["/search"]["get"]
    params = {p["name"]: p for p in search["parameters"]}
    assert params["q"]["required"] and "default" not in params["q"]["schema"]
    assert (params["q"]["schema"]["minLength"], params["q"]["schema"]["maxLength"]) == (1, 1000)
    assert (params["k"]["schema"]["minimum"], params["k"]["schema"]["maximum"]) == (1, 1000)
    assert (params["offset"]["schema"]["minimum"], params["offset"]["schema"]["maximum"]) == (0, 999)
    assert params["merge"]["schema"]["enum"] == ["union", "rrf", "interpolate"]
    assert params["model"]["schema"] == {**params["model"]["schema"], "type": "string", "enum": ["clsm"]}
    error = {"$ref": "#/components/schemas/ErrorBody"}
    assert search["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/SearchResponse"
    }
    assert all(search["responses"][s]["content"]["application/json"]["schema"] == error for s in ("400", "422"))
    explain = spec["paths"]["/explain"]["get"]
    assert {"400", "404", "422"} <= explain["responses"].keys()
    assert "413" not in search["responses"] and "413" not in explain["responses"]  # a long q is 422
    assert {p["name"] for p in explain["parameters"] if p["required"]} == {"q", "doc_id"}
    top = next(p for p in explain["parameters"] if p["name"] == "top")["schema"]
    assert (top["minimum"], top["maximum"]) == (1, 50)
    assert "text/plain" in spec["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert "text/html" in spec["paths"]["/"]["get"]["responses"]["200"]["content"]


def test_method_not_allowed_says_which_are(client):
    r = client.request("TRACE", "/health")
    assert r.status_code == 405 and "GET" in r.headers["allow"] and r.json() == {"error": "Method Not Allowed"}
    assert "GET" in client.post("/search?q=red").headers["allow"]
    assert client.post("/search?q=red").headers["allow"] == "GET, HEAD"  # HEAD is served wherever GET is
    assert client.request("HEAD", "/events").headers["allow"] == "POST"
    assert client.get("/nope").status_code == 404 and "allow" not in client.get("/nope").headers


# -- HEAD, unknown parameters, /explain's models ------------------------------------------------------


def test_head_is_answered_wherever_get_is(client):
    """RFC 9110: every GET route answers HEAD with the GET's status and headers and no body."""
    for url in (
        "/",
        "/health",
        "/ready",
        "/metrics",
        "/openapi.json",
        "/docs",
        "/static/search.js",
        "/search?q=red+cat",
        "/explain?q=red&doc_id=nope",
        "/search?q=",
    ):
        get, head = client.get(url), client.head(url)
        assert head.status_code == get.status_code, url
        assert head.content == b"", url
        assert head.headers["content-type"] == get.headers["content-type"], url
        if not url.startswith(("/health", "/metrics", "/search?q=red")):  # uptime, counters, timings move
            assert head.headers.get("content-length") == get.headers.get("content-length"), url
    assert client.head("/nope").status_code == 404


@pytest.mark.parametrize(
    "url,name",
    [
        ("/search?q=drill&brand=DEWALT", "brand"),
        ("/search?q=drill&ofset=10", "ofset"),
        ("/explain?q=drill&doc_id=d01&k=3", "k"),
        ("/health?verbose=1", "verbose"),
        ("/ready?x=", "x"),
        ("/metrics?name[]=a", "name[]"),
        ("/?q=red&page=2&utm_source=mail", "utm_source"),
        ("/static/search.js?v=2", "v"),
        ("/openapi.json?format=yaml", "format"),
    ],
)
def test_unknown_query_parameters_are_refused_by_name(client, url, name):
    for r in (client.get(url), client.head(url)):
        assert r.status_code == 422
    error = client.get(url).json()["error"]
    assert error.startswith(f"unknown query parameter {name!r}"), error


def test_declared_parameters_are_taken(client):
    assert client.get("/search?q=red&k=3&offset=1&merge=rrf&model=clsm").status_code == 200
    assert client.get("/explain?q=red&doc_id=d01&top=3&model=clsm").status_code in (200, 404)
    assert client.get("/?q=red&k=10&page=2&merge=union").status_code == 200  # the page's own state
    assert client.post("/events?x=1", json={}).status_code == 422  # POST /events declares no query either
    assert client.post("/search?brand=x").status_code == 405  # an undeclared method stays 405


def test_explain_takes_exactly_the_models_its_schema_offers(make_bundle, tmp_path, monkeypatch):
    """/explain's ``model`` enum and the models the handler takes are one list: the bundle's
    DSSM/CLSM models; a bundle with none does not declare ``model`` on /explain (and refuses it)."""
    from semsearch.index.bundle import Bundle

    with TestClient(create_app(make_bundle(tmp_path / "b"))) as c:
        spec = c.get("/openapi.json").json()
        model = next(p for p in spec["paths"]["/explain"]["get"]["parameters"] if p["name"] == "model")
        assert model["schema"]["enum"] == ["clsm"]
        assert c.get("/explain", params={"q": "red", "doc_id": "d01", "model": "clsm"}).status_code in (200, 404)
        r = c.get("/explain", params={"q": "red", "doc_id": "d01", "model": "bm25"})
        assert r.status_code == 422 and "explainable: clsm" in r.json()["error"]
    monkeypatch.setattr(Bundle, "explainable_models", lambda self: [])
    with TestClient(create_app(make_bundle(tmp_path / "c"))) as c:
        spec = c.get("/openapi.json").json()
        assert "model" not in {p["name"] for p in spec["paths"]["/explain"]["get"]["parameters"]}
        r = c.get("/explain", params={"q": "red", "doc_id": "d01", "model": "clsm"})
        assert r.status_code == 422 and "'model'" in r.json()["error"]
