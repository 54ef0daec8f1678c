"""Filtered search (an ``allowed`` mask over the document positions) through both stages and the
ranker: the answer equals the exhaustive filtered ranking, defined as

* stage 1, lexical: every document scored by the unfiltered kernel (k = the whole collection),
  the disallowed dropped, the best ``n_lexical`` kept (score desc, doc id);
* stage 1, semantic: every allowed document's stored vector scored against the query embedding,
  the best ``n_semantic`` kept (score desc, doc id);
* their union (``union_positions``) with each stage's score filled in for the other's hits, ranked
  by the ranker (two-stage) and cut at k (score desc, doc id).

Nothing here filters hits after a top-k: a stage that only dropped disallowed hits from its
unfiltered top-n would return fewer, and other, candidates than this reference."""

from __future__ import annotations

import random

import numpy as np
import pytest

from semsearch.index import Bundle, HybridRetriever, SemanticRetriever
from semsearch.index.hybrid import Candidates, union_positions
from semsearch.models.base import best_k, id_ranks
from semsearch.plugins import create_model

WORDS = ["red", "blue", "green", "cat", "dog", "fish", "lamp", "sofa", "door", "tree", "rock", "bird", "drill", "hose"]
QUERIES = ["red cat", "lamp", "drill hose bird", "unknownword", "sofa door tree rock", "blue dog item", "green"]


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


def exhaustive_candidates(lexical, semantic, queries, allowed, n_lexical, n_semantic) -> list[Candidates]:  # type: ignore[no-untyped-def]
    """The module docstring's stage 1, by brute force over the allowed documents."""
    ids = list(lexical.doc_ids if lexical is not None else semantic.doc_ids)
    ranks = id_ranks(ids)
    cand = np.flatnonzero(allowed)
    empty = (np.zeros(0, np.int64), np.zeros(0))
    lex = [empty] * len(queries)
    if lexical is not None and n_lexical > 0:
        docs, scores, counts = lexical.retrieve_positions(queries, len(ids))
        lex = []
        for d, s, c in zip(docs, scores, counts.tolist()):
            keep = allowed[d[:c]]
            lex.append((d[:c][keep][:n_lexical], s[:c][keep][:n_lexical]))
    vecs = semantic.encode_queries(queries) if semantic is not None and n_semantic > 0 else None
    sem = [empty] * len(queries)
    if semantic is not None and n_semantic > 0:
        sem = []
        for v in vecs:
            s = semantic.similarity_positions(v, cand)
            order = np.lexsort((ranks[cand], -s))[:n_semantic]
            sem.append((cand[order], s[order]))
    out = []
    for i, (q, (lp, ls), (sp, ss)) in enumerate(zip(queries, lex, sem)):
        c = union_positions(lp, ls, sp, ss)
        no_lex = np.flatnonzero(np.isnan(c.lexical_rank))
        no_sem = np.flatnonzero(np.isnan(c.semantic_rank))
        if len(no_lex) and lexical is not None:
            c.lexical[no_lex] = lexical.score_positions([q], [c.positions[no_lex]])[0]
        if len(no_sem) and vecs is not None:
            c.semantic[no_sem] = semantic.similarity_positions(vecs[i], c.positions[no_sem])
        out.append(c)
    return out


def _same_candidates(got: Candidates, want: Candidates) -> None:
    assert np.array_equal(got.positions, want.positions)
    for a, b in [(got.lexical, want.lexical), (got.semantic, want.semantic)]:
        assert np.allclose(a, b, rtol=1e-6, atol=1e-6, equal_nan=True)
    assert np.array_equal(got.lexical_rank, want.lexical_rank, equal_nan=True)
    assert np.array_equal(got.semantic_rank, want.semantic_rank, equal_nan=True)


@pytest.fixture(scope="module")
def stages():  # type: ignore[no-untyped-def]
    rng = random.Random(3)
    docs = {f"p{i:03d}": " ".join(rng.sample(WORDS, rng.randint(1, 4))) for i in range(300)}
    bm25 = create_model("bm25")
    bm25.index(list(docs), list(docs.values()))
    sem = SemanticRetriever(_WordVectors(), kind="hnsw")
    sem.index(list(docs), list(docs.values()), progress=None)
    return bm25, sem


@pytest.mark.parametrize("share", [0.0, 0.02, 0.3, 1.0])
@pytest.mark.parametrize("depths", [(5, 5), (40, 3), (0, 9), (9, 0)])
def test_filtered_candidates_equal_the_exhaustive_filtered_stage_1(stages, share, depths) -> None:
    bm25, sem = stages
    allowed = np.random.default_rng(int(share * 100)).random(len(bm25.doc_ids)) < share
    h = HybridRetriever(bm25, sem, scorer="union", complete=True)
    got, _ = h.candidates(QUERIES, n_lexical=depths[0], n_semantic=depths[1], allowed=allowed)
    want = exhaustive_candidates(bm25, sem, QUERIES, allowed, *depths)
    for g, w in zip(got, want):
        _same_candidates(g, w)
        assert allowed[g.positions].all()
    if 0 < share < 1:  # not what dropping disallowed hits after the unfiltered top-n would give
        unfiltered, _ = h.candidates(QUERIES, n_lexical=depths[0], n_semantic=depths[1])
        dropped = [u.positions[allowed[u.positions]] for u in unfiltered]
        assert any(len(d) < len(g.positions) for d, g in zip(dropped, got))


def test_filtered_hit_path_merges_the_filtered_stages(stages) -> None:
    """The hit-object path (rrf, interpolate) merges the same filtered stage lists."""
    bm25, sem = stages
    allowed = np.random.default_rng(5).random(len(bm25.doc_ids)) < 0.25
    h = HybridRetriever(bm25, sem, scorer="union", complete=True)
    union_hits, _ = h.timed_search(QUERIES, n_lexical=10, n_semantic=4, allowed=allowed)
    want = exhaustive_candidates(bm25, sem, QUERIES, allowed, 10, 4)
    assert [[x.doc_id for x in hits] for hits in union_hits] == [
        list(np.asarray(bm25.doc_ids.take(w.positions).tolist(), dtype=object)) for w in want
    ]
    allowed_ids = set(np.asarray(bm25.doc_ids.take(np.flatnonzero(allowed)).tolist()))
    for scorer in ("rrf", "interpolate"):
        hits, _ = h.timed_search(QUERIES, scorer=scorer, n_lexical=10, n_semantic=4, allowed=allowed)
        for got, w in zip(hits, want):
            assert {x.doc_id for x in got} == set(bm25.doc_ids.take(w.positions).tolist())
            assert {x.doc_id for x in got} <= allowed_ids


def test_a_filter_needs_a_positional_retriever(stages) -> None:
    bm25, sem = stages
    other = create_model("bm25")
    other.index(list(reversed(list(bm25.doc_ids))), ["red"] * len(bm25.doc_ids))
    h = HybridRetriever(other, sem, scorer="union")
    with pytest.raises(ValueError, match="positional"):
        h.timed_search(["red"], allowed=np.ones(len(bm25.doc_ids), dtype=bool))


def exhaustive_bundle_search(
    b: Bundle, queries: list[str], allowed: np.ndarray, k: int
) -> list[list[tuple[str, float]]]:
    """A two-stage bundle's filtered answer by the module docstring's definition."""
    rk = b.ranker
    hybrid = b._hybrid[next(iter(b._hybrid))]
    cands = exhaustive_candidates(b.lexical, hybrid.semantic, queries, allowed, rk.n_lexical, rk.n_semantic)
    scores = rk.score_candidates(queries, cands)
    ranks = id_ranks(b.corpus.ids)
    out = []
    for c, s in zip(cands, scores):
        top = best_k(s, ranks[c.positions], k)
        out.append([(b.corpus.ids[int(c.positions[i])], float(s[i])) for i in top])
    return out


@pytest.mark.parametrize("share", [0.0, 0.05, 0.4])
def test_two_stage_bundle_filtered_equals_the_exhaustive_ranking(two_stage, share) -> None:
    b = Bundle.load(two_stage, result_cache=64)
    n = len(b.corpus)
    allowed = np.random.default_rng(9).random(n) < share
    queries = ["red cat", "blue dog item", "green", "fish tree rock lamp", "zebra unknownword"]
    for k in (1, 3, 20):
        got = b.search_many(queries, k, allowed=allowed)
        want = exhaustive_bundle_search(b, queries, allowed, k)
        for r, w in zip(got, want):
            assert [h.doc_id for h in r.hits] == [d for d, _ in w]
            assert np.allclose([h.score for h in r.hits], [s for _, s in w], rtol=1e-6, atol=1e-9)
    # the mask is part of the result cache's key: another mask, another answer
    again = b.search_many(queries, 3, allowed=allowed)
    other = b.search_many(queries, 3, allowed=~allowed)
    assert "cached_ms" in again[0].timing
    assert "cached_ms" not in other[0].timing
    assert all(b.corpus.index[h.doc_id] in set(np.flatnonzero(~allowed).tolist()) for r in other for h in r.hits)
    with pytest.raises(ValueError, match="allowed"):
        b.search_many(queries, 3, allowed=np.ones(n + 1, dtype=bool))
    b.close()


@pytest.fixture
def facet_bundle(make_two_stage, tmp_path):  # type: ignore[no-untyped-def]
    """A two-stage bundle of a generated CSV (the tiny set's titles, with a brand facet that is
    sometimes a list, a colour facet and a price column with nulls), its ranker the one trained
    on the tiny set's judgments."""
    from typer.testing import CliRunner

    from semsearch.cli import app

    b = make_two_stage(tmp_path / "B")
    corpus = Bundle.load(b).corpus
    rng = random.Random(4)
    lines = ["id,title,brand,color,price"]
    for i, (d, t) in enumerate(zip(corpus.ids, corpus.titles)):
        brand = rng.choice(["Acme", "Bolt", "Crux", "Dyna"])
        price = "" if i % 7 == 0 else str(rng.choice([rng.randint(1, 200), round(rng.random() * 100, 2)]))
        lines.append(f"{d},{t},{brand},{rng.choice(['red', 'blue', ''])},{price}")
    (tmp_path / "catalog.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "F"
    r = CliRunner().invoke(
        app,
        [
            "index", "build", "--data", str(tmp_path / "catalog.csv"), "--id", "id", "--fields", "title",
            "--facets", "brand,color", "--numeric", "price", "--models", f"bm25,{tmp_path / 'B-enc'}",
            "--analyzer", "english", "--ranker", str(b / "ranker"), "--out", str(out),
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    return out


FILTERS = [
    ["brand:Acme"],
    ["brand:Acme", "brand:Dyna"],
    ["price:[10,100]"],
    ["brand:Bolt", "price:[*,50]", "color:red"],
    ["color:blue", "price:[20,*]"],
    ["brand:Nobody"],
]


def test_filtered_answers_equal_the_exhaustive_filtered_ranking(facet_bundle) -> None:
    """Filters on a two-stage bundle of a table: ``Bundle.search_many(filters=...)`` returns the
    exhaustive filtered ranking (module docstring), only documents the filter allows, and the
    facet counts of that ranking's candidate set."""
    from semsearch.index.filters import FacetClause

    b = Bundle.load(facet_bundle, result_cache=0)
    assert b.two_stage and b.filters.facets == ["brand", "color"] and b.filters.numeric == ["price"]
    queries = ["red cat", "blue dog item", "green", "fish tree rock lamp", "bird door"]
    rk = b.ranker
    hybrid = b._hybrid[next(iter(b._hybrid))]
    shown = 0
    for exprs in FILTERS:
        flt = b.filters.parse(exprs)
        allowed = b.filters.mask(flt)
        for k in (1, 5, 20):
            got = b.search_many(queries, k, filters=exprs, facets=10)
            want = exhaustive_bundle_search(b, queries, allowed, k)
            cands = exhaustive_candidates(b.lexical, hybrid.semantic, queries, allowed, rk.n_lexical, rk.n_semantic)
            for r, w, c in zip(got, want, cands):
                shown += len(r.hits) * (exprs != ["brand:Nobody"])
                assert r.facets is not None and (r.hits or exprs == ["brand:Nobody"] or not len(c))
                assert [h.doc_id for h in r.hits] == [d for d, _ in w]
                assert np.allclose([h.score for h in r.hits], [s for _, s in w], rtol=1e-6, atol=1e-9)
                assert r.facets == b.filters.counts(c.positions, 10)
                for h in r.hits:  # every hit satisfies the filter, by its stored fields
                    fields = b.corpus.fields(b.corpus.index[h.doc_id])
                    for cl in flt.clauses:
                        v = fields[cl.field]
                        if isinstance(cl, FacetClause):
                            assert v in cl.values
                        else:
                            assert v is not None and any(
                                (lo is None or v >= lo) and (hi is None or v <= hi) for lo, hi in cl.ranges
                            )
        if exprs == ["brand:Acme"]:
            assert all(set(dict(r.facets["brand"]["values"])) <= {"Acme"} for r in got)
    assert shown > 100  # (the filters leave hits to compare)
    unfiltered = b.search_many(queries, 5, facets=3)
    assert all(len(r.facets["brand"]["values"]) <= 3 for r in unfiltered)
    assert (
        b.search("red cat", 5, filters=["brand:Acme"]).hits
        == b.search_many(["red cat"], 5, filters="brand:Acme")[0].hits
    )
    b.close()


def test_filters_on_a_changed_bundle_go_inside_every_segment(facet_bundle, tmp_path) -> None:
    """A served bundle with upserts and deletes (``index.live``): a filtered search returns only
    current documents the filter allows, upserted ones included, with the facets of every
    segment's candidates; after a merge, filtered answers and facets equal a rebuild's."""
    import shutil

    from semsearch.index.bundle.reindex import reindex
    from semsearch.index.live import Document, LiveIndex

    original = tmp_path / "original"
    shutil.copytree(facet_bundle, original)
    live = LiveIndex(Bundle.load(facet_bundle, result_cache=0), tmp_path / "changes", writes=True)
    ids = live.base.corpus.ids
    live.upsert(
        [
            Document("n1", "red cat lamp", "", {"brand": "Acme", "color": "red", "price": 15.0}),
            Document("n2", "red cat", "", {"brand": "Bolt", "color": "blue", "price": 300}),
            Document(ids[0], "red cat red cat", "", {"brand": "Acme", "color": "red", "price": 12}),
        ]
    )
    live.delete(ids[1])
    queries = ["red cat", "blue dog item", "fish tree rock lamp"]

    def allowed(fields, flt):  # type: ignore[no-untyped-def]
        from semsearch.index.filters import FacetClause

        for cl in flt.clauses:
            v = fields.get(cl.field)
            if isinstance(cl, FacetClause):
                if v not in cl.values:
                    return False
            elif v is None or not any((lo is None or v >= lo) and (hi is None or v <= hi) for lo, hi in cl.ranges):
                return False
        return True

    seen = set()
    for exprs in FILTERS:
        flt = live.base.filters.parse(exprs)
        for r in live.search_many(queries, 20, filters=exprs, facets=10):
            rows = live.hits(r)
            assert ids[1] not in [x.doc_id for x in rows]
            assert all(allowed(x.fields, flt) for x in rows)
            seen |= {x.doc_id for x in rows}
            assert r.facets is not None
            if exprs == ["brand:Acme"]:
                assert set(dict(r.facets["brand"]["values"])) <= {"Acme"}
    assert {"n1", ids[0]} <= seen and "n2" not in {
        h.doc_id for r in live.search_many(queries, 20, filters=["brand:Acme"]) for h in r.hits
    }
    r = live.search_many(["red cat"], 20, filters=["price:[10,20]"], facets=10)[0]
    assert "n1" in [h.doc_id for h in r.hits] and r.facets["price"]["max"] <= 20  # type: ignore[index]
    documents = live.documents()
    live.merge()
    rebuilt = Bundle.load(reindex(original, documents, tmp_path / "rebuilt"), result_cache=0)
    for exprs in FILTERS:
        got = live.search_many(queries, 10, filters=exprs, facets=5)
        want = rebuilt.search_many(queries, 10, filters=exprs, facets=5)
        assert [[(h.doc_id, h.score) for h in r.hits] for r in got] == [
            [(h.doc_id, h.score) for h in r.hits] for r in want
        ]
        assert [r.facets for r in got] == [r.facets for r in want]
    live.close()
    rebuilt.close()
