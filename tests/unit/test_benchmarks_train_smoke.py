"""Smoke test: benchmarks/train_speed.py runs end to end with --quick on a tiny generated homedepot."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
WORDS = "drill cordless bit saw blade wood screw inch steel light bulb led lamp pipe valve brass".split()


def _write_homedepot(folder: Path, n_docs: int, n_queries: int, rng: random.Random) -> None:
    """A tiny BEIR folder: titles only, graded 0-4 train judgments (grade >= 3 are positives)."""
    (folder / "qrels").mkdir(parents=True)
    text = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
    with open(folder / "corpus.jsonl", "w") as f:
        for i in range(n_docs):
            f.write(json.dumps({"_id": f"d{i}", "title": text(rng.randint(0, 9)), "text": ""}) + "\n")
        f.write(json.dumps({"_id": "d_empty", "title": "", "text": ""}) + "\n")  # a title with no words
    with open(folder / "queries.jsonl", "w") as f:
        for i in range(n_queries):
            f.write(json.dumps({"_id": f"q{i}", "text": text(rng.randint(1, 4))}) + "\n")
    with open(folder / "qrels" / "train.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for i in range(n_queries):
            docs = rng.sample(range(n_docs), 5)
            for k, d in enumerate(docs):  # the first is a positive: every query has one
                f.write(f"q{i}\td{d}\t{4 if k == 0 else rng.randint(0, 4)}\n")


def test_train_speed_quick(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _write_homedepot(root / "homedepot", 120, 40, random.Random(0))
    out = tmp_path / "train.json"
    env = {**os.environ, "SEMSEARCH_DATA": str(root)}
    cmd = [sys.executable, str(BENCH / "train_speed.py"), "--quick", "--out", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())
    assert set(r["training"]) == {"dssm J=4", "dssm J=50", "clsm J=4", "clsm J=50"}
    for t in r["training"].values():
        for side in ("ours", "ours_1thread", "ceiling", "ceiling_1thread"):
            assert t[side]["pairs_per_s"] > 0 and t[side]["steps"] >= 1
        assert set(t["ours"]["phases_ms"]) == {"assembly", "forward+loss", "backward", "optimizer"}
        sh = t["shapes"]  # the ceiling's sizes: batch 16 queries, 16 positives plus drawn negatives
        assert sh["q_texts"] == 16 and 16 < sh["d_texts"] <= 16 + 121 and sh["q_nnz"] > 0 and sh["d_nnz"] > 0
        assert t["ceiling"]["gflops"] > 0
    assert r["training"]["clsm J=4"]["shapes"]["d_positions"] >= r["training"]["clsm J=4"]["shapes"]["d_texts"]
    for name in ("dssm", "clsm"):
        e = r["encoding"][name]
        assert e["ours"]["titles"] == 121
        for k in ("full_titles_per_s", "words_warm_titles_per_s", "cold_titles_per_s", "featurise_titles_per_s",
                  "featurise_cached_titles_per_s", "tower_titles_per_s",
                  "tower_ceiling_titles_per_s"):
            assert e["ours"][k] > 0, k
    assert r["profile"]["clsm J=4"]["top"] and r["profile"]["clsm J=4"]["backward_nodes"]
    assert r["train_encoder_check"]["dssm J=4"]["pairs_per_s"] > 0
    assert r["hardware"]["load_avg_1min"] is not None
    assert r["targets"]["fraction_of_ceiling"] == 0.5 and r["targets"]["train_pairs_per_s"]["dssm J=50"] == 10_000
    assert "fraction" in proc.stdout and "tower ceiling" in proc.stdout
