"""The served two-stage search on arrays gives what the hit-object path gives: ``union_positions``
against ``union``, ``HybridRetriever.candidates`` against the per-stage merge with filled scores,
``score_candidates`` against ``score_hits``, and the compiled trees (``ranking.trees``) against
LightGBM's own ``predict`` to the last bit."""

from __future__ import annotations

import random

import numpy as np
import pytest

from semsearch.index import HybridRetriever, SemanticRetriever
from semsearch.index.hybrid import union, union_positions
from semsearch.models.doc_ids import DocIds
from semsearch.plugins import create_model

WORDS = ["red", "blue", "green", "cat", "dog", "fish", "lamp", "sofa", "door", "tree", "rock", "bird", "drill", "hose"]


def _ranked(rng: random.Random, pool: list[int], n: int) -> tuple[np.ndarray, np.ndarray]:
    pos = np.array(rng.sample(pool, n), dtype=np.int64)
    scores = np.sort(np.array([rng.choice([0.5, 1.0, 1.5, rng.random()]) for _ in range(n)]))[::-1]
    return pos, scores.copy()


def test_union_positions_is_union_on_ids() -> None:
    rng = random.Random(0)
    ids = DocIds([f"d{i:02d}" for i in range(40)])
    for _ in range(200):
        lp, ls = _ranked(rng, list(range(40)), rng.randint(0, 12))
        sp, ss = _ranked(rng, list(range(40)), rng.randint(0, 12))
        want = union(list(zip(ids.take(lp).tolist(), ls.tolist())), list(zip(ids.take(sp).tolist(), ss.tolist())))
        got = union_positions(lp, ls, sp, ss).hits(ids)
        assert got == want


class _WordVectors:
    """A toy encoder: the sum of fixed random vectors of a text's words."""

    def __init__(self) -> None:
        rng = np.random.default_rng(1)
        self.table = {w: rng.normal(size=8).astype(np.float32) for w in WORDS}

    def _enc(self, texts):  # type: ignore[no-untyped-def]
        return np.stack(
            [
                sum((self.table.get(w, np.zeros(8, np.float32)) for w in t.split()), np.full(8, 1e-3, np.float32))
                for t in texts
            ]
        ).astype(np.float32)

    encode_queries = encode_documents = _enc


class _ByHits(HybridRetriever):
    """The hit-object path (what a retriever over models without positions takes)."""

    @property
    def positional(self) -> bool:
        return False


@pytest.fixture(scope="module")
def stages():  # type: ignore[no-untyped-def]
    rng = random.Random(3)
    docs = {f"p{i:03d}": " ".join(rng.sample(WORDS, rng.randint(1, 4))) for i in range(120)}
    bm25 = create_model("bm25")
    bm25.index(list(docs), list(docs.values()))
    sem = SemanticRetriever(_WordVectors(), kind="flat")
    sem.index(list(docs), list(docs.values()), progress=None)
    return bm25, sem


@pytest.mark.parametrize("depths", [(5, 5), (20, 7), (0, 9), (9, 0), (200, 200)])
def test_candidates_equal_the_merged_hits_with_filled_scores(stages, depths) -> None:
    bm25, sem = stages
    queries = ["red cat", "lamp", "drill hose bird", "unknownword", "sofa door tree rock"]
    fast = HybridRetriever(bm25, sem, scorer="union", complete=True)
    slow = _ByHits(bm25, sem, scorer="union", complete=True)
    assert fast.positional
    n_lex, n_sem = depths
    got, timing = fast.timed_search(queries, n_lexical=n_lex, n_semantic=n_sem)
    want, _ = slow.timed_search(queries, n_lexical=n_lex, n_semantic=n_sem)
    assert got == want and {"lexical_ms", "semantic_ms", "merge_ms", "complete_ms"} <= timing.keys()
    assert any(len(h) for h in got)
    cut, _ = fast.timed_search(queries, 3, n_lexical=n_lex, n_semantic=n_sem)
    assert cut == [h[:3] for h in want]


def test_a_retriever_over_other_documents_is_not_positional(stages) -> None:
    bm25, sem = stages
    other = create_model("bm25")
    other.index(list(reversed(list(bm25.doc_ids))), ["red"] * len(bm25.doc_ids))
    h = HybridRetriever(other, sem, scorer="union", complete=True)
    assert not h.positional
    with pytest.raises(ValueError, match="positional"):
        h.candidates(["red"])
    assert h.search(["red cat"])  # the hit-object path


def test_two_stage_ranker_scores_candidates_as_hits(two_stage) -> None:
    """A tiny two-stage bundle: the served path (arrays) ranks exactly as stage 1's hits scored
    one by one (``score_hits``) and ordered by (score, doc id)."""
    from semsearch.index import Bundle, SearchRequest
    from semsearch.index.bundle import top_positions

    b = Bundle.load(two_stage, result_cache=0)
    queries = ["red cat", "blue dog item", "green", "fish tree rock lamp", "zebra unknownword"]
    hybrid = b._hybrid[next(iter(b._hybrid))]
    assert b.two_stage and hybrid.positional
    found, _ = b._stage1(queries, SearchRequest(queries[0], 10, n_lexical=5, n_semantic=5))
    scores = b.ranker.score_hits(queries, found)
    cands, _ = hybrid.candidates(queries, n_lexical=b.ranker.n_lexical, n_semantic=b.ranker.n_semantic)
    fast = b.ranker.score_candidates(queries, cands)
    for s, f in zip(scores, fast):
        assert np.array_equal(s, f)
    for k in (1, 3, 50):
        got = b.search_many(queries, k)
        for res, hits, s in zip(got, found, scores):
            want = [hits[i] for i in top_positions(hits, s, k)]
            assert [h.doc_id for h in res.hits] == [h.doc_id for h in want]
            assert [h.score for h in res.hits] == [float(s[i]) for i in top_positions(hits, s, k)]
            assert [(h.lexical, h.semantic, h.lexical_rank, h.semantic_rank, h.sources) for h in res.hits] == [
                (h.lexical, h.semantic, h.lexical_rank, h.semantic_rank, h.sources) for h in want
            ]
    assert any(r.hits for r in got)
    b.close()


@pytest.mark.parametrize("missing", ["none", "zero", "nan"])
def test_compiled_trees_predict_as_lightgbm(missing: str) -> None:
    import lightgbm as lgb

    from semsearch.ranking.trees import compile_booster

    rng = np.random.default_rng(7)
    X = rng.normal(size=(3000, 6))
    y = (X[:, 0] + 0.5 * X[:, 1] ** 2 - X[:, 2] * (X[:, 3] > 0) + rng.normal(scale=0.3, size=3000) > 0.4).astype(int)
    params = {"objective": "lambdarank", "num_leaves": 15, "min_data_in_leaf": 5, "verbosity": -1, "seed": 1}
    if missing == "zero":
        X[rng.random(X.shape) < 0.2] = 0.0
        params["zero_as_missing"] = True
    elif missing == "nan":
        X[rng.random(X.shape) < 0.2] = np.nan
    booster = lgb.train(params, lgb.Dataset(X, label=y, group=[100] * 30), num_boost_round=40)
    trees = compile_booster(booster, 25)
    assert trees is not None and trees.plain == (missing == "none")
    test = rng.normal(size=(500, 6)) * 2
    test[rng.random(test.shape) < 0.1] = 0.0
    test[rng.random(test.shape) < 0.1] = np.nan
    test[:5, 0] = [np.inf, -np.inf, 1e-40, -1e-40, 0.0]
    assert np.array_equal(trees.predict(test), booster.predict(test, num_iteration=25))
    for n in (1, 2, 3, 5, 6, 7):  # (the plain walk takes rows four at a time, then one by one)
        assert np.array_equal(trees.predict(test[:n]), booster.predict(test[:n], num_iteration=25))
    assert np.array_equal(compile_booster(booster, 0).predict(test), booster.predict(test, num_iteration=0))
    with pytest.raises(ValueError, match="6"):
        trees.predict(test[:, :5])
