"""Crash injection (issue 19 item 3): SIGKILL at random points, 20 times each, of
- ``semsearch index build`` replacing a bundle,
- ``semsearch train`` with checkpoints (resumed after each kill),
- ``PgVectorStore.create`` replacing a PostgreSQL collection.

After every kill the previous artifact still loads and answers exactly as before (or, where the
kill came after the new one was committed, exactly as the new one); after the kills the next run
succeeds — a resumed training ends with the model of an uninterrupted run — and nothing is left
behind (temporary folders, ``.old`` backups, half-built tables). Kill times are drawn uniformly
over a measured uninterrupted run (seeded; the shortest run seen, ``_Kills``); SEMSEARCH_CRASH_KILLS
changes the count for local debugging only."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from semsearch.index import Bundle
from semsearch.plugins import load_model
from waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
KILLS = int(os.environ.get("SEMSEARCH_CRASH_KILLS", "20"))


def _env() -> dict[str, str]:
    """The subprocesses' environment, read when they start (fixtures set $SEMSEARCH_DATA)."""
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "SEMSEARCH_PROGRESS": "0"}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "semsearch.cli", *args]


def _run(cmd: list[str], env: dict[str, str] | None = None) -> float:
    """Run to completion; its wall time."""
    t = time.perf_counter()
    r = subprocess.run(cmd, env=env or _env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return time.perf_counter() - t


class _Kills:
    """Kill times for runs of one command, drawn uniformly over its uninterrupted run time with a
    seeded generator: the shortest run seen, so when a run finishes before its kill time (the
    machine got faster since the measurement: ``make test`` runs two test processes, and the other
    one may have gone idle) later kills are drawn over the shorter time and most runs are still
    killed."""

    def __init__(self, duration: float, seed: int):
        self.duration, self.rng, self.killed = duration, random.Random(seed), 0

    def run(self, cmd: list[str], env: dict[str, str] | None = None, whole: bool = True) -> None:
        """Start ``cmd`` and SIGKILL it at the next drawn time (``killed`` counts the runs it
        stopped). ``whole``: the run does all the work (not resuming a part done), so the time it takes
        when it finishes first may shorten the range."""
        t = time.perf_counter()
        p = subprocess.Popen(cmd, env=env or _env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            p.wait(timeout=self.rng.uniform(0.0, self.duration))
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            self.killed += 1
            return
        assert p.returncode == 0, f"{cmd} failed with exit code {p.returncode}"
        if whole:  # finished first
            self.duration = min(self.duration, time.perf_counter() - t)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name or p.name.endswith(".old"))


def _hits(bundle: Path) -> list:
    b = Bundle.load(bundle, result_cache=0)
    try:
        return [
            [(h.doc_id, round(h.score, 6)) for h in b.search(q, 10, merge_by="rrf").hits]
            for q in ("red cat", "blue dog", "green table lamp")
        ]
    finally:
        b.close()


def test_index_build_killed(trained_clsm, tiny_data, tmp_path) -> None:
    enc = tmp_path / "clsm"
    trained_clsm().save(enc)
    out = tmp_path / "bundles" / "b"
    cmd = _cli(
        "index", "build", "--data", "tiny", "--models", f"bm25,{enc}", "--vector-index", "hnsw", "--out", str(out)
    )
    duration = _run(cmd)
    reference = _hits(out)
    kills = _Kills(duration, seed=19)
    for _ in range(KILLS):
        kills.run(cmd)
        assert _hits(out) == reference  # the previous bundle (or an identical new one) loads and answers the same
    assert kills.killed >= KILLS // 2, f"only {kills.killed} of {KILLS} runs were killed before finishing"
    _run(cmd)  # the next build succeeds and removes what the killed ones left
    assert _hits(out) == reference and _leftovers(out.parent) == []


def test_training_with_checkpoints_killed(tiny_data, tmp_path) -> None:
    params = [
        "--param",
        "hidden=[32]",
        "--param",
        "out=8",
        "--param",
        "batch_size=8",
        "--param",
        "neg_pool=16",
        "--param",
        "epochs=40",
        "--param",
        "patience=100",
        "--param",
        "lr=0.3",
        "--param",
        "seed=3",
    ]
    base = ["train", "dssm", "--data", "tiny", "--threshold", "2", *params]
    ref_dir = tmp_path / "reference"
    duration = _run(_cli(*base, "--out", str(ref_dir)))
    out, ck = tmp_path / "models" / "dssm", tmp_path / "models" / "ck"
    cmd = _cli(*base, "--out", str(out), "--checkpoint", str(ck), "--resume")
    _run(cmd)  # the previous artifact, from an uninterrupted run with checkpoints
    texts = ["red cat", "blue dog", "a bird thing near a green lamp"]

    def answers(d: Path) -> list:
        m = load_model(d)
        return [m.encode_queries(texts).tolist(), m.encode_documents(texts).tolist()]

    reference = answers(ref_dir)
    assert answers(out) == reference
    kills = _Kills(duration, seed=23)
    for i in range(KILLS):
        if i % 5 == 0:  # start some runs from scratch, so kills land in every epoch
            import shutil

            shutil.rmtree(ck, ignore_errors=True)
        kills.run(cmd, whole=i % 5 == 0)  # the others may resume from a checkpoint: shorter runs
        assert answers(out) == reference  # the previous model loads and encodes exactly as before
        if (ck / "trainer.json").is_file():  # any checkpoint left is complete and consistent
            meta = json.loads((ck / "trainer.json").read_text())
            assert (
                meta["epoch"] >= 1
                and (ck / "weights.safetensors").is_file()
                and (ck / "optimizer.safetensors").is_file()
            )
    assert kills.killed >= KILLS // 2, f"only {kills.killed} of {KILLS} runs were killed before finishing"
    _run(cmd)  # resumes from the last complete checkpoint and finishes
    assert answers(out) == reference  # exact resume: the model of an uninterrupted run
    assert _leftovers(out.parent) == []


PG_SCRIPT = """
import sys
import numpy as np
from semsearch.index.pgstore import PgVectorStore
dsn, seed = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(seed)
ids = [f"d{i:05d}" for i in range(3000)]
PgVectorStore.create(dsn, "crash_coll", ids, rng.normal(size=(3000, 16)).astype(np.float32), metric="ip", m=8,
                     ef_construction=64).close()
"""


def test_postgres_replace_killed(pg_dsn, tmp_path) -> None:
    from semsearch.index.pgstore import PgVectorStore, connect

    script = tmp_path / "replace.py"
    script.write_text(PG_SCRIPT)
    probe = np.random.default_rng(5).normal(size=(4, 16)).astype(np.float32)

    def answers() -> list:
        with PgVectorStore.open(pg_dsn, "crash_coll") as s:
            return [[d for d, _ in hits] for hits in s.search(probe, 5, exact=True)]

    def stray_tables() -> list[str]:
        with connect(pg_dsn) as c:
            return [
                r[0]
                for r in c.execute(
                    "SELECT tablename FROM pg_tables WHERE tablename LIKE 'crash_coll\\\\_\\\\_%'"
                ).fetchall()
            ]

    duration = _run([sys.executable, str(script), pg_dsn, "1"])
    old = answers()
    _run([sys.executable, str(script), pg_dsn, "2"])
    new = answers()
    assert old != new
    _run([sys.executable, str(script), pg_dsn, "1"])
    kills, current = _Kills(duration, seed=29), old
    for i in range(KILLS):
        seed = 2 if i % 2 == 0 else 1  # each attempt would replace the collection by the other data
        target = new if seed == 2 else old
        kills.run([sys.executable, str(script), pg_dsn, str(seed)])
        got = answers()
        assert got in (current, target)  # the previous collection, or the complete new one: never a mix
        current = got
    assert kills.killed >= KILLS // 2, f"only {kills.killed} of {KILLS} runs were killed before finishing"
    # the server rolls back a killed client's transaction when it sees the socket close
    wait_until(lambda: stray_tables() == [], lambda: f"killed loads' tables rolled back: {stray_tables()}", every=0.2)
    _run([sys.executable, str(script), pg_dsn, "2"])
    assert answers() == new and stray_tables() == []
