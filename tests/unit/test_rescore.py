"""Stage 3: a cross-encoder re-scoring the first hits of a search (``ranking.rescore``, the
bundle's ``rescorer``, ``index build --rescorer`` and ``serve --rescore``)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.data import open_dataset
from semsearch.index import Bundle, build_bundle
from semsearch.plugins import create_model
from semsearch.ranking.rescore import rescore_top


@dataclass(frozen=True)
class _Hit:
    doc_id: str
    score: float


class _ByLength:
    """Scores a pair by its document's length (the longer the better); counts its calls."""

    name = "fake-ce"

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[str]]] = []

    def score_pairs(self, queries, docs):  # type: ignore[no-untyped-def]
        self.calls.append((list(queries), list(docs)))
        return np.array([float(len(d)) for d in docs])


def test_rescore_top_reorders_only_the_first_hits_in_one_call():
    texts = {"a": "x", "b": "xxx", "c": "xx", "d": "xxxxx", "e": "xxxx", "f": "xx"}
    ranked = [[_Hit(d, 10.0 - i) for i, d in enumerate("abcde")], [_Hit("f", 1.0), _Hit("c", 0.5)], []]
    ce = _ByLength()
    out = rescore_top(ce, ["q1", "q2", "q3"], ranked, 3, lambda h: texts[h.doc_id])
    assert len(ce.calls) == 1 and ce.calls[0][0] == ["q1"] * 3 + ["q2"] * 2  # every pair of the batch at once
    assert [h.doc_id for h in out[0]] == ["b", "c", "a", "d", "e"]  # top 3 by length; d, e untouched
    assert [h.score for h in out[0]] == [3.0, 2.0, 1.0, 7.0, 6.0]  # the cross-encoder's scores, then the ranker's
    assert [h.doc_id for h in out[1]] == ["f", "c"]  # a tie keeps the ranker's order
    assert out[2] == []
    with pytest.raises(ValueError, match="depth"):
        rescore_top(ce, ["q"], ranked[:1], 0, lambda h: texts[h.doc_id])


@pytest.fixture
def ce_bundle(tiny_data, tiny_bert, tmp_path):  # type: ignore[no-untyped-def]
    """A BM25 bundle of the tiny data set with a (random-headed) tiny cross-encoder as stage 3."""
    ds = open_dataset("tiny")
    out = tmp_path / "ce"
    ce = create_model("bert-rel", base=tiny_bert)
    build_bundle(ds.corpus(), [create_model("bm25", analyzer="english")], out, dataset="tiny", rescorer=ce,
                 rescore_depth=4)
    return out


def test_bundle_rescores_when_asked_and_only_then(ce_bundle, monkeypatch):
    man = json.loads((ce_bundle / "manifest.json").read_text())
    assert man["rescorer"] == {"name": "bert-rel", "path": "rescorer", "depth": 4}
    monkeypatch.delenv("SEMSEARCH_RESCORE", raising=False)
    off = Bundle.load(ce_bundle, result_cache=0)
    assert off.rescorer is not None and not off.rescore  # off by default
    on = Bundle.load(ce_bundle, result_cache=0, rescore=True)
    queries = ["red brick", "blue door handle", "wall"]
    for q in queries:
        plain, again = off.search(q, k=2), off.search(q, k=8)
        r = on.search(q, k=2)
        assert "rescore_ms" in r.timing and "rescore_ms" not in plain.timing
        top4 = [h.doc_id for h in again.hits[:4]]
        want = on.rescorer.score_pairs([q] * len(top4), [on.document_text(d) for d in top4])
        best = [top4[i] for i in sorted(range(len(top4)), key=lambda i: (-want[i], i))]
        assert [h.doc_id for h in r.hits] == best[:2]  # k = 2 < depth: still the best 2 of the first 4
        assert np.allclose([h.score for h in r.hits], sorted(want, reverse=True)[:2], atol=1e-5)
        full = on.search(q, k=8)
        assert [h.doc_id for h in full.hits[4:]] == [h.doc_id for h in again.hits[4:]]  # below the depth: as before
    for env, on, depth in [("on", True, 4), ("7", True, 7), ("off", False, 4), ("0", False, 4)]:  # `serve --rescore [--rescore-depth 7]`
        monkeypatch.setenv("SEMSEARCH_RESCORE", env)
        b = Bundle.load(ce_bundle, result_cache=0)
        assert (b.rescore, b.rescore_depth) == (on, depth), env
    assert Bundle.load(ce_bundle, result_cache=0, rescore=True, rescore_depth=2).rescore_depth == 2


def test_rescorer_must_be_a_cross_encoder_and_present(tiny_data, ce_bundle, tmp_path, make_bundle):
    ds = open_dataset("tiny")
    with pytest.raises(ValueError, match="cross-encoder"):
        build_bundle(ds.corpus(), [create_model("bm25")], tmp_path / "x", rescorer=create_model("bm25"))
    with pytest.raises(ValueError, match="rescore depth"):
        build_bundle(ds.corpus(), [create_model("bm25")], tmp_path / "y", rescore_depth=0)
    plain = make_bundle(tmp_path / "plain")
    with pytest.raises(ValueError, match="no stage-3 cross-encoder"):
        Bundle.load(plain, rescore=True)


def test_cli_rescore_depth_needs_a_rescorer(tiny_data, tmp_path):
    r = CliRunner().invoke(app, ["index", "build", "--data", "tiny", "--models", "bm25", "--out", str(tmp_path / "b"),
                                 "--rescore-depth", "5"])
    assert r.exit_code != 0 and "--rescore-depth needs --rescorer" in r.output
    r = CliRunner().invoke(app, ["serve", str(tmp_path / "b"), "--rescore-depth", "5"])
    assert r.exit_code != 0 and "--rescore-depth needs --rescore" in r.output
    r = CliRunner().invoke(app, ["serve", str(tmp_path / "b"), "--rescore", "--rescore-depth", "0"])
    assert r.exit_code != 0 and "--rescore-depth must be >= 1, got 0" in r.output


def test_serve_rescore_runs_stage_3_in_the_workers(ce_bundle, serve_bundle, monkeypatch):
    """``semsearch serve --rescore --rescore-depth 3`` (two workers): every search's timing has
    the cross-encoder's stage. (Without the flag ``serve`` sets the variable the workers read to
    "off", which ``test_bundle_rescores_when_asked_and_only_then`` covers in-process; a second
    two-worker launch to show it again cost ~20 s of CI.)"""
    import httpx

    monkeypatch.delenv("SEMSEARCH_RESCORE", raising=False)
    with serve_bundle(ce_bundle, "--workers", "2", "--result-cache", "0", "--rescore", "--rescore-depth", "3") as (base, _):
        for i in range(6):  # new connections: both workers answer
            body = httpx.get(base + "/search", params={"q": f"red brick {i}", "k": 5}, timeout=30).json()
            assert "rescore_ms" in body["timing_ms"], body["timing_ms"]
