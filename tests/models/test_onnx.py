"""ONNX Runtime inference for the transformers (models/onnxrt.py) on the tiny random BERT: the same
outputs as torch, persistence bound to the weights, stale or mismatched exports refused, training
after export falls back to torch, the CLI's --onnx and export-onnx."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.models import ModelDirError, onnxrt
from semsearch.models.base import seal
from semsearch.models.onnxrt import OnnxError
from semsearch.models.transformer import BiEncoder, CrossEncoder
from semsearch.plugins import load_model

QUERIES = ["red chair", "blue table lamp", "a much longer query about a green sofa with cushions", "x"]
DOCS = ["red chair deluxe", "blue lamp", "", "green sofa with three cushions and a matching footstool"]


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture(scope="module")
def bi(tiny_bert):  # type: ignore[no-untyped-def]
    return BiEncoder(base=tiny_bert)


def test_fp32_export_gives_torch_vectors(bi) -> None:  # type: ignore[no-untyped-def]
    bi.runner = None
    ref_q, ref_d = bi.encode_queries(QUERIES), bi.encode_documents(DOCS)
    meta = bi.use_onnx("fp32")
    assert meta["precision"] == "fp32" and meta["cosine_to_torch"] >= onnxrt.MIN_COSINE_FP32
    assert bi.runner is not None
    q, d = bi.encode_queries(QUERIES), bi.encode_documents(DOCS)
    assert _cos(ref_q, q).min() >= 0.9999 and np.allclose(ref_d, d, atol=1e-4)
    # a padded batch and one text at a time agree (the attention mask is in the graph)
    one = np.vstack([bi.encode_queries([t]) for t in QUERIES])
    assert np.allclose(one, q, atol=1e-4)


def test_saved_export_loads_and_is_bound_to_weights(bi, tiny_bert, tmp_path) -> None:  # type: ignore[no-untyped-def]
    if bi.runner is None:
        bi.use_onnx("fp32")
    bi.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / onnxrt.ONNX_META).read_text())
    assert meta["weights_sha256"] == onnxrt.weights_digest(tmp_path / "m") and meta["model"] == "bert-rep"
    m = load_model(tmp_path / "m")
    assert m.runner is not None and m.runner.precision == "fp32"
    assert np.allclose(m.encode_queries(QUERIES), bi.encode_queries(QUERIES), atol=1e-5)
    # other weights under the same export: refused, naming the file and the fix
    other = BiEncoder(base=tiny_bert)
    with torch.no_grad():
        next(other.net.parameters()).add_(0.5)
    other.save(tmp_path / "other")
    shutil.copyfile(tmp_path / "other" / "model.safetensors", tmp_path / "m" / "model.safetensors")
    with pytest.raises(ModelDirError, match=r"model\.safetensors: sha256 .* comes from another model"):
        load_model(tmp_path / "m")  # the folder's seal catches the swap first
    seal(tmp_path / "m")  # a folder whose checksums were re-made over the new weights: the export is still stale
    with pytest.raises(OnnxError, match=r"model\.onnx: exported from other weights.*export-onnx"):
        load_model(tmp_path / "m")


def test_mismatched_or_unreadable_metadata_is_refused(bi, tmp_path) -> None:  # type: ignore[no-untyped-def]
    if bi.runner is None:
        bi.use_onnx("fp32")
    bi.save(tmp_path / "m")
    meta_path = tmp_path / "m" / onnxrt.ONNX_META
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "model": "bert-rel"}))
    with pytest.raises(ModelDirError, match=r"onnx\.json: sha256"):
        load_model(tmp_path / "m")  # any change to the sealed folder is refused first
    for text, message in [
        (json.dumps({**meta, "model": "bert-rel"}), "exported from a 'bert-rel' model"),
        ("{not json", r"onnx\.json: unreadable"),
        (json.dumps({**meta, "precision": "fp8"}), "'precision' must be one of fp32, int8"),
    ]:
        meta_path.write_text(text)
        seal(tmp_path / "m")  # checksums re-made: the export's own checks still hold
        with pytest.raises(OnnxError, match=message):
            load_model(tmp_path / "m")


def test_training_after_export_falls_back_to_torch(tiny_bert, tmp_path) -> None:  # type: ignore[no-untyped-def]
    m = BiEncoder(base=tiny_bert)
    m.use_onnx("fp32")
    with torch.no_grad():  # what an optimizer step does: the weights change in place
        for p in m.net.parameters():
            p.mul_(1.5)
    fresh = m.encode_queries(QUERIES)
    assert m.runner is None  # the stale export was dropped, not used
    m.runner = None
    assert np.allclose(fresh, m.encode_queries(QUERIES))
    m.save(tmp_path / "m")  # and it is not saved beside the new weights
    assert not (tmp_path / "m" / onnxrt.ONNX_FILE).exists()


def test_cross_encoder_and_int8(tiny_bert) -> None:  # type: ignore[no-untyped-def]
    ce = CrossEncoder(base=tiny_bert)
    ref = ce.score_pairs(QUERIES, DOCS)
    ce.use_onnx("fp32")
    assert np.allclose(ce.score_pairs(QUERIES, DOCS), ref, atol=1e-4)
    graded = CrossEncoder(base=tiny_bert, grades=[0, 1, 2, 3])  # the expected gain is part of the export
    with torch.no_grad():
        graded.net.head.weight.normal_(0, 0.3, generator=torch.Generator().manual_seed(2))
    ref = graded.score_pairs(QUERIES, DOCS)
    graded.use_onnx("fp32")
    assert (
        np.allclose(graded.score_pairs(QUERIES, DOCS), ref, atol=1e-4) and ref.std() > 2e-3
    )  # scores differ beyond the tolerance
    bi = BiEncoder(base=tiny_bert)
    ref_q = bi.encode_queries(QUERIES)
    meta = bi.use_onnx("int8")
    assert meta["precision"] == "int8" and bi.runner.precision == "int8"
    q = bi.encode_queries(QUERIES)
    assert q.shape == ref_q.shape and np.isfinite(q).all()
    assert abs(meta["cosine_to_torch"] - min(_cos(ref_q, q).min(), 1.0)) < 0.5  # recorded, and roughly what we see
    with pytest.raises(ValueError, match="precision must be one of fp32, int8"):
        bi.use_onnx("fp16")


def test_cli_export_and_index_build_option(tiny_bert, tmp_path, tiny_data) -> None:  # type: ignore[no-untyped-def]
    cli = CliRunner()
    BiEncoder(base=tiny_bert).save(tmp_path / "enc")
    r = cli.invoke(app, ["export-onnx", str(tmp_path / "enc"), "--precision", "fp32"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "enc" / onnxrt.ONNX_FILE).is_file()
    assert load_model(tmp_path / "enc").runner is not None
    r = cli.invoke(
        app,
        [
            "index",
            "build",
            "--data",
            "tiny",
            "--models",
            f"bm25,{tmp_path / 'enc'}",
            "--onnx",
            "fp16",
            "--out",
            str(tmp_path / "b"),
        ],
    )
    assert r.exit_code == 2 and "--onnx must be one of fp32, int8, off, got 'fp16'" in r.output
    assert not (tmp_path / "b").exists()
    r = cli.invoke(
        app,
        [
            "index",
            "build",
            "--data",
            "tiny",
            "--models",
            f"bm25,{tmp_path / 'enc'}",
            "--onnx",
            "off",
            "--out",
            str(tmp_path / "b"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert not list((tmp_path / "b").rglob(onnxrt.ONNX_FILE))  # torch: no export in the bundle
    r = cli.invoke(
        app, ["index", "build", "--data", "tiny", "--models", f"bm25,{tmp_path / 'enc'}", "--out", str(tmp_path / "b2")]
    )
    assert r.exit_code == 0, r.output
    assert len(list((tmp_path / "b2").rglob(onnxrt.ONNX_FILE))) == 1  # fp32 by default, checksummed in the manifest
    manifest = json.loads((tmp_path / "b2" / "manifest.json").read_text())
    assert any(f.endswith(onnxrt.ONNX_FILE) for f in manifest["files"])


def test_export_fuses_attention_and_leaves_the_model_as_it_was(tiny_bert, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The exported graph is the fused one (onnxruntime's Attention op, not SDPA's unfused MatMuls:
    the torch export of the default attention did not fuse), and the model keeps its own attention."""
    import onnx

    bi = BiEncoder(base=tiny_bert)
    before = bi.net.bert.config._attn_implementation
    onnxrt.export(bi, tmp_path)
    ops = [n.op_type for n in onnx.load(str(tmp_path / onnxrt.ONNX_FILE)).graph.node]
    layers = bi.net.bert.config.num_hidden_layers
    assert ops.count("Attention") == layers and "Softmax" not in ops
    assert bi.net.bert.config._attn_implementation == before
