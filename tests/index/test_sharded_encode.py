"""`semsearch encode --shard I/N` and `semsearch index from-shards` (issue 20 item 2): shards of
one encoding, resumable, built into one sharded index that answers as the unsharded one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.index.sharded import EncodedShard, ShardedVectorIndex, parse_shard
from semsearch.index.vector import VectorIndex
from semsearch.types import Part

CI = os.environ.get("CI") == "true"  # under CI Ray must be there (make test installs it), not skipped
WORDS = "red brick wall blue door oak table lamp shade steel pipe white paint".split()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from semsearch.plugins import create_model
    from semsearch.text import TrigramHasher

    d = tmp_path_factory.mktemp("enc")
    rng = np.random.default_rng(3)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 6))) for _ in range(101)]
    ids = [f"p{i:03d}" for i in rng.permutation(101)]
    corpus = d / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": i, "title": t}) + "\n" for i, t in zip(ids, texts)), encoding="utf-8")
    m = create_model("dssm", hidden=[8], out=6)
    m.build(TrigramHasher.fit(texts, max_words=8))
    m.save(d / "dssm")
    return d, ids, m


def _encode(d: Path, out: Path, *extra: str):
    return CliRunner().invoke(
        app, ["encode", "--model", str(d / "dssm"), "--texts", str(d / "corpus.jsonl"), "--out", str(out), *extra]
    )


def test_shards_cover_the_encoding_resume_and_build_one_index(setup, tmp_path):
    d, ids, m = setup
    r = _encode(d, tmp_path / "all.npy")
    assert r.exit_code == 0, r.output
    full = np.load(tmp_path / "all.npy")
    paths = [tmp_path / "shards" / f"s{i}.npy" for i in range(3)]
    for i, p in enumerate(paths):
        r = _encode(d, p, "--shard", f"{i + 1}/3")  # counted from 1, as --hold-out's folds
        assert r.exit_code == 0, r.output
    parts = [EncodedShard.read(p) for p in paths]
    assert [e.rows for e in parts] == [(0, 33), (33, 67), (67, 101)]
    assert [str(e.part) for e in parts] == ["1/3", "2/3", "3/3"] and [e.shard for e in parts] == [
        (0, 3),
        (1, 3),
        (2, 3),
    ]
    assert sum((e.ids for e in parts), []) == ids
    np.testing.assert_allclose(np.vstack([np.load(p) for p in paths]), full, rtol=1e-5, atol=1e-6)
    # run again: every shard is already complete and skipped; a shard without its sidecar is redone
    before = paths[1].stat().st_mtime_ns
    r = _encode(d, paths[1], "--shard", "2/3")
    assert r.exit_code == 0 and "shard 2/3 already written, skipped" in " ".join(r.output.split())
    assert paths[1].stat().st_mtime_ns == before
    paths[2].with_name(paths[2].name + ".json").unlink()
    r = _encode(d, paths[2], "--shard", "3/3")
    assert r.exit_code == 0 and "skipped" not in r.output and EncodedShard.read(paths[2]).rows == (67, 101)
    # one index from the shards, in any order given: the unsharded index's answers
    r = CliRunner().invoke(
        app, ["index", "from-shards", *map(str, paths[::-1]), "--out", str(tmp_path / "ix"), "--kind", "flat"]
    )
    assert r.exit_code == 0, r.output
    sh = ShardedVectorIndex.load(tmp_path / "ix")
    q = m.encode_queries(["red door", "steel pipe lamp", "white"])
    plain = VectorIndex.build(ids, full, "flat", "cosine")
    assert [[x for x, _ in h] for h in sh.search(q, 15)] == [[x for x, _ in h] for h in plain.search(q, 15)]


def test_bad_shard_arguments_and_incomplete_sets(setup, tmp_path):
    d, _, _ = setup
    for bad in ("0/3", "4/3", "-1/2", "a/b", "1", "1/0"):  # 0/3: shards count from 1
        r = _encode(d, tmp_path / "x.npy", "--shard", bad)
        assert r.exit_code == 2 and f"--shard '{bad}': expected I/N, part I of N counted from 1" in " ".join(
            r.output.split()
        ), r.output
        with pytest.raises(ValueError, match="--shard"):
            parse_shard(bad)
    assert not (tmp_path / "x.npy").exists()
    assert parse_shard(" 2 / 4 ") == Part(2, 4) and Part(2, 4).rows(10) == (2, 5) and Part(1, 1).rows(7) == (0, 7)
    paths = [tmp_path / f"s{i}.npy" for i in range(3)]
    for i in (0, 2):
        assert _encode(d, paths[i], "--shard", f"{i + 1}/3").exit_code == 0
    with pytest.raises(ValueError, match=r"shards 2/3 missing or repeated"):
        ShardedVectorIndex.from_encoded([paths[0], paths[2]], kind="flat")
    with pytest.raises(ValueError, match="not a complete encoded shard"):
        ShardedVectorIndex.from_encoded([paths[1]], kind="flat")


def test_ray_runs_the_shards_as_tasks(setup, tmp_path):
    """A local Ray (2 CPUs) encodes 4 shards with map_batches: the same files as `--shard I/4`
    one by one (the Ray folder's file names count from 0: shard-00000-of-00004 is 1/4); run
    again, every shard is found complete."""
    ray = (
        pytest.importorskip("ray", reason="Ray is not installed: pip install 'semsearch[ray]'")
        if not CI
        else __import__("ray")
    )
    d, ids, _ = setup
    # (address "local": not a cluster another test runs on this machine)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        r = CliRunner().invoke(
            app,
            [
                "encode",
                "--model",
                str(d / "dssm"),
                "--texts",
                str(d / "corpus.jsonl"),
                "--out",
                str(tmp_path / "ray"),
                "--ray",
                "4",
            ],
        )
        assert r.exit_code == 0, r.output
        assert "0 already complete" in " ".join(r.output.split())
        for i in range(4):
            assert _encode(d, tmp_path / f"one{i}.npy", "--shard", f"{i + 1}/4").exit_code == 0
            got = EncodedShard.read(tmp_path / "ray" / f"shard-{i:05d}-of-00004.npy")
            assert got.ids == EncodedShard.read(tmp_path / f"one{i}.npy").ids
            np.testing.assert_allclose(np.load(got.path), np.load(tmp_path / f"one{i}.npy"), rtol=1e-5, atol=1e-6)
        r = CliRunner().invoke(
            app,
            [
                "encode",
                "--model",
                str(d / "dssm"),
                "--texts",
                str(d / "corpus.jsonl"),
                "--out",
                str(tmp_path / "ray"),
                "--ray",
                "4",
            ],
        )
        assert r.exit_code == 0 and "4 already complete" in " ".join(r.output.split()), r.output
    finally:
        ray.shutdown()


@pytest.mark.parametrize(
    "kind,params", [("flat", {}), ("hnsw", {}), ("ivfpq", {"nlist": 4, "m": 3, "nbits": 4, "nprobe": 4, "rerank": 120})]
)
def test_one_index_from_the_shards_answers_as_the_sharded_one(setup, tmp_path, kind, params):
    """`index from-shards --one-index`: the shards in one index (for one machine) answer as the
    sharded index over the same files, ids and scores, after save/load. (IVF-PQ re-scores all 101
    here: the fixture's repeated texts tie on codes; partial re-scoring equality is
    test_sharded_index's.)"""
    from semsearch.index.sharded import one_index_from_encoded

    d, ids, m = setup
    paths = [tmp_path / f"s{i}.npy" for i in range(3)]
    for i, p in enumerate(paths):
        assert _encode(d, p, "--shard", f"{i + 1}/3").exit_code == 0
    q = m.encode_queries(["red door", "steel pipe lamp", "white", "oak table"])
    sh = ShardedVectorIndex.from_encoded(paths, kind=kind, **params)
    one = one_index_from_encoded(paths[::-1], kind=kind, **params)
    assert list(one.doc_ids) == ids and len(one) == 101
    rounded = lambda hits: sorted((-round(s, 5), x) for x, s in hits)  # noqa: E731 (equal vectors' dot
    for a, b in zip(one.search(q, 12), sh.search(q, 12)):  # products can differ by an ulp)
        assert rounded(a) == rounded(b)
    params_cli = [a for k, v in params.items() for a in ("--param", f"{k}={v}")]
    r = CliRunner().invoke(
        app,
        [
            "index",
            "from-shards",
            *map(str, paths),
            "--out",
            str(tmp_path / "one"),
            "--kind",
            kind,
            "--one-index",
            *params_cli,
        ],
    )
    assert r.exit_code == 0 and "in one index" in r.output, r.output
    assert VectorIndex.load(tmp_path / "one").search(q, 12) == one.search(q, 12)


def test_add_parts_refuses_bad_parts_and_stays_empty(setup):
    rng = np.random.default_rng(0)
    v = rng.normal(size=(20, 6)).astype(np.float32)
    ix = VectorIndex(6, "flat")
    with pytest.raises(ValueError, match="repeats"):
        ix.add_parts([(["a", "b"], v[:2]), (["c", "a"], v[2:4])], total=4)
    assert len(ix) == 0 and ix._faiss.ntotal == 0
    with pytest.raises(ValueError, match="announced"):
        ix.add_parts([(["a", "b"], v[:2])], total=3)
    assert ix._faiss.ntotal == 0
    ix.add_parts([(["a", "b"], v[:2]), (["c"], v[2:3])], total=3)
    assert list(ix.doc_ids) == ["a", "b", "c"] and ix.search(v[2:3], 1)[0][0][0] == "c"
