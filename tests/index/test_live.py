"""Changes without rebuilds (``index.live``, ``index.changes``) on the tiny bundles: upserts and
deletes seen by the next search, replayed from the log by a new process's index, a torn last
line ignored, and a merge equal to a full rebuild over the same documents."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from semsearch.index.bundle import Bundle
from semsearch.index.bundle.reindex import reindex
from semsearch.index.changes import ChangeLog, ChangeLogError, encode_line
from semsearch.index.live import CHANGES_SEQ, Document, LiveIndex

QUERIES = ["red", "blue cat", "zorblax lamp", "green tree", "dog", "sofa door"]


def _ids(live_or_bundle, q, k=10):  # type: ignore[no-untyped-def]
    return [h.doc_id for h in live_or_bundle.search_many([q], k)[0].hits]


def _answers(x, k=10):  # type: ignore[no-untyped-def]
    return [[(h.doc_id, h.score) for h in r.hits] for r in x.search_many(QUERIES, k)]


@pytest.fixture(params=["two_stage", "plain"])
def bundle(request, make_two_stage, make_bundle, tmp_path):  # type: ignore[no-untyped-def]
    if request.param == "two_stage":
        return make_two_stage(tmp_path / "B")
    return make_bundle(tmp_path / "B")


def _live(path, tmp_path):  # type: ignore[no-untyped-def]
    return LiveIndex(Bundle.load(path, result_cache=0), tmp_path / "changes", writes=True)


def test_upserts_and_deletes_are_seen_by_the_next_search(bundle, tmp_path):
    live = _live(bundle, tmp_path)
    base_ids = live.base.corpus.ids
    assert "new1" not in _ids(live, "zorblax")
    seq = live.upsert([Document("new1", "zorblax lamp", "a zorblax thing")])
    assert seq == 1
    r = live.search_many(["zorblax"], 10)[0]
    assert "new1" in [h.doc_id for h in r.hits]  # (where a tiny ranker puts it is its own affair)
    row = next(x for x in live.hits(r) if x.doc_id == "new1")
    assert (row.title, row.text) == ("zorblax lamp", "a zorblax thing")
    # a base document replaced: its old text no longer matches, its new one does
    victim = base_ids[0]
    live.upsert([Document(victim, "quux widget", "quux")])
    assert victim in _ids(live, "quux")
    old_title = Bundle.load(bundle).corpus.titles[0]
    r = live.search_many([old_title], 50)[0]
    assert [x.title for x in live.hits(r) if x.doc_id == victim] in ([], ["quux widget"])  # once, new text
    # a base document deleted; a delta document deleted
    gone = base_ids[1]
    live.delete(gone)
    live.delete("new1")
    for q in QUERIES:
        assert gone not in _ids(live, q, 50) and "new1" not in _ids(live, q, 50)
    with pytest.raises(KeyError):
        live.delete("new1")
    assert len(live) == len(base_ids) - 1
    live.close()


def test_a_new_index_replays_the_log_and_answers_the_same(bundle, tmp_path):
    live = _live(bundle, tmp_path)
    live.upsert([Document("n1", "zorblax lamp", ""), Document("n2", "red zorblax", "blue")])
    live.delete(live.base.corpus.ids[3])
    live.upsert([Document(live.base.corpus.ids[4], "green green tree", "")])
    again = _live(bundle, tmp_path)
    assert again.state.seq == live.state.seq == 3
    assert _answers(again) == _answers(live)
    live.close()
    again.close()


def test_a_torn_last_line_is_ignored_and_cut_off_by_the_next_append(tmp_path):
    log = ChangeLog(tmp_path / "c")
    assert log.append({"op": "delete", "ids": ["a"]}) == 1
    with open(log.path, "ab") as f:
        f.write(encode_line({"seq": 2, "op": "delete", "ids": ["b"]})[:-7])  # killed mid-write
    records, _ = log.read()
    assert [r["seq"] for r in records] == [1]
    assert log.append({"op": "delete", "ids": ["c"]}) == 2
    records, _ = log.read()
    assert [(r["seq"], r["ids"]) for r in records] == [(1, ["a"]), (2, ["c"])]
    # a whole line with a bad checksum is corruption, never skipped
    data = log.path.read_bytes().replace(b'"c"', b'"d"')
    log.path.write_bytes(data)
    with pytest.raises(ChangeLogError, match="checksum"):
        log.read()


def test_rotation_keeps_the_records_after_the_merged_one(tmp_path):
    log = ChangeLog(tmp_path / "c")
    for i in range(4):
        log.append({"op": "delete", "ids": [str(i)]})
    log.rotate(2)
    records, _ = log.read()
    assert [(r["seq"], r["op"]) for r in records] == [(2, "checkpoint"), (3, "delete"), (4, "delete")]
    assert log.append({"op": "delete", "ids": ["x"]}) == 5
    log.rotate(5)
    assert [(r["seq"], r["op"]) for r in log.read()[0]] == [(5, "checkpoint")]
    assert log.append({"op": "delete", "ids": ["y"]}) == 6


def test_after_a_merge_searches_equal_a_full_rebuild(bundle, tmp_path):
    original = tmp_path / "original"
    shutil.copytree(bundle, original)
    live = _live(bundle, tmp_path)
    ids = live.base.corpus.ids
    live.upsert([Document("n1", "zorblax lamp", "a zorblax"), Document(ids[2], "blue blue cat", "")])
    live.delete(ids[5])
    live.upsert([Document("n2", "red dog item", "near a tree")])
    documents = live.documents()
    live.merge()
    assert live.base.manifest[CHANGES_SEQ] == 3 and not live.state.docs and not live.state.dead
    assert ChangeLog(tmp_path / "changes").read()[0][0]["op"] == "checkpoint"
    rebuilt = reindex(original, documents, tmp_path / "rebuilt")
    full = Bundle.load(rebuilt, result_cache=0)
    assert full.corpus.ids == live.base.corpus.ids
    assert _answers(live) == _answers(full)
    # and a rebuild that encodes every document again ranks the same (scores to float rounding)
    fresh = Bundle.load(reindex(original, documents, tmp_path / "fresh", reuse=False), result_cache=0)
    for a, b in zip(_answers(live), _answers(fresh), strict=True):
        assert [d for d, _ in a] == [d for d, _ in b]
        np.testing.assert_allclose([s for _, s in a], [s for _, s in b], rtol=1e-5, atol=1e-6)
    # a restarted index over the merged bundle replays nothing and answers the same
    again = _live(bundle, tmp_path)
    assert again.state.seq == 3 and _answers(again) == _answers(live)
    live.close()
    again.close()
    full.close()
    fresh.close()


def test_a_bundle_rebuilt_at_the_served_path_is_picked_up(make_bundle, tmp_path):
    path = make_bundle(tmp_path / "B")
    live = LiveIndex(Bundle.load(path), poll=0.05)
    before = _answers(live)
    assert not live.reload()
    docs = live.documents()
    keep = [i for i in range(len(docs)) if i % 2 == 0]
    from semsearch.data import Corpus

    half = Corpus([docs.ids[i] for i in keep], [docs.titles[i] for i in keep], [docs.texts[i] for i in keep])
    reindex(path, half, path)
    assert live.reload()
    assert len(live) == len(keep) and _answers(live) != before
    live.close()


def test_a_background_merge_starts_at_merge_at(make_bundle, tmp_path):
    path = make_bundle(tmp_path / "B")
    live = LiveIndex(Bundle.load(path, result_cache=0), tmp_path / "changes", writes=True, merge_at=3)
    live.upsert([Document("n1", "zorblax", ""), Document("n2", "quux", "")])
    assert live._merging is None
    live.delete("d00")
    live._merging.join(60)  # type: ignore[union-attr]  # started
    assert live.base.manifest[CHANGES_SEQ] == 2 and not live.state.docs and not live.state.dead
    assert {"n1", "n2"} <= set(live.base.corpus.ids) and "d00" not in live.base.corpus.index
    live.close()


def test_index_merge_and_reindex_commands(make_bundle, tmp_path):
    from typer.testing import CliRunner

    from semsearch.cli import app
    from semsearch.data import write_corpus

    path = make_bundle(tmp_path / "B")
    live = LiveIndex(Bundle.load(path, result_cache=0), writes=True)  # (the default log: B.changes)
    live.upsert([Document("n1", "zorblax", "")])
    documents = live.documents()
    live.close()
    r = CliRunner().invoke(app, ["index", "merge", str(path)])
    assert r.exit_code == 0, r.output
    assert Bundle.load(path).manifest[CHANGES_SEQ] == 1
    write_corpus(documents, tmp_path / "docs.jsonl")
    r = CliRunner().invoke(
        app, ["index", "reindex", str(tmp_path / "original"), "--data", str(tmp_path / "docs.jsonl"), "--out", "x"]
    )
    assert r.exit_code != 0 and "original" in r.output
    r = CliRunner().invoke(
        app, ["index", "reindex", str(path), "--data", str(tmp_path / "docs.jsonl"), "--out", str(tmp_path / "R")]
    )
    assert r.exit_code == 0, r.output
    assert _answers(Bundle.load(tmp_path / "R", result_cache=0)) == _answers(Bundle.load(path, result_cache=0))


def test_fresh_segments_serve_only_the_current_copy_of_each_document(bundle, tmp_path, monkeypatch):
    import semsearch.index.live as live_module

    monkeypatch.setattr(live_module, "FOLD_MIN", 2)  # a fresh segment of its own from the third change on
    live = _live(bundle, tmp_path)
    seen_two = False
    for i in range(12):
        live.upsert([Document(f"n{i}", f"zorblax item{i}", "lamp")])
        seen_two |= len(live.state.segments) == 2
    live.upsert([Document("n3", "quux renamed", "sofa"), Document("n7", "quux renamed too", "")])
    live.delete("n5")
    live.delete("n10")
    seen_two |= len(live.state.segments) == 2
    assert seen_two, "never a stable and a fresh segment"
    assert len(live) == len(live.base.corpus) + 10
    for q in [*QUERIES, "zorblax", "quux", "item3", "item7 lamp"]:
        r = live.search_many([q], 50)[0]
        ids = [h.doc_id for h in r.hits]
        assert len(ids) == len(set(ids)), ids  # no stale copy beside the current one
        assert "n5" not in ids and "n10" not in ids
        for row in live.hits(r):
            if row.doc_id in ("n3", "n7"):
                assert row.title.startswith("quux renamed")
    assert "n3" in _ids(live, "quux", 20) and "n7" in _ids(live, "quux", 20)
    live.close()


def test_a_read_only_index_serves_the_logged_changes_and_takes_none(make_bundle, tmp_path):
    b = make_bundle(tmp_path / "B")
    from semsearch.index.live import changes_dir

    writer = LiveIndex(Bundle.load(b, result_cache=0), writes=True)
    writer.upsert([Document("n1", "zorblax lamp", "")])
    writer.delete(writer.base.corpus.ids[0])
    assert changes_dir(b).is_dir()
    reader = LiveIndex(Bundle.load(b, result_cache=0))  # (serve without --allow-writes)
    assert reader.state.seq == 2 and _answers(reader) == _answers(writer)
    assert "n1" in _ids(reader, "zorblax") and len(reader) == len(writer)
    with pytest.raises(PermissionError):
        reader.upsert([Document("n2", "x", "")])
    plain = LiveIndex(Bundle.load(make_bundle(tmp_path / "C"), result_cache=0))  # no log: none made
    assert plain.log is None and not changes_dir(tmp_path / "C").exists()
    for x in (writer, reader, plain):
        x.close()
