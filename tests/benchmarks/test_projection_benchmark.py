"""Smoke test: benchmarks/projection_speed.py runs end to end with --quick on a generated data root."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
WORDS = "drill cordless bit saw blade wood screw inch steel light bulb paint white black".split()


def _write_homedepot(root: Path) -> None:
    rng = random.Random(0)
    d = root / "homedepot"
    (d / "qrels").mkdir(parents=True)
    text = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
    with open(d / "corpus.jsonl", "w") as f:
        for i in range(120):
            f.write(json.dumps({"_id": f"d{i}", "title": text(6), "text": ""}) + "\n")
    with open(d / "queries.jsonl", "w") as f:
        for i in range(60):
            f.write(json.dumps({"_id": f"q{i}", "text": text(2)}) + "\n")
    with open(d / "qrels" / "train.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for i in range(60):
            for doc in rng.sample(range(120), 3):
                f.write(f"q{i}\td{doc}\t{rng.choice([1, 3])}\n")


def test_projection_speed_quick(tmp_path: Path) -> None:
    _write_homedepot(tmp_path / "data")
    out = tmp_path / "proj.json"
    env = {**os.environ, "SEMSEARCH_DATA": str(tmp_path / "data"), "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(BENCH / "projection_speed.py"), "--quick", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    r = json.loads(out.read_text())["results"]
    assert r["s2net"]["seconds_per_epoch"] > 0 and r["s2net"]["pairs_per_s"] > 0
    assert all(r[m]["fit_s"] > 0 for m in ("lsa", "cl-lsa", "opca"))
    assert r["pca"]["randomized_s"] > 0 and "S2Net seconds per epoch" in proc.stdout
