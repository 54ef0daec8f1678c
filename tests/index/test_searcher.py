"""One search protocol (``index.searcher``): a ``Bundle``, a ``LiveIndex``, a ``ShardedBundle`` and
a compared pair (``serving.compare.ComparedPair``) are each a ``Searcher`` answering a
``SearchRequest``; each answers as the path it replaces did: a page is the slice of the top
``offset + k`` (what the service cut), a batch answers as its requests one at a time, a sharded
bundle and a live index without changes as their bundle, a compared pair as the service's
interleaving (or the bucket's bundle) of the two bundles' own answers."""

from __future__ import annotations

import numpy as np
import pytest

from semsearch.index import Bundle, BundleSearcher, Capabilities, Searcher, SearchRequest
from semsearch.index.bundle.coordinator import ShardedBundle
from semsearch.index.bundle.shard import split_bundle
from semsearch.index.live import LiveIndex
from semsearch.serving.compare import ComparedPair, ComparedResult, interleave, seed_of

QUERIES = ["red cat", "blue dog item", "green", "fish tree rock lamp", "sofa door", "bird"]


def _pairs(result) -> list[tuple[str, float]]:
    return [(h.doc_id, round(h.score, 6)) for h in result.hits]


@pytest.fixture
def searchers(make_bundle, tmp_path):
    a = make_bundle(tmp_path / "A")
    b = make_bundle(tmp_path / "B", seed=1)
    bundle = Bundle.load(a, result_cache=0)
    live = LiveIndex(Bundle.load(a, result_cache=0), tmp_path / "changes", writes=True)
    sharded = ShardedBundle.open_local(split_bundle(a, tmp_path / "S", 3))
    pair = ComparedPair(Bundle.load(a, result_cache=0), Bundle.load(b, result_cache=0))
    ab = ComparedPair(Bundle.load(a, result_cache=0), Bundle.load(b, result_cache=0), mode="ab")
    yield {"bundle": bundle, "live": live, "sharded": sharded, "pair": pair, "ab": ab}
    for x in (bundle, live, sharded, pair, ab):
        x.close()


def test_each_kind_is_a_searcher_and_declares_what_it_does(searchers) -> None:
    for name, s in searchers.items():
        assert isinstance(s, Searcher), name
    assert isinstance(searchers["bundle"], BundleSearcher) and isinstance(searchers["sharded"], BundleSearcher)
    assert searchers["bundle"].capabilities == Capabilities(explain=True)
    assert searchers["live"].capabilities == Capabilities(writes=True, explain=True)
    assert searchers["sharded"].capabilities == Capabilities(fallible=True, remote=True)
    assert searchers["pair"].capabilities == Capabilities(explain=True)
    assert searchers["bundle"].base is searchers["bundle"] and searchers["sharded"].base is None


@pytest.mark.parametrize("name", ["bundle", "live", "sharded"])
def test_a_request_answers_as_the_bundle_and_a_page_is_the_slice_of_the_top(searchers, name) -> None:
    s, bundle = searchers[name], searchers["bundle"]
    for q in QUERIES:
        for merge in ("union", "rrf"):
            top = bundle.search(q, 8, merge_by=merge)  # the old path: the top offset + k, cut by the service
            page = s.search_request(SearchRequest(q, 5, offset=3, merge_by=merge))
            assert _pairs(page) == _pairs(top)[3:]
            assert _pairs(s.search_request(SearchRequest(q, 8, merge_by=merge))) == _pairs(top)
    # a batch: one result per request, in order, each as the request alone (mixed options and pages)
    requests = [SearchRequest(q, 4, offset=i % 3, merge_by=("union", "rrf")[i % 2]) for i, q in enumerate(QUERIES)]
    batch = s.search_requests(requests)
    assert [_pairs(r) for r in batch] == [_pairs(s.search_request(r)) for r in requests]
    assert [r.query for r in batch] == [r.query for r in requests]


def test_the_compared_pair_answers_as_the_service_interleaved_them(searchers) -> None:
    pair, ab = searchers["pair"], searchers["ab"]
    a, b = pair.bundles
    for q in QUERIES:
        nonce = "0123456789abcdef"
        got = pair.search_request(SearchRequest(q, 4, offset=2, nonce=nonce))
        assert isinstance(got, ComparedResult) and got.arm == "interleave" and got.team is None
        ra, rb = a.search(q, 6), b.search(q, 6)
        ids, teams = interleave([h.doc_id for h in ra.hits], [h.doc_id for h in rb.hits], 2, 4, seed_of(nonce))
        assert [h.doc_id for h in got.hits] == ids and got.teams == teams
        assert got.searched == (ra.query, rb.query) and got.query == ra.query
        rows = pair.hits(got)
        assert [r.doc_id for r in rows] == ids and [r.rank for r in rows] == list(range(1, len(ids) + 1))
        # ab: the bucket's bundle alone, every hit its team's
        served = ab.search_request(SearchRequest(q, 4, offset=1, client="user-7"))
        arm, team = ab.assign("user-7", "")
        assert (served.arm, served.team, set(served.teams) <= {team}) == (arm, team, True)
        assert _pairs(served) == _pairs(ab.bundles[team].search(q, 5))[1:]


def test_requests_are_checked_once_where_they_are_made(searchers) -> None:
    for bad, message in [
        ({"query": " "}, "empty query"),
        ({"query": "red", "k": 0}, "k must be >= 1"),
        ({"query": "red", "offset": -1}, "offset must be >= 0"),
        ({"query": "red", "merge_by": "max"}, "merge must be one of"),
        ({"query": "red", "facets": -1}, "facets must be >= 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            SearchRequest(**bad)
    assert SearchRequest("red", filters=["brand:x"]).filters == ("brand:x",)  # (hashable: a batch key)
    bundle, live, sharded = searchers["bundle"], searchers["live"], searchers["sharded"]
    for s in (bundle, sharded, searchers["pair"]):
        with pytest.raises(ValueError, match="no model 'nope'"):
            s.search_request(SearchRequest("red", model="nope"))
        with pytest.raises(ValueError, match="empty query at position 1"):
            s.search_many(["red", " "])
    with pytest.raises(ValueError, match="allowed must be a bool array"):
        bundle.search("red", allowed=np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match="a live index takes filters"):
        live.search("red", allowed=np.ones(len(live), dtype=bool))
    assert bundle.search_many([], 5) == [] and sharded.search_requests([]) == []
