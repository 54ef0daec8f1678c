"""Smoke tests: benchmarks/sharded.py serves a tiny bundle plain and sharded (in one process) under
wrk for a second each and checks the sharded answers over HTTP; benchmarks/click_log_ray.py
generates a small partitioned click log and counts it (the one-process path)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}


def test_sharded_benchmark_runs(make_bundle, tmp_path):
    if shutil.which("wrk") is None and os.environ.get("CI") != "true":
        pytest.skip("wrk is not installed")
    b = make_bundle(tmp_path / "b")
    out = tmp_path / "sharded.json"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "sharded.py"),
            "--bundle",
            str(b),
            "--synthetic",
            "0",
            "--shards",
            "2",
            "--no-ray",
            "--clients",
            "2",
            "--seconds",
            "1",
            "--warmup",
            "1",
            "--check",
            "5",
            "--work",
            str(tmp_path / "work"),
            "--out",
            str(out),
        ],  # fmt: skip
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    ways = res["homedepot"]
    assert set(ways) == {"plain", "2 shards, one process"}
    sharded = ways["2 shards, one process"]
    assert sharded["errors"] == 0 and sharded["requests"] > 0
    assert sharded["answers"]["identical_ids"] == sharded["answers"]["queries"] == 5
    assert res["summary"][0]["unit"] == "ms"


def test_click_log_benchmark_runs(tmp_path):
    out = tmp_path / "click_log_ray.json"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "click_log_ray.py"),
            "--events",
            "20000",
            "--per-part",
            "5000",
            "--queries",
            "200",
            "--ray",
            "",
            "--log",
            str(tmp_path / "log"),
            "--out",
            str(out),
        ],  # fmt: skip
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["log"]["events"] >= 20000 and res["log"]["partitions"] == 3
    assert res["counts_equal"] and res["labels"]["pairs"] > 0
    assert not (tmp_path / "log").exists()  # removed without --keep
