"""Sharded vector index (issue 20 item 3): shards sharing one trained quantizer, searched together,
give the unsharded index's answer."""

from __future__ import annotations

import numpy as np
import pytest

from semsearch.index.sharded import ShardedVectorIndex, merge
from semsearch.index.vector import VectorIndex
from semsearch.models import ModelDirError


def _data(n=3000, dim=32, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(20, dim))
    v = (centers[rng.integers(0, 20, n)] + 0.3 * rng.normal(size=(n, dim))).astype(np.float32)
    ids = [f"doc{i:05d}" for i in rng.permutation(n)]
    q = (centers[rng.integers(0, 20, 40)] + 0.3 * rng.normal(size=(40, dim))).astype(np.float32)
    return ids, v, q


def _same(a, b):
    assert [[d for d, _ in h] for h in a] == [[d for d, _ in h] for h in b]
    for x, y in zip(a, b):
        np.testing.assert_allclose([s for _, s in x], [s for _, s in y], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("metric", ["ip", "cosine", "l2"])
@pytest.mark.parametrize(
    "kind,params",
    [
        ("flat", {}),
        ("ivfpq", {"nlist": 16, "m": 8, "nbits": 6, "nprobe": 4, "rerank": 0}),
        ("ivfpq", {"nlist": 16, "m": 8, "nbits": 6, "nprobe": 4, "rerank": 50}),
    ],
)
def test_shards_sharing_the_quantizer_answer_as_one_index(metric, kind, params, tmp_path):
    ids, v, q = _data()
    one = ShardedVectorIndex.build(ids, v, 1, kind, metric, threads=1, **params).shards[0]  # unsharded, same training
    for shards in (2, 3, 7):
        sh = ShardedVectorIndex.build(ids, v, shards, kind, metric, threads=1, **params)
        assert len(sh) == len(ids) and [len(s) for s in sh.shards] == [
            len(ids) * (i + 1) // shards - len(ids) * i // shards for i in range(shards)
        ]
        for k in (1, 10, 100):
            _same(sh.search(q, k), one.search(q, k))
    sh.save(tmp_path / "sh")
    back = ShardedVectorIndex.load(tmp_path / "sh")
    _same(back.search(q, 10), one.search(q, 10))


def test_flat_shards_equal_a_plain_index_and_l2_scores_are_negated_squared_distances():
    ids, v, q = _data(500, 16)
    plain = VectorIndex.build(ids, v, "flat", "l2")
    _same(ShardedVectorIndex.build(ids, v, 4, "flat", "l2").search(q, 20), plain.search(q, 20))
    d, s = plain.search(q[:1], 1)[0][0]
    assert s == pytest.approx(-float(((v[ids.index(d)] - q[0]) ** 2).sum()), rel=1e-5)
    assert plain.similarity(q[0], [d])[0] == pytest.approx(s, rel=1e-5)


def test_merge_orders_by_score_then_id():
    assert merge([[("b", 2.0), ("d", 1.0)], [("a", 2.0), ("c", 1.0)], []], 3) == [("a", 2.0), ("b", 2.0), ("c", 1.0)]


def test_bad_shards_and_directories(tmp_path):
    ids, v, _ = _data(200, 8)
    with pytest.raises(ValueError, match="at least 1"):
        ShardedVectorIndex.build(ids, v, 0)
    a = VectorIndex.build(ids[:100], v[:100])
    with pytest.raises(ValueError, match="two shards"):
        ShardedVectorIndex([a, VectorIndex.build(ids[50:150], v[50:150])])
    with pytest.raises(ValueError, match="share"):
        ShardedVectorIndex([a, VectorIndex.build(ids[100:], v[100:], metric="ip")])
    with pytest.raises(ModelDirError, match="not a sharded"):
        ShardedVectorIndex.load(tmp_path)
    ShardedVectorIndex([a, VectorIndex.build(ids[100:], v[100:])]).save(tmp_path / "s")
    (tmp_path / "s" / "shard-00001" / "ids.json").unlink()
    with pytest.raises(ModelDirError):
        ShardedVectorIndex.load(tmp_path / "s")
