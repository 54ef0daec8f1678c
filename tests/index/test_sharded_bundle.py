"""A sharded bundle (issue 51 items 1 and 3), what ``test_sharded_exact`` leaves out: ``k`` larger
than a shard (plain and two-stage), the control that the equality needs the collection's
statistics in the search itself, HNSW-SQ shards, a bundle that cannot be sharded refused (the
stage-3 cross-encoder, the postgres store, on the command line before any build), a shard folder
its manifest does not list, ``index build --shards`` answering as ``index build`` does,
``index reindex --vector-index``, and ``VectorIndex.subset`` against the whole index."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.index.bundle import Bundle
from semsearch.index.bundle.coordinator import ShardedBundle
from semsearch.index.bundle.options import LoadOptions
from semsearch.index.bundle.shard import split_bundle
from semsearch.index.vector import VectorIndex
from semsearch.models.base import ModelDirError

WORDS = "red brick wall blue door oak table lamp shade steel pipe white paint drill hose cordless".split()
QUERIES = ["red door", "steel pipe lamp", "white oak table", "cordless drill", "brick", "blue hose paint"]


def _run(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def _products(d, n: int, brands: list[str]):
    """An ``n``-product table at ``d`` (distinct titles, a brand facet cycling through ``brands``)
    and an untrained DSSM over its titles."""
    from semsearch.plugins import create_model
    from semsearch.text import TrigramHasher

    rng = np.random.default_rng(23)
    rows, seen = [], set()
    for i in range(n):
        title = ""
        while not title or title in seen:  # distinct titles: no two documents tied on one vector
            title = " ".join(rng.choice(WORDS, size=rng.integers(1, 6)))
        seen.add(title)
        rows.append({"sku": f"k{i:03d}", "title": title, "brand": brands[i % len(brands)]})
    with (d / "products.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, ["sku", "title", "brand"])
        w.writeheader()
        w.writerows(rows)
    m = create_model("dssm", hidden=[8], out=6)
    m.build(TrigramHasher.fit([r["title"] for r in rows], max_words=8))
    m.save(d / "dssm")
    return d


@pytest.fixture(scope="module")
def products(tmp_path_factory):
    """90 products, 30 of each of three brands."""
    return _products(tmp_path_factory.mktemp("products"), 90, ["acme", "bolt", "crest"])


def _build(products, out, *extra: object, models: str | None = None):
    r = _run("index", "build", "--data", products / "products.csv", "--id", "sku", "--fields", "title",
             "--facets", "brand", "--models", models or f"bm25,{products / 'dssm'}", "--analyzer", "english",
             *extra, "--out", out)  # fmt: skip
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def flat(products, tmp_path_factory):
    return _build(products, tmp_path_factory.mktemp("flat") / "B")


def _pairs(result):
    return [(h.doc_id, round(h.score, 9)) for h in result.hits]


def test_k_larger_than_a_shard_returns_the_bundles_whole_ranking(flat, tmp_path):
    b = Bundle.load(flat, result_cache=0)
    s = ShardedBundle.open_local(split_bundle(flat, tmp_path / "S", 4))  # shards of 22 and 23 documents
    try:
        assert max(s.sizes) < 60
        for merge in ("union", "rrf", "interpolate"):
            for q in QUERIES:
                want = b.search(q, 60, merge_by=merge, n_lexical=60, n_semantic=60)
                got = s.search(q, 60, merge_by=merge, n_lexical=60, n_semantic=60)
                assert len(want.hits) > max(s.sizes)  # more hits than any shard holds
                assert _pairs(got) == _pairs(want)
        want = b.search("red door", 90, filters=["brand:acme"], facets=3, n_semantic=90)
        got = s.search("red door", 90, filters=["brand:acme"], facets=3, n_semantic=90)
        assert _pairs(got) == _pairs(want) and got.facets == want.facets
        assert len(got.hits) == 30  # every acme product: a filter leaves fewer than k
    finally:
        s.close()
        b.close()


def test_two_stage_k_larger_than_a_shard(make_two_stage, tmp_path):
    plain = make_two_stage(tmp_path / "B", "[[30,30]]")
    b = Bundle.load(plain, result_cache=0)
    s = ShardedBundle.open_local(split_bundle(plain, tmp_path / "S", 4))  # 15 documents a shard
    try:
        for q in ["red cat", "blue dog", "green bird fish", "lamp door sofa"]:
            want, got = b.search(q, 50), s.search(q, 50)
            assert len(want.hits) > 15
            assert _pairs(got) == _pairs(want)
    finally:
        s.close()
        b.close()


def test_a_two_stage_table_bundle_filters_and_counts_facets_as_the_bundle(tmp_path):
    """The packaged portable ranker over a table: stage 2's facet tally comes from the shards'
    ``complete`` round (not the plain search's), under filters and masks."""
    table = _products(tmp_path, 260, ["acme", "bolt", "crest", "delta", "echo"])
    plain = _build(table, tmp_path / "B", "--ranker", "portable")
    b = Bundle.load(plain, result_cache=0)
    s = ShardedBundle.open_local(split_bundle(plain, tmp_path / "S", 3))
    mask = np.zeros(260, bool)
    mask[::3] = True
    try:
        assert s.two_stage and b.two_stage
        counted = set()
        for q in QUERIES:
            for kw in ({"facets": 5}, {"facets": 5, "filters": ["brand:acme"]}, {"allowed": mask, "facets": 2},
                       {"filters": ["brand:bolt", "brand:echo"], "allowed": mask, "facets": 5}):  # fmt: skip
                want, got = b.search(q, 20, **kw), s.search(q, 20, **kw)
                assert _pairs(got) == _pairs(want) and got.facets == want.facets, (q, kw)
                counted.add(json.dumps(want.facets, sort_keys=True))
        assert len(counted) > 4  # the counts depend on the query's candidates, not only on the filter
    finally:
        s.close()
        b.close()


def test_shards_scoring_with_their_own_statistics_do_not_answer_as_the_bundle(flat, tmp_path):
    """The control for every equality here: the same shards, each lexical model given its own
    statistics (what a per-shard index would have), rank and score otherwise."""
    b = Bundle.load(flat, result_cache=0)
    s = ShardedBundle.open_local(split_bundle(flat, tmp_path / "S", 3), LoadOptions(result_cache=0))
    try:
        want = [_pairs(b.search(q, 20)) for q in QUERIES]
        assert [_pairs(s.search(q, 20)) for q in QUERIES] == want
        for c in s.clients:
            c.shard.lexical = c.shard.lexical.with_stats(None)  # type: ignore[attr-defined]  # local shards
        assert [_pairs(s.search(q, 20)) for q in QUERIES] != want
    finally:
        s.close()
        b.close()


def test_hnswsq_shards_search_their_own_graphs(products, tmp_path):
    plain = _build(products, tmp_path / "B", "--vector-index", "hnswsq")
    s = ShardedBundle.open_local(split_bundle(plain, tmp_path / "S", 2))
    try:
        assert s.semantic["dssm"].kind == "hnswsq"
        assert len(s.search("red door", 10).hits) == 10  # approximate in its own way: no equality asked
    finally:
        s.close()


def test_a_bundle_that_cannot_be_sharded_is_refused(flat, tmp_path):
    b = Bundle.load(flat, result_cache=0)
    try:
        b.rescorer = object()  # type: ignore[assignment]  # stands for a stage-3 cross-encoder
        with pytest.raises(ValueError, match="stage-3 cross-encoder cannot be sharded"):
            split_bundle(b, tmp_path / "S", 2)
        b.rescorer = None
        b.store = "postgres"
        with pytest.raises(ValueError, match="built from a faiss-store bundle, not postgres"):
            split_bundle(b, tmp_path / "S", 2)
        b.store = "faiss"
        with pytest.raises(ValueError, match="shards must be between 1 and the 90 documents, got 0"):
            split_bundle(b, tmp_path / "S", 0)
        assert not (tmp_path / "S").exists()  # nothing half-written
    finally:
        b.close()


def test_build_shards_refuses_what_cannot_be_sharded_before_building(products, tmp_path):
    base = ["index", "build", "--data", products / "products.csv", "--id", "sku", "--fields", "title",
            "--models", "bm25", "--shards", "2", "--out", tmp_path / "S"]  # fmt: skip
    r = _run(*base, "--rescorer", tmp_path / "no-such-model")
    assert r.exit_code != 0 and "--shards" in r.output and "--rescorer" in r.output, r.output
    r = _run(*base, "--store", "postgres")
    assert r.exit_code != 0 and "--shards" in r.output and "postgres" in r.output, r.output
    r = _run(*base[:-4], "--shards", "91", "--out", tmp_path / "S")
    assert r.exit_code != 0 and "--shards" in r.output and "90 documents" in r.output, r.output
    assert not (tmp_path / "S").exists()
    assert not list(tmp_path.glob(".S*"))  # no build left behind


def test_a_shard_folder_its_manifest_does_not_list_is_refused_unverified(flat, tmp_path):
    """With checksums off (``verify=False``) the shard folders are still the ones the manifest
    lists: two swapped shards would answer with each other's offsets."""
    sharded = split_bundle(flat, tmp_path / "S", 2)
    a, b = sharded / "shard-00000", sharded / "shard-00001"
    shutil.move(a, tmp_path / "x")
    shutil.move(b, a)
    shutil.move(tmp_path / "x", b)
    with pytest.raises(ModelDirError, match="shard-00000: not the shard its sharded bundle lists"):
        ShardedBundle.open_local(sharded, LoadOptions(verify=False))


def test_build_shards_answers_as_build(products, tmp_path):
    plain = _build(products, tmp_path / "B", models="bm25")
    sharded = _build(products, tmp_path / "S", "--shards", "3", models="bm25")
    b, s = Bundle.load(plain, result_cache=0), ShardedBundle.open_local(sharded)
    try:
        assert s.sizes == [30, 30, 30]
        for q in QUERIES:
            assert _pairs(s.search(q, 40, filters=["brand:bolt"])) == _pairs(b.search(q, 40, filters=["brand:bolt"]))
        rows = s.hits(s.search("red door", 3))
        assert [(r.rank, r.doc_id, r.score, r.title, r.text, r.fields) for r in rows] == [
            (r.rank, r.doc_id, r.score, r.title, r.text, r.fields) for r in b.hits(b.search("red door", 3))
        ]
        assert rows[0].fields["brand"] in ("acme", "bolt", "crest") and len(s) == 90
    finally:
        s.close()
        b.close()


def test_reindex_vector_index_rebuilds_the_index_from_the_stored_vectors(products, flat, tmp_path):
    hnsw = _build(products, tmp_path / "H", "--vector-index", "hnsw")
    r = _run("index", "reindex", hnsw, "--data", hnsw / "documents.jsonl", "--out", tmp_path / "R",
             "--vector-index", "flat")  # fmt: skip
    assert r.exit_code == 0, r.output
    again, want = Bundle.load(tmp_path / "R", result_cache=0), Bundle.load(flat, result_cache=0)
    try:
        assert again.semantic["dssm"].vectors.kind == "flat"  # type: ignore[union-attr]
        for q in QUERIES:  # the flat bundle's answers: the same vectors, searched exactly
            assert _pairs(again.search(q, 30)) == _pairs(want.search(q, 30))
    finally:
        again.close()
        want.close()
    r = _run("index", "reindex", flat, "--data", flat / "documents.jsonl", "--out", tmp_path / "Q",
             "--vector-index", "ivfpq", "--vector-param", "nlist=4", "--vector-param", "m=3",
             "--vector-param", "nbits=4")  # fmt: skip
    assert r.exit_code == 0, r.output
    ivf = Bundle.load(tmp_path / "Q", result_cache=0)
    try:
        ix = ivf.semantic["dssm"].vectors
        assert (ix.kind, ix.params["nlist"], ix.params["m"]) == ("ivfpq", 4, 3)  # type: ignore[union-attr]
    finally:
        ivf.close()
    r = _run("index", "reindex", flat, "--data", flat / "documents.jsonl", "--out", tmp_path / "P",
             "--vector-index", "flat", "--vector-param", "nlist=4")  # fmt: skip
    assert r.exit_code != 0 and "nlist" in r.output, r.output


@pytest.mark.parametrize(
    "kind,params",
    [
        ("flat", {}),
        ("ivfpq", {"nlist": 8, "m": 4, "nbits": 4, "nprobe": 3}),
        ("ivfpq", {"nlist": 8, "m": 4, "nbits": 4, "nprobe": 3, "rerank": 50}),
    ],  # fmt: skip
)
def test_a_vector_subset_is_the_whole_index_restricted(kind, params):
    """Every document a shard's index finds for a query, and its score, is the whole index's:
    IVF-PQ's code scores (the same lists probed, the same codes) and, re-scored, the full vectors'."""
    rng = np.random.default_rng(3)
    v = rng.normal(size=(600, 16)).astype(np.float32)
    ix = VectorIndex.build([f"d{i:03d}" for i in range(600)], v, kind, **params)
    q = rng.normal(size=(4, 16)).astype(np.float32)
    whole = ix.search(q, 600)
    for lo, hi in [(0, 150), (150, 420), (420, 600)]:
        part = ix.subset(lo, hi)
        assert list(part.doc_ids) == list(ix.doc_ids)[lo:hi]
        at = {d: j for j, d in enumerate(part.doc_ids)}
        for qi, (w, got) in enumerate(zip(whole, part.search(q, hi - lo))):
            assert got
            if "rerank" not in params:  # the whole ranking restricted to the shard
                assert [(d, round(s, 5)) for d, s in got] == [(d, round(s, 5)) for d, s in w if d in at]
            else:  # the shard's short list re-scored: each score the whole index's exact one
                pos = np.array([at[d] for d, _ in got]) + lo
                assert np.allclose([s for _, s in got], ix.similarity_positions(q[qi], pos), atol=1e-6)


@pytest.mark.xfail(
    strict=True,
    reason="known gap (docs/scaling.md#sharded-bundles): a filtered IVF-PQ walk widens nprobe by the "
    "allowed share, which a shard takes of its own documents, not the collection's",
)
def test_a_filter_too_large_to_search_exactly_walks_each_shards_own_lists(products, tmp_path, monkeypatch):
    plain = _build(products, tmp_path / "B", "--vector-index", "ivfpq", "--vector-param", "nlist=8",
                   "--vector-param", "m=3", "--vector-param", "nbits=4", "--vector-param", "nprobe=2")  # fmt: skip
    monkeypatch.setattr(VectorIndex, "EXACT_BELOW", 5)  # every filter walks the lists (as a large one would)
    b = Bundle.load(plain, result_cache=0)
    s = ShardedBundle.open_local(split_bundle(plain, tmp_path / "S", 2))
    mask = np.zeros(90, bool)
    mask[:45] = True  # the first shard's documents: a share of 1 there, of 1/2 in the collection
    try:
        for q in QUERIES:
            want, got = (x.search(q, 10, allowed=mask, n_semantic=4) for x in (b, s))  # (walks meeting >= 4)
            assert [(h.doc_id, h.semantic) for h in got.hits] == [(h.doc_id, h.semantic) for h in want.hits]
    finally:
        s.close()
        b.close()
