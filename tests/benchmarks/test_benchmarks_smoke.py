"""Smoke test: each benchmark script runs end to end with --quick on a tiny generated data root."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
WORDS = "drill cordless bit saw blade cell protein gene mouse wood screw inch steel tumor light".split()


def _write_beir(folder: Path, n_docs: int, n_queries: int, rng: random.Random) -> None:
    (folder / "qrels").mkdir(parents=True)
    text = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
    with open(folder / "corpus.jsonl", "w") as f:
        for i in range(n_docs):
            f.write(json.dumps({"_id": f"d{i}", "title": text(5), "text": text(20)}) + "\n")
    with open(folder / "queries.jsonl", "w") as f:
        for i in range(n_queries):
            f.write(json.dumps({"_id": f"q{i}", "text": text(3)}) + "\n")
    with open(folder / "qrels" / "test.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for i in range(n_queries):
            f.write(f"q{i}\td{rng.randrange(n_docs)}\t1\n")


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    rng = random.Random(0)
    for name in ("homedepot", "scifact"):
        _write_beir(root / name, 80, 30, rng)
    return root


def _run(script: str, data_root: Path, out: Path, *extra: str) -> dict:
    env = {**os.environ, "SEMSEARCH_DATA": str(data_root)}
    cmd = [sys.executable, str(BENCH / script), "--quick", "--out", str(out), *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def test_bm25_speed_quick(data_root: Path, tmp_path: Path) -> None:
    pytest.importorskip("bm25s")
    pytest.importorskip("rank_bm25")
    res = _run("bm25_speed.py", data_root, tmp_path / "bm25.json")["results"]
    for name in ("homedepot", "scifact"):
        r = res[name]
        assert {"ours", "bm25s", "rank_bm25"} <= r.keys()
        assert r["ours"]["qps"] > 0 and r["rank_bm25"]["qps"] > 0
        assert r["ours"]["ndcg@10"] == pytest.approx(r["bm25s"]["ndcg@10"], abs=1e-3)  # same formula, same tokens
        assert r["top10_same_scores"] == 1.0


def test_trigram_memory_quick(data_root: Path, tmp_path: Path) -> None:
    r = _run("trigram_memory.py", data_root, tmp_path / "tri.json", "--n", "2000")
    assert r["shape"][0] == 2000 and r["nnz"] > 0
    assert r["tracemalloc_peak_bytes"] > 0


def test_scale_quick(tmp_path: Path) -> None:
    """benchmarks/scale.py end to end at 4,000 and 8,000 synthetic titles (recombined from the
    real Home Depot titles: it needs ../shared/data) with an untrained DSSM: lexical, IVF-PQ
    re-scored, HNSW; the pruned and exhaustive top-k agree, recall is sane, the table extrapolates."""
    from semsearch.data import data_root

    if not (data_root() / "homedepot" / "corpus.jsonl").is_file():
        if os.environ.get("CI") == "true":
            pytest.fail("../shared/data/homedepot is missing under CI=true")
        pytest.skip("needs ../shared/data/homedepot")
    out = tmp_path / "scale.json"
    cmd = [sys.executable, str(BENCH / "scale.py"), "--quick", "--work", str(tmp_path / "w"), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert [r["titles"] for r in res["sizes"]] == [4000, 8000]
    for r in res["sizes"]:
        lx = r["lexical"]
        assert lx["top10_off"]["p99_ms"] > 0 and lx["resident_mb"] > 0
        assert lx["top10_identical"] and lx["top100_identical"]  # pruned == exhaustive, every query
        assert all(v for k, v in lx.items() if k.endswith("_identical"))
        assert r["ivfpq"]["recall@10"] > 0.6 and r["hnsw"]["recall@10"] > 0.8
    assert "100000000" in res["extrapolated"]["IVF-PQ + re-scoring"]
    assert "extrapolated" in proc.stdout
