"""The search page end to end in headless Chromium (Debian's ``chromium`` driven by Playwright):
type a query, see results tagged by source with the query terms that matched highlighted, the
score and a "why" per hit, and the latency; a screenshot is saved under the test's tmp dir. Pages
of results continue each other and live in the URL and history. Documents whose ids and titles
carry HTML/script show as text and run nothing (the page builds DOM text nodes; its CSP forbids
inline script)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import uvicorn

from semsearch.data import Corpus, open_dataset
from semsearch.index import build_bundle
from semsearch.plugins import create_model
from semsearch.serving import create_app
from waiting import WAIT_S, wait_until

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PAGE_WAIT_MS = int(WAIT_S * 1000)
"""How long the page is waited for to show what a test checks (Playwright counts milliseconds)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _serve(app) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """The app on a free loopback port in a thread; yields its base URL."""
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    wait_until(lambda: srv.started or not t.is_alive(), "uvicorn to start")
    assert srv.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        t.join(10)


@pytest.fixture
def server(make_bundle, tmp_path):
    """The tiny bundle served with an event log in ``tmp_path / "events"`` (flushed every 0.2 s)."""
    app = create_app(make_bundle(tmp_path / "b"), events=tmp_path / "events", events_flush_seconds=0.2)
    with _serve(app) as url:
        yield url


def _logged(log, kind: str, rows: int = 1, timeout: float = WAIT_S) -> list[dict]:  # type: ignore[no-untyped-def]
    """The event log's rows of ``kind`` once it holds at least ``rows`` (the writer flushes them)."""
    from semsearch.clicks.sessions import read_log

    deadline = time.time() + timeout
    while True:
        got = read_log(log, kind).to_pylist()
        if len(got) >= rows or time.time() > deadline:
            return got
        time.sleep(0.1)


def _need_chromium() -> None:
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed (CI must install it: apt-get install -y chromium)")
        pytest.skip("chromium is not installed")


def test_search_page_in_headless_chromium(server, tmp_path):
    _need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            urls: list[str] = []
            page.on("request", lambda r: urls.append(r.url))
            page.goto(server + "/")
            page.fill("#q", "red cat")
            page.select_option("#merge", "rrf")
            page.press("#q", "Enter")
            page.wait_for_selector("li.hit .tag", timeout=PAGE_WAIT_MS)
            page.wait_for_selector("li.hit mark", timeout=PAGE_WAIT_MS)  # query terms that matched, from /search
            tags = page.locator("li.hit .tag").all_inner_texts()
            assert tags and set(tags) <= {"LEXICAL", "SEMANTIC", "BOTH"}
            assert "ms" in page.inner_text("#status") and "scored by rrf" in page.inner_text("#status")
            assert page.locator("#merge").is_enabled()
            assert set(page.locator("li.hit mark").all_inner_texts()) <= {"red", "cat"}
            assert all(" rrf " in s for s in page.locator("li.hit .score").all_inner_texts())
            why = page.locator("li.hit details.why").first
            why.locator("summary").click()  # no ranker: the stage, its scores and ranks, no /explain
            assert "found by: " + tags[0] in why.inner_text() and "lexical" in why.inner_text()
            assert why.locator("table.contrib").count() == 0
            assert not [u for u in urls if "/explain" in u]
            # opening a result (its title) shows its text and sends one click to POST /events
            second = page.locator("li.hit").nth(1)
            doc_id = second.locator(".score").inner_text().split(" · ")[0]
            with page.expect_request(lambda r: r.url.endswith("/events") and r.method == "POST") as sent:
                second.locator(".title").click()
            click = sent.value.post_data_json
            assert second.locator(".doc").is_visible()
            assert second.locator(".title").get_attribute("aria-expanded") == "true"
            assert sent.value.response().status == 202  # type: ignore[union-attr]
            client = page.evaluate("localStorage.getItem('semsearch-client-id')")
            assert click["action_name"] == "click" and click["object_id"] == doc_id and click["position"] == 2
            assert click["client_id"] == client and len(client) == 32
            second.locator(".title").click()  # closed, and opened again: no second click
            second.locator(".title").click()
            page.wait_for_timeout(300)
            assert len([u for u in urls if u.endswith("/events")]) == 1
            clicks = _logged(tmp_path / "events", "events")
            impressions = {i["query_id"]: i for i in _logged(tmp_path / "events", "impressions")}
            assert [(c["object_id"], c["position"], c["client_id"]) for c in clicks] == [(doc_id, 2, client)]
            shown = impressions[clicks[0]["query_id"]]  # the click names the search that showed it
            assert shown["user_query"] == "red cat" and shown["hit_ids"][1] == doc_id and shown["client_id"] == client
            page.screenshot(path=str(tmp_path / "search-page.png"), full_page=True)
            page.evaluate("document.getElementById('q').removeAttribute('maxlength')")
            page.fill("#q", "x" * 1001)  # past the server's limit: the page shows the JSON error
            page.press("#q", "Enter")
            page.wait_for_selector("#status .err", timeout=PAGE_WAIT_MS)
            page.goto(server + "/docs")  # Swagger UI from local files (the machine has no network)
            page.wait_for_selector(".swagger-ui .opblock-summary-path", timeout=PAGE_WAIT_MS)
            assert "/search" in page.locator(".opblock-summary-path").all_inner_texts()
            page.goto(server + "/redoc")  # ReDoc too: the page's CSP is not theirs
            page.wait_for_selector("text=Lexical ∪ semantic search", timeout=PAGE_WAIT_MS)
        finally:
            browser.close()
    assert (tmp_path / "search-page.png").stat().st_size > 1000


IMG = '<img src=x onerror="window.__xss=1">'
SCRIPT = "<script>window.__xss=1</script>"


def test_html_in_ids_and_titles_is_shown_as_text(trained_clsm, tiny_data, tmp_path):
    """A collection whose ids and titles carry HTML and script: the page shows them verbatim as
    text, creates no element from them and runs none of them, highlighting included."""
    _need_chromium()
    from playwright.sync_api import sync_playwright

    c = open_dataset("tiny").corpus()
    corpus = Corpus(
        [*c.ids, IMG, SCRIPT, f"x{IMG}y"],
        [*c.titles, f"red cat {SCRIPT}", f"red cat {IMG}", IMG],
        [*c.texts, "red cat", "red cat", f"red cat {SCRIPT}"],
    )
    bundle = build_bundle(corpus, [create_model("bm25", analyzer="english"), trained_clsm()], tmp_path / "b")
    with _serve(create_app(bundle)) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(url + "/")
            page.fill("#q", "red cat")
            page.press("#q", "Enter")
            page.wait_for_selector("li.hit mark", timeout=PAGE_WAIT_MS)
            for d in page.locator("li.hit details.why summary").all():
                d.click()  # every "why" open: still text only
            text = page.inner_text("#results")
            for payload in (IMG, SCRIPT, f"red cat {SCRIPT}", f"red cat {IMG}", f"x{IMG}y"):
                assert payload in text
            assert page.locator("#results img, #results script").count() == 0
            assert page.evaluate("typeof window.__xss") == "undefined"
        finally:
            browser.close()


def test_page_headers(make_bundle, tmp_path):
    """The page and its assets carry a CSP without inline script; every answer has nosniff."""
    from fastapi.testclient import TestClient

    with TestClient(create_app(make_bundle(tmp_path / "b"))) as client:
        for url in ("/", "/static/search.js", "/static/search.css"):
            r = client.get(url)
            csp = r.headers["content-security-policy"]
            assert r.status_code == 200 and "script-src 'self'" in csp and "unsafe-inline" not in csp
            assert r.headers["x-content-type-options"] == "nosniff"
        assert "<script>" not in client.get("/").text  # no inline script
        assert client.get("/static/nope.js").status_code == 404
        assert client.get("/health").headers["x-content-type-options"] == "nosniff"
        assert "content-security-policy" not in client.get("/docs").headers


def test_url_holds_the_query_and_history_restores_it(server):
    """/?q=... shows its results on load; each search is pushed to history, so Back shows the
    previous query's results with the input holding it."""
    _need_chromium()
    import re

    from playwright.sync_api import expect, sync_playwright

    def first_titles(page) -> list[str]:  # type: ignore[no-untyped-def]
        page.wait_for_selector("li.hit .title", timeout=PAGE_WAIT_MS)
        return page.locator("li.hit .title").all_inner_texts()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(server + "/?q=green&k=3")  # a linked URL
            titles = first_titles(page)
            assert len(titles) == 3 and "green" in titles[0] and page.input_value("#q") == "green"
            for q in ("red", "lamp"):
                page.fill("#q", q)
                page.press("#q", "Enter")
                expect(page).to_have_url(re.compile(f"q={q}"))
                expect(page.locator("li.hit .title").first).to_contain_text(q)
            assert "k=3" in page.url
            page.go_back()
            expect(page.locator("li.hit .title").first).to_contain_text("red")
            assert page.input_value("#q") == "red" and "q=red" in page.url
            page.go_back()
            expect(page.locator("li.hit .title").first).to_contain_text("green")
            assert page.input_value("#q") == "green"
            page.go_forward()
            expect(page.locator("li.hit .title").first).to_contain_text("red")
            assert page.input_value("#q") == "red"
        finally:
            browser.close()


def _browser(p):  # type: ignore[no-untyped-def]
    return p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])


HIGHLIGHT_PAYLOAD = "<img src=x onerror=alert(1)> drill"


def test_highlights_are_text_marks_at_utf16_offsets(tiny_data, tmp_path):
    """The query terms that matched are <mark>ed: inside a title carrying an HTML payload (no
    element is made from it, no dialog opens) and after non-BMP characters (the spans are UTF-16
    offsets: the mark holds exactly the word). A hit without a title is highlighted in its text."""
    _need_chromium()
    from playwright.sync_api import sync_playwright

    c = open_dataset("tiny").corpus()
    corpus = Corpus(
        [*c.ids, "p1", "e1", "e2"],
        [*c.titles, HIGHLIGHT_PAYLOAD, "🐈🐕 Drills, 🐈 drilling", ""],
        [*c.texts, "x", "y", "the DRILL bits"],
    )
    bundle = build_bundle(corpus, [create_model("bm25", analyzer="english")], tmp_path / "b")
    with _serve(create_app(bundle)) as url, sync_playwright() as p:
        browser = _browser(p)
        try:
            page = browser.new_page()
            dialogs: list[str] = []
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(url + "/?q=drill")
            page.wait_for_selector("li.hit mark", timeout=PAGE_WAIT_MS)
            titles = dict(zip(page.locator("li.hit .score").all_inner_texts(), page.locator("li.hit .title").all()))
            by_id = {k.split(" · ")[0]: v for k, v in titles.items()}
            assert set(by_id) == {"p1", "e1", "e2"}
            assert by_id["p1"].inner_text() == HIGHLIGHT_PAYLOAD
            assert by_id["p1"].locator("mark").all_inner_texts() == ["drill"]
            assert by_id["e1"].inner_text() == "🐈🐕 Drills, 🐈 drilling"
            assert by_id["e1"].locator("mark").all_inner_texts() == ["Drills", "drilling"]
            assert by_id["e2"].inner_text() == "the DRILL bits" and by_id["e2"].locator("mark").all_inner_texts() == [
                "DRILL"
            ]
            page.wait_for_timeout(300)  # time for a (broken) image to fail and its onerror to run
            assert page.locator("#results img, #results script").count() == 0
            assert (
                page.locator("#results mark").count() == 4
                and page.locator("#results *:not(li, span, mark, details, summary, div, table, tr, th, td)").count()
                == 0
            )
            assert dialogs == []
        finally:
            browser.close()


def test_pages_continue_each_other_and_live_in_history(server):
    """/?q=red&k=3: next shows ranks 4-6, continuing page 1 without overlap or gap (the two pages
    are /search's top 6); page is in the URL; back, forward and previous work."""
    _need_chromium()
    import re

    import httpx
    from playwright.sync_api import expect, sync_playwright

    top6 = [h["doc_id"] for h in httpx.get(server + "/search", params={"q": "red", "k": 6}).json()["hits"]]

    def shown(page) -> tuple[list[str], list[int]]:  # type: ignore[no-untyped-def]
        page.wait_for_selector("li.hit .score", timeout=PAGE_WAIT_MS)
        ids = [s.split(" · ")[0] for s in page.locator("li.hit .score").all_inner_texts()]
        return ids, page.locator("li.hit").evaluate_all("els => els.map(e => e.value)")

    with sync_playwright() as p:
        browser = _browser(p)
        try:
            page = browser.new_page()
            page.goto(server + "/?q=red&k=3")
            assert shown(page) == (top6[:3], [1, 2, 3])
            assert page.locator("#pager a.prev").count() == 0
            page.click("#pager a.next")
            expect(page).to_have_url(re.compile(r"page=2"))
            expect(page.locator("li.hit").first).to_have_js_property("value", 4)
            assert shown(page) == (top6[3:], [4, 5, 6]) and "results 4–6" in page.inner_text("#status")
            assert "k=3" in page.url and "q=red" in page.url
            page.go_back()
            expect(page.locator("li.hit").first).to_have_js_property("value", 1)
            assert shown(page) == (top6[:3], [1, 2, 3]) and "page=2" not in page.url
            page.go_forward()
            expect(page.locator("li.hit").first).to_have_js_property("value", 4)
            assert shown(page)[0] == top6[3:]
            page.click("#pager a.prev")
            expect(page.locator("li.hit").first).to_have_js_property("value", 1)
            assert shown(page)[0] == top6[:3] and "page=1" in page.url
            page.goto(server + "/?q=green&k=3&page=2")  # a linked page 2
            expect(page.locator("li.hit").first).to_have_js_property("value", 4)
            assert page.locator("#pager a.prev").count() == 1
            page.fill("#q", "lamp")
            page.press("#q", "Enter")  # a new search starts on page 1
            expect(page).to_have_url(re.compile(r"q=lamp.*page=1|page=1.*q=lamp"))
            expect(page.locator("li.hit").first).to_have_js_property("value", 1)
        finally:
            browser.close()


class _FakeRanker:
    """A stand-in ranker: the number of query words in the title (the bundle breaks ties by id)."""

    name = "fake"

    def __init__(self, corpus) -> None:  # type: ignore[no-untyped-def]
        self.doc_ids, self.titles = list(corpus.ids), dict(zip(corpus.ids, corpus.titles))

    def score(self, queries, candidates):  # type: ignore[no-untyped-def]
        import numpy as np

        return [
            np.array([float(sum(w in self.titles[d].split() for w in q.split())) for d in docs])
            for q, docs in zip(queries, candidates)
        ]


def test_ranker_score_and_its_contributions_on_demand(make_bundle, tmp_path):
    """With a ranker the page shows its score, and opening a hit's "why" fetches /explain once and
    shows the feature contributions as a table of text (an HTML feature name stays text)."""
    _need_chromium()
    from playwright.sync_api import sync_playwright

    from semsearch.index.bundle import Bundle

    b = Bundle.load(make_bundle(tmp_path / "b"))
    rb = Bundle(b.path, b.manifest, b.corpus, b.lexical, b.semantic, _FakeRanker(b.corpus))
    calls: list[tuple[str, str, int]] = []

    def explain_rank(query: str, doc_id: str, *, top: int = 5) -> dict:
        calls.append((query, doc_id, top))
        return {
            "doc_id": doc_id,
            "score": 2.0,
            "bias": 0.5,
            "source": "LEXICAL",
            "lexical_score": 3.0,
            "semantic_score": None,
            "lexical_rank": 1,
            "semantic_rank": None,
            "contributions": [
                {"feature": "bm25", "value": 3.0, "contribution": 1.25},
                {"feature": SCRIPT, "value": 1.0, "contribution": 0.25},
            ],
        }

    rb.explain_rank = explain_rank  # type: ignore[attr-defined]
    with _serve(create_app(rb)) as url, sync_playwright() as p:
        browser = _browser(p)
        try:
            page = browser.new_page()
            page.goto(url + "/?q=red%20cat&k=5")
            page.wait_for_selector("li.hit .score", timeout=PAGE_WAIT_MS)
            assert "scored by ranker" in page.inner_text("#status")
            assert page.locator("#merge").is_disabled()  # the ranker orders results: no merge choice
            first = page.locator("li.hit").first
            doc = first.locator(".score").inner_text().split(" · ")[0]
            assert first.locator(".score").inner_text() == f"{doc} · ranker 2.0000"  # the fake ranker: both words
            assert calls == []  # nothing fetched until a "why" is opened
            first.locator("details.why summary").click()
            first.locator("table.contrib td").first.wait_for(timeout=PAGE_WAIT_MS)
            rows = first.locator("table.contrib tr").all_inner_texts()
            assert "bm25" in rows[1] and "1.2500" in rows[1] and SCRIPT in rows[2]
            assert "bias 0.5000" in first.locator("details.why").inner_text()
            first.locator("details.why summary").click()  # closed and opened again: no second fetch
            first.locator("details.why summary").click()
            page.wait_for_timeout(200)
            assert calls == [("red cat", doc, 10)]
            assert page.locator("#results script").count() == 0 and page.evaluate("typeof window.__xss") == "undefined"
        finally:
            browser.close()


def test_facets_narrow_filters_come_off_and_fields_show_as_text(tmp_path):
    """A table's bundle: each hit shows its stored fields; the facet counts narrow the search by a
    click (a filter in the URL, every hit then of that value), the active filter is removed by a
    click, a numeric range narrows too; HTML in facet values, field names and stored values is
    shown as text and never run."""
    _need_chromium()
    import csv

    from playwright.sync_api import sync_playwright
    from typer.testing import CliRunner

    from semsearch.cli import app as cli

    rows = [
        ["sku", "name", "brand", "price", "<i>note</i>"],
        ["A1", "red drill one", "DEWALT", "10", SCRIPT],
        ["A2", "red drill two", "DEWALT", "20", "plain"],
        ["A3", "red drill three", IMG, "30", IMG],
        ["A4", "red drill four", "RYOBI", "40", ""],
    ]
    with open(tmp_path / "c.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    args = ["--id", "sku", "--fields", "name", "--facets", "brand", "--numeric", "price"]
    r = CliRunner().invoke(
        cli, ["index", "build", "--data", str(tmp_path / "c.csv"), "--out", str(tmp_path / "b"), *args]
    )
    assert r.exit_code == 0, r.output
    with _serve(create_app(tmp_path / "b")) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(url + "/?q=red+drill")
            page.wait_for_selector("li.hit dl.fields", timeout=PAGE_WAIT_MS)
            assert page.locator("li.hit").count() == 4
            fields = page.inner_text("#results")
            for shown in ("brand", "DEWALT", "price", "<i>note</i>", SCRIPT, IMG):
                assert shown in fields
            facets = page.inner_text("#facets")
            assert "DEWALT" in facets and IMG in facets and "10 – 40" in facets
            assert page.locator("#results img, #results script, #facets img, #facets script, #results i").count() == 0
            page.click("#facets a.narrow:text-is('DEWALT')")
            _until(page, "new URLSearchParams(location.search).getAll('filter').join() === 'brand:DEWALT'")
            _until(page, "document.querySelectorAll('li.hit').length === 2")
            assert "brand:DEWALT" in page.inner_text("#active")
            page.fill("#facets .range input[placeholder=max]", "15")
            page.press("#facets .range input[placeholder=max]", "Enter")
            _until(page, "document.querySelectorAll('li.hit').length === 1")
            assert "A1" in page.inner_text("#results")
            assert new_filters(page) == ["brand:DEWALT", "price:[*,15]"]
            page.click("#active button.chip:has-text('brand:DEWALT')")
            _until(page, "new URLSearchParams(location.search).getAll('filter').join() === 'price:[*,15]'")
            _until(page, "document.querySelectorAll('li.hit').length === 1")
            page.go_back()  # history holds each narrowing
            _until(page, "new URLSearchParams(location.search).getAll('filter').length === 2")
            page.goto(url + "/?q=red+drill")
            page.wait_for_selector("#facets a.narrow", timeout=PAGE_WAIT_MS)
            page.locator("#facets a.narrow", has_text="onerror").click()  # the HTML value, a filter like any
            _until(page, "document.querySelectorAll('li.hit').length === 1")
            assert "A3" in page.inner_text("#results")
            assert page.evaluate("typeof window.__xss") == "undefined"
        finally:
            browser.close()


def new_filters(page):  # type: ignore[no-untyped-def]
    return page.evaluate("new URLSearchParams(location.search).getAll('filter')")


def _until(page, expression: str, timeout: float = WAIT_S) -> None:  # type: ignore[no-untyped-def]
    """Poll a JavaScript expression until it is true (the page's CSP forbids wait_for_function's eval)."""
    deadline = time.time() + timeout
    while not page.evaluate(expression):
        assert time.time() < deadline, f"timed out waiting for {expression}"
        time.sleep(0.05)
