"""A sharded bundle served by Ray Serve on a two-node local Ray cluster (issue 51): the same
answers over HTTP as the plain bundle, a killed shard replica under load costs no failed search,
a new version rolls out under load with no failed search, and /metrics counts every shard.

The cluster is ``ray_cluster`` (conftest): two ``ray start --block`` processes on this machine (a
head and a second node, each in its own process group, killed at the end), with a token of the
test's own (Ray's token authentication, on by default for clusters since Ray 2.59)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from semsearch.data import load_corpus
from semsearch.index.bundle import Bundle
from semsearch.index.bundle.reindex import reindex
from semsearch.index.bundle.shard import split_bundle
from waiting import wait_until

QUERIES = ["deep learning", "search engine", "neural networks for retrieval", "query logs", "click", "semantic model"]


@pytest.fixture
def sharded(two_stage, tmp_path) -> tuple[Path, Path]:
    """The tiny two-stage bundle and it split in two."""
    return two_stage, split_bundle(two_stage, tmp_path / "S", 2)


def _load(base: str, stop: threading.Event, stats: dict[str, int]) -> None:
    i = 0
    with httpx.Client(timeout=30) as c:
        while not stop.is_set():
            q = f"{QUERIES[i % len(QUERIES)]} {i}"
            i += 1
            try:
                r = c.get(base + "/search", params={"q": q, "k": 5})
                stats["ok" if r.status_code == 200 else f"status {r.status_code}"] = (
                    stats.get("ok" if r.status_code == 200 else f"status {r.status_code}", 0) + 1
                )
            except httpx.HTTPError as e:
                stats[type(e).__name__] = stats.get(type(e).__name__, 0) + 1


def _replicas(address: str, env: dict[str, str], shard: str) -> list[str]:
    code = (
        f"import ray;ray.init(address={address!r}, log_to_driver=False);"
        "print('\\n'.join(a['name'] for a in ray.util.list_named_actors(all_namespaces=True)"
        f" if '#{shard}#' in a['name']))"
    )
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return sorted(x for x in r.stdout.split() if x.startswith("SERVE_REPLICA"))


def _driver(address: str, env: dict[str, str], code: str) -> None:
    full = f"import ray;ray.init(address={address!r}, log_to_driver=False)\n{code}"
    r = subprocess.run([sys.executable, "-c", full], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_a_sharded_bundle_served_by_ray_serve_answers_as_the_bundle_survives_a_killed_replica_and_rolls_out(
    ray_cluster, sharded, tmp_path, serve_bundle
):
    address, env = ray_cluster
    plain, shards = sharded
    bundle = Bundle.load(plain, result_cache=0)
    flags = ["--cluster", address, "--shard-replicas", "2", "--result-cache", "0"]
    extra = {k: env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    with serve_bundle(shards, *flags, env=extra, start_s=240) as (base, _):
        # the same answers as the plain bundle, through HTTP
        for q in QUERIES:
            got = httpx.get(base + "/search", params={"q": q, "k": 10}, timeout=60).json()["hits"]
            want = bundle.search(q, 10).hits
            assert [h["doc_id"] for h in got] == [h.doc_id for h in want], q
            assert [h["score"] for h in got] == pytest.approx([h.score for h in want], abs=1e-9)

        # a killed replica of shard 0 under load: no failed search, and Ray Serve replaces it
        before = _replicas(address, env, "shard-0")
        assert len(before) == 2
        stop, stats = threading.Event(), {}
        load = [threading.Thread(target=_load, args=(base, stop, stats)) for _ in range(3)]
        for t in load:
            t.start()
        try:
            wait_until(lambda: stats.get("ok", 0) >= 10 or set(stats) - {"ok"}, lambda: f"searches under load: {stats}")
            _driver(address, env, f"ray.kill(ray.get_actor({before[0]!r}, namespace='serve'), no_restart=True)")
            killed = stats.get("ok", 0)
            # the load goes on until Ray Serve has replaced the replica, and for 20 searches at least
            wait_until(
                lambda: not (now := _replicas(address, env, "shard-0")) or (len(now) >= 2 and before[0] not in now),
                f"Ray Serve to replace the killed replica {before[0]} of shard-0",
                every=2,
            )
            wait_until(lambda: stats.get("ok", 0) >= killed + 20 or set(stats) - {"ok"}, lambda: f"searches: {stats}")
        finally:
            stop.set()
            for t in load:
                t.join()
        assert stats.get("ok", 0) > 20 and set(stats) == {"ok"}, stats

        # a new version written at the served path (the plain bundle changed, sharded again) is
        # rolled out shard by shard under load: no failed search, every replica replaced
        corpus = load_corpus(plain / "documents.jsonl", stored_fields=True)
        changed = corpus.ids[0]
        corpus.titles[0] = "retrieval of query logs by click models"
        v2 = Bundle.load(reindex(plain, corpus, tmp_path / "B2"), result_cache=0)
        old = _replicas(address, env, "shard-1")
        stop, stats = threading.Event(), {}
        load = [threading.Thread(target=_load, args=(base, stop, stats)) for _ in range(3)]
        for t in load:
            t.start()
        try:
            split_bundle(v2.path, shards, 2)
            wait_until(
                lambda: not set(now := _replicas(address, env, "shard-1")) & set(old) and len(now) >= 2,
                f"the new version to replace shard-1's replicas {old}",
                every=2,
            )
            rolled = stats.get("ok", 0)
            wait_until(lambda: stats.get("ok", 0) >= rolled + 20 or set(stats) - {"ok"}, lambda: f"searches: {stats}")
        finally:
            stop.set()
            for t in load:
                t.join()
        assert stats.get("ok", 0) > 20 and set(stats) == {"ok"}, stats
        for q in [*QUERIES, "query logs click models"]:
            got = httpx.get(base + "/search", params={"q": q, "k": 10}, timeout=60).json()["hits"]
            assert [h["doc_id"] for h in got] == [h.doc_id for h in v2.search(q, 10).hits], q
        assert changed in [h["doc_id"] for h in got]

        # the coordinator's /metrics counts its calls to every shard
        metrics = httpx.get(base + "/metrics", timeout=30).text
        for shard in ("0", "1"):
            assert f'semsearch_shard_calls_total{{outcome="ok",round="stage1",shard="{shard}"}}' in metrics


def test_a_shard_that_does_not_answer_fails_the_search_with_503_naming_it(sharded):
    from fastapi.testclient import TestClient

    from semsearch.index.bundle.coordinator import LocalShards, ShardedBundle
    from semsearch.index.bundle.shard import Shard, read_sharded
    from semsearch.serving.app import create_app

    _, shards = sharded
    local = LocalShards([Shard(shards / s["path"]) for s in read_sharded(shards)["shards"]])

    class Gone:
        def submit(self, method, *args):
            raise ConnectionError("no replica of this shard answers")

    b = ShardedBundle(shards, [local.clients()[0], Gone()], close=local.close)
    with TestClient(create_app(b)) as c:
        r = c.get("/search", params={"q": "deep learning"})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["missing_shard"] == 1 and "shard 1 is unavailable" in r.json()["error"]
        metrics = c.get("/metrics").text
        assert 'semsearch_shard_calls_total{outcome="failed",round="stage1",shard="1"} 1.0' in metrics


def test_serve_refuses_cluster_options_that_do_not_fit(sharded, tmp_path):
    from semsearch.params import ParamError
    from semsearch.serving.options import ServeOptions

    plain, shards = sharded
    with pytest.raises(ParamError, match="not one"):
        ServeOptions.from_mapping({"bundle": str(plain), "cluster": "local"}, where="serve")
    with pytest.raises(ParamError, match="--workers"):
        ServeOptions.from_mapping({"bundle": str(shards), "cluster": "local", "workers": 2}, where="serve")
    with pytest.raises(ParamError, match="--shard-replicas needs --cluster"):
        ServeOptions.from_mapping({"bundle": str(shards), "shard_replicas": 2}, where="serve")
    with pytest.raises(ParamError, match="sharded bundle"):
        ServeOptions.from_mapping({"bundle": str(shards), "allow_writes": True}, where="serve")
