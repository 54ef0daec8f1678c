"""Smoke test: benchmarks/writes.py upserts into a served tiny bundle in batches of 1, 10 and
100 and loads it with wrk before, after and while a writer upserts, for a second each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_writes_benchmark_runs(make_bundle, tmp_path):
    b = make_bundle(tmp_path / "b")
    out = tmp_path / "writes.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "writes.py"), "--bundle", str(b), "--data", "tiny"]
        + ["--clients", "4", "--seconds", "1", "--write-seconds", "1", "--workers", "1", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert [u["batch"] for u in res["upserts"]] == [1, 10, 100]
    assert all(u["documents"] > 0 and u["errors"] == 0 for u in res["upserts"])
    for run in ("search_without_writes", "search_with_delta_no_writer", "search_with_writer"):
        assert res[run]["requests"] > 0 and res[run]["errors"] == 0
    assert res["writer_during_search"]["errors"] == 0
    upserted = sum(u["documents"] for u in res["upserts"]) + res["writer_during_search"]["documents"]
    assert res["documents_served_at_end"] == 60 + upserted  # the tiny set's 60, and every new one
    assert [row["unit"] for row in res["summary"]] == ["docs/s", "ms"]
