"""Smoke test: benchmarks/filtered.py makes a faceted copy of a tiny bundle (hard links but for
the documents and manifest), measures the filtered vector recall and loads it with wrk for a
second per selectivity."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_filtered_benchmark_runs(make_bundle, tmp_path):
    b = make_bundle(tmp_path / "b")
    out = tmp_path / "filtered.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "filtered.py"),
            "--bundle", str(b), "--data", "tiny", "--work", str(tmp_path / "work"),
            "--clients", "4", "--seconds", "1", "--rounds", "1", "--warmup", "1", "--workers", "1",
            "--recall-queries", "20", "--out", str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert set(res["runs"]) == {"unfiltered", "1%", "50%"}
    assert all(run["requests"] > 0 and run["errors"] == 0 for run in res["runs"].values())
    assert res["recall_at_100"]["1% served"] == 1.0 and 0 < res["recall_at_100"]["50% served"] <= 1.0
    p1, p50, recall = res["summary"]
    assert p1["ours"] == res["runs"]["1%"]["p99_ms"] and p1["peer_value"] == res["runs"]["unfiltered"]["p99_ms"]
    assert p1["met"] is None and p50["unit"] == "ms" and recall["met"] is True
    # the copy shares the source's index files and has the derived facets in its manifest
    copy = tmp_path / "work" / "faceted"
    manifest = json.loads((copy / "manifest.json").read_text())
    assert manifest["schema"]["facets"] == ["brand", "bucket", "half"] and manifest["schema"]["numeric"] == ["words"]
    assert (copy / "lexical").is_dir() and not (b / "manifest.json").samefile(copy / "manifest.json")
    shared = [p for p in b.rglob("*") if p.is_file() and p.name not in ("documents.jsonl", "manifest.json")]
    assert shared and all(p.samefile(copy / p.relative_to(b)) for p in shared)
