"""The search page end to end in headless Chromium (Debian's ``chromium`` driven by Playwright):
type a query, see results tagged by source with highlighted words and the latency; a screenshot
is saved under the test's tmp dir. Documents whose ids and titles carry HTML/script show as text
and run nothing (the page builds DOM text nodes; its CSP forbids inline script)."""

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

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


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
    deadline = time.time() + 20
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    assert srv.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        t.join(10)


@pytest.fixture
def server(make_bundle, tmp_path):
    with _serve(create_app(make_bundle(tmp_path / "b"))) as url:
        yield url


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
            page.goto(server + "/")
            page.fill("#q", "red cat")
            page.select_option("#merge", "rrf")
            page.press("#q", "Enter")
            page.wait_for_selector("li.hit .tag", timeout=15_000)
            page.wait_for_selector("li.hit mark", timeout=15_000)  # winning words from /explain
            tags = page.locator("li.hit .tag").all_inner_texts()
            assert tags and set(tags) <= {"LEXICAL", "SEMANTIC", "BOTH"}
            assert "ms" in page.inner_text("#status")
            page.screenshot(path=str(tmp_path / "search-page.png"), full_page=True)
            page.evaluate("document.getElementById('q').removeAttribute('maxlength')")
            page.fill("#q", "x" * 1001)  # past the server's limit: the page shows the JSON error
            page.press("#q", "Enter")
            page.wait_for_selector("#status .err", timeout=15_000)
            page.goto(server + "/docs")  # Swagger UI from local files (the machine has no network)
            page.wait_for_selector(".swagger-ui .opblock-summary-path", timeout=15_000)
            assert "/search" in page.locator(".opblock-summary-path").all_inner_texts()
            page.goto(server + "/redoc")  # ReDoc too: the page's CSP is not theirs
            page.wait_for_selector("text=Lexical ∪ semantic search", timeout=15_000)
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
    corpus = Corpus([*c.ids, IMG, SCRIPT, f"x{IMG}y"], [*c.titles, f"red cat {SCRIPT}", f"red cat {IMG}", IMG],
                    [*c.texts, "red cat", "red cat", f"red cat {SCRIPT}"])
    bundle = build_bundle(corpus, [create_model("bm25", analyzer="english"), trained_clsm()], tmp_path / "b")
    with _serve(create_app(bundle)) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(url + "/")
            page.fill("#q", "red cat")
            page.press("#q", "Enter")
            page.wait_for_selector("li.hit mark", timeout=15_000)
            page.wait_for_timeout(500)  # every /explain answer has been highlighted
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
        page.wait_for_selector("li.hit .title", timeout=15_000)
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
