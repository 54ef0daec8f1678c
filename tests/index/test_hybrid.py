"""Hybrid retrieval: union of lexical and semantic hits, sources, RRF / interpolation order."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from semsearch.index import HybridRetriever, Source, merge, merge_runs
from semsearch.plugins import create_model

LEX = [("a", 9.0), ("b", 5.0), ("c", 1.0)]
SEM = [("c", 0.9), ("d", 0.8)]


def test_union_sources_and_stage_scores() -> None:
    hits = {h.doc_id: h for h in merge(LEX, SEM)}
    assert set(hits) == {"a", "b", "c", "d"}
    assert hits["a"].sources is Source.LEXICAL and hits["a"].semantic is None and hits["a"].lexical_rank == 1
    assert hits["d"].sources is Source.SEMANTIC and hits["d"].lexical is None and hits["d"].semantic == 0.8
    assert hits["c"].sources is Source.BOTH and (hits["c"].lexical, hits["c"].semantic) == (1.0, 0.9)
    assert (hits["c"].lexical_rank, hits["c"].semantic_rank) == (3, 1)
    assert Source.BOTH.name == "BOTH" and Source.LEXICAL in hits["c"].sources


def test_rrf_order_matches_the_formula() -> None:
    hits = merge(LEX, SEM, scorer="rrf", rrf_k=60)
    want = {"a": 1 / 61, "b": 1 / 62, "c": 1 / 63 + 1 / 61, "d": 1 / 62}
    assert [h.doc_id for h in hits] == ["c", "a", "b", "d"]  # b and d tie: doc id breaks it
    assert all(h.score == pytest.approx(want[h.doc_id]) for h in hits)


def test_interpolation_weights() -> None:
    lexical_only = [h.doc_id for h in merge(LEX, SEM, scorer="interpolate", weight=0.0)]
    assert lexical_only[:3] == ["a", "b", "c"]
    mixed = merge(LEX, SEM, scorer="interpolate", weight=0.7)  # min-max per stage, missing = stage minimum
    assert [h.doc_id for h in mixed] == ["c", "a", "b", "d"]
    assert [h.score for h in mixed] == pytest.approx([0.7, 0.3, 0.15, 0.0])
    with pytest.raises(ValueError, match="weight"):
        merge(LEX, SEM, scorer="interpolate", weight=2.0)
    with pytest.raises(ValueError, match="scorer"):
        merge(LEX, SEM, scorer="max")


def test_merge_runs_cuts_each_run_first() -> None:
    lex = {"q1": {f"l{i}": float(10 - i) for i in range(10)}, "q2": {"x": 1.0}}
    sem = {"q1": {f"s{i}": 1.0 - i / 10 for i in range(10)} | {"l9": 0.99}, "q3": {"y": 0.5}}
    run = merge_runs(lex, sem, n_lexical=3, n_semantic=2)
    assert set(run["q1"]) == {"l0", "l1", "l2", "s0", "l9"}
    assert set(run) == {"q1", "q2", "q3"}
    assert len(merge_runs(lex, sem, n_lexical=0, n_semantic=2)["q1"]) == 2


class FixedModel:
    """Stands in for a model: ``retrieve`` returns fixed hits, recording the k it was asked for."""

    def __init__(self, hits: list[tuple[str, float]]):
        self.hits, self.asked = hits, []

    def retrieve(self, queries: Sequence[str], k: int):  # type: ignore[no-untyped-def]
        self.asked.append(k)
        return [self.hits[:k] for _ in queries]


@pytest.mark.parametrize("concurrent", [False, True])
def test_hybrid_retriever_asks_each_stage_for_its_depth(concurrent: bool) -> None:
    lex, sem = FixedModel(LEX), FixedModel(SEM)
    h = HybridRetriever(lex, sem, n_lexical=2, n_semantic=1, concurrent=concurrent)  # type: ignore[arg-type]
    out = h.search(["q", "r"])
    assert lex.asked == [2] and sem.asked == [1]
    assert [x.doc_id for x in out[0]] == ["a", "c", "b"] and out[0] == out[1]
    assert h.retrieve(["q"], 2) == [[(x.doc_id, x.score) for x in out[0][:2]]]
    assert h.search([]) == []
    with pytest.raises(ValueError, match="empty query"):
        h.search([""])
    with pytest.raises(ValueError):
        HybridRetriever(lex, sem, n_lexical=0, n_semantic=0)  # type: ignore[arg-type]


def test_hybrid_recall_is_at_least_each_stage_on_a_tiny_collection() -> None:
    """BM25 misses a synonym that a (toy) semantic model finds; the union finds both."""
    from semsearch.index import SemanticRetriever

    docs = {"d1": "cordless drill", "d2": "power driver tool", "d3": "garden hose", "d4": "drill bit set"}
    bm25 = create_model("bm25")
    bm25.index(list(docs), list(docs.values()))

    class Synonyms:
        groups = [{"drill", "driver", "power"}, {"garden", "hose"}, {"bit", "set"}, {"cordless"}, {"tool"}]

        def _enc(self, texts):  # type: ignore[no-untyped-def]
            return (
                np.array(
                    [[float(any(w in g for w in t.split())) for g in self.groups] for t in texts], dtype=np.float32
                )
                + 1e-3
            )

        encode_queries = encode_documents = _enc

    sem = SemanticRetriever(Synonyms())
    sem.index(list(docs), list(docs.values()), progress=None)
    hits = HybridRetriever(bm25, sem, n_lexical=2, n_semantic=2).search(["drill"])[0]
    found = {h.doc_id: h.sources for h in hits}
    assert {"d1", "d4"} <= found.keys() and "d2" in found
    assert found["d2"] is Source.SEMANTIC
