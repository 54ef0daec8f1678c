"""Smoke test: benchmarks/load_test.py serves a tiny bundle (one worker process, and two as
`make serve` runs it, then again with the event log on) and loads it with wrk for a second."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("workers", [1, 2])
def test_load_test_runs(make_bundle, tmp_path, workers):
    b = make_bundle(tmp_path / "b")
    out = tmp_path / "load.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "load_test.py"),
            "--bundle",
            str(b),
            "--data",
            "tiny",
            "--clients",
            "4",
            "--seconds",
            "1",
            "--workers",
            str(workers),
            "--out",
            str(out),
            *(["--events-compare"] if workers == 2 else []),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert (
        res["workers"] == workers
        and res["requests"] > 0
        and res["errors"] == 0
        and 0 < res["p50_ms"] <= res["p95_ms"] <= res["p99_ms"]
    )
    assert res["server_stopped_cleanly"]  # graceful shutdown on SIGTERM (lifespan shutdown ran)
    row, *events = res["summary"]  # the make bench table's line: p99 against the target, no verdict at 4 clients
    assert row["ours"] == res["p99_ms"] and row["unit"] == "ms" and row["met"] is None
    if workers == 1:
        assert not events and res["events_on"] is None
    else:  # events on: every search logged, the p99 ratio on / off reported
        on = res["events_on"]
        assert on["errors"] == 0 and on["impressions_logged"] >= on["requests"] > 0
        assert events[0]["unit"] == "ratio" and events[0]["ours"] == on["p99_ratio"] > 0
