"""Hot reload: ``semsearch serve --workers 2`` searched in a loop by several clients while a
rebuilt bundle (other documents) is swapped in at the served path: no search fails, and every
worker comes to serve the new documents, without a restart."""

from __future__ import annotations

import threading

import httpx

from semsearch.data import Corpus
from semsearch.index.bundle import Bundle
from semsearch.index.bundle.reindex import reindex
from waiting import wait_until


def test_a_bundle_swapped_in_is_served_without_a_failed_search(make_bundle, tmp_path, serve_bundle):
    path = make_bundle(tmp_path / "b")
    old = Bundle.load(path).corpus
    new = Corpus(
        [*old.ids[:30], "fresh1"], [*old.titles[:30], "zorblax lamp"], [*old.texts[:30], "a zorblax near a lamp"]
    )
    with serve_bundle(path, "--workers", "2") as (base, _):
        stop, statuses, errors = threading.Event(), [], []

        def searches() -> None:
            with httpx.Client(base_url=base, timeout=30) as http:
                while not stop.is_set():
                    try:
                        statuses.append(http.get("/search", params={"q": "red lamp", "k": 5}).status_code)
                    except httpx.HTTPError as e:
                        errors.append(repr(e))

        threads = [threading.Thread(target=searches) for _ in range(4)]
        for t in threads:
            t.start()
        seen: set[int] = set()

        def both_serve_the_new_bundle() -> bool:  # each worker (new connections spread over them)
            with httpx.Client(base_url=base, timeout=30) as fresh:
                h = fresh.get("/health").json()
                hits = fresh.get("/search", params={"q": "zorblax"}).json()["hits"]
            if h["documents"] == 31 and hits and hits[0]["doc_id"] == "fresh1":
                seen.add(h["pid"])
            return len(seen) == 2

        try:
            wait_until(lambda: len(statuses) >= 20 or errors, "the clients' first searches")
            reindex(path, new, path)  # the rebuild, swapped in at the served path
            wait_until(both_serve_the_new_bundle, lambda: f"both workers to serve the new bundle (seen in {seen})")
            assert httpx.get(base + "/ready", timeout=30).status_code == 200
            after = len(statuses)
            wait_until(lambda: len(statuses) >= after + 20 or errors, "the clients' searches after the swap")
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert len(seen) == 2, "not every worker serves the new bundle"
        assert not errors and statuses and set(statuses) == {200}, (errors[:3], set(statuses))
