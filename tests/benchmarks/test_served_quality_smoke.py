"""benchmarks/served_quality.py serves a tiny bundle, sends a split's queries over HTTP and scores
exactly what the service returned (checked against the bundle searched in-process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from semsearch.data import open_dataset, ranked, read_run
from semsearch.index import Bundle

ROOT = Path(__file__).resolve().parents[2]


def test_served_quality_scores_what_the_service_returns(make_bundle, tmp_path):
    b = make_bundle(tmp_path / "b")
    out, run_file = tmp_path / "q.json", tmp_path / "served.trec"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "served_quality.py"),
        "--bundle",
        str(b),
        "--data",
        "tiny",
        "--split",
        "test",
        "--k",
        "5",
        "--rel-threshold",
        "1",
        "--out",
        str(out),
        "--out-run",
        str(run_file),
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    ds = open_dataset("tiny")
    qrels, texts = ds.qrels("test"), ds.queries()
    assert res["queries_sent"] == len([q for q in qrels if texts.get(q, "").strip()])
    assert set(res["mean"]) == {"ndcg@1", "ndcg@3", "ndcg@10", "recall@10", "recall@100"}
    assert all(0.0 <= v <= 1.0 for v in res["mean"].values()) and res["mean"]["recall@10"] > 0
    served = read_run(run_file)
    bundle = Bundle.load(b)
    try:
        for q in served:  # the same documents in the same order as the bundle's own search
            assert [d for d, _ in ranked(served[q])] == [h.doc_id for h in bundle.search(texts[q], 5).hits]
    finally:
        bundle.close()
    r = subprocess.run([*cmd, "--baseline", str(run_file)], env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and all(v["p_value"] == 1.0 for v in json.loads(out.read_text())["baseline"].values())
