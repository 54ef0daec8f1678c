"""Fixtures for the unit tests: a tiny trained CLSM, a BM25 + CLSM bundle, a tiny two-stage bundle, a tiny
random BERT."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
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


SRC = str(Path(__file__).resolve().parents[2] / "src")


@contextlib.contextmanager
def serve_subprocess(
    bundle: Path, *flags: str, env: dict[str, str | None] | None = None, start_s: float = 90.0
) -> Iterator[tuple[str, subprocess.Popen]]:
    """``semsearch serve BUNDLE FLAGS`` in a child process on a free loopback port, with this
    checkout's sources first on PYTHONPATH (``env``: more variables; None removes one); yields
    (base URL, process) once /health answers, and stops it with SIGTERM (kill after 20 s) on
    leaving."""
    import httpx

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
    server = subprocess.Popen(
        [sys.executable, "-m", "semsearch.cli", "serve", str(bundle), "--port", str(port), *flags],
        env=full,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + start_s
        while True:
            assert server.poll() is None and time.time() < deadline, "server did not start"
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        yield base, server
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture
def serve_bundle() -> Callable[..., contextlib.AbstractContextManager[tuple[str, subprocess.Popen]]]:
    """``serve_subprocess``, for tests that run ``semsearch serve`` as a child process."""
    return serve_subprocess
