"""A sharded Home Depot bundle answers as the bundle, through HTTP (issue 51's done-when, in one
process; tests/serving/test_cluster.py serves a sharded bundle on a two-node Ray cluster): the
whole collection (54,667 titles), BM25 (english) ∪ a DSSM's vectors (flat), re-ranked by a
LambdaMART trained in the build; split in 3; the top 100 of 200 real test queries identical, ids
and scores, spell correction included."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

pytestmark = pytest.mark.integration


def test_home_depot_in_three_shards_answers_as_the_bundle_through_http(shared_data: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("SEMSEARCH_DATA", str(shared_data))
    from fastapi.testclient import TestClient

    from semsearch.cli import app
    from semsearch.data import open_dataset
    from semsearch.index.bundle.shard import split_bundle
    from semsearch.plugins import create_model
    from semsearch.serving import create_app
    from semsearch.text import TrigramHasher

    ds = open_dataset("homedepot")
    titles = ds.corpus().titles
    dssm = create_model("dssm", hidden=[64], out=32)  # untrained: the vectors are a fixed projection
    dssm.build(TrigramHasher.fit(titles[:20_000], max_words=8))
    dssm.save(tmp_path / "dssm")
    r = CliRunner().invoke(
        app,
        [
            "index",
            "build",
            "--data",
            "homedepot",
            "--models",
            f"bm25,{tmp_path / 'dssm'}",
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
            str(tmp_path / "B"),
        ],  # fmt: skip
    )
    assert r.exit_code == 0, r.output
    sharded = split_bundle(tmp_path / "B", tmp_path / "S", 3)
    queries = ds.queries()
    test = [queries[q] for q in sorted(ds.qrels("test")) if queries.get(q, "").strip()][:200]
    assert len(test) == 200
    full = 0
    with TestClient(create_app(tmp_path / "B")) as a, TestClient(create_app(sharded)) as b:
        for q in test:
            want = a.get("/search", params={"q": q, "k": 100}).json()
            got = b.get("/search", params={"q": q, "k": 100}).json()
            assert [h["doc_id"] for h in got["hits"]] == [h["doc_id"] for h in want["hits"]], q
            assert [h["score"] for h in got["hits"]] == pytest.approx([h["score"] for h in want["hits"]], abs=1e-9)
            assert got["corrected_query"] == want["corrected_query"]
            full += len(want["hits"]) == 100
    assert full >= 150  # (a query's candidates, lexical ∪ semantic at depths 100 and 50, may be fewer)
