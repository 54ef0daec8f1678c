"""Stage 3: a cross-encoder re-scoring the first hits of a search (``ranking.rescore``, the
bundle's ``rescorer``, ``index build --rescorer`` and ``serve --rescore``)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.data import open_dataset
from semsearch.index import Bundle, build_bundle
from semsearch.index.bundle import LoadOptions
from semsearch.models import ModelDirError
from semsearch.plugins import create_model
from semsearch.ranking.rescore import check_weight, rescore_top


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
    out = rescore_top(ce, ["q1", "q2", "q3"], ranked, 3, lambda h: texts[h.doc_id])  # weight inf: its order alone
    assert len(ce.calls) == 1 and ce.calls[0][0] == ["q1"] * 3 + ["q2"] * 2  # every pair of the batch at once
    assert [h.doc_id for h in out[0]] == ["b", "c", "a", "d", "e"]  # top 3 by length; d, e untouched
    assert [h.score for h in out[0]] == [3.0, 2.0, 1.0, 7.0, 6.0]  # the cross-encoder's scores, then the ranker's
    assert [h.doc_id for h in out[1]] == ["f", "c"]  # a tie keeps the ranker's order
    assert out[2] == []
    with pytest.raises(ValueError, match="depth"):
        rescore_top(ce, ["q"], ranked[:1], 0, lambda h: texts[h.doc_id])


def test_rescore_top_blends_the_rankers_and_the_cross_encoders_standardised_scores():
    texts = {"a": "x", "b": "xxx", "c": "xx", "d": "xxxxx", "e": "x"}
    ranked = [[_Hit(d, 10.0 - i) for i, d in enumerate("abcde")], [_Hit("e", 2.0)]]
    z = math.sqrt(1.5)  # 1, 0, -1 (and 1, 3, 2) standardised: ±1.2247
    out = rescore_top(_ByLength(), ["q", "r"], ranked, 3, lambda h: texts[h.doc_id], 1.0)
    # ranker (10, 9, 8) standardised: a z, b 0, c -z; cross-encoder (lengths 1, 3, 2): a -z, b z, c 0
    assert [h.doc_id for h in out[0]] == ["b", "a", "c", "d", "e"]
    assert np.allclose([h.score for h in out[0]], [z, 0.0, -z, 7.0, 6.0])
    assert [(h.doc_id, h.score) for h in out[1]] == [("e", 0.0)]  # one hit: nothing to standardise
    light = rescore_top(_ByLength(), ["q"], ranked[:1], 3, lambda h: texts[h.doc_id], 0.25)
    assert [h.doc_id for h in light[0]] == ["a", "b", "c", "d", "e"]  # the ranker's margin wins at a low weight
    for bad in (0, -1.0, math.nan, True, "1"):
        with pytest.raises(ValueError, match="must be a number > 0, or inf"):
            check_weight(bad)  # type: ignore[arg-type]
    assert check_weight(math.inf) == math.inf and check_weight(2) == 2.0


@pytest.fixture
def ce_bundle(tiny_data, tiny_bert, tmp_path):  # type: ignore[no-untyped-def]
    """A BM25 bundle of the tiny data set with a (random-headed) tiny cross-encoder as stage 3."""
    ds = open_dataset("tiny")
    out = tmp_path / "ce"
    ce = create_model("bert-rel", base=tiny_bert)
    build_bundle(
        ds.corpus(),
        [create_model("bm25", analyzer="english")],
        out,
        dataset="tiny",
        rescorer=ce,
        rescore_depth=4,
        rescore_weight=math.inf,
    )
    return out


def test_bundle_rescores_when_asked_and_only_then(ce_bundle):
    man = json.loads((ce_bundle / "manifest.json").read_text())
    assert man["rescorer"] == {"name": "bert-rel", "path": "rescorer", "depth": 4, "weight": None}  # its order alone
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
    for opts, on, depth in [
        (LoadOptions(rescore=True), True, 4),
        (LoadOptions(rescore=True, rescore_depth=7), True, 7),
        (LoadOptions(rescore=False), False, 4),
    ]:  # `serve --rescore [--rescore-depth 7]`: each worker's LoadOptions
        b = Bundle.load(ce_bundle, opts.replace(result_cache=0))
        assert (b.rescore, b.rescore_depth) == (on, depth), opts
    assert Bundle.load(ce_bundle, result_cache=0, rescore=True, rescore_depth=2).rescore_depth == 2


def test_bundle_blends_at_the_weight_it_was_built_with_unless_told(tiny_data, tiny_bert, tmp_path):
    ds = open_dataset("tiny")
    out = tmp_path / "blend"
    build_bundle(
        ds.corpus(),
        [create_model("bm25", analyzer="english")],
        out,
        dataset="tiny",
        rescorer=create_model("bert-rel", base=tiny_bert),
        rescore_depth=4,
    )
    man_path = out / "manifest.json"
    man = json.loads(man_path.read_text())
    assert man["rescorer"]["weight"] == 1.0  # a new bundle blends by default
    b = Bundle.load(out, result_cache=0, rescore=True)
    assert b.rescore_weight == 1.0
    plain, r = Bundle.load(out, result_cache=0), b.search("red brick", k=6)
    top = plain.search("red brick", k=6).hits
    want = rescore_top(b.rescorer, [r.query], [top], 4, lambda h: b.document_text(h.doc_id), 1.0)[0]
    assert [h.doc_id for h in r.hits] == [h.doc_id for h in want]
    assert np.allclose([h.score for h in r.hits], [h.score for h in want], atol=1e-5)
    assert Bundle.load(out, rescore=True, rescore_weight=3.0).rescore_weight == 3.0
    # serve --rescore-weight 0.5: each worker's LoadOptions
    assert Bundle.load(out, LoadOptions(rescore=True, rescore_weight=0.5)).rescore_weight == 0.5
    for bad in (-2, "heavy"):
        with pytest.raises(ValueError, match=r"rescore.weight"):
            LoadOptions(rescore=True, rescore_weight=bad)  # type: ignore[arg-type]
    for weight, want_w in ((None, math.inf), ("absent", math.inf), (0.0, "bad"), ("1", "bad")):
        m = json.loads(man_path.read_text())
        if weight == "absent":  # a bundle built before the blend: the cross-encoder's order alone, as then
            del m["rescorer"]["weight"]
        else:
            m["rescorer"]["weight"] = weight
        man_path.write_text(json.dumps(m))
        if want_w == "bad":
            with pytest.raises(ModelDirError, match=r"manifest.json: rescorer.weight must be a number > 0"):
                Bundle.load(out, rescore=True)
        else:
            assert Bundle.load(out, rescore=True).rescore_weight == want_w, weight


def test_rescorer_must_be_a_cross_encoder_and_present(tiny_data, ce_bundle, tmp_path, make_bundle):
    ds = open_dataset("tiny")
    with pytest.raises(ValueError, match="cross-encoder"):
        build_bundle(ds.corpus(), [create_model("bm25")], tmp_path / "x", rescorer=create_model("bm25"))
    with pytest.raises(ValueError, match="rescore depth"):
        build_bundle(ds.corpus(), [create_model("bm25")], tmp_path / "y", rescore_depth=0)
    with pytest.raises(ValueError, match="rescore weight must be a number > 0"):
        build_bundle(ds.corpus(), [create_model("bm25")], tmp_path / "z", rescore_weight=-1.0)
    plain = make_bundle(tmp_path / "plain")
    with pytest.raises(ValueError, match="no stage-3 cross-encoder"):
        Bundle.load(plain, rescore=True)


def test_cli_rescore_options_are_checked(tiny_data, tmp_path):
    build = ["index", "build", "--data", "tiny", "--models", "bm25", "--out", str(tmp_path / "b")]
    serve = ["serve", str(tmp_path / "b")]
    for args, message in [
        ([*build, "--rescore-depth", "5"], "--rescore-depth needs --rescorer"),
        ([*serve, "--rescore-depth", "5"], "--rescore-depth needs --rescore"),
        ([*serve, "--rescore", "--rescore-depth", "0"], "bundle load parameter 'rescore_depth' must be >= 1, got 0"),
        ([*build, "--rescore-weight", "2"], "--rescore-weight needs --rescorer"),
        ([*serve, "--rescore-weight", "2"], "--rescore-weight needs --rescore"),
        ([*serve, "--rescore", "--rescore-weight", "0"], "'rescore_weight' must be a number > 0, or inf"),
        ([*build, "--rescorer-onnx", "int8"], "--rescorer-onnx needs --rescorer"),
        (
            [*build, "--rescorer", str(tmp_path), "--rescorer-onnx", "int4"],
            "--rescorer-onnx must be one of fp32, int8, off",
        ),
    ]:
        r = CliRunner().invoke(app, args)
        assert r.exit_code != 0 and message in r.output, (args, r.output)


def test_cli_build_keeps_the_rescore_weight(tiny_data, tiny_bert, tmp_path):
    create_model("bert-rel", base=tiny_bert).save(tmp_path / "ce")
    base = ["index", "build", "--data", "tiny", "--models", "bm25", "--rescorer", str(tmp_path / "ce"), "--onnx", "off"]
    r = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "b"), "--rescore-weight", "0"])
    assert r.exit_code != 0 and "--rescore-weight must be a number > 0, or inf" in r.output
    assert not (tmp_path / "b").exists()  # refused before anything was built
    for arg, want in ((["--rescore-weight", "inf"], None), (["--rescore-weight", "2.5"], 2.5), ([], 1.0)):
        out = tmp_path / f"b{len(arg)}{want}"
        r = CliRunner().invoke(app, [*base, "--out", str(out), *arg])
        assert r.exit_code == 0, r.output
        assert json.loads((out / "manifest.json").read_text())["rescorer"]["weight"] == want


def test_cli_build_exports_the_rescorer_at_its_own_precision(tiny_data, tiny_bert, tmp_path):
    """``--rescorer-onnx`` sets the stage-3 cross-encoder's precision apart from ``--onnx``'s (the
    encoders'); without it the rescorer follows ``--onnx``."""
    create_model("bert-rel", base=tiny_bert).save(tmp_path / "ce")
    create_model("bert-rep", base=tiny_bert).save(tmp_path / "enc")
    base = ["index", "build", "--data", "tiny", "--models", str(tmp_path / "enc"), "--rescorer", str(tmp_path / "ce")]
    for arg, enc, ce in (
        (["--onnx", "off", "--rescorer-onnx", "int8"], None, "int8"),
        (["--onnx", "int8", "--rescorer-onnx", "off"], "int8", None),
        (["--onnx", "int8"], "int8", "int8"),
    ):
        out = tmp_path / "-".join(arg)
        r = CliRunner().invoke(app, [*base, "--out", str(out), *arg])
        assert r.exit_code == 0, r.output
        models = json.loads((out / "manifest.json").read_text())["models"]
        got_enc = [json.loads(f.read_text())["precision"] for f in (out / models[0]["path"]).rglob("onnx.json")]
        got_ce = [json.loads(f.read_text())["precision"] for f in (out / "rescorer").glob("onnx.json")]
        assert got_enc == ([enc] if enc else []) and got_ce == ([ce] if ce else []), (arg, got_enc, got_ce)
        bundle = Bundle.load(out, rescore=True)
        assert (bundle.rescorer.runner is None) == (ce is None)
        assert bundle.search("red brick", k=3)  # stage 3 runs through what was kept


def test_serve_rescore_runs_stage_3_in_the_workers(ce_bundle, serve_bundle):
    """``semsearch serve --rescore --rescore-depth 3`` (two workers): every search's timing has
    the cross-encoder's stage. (Without the flag the workers' ``LoadOptions`` say rescore=False,
    which ``test_bundle_rescores_when_asked_and_only_then`` covers in-process, as a second
    two-worker launch would do again more slowly.)"""
    import httpx

    with serve_bundle(ce_bundle, "--workers", "2", "--result-cache", "0", "--rescore", "--rescore-depth", "3") as (
        base,
        _,
    ):
        for i in range(6):  # new connections: both workers answer
            body = httpx.get(base + "/search", params={"q": f"red brick {i}", "k": 5}, timeout=30).json()
            assert "rescore_ms" in body["timing_ms"], body["timing_ms"]
