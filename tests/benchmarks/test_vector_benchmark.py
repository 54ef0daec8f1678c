"""Smoke test: benchmarks/vector_speed.py runs end to end with --quick on a tiny generated data set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "vector_speed.py"


def test_vector_speed_quick(tiny_data: Path, tmp_path: Path) -> None:
    (tiny_data / "homedepot").symlink_to(tiny_data / "tiny")
    env = {**os.environ, "SEMSEARCH_DATA": str(tiny_data), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = tmp_path / "v.json"
    cmd = [
        sys.executable,
        str(BENCH),
        "--quick",
        "--vectors",
        "dssm",
        "--out",
        str(out),
        "--cache",
        str(tmp_path / "c"),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(out.read_text())
    rows = {(r["index"], json.dumps(r["params"], sort_keys=True)): r for r in res["results"]}
    assert [r["index"] for r in res["results"]] == [
        "flat",
        "hnsw",
        "hnsw",
        "hnswsq",
        "ivfpq",
        "ivfpq",
        "ivfpq",
        "ivfpq",
    ]
    assert res["vectors"]["n"] == 60 and res["encoding"]["bert_rep_titles_per_s"] > 0
    for r in rows.values():
        assert r["p99_ms"] >= r["p50_ms"] > 0 and r["batch_qps"] > 0 and r["bytes_per_doc"] > 0
        assert 0.0 <= r["recall@10_vs_flat"] <= 1.0
    assert res["results"][0]["recall@10_vs_flat"] == 1.0
    rescored = [r for r in res["results"] if r["index"] == "ivfpq" and r["params"]["rerank"]]
    assert len(rescored) == 2 and all(r["disk_bytes_per_doc"] > 0 for r in rescored)
    sq = next(r for r in res["results"] if r["index"] == "hnswsq")  # 8-bit codes in RAM, the full vectors on disk
    assert sq["disk_bytes_per_doc"] > 0 and sq["recall@10_vs_flat"] >= 0.9
    # the make bench lines: recall and memory against Flat, HNSW against Flat and raw faiss
    assert [row["peer"] for row in res["summary"]] == ["Flat (exact)", "Flat", "Flat (exact)", "raw faiss, same index"]
    assert all(row["ours"] > 0 and row["ratio"] is not None for row in res["summary"])
