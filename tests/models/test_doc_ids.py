"""Compact document ids (``DocIds``) behave as the list of str they replace, and the streamed
index build gives the same vocabulary and counts as the list-based one."""

from __future__ import annotations

import numpy as np
import pytest

from semsearch.models import ModelDirError
from semsearch.models.base import id_ranks, positions
from semsearch.models.doc_ids import DocIds
from semsearch.models.lexical import LexicalIndex, analyzed, analyzed_counts
from semsearch.plugins import create_model, load_model
from semsearch.text import Analyzer, count_matrix

# prefixes of one another, empty, NUL, non-ASCII, astral, a lone surrogate, shared long prefixes
WEIRD = [
    "b",
    "a",
    "",
    "a\x00",
    "ab",
    "é",
    "e",
    "\ud800x",
    "zz",
    "Z",
    "\U0001f600",
    "doc-000000000001",
    "doc-000000000010",
    "doc-00000000001",
    "doc-0000000000010",
]


@pytest.mark.parametrize("cache", [True, False])
def test_behaves_like_the_list(cache, monkeypatch):
    monkeypatch.setattr(DocIds, "STR_CACHE_MAX", 10**6 if cache else 0)
    ids = DocIds(WEIRD)
    assert len(ids) == len(WEIRD) and list(ids) == WEIRD and ids == WEIRD and ids != WEIRD[:-1]
    assert ids[0] == "b" and ids[-1] == WEIRD[-1] and ids[np.int64(3)] == "a\x00"
    assert ids[2:5] == WEIRD[2:5] and ids[::-3] == WEIRD[::-3]
    with pytest.raises(IndexError):
        ids[len(WEIRD)]
    assert all(x in ids for x in WEIRD) and "nope" not in ids and 3 not in ids
    assert [ids.index(x) for x in WEIRD] == list(range(len(WEIRD)))
    with pytest.raises(ValueError):
        ids.index("nope")
    assert ids.take(np.array([[1, 0], [7, 3]])).tolist() == [["a", "b"], ["\ud800x", "a\x00"]]
    assert ids.positions(["zz", "nope", "a"]).tolist() == [8, -1, 1]
    assert ids.position["é"] == 5 and "nope" not in ids.position and ids.position.get("nope") is None
    with pytest.raises(KeyError):
        ids.position["nope"]
    assert DocIds([]) == [] and len(DocIds([])) == 0 and DocIds([]).take(np.zeros(0, dtype=int)).shape == (0,)


def test_ranks_are_sorted_string_order():
    """The tie-breaker: the same ranks as sorting the Python strs (code point order)."""
    rng = np.random.default_rng(0)
    many = [f"d{i}" for i in rng.permutation(3000)] + [f"msmarco_passage_{i:05d}_{j}" for i in range(40) for j in "ba"]
    for ids in (WEIRD, many):
        assert np.array_equal(DocIds(ids).ranks, id_ranks(ids))
    assert DocIds(WEIRD).first_duplicate() is None and DocIds(["x", "y", "x"]).first_duplicate() == "x"


def test_take_without_the_fast_path(monkeypatch):
    monkeypatch.setattr(DocIds, "STR_CACHE_MAX", 0)
    ids = DocIds(["a\x00b", "c"])  # a NUL inside an id: decoded one by one
    assert ids.take(np.array([1, 0, 1])).tolist() == ["c", "a\x00b", "c"]


def test_buffer_round_trip_and_bad_buffers():
    ids = DocIds(WEIRD)
    assert DocIds.from_buffer(*ids.buffer()) == ids
    buf, off = ids.buffer()
    with pytest.raises(ValueError):
        DocIds.from_buffer(buf, off[:-1])
    with pytest.raises(ValueError):
        DocIds.from_buffer(np.array([0xFF], dtype=np.uint8), np.array([0, 1]))
    with pytest.raises(TypeError):
        DocIds(["a", 3])  # type: ignore[list-item]


def test_index_keeps_ids_compact_and_positions_work(tmp_path):
    ids = ["q2", "q10", "q1", "é"]
    m = create_model("bm25")
    m.index(ids, ["red cat", "blue cat", "red dog", "cat"])
    ix = m.lexical_index
    assert isinstance(ix.doc_ids, DocIds) and m.doc_ids == ids
    assert positions(ix.position, ["é", "q1"]).tolist() == [3, 2]
    with pytest.raises(ValueError, match="not in the indexed collection"):
        positions(ix.position, ["q1", "zzz"])
    with pytest.raises(ValueError, match="duplicate"):
        create_model("bm25").index(["a", "a"], ["x", "y"])
    m.save(tmp_path / "m")
    back = load_model(tmp_path / "m")
    assert back.doc_ids == ids and back.retrieve(["red cat"], 4) == m.retrieve(["red cat"], 4)
    assert back.score(["red cat"], [["é", "q2"]])[0].tolist() == m.score(["red cat"], [["é", "q2"]])[0].tolist()
    # a saved index still lists its doc ids in lexical.json (the format is unchanged)
    import json

    assert json.loads((tmp_path / "m" / "lexical.json").read_text(encoding="utf-8"))["doc_ids"] == ids
    (tmp_path / "m" / "lexical.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ModelDirError):
        LexicalIndex.load(tmp_path / "m")


@pytest.mark.parametrize("name", ["paper", "english"])
def test_streamed_build_equals_the_list_build(name):
    rng = np.random.default_rng(1)
    words = ["the", "Cat", "cats", "running", "ran", "1/2", "in.", "x", "héllo", "a"]
    texts = [" ".join(rng.choice(words, size=rng.integers(0, 9))) for _ in range(300)]
    an = Analyzer.named(name)
    _, vocab, id_lists = analyzed([str(i) for i in range(300)], texts, an)
    ref = count_matrix(id_lists, len(vocab))
    vocab2, counts = analyzed_counts(texts, an)
    assert vocab2.terms == vocab.terms
    assert counts.dtype == ref.dtype and counts.shape == ref.shape
    for a in ("indptr", "indices", "data"):
        assert np.array_equal(getattr(counts, a), getattr(ref, a)), a
