"""PgVectorStore against a real PostgreSQL + pgvector server (the session's ``pg_dsn`` fixture):
exact search matches faiss Flat, HNSW recall, cosine, mismatch errors, names, atomic replace."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from semsearch.index.pgstore import PgVectorStore, check_name, connect, list_collections, load_collection
from semsearch.index.vector import IndexMismatchError, VectorIndex, recall_at_k
from waiting import WAIT_S


def _data(n: int = 400, dim: int = 16, seed: int = 0) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    return [f"doc{i:04d}" for i in rng.permutation(n)], rng.normal(size=(n, dim)).astype(np.float32)


def _clustered(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(30, dim))
    return (centres[rng.integers(0, 30, n)] + 0.3 * rng.normal(size=(n, dim))).astype(np.float32)


def _tables(dsn: str) -> set[str]:
    with connect(dsn) as c:
        return {r[0] for r in c.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()}


def test_round_trip(pg_dsn: str) -> None:
    ids, v = _data()
    texts = [f"text of {d}" for d in ids]
    with PgVectorStore.create(
        pg_dsn, "round_trip", ids, v, texts, metric="ip", model="enc-a", m=8, ef_construction=32, ef_search=50
    ) as s:
        assert s.count == len(s) == len(ids)
    with PgVectorStore.open(pg_dsn, "round_trip", expect_model="enc-a", expect_dim=16) as s:
        assert (s.count, s.dim, s.metric, s.model) == (len(ids), 16, "ip", "enc-a")
        assert s.params == {"m": 8, "ef_construction": 32, "ef_search": 50}
        assert s.doc_ids == ids
        assert s.texts([ids[3], "missing", ids[0]]) == [texts[3], None, texts[0]]
        hits = s.search(v[:5], 3, exact=True)
        for i, h in enumerate(hits):
            assert h[0][1] >= h[1][1] >= h[2][1]
            best = int(np.argmax(v @ v[i]))  # inner product: not necessarily the query itself
            assert h[0] == (ids[best], pytest.approx(float(v[best] @ v[i]), rel=1e-5))
    assert "round_trip" in list_collections(pg_dsn)


@pytest.mark.parametrize("metric", ["ip", "cosine"])
def test_exact_equals_faiss_flat(pg_dsn: str, metric: str) -> None:
    ids, v = _data(500, 24, seed=1)
    v[10] = v[20] = v[30]  # exact ties: the order must go by doc id, as in VectorIndex
    q = np.random.default_rng(2).normal(size=(40, 24)).astype(np.float32)
    q[0] = v[30]
    flat = VectorIndex.build(ids, v, "flat", metric).search(q, 10)
    with PgVectorStore.create(pg_dsn, f"exact_{metric}", ids, v, metric=metric) as s:
        pg = s.search(q, 10, exact=True)
    assert [[d for d, _ in h] for h in pg] == [[d for d, _ in h] for h in flat]
    assert np.allclose([[x for _, x in h] for h in pg], [[x for _, x in h] for h in flat], atol=1e-5, rtol=0)
    assert [d for d, _ in pg[0][:3]] == sorted(ids[i] for i in (10, 20, 30))


@pytest.mark.parametrize("metric", ["ip", "cosine"])
def test_hnsw_recall(pg_dsn: str, metric: str) -> None:
    v = _clustered(3000, 32, seed=3)
    q = _clustered(100, 32, seed=4)
    ids = [f"c{i}" for i in range(len(v))]
    with PgVectorStore.create(pg_dsn, f"recall_{metric}", ids, v, metric=metric) as s:
        exact = s.search(q, 10, exact=True)
        approx = s.search(q, 10)
        s.set_search_params(ef_search=10)
        narrow = s.search(q, 10)
    assert recall_at_k(approx, exact, 10) >= 0.95
    assert all(len(h) == 10 for h in approx + narrow)
    assert recall_at_k(narrow, exact, 10) <= recall_at_k(approx, exact, 10)


def test_cosine_normalises(pg_dsn: str) -> None:
    ids, v = _data(200, 8, seed=5)
    scaled = v * np.random.default_rng(6).uniform(0.1, 50, size=(len(v), 1)).astype(np.float32)
    with PgVectorStore.create(pg_dsn, "cosine_norm", ids, scaled, metric="cosine") as s:
        a = s.search(v[:10], 5, exact=True)
        b = s.search(v[:10] * 7.5, 5, exact=True)
        h = s.search(v[:10], 5)
    assert [[d for d, _ in x] for x in a] == [[d for d, _ in x] for x in b]
    for i, hits in enumerate(a):
        assert hits[0][0] == ids[i] and hits[0][1] == pytest.approx(1.0, abs=1e-5)
        assert all(-1 - 1e-5 <= x <= 1 + 1e-5 for _, x in hits)
    assert [x[0][0] for x in h] == ids[:10]


def test_cosine_zero_vectors_score_zero_like_faiss(pg_dsn: str) -> None:
    ids, v = _data(100, 8, seed=11)
    v[[3, 50]] = 0  # e.g. a title without a known word
    q = np.vstack([v[:20], np.zeros((1, 8), np.float32)])
    flat = VectorIndex.build(ids, v, "flat", "cosine").search(q, 100)
    with PgVectorStore.create(pg_dsn, "zeros", ids, v) as s:
        for exact in (True, False):
            got = s.search(q, 100, exact=exact)
            assert [[d for d, _ in h] for h in got] == [[d for d, _ in h] for h in flat]
        assert len(s.search(q, 99)[-1]) == 99  # HNSW path finds zero vectors too


def test_mismatch_and_bad_input(pg_dsn: str) -> None:
    ids, v = _data(50, 8)
    PgVectorStore.create(pg_dsn, "mismatch", ids, v, model="enc-a").close()
    with pytest.raises(IndexMismatchError, match="enc-a"):
        PgVectorStore.open(pg_dsn, "mismatch", expect_model="enc-b")
    with pytest.raises(IndexMismatchError, match="dimension 8"):
        PgVectorStore.open(pg_dsn, "mismatch", expect_dim=9)
    with pytest.raises(KeyError):
        PgVectorStore.open(pg_dsn, "no_such_collection")
    with PgVectorStore.open(pg_dsn, "mismatch") as s:
        with pytest.raises(ValueError, match=r"\(n, 8\)"):
            s.search(np.zeros((2, 9), np.float32), 3)
        with pytest.raises(ValueError, match="k must"):
            s.search(v[:1], 0)
        with pytest.raises(ValueError, match="ef_search"):
            s.set_search_params(ef_search=0)
        assert s.search(np.zeros((0, 8), np.float32), 3) == []
    for bad in [dict(metric="l2"), dict(m=1)]:
        with pytest.raises(ValueError):
            PgVectorStore.create(pg_dsn, "bad_input", ids, v, **bad)
    with pytest.raises(ValueError, match="unique"):
        PgVectorStore.create(pg_dsn, "bad_input", ["a", "a"], v[:2])
    with pytest.raises(ValueError, match="NUL"):
        PgVectorStore.create(pg_dsn, "bad_input", ["a\x00", "b"], v[:2])
    with pytest.raises(ValueError, match="NaN"):
        PgVectorStore.create(pg_dsn, "bad_input", ["a", "b"], np.full((2, 8), np.nan, np.float32))
    assert "bad_input" not in list_collections(pg_dsn)
    assert not any("__new_" in t for t in _tables(pg_dsn))


def test_k_larger_than_collection(pg_dsn: str) -> None:
    ids, v = _data(30, 8, seed=7)
    flat = VectorIndex.build(ids, v, "flat", "ip").search(v[:3], 100)
    with PgVectorStore.create(pg_dsn, "small", ids, v, metric="ip") as s:
        for exact in (False, True):
            hits = s.search(v[:3], 100, exact=exact)
            assert [len(h) for h in hits] == [30, 30, 30]
            assert [[d for d, _ in h] for h in hits] == [[d for d, _ in h] for h in flat]


@pytest.mark.parametrize(
    "name",
    [
        "x; DROP TABLE semsearch_collections",
        "Robert'); --",
        "Upper",
        "a-b",
        "",
        "1abc",
        "semsearch_collections",
        "a" * 41,
        'q"uote',
        "pg_class",
        "a__new_x",
    ],
)
def test_bad_names_refused(pg_dsn: str, name: str) -> None:
    ids, v = _data(5, 4)
    before = _tables(pg_dsn)
    with pytest.raises(ValueError, match="collection name"):
        PgVectorStore.create(pg_dsn, name, ids, v)
    with pytest.raises(ValueError, match="collection name"):
        PgVectorStore.open(pg_dsn, name)
    assert _tables(pg_dsn) == before


def test_valid_names() -> None:
    assert check_name("homedepot_dssm_2") == "homedepot_dssm_2"


def test_atomic_replace(pg_dsn: str) -> None:
    old_ids, old_v = _data(100, 8, seed=8)
    new_ids = [f"new{i}" for i in range(60)]
    new_v = np.random.default_rng(9).normal(size=(60, 8)).astype(np.float32)
    PgVectorStore.create(pg_dsn, "replace_me", old_ids, old_v, model="old").close()
    reader = PgVectorStore.open(pg_dsn, "replace_me")
    seen: list[tuple[int, str, str]] = []

    def while_building(msg: str) -> None:  # called inside the writer's transaction, before the swap
        with PgVectorStore.open(pg_dsn, "replace_me") as r:
            seen.append((r.count, r.model, reader.search(old_v[:1], 1, exact=True)[0][0][0]))

    with pytest.raises(ValueError, match="NUL"):
        PgVectorStore.create(pg_dsn, "replace_me", ["ok", "bad\x00"], new_v[:2])
    s = PgVectorStore.create(pg_dsn, "replace_me", new_ids, new_v, model="new", log=while_building)
    s.close()
    assert seen and all(x == (100, "old", old_ids[0]) for x in seen)
    with PgVectorStore.open(pg_dsn, "replace_me") as r:
        assert (r.count, r.model, set(r.doc_ids)) == (60, "new", set(new_ids))
    assert reader.search(new_v[:1], 1, exact=True)[0][0][0] == new_ids[0]  # an open reader sees the new table
    reader.close()
    assert not any("__new_" in t for t in _tables(pg_dsn))


def test_reader_during_swap_waits_then_sees_new(pg_dsn: str) -> None:
    """A search that arrives while the swap holds its lock waits for the commit, then answers
    from the new collection (no error about a dropped table)."""
    old_ids, old_v = _data(80, 8, seed=10)
    PgVectorStore.create(pg_dsn, "swap_wait", old_ids, old_v).close()
    reader = PgVectorStore.open(pg_dsn, "swap_wait")
    reader.search(old_v[:1], 1)  # prepare the statement on the old table
    new_v = old_v[::-1].copy()
    new_ids = [f"n{i}" for i in range(80)]
    result: list = []
    with connect(pg_dsn) as w:
        with w.transaction():
            load_collection(w, "swap_wait", new_ids, new_v)
            t = threading.Thread(target=lambda: result.append(reader.search(old_v[:1], 1, exact=True)))
            t.start()
            time.sleep(0.5)
            assert not result  # blocked on the writer's lock, not answering from the old table
        t.join(timeout=WAIT_S)  # (returns as soon as the search answers)
    assert result and result[0][0][0][0] == new_ids[-1]
    reader.close()


def test_concurrent_searches_on_one_store(pg_dsn: str) -> None:
    ids, v = _data(300, 8, seed=12)
    with PgVectorStore.create(pg_dsn, "threads", ids, v) as s:
        serial = s.search(v[:40], 5)
        parts: dict[int, list] = {}

        def work(i: int) -> None:
            parts[i] = s.search(v[i * 10 : (i + 1) * 10], 5)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=WAIT_S)
    assert [h for i in range(4) for h in parts[i]] == serial


def test_embedded_server_keeps_data_across_restarts() -> None:
    """A collection written to an embedded server's data directory is there after a restart."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from semsearch.index.pgstore import EmbeddedPostgres, PgStoreError

    tmp = Path(tempfile.mkdtemp(prefix="semsearch-pg-restart-"))
    ids, v = _data(40, 4, seed=13)
    try:
        try:
            first = EmbeddedPostgres(tmp / "data")
        except PgStoreError as e:
            if os.environ.get("CI", "").lower() == "true":
                raise
            pytest.skip(str(e))
        PgVectorStore.create(first.dsn, "persisted", ids, v, model="enc").close()
        first.stop()
        with EmbeddedPostgres(tmp / "data", delete=True) as second:
            with PgVectorStore.open(second.dsn, "persisted", expect_model="enc") as s:
                assert s.doc_ids == ids
                assert s.search(v[:1], 1)[0][0][0] == ids[0]
        assert not (tmp / "data").exists()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
