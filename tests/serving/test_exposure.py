"""Exposure (serving/exposure.py): loopback needs nothing; another address needs --expose and an
API key; the key guards /search, /explain and /metrics (header, constant-time compare), not the
probes or the page; URL and body sizes are bounded; the per-client rate limit answers 429 with
Retry-After; the OpenAPI contract documents what is enabled; the page asks for the key once."""

from __future__ import annotations

import re

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from semsearch.cli import app as cli
from semsearch.serving import create_app
from semsearch.serving.exposure import MAX_URL, Exposure, ExposureError, Guard, check_key, is_loopback

KEY = "k" * 20 + "-secret-0123456789"


@pytest.fixture
def bundle(make_bundle, tmp_path):  # type: ignore[no-untyped-def]
    return make_bundle(tmp_path / "b")


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.1.2.3")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.10") and not is_loopback("no-such-host.invalid")


def test_serve_refuses_to_expose_without_flag_or_key(bundle, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("SEMSEARCH_API_KEY", raising=False)
    r = CliRunner().invoke(cli, ["serve", str(bundle), "--host", "0.0.0.0", "--port", "1"])
    assert r.exit_code == 2 and "--host 0.0.0.0 is not a loopback address" in r.output and "--expose" in r.output
    r = CliRunner().invoke(cli, ["serve", str(bundle), "--host", "0.0.0.0", "--port", "1", "--expose"])
    assert r.exit_code == 2 and "--expose needs an API key" in r.output
    short = tmp_path / "short.key"
    short.write_text("abc\n")
    r = CliRunner().invoke(cli, ["serve", str(bundle), "--host", "0.0.0.0", "--expose", "--api-key-file", str(short)])
    assert r.exit_code == 2 and f"--api-key-file {short}" in r.output and "at least 16" in r.output
    r = CliRunner().invoke(cli, ["serve", str(bundle), "--api-key-file", str(tmp_path / "missing.key")])
    assert r.exit_code == 2 and "cannot read it" in r.output
    r = CliRunner().invoke(cli, ["serve", str(bundle), "--rate-limit", "-1"])
    assert r.exit_code == 2 and "--rate-limit" in r.output


def test_key_guards_the_api_not_the_probes(bundle) -> None:
    with TestClient(create_app(bundle, exposure=Exposure(KEY))) as c:
        for path in ("/search?q=red+cat", "/explain?q=red+cat&doc_id=d1", "/metrics"):
            r = c.get(path)
            assert r.status_code == 401 and "X-API-Key" in r.json()["error"], path
            assert r.headers["www-authenticate"] == 'ApiKey header="X-API-Key"'
            assert c.get(path, headers={"X-API-Key": KEY[:-1] + "x"}).status_code == 401
            assert c.get(path, headers={"X-API-Key": KEY[:-1]}).status_code == 401  # a prefix is not the key
        assert c.get("/search?q=red+cat", headers={"X-API-Key": KEY}).status_code == 200
        assert c.get("/metrics", headers={"X-API-Key": KEY}).status_code == 200
        for open_path in ("/health", "/ready", "/", "/static/search.js", "/openapi.json"):
            assert c.get(open_path).status_code == 200, open_path
        spec = c.get("/openapi.json").json()
        assert {"401", "414"} <= set(spec["paths"]["/search"]["get"]["responses"])
        assert "429" not in spec["paths"]["/search"]["get"]["responses"]  # no rate limit configured
        metrics = c.get("/metrics", headers={"X-API-Key": KEY}).text
        assert 'status="401"' in metrics  # refusals are counted


def test_sizes_are_bounded(bundle) -> None:
    with TestClient(create_app(bundle)) as c:
        r = c.get("/search?q=" + "a" * MAX_URL)
        assert r.status_code == 414 and str(MAX_URL) in r.json()["error"]
        r = c.request("GET", "/search?q=red", content=b"x" * 70_000)
        assert r.status_code == 413 and "body" in r.json()["error"]
        assert c.get("/search?q=red").status_code == 200  # no guard configured: loopback as before
        assert "401" not in c.get("/openapi.json").json()["paths"]["/search"]["get"]["responses"]


def test_rate_limit_per_client(bundle, monkeypatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr("semsearch.serving.exposure.time.monotonic", lambda: clock[0])
    with TestClient(create_app(bundle, exposure=Exposure(None, rate=2.0))) as c:
        codes = [c.get("/search?q=red+cat").status_code for _ in range(6)]
        assert codes == [200, 200, 200, 200, 429, 429]  # a burst of 2 x 2, then refused
        r = c.get("/search?q=red+cat")
        assert r.status_code == 429 and r.headers["retry-after"] == "1" and "2 requests a second" in r.json()["error"]
        assert c.get("/health").status_code == 200  # probes are not limited
        clock[0] += 1.0  # two tokens back
        assert [c.get("/search?q=red+cat").status_code for _ in range(3)] == [200, 200, 429]
        assert c.get("/openapi.json").status_code == 429  # everything but the probes counts
        assert "429" in c.app.openapi()["paths"]["/search"]["get"]["responses"]


def test_buckets_are_bounded_and_per_client() -> None:
    g = Guard(lambda *a: None, Exposure(None, rate=1.0))  # type: ignore[arg-type]
    assert g._take("a") == 0 and g._take("a") == 0 and g._take("a") == 1  # burst 2, then wait
    assert g._take("b") == 0  # another client has its own bucket
    with pytest.raises(ExposureError, match="at least 16"):
        check_key("short", "$SEMSEARCH_API_KEY")
    with pytest.raises(ExposureError, match="at least 16"):
        check_key("x" * 20 + " y", "$SEMSEARCH_API_KEY")


def test_page_asks_for_the_key_once(bundle, tmp_path) -> None:
    """Headless Chromium on a keyed service: the first search answers 401, the page asks for the
    key, keeps it for the tab and sends it in the header (never in the URL), clicks included."""
    from test_search_page import CHROMIUM, PAGE_WAIT_MS, _need_chromium, _serve

    _need_chromium()
    from playwright.sync_api import sync_playwright

    app = create_app(bundle, exposure=Exposure(KEY), events=tmp_path / "events")
    with _serve(app) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            asked: list[str] = []

            def answer(dialog) -> None:  # type: ignore[no-untyped-def]
                asked.append(dialog.message)
                dialog.accept(KEY)

            page.on("dialog", answer)
            sent: list[tuple[str, str | None]] = []
            page.on("request", lambda r: sent.append((r.url, r.headers.get("x-api-key"))))
            page.goto(url + "/?q=red+cat")
            page.wait_for_selector("li.hit .tag", timeout=PAGE_WAIT_MS)
            page.fill("#q", "blue dog")
            page.press("#q", "Enter")
            page.wait_for_selector("#status:has-text('results')", timeout=PAGE_WAIT_MS)
            assert len(asked) == 1 and "API key" in asked[0]
            searches = [(u, k) for u, k in sent if "/search?" in u]
            assert searches[-1][1] == KEY and all(KEY not in u for u, _ in sent)
            with page.expect_response(lambda r: r.url.endswith("/events")) as clicked:
                page.locator("li.hit .title").first.click()  # a click on a result carries the key too
            assert clicked.value.status == 202 and clicked.value.request.headers.get("x-api-key") == KEY
        finally:
            browser.close()


def test_served_with_workers_requires_key(bundle, serve_bundle) -> None:
    """Two worker processes behind `serve`: the key reaches them through the environment."""
    with serve_bundle(bundle, "--workers", "2", env={"SEMSEARCH_API_KEY": KEY}) as (base, server):
        # announced: both workers ready (new connections are spread over them)
        for _ in range(6):
            assert httpx.get(base + "/search?q=red", timeout=10).status_code == 401
            assert httpx.get(base + "/search?q=red", headers={"X-API-Key": KEY}, timeout=10).status_code == 200
    assert "API key required ($SEMSEARCH_API_KEY)" in server.stderr.read().decode(errors="replace")


def test_serve_options_validate_once_and_keep_the_key_out_of_reprs(tmp_path):
    """ServeOptions (a Params) takes its load options as a table, names each field by its flag in
    messages, keeps the key out of its repr and derives the exposure the workers keep."""
    from semsearch.index.bundle import LoadOptions
    from semsearch.params import ParamError
    from semsearch.serving.options import EXPOSED_RATE, ServeOptions

    key = "k" * 24
    o = ServeOptions.from_mapping(
        {"bundle": str(tmp_path), "load": {"result_cache": 0}, "host": "0.0.0.0", "expose": True, "api_key": key}
    )
    assert o.load == LoadOptions(result_cache=0) and key not in repr(o)
    assert (o.exposure.api_key, o.exposure.rate) == (key, EXPOSED_RATE)
    assert ServeOptions.from_mapping(o.as_dict()) == o  # one serialisable object, read back the same
    assert ServeOptions(str(tmp_path)).exposure.rate == 0.0
    for raw, message in [
        ({"workers": 0}, "--workers must be >= 1, got 0"),
        ({"port": 70000}, "--port must be <= 65535, got 70000"),
        ({"rate_limit": float("inf")}, "--rate-limit must be a number of requests per second >= 0"),
        ({"load": {"result_cache": -1}}, "serve: bundle load parameter 'result_cache' must be >= 0, got -1"),
        ({"load": {"cache": 1}}, "serve: bundle load has no parameter 'cache'"),
        ({"host": "0.0.0.0"}, "--host 0.0.0.0 is not a loopback address"),
        ({"host": "0.0.0.0", "expose": True}, "--expose needs an API key"),
        ({"api_key": "short"}, "an API key must be at least"),
        ({"verbose": True}, "serve has no parameter 'verbose'"),
    ]:
        with pytest.raises(ParamError, match=re.escape(message)):
            ServeOptions.from_mapping({"bundle": str(tmp_path), **raw})
