"""`semsearch index build --shards N --encoded PARTS` (issue 51 item 1): a sharded bundle built from
the parts of `encode --shard I/N`, whose encoder is not run again, answering as the plain bundle
built by encoding the documents itself."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.index.bundle import Bundle
from semsearch.index.bundle.coordinator import ShardedBundle

WORDS = "red brick wall blue door oak table lamp shade steel pipe white paint".split()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from semsearch.plugins import create_model
    from semsearch.text import TrigramHasher

    d = tmp_path_factory.mktemp("enc")
    rng = np.random.default_rng(5)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 6))) for _ in range(90)]
    ids = [f"p{i:03d}" for i in rng.permutation(90)]
    corpus = d / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": i, "title": t}) + "\n" for i, t in zip(ids, texts)), encoding="utf-8")
    m = create_model("dssm", hidden=[8], out=6)
    m.build(TrigramHasher.fit(texts, max_words=8))
    m.save(d / "dssm")
    return d


def _run(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_a_sharded_bundle_from_encoded_parts_answers_as_the_plain_bundle(setup, tmp_path):
    d = setup
    parts = [tmp_path / f"s{i}.npy" for i in range(2)]
    for i, p in enumerate(parts):
        r = _run("encode", "--model", d / "dssm", "--texts", d / "corpus.jsonl", "--out", p, "--shard", f"{i + 1}/2")
        assert r.exit_code == 0, r.output
    common = ["--data", d / "corpus.jsonl", "--models", f"bm25,{d / 'dssm'}", "--fields", "title"]
    r = _run("index", "build", *common, "--out", tmp_path / "plain")
    assert r.exit_code == 0, r.output
    enc = [x for p in parts for x in ("--encoded", p)]
    r = _run("index", "build", *common, *enc, "--shards", "3", "--out", tmp_path / "sharded")
    assert r.exit_code == 0, r.output
    plain = Bundle.load(tmp_path / "plain", result_cache=0)
    sharded = ShardedBundle.open_local(tmp_path / "sharded")
    try:
        assert len(sharded.manifest["shards"]) == 3 and len(sharded) == 90
        for q in ["red door", "steel pipe lamp", "white oak table", "brick"]:
            a, b = plain.search(q, 20).hits, sharded.search(q, 20).hits
            assert [h.doc_id for h in a] == [h.doc_id for h in b], q
            assert [h.semantic for h in a] == pytest.approx([h.semantic for h in b], abs=1e-6)
            assert [h.lexical for h in a] == pytest.approx([h.lexical for h in b], abs=1e-6)
    finally:
        sharded.close()
        plain.close()


def test_encoded_parts_that_do_not_fit_are_refused(setup, tmp_path):
    d = setup
    p = tmp_path / "s0.npy"
    r = _run("encode", "--model", d / "dssm", "--texts", d / "corpus.jsonl", "--out", p, "--shard", "1/2")
    assert r.exit_code == 0, r.output
    r = _run(
        "index",
        "build",
        "--data",
        d / "corpus.jsonl",
        "--models",
        f"bm25,{d / 'dssm'}",
        "--encoded",
        p,
        "--out",
        tmp_path / "x",
    )
    assert r.exit_code != 0 and "2/2" in r.output  # a part missing, named
    r = _run(
        "index", "build", "--data", d / "corpus.jsonl", "--models", "bm25", "--encoded", p, "--out", tmp_path / "y"
    )
    assert r.exit_code != 0
