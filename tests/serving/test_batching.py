"""Searches run together equal searches run one at a time: ``Bundle.search_many`` against
``Bundle.search`` on tiny bundles (a two-stage one with its LambdaMART ranker, and BM25 + CLSM
under each merge), the service's micro-batcher (``SearchBatcher``), and the query encoder's
batches by token count (``transformer._padded_batches``)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from semsearch.index import Bundle, Capabilities, SearchRequest
from semsearch.models.transformer import _padded_batches
from semsearch.serving.app import SearchBatcher

QUERIES = [
    "red cat",
    "blue dog item",
    "green",
    "cat red",
    "fish tree rock lamp",
    "sofa door",
    "red cat",
    "bird",
    "zebra unknownword",
    "lamp",
]


def _twins() -> dict[str, frozenset[str]]:
    """Per document of the tiny collection, the other documents with the same words in any order:
    a letter-trigram encoder gives them equal vectors but for rounding."""
    from semsearch.data import open_dataset
    from semsearch.text import tokenize

    corpus = open_dataset("tiny").corpus()
    by_words: dict[tuple[str, ...], set[str]] = {}
    for d, t in zip(corpus.ids, corpus.joined("title")):
        by_words.setdefault(tuple(sorted(tokenize(t))), set()).add(d)
    return {d: frozenset(g - {d}) for g in by_words.values() for d in g}


def _same(batched: list, alone: list) -> None:
    """The same hits in the same order, with the same sources and stage ranks; scores to rounding.
    A batched encoder rounds a query's embedding differently in the last bit (more so on one
    thread), so documents the encoder cannot tell apart (same words: equal vectors but for
    rounding) may swap semantic ranks, and where they tie at a stage's cut either may be kept: a
    hit may differ from its counterpart only in those ways, and only if it has such a twin."""
    twins = _twins()
    assert len(batched) == len(alone)
    for b, a in zip(batched, alone):
        assert len(b.hits) == len(a.hits)
        for x, y in zip(b.hits, a.hits):
            assert (x.sources, x.lexical_rank) == (y.sources, y.lexical_rank)
            if x.doc_id != y.doc_id:
                assert y.doc_id in twins[x.doc_id], (x, y)
            elif x.semantic_rank != y.semantic_rank:
                assert twins[x.doc_id], (x, y)
        for field in ("score", "lexical", "semantic"):
            assert [getattr(h, field) for h in b.hits] == pytest.approx([getattr(h, field) for h in a.hits], abs=1e-6)


def test_two_stage_search_many_equals_one_at_a_time(two_stage):
    b = Bundle.load(two_stage, result_cache=0, query_cache=0)
    assert b.two_stage
    for k in (1, 5, 20):
        alone = [b.search(q, k) for q in QUERIES]
        batched = b.search_many(QUERIES, k)
        _same(batched, alone)
        assert any(r.hits for r in alone) and all(r.timing["batch"] == len(set(QUERIES)) for r in batched)
        assert all([h.score for h in r.hits] == sorted((h.score for h in r.hits), reverse=True) for r in batched)
    b.close()


@pytest.mark.parametrize("merge", ["union", "rrf", "interpolate"])
def test_search_many_equals_one_at_a_time_under_each_merge(make_bundle, tmp_path, merge):
    b = Bundle.load(make_bundle(tmp_path / "b"), result_cache=0, query_cache=0)
    _same(b.search_many(QUERIES, 7, merge_by=merge), [b.search(q, 7, merge_by=merge) for q in QUERIES])
    b.close()


def test_search_many_with_the_result_cache(make_bundle, tmp_path):
    """Cached queries are answered from the cache, the rest searched together; the same answers."""
    b = Bundle.load(make_bundle(tmp_path / "b"), result_cache=100)
    first = b.search_many(QUERIES[:4], 5)
    mixed = b.search_many(QUERIES, 5)
    assert [("cached_ms" in r.timing) for r in mixed[:4]] == [True] * 4 and "cached_ms" not in mixed[4].timing
    _same(mixed[:4], first)
    _same(mixed, [Bundle.load(tmp_path / "b", result_cache=0).search(q, 5) for q in QUERIES])
    with pytest.raises(ValueError, match="empty query at position 1"):
        b.search_many(["red", " "], 5)
    assert b.search_many([], 5) == []
    b.close()


def _batched(batcher: SearchBatcher, requests: list[tuple[str, int]]) -> list:
    """The batcher's answers to ``requests`` (query, k) all made in one turn of the event loop."""

    async def run() -> list:
        return await asyncio.gather(*(batcher.search(SearchRequest(q, k)) for q, k in requests))

    return asyncio.run(run())


def test_the_service_batcher_runs_waiting_searches_together(two_stage):
    b = Bundle.load(two_stage, result_cache=0, query_cache=0)
    sizes: list[int] = []
    batcher = SearchBatcher(b, cap=4, observe=sizes.append)
    queries = ["red cat", "blue dog item", "red cat", "green", *QUERIES[3:]]  # "red cat" twice in the first pass
    requests = [(q, 5) for q in queries] + [("red cat", 3)]  # other settings: a pass of their own
    results = _batched(batcher, requests)
    _same(results, [b.search(q, k) for q, k in requests])
    assert sizes == [4, 4, 3, 1]  # at most cap a pass, in arrival order, k=3 apart
    assert [r.timing["batch"] for r in results[:4]] == [3.0] * 4  # "red cat" searched once
    assert all(r.timing["queue_ms"] >= 0 for r in results)
    b.close()


def test_a_pass_waits_a_few_turns_of_the_loop_for_more_searches(two_stage):
    """Searches that arrive within ``turns`` turns of the event loop of the first join its pass (a
    request read in one turn reaches the batcher in a later one); one that arrives after the pass
    gets the next; the answers are those of searching each alone."""
    b = Bundle.load(two_stage, result_cache=0, query_cache=0)
    sizes: list[int] = []
    batcher = SearchBatcher(b, observe=sizes.append, turns=3)

    async def run() -> list:
        futures = [batcher.search(SearchRequest("red cat", 5))]
        for q in ("blue dog item", "green"):  # one and two turns later
            await asyncio.sleep(0)
            futures.append(batcher.search(SearchRequest(q, 5)))
        first = await asyncio.gather(*futures)
        return [*first, await batcher.search(SearchRequest("red", 5))]

    results = asyncio.run(run())
    assert sizes == [3, 1]
    _same(results, [b.search(q, 5) for q in ("red cat", "blue dog item", "green", "red")])
    with pytest.raises(ValueError, match="turns must be >= 1"):
        SearchBatcher(b, turns=0)
    b.close()


def test_a_failed_pass_fails_each_of_its_searches():
    class Broken:
        capabilities = Capabilities()

        def search_requests(self, *args, **kwargs):
            raise RuntimeError("vector store down")

    async def run() -> list:
        batcher = SearchBatcher(Broken())  # type: ignore[arg-type]
        return await asyncio.gather(*(batcher.search(SearchRequest(q, 5)) for q in ("a", "b")), return_exceptions=True)

    assert [str(e) for e in asyncio.run(run())] == ["vector store down"] * 2


def test_padded_batches_cover_every_row_once_and_pad_little():
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 20, size=50)
    for size in (1, 4, 64):
        batches = _padded_batches(lengths, size)
        assert sorted(np.concatenate(batches).tolist()) == list(range(50)) and max(map(len, batches)) <= size
    # equal lengths: one call; two far-apart groups: two calls rather than padding the short ones
    assert [len(b) for b in _padded_batches(np.full(10, 7), 64)] == [10]
    two = _padded_batches(np.array([4, 30, 4, 4, 30, 4, 4, 4]), 64)
    assert sorted(
        sorted(lengths_of.tolist()) for lengths_of in (np.array([4, 30, 4, 4, 30, 4, 4, 4])[b] for b in two)
    ) == [[4] * 6, [30, 30]]
    # a few rows a little longer: padded into the same call (a call costs more than the padding)
    assert len(_padded_batches(np.array([6, 6, 6, 7]), 64)) == 1
    assert _padded_batches(np.zeros(0, dtype=np.int64), 8) == []


def test_bi_encoder_batches_by_token_count_as_one_at_a_time(tiny_bert):
    from semsearch.models.transformer import BiEncoder

    bi = BiEncoder(base=tiny_bert)
    texts = ["red", "a much longer query about red cats and blue dogs", "red cat", "blue", "x y z w v u t"]
    one = np.vstack([bi.encode_queries([t]) for t in texts])
    assert np.allclose(bi.encode_queries(texts), one, atol=1e-5)
    bi.use_onnx("fp32")
    one = np.vstack([bi.encode_queries([t]) for t in texts])
    assert np.allclose(bi.encode_queries(texts), one, atol=1e-5)
