"""A sharded Home Depot bundle answers as the bundle, through HTTP (issue 51's done-when): the whole
collection (54,667 titles), BM25 (english) ∪ a DSSM's vectors (flat), re-ranked by a LambdaMART
trained in the build; split in 3; the top 100 of 200 real test queries identical, ids and scores,
spell correction included: with the shards in the service's process, and served by Ray Serve on a
two-node local Ray cluster (``ray_cluster``). The same bundle's vectors re-indexed as IVF-PQ with
exact re-scoring (``index reindex --vector-index ivfpq``) and split in 3: the coordinator's merge of
the shards' short lists gives the bundle's top 100 too (in process)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def homedepot(shared_data: Path, tmp_path_factory) -> tuple[Path, Path, list[str]]:
    """(the bundle, it split in 3, 200 test queries)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SEMSEARCH_DATA", str(shared_data))
    from semsearch.cli import app
    from semsearch.data import open_dataset
    from semsearch.index.bundle.shard import split_bundle
    from semsearch.plugins import create_model
    from semsearch.text import TrigramHasher

    d = tmp_path_factory.mktemp("hd")
    ds = open_dataset("homedepot")
    dssm = create_model("dssm", hidden=[64], out=32)  # untrained: the vectors are a fixed projection
    dssm.build(TrigramHasher.fit(ds.corpus().titles[:20_000], max_words=8))
    dssm.save(d / "dssm")
    r = CliRunner().invoke(
        app,
        [
            "index",
            "build",
            "--data",
            "homedepot",
            "--models",
            f"bm25,{d / 'dssm'}",
            "--analyzer",
            "english",
            "--fields",
            "title",
            "--train-ranker",
            "--ranker-param",
            "stage_depths=[[100,50]]",
            "--ranker-param",
            "num_boost_round=40",
            "--out",
            str(d / "B"),
        ],  # fmt: skip
    )
    assert r.exit_code == 0, r.output
    queries = ds.queries()
    test = [queries[q] for q in sorted(ds.qrels("test")) if queries.get(q, "").strip()][:200]
    assert len(test) == 200
    yield d / "B", split_bundle(d / "B", d / "S", 3), test
    mp.undo()


def _compare(get_a, get_b, queries: list[str]) -> None:
    full = 0
    for q in queries:
        want, got = get_a(q), get_b(q)
        assert [h["doc_id"] for h in got["hits"]] == [h["doc_id"] for h in want["hits"]], q
        assert [h["score"] for h in got["hits"]] == pytest.approx([h["score"] for h in want["hits"]], abs=1e-9)
        assert got["corrected_query"] == want["corrected_query"]
        full += len(want["hits"]) == 100
    assert full >= 150  # (a query's candidates, lexical ∪ semantic at depths 100 and 50, may be fewer)


def test_home_depot_in_three_shards_answers_as_the_bundle_through_http(homedepot):
    from fastapi.testclient import TestClient

    from semsearch.serving import create_app

    plain, sharded, queries = homedepot
    with TestClient(create_app(plain)) as a, TestClient(create_app(sharded)) as b:
        _compare(
            lambda q: a.get("/search", params={"q": q, "k": 100}).json(),
            lambda q: b.get("/search", params={"q": q, "k": 100}).json(),
            queries,
        )


def test_home_depot_sharded_on_a_two_node_ray_cluster_answers_as_the_bundle(homedepot, ray_cluster, serve_bundle):
    import httpx
    from fastapi.testclient import TestClient

    from semsearch.serving import create_app

    plain, sharded, queries = homedepot
    address, env = ray_cluster
    ray_env = {k: env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    flags = ["--cluster", address, "--result-cache", "0"]
    with TestClient(create_app(plain)) as a, serve_bundle(sharded, *flags, env=ray_env, start_s=300) as (base, _):
        with httpx.Client(base_url=base, timeout=60) as b:
            _compare(
                lambda q: a.get("/search", params={"q": q, "k": 100}).json(),
                lambda q: b.get("/search", params={"q": q, "k": 100}).json(),
                queries,
            )
            metrics = b.get("/metrics").text
    for shard in ("0", "1", "2"):
        assert f'semsearch_shard_calls_total{{outcome="ok",round="stage1",shard="{shard}"}} 200.0' in metrics


def _as_json(result) -> dict:  # type: ignore[no-untyped-def]
    """A search result as the service's JSON carries what ``_compare`` reads."""
    hits = [{"doc_id": h.doc_id, "score": h.score} for h in result.hits]
    return {"hits": hits, "corrected_query": result.query}


def test_home_depot_ivfpq_rescored_in_three_shards_answers_as_the_bundle(homedepot, tmp_path):
    from semsearch.cli import app
    from semsearch.index.bundle import Bundle
    from semsearch.index.bundle.coordinator import ShardedBundle
    from semsearch.index.bundle.options import LoadOptions
    from semsearch.index.bundle.shard import split_bundle

    plain, _, queries = homedepot
    params = ["nlist=256", "m=8", "nbits=8", "nprobe=16", "rerank=200"]
    r = CliRunner().invoke(
        app,
        ["index", "reindex", str(plain), "--data", str(plain / "documents.jsonl"), "--out", str(tmp_path / "B"),
         "--vector-index", "ivfpq", *[x for p in params for x in ("--vector-param", p)]],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    b = Bundle.load(tmp_path / "B", result_cache=0)
    s = ShardedBundle.open_local(split_bundle(tmp_path / "B", tmp_path / "S", 3), LoadOptions(result_cache=0))
    try:
        assert s.semantic["dssm"].kind == "ivfpq" and s.two_stage
        assert s.manifest["models"][0]["params"]["rerank"] == 200  # the shards' short lists merged, re-scored
        _compare(lambda q: _as_json(b.search(q, 100)), lambda q: _as_json(s.search(q, 100)), queries)
    finally:
        s.close()
        b.close()
