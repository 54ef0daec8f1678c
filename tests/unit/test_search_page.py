"""The search page end to end in headless Chromium (Debian's ``chromium`` driven by Playwright):
type a query, see results tagged by source with highlighted words and the latency; a screenshot
is saved under the test's tmp dir."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time

import pytest
import uvicorn

from semsearch.serving import create_app

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(make_bundle, tmp_path):
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(make_bundle(tmp_path / "b")), host="127.0.0.1", port=port,
                                        log_level="warning"))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    deadline = time.time() + 20
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    assert srv.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    t.join(10)


def test_search_page_in_headless_chromium(server, tmp_path):
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed (CI must install it: apt-get install -y chromium)")
        pytest.skip("chromium is not installed")
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
        finally:
            browser.close()
    assert (tmp_path / "search-page.png").stat().st_size > 1000
