"""Search bundles on the tiny generated data set: build, load, checksums, mismatch refusal, a
build killed midway, the CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.data import open_dataset
from semsearch.index import Bundle, build_bundle
from semsearch.index.bundle import LoadOptions
from semsearch.models import ModelDirError
from semsearch.plugins import create_model
from waiting import wait_until

SRC = Path(__file__).resolve().parents[2] / "src"


def test_build_load_search(make_bundle, tmp_path):
    p = make_bundle(tmp_path / "b")
    man = json.loads((p / "manifest.json").read_text())
    assert man["lexical"]["name"] == "bm25" and [m["name"] for m in man["models"]] == ["clsm"]
    assert man["models"][0]["dim"] == 8 and "documents.jsonl" in man["files"] and man["store"] == "faiss"
    b = Bundle.load(p)
    r = b.search("red cat", 5, merge_by="rrf")
    assert 1 <= len(r.hits) <= 5 and {"lexical_ms", "semantic_ms", "merge_ms", "total_ms"} <= r.timing.keys()
    assert {h.sources.name for h in r.hits} <= {"LEXICAL", "SEMANTIC", "BOTH"}
    assert any(h.sources.name in ("SEMANTIC", "BOTH") for h in r.hits)
    union = b.search("red cat", 50, merge_by="union").hits
    lex_only = [h for h in union if h.lexical_rank is not None]
    assert [h.lexical_rank for h in lex_only] == sorted(h.lexical_rank for h in lex_only)  # lexical order kept
    assert union[: len(lex_only)] == lex_only and all(h.sources.name == "SEMANTIC" for h in union[len(lex_only) :])
    with pytest.raises(ValueError):
        b.search("  ", 5)
    b.close()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["b", "data"]  # no temporary directories left


def test_tampered_or_mismatched_bundle_is_refused(make_bundle, tmp_path):
    p = make_bundle(tmp_path / "b")
    f = p / "documents.jsonl"
    f.write_text(f.read_text().replace("red", "rod", 1))
    with pytest.raises(ModelDirError, match="checksum"):
        Bundle.load(p)
    # an encoder from another training of the same model, beside this index: refused even with
    # checksums skipped (the index's probe embeddings differ)
    p2, p3 = make_bundle(tmp_path / "c", seed=0), make_bundle(tmp_path / "d", seed=1)
    shutil.rmtree(p2 / "models/clsm/encoder")
    shutil.copytree(p3 / "models/clsm/encoder", p2 / "models/clsm/encoder")
    with pytest.raises(ModelDirError, match="checksum"):
        Bundle.load(p2)
    with pytest.raises(ModelDirError, match="embeds differently"):
        Bundle.load(p2, verify=False)
    with pytest.raises(ModelDirError, match="not a semsearch bundle"):
        Bundle.load(tmp_path)


def test_postgres_store_matches_faiss(trained_clsm, tmp_path, pg_dsn, monkeypatch):
    """--store postgres: the encoder's vectors in PostgreSQL/pgvector give the faiss bundle's hits;
    a faiss-only bundle refuses the postgres store; a rebuild drops the old collections."""
    from semsearch.index.pgstore import list_collections

    monkeypatch.setenv("SEMSEARCH_PG_DSN", pg_dsn)
    ds = open_dataset("tiny")
    with pytest.raises(ValueError, match="store must be one of"):
        build_bundle(ds.corpus(), [create_model("bm25")], tmp_path / "x", store="sqlite")
    enc = trained_clsm()
    faiss_b = build_bundle(ds.corpus(), [create_model("bm25"), enc], tmp_path / "f")
    with pytest.raises(ModelDirError, match="without a postgres store"):
        Bundle.load(faiss_b, store="postgres")
    pg_b = build_bundle(ds.corpus(), [create_model("bm25"), enc], tmp_path / "p", store="postgres")
    manifest = json.loads((pg_b / "manifest.json").read_text())
    first = manifest["models"][0]["collection"]
    assert manifest["store"] == "postgres" and first in list_collections(pg_dsn)
    assert pg_dsn not in (pg_b / "manifest.json").read_text()  # a DSN may hold a password
    a, b = Bundle.load(faiss_b), Bundle.load(pg_b)
    assert b.manifest["store"] == "postgres" and type(b.semantic["clsm"].vectors).__name__ == "PgVectorStore"
    for q in ("red cat", "blue fish lamp", "door"):
        ha, hb = a.search(q, 5, merge_by="rrf").hits, b.search(q, 5, merge_by="rrf").hits
        assert [(h.doc_id, h.sources) for h in ha] == [(h.doc_id, h.sources) for h in hb]
        assert [h.semantic for h in ha] == pytest.approx([h.semantic for h in hb], abs=1e-5)
    build_bundle(ds.corpus(), [create_model("bm25"), enc], tmp_path / "p", store="postgres")  # rebuild
    assert first not in list_collections(pg_dsn)
    assert Bundle.load(pg_b).search("red cat", 3).hits


SLOW_SWAP = """
import time
from semsearch.index.bundle import build
swap = build.replace_dir
build.replace_dir = lambda tmp, out: (time.sleep(60), swap(tmp, out))  # the build is killed in this pause
from semsearch.cli import app
app()
"""
"""``semsearch index build`` whose build pauses once its files are written, before the swap."""


def test_killed_build_leaves_old_bundle_loadable(make_bundle, tmp_path):
    old = make_bundle(tmp_path / "b")
    before = (old / "manifest.json").read_text()
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SLOW_SWAP,
            "index",
            "build",
            "--data",
            "tiny",
            "--out",
            str(old),
            "--models",
            "bm25",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        tmp = old.with_name(f"b.tmp-{proc.pid}")
        wait_until(lambda: (tmp / "lexical").is_dir() or proc.poll() is not None, "the build's slow step", every=0.1)
        assert (tmp / "lexical").is_dir(), "the build never reached its slow step"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert (old / "manifest.json").read_text() == before
    b = Bundle.load(old)
    assert b.search("red cat", 3).hits and "clsm" in b.semantic
    # killed between the two renames of the swap: the backup is loaded
    os.replace(old, old.with_name(".b.old"))
    assert Bundle.load(old).manifest["models"][0]["name"] == "clsm"


def test_leftover_build_folders_are_removed_and_never_loaded(tiny_data, tmp_path):
    """A killed build's ``B.tmp-<pid>`` (pid gone) is removed by the next build of B; a running
    build's folder is left alone; neither is ever loaded as a bundle."""
    corpus = open_dataset("tiny").corpus()
    out = build_bundle(corpus, [create_model("bm25")], tmp_path / "b")
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead_tmp, live_tmp = tmp_path / f"b.tmp-{gone.pid}", tmp_path / f"b.tmp-{running.pid}"
        other = tmp_path / f"bb.tmp-{gone.pid}"  # another bundle's leftover: not this build's business
        for d in (dead_tmp, live_tmp, other):
            shutil.copytree(out, d)  # even a complete copy, manifest and all
        for d in (dead_tmp, live_tmp):
            with pytest.raises(ModelDirError, match="temporary folder of a build"):
                Bundle.load(d)
        assert Bundle.load(out).search("red cat", 3).hits
        build_bundle(corpus, [create_model("bm25")], out)
        assert not dead_tmp.exists() and live_tmp.is_dir() and other.is_dir()
        with pytest.raises(ValueError, match="tmp-<number>"):
            build_bundle(corpus, [create_model("bm25")], tmp_path / "x.tmp-12")
    finally:
        running.kill()
        running.wait()


def test_cli_build_search_and_bad_input(trained_clsm, tmp_path):
    runner = CliRunner()
    enc = tmp_path / "clsm"
    trained_clsm().save(enc)
    out = tmp_path / "b"
    r = runner.invoke(app, ["index", "build", "--data", "tiny", "--out", str(out), "--models", f"bm25,{enc}"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["search", "--index", str(out), "red cats", "-k", "3", "--json"])
    hits = [json.loads(x) for x in r.output.splitlines()]
    assert r.exit_code == 0 and len(hits) == 3 and all(h["source"] in ("LEXICAL", "SEMANTIC", "BOTH") for h in hits)
    for args in (
        ["index", "build", "--data", "tiny", "--out", str(out), "--models", "bm25,bm25"],
        ["index", "build", "--data", "tiny", "--out", str(out), "--models", "bm25", "--store", "sqlite"],
        ["search", "--index", str(out), "x", "--merge", "max"],
    ):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and "error:" in r.output, (args, r.output)


def test_union_limit_is_a_prefix_of_the_full_union():
    """The service builds only the k hits it returns; they must be the full union's first k."""
    from semsearch.index.hybrid import union

    lex = [("a", 3.0), ("b", 2.0), ("c", 1.0)]
    sem = [("d", 0.9), ("b", 0.8), ("e", 0.7)]
    full = union(lex, sem)
    assert [h.doc_id for h in full] == ["a", "b", "c", "d", "e"]
    assert [h.sources.name for h in full] == ["LEXICAL", "BOTH", "LEXICAL", "SEMANTIC", "SEMANTIC"]
    assert [h.semantic_rank for h in full] == [None, 2, None, 1, 3] and full[3].score == 1 / 4
    for k in range(1, 8):
        assert union(lex, sem, k) == full[:k]
    assert union([], sem, 2) == union([], sem)[:2]


def test_cli_builds_a_bundle_from_a_tsv_collection(tmp_path):
    """'Search your own collection': a TSV of id<TAB>title[<TAB>text] is enough for a BM25 bundle;
    a malformed line stops the build with its line number and leaves no bundle behind."""
    runner = CliRunner()
    docs = tmp_path / "my.tsv"
    docs.write_text(
        "d1\tCordless drill 18V\tBattery included\nd2\tRed wall paint\n\nd3\tWood screws 2 in.\t\n", encoding="utf-8"
    )
    out = tmp_path / "b"
    r = runner.invoke(app, ["index", "build", "--data", str(docs), "--out", str(out)])
    assert r.exit_code == 0, r.output
    b = Bundle.load(out)
    assert len(b.corpus) == 3 and b.corpus.texts[0] == "Battery included"
    assert [h.doc_id for h in b.search("drill battery", 2).hits][:1] == ["d1"]
    b.close()
    bad = tmp_path / "bad.tsv"
    bad.write_text("d1\tok\nd2\n", encoding="utf-8")
    r = runner.invoke(app, ["index", "build", "--data", str(bad), "--out", str(tmp_path / "b2")])
    assert r.exit_code == 2 and "bad.tsv:2" in r.output and not (tmp_path / "b2").exists(), r.output


def test_cli_tsv_collection_with_a_header_line(tmp_path):
    """A TSV collection whose first line names its columns: the header is not indexed."""
    docs = tmp_path / "docs.tsv"
    docs.write_text(
        "Doc_ID\tTitle\tText\nd1\tCordless drill 18V\tBattery included\nd2\tRed wall paint\t\n", encoding="utf-8"
    )
    r = CliRunner().invoke(app, ["index", "build", "--data", str(docs), "--out", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    b = Bundle.load(tmp_path / "b")
    assert b.corpus.ids == ["d1", "d2"] and not b.search("title text", 5).hits
    b.close()


def test_cli_build_skips_and_counts_bad_tsv_lines(tmp_path):
    """index build --skip-bad-lines: malformed lines are skipped with one warning counting them."""
    from semsearch.data import DataWarning

    docs = tmp_path / "docs.tsv"
    docs.write_text("d1\tCordless drill\nno-tabs-here\nd2\tRed paint\nd3\ta\tb\tc\nd1\tagain\n", encoding="utf-8")
    r = CliRunner().invoke(app, ["index", "build", "--data", str(docs), "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "docs.tsv:2" in r.output and not (tmp_path / "x").exists()
    with pytest.warns(DataWarning, match=r"skipped 3 bad lines \(lines 2, 4, 5\)"):
        r = CliRunner().invoke(
            app, ["index", "build", "--data", str(docs), "--out", str(tmp_path / "b"), "--skip-bad-lines"]
        )
    assert r.exit_code == 0, r.output
    b = Bundle.load(tmp_path / "b")
    assert b.corpus.ids == ["d1", "d2"] and b.corpus.titles[0] == "Cordless drill"
    b.close()


def test_result_and_query_caches(make_bundle, tmp_path):
    """A repeated search is answered from the result cache (same hits, a ``cached_ms`` timing);
    the cache is bounded, off with 0, and ``LoadOptions.result_cache`` sets it; query embeddings are
    cached and evicted oldest first."""
    path = make_bundle(tmp_path / "b")
    b = Bundle.load(path, result_cache=2)
    first = b.search("red cat", 5)
    again = b.search("red cat", 5)
    assert "cached_ms" not in first.timing and "cached_ms" in again.timing
    assert [(h.doc_id, h.score) for h in again.hits] == [(h.doc_id, h.score) for h in first.hits]
    b.search("blue dog", 5)
    b.search("green bird", 5)  # evicts "red cat"
    assert "cached_ms" not in b.search("red cat", 5).timing
    assert "cached_ms" not in b.search("red cat", 6).timing  # another k is another search
    b.close()
    off = Bundle.load(path, result_cache=0)
    off.search("red cat", 5)
    assert "cached_ms" not in off.search("red cat", 5).timing
    off.close()
    assert Bundle.load(path, LoadOptions(result_cache=0)).result_cache == 0
    assert Bundle.load(path).result_cache == LoadOptions().result_cache
    r = next(iter(Bundle.load(path, query_cache=2).semantic.values()))
    calls = []
    enc = r.encoder.encode_queries
    r.encoder.encode_queries = lambda qs: calls.append(list(qs)) or enc(qs)  # type: ignore[method-assign]
    v1 = r.encode_queries(["red cat", "blue dog"])
    v2 = r.encode_queries(["blue dog", "red cat", "green bird"])
    assert calls == [["red cat", "blue dog"], ["green bird"]]
    assert (v2[1] == v1[0]).all() and (v2[0] == v1[1]).all() and len(r._query_vectors) == 2
