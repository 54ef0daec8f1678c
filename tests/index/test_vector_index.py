"""VectorIndex (flat / hnsw / hnswsq / ivfpq), recall_at_k and SemanticRetriever on random vectors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from semsearch.index import IndexMismatchError, SemanticRetriever, VectorIndex, recall_at_k
from semsearch.models import ModelDirError

IVF = {"nlist": 16, "m": 16, "nbits": 6, "nprobe": 4}
PARAMS = {
    "flat": {},
    "hnsw": {"M": 16, "efConstruction": 80, "efSearch": 64},
    "hnswsq": {"M": 16, "efConstruction": 80, "efSearch": 64},
    "ivfpq": IVF,
}


def clustered(n: int, dim: int = 32, centres: int = 20, seed: int = 0) -> np.ndarray:
    """Points around a few random centres: the structure real embeddings have."""
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(centres, dim))
    return (c[rng.integers(0, centres, n)] + 0.3 * rng.normal(size=(n, dim))).astype(np.float32)


@pytest.fixture(scope="module")
def data() -> tuple[list[str], np.ndarray, np.ndarray]:
    x = clustered(1500)
    q = clustered(40, seed=1)
    return [f"doc{i:04d}" for i in range(len(x))], x, q


def exact(x: np.ndarray, q: np.ndarray, ids: list[str], k: int) -> list[list[str]]:
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    s = qn @ xn.T
    return [[ids[j] for j in np.argsort(-row, kind="stable")[:k]] for row in s]


def test_flat_matches_numpy_cosine(data) -> None:  # type: ignore[no-untyped-def]
    ids, x, q = data
    ix = VectorIndex.build(ids, x, "flat")
    got = ix.search(q, 10)
    assert [[d for d, _ in h] for h in got] == exact(x, q, ids, 10)
    assert all(h[0][1] >= h[-1][1] for h in got)
    assert got[0][0][1] == pytest.approx(
        float(np.max((q[0] / np.linalg.norm(q[0])) @ (x / np.linalg.norm(x, axis=1, keepdims=True)).T)), abs=1e-5
    )


@pytest.mark.parametrize("kind,bound", [("hnsw", 0.95), ("hnswsq", 0.95), ("ivfpq", 0.6)])
def test_approximate_recall_against_flat(data, kind: str, bound: float) -> None:  # type: ignore[no-untyped-def]
    ids, x, q = data
    truth = VectorIndex.build(ids, x, "flat").search(q, 10)
    approx = VectorIndex.build(ids, x, kind, **PARAMS[kind]).search(q, 10)
    r = recall_at_k(approx, truth, 10)
    assert bound <= r <= 1.0
    assert all(len(h) == 10 for h in approx)


@pytest.mark.parametrize("kind", ["flat", "hnsw", "hnswsq", "ivfpq"])
def test_save_load_round_trip(data, kind: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ids, x, q = data
    ix = VectorIndex.build(ids, x, kind, model="enc-a", **PARAMS[kind])
    ix.save(tmp_path / kind)
    back = VectorIndex.load(tmp_path / kind, expect_model="enc-a", expect_dim=32)
    assert back.kind == kind and back.params == ix.params and len(back) == len(ids)
    assert back.search(q, 5) == ix.search(q, 5)
    assert 0 < back.bytes_per_doc() == ix.bytes_per_doc()


@pytest.mark.parametrize("kind", ["flat", "hnsw", "hnswsq", "ivfpq"])
def test_a_batch_of_queries_finds_what_each_finds_alone(data, kind: str) -> None:  # type: ignore[no-untyped-def]
    """One sort for a batch's rows and a single query's own sort give the same hits and order."""
    ids, x, q = data
    ix = VectorIndex.build(ids, x, kind, **PARAMS[kind])
    assert ix.search(q, 7) == [ix.search(q[i : i + 1], 7)[0] for i in range(len(q))]


def test_bytes_per_doc_orders_kinds(data) -> None:  # type: ignore[no-untyped-def]
    ids, x, _ = data
    size = {k: VectorIndex.build(ids, x, k, **PARAMS[k]).bytes_per_doc() for k in PARAMS}
    assert size["flat"] == pytest.approx(32 * 4, rel=0.05)
    assert size["ivfpq"] < size["flat"] < size["hnsw"]


def test_mismatch_and_corrupt_files(data, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ids, x, _ = data
    VectorIndex.build(ids, x, "flat", model="enc-a").save(tmp_path / "ix")
    with pytest.raises(IndexMismatchError, match="built for model 'enc-a'"):
        VectorIndex.load(tmp_path / "ix", expect_model="enc-b")
    with pytest.raises(IndexMismatchError, match="dimension 32"):
        VectorIndex.load(tmp_path / "ix", expect_dim=64)
    with pytest.raises(ModelDirError, match="not a vector index"):
        VectorIndex.load(tmp_path / "nothing")
    f = tmp_path / "ix" / "index.faiss"
    f.write_bytes(f.read_bytes()[:1000])
    with pytest.raises(ModelDirError, match="corrupt vector index"):
        VectorIndex.load(tmp_path / "ix")
    f.write_bytes(b"garbage")
    with pytest.raises(ModelDirError, match="corrupt vector index"):
        VectorIndex.load(tmp_path / "ix")


def test_ids_count_must_match_faiss(data, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ids, x, _ = data
    VectorIndex.build(ids[:10], x[:10], "flat").save(tmp_path / "ix")
    (tmp_path / "ix" / "ids.json").write_text('["a", "b"]')
    with pytest.raises(ModelDirError, match="corrupt"):
        VectorIndex.load(tmp_path / "ix")


def test_cosine_normalises_and_ip_does_not() -> None:
    x = np.array([[10.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    q = np.array([[0.6, 0.8]], dtype=np.float32)
    cos = VectorIndex.build(["big", "aligned"], x, "flat", metric="cosine").search(q, 2)[0]
    ip = VectorIndex.build(["big", "aligned"], x, "flat", metric="ip").search(q, 2)[0]
    assert [d for d, _ in cos] == ["aligned", "big"] and cos[0][1] == pytest.approx(1.0)
    assert [d for d, _ in ip] == ["big", "aligned"] and ip[0][1] == pytest.approx(6.0)
    assert VectorIndex.build(["a"], x[:1], metric="cosine").search(q * 100, 1)[0][0][1] == pytest.approx(0.6)


def test_k_larger_than_collection_empty_index_and_empty_queries() -> None:
    x = np.eye(3, dtype=np.float32)
    ix = VectorIndex.build(["a", "b", "c"], x, "flat")
    assert [d for d, _ in ix.search(x[:1], 100)[0]] == ["a", "b", "c"]
    assert ix.search(np.zeros((0, 3), dtype=np.float32), 5) == []
    assert VectorIndex(3).search(x, 5) == [[], [], []]
    with pytest.raises(ValueError, match="k must be"):
        ix.search(x, 0)
    with pytest.raises(ValueError, match=r"\(n, 3\)"):
        ix.search(np.zeros((1, 4), dtype=np.float32), 1)


def test_ties_broken_by_doc_id_also_at_the_cut_off() -> None:
    ids = [f"z{i:02d}" for i in range(30, 0, -1)]  # inserted in descending id order
    x = np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (30, 1))
    hits = VectorIndex.build(ids, x, "flat").search(np.array([[1.0, 0.0]], dtype=np.float32), 5)[0]
    assert [d for d, _ in hits] == ["z01", "z02", "z03", "z04", "z05"]


def test_string_ids_incremental_add_and_bad_input() -> None:
    ix = VectorIndex(2, "flat")
    ix.add(["über", "b c"], np.array([[1, 0], [0, 1]], dtype=np.float32))
    ix.add(["x"], np.array([[1, 1]], dtype=np.float32))
    assert ix.search(np.array([[0, 1]], dtype=np.float32), 1)[0][0][0] == "b c"
    with pytest.raises(ValueError, match="unique"):
        ix.add(["x"], np.array([[1, 1]], dtype=np.float32))
    with pytest.raises(ValueError, match="2 doc ids but 1"):
        ix.add(["p", "q"], np.array([[1, 1]], dtype=np.float32))
    with pytest.raises(ValueError, match="NaN"):
        ix.add(["p"], np.array([[np.nan, 1]], dtype=np.float32))
    with pytest.raises(ValueError, match="kind must be"):
        VectorIndex(2, "annoy")
    with pytest.raises(ValueError, match="no parameters"):
        VectorIndex(2, "flat", nlist=3)
    with pytest.raises(ValueError, match="divide"):
        VectorIndex(30, "ivfpq", m=8)


def test_ivfpq_too_few_vectors_is_a_clear_error() -> None:
    x = clustered(100)
    with pytest.raises(ValueError, match="ivfpq needs at least 256 vectors"):
        VectorIndex.build([str(i) for i in range(100)], x, "ivfpq", nlist=16, m=8, nbits=8)


def test_search_params_change_effort(data) -> None:  # type: ignore[no-untyped-def]
    ids, x, q = data
    ix = VectorIndex.build(ids, x, "ivfpq", **IVF)
    truth = VectorIndex.build(ids, x, "flat").search(q, 10)
    ix.set_search_params(nprobe=1)
    low = recall_at_k(ix.search(q, 10), truth, 10)
    ix.set_search_params(nprobe=16)
    assert recall_at_k(ix.search(q, 10), truth, 10) > low
    with pytest.raises(ValueError):
        ix.set_search_params(efSearch=3)


def test_recall_at_k() -> None:
    a = [[("x", 1.0), ("y", 0.5)], [("p", 1.0)]]
    e = [[("x", 1.0), ("z", 0.9)], [("q", 1.0)]]
    assert recall_at_k(a, e, 2) == pytest.approx(0.25)
    assert recall_at_k(e, e, 2) == 1.0
    with pytest.raises(ValueError):
        recall_at_k(a, e[:1], 2)


class HashEncoder:
    """A deterministic toy encoder: bag of hashed words, so shared words mean high cosine."""

    def __init__(self, dim: int = 64, salt: int = 0):
        self.dim, self.salt = dim, salt

    def _enc(self, texts):  # type: ignore[no-untyped-def]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.split():
                out[i, (sum(map(ord, w)) * 31 + self.salt) % self.dim] += 1.0
        return out + 1e-3

    encode_queries = encode_documents = _enc


def test_semantic_retriever_with_any_encoder() -> None:
    r = SemanticRetriever(HashEncoder(), "flat", batch_size=2)
    r.index(["d1", "d2", "d3"], ["red drill", "blue saw", "green lamp"], progress=None)
    assert r.retrieve(["saw"], 1)[0][0][0] == "d2"
    assert [d for d, _ in r.retrieve(["saw"], 10)[0]][0] == "d2" and len(r.retrieve(["saw"], 10)[0]) == 3
    assert r.retrieve([], 3) == []
    with pytest.raises(ValueError, match="empty query"):
        r.retrieve(["  "], 3)
    with pytest.raises(TypeError):
        r.save("/nonexistent")  # a plain encoder is not a Model: nothing to save it with


def _dssm(seed: int):  # type: ignore[no-untyped-def]
    from semsearch.plugins import create_model
    from semsearch.text import TrigramHasher

    m = create_model("dssm", hidden=[16], out=8)
    m.build(TrigramHasher.fit(["red drill", "blue saw", "green lamp", "cordless drill kit"], max_words=8), seed)
    return m


def test_semantic_retriever_save_load_checks_the_encoder(tmp_path: Path) -> None:
    docs = ["red drill", "blue saw", "green lamp", "cordless drill kit", "steel sink"]
    ids = [f"d{i}" for i in range(len(docs))]
    r = SemanticRetriever(_dssm(1), "hnsw", M=8)
    r.index(ids, docs, progress=None)
    want = r.retrieve(["drill"], 3)
    assert len(want[0]) == 3
    r.save(tmp_path / "sem")
    back = SemanticRetriever.load(tmp_path / "sem")
    assert back.kind == "hnsw" and back.retrieve(["drill"], 3) == want
    with pytest.raises(IndexMismatchError, match="embeds differently"):
        SemanticRetriever.load(tmp_path / "sem", encoder=_dssm(2))  # same name, other weights
    with pytest.raises(
        IndexMismatchError, match=r"retriever\.json: 'encoder' says 'dssm', the encoder is 'HashEncoder'"
    ):
        SemanticRetriever.load(tmp_path / "sem", encoder=HashEncoder(dim=8))
    with pytest.raises(ModelDirError, match="not a semantic retriever"):
        SemanticRetriever.load(tmp_path)


def test_semantic_retriever_flat_equals_the_models_exact_retrieve() -> None:
    docs = ["red drill", "blue saw", "green lamp", "cordless drill kit", "steel sink", "drill bit"]
    ids = [f"d{i}" for i in range(len(docs))]
    m = _dssm(3)
    m.index(ids, docs)
    r = SemanticRetriever(m, "flat")
    r.index(ids, docs, progress=None)
    for q in ["drill", "lamp green"]:
        got, want = r.retrieve([q], 4)[0], m.retrieve([q], 4)[0]
        assert [d for d, _ in got] == [d for d, _ in want]
        assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-5)
    assert [list(s) for s in r.score(["drill"], [["d0", "d1"]])] == [
        list(s) for s in m.score(["drill"], [["d0", "d1"]])
    ]


@pytest.mark.parametrize("kind", ["flat", "hnsw", "hnswsq", "ivfpq"])
def test_similarity_scores_any_document(data, kind: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``similarity``: one query's score with given documents from the stored vectors — exactly
    the search's score for flat and hnsw (the cosine), the quantised one for ivfpq; after a
    save/load too; unknown ids raise KeyError."""
    ids, x, q = data
    ix = VectorIndex.build(ids, x, kind, **PARAMS[kind])
    hits = ix.search(q[:1], 5)[0]
    got = ix.similarity(q[0], [d for d, _ in hits])
    assert got == pytest.approx([s for _, s in hits], abs=1e-4)
    if kind != "ivfpq":
        cos = (x[[7, 9]] / np.linalg.norm(x[[7, 9]], axis=1, keepdims=True)) @ (q[0] / np.linalg.norm(q[0]))
        assert ix.similarity(q[0], [ids[7], ids[9]]) == pytest.approx(cos, abs=1e-5)
    ix.save(tmp_path / "ix")
    back = VectorIndex.load(tmp_path / "ix")
    assert back.similarity(q[0], [d for d, _ in hits]) == pytest.approx(got, abs=1e-6)
    assert back.similarity(q[0], []).shape == (0,)
    with pytest.raises(KeyError):
        back.similarity(q[0], ["nope"])


def _clusters(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, dim))
    return (centres[rng.integers(0, 40, n)] + 0.5 * rng.normal(size=(n, dim))).astype(np.float32)


def test_ivfpq_exact_rescoring(tmp_path: Path) -> None:
    """IVF-PQ re-scoring its short list with the full vectors: high recall against exact search,
    exact scores for what it returns, the full vectors memory-mapped after loading."""
    x, q = _clusters(3000, 32, 0), _clusters(50, 32, 1)
    ids = [f"d{i:05d}" for i in range(len(x))]
    flat = VectorIndex.build(ids, x, "flat")
    exact = flat.search(q, 10)
    coarse = VectorIndex.build(ids, x, "ivfpq", nlist=32, m=4, nbits=8, nprobe=8, rerank=0)
    fine = VectorIndex.build(ids, x, "ivfpq", nlist=32, m=4, nbits=8, nprobe=8, rerank=300)
    r_coarse, r_fine = recall_at_k(coarse.search(q, 10), exact, 10), recall_at_k(fine.search(q, 10), exact, 10)
    assert r_fine >= 0.9 and r_fine > r_coarse
    for qv, hits in zip(q, fine.search(q, 10)):
        got = np.array([s for _, s in hits])
        want = flat.similarity(qv, [d for d, _ in hits])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # exact scores, not PQ estimates
        assert list(got) == sorted(got, reverse=True)
    fine.save(tmp_path / "ix")
    loaded = VectorIndex.load(tmp_path / "ix")
    assert isinstance(loaded.stored_vectors(), np.memmap)  # read from disk on demand
    assert loaded.search(q, 10) == fine.search(q, 10)
    np.testing.assert_allclose(loaded.similarity(q[0], ids[:5]), flat.similarity(q[0], ids[:5]), rtol=1e-5, atol=1e-6)
    assert loaded.nbytes() < x.nbytes / 5  # what stays in RAM: codes and lists, not the vectors
    (tmp_path / "ix" / "vectors.npy").write_bytes(b"\x93NUMPY broken")
    with pytest.raises(ModelDirError, match=r"vectors\.npy: the full vectors ivfpq re-scores with"):
        VectorIndex.load(tmp_path / "ix")
    coarse.save(tmp_path / "old")  # an index saved before re-scoring existed (no rerank, no vectors)
    meta = json.loads((tmp_path / "old" / "vector_index.json").read_text())
    del meta["params"]["rerank"]
    (tmp_path / "old" / "vector_index.json").write_text(json.dumps(meta))
    assert VectorIndex.load(tmp_path / "old").search(q, 10) == coarse.search(q, 10)
    with pytest.raises(ValueError, match="rerank must be >= 0"):
        VectorIndex(32, "ivfpq", rerank=-1)
    with pytest.raises(ValueError, match="rerank needs the full vectors"):
        coarse.set_search_params(rerank=50)


def test_hnswsq_returns_exact_scores_from_the_full_vectors(tmp_path: Path) -> None:
    """HNSW over 8-bit codes: the hits it finds carry the exact cosine (re-scored with the full
    vectors, memory-mapped after loading), in exact order with ties by id; recall close to HNSW's."""
    x, q = _clusters(3000, 32, 0), _clusters(50, 32, 1)
    ids = [f"d{i:05d}" for i in range(len(x))]
    flat = VectorIndex.build(ids, x, "flat")
    sq = VectorIndex.build(ids, x, "hnswsq", M=16, efConstruction=80, efSearch=64)
    assert recall_at_k(sq.search(q, 10), flat.search(q, 10), 10) >= 0.9
    for qv, hits in zip(q, sq.search(q, 10)):
        got = np.array([s for _, s in hits])
        np.testing.assert_allclose(got, flat.similarity(qv, [d for d, _ in hits]), rtol=1e-5, atol=1e-6)
        assert list(got) == sorted(got, reverse=True)
    sq.save(tmp_path / "ix")
    loaded = VectorIndex.load(tmp_path / "ix")
    assert isinstance(loaded.stored_vectors(), np.memmap) and loaded.search(q, 10) == sq.search(q, 10)
    assert loaded.nbytes() < VectorIndex.build(ids, x, "hnsw", M=16).nbytes()  # codes, not floats, in RAM
    loaded.set_search_params(efSearch=16)
    with pytest.raises(ValueError, match="efSearch"):
        loaded.set_search_params(nprobe=3)
    (tmp_path / "ix" / "vectors.npy").unlink()
    with pytest.raises(ModelDirError, match=r"vectors\.npy: the full vectors hnswsq re-scores with"):
        VectorIndex.load(tmp_path / "ix")


def test_ids_are_held_compactly_and_answer_as_a_list(tmp_path) -> None:
    """The index keeps its ids as DocIds (one buffer, no per-id str objects or dict beyond the
    small-collection cache): hits, similarity, save/load and a repeated id in ids.json behave as
    with the list it replaced."""
    import json

    from semsearch.index import VectorIndex
    from semsearch.models.base import ModelDirError
    from semsearch.models.doc_ids import DocIds

    rng = np.random.default_rng(0)
    v = rng.normal(size=(300, 8)).astype(np.float32)
    ids = [f"d{i:03d}" for i in range(300)][::-1]  # position order != id order
    ix = VectorIndex.build(ids, v, kind="flat")
    assert isinstance(ix.doc_ids, DocIds) and list(ix.doc_ids) == ids
    hits = ix.search(v[:3], 5)
    assert [h[0][0] for h in hits] == ids[:3]
    assert ix.similarity(v[0], [ids[0], ids[7]]).shape == (2,)
    with pytest.raises(KeyError):
        ix.similarity(v[0], ["nope"])
    ix.add(["x1", "x2"], v[:2])
    assert list(ix.doc_ids)[-2:] == ["x1", "x2"]
    with pytest.raises(ValueError, match="unique"):
        ix.add(["x1"], v[:1])
    ix.save(tmp_path / "ix")
    back = VectorIndex.load(tmp_path / "ix")
    assert back.search(v[:3], 5) == ix.search(v[:3], 5)
    meta = json.loads((tmp_path / "ix" / "ids.json").read_text())
    meta[1] = meta[0]
    (tmp_path / "ix" / "ids.json").write_text(json.dumps(meta))
    with pytest.raises(ModelDirError, match="repeats"):
        VectorIndex.load(tmp_path / "ix")


def _brute_force(ix: VectorIndex, q: np.ndarray, allowed: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every allowed stored vector scored (positions are in id order here, so ties go by position)."""
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    cand = np.flatnonzero(allowed)
    out = []
    for s in qn @ ix.stored_vectors()[cand].T:
        order = np.lexsort((cand, -s))[:k]
        out.append((cand[order], s[order].astype(np.float64)))
    return out


@pytest.mark.parametrize("kind", ["flat", "hnsw", "hnswsq", "ivfpq"])
@pytest.mark.parametrize("share", [0.01, 0.2, 0.6])
@pytest.mark.parametrize("path", ["exact", "faiss"])
def test_filtered_search_against_brute_force_over_the_allowed(data, kind, share, path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``allowed``: few allowed documents are scored exactly (every kind: the brute-force answer,
    ids and order; scores to float rounding); many go through faiss's id selector (flat: still
    exact; hnsw/hnswsq/ivfpq: only allowed hits, full lists (a walk that meets too few allowed
    documents answers exactly), high recall), every hit with its exact score."""
    ids, x, q = data
    ix = VectorIndex.build(ids, x, kind, **PARAMS[kind])
    monkeypatch.setattr(VectorIndex, "EXACT_BELOW", 10**9 if path == "exact" else 0)
    allowed = np.random.default_rng(7).random(len(ids)) < share
    for k in (1, 10, 100):
        want = _brute_force(ix, q, allowed, k)
        got = ix.search_positions(q, k, allowed=allowed)
        assert [len(p) for p, _ in got] == [len(p) for p, _ in want]
        for (gp, _), (wp, _) in zip(got, want):
            assert allowed[gp].all()
            if path == "exact" or kind == "flat":
                assert np.array_equal(gp, wp)
        full = _brute_force(ix, q, np.ones(len(ids), dtype=bool), len(ids))
        for (gp, gs), (fp, fs) in zip(got, full):
            score_of = np.empty(len(ids))
            score_of[fp] = fs
            assert np.allclose(gs, score_of[gp], atol=1e-5)  # each hit's exact score
        if path == "faiss" and kind != "flat":
            recall = np.mean(
                [len(set(g[0].tolist()) & set(w[0].tolist())) / max(len(w[0]), 1) for g, w in zip(got, want)]
            )
            assert recall >= (0.6 if kind == "ivfpq" else 0.9), recall


def test_filtered_search_edge_cases(data) -> None:  # type: ignore[no-untyped-def]
    ids, x, q = data
    ix = VectorIndex.build(ids, x, "hnsw", **PARAMS["hnsw"])
    none = np.zeros(len(ids), dtype=bool)
    assert all(len(p) == 0 for p, _ in ix.search_positions(q, 5, allowed=none))
    one = none.copy()
    one[17] = True
    assert all(p.tolist() == [17] for p, _ in ix.search_positions(q, 5, allowed=one))
    with pytest.raises(ValueError, match="allowed"):
        ix.search_positions(q, 5, allowed=np.ones(len(ids) - 1, dtype=bool))
    with pytest.raises(ValueError, match="allowed"):
        ix.search_positions(q, 5, allowed=np.ones(len(ids)))
    tie = VectorIndex.build([f"t{i:02d}" for i in range(50)], np.ones((50, 4), dtype=np.float32), "flat")
    mask = np.arange(50) % 3 == 1
    p, _ = tie.search_positions(np.ones((1, 4), dtype=np.float32), 5, allowed=mask)[0]
    assert p.tolist() == [1, 4, 7, 10, 13]  # ties by doc id among the allowed
