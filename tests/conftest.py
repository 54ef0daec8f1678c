"""Test fixtures shared by every test: the data folder, the tiny generated BEIR set, a PostgreSQL server,
a tiny trained CLSM, BM25 + CLSM and two-stage bundles, a tiny random BERT, and ``semsearch serve`` in a
child process."""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from semsearch.data import EvalSet, TrainingData, open_dataset
from semsearch.index import build_bundle
from semsearch.models import Model
from semsearch.plugins import create_model
from semsearch.training import fit, recipe
from waiting import WAIT_S, wait_until

REPO = Path(__file__).resolve().parents[1]


def _data_root() -> Path:
    env = os.environ.get("SEMSEARCH_DATA")
    return Path(env) if env else (REPO.parent / "shared" / "data")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to ../shared/data; integration tests fail (not skip) under CI=true when it is missing."""
    root = _data_root()
    if not (root / "homedepot" / "corpus.jsonl").exists():
        msg = f"real data not found at {root} (set SEMSEARCH_DATA)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return root


@pytest.fixture(scope="module")
def one_torch_thread():  # type: ignore[no-untyped-def]
    """Torch on one thread for a module's tests (on a shared 2-core machine one thread beat two
    contended ones), the previous count restored after it, not left to the rest of the session."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def write_tiny_beir(root: Path, name: str = "tiny") -> Path:
    """A small BEIR data set with train/dev/test splits and a run: queries about colours and
    animals, documents that match them by words, judged 0-3."""
    import json
    import random

    d = root / name
    (d / "qrels").mkdir(parents=True)
    (d / "runs").mkdir()
    rnd = random.Random(7)
    topics = ["red", "blue", "green", "cat", "dog", "bird", "fish", "tree", "rock", "lamp", "door", "sofa"]
    docs, queries, qrels = [], {}, {"train": [], "dev": [], "test": []}
    for i in range(60):
        a, b = rnd.sample(topics, 2)
        docs.append({"_id": f"d{i:02d}", "title": f"{a} {b} item", "text": f"a {a} thing near a {b} {'x' * (i % 3)}"})
    for qi, t in enumerate(topics * 2):
        q = f"q{qi}"
        other = rnd.choice(topics)
        queries[q] = f"{t} {other}" if qi >= len(topics) else t
        split = ["train", "dev", "test"][qi % 3]
        for doc in docs:
            words = doc["title"].split()
            grade = 3 if t in words and other in words else 2 if t in words else 0
            if grade or rnd.random() < 0.05:
                qrels[split].append((q, doc["_id"], grade))
    with open(d / "corpus.jsonl", "w") as f:
        for doc in docs:
            f.write(json.dumps(doc) + "\n")
    with open(d / "queries.jsonl", "w") as f:
        for q, t in queries.items():
            f.write(json.dumps({"_id": q, "text": t}) + "\n")
    for split, rows in qrels.items():
        with open(d / "qrels" / f"{split}.tsv", "w") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            for q, doc, g in rows:
                f.write(f"{q}\t{doc}\t{g}\n")
    with open(d / "runs" / "first.trec", "w") as f:  # a run: documents in id order, judged ones included
        for q in queries:
            for r, doc in enumerate(docs[:20], 1):
                f.write(f"{q} Q0 {doc['_id']} {r} {100 - r} first\n")
    return d


@pytest.fixture()
def tiny_data(tmp_path, monkeypatch) -> Path:
    """SEMSEARCH_DATA pointing at a generated root holding the ``tiny`` BEIR data set."""
    root = tmp_path / "data"
    write_tiny_beir(root)
    monkeypatch.setenv("SEMSEARCH_DATA", str(root))
    return root


@pytest.fixture(scope="session")
def pg_dsn():
    """DSN of a real PostgreSQL + pgvector server: $SEMSEARCH_PG_DSN if set, else an embedded one
    started for the session (stopped and deleted at the end). Fails under CI=true when no server
    can be had; skips locally with the reason. Its data directory is a fresh ``mkdtemp`` rather
    than pytest's tmp_path, whose 0700 parent the server's own system user (under root) cannot
    traverse."""
    import shutil
    import tempfile

    from semsearch.index.pgstore import EmbeddedPostgres, PgStoreError, connect

    dsn = os.environ.get("SEMSEARCH_PG_DSN")
    server, tmp = None, None
    try:
        if not dsn:
            tmp = Path(tempfile.mkdtemp(prefix="semsearch-pg-"))
            server = EmbeddedPostgres(tmp / "data", delete=True)
            dsn = server.dsn
        connect(dsn).close()  # also checks CREATE EXTENSION vector
    except PgStoreError as e:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"PostgreSQL with pgvector unavailable: {e}")
        pytest.skip(f"PostgreSQL with pgvector unavailable: {e}")
    finally:
        if server is None and tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    yield dsn
    if server is not None:
        server.stop()
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)


# -- fixtures built from the tiny data set --------------------------------------------------------------


def _trained_clsm(seed: int = 0, name: str = "clsm") -> Model:
    ds = open_dataset("tiny")
    shape = {"conv": 16, "out": 8, "window": 3} if name == "clsm" else {"hidden": [32], "out": 8}
    kw, args = recipe(
        name, {**shape, "batch_size": 16, "neg_pool": 32, "epochs": 3, "patience": 10, "lr": 0.5, "seed": seed}
    )
    m = create_model(name, **kw)
    fit(m, TrainingData.from_dataset(ds, "train", threshold=2), EvalSet.judged(ds, "dev"), progress=False, args=args)
    return m


@pytest.fixture
def trained_clsm(tiny_data) -> Callable[..., Model]:
    """Factory: a tiny CLSM trained for a few epochs on the tiny data set (seconds)."""
    return _trained_clsm


@pytest.fixture
def make_bundle(tiny_data) -> Callable[..., Path]:
    """Factory: a BM25 + CLSM (or DSSM) bundle of the tiny data set at the given path."""

    def make(out: Path, seed: int = 0, model: str = "clsm") -> Path:
        ds = open_dataset("tiny")
        return build_bundle(
            ds.corpus(), [create_model("bm25", analyzer="english"), _trained_clsm(seed, model)], out, dataset="tiny"
        )

    return make


@pytest.fixture
def make_two_stage(tiny_data, trained_clsm) -> Callable[..., Path]:
    """Factory: a tiny two-stage bundle at ``out`` built by ``index build --train-ranker``: BM25 ∪ a
    DSSM's k-NN, re-ranked by LambdaMART trained in the build, over the given ``stage_depths``."""
    from typer.testing import CliRunner

    from semsearch.cli import app

    def make(out: Path, stage_depths: str = "[[5,5]]", *extra: str, ok: bool = True) -> Any:
        """The bundle's path; with ``ok=False`` the CLI result of a build expected to fail."""
        trained_clsm(0, "dssm").save(out.parent / f"{out.name}-enc")
        r = CliRunner().invoke(
            app,
            [
                "index",
                "build",
                "--data",
                "tiny",
                "--models",
                f"bm25,{out.parent / f'{out.name}-enc'}",
                "--analyzer",
                "english",
                "--fields",
                "title",
                "--out",
                str(out),
                "--train-ranker",
                "--ranker-param",
                f"stage_depths={stage_depths}",
                "--ranker-param",
                "min_data_in_leaf=2",
                "--ranker-param",
                "num_boost_round=30",
                *extra,
            ],
        )
        if not ok:
            return r
        assert r.exit_code == 0, r.output
        return out

    return make


@pytest.fixture
def two_stage(make_two_stage, tmp_path) -> Path:
    """A tiny two-stage bundle (``make_two_stage``, depths 5 and 5)."""
    return make_two_stage(tmp_path / "B")


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    """A 2-layer, 32-wide BERT with random weights and the real tokenizer, in a HF folder."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from semsearch.models.transformer import default_base

    d = tmp_path_factory.mktemp("tiny-bert")
    tok = AutoTokenizer.from_pretrained(default_base(), local_files_only=True)
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(cfg, add_pooling_layer=False).save_pretrained(str(d))
    tok.save_pretrained(str(d))
    return str(d)


SRC = str(REPO / "src")


@contextlib.contextmanager
def serve_subprocess(
    bundle: Path, *flags: str, env: dict[str, str | None] | None = None, start_s: float = WAIT_S
) -> Iterator[tuple[str, subprocess.Popen]]:
    """``semsearch serve BUNDLE FLAGS`` in a child process on a free loopback port, with this
    checkout's sources first on PYTHONPATH (``env``: more variables; None removes one); yields
    (base URL, process) once the command has announced its address, which it does when every
    worker answers ready (``serving.server.announce_when_ready``: the first /health to answer may
    come from one worker while the others still load), and stops it with SIGTERM (kill after
    20 s) on leaving. Its stderr goes to a file, which the process's ``stderr`` reads."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    full = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": "1",
    }
    for k, v in (env or {}).items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = v
    with tempfile.NamedTemporaryFile(prefix="semsearch-serve-", suffix=".log") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "semsearch.cli", "serve", str(bundle), "--port", str(port), *flags],
            env=full,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        server.stderr = open(log.name, "rb")  # noqa: SIM115  # the log from its start; closed on leaving

        def said() -> str:
            return Path(log.name).read_text(errors="replace")

        def announced() -> bool:
            assert server.poll() is None, f"semsearch serve exited ({server.returncode}):\n{said()[-3000:]}"
            return f":{port}/ (" in said()  # "serving BUNDLE on http://HOST:PORT/ (N workers…)"

        try:
            wait_until(announced, lambda: f"semsearch serve to announce port {port}:\n{said()[-3000:]}", start_s)
            yield f"http://127.0.0.1:{port}", server
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            server.stderr.close()
            server.stderr = io.BytesIO(Path(log.name).read_bytes())  # the whole log, readable after the exit


@pytest.fixture
def serve_bundle() -> Callable[..., contextlib.AbstractContextManager[tuple[str, subprocess.Popen]]]:
    """``serve_subprocess``, for tests that run ``semsearch serve`` as a child process."""
    return serve_subprocess


# -- a two-node Ray cluster on this machine (tests/serving/test_cluster.py, tests/index/test_sharded_real.py) --

RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ray_env(token: Path) -> dict[str, str]:
    return {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token),
        "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": "1",
    }


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory) -> Iterator[tuple[str, dict[str, str]]]:
    """A head node and a second node (one CPU each) on this machine: (GCS address, environment).
    Per module: a cluster left running would be joined by another test's bare ``ray.init``."""
    d = tmp_path_factory.mktemp("ray")
    token = d / "token"
    token.write_text(secrets.token_hex(32))
    env = _ray_env(token)
    port = _free_port()
    procs = []

    def start(*args: str) -> None:
        procs.append(
            subprocess.Popen(
                [RAY, "start", *args, "--num-cpus", "1", "--block"],
                env=env,
                stdout=open(d / f"node{len(procs)}.log", "w"),  # noqa: SIM115  # closed with the process
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    address = f"127.0.0.1:{port}"
    try:
        start("--head", "--port", str(port), "--include-dashboard=false", "--disable-usage-stats")
        deadline = time.time() + WAIT_S
        added = False
        while time.time() < deadline:
            r = subprocess.run([RAY, "status", "--address", address], env=env, capture_output=True, text=True)
            active = r.stdout.split("Pending:")[0].count(" node_") if r.returncode == 0 else 0
            if active >= 1 and not added:
                start("--address", address)
                added = True
            if active >= 2:
                break
            time.sleep(1)
        else:
            pytest.fail(f"the two-node Ray cluster did not start: {r.stdout[-500:]} {r.stderr[-500:]}")
        yield address, env
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        # a killed 'ray start' leaves its address as this machine's current cluster, which a later
        # bare ray.init (another test's local Ray) would try to join
        current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
        if current.is_file() and current.read_text().strip().endswith(f":{port}"):
            current.unlink()
