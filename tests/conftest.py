"""Test fixtures shared by unit and integration tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
