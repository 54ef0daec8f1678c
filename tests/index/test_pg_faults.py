"""PostgreSQL faults (issue 19 item 6): a service whose vectors live in an embedded PostgreSQL
server answers 503 with a message naming the store while the server is stopped (between queries
and while searches are running), never a 500, and recovers by itself once the server is back,
with the same answers as before."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from semsearch.data import open_dataset
from semsearch.index import Bundle, build_bundle
from semsearch.index import bundle as bundle_mod
from semsearch.index.pgstore import EmbeddedPostgres, PgStoreError, PgVectorStore
from semsearch.plugins import create_model
from semsearch.serving import create_app
from waiting import wait_until


@pytest.fixture
def pg_server():  # type: ignore[no-untyped-def]
    """A private embedded server this test may stop and start (the session's is shared); its data
    directory is a fresh mkdtemp, which the server's own system user can traverse."""
    tmp = Path(tempfile.mkdtemp(prefix="semsearch-pgfault-"))
    data = tmp / "pg"
    try:
        server = EmbeddedPostgres(data)
    except PgStoreError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"PostgreSQL with pgvector unavailable: {e}")
        pytest.skip(f"PostgreSQL with pgvector unavailable: {e}")
    bundle_mod.SERVERS[str(data.resolve())] = server  # the one bundles on this data directory use
    yield tmp, data
    bundle_mod.SERVERS.pop(str(data.resolve()), None)
    server.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def _restart(data: Path) -> None:
    bundle_mod.SERVERS[str(data.resolve())] = EmbeddedPostgres(data)


def test_store_down_gives_503_and_recovers(trained_clsm, pg_server, monkeypatch) -> None:
    tmp, data = pg_server
    monkeypatch.delenv("SEMSEARCH_PG_DSN", raising=False)
    ds = open_dataset("tiny")
    path = build_bundle(ds.corpus(), [create_model("bm25"), trained_clsm()], tmp / "b", store="postgres", pg_data=data)
    b = Bundle.load(path, result_cache=0)  # every request reaches the store
    assert b.store == "postgres" and isinstance(next(iter(b.semantic.values())).vectors, PgVectorStore)
    q = "/search?q=red+cat&k=5&merge=rrf"
    with TestClient(create_app(b)) as c:
        before = c.get(q)
        assert before.status_code == 200 and before.json()["hits"]
        assert "503" in c.app.openapi()["paths"]["/search"]["get"]["responses"]

        bundle_mod.SERVERS[str(data.resolve())].stop()  # between queries
        first = c.get(q)
        assert first.status_code == 503 and first.headers["retry-after"] == "1"
        assert "vector store unavailable: PostgreSQL" in first.json()["error"] and str(data) in first.json()["error"]
        again = c.get(q)  # still down: the reconnect attempt fails cleanly too
        assert again.status_code == 503 and "cannot connect to PostgreSQL" in again.json()["error"]
        assert c.get("/health").status_code == 200  # the process itself is fine

        _restart(data)
        after = c.get(q)
        assert after.status_code == 200
        assert [h["doc_id"] for h in after.json()["hits"]] == [h["doc_id"] for h in before.json()["hits"]]

        # stopped while searches are running: every answer is 200 or 503, never a 500
        statuses: list[int] = []
        stop = threading.Event()

        def load() -> None:
            while not stop.is_set():
                statuses.append(c.get(q).status_code)

        def wait_for(n: int) -> None:
            def answered() -> bool:
                assert t.is_alive(), statuses
                return len(statuses) >= n

            wait_until(answered, lambda: f"{n} answers: {statuses}", every=0.01)

        t = threading.Thread(target=load)
        t.start()
        wait_for(5)
        bundle_mod.SERVERS[str(data.resolve())].stop()
        wait_for(len(statuses) + 5)
        _restart(data)
        wait_for(len(statuses) + 5)
        stop.set()
        t.join(30)
        assert set(statuses) <= {200, 503} and 503 in statuses and statuses[-1] == 200
        assert c.get(q).json()["hits"] == after.json()["hits"]
