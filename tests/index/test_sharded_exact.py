"""A sharded bundle answers as the bundle it was split from (issue 51 item 1): the same ids, scores,
sources, stage scores and ranks, facet counts, for every merge, filters and masks, one to three
shards, flat and IVF-PQ vector indexes (with and without exact re-scoring), plain and two-stage
bundles. The collection-wide statistics are what make it so: a shard weighting terms with its own
statistics scores differently (tested, so the equality cannot hold by accident).

An approximate index keeps any k of the documents tied at its cut-off (faiss's heap): documents
with one vector, or one IVF-PQ code, tie there, and a shard may keep others than the whole index
does. The titles here are distinct and the codes fine enough for no such tie."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.index.bundle import Bundle
from semsearch.index.bundle.coordinator import ShardedBundle, open_bundle
from semsearch.index.bundle.shard import SHARD, split_bundle
from semsearch.models.base import ModelDirError

BRANDS = ["acme", "bolt", "crest", "delta"]
WORDS = "red brick wall blue door oak table lamp shade steel pipe white paint drill hose cordless".split()
QUERIES = ["red door", "steel pipe lamp", "white oak table", "cordless drill", "brick", "blue hose paint", "zebra"]


def _run(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    """A 120-product table (title, brand facet, price) and an (untrained) DSSM over its titles."""
    from semsearch.plugins import create_model
    from semsearch.text import TrigramHasher

    d = tmp_path_factory.mktemp("products")
    rng = np.random.default_rng(11)
    rows, seen = [], set()
    for i in range(120):
        title = ""
        while not title or title in seen:  # distinct titles: no two documents with one vector (module docstring)
            title = " ".join(rng.choice(WORDS, size=rng.integers(1, 6)))
        seen.add(title)
        rows.append({"sku": f"p{rng.permutation(1000)[0]:03d}-{i}", "title": title, "brand": BRANDS[i % 4],
                     "price": f"{rng.integers(1, 200)}"})  # fmt: skip
    with (d / "products.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, ["sku", "title", "brand", "price"])
        w.writeheader()
        w.writerows(rows)
    m = create_model("dssm", hidden=[8], out=6)
    m.build(TrigramHasher.fit([r["title"] for r in rows], max_words=8))
    m.save(d / "dssm")
    return d


def _bundle(collection, out, *vector: str):
    r = _run("index", "build", "--data", collection / "products.csv", "--id", "sku", "--fields", "title",
             "--facets", "brand", "--numeric", "price", "--models", f"bm25,{collection / 'dssm'}",
             "--analyzer", "english", *vector, "--out", out)  # fmt: skip
    assert r.exit_code == 0, r.output
    return out


KINDS = {
    "flat": (),
    "ivfpq": (
        "--vector-index",
        "ivfpq",
        "--vector-param",
        "nlist=4",
        "--vector-param",
        "m=3",
        "--vector-param",
        "nbits=4",
        "--vector-param",
        "nprobe=2",
        "--vector-param",
        "rerank=0",
    ),  # fmt: skip
    "ivfpq-rescored": (
        "--vector-index",
        "ivfpq",
        "--vector-param",
        "nlist=4",
        "--vector-param",
        "m=3",
        "--vector-param",
        "nbits=4",
        "--vector-param",
        "nprobe=2",
        "--vector-param",
        "rerank=12",
    ),  # fmt: skip
}


@pytest.fixture(scope="module", params=list(KINDS))
def plain(request, collection, tmp_path_factory):
    return _bundle(collection, tmp_path_factory.mktemp(request.param) / "B", *KINDS[request.param])


def _same(a, b, facets=False):
    assert [h.doc_id for h in a.hits] == [h.doc_id for h in b.hits]
    for x, y in zip(a.hits, b.hits):
        assert x.score == pytest.approx(y.score, abs=1e-9)
        assert x.sources == y.sources
        assert (x.lexical_rank, x.semantic_rank) == (y.lexical_rank, y.semantic_rank)
        for s, t in ((x.lexical, y.lexical), (x.semantic, y.semantic)):
            assert (s is None) == (t is None) and (s is None or s == pytest.approx(t, abs=1e-6))
    if facets:
        assert a.facets == b.facets


@pytest.mark.parametrize("shards", [1, 2, 3])
def test_a_sharded_bundle_answers_as_the_bundle(plain, shards, tmp_path):
    b = Bundle.load(plain, result_cache=0)
    s = ShardedBundle.open_local(split_bundle(plain, tmp_path / "S", shards))
    # (an IVF-PQ index returns any k of the documents tied at its cut-off, in a shard as in the
    # whole index: a query of unknown words, every score 0, is exact only for flat)
    queries = QUERIES if s.semantic[next(iter(s.semantic))].kind == "flat" else QUERIES[:-1]
    try:
        assert len(s) == len(b.corpus) == 120
        for merge in ("union", "rrf", "interpolate"):
            for k in (5, 40):
                for q in queries:
                    _same(b.search(q, k, merge_by=merge), s.search(q, k, merge_by=merge))
        for flt in (["brand:acme"], ["brand:bolt", "price:[20,120]"], ["brand:nobody"]):
            for q in queries:
                _same(b.search(q, 10, filters=flt, facets=3), s.search(q, 10, filters=flt, facets=3), facets=True)
        mask = np.zeros(120, bool)
        mask[::3] = True
        for q in queries:
            _same(b.search(q, 10, allowed=mask), s.search(q, 10, allowed=mask))
        many_b, many_s = b.search_many(queries, 8), s.search_many(queries, 8)  # one batch, as the service sends
        for x, y in zip(many_b, many_s):
            _same(x, y)
        rows = s.hits(s.search("red door", 5))
        want = b.hits(b.search("red door", 5))
        assert [(r.doc_id, r.title, r.fields) for r in rows] == [(r.doc_id, r.title, r.fields) for r in want]
        assert rows[0].fields["brand"] in BRANDS
    finally:
        s.close()
        b.close()


def test_a_two_stage_bundle_sharded_ranks_as_the_bundle(two_stage, tmp_path):
    b = Bundle.load(two_stage, result_cache=0)
    s = ShardedBundle.open_local(split_bundle(two_stage, tmp_path / "S", 3))
    try:
        assert s.two_stage and b.two_stage
        qs = ["red cat", "blue dog", "green bird fish", "tree rock", "lamp door sofa"]
        for correct in (True, False):
            for q in qs:
                _same(b.search(q, 10, correct=correct), s.search(q, 10, correct=correct))
        for x, y in zip(b.search_many(qs, 6), s.search_many(qs, 6)):
            _same(x, y)
    finally:
        s.close()
        b.close()


def test_hnsw_shards_search_their_own_graphs(collection, tmp_path):
    plain = _bundle(collection, tmp_path / "B", "--vector-index", "hnsw")
    s = ShardedBundle.open_local(split_bundle(plain, tmp_path / "S", 2))
    try:
        hits = s.search("red door", 10).hits
        assert len(hits) == 10  # approximate in its own way: no equality asked
    finally:
        s.close()


def test_the_collection_statistics_make_the_scores_the_bundles(collection, tmp_path):
    plain = _bundle(collection, tmp_path / "B")
    b = Bundle.load(plain, result_cache=0)
    lex = b.lexical
    part = lex.subset(40, 80)  # type: ignore[union-attr]
    own = part.with_stats(None)  # the shard's own statistics
    pos = np.arange(40)
    for q in QUERIES[:-1]:
        whole = lex.score_positions([q], [pos + 40])[0]  # type: ignore[union-attr]
        assert np.array_equal(part.score_positions([q], [pos])[0], whole)
    differs = [not np.allclose(own.score_positions([q], [pos])[0], lex.score_positions([q], [pos + 40])[0])  # type: ignore[union-attr]
               for q in QUERIES[:-1]]  # fmt: skip
    assert any(differs)
    part.save(tmp_path / "L")  # the statistics travel with the shard
    from semsearch.plugins import load_model

    again = load_model(tmp_path / "L")
    assert np.array_equal(again.score_positions(["red door"], [pos])[0], part.score_positions(["red door"], [pos])[0])
    b.close()


def test_a_damaged_or_foreign_shard_is_refused(collection, tmp_path):
    plain = _bundle(collection, tmp_path / "B")
    sharded = split_bundle(plain, tmp_path / "S", 2)
    docs = sharded / "shard-00001" / "documents.jsonl"
    docs.write_bytes(docs.read_bytes().replace(b"red", b"rod", 1))
    with pytest.raises(ModelDirError, match="checksum mismatch for documents.jsonl"):
        ShardedBundle.open_local(sharded)
    (sharded / "shard-00001" / SHARD).unlink()
    with pytest.raises(ModelDirError, match="shard-00001"):
        ShardedBundle.open_local(sharded)
    with pytest.raises(ValueError, match="shards must be between 1 and the 120 documents"):
        split_bundle(plain, tmp_path / "T", 121)
    with pytest.raises(ModelDirError, match="sharded"):
        Bundle.load(split_bundle(plain, tmp_path / "U", 2))
    assert isinstance(open_bundle(tmp_path / "U"), ShardedBundle)


def test_index_shard_and_build_shards_on_the_command_line(collection, tmp_path):
    plain = _bundle(collection, tmp_path / "B")
    r = _run("index", "shard", plain, "--out", tmp_path / "S", "--shards", "2")
    assert r.exit_code == 0, r.output
    meta = json.loads((tmp_path / "S" / "sharded.json").read_text())
    assert [s["documents"] for s in meta["shards"]] == [60, 60]
    r = _run("index", "build", "--data", collection / "products.csv", "--id", "sku", "--fields", "title",
             "--models", "bm25", "--shards", "3", "--out", tmp_path / "T")  # fmt: skip
    assert r.exit_code == 0, r.output
    s = ShardedBundle.open_local(tmp_path / "T")
    b = Bundle.load(plain, result_cache=0)
    try:
        assert [h.doc_id for h in s.search("red door", 10).hits]  # BM25 alone, sharded
    finally:
        s.close()
        b.close()
    r = _run("index", "reindex", plain, "--data", plain / "documents.jsonl", "--out", tmp_path / "R",
             "--vector-param", "efSearch=10")  # fmt: skip
    assert r.exit_code != 0 and "--vector-param needs --vector-index" in r.output


def test_an_ivfpq_subset_holds_the_documents_own_codes_and_labels():
    """The lists' ids and codes are copied whole into the shard (a dangling pointer would leave
    garbage labels where the arrays it pointed to were freed: checked on every list)."""
    import faiss

    from semsearch.index.vector import VectorIndex

    rng = np.random.default_rng(0)
    v = rng.normal(size=(3000, 16)).astype(np.float32)
    ix = VectorIndex.build([f"d{i}" for i in range(3000)], v, "ivfpq", nlist=8, m=4, nbits=4, nprobe=8, rerank=20)
    for lo, hi in [(0, 1000), (1000, 2500), (2500, 3000)]:
        part = ix.subset(lo, hi)
        il = part._faiss.invlists
        labels = np.concatenate(
            [faiss.rev_swig_ptr(il.get_ids(i), il.list_size(i)).copy() for i in range(il.nlist) if il.list_size(i)]
        )
        assert sorted(labels.tolist()) == list(range(hi - lo))
        q = rng.normal(size=(5, 16)).astype(np.float32)
        assert all(len(h) == 10 for h in part.search(q, 10))
