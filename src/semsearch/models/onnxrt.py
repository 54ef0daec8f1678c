"""ONNX Runtime inference for the transformer models (BERT(rep) and BERT(rel)).

Why: on a CPU, ONNX Runtime with its BERT graph fusions (attention, LayerNorm, GELU fused into
single kernels) encodes faster than eager torch, with the same vectors (cosine >= 0.9999,
checked at export). Optional int8 dynamic quantisation (weights int8, activations quantised per
batch) is faster again, at a quality cost that must be measured (``benchmarks/encode_speed.py``
measures the speeds and reports the Home Depot dev nDCG@10 drop).

A model folder may hold ``model.onnx`` beside its safetensors weights, with ``onnx.json`` saying
which weights it was exported from (their SHA-256), its precision and the cosine to torch measured
at export. ``TransformerModel.load`` uses it for inference (encoding, scoring) when the model runs
on the CPU and the file matches the weights; training always runs in torch, and a model trained
after loading drops its ONNX session (``TransformerModel.train_mode``).

Written with torch's exporter and onnxruntime's own optimizer and quantiser rather than optimum:
optimum's exporter pulls a second copy of the model stack and offers nothing we need here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..data.files import write_json
from .base import ModelDirError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

ONNX_FILE = "model.onnx"
ONNX_META = "onnx.json"
PRECISIONS = ("fp32", "int8")
WEIGHT_FILES = ("model.safetensors", "head.safetensors", "pooling.safetensors")
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
MIN_COSINE_FP32 = 0.9999
# Texts of varied lengths: the export traces a padded batch (so the attention mask stays in the
# graph) and the check compares torch and ONNX Runtime on single texts and on padded batches.
PROBES = (
    "cordless drill",
    "red cat",
    "stainless steel kitchen sink 33 in. double bowl undermount",
    "led light bulb 60 watt equivalent soft white",
    "something to kill weeds in the lawn",
    "x",
    "Husky 52 in. 10-Drawer Mobile Workbench with Solid Wood Top, Black",
    "2x4 stud 8 ft",
)


class OnnxError(ModelDirError):
    """An ONNX export that failed its check, or an ``onnx.json`` that does not match the weights."""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def available() -> bool:
    """Whether onnxruntime (and onnx, for export) can be imported."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


class OnnxRunner:
    """One ONNX Runtime session over a model's tokenised inputs: ``run(batch) -> float32 array``.
    ``threads`` defaults to torch's thread count, so the one thread setting (``serve`` sets one per
    worker) governs both runtimes."""

    def __init__(self, path: str | Path, *, threads: int | None = None, precision: str = "fp32") -> None:
        self.path = Path(path)
        self.precision = precision
        self.set_threads(threads)

    def set_threads(self, threads: int | None = None) -> None:
        """(Re)open the session with ``threads`` intra-op threads (None: torch's thread count)."""
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads or torch.get_num_threads()
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        self.session = ort.InferenceSession(str(self.path), so, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def run(self, batch: dict[str, Any]) -> np.ndarray:
        """The model's output for a tokenised batch (torch tensors or numpy arrays)."""
        feed = {}
        for name in self.inputs:
            x = batch[name]
            feed[name] = (x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)).astype(
                np.int64, copy=False
            )
        return self.session.run(None, feed)[0]


class _Forward(torch.nn.Module):
    """The model's ``forward`` over positional tokenizer outputs, for the exporter."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.net = model.net
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        return self.model.forward(
            {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        )


def _probe_batches(model: Any) -> list[dict[str, torch.Tensor]]:
    """Tokenised probes: one padded batch of all, then each alone (pairs for a cross-encoder)."""
    pairs = model.name == "bert-rel"

    def tok(texts: Sequence[str]) -> dict[str, torch.Tensor]:
        a = list(texts)
        b = [PROBES[(i + 3) % len(PROBES)] for i in range(len(a))] if pairs else None
        t = model.tokenizer(a, b, padding=True, truncation=True, max_length=64, return_tensors="pt")
        if "token_type_ids" not in t:
            t["token_type_ids"] = torch.zeros_like(t["input_ids"])
        return {k: t[k] for k in INPUTS}

    return [tok(PROBES)] + [tok([p]) for p in PROBES]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Smallest row cosine of two outputs; scalar outputs (a cross-encoder) compare as 1-d vectors."""
    a, b = a.reshape(len(a), -1).astype(np.float64), b.reshape(len(b), -1).astype(np.float64)
    if a.shape[1] == 1:
        a, b = a.T, b.T
    num = (a * b).sum(1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float(np.min(np.where(den > 0, num / np.maximum(den, 1e-30), 1.0)))


def weights_digest(folder: str | Path) -> str:
    """SHA-256 over a saved transformer's weight files (BERT, and the head or pooling weights
    where present): what an ONNX export in the folder must have been made from."""
    h = hashlib.sha256()
    for name in WEIGHT_FILES:
        f = Path(folder) / name
        if f.is_file():
            h.update(name.encode() + b"\0" + sha256(f).encode())
    return h.hexdigest()


def export(model: Any, out: str | Path, *, precision: str = "fp32") -> dict[str, Any]:
    """Export ``model`` (a BiEncoder or CrossEncoder) to ``out/model.onnx`` + ``out/onnx.json``.

    The graph is torch's export of the model's ``forward`` (dynamic batch and length), fused by
    onnxruntime's BERT optimizer, and for ``int8`` dynamically quantised. It is checked against
    torch on the probe texts: fp32 below cosine 0.9999 is refused (``OnnxError``); int8's cosine is
    recorded, its quality is for the benchmark to judge. Saving the model beside it writes the
    weights' digest into ``onnx.json``, so a stale export is never used
    (``TransformerModel.save_onnx``). Files are written to a temporary folder and moved in last:
    nothing half-written remains."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    import onnx
    from onnxruntime.transformers import optimizer

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    net = model.net
    was_training = net.training
    net.eval()
    probes = _probe_batches(model)
    wrapper = _Forward(model).eval()  # the exporter restores the wrapper's mode, and so the net's, afterwards
    with tempfile.TemporaryDirectory(dir=out, prefix=".onnx-tmp-") as tmp:
        raw, fused = Path(tmp) / "raw.onnx", Path(tmp) / "fused.onnx"
        first = probes[0]
        axes = {name: {0: "batch", 1: "tokens"} for name in INPUTS}
        with torch.no_grad(), warnings.catch_warnings(), _eager_attention(net.bert):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                wrapper,
                tuple(first[k] for k in INPUTS),
                str(raw),
                input_names=list(INPUTS),
                output_names=["output"],
                dynamic_axes={**axes, "output": {0: "batch"}},
                opset_version=17,
                dynamo=False,
            )
        cfg = net.bert.config
        opt = optimizer.optimize_model(
            str(raw), model_type="bert", num_heads=cfg.num_attention_heads, hidden_size=cfg.hidden_size, opt_level=1
        )
        opt.save_model_to_file(str(fused))
        final = Path(tmp) / ONNX_FILE
        if precision == "int8":
            import logging

            from onnxruntime.quantization import QuantType, quantize_dynamic

            logging.getLogger().setLevel(logging.ERROR)  # its advice to pre-process is for image models
            quantize_dynamic(
                str(fused),
                str(final),
                weight_type=QuantType.QInt8,
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
        else:
            fused.rename(final)
        runner = OnnxRunner(final, precision=precision)
        net.eval()
        with torch.no_grad():
            cos = min(_cosine(model.forward(b).float().numpy(), runner.run(b)) for b in probes)
        net.train(was_training)
        if precision == "fp32" and cos < MIN_COSINE_FP32:
            raise OnnxError(
                f"{model.name}: the ONNX export disagrees with torch (cosine {cos:.6f} < {MIN_COSINE_FP32})"
            )
        meta = {
            "model": model.name,
            "precision": precision,
            "cosine_to_torch": round(cos, 7),
            "opset": 17,
            "weights_sha256": None,
            "onnxruntime": _ort_version(),
        }
        write_json(Path(tmp) / ONNX_META, meta)
        for name in (ONNX_FILE, ONNX_META):
            os.replace(Path(tmp) / name, out / name)
    return meta


@contextlib.contextmanager
def _eager_attention(bert: PreTrainedModel) -> Iterator[None]:
    """``bert`` with transformers' eager attention while it is exported, its own afterwards. The
    export of its default (SDPA) attention is a pattern onnxruntime's BERT optimizer does not fuse
    (its MatMuls, Transposes and Softmaxes stay apart); the eager one fuses into ``Attention``,
    ``BiasGelu`` and ``EmbedLayerNormalization`` nodes, with the same vectors (the export is
    checked against torch either way)."""
    before = bert.config._attn_implementation  # noqa: SLF001  # transformers has no public getter of it
    bert.set_attn_implementation("eager")
    try:
        yield
    finally:
        bert.set_attn_implementation(before)


def _ort_version() -> str:
    import onnxruntime

    return onnxruntime.__version__


def read_meta(folder: str | Path) -> dict[str, Any] | None:
    """``onnx.json`` of a model folder, or None when the folder has no ONNX export."""
    d = Path(folder)
    if not (d / ONNX_FILE).is_file() or not (d / ONNX_META).is_file():
        return None
    try:
        meta = json.loads((d / ONNX_META).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise OnnxError(f"{d / ONNX_META}: unreadable ({e})") from None
    if not isinstance(meta, dict) or meta.get("precision") not in PRECISIONS:
        raise OnnxError(f"{d / ONNX_META}: 'precision' must be one of {', '.join(PRECISIONS)}")
    return meta


def open_runner(folder: str | Path, *, model: str) -> OnnxRunner | None:
    """The ONNX session of a saved model folder, or None when it has none or onnxruntime is not
    installed. An export for another model or other weights is refused with the file named."""
    meta = read_meta(folder)
    if meta is None or not available():
        return None
    d = Path(folder)
    if meta.get("model") != model:
        raise OnnxError(f"{d / ONNX_META}: exported from a {meta.get('model')!r} model, this folder holds {model!r}")
    if meta.get("weights_sha256") != weights_digest(d):
        raise OnnxError(
            f"{d / ONNX_FILE}: exported from other weights than this folder's "
            f"{' + '.join(n for n in WEIGHT_FILES if (d / n).is_file())} (re-export it: semsearch export-onnx {d})"
        )
    return OnnxRunner(d / ONNX_FILE, precision=meta["precision"])
