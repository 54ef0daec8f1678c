"""Smoke test: benchmarks/topic_speed.py runs end to end with --quick on a generated homedepot."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
WORDS = "drill cordless bit saw blade wood screw inch steel light bulb led paint brush roller".split()


def _homedepot(root: Path) -> Path:
    d = root / "homedepot"
    (d / "qrels").mkdir(parents=True)
    rng = random.Random(0)
    with open(d / "corpus.jsonl", "w") as f:
        for i in range(120):
            f.write(json.dumps({"_id": f"d{i}", "title": " ".join(rng.sample(WORDS, 5)), "text": ""}) + "\n")
    with open(d / "queries.jsonl", "w") as f:
        for i in range(40):
            f.write(json.dumps({"_id": f"q{i}", "text": " ".join(rng.sample(WORDS, 2))}) + "\n")
    with open(d / "qrels" / "train.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for i in range(40):
            for doc in rng.sample(range(120), 4):
                f.write(f"q{i}\td{doc}\t{rng.choice([2, 3, 4])}\n")
    return root


def test_topic_speed_quick(tmp_path: Path) -> None:
    root = _homedepot(tmp_path / "data")
    out = tmp_path / "topic.json"
    env = {**os.environ, "SEMSEARCH_DATA": str(root), "SEMSEARCH_PROGRESS": "0"}
    proc = subprocess.run(
        [sys.executable, str(BENCH / "topic_speed.py"), "--quick", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())["results"]
    for name in ("plsa", "bltm", "bltm_pr"):
        assert res[name]["tokens_per_s"] > 0 and res[name]["iterations"] == 3
    if res["gensim_lda"] is not None:
        assert res["gensim_lda"]["tokens_per_s"] > 0
    assert "vs gensim" in proc.stdout
