"""DSSM and CLSM: letter-trigram neural encoders with separate query and document towers.

- DSSM (Huang et al. 2013; CLSM paper §5.2, Table 5 rows 12-13): the text's trigram bag →
  300 → 300 → 128, tanh. The first layer is an ``EmbeddingBag`` over trigram ids with counts as
  weights, so a text costs its non-zeros, never the vocabulary size.
- CLSM (Shen et al. 2014 §3): each word's trigram bag, a window of ``window`` words (padded with
  ``<s>``) → convolution of K = 300 tanh units at every word position → max-pooling over positions
  → 128 tanh. The convolution over the concatenated window is computed as ``window`` per-word
  projections (one ``EmbeddingBag`` with ``window·K`` outputs, applied once per distinct word of a
  batch) shifted and summed — the same function, without a dense window vector.

Relevance is the cosine of the two towers' outputs (§3.5). Training lives in ``training/``;
weights are saved as safetensors plus a JSON config holding the trigram vocabulary."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..device import model_device, run_split
from ..text import Bags, TrigramHasher, WordTable
from .base import (
    ModelDirError,
    TrainedModel,
    dense_top_k,
    id_ranks,
    positions,
    read_config,
    same_length,
    seal,
    write_config,
)
from .hparams import CLSMParams, DSSMParams, EncoderParams

WEIGHTS = "weights.safetensors"
ENCODE_CHUNK = 16_384
"""Texts a DSSM encodes at a time: the more texts, the more of their words are shared (each
distinct word's first layer is computed once per chunk), while a chunk's layers stay small."""
ENCODE_ROWS = 4096
"""Texts a DSSM tower takes through its layers at a time, within a chunk: their hidden layers
(4096 x 300 floats) are reused from one batch to the next and the last layer is written straight
into the result, so an encoding does not pay page faults (the kernel zeroing new pages) for fresh
layers per chunk, a concatenation and a normalised copy. The values are the same either way."""


def glorot(t: torch.Tensor, fan_in: int, fan_out: int, gen: torch.Generator) -> None:
    """Uniform ±sqrt(6 / (fan_in + fan_out)), the initialisation the papers follow."""
    r = float(np.sqrt(6.0 / (fan_in + fan_out)))
    with torch.no_grad():
        t.uniform_(-r, r, generator=gen)


def _bag_tensors(b: Bags, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(torch.as_tensor(a, device=device) for a in (b.ids, b.offsets[:-1], b.weights))  # type: ignore[return-value]  # three tensors


# ------------------------------------------------------------------------------------ kernels
class _NumpyTanh(torch.autograd.Function):
    """tanh by numpy's SIMD kernel; the backward is torch's own ``tanh_backward`` (g·(1 − y²))."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        np.tanh(x.detach().numpy(), out=y.numpy())
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(g, y)


def tanh_(x: torch.Tensor) -> torch.Tensor:
    """``tanh`` in place, for inference: on CPU float32 numpy's kernel over row blocks, one per
    torch thread (``run_split``). The same values as ``tanh``, bit for bit."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or not x.is_contiguous() or x.requires_grad:
        return x.tanh_()
    a = x.numpy()
    if torch.get_num_threads() < 2 or a.size < 1 << 17 or a.ndim != 2:
        np.tanh(a, out=a)
        return x
    run_split(lambda lo, hi: np.tanh(a[lo:hi], out=a[lo:hi]), len(a))
    return x


def tanh(x: torch.Tensor) -> torch.Tensor:
    """``torch.tanh``, on CPU float32 computed by numpy: this torch build's CPU tanh runs far
    behind numpy's vectorised one (same values within an ulp); other devices use torch's."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or not x.is_contiguous():
        return torch.tanh(x)
    if torch.is_grad_enabled() and x.requires_grad:
        return _NumpyTanh.apply(x)
    y = torch.empty_like(x)
    np.tanh(x.numpy(), out=y.numpy())
    return y


class _BagProduct(torch.autograd.Function):
    """X·W for sparse bags X (``EmbeddingBag(mode="sum")`` with counts as weights). The weight
    gradient Xᵀ·G is a second bag-sum over the transposed bags (per vocabulary row, the texts
    holding it), instead of EmbeddingBag's backward, which sorts every entry to build it. With
    ``touched`` (the vocabulary rows the batch holds, ascending) it is a sparse gradient of those
    rows only: a batch holds a few thousand of the vocabulary's rows, and a dense (V, dim) gradient
    costs more to write, add and step over than to compute."""

    @staticmethod
    def forward(
        ctx,
        weight: torch.Tensor,
        ids: torch.Tensor,
        offsets: torch.Tensor,
        counts: torch.Tensor,
        t_rows: torch.Tensor,
        t_offsets: torch.Tensor,
        t_counts: torch.Tensor,
        touched: torch.Tensor,
    ) -> torch.Tensor:
        ctx.save_for_backward(t_rows, t_offsets, t_counts, touched)
        ctx.sparse, ctx.vocab = len(touched) > 0, weight.shape[0]
        return F.embedding_bag(ids, weight, offsets, mode="sum", per_sample_weights=counts)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        t_rows, t_offsets, t_counts, touched = ctx.saved_tensors
        gw = F.embedding_bag(t_rows, g.contiguous(), t_offsets, mode="sum", per_sample_weights=t_counts)
        if ctx.sparse:
            gw = torch.sparse_coo_tensor(
                touched[None], gw, (ctx.vocab, g.shape[1]), is_coalesced=True, check_invariants=False
            )
        return gw, None, None, None, None, None, None, None


def bag_product(weight: torch.Tensor, b: Bags) -> torch.Tensor:
    """``EmbeddingBag(mode="sum")(ids, offsets, per_sample_weights=counts)`` over ``weight``: each
    bag's weighted sum of rows (the first layer's sparse-times-dense product), with a cheaper
    weight gradient when one is needed (``_BagProduct``): sparse over the batch's rows when the
    weight says ``sparse_grad`` (``training.trainer.make_optimizer`` sets it for plain SGD)."""
    dev = weight.device
    ids, offsets, counts = _bag_tensors(b, dev)
    if not (torch.is_grad_enabled() and weight.requires_grad):
        return F.embedding_bag(ids, weight, offsets, mode="sum", per_sample_weights=counts)
    sparse = bool(getattr(weight, "sparse_grad", False))
    rows, weights, starts, touched = b.columns(weight.shape[0], touched_only=sparse)
    t = (torch.as_tensor(a, device=dev) for a in (rows, starts, weights, touched))
    return _BagProduct.apply(weight, ids, offsets, counts, *t)


class _WindowMax(torch.autograd.Function):
    """CLSM's convolution and max-pooling (§3.3-3.4) in one: for every text and filter the max
    over its positions of bias + Σ_j slots[rows[p, j]] (``slots``: each distinct word's
    contribution in each window slot, then the ``<s>`` padding's ``pad``; ``rows``: each
    position's window of slot rows, positions grouped by text, text i's from ``starts[i]``).
    Nothing of positions x K size is kept for autograd: the backward routes each text's gradient
    to the window slots of its winning position only (the max's gradient), on the CPU gathered
    per slot row from the positions that read it. On the CPU both
    directions are one compiled pass each (``_clsm_kernels``), reading the padding where it lies
    rather than copying every word's slots to append it; elsewhere the convolution is one
    gather-and-sum and the max a running maximum over position blocks."""

    @staticmethod
    def forward(
        ctx,
        slots: torch.Tensor,
        pad: torch.Tensor,
        bias: torch.Tensor,
        rows: torch.Tensor,
        starts: np.ndarray,
    ) -> torch.Tensor:
        n, k_dim = len(starts) - 1, slots.shape[1]
        if slots.device.type == "cpu":
            from . import _clsm_kernels as kern

            longest = int(np.diff(starts).max(initial=1))
            local: np.ndarray = np.arange(longest, dtype=kern.winner_dtype(longest))  # winners within their texts
            best = torch.empty((n, k_dim), dtype=slots.dtype)
            winner = np.empty((n, k_dim), dtype=local.dtype)
            run_split(
                kern.window_max,
                n,
                slots.detach().contiguous().numpy(),
                pad.detach().contiguous().numpy(),
                rows.numpy(),
                starts,
                local,
                best.numpy(),
                winner,
            )
            ctx.winner, ctx.local = winner, local
        else:
            best, winner_t = _window_max_torch(torch.cat([slots, pad]).detach(), rows, starts)
            ctx.winner = winner_t
        ctx.rows, ctx.shapes, ctx.starts = rows, (slots.shape[0], pad.shape[0]), starts
        return best + bias

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        rows, winner = ctx.rows, ctx.winner
        n_slots, n_pad = ctx.shapes
        g = g.contiguous()
        if g.device.type == "cpu":
            from . import _clsm_kernels as kern

            ptr, pos, text = kern.slot_occurrences(rows.numpy(), n_slots + n_pad, ctx.starts, ctx.local)
            cuts = kern.balanced_cuts(ptr, torch.get_num_threads())  # one run of rows a thread
            gs = torch.empty((n_slots + n_pad, g.shape[1]), dtype=g.dtype)  # every row written once
            run_split(kern.window_max_grad, len(cuts) - 1, g.numpy(), winner, ptr, pos, text, gs.numpy(), cuts, grain=1)
        else:
            gs = torch.zeros((n_slots + n_pad, g.shape[1]), dtype=g.dtype, device=g.device)
            won = winner.long()
            for j in range(rows.shape[1]):  # window slot j of each winning position gets the text's gradient
                gs.scatter_add_(0, rows[:, j][won], g)
        return gs[:n_slots], gs[n_slots:], g.sum(0), None, None


def _window_max_torch(slots: torch.Tensor, rows: torch.Tensor, starts: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """``_clsm_kernels.window_max`` in torch, for other devices: the convolution of every
    position (one ``embedding_bag``), then a running maximum over position-major blocks of the
    texts sorted longest first; returns each text's max and winning position (first on ties)."""
    n = len(starts) - 1
    segment = np.repeat(np.arange(n, dtype=np.int64), np.diff(starts))
    perm, blocks, order = _position_major(segment, n)
    dev = slots.device
    perm_t = torch.as_tensor(perm, device=dev)
    conv = F.embedding_bag(rows[perm_t], slots, mode="sum")
    block_starts = np.concatenate([[0], np.cumsum(blocks[:-1])]).astype(np.int64)
    best, at = _running_max_torch(conv, blocks, block_starts)
    arg = torch.as_tensor(block_starts, device=dev)[at] + torch.arange(len(best), device=dev)[:, None]
    order_t = torch.as_tensor(order, device=dev)
    out = torch.empty_like(best)
    out[order_t] = best
    winner = torch.empty_like(arg)
    winner[order_t] = perm_t[arg]  # back from position-major rows to the text-grouped ones
    return out, winner


def _running_max_torch(conv: torch.Tensor, blocks: list[int], starts: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sorted text and filter the max over its positions' rows of ``conv`` (position p of the
    first ``blocks[p]`` texts is row ``starts[p]`` + rank) and the position holding it, the first
    of equal maxima."""
    n = blocks[0]
    best = conv[:n].clone()
    at = torch.zeros(best.shape, dtype=torch.int64, device=conv.device)
    for p, m in enumerate(blocks[1:], 1):
        blk = conv[int(starts[p]) : int(starts[p]) + m]
        at[:m].masked_fill_(blk > best[:m], p)
        torch.maximum(best[:m], blk, out=best[:m])
    return best, at


def _position_major(segment: np.ndarray, n_texts: int) -> tuple[np.ndarray, list[int], np.ndarray]:
    """For positions grouped by text (``segment``), the permutation that lists them position-major
    over the texts sorted longest first, the block sizes (texts having a p-th position, for each
    p), and for each sorted rank its text."""
    lengths = np.bincount(segment, minlength=n_texts)
    order = np.argsort(-lengths, kind="stable")
    rank = np.empty(n_texts, dtype=np.int64)
    rank[order] = np.arange(n_texts)
    starts = np.zeros(n_texts, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    p = np.arange(len(segment), dtype=np.int64) - starts[segment]
    blocks = np.bincount(p) if len(p) else np.zeros(1, dtype=np.int64)
    perm = np.lexsort((rank[segment], p))
    return perm, blocks.tolist(), order


# ------------------------------------------------------------------------------------ features
def csr_take(indptr: np.ndarray, values: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of a CSR-like structure: (new indptr, gathered positions into ``values``)."""
    starts, ends = indptr[rows], indptr[rows + 1]
    lengths = ends - starts
    out_ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_ptr[1:])
    pos = np.repeat(starts - out_ptr[:-1], lengths) + np.arange(out_ptr[-1], dtype=np.int64)
    return out_ptr, pos


@dataclass(frozen=True)
class WordBags:
    """DSSM input of a batch by its distinct words: their trigram bags (``words``) and each text's
    words as positions into them (text i: ``positions[indptr[i]:indptr[i + 1]]``). A text's
    trigram bag is its words' bags laid end to end, and the first layer is linear in it, so the
    layer runs once per distinct word and each text sums its words' rows (``DSSMTower``): the
    same sums in another order, with several times fewer rows to gather and to scatter back (a
    batch's titles share most of their words)."""

    words: Bags
    positions: np.ndarray  # int64, into words
    indptr: np.ndarray  # (texts + 1,)

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def texts(self) -> Bags:
        """The texts as bags over ``words`` (one entry, weight 1, per word position)."""
        return Bags(self.positions, np.ones(len(self.positions), dtype=np.float32), self.indptr)


class WordBagFeatures:
    """DSSM input of a fixed list of texts: their word ids (the word table's, first
    ``max_words`` of each), batched as ``WordBags``."""

    def __init__(self, table: WordTable, texts: Sequence[str]):
        self.table = table
        self.indptr, self.ids = table.encode(texts)

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def batch(self, rows: np.ndarray) -> WordBags:
        ptr, pos = csr_take(self.indptr, self.ids, rows)
        positions, words = self.table.id_bags(self.ids[pos])
        return WordBags(words, positions, ptr)


@dataclass(frozen=True)
class WindowBatch:
    """CLSM input of a batch: trigram bags of its distinct words, and for every word position of
    every text the window's word indices (``n_words`` = the ``<s>`` padding)."""

    bags: Bags
    windows: np.ndarray  # (window, positions) int64 indices into the distinct words (+ padding)
    segment: np.ndarray  # (positions,) the text of each position
    starts: np.ndarray  # (texts + 1,) text i's positions are starts[i]..starts[i + 1] (at least one)

    @property
    def n_texts(self) -> int:
        return len(self.starts) - 1

    @property
    def n_words(self) -> int:
        return len(self.bags)


class WindowFeatures:
    """CLSM input of a fixed list of texts: the texts by their distinct words, as DSSM's
    (``WordBagFeatures``), with each word position's window built per batch."""

    def __init__(self, table: WordTable, texts: Sequence[str], window: int):
        self.words, self.window = WordBagFeatures(table, texts), window

    def __len__(self) -> int:
        return len(self.words)

    def batch(self, rows: np.ndarray) -> WindowBatch:
        from . import _clsm_kernels as kern

        wb = self.words.batch(rows)
        windows, segment, starts = kern.word_windows(wb.indptr, wb.positions, self.window, len(wb.words))
        return WindowBatch(wb.words, windows, segment, starts)


# ------------------------------------------------------------------------------------ networks
def segment_max(values: torch.Tensor, segment: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Max over the rows of each segment (ragged texts), per column, and the row holding it (the
    last one on ties). Differentiable in ``values`` (gradient to the winner), as CLSM's max-pooling
    (§3.3); the winning rows are what the explanation reports."""
    seg = segment[:, None].expand_as(values)
    shape, dev = (n, values.shape[1]), values.device
    best = torch.full(shape, float("-inf"), dtype=values.dtype, device=dev).scatter_reduce(0, seg, values, "amax")
    with torch.no_grad():
        rows = torch.arange(len(values), device=dev)[:, None].expand_as(values)
        won = torch.where(values == best[segment], rows, -1)
        arg = torch.full(shape, -1, dtype=torch.long, device=dev).scatter_reduce(0, seg, won, "amax")
    return best, arg


class DSSMTower(nn.Module):
    """Trigram bag → hidden layers → output, tanh throughout (DSSM §3.1)."""

    def __init__(self, vocab: int, hidden: Sequence[int], out: int, gen: torch.Generator):
        super().__init__()
        sizes = [*hidden, out]
        self.embed = nn.EmbeddingBag(vocab, sizes[0], mode="sum")
        self.bias = nn.Parameter(torch.zeros(sizes[0]))
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        glorot(self.embed.weight, vocab, sizes[0], gen)
        for layer in cast("Iterable[nn.Linear]", self.layers):
            glorot(layer.weight, layer.in_features, layer.out_features, gen)
            nn.init.zeros_(layer.bias)

    def forward(self, x: Bags | WordBags) -> torch.Tensor:
        if not torch.is_grad_enabled():
            return self.encode(x)
        if isinstance(x, WordBags):  # once per distinct word (sparse weight gradient), then per text
            h = bag_product(bag_product(self.embed.weight, x.words), x.texts())
        else:
            h = bag_product(self.embed.weight, x)
        h = tanh(h + self.bias)
        for layer in self.layers:
            h = tanh(layer(h))
        return h

    def encode(self, x: Bags | WordBags) -> torch.Tensor:
        """``forward`` without autograd (encoding): the same operations, bias and tanh in place
        on each layer's fresh output, tanh over all torch threads (``tanh_``)."""
        if isinstance(x, WordBags):
            return self.encode_words(x.words, x.positions, x.indptr)
        h = bag_product(self.embed.weight, x)
        h += self.bias
        tanh_(h)
        return self._upper(h)

    def encode_words(
        self, words: Bags, positions: np.ndarray, indptr: np.ndarray, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``encode`` of texts given as positions among distinct ``words`` (``WordTable.word_bags``):
        the first layer is linear in the trigram counts, so it runs once per distinct word and
        each text sums its words' rows — the same values as ``encode`` up to summation order.
        ``ENCODE_ROWS`` texts at a time go through the layers above, into ``out`` (one row per
        text; a new tensor when None)."""
        per_word = bag_product(self.embed.weight, words)
        dev = per_word.device
        n = len(indptr) - 1
        if out is None:
            out = torch.empty(
                n,
                self.bias.shape[0] if not len(self.layers) else cast(nn.Linear, self.layers[-1]).out_features,
                device=dev,
            )
        pos = torch.as_tensor(positions, device=dev)
        rows = min(n, ENCODE_ROWS)  # the hidden layers' buffers, reused by every row batch
        scratch = [
            per_word.new_empty(rows, layer.out_features) for layer in cast("Iterable[nn.Linear]", self.layers[:-1])
        ]
        for s in range(0, n, ENCODE_ROWS):
            e = min(s + ENCODE_ROWS, n)
            a, b = int(indptr[s]), int(indptr[e])
            h = F.embedding_bag(pos[a:b], per_word, torch.as_tensor(indptr[s:e] - a, device=dev), mode="sum")
            h += self.bias
            tanh_(h)
            self._upper(h, out[s:e], scratch)
        return out

    def _upper(
        self, h: torch.Tensor, out: torch.Tensor | None = None, scratch: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """The layers above the first, in place where it can (inference): the last into ``out``
        when given, layer i below it into ``scratch[i]``'s first rows when given (buffers at
        least as long as ``h``)."""
        if not len(self.layers):
            return h if out is None else out.copy_(h)
        last = len(self.layers) - 1
        for i, layer in enumerate(cast("Iterable[nn.Linear]", self.layers)):
            dst = out if i == last else scratch[i][: len(h)] if scratch is not None else None
            h = tanh_(
                torch.addmm(layer.bias, h, layer.weight.t())
                if dst is None
                else torch.addmm(layer.bias, h, layer.weight.t(), out=dst)
            )
        return h


class CLSMTower(nn.Module):
    """Word-n-gram windows → convolution (K) → max-pool → semantic layer (L), tanh (CLSM §3)."""

    def __init__(self, vocab: int, window: int, conv: int, out: int, gen: torch.Generator):
        """The layers, initialised from ``gen``.

        Args:
            vocab: trigram vocabulary size.
            window: words per convolution window.
            conv: convolution units (K).
            out: output units.
            gen: the initialisation's random generator."""
        super().__init__()
        self.window, self.conv = window, conv
        self.embed = nn.EmbeddingBag(vocab, window * conv, mode="sum")  # W_c split per window slot
        self.pad = nn.Parameter(torch.zeros(window * conv))  # the <s> word's trigram vector · W_c
        self.bias = nn.Parameter(torch.zeros(conv))
        self.semantic = nn.Linear(conv, out)
        glorot(self.embed.weight, window * vocab, conv, gen)
        glorot(self.pad, window * vocab, conv, gen)
        glorot(self.semantic.weight, conv, out, gen)
        nn.init.zeros_(self.semantic.bias)

    def forward(self, x: WindowBatch) -> torch.Tensor:
        """``top(pool(convolve(x)))`` computed without materialising the convolution for autograd
        (``_WindowMax``)."""
        dev = model_device(self)
        slots = bag_product(self.embed.weight, x.bags).view(-1, self.conv)  # row w·window + j: word w in slot j
        rows = np.ascontiguousarray((x.windows * self.window + np.arange(self.window)[:, None]).T)
        pooled = _WindowMax.apply(
            slots, self.pad.view(-1, self.conv), self.bias, torch.as_tensor(rows, device=dev), x.starts
        )
        return self.top(pooled)

    def convolve(self, x: WindowBatch) -> torch.Tensor:
        """Pre-activation convolution output at every word position: (positions, K)."""
        dev = model_device(self)
        ids, offsets, weights = _bag_tensors(x.bags, dev)
        per_word = self.embed(ids, offsets, per_sample_weights=weights)
        # row w·window + j of ``slots`` is word w's contribution in window slot j; each position's
        # convolution is the bag (sum) of its window's slots — one fused gather-and-sum
        slots = torch.cat([per_word, self.pad[None, :]]).view(-1, self.conv)
        windows = torch.as_tensor(x.windows * self.window + np.arange(self.window)[:, None], device=dev).T
        return self.bias + F.embedding_bag(windows, slots, mode="sum")

    @staticmethod
    def pool(conv: torch.Tensor, x: WindowBatch) -> torch.Tensor:
        """Max over each text's positions; a text's positions are contiguous and non-empty."""
        lengths = torch.as_tensor(np.diff(x.starts), device=conv.device)
        return torch.segment_reduce(conv, "max", lengths=lengths)

    def top(self, pooled: torch.Tensor) -> torch.Tensor:
        # max over positions of tanh(conv) = tanh(max over positions of conv): tanh is monotonic
        return tanh(self.semantic(tanh(pooled)))


class TwoTowers(nn.Module):
    """A query tower and a document tower (one shared tower when ``shared``)."""

    def __init__(self, make, shared: bool):
        super().__init__()
        self.q = make()
        self.d = self.q if shared else make()

    def query(self, x: Any) -> torch.Tensor:
        return self.q(x)

    def doc(self, x: Any) -> torch.Tensor:
        return self.d(x)


# ------------------------------------------------------------------------------------ models
class NeuralEncoder(TrainedModel):
    """Shared machinery of the trigram encoders: featurising, encoding, cosine ranking over an
    encoded collection, and safetensors persistence. Subclasses define the towers."""

    p: EncoderParams

    def __init__(self, **params: Any):
        super().__init__(**params)
        self.hasher: TrigramHasher | None = None
        self.net: TwoTowers | None = None
        self._ids: list[str] = []
        self._doc_vecs = np.zeros((0, 0), dtype=np.float32)
        self._position: dict[str, int] = {}
        self._id_order = np.zeros(0, dtype=np.int64)

    # -- architecture (subclasses) --------------------------------------------------------------
    def _make_tower(self, vocab: int, gen: torch.Generator) -> nn.Module:
        raise NotImplementedError

    def features(self, texts: Sequence[str]) -> WordBagFeatures | WindowFeatures:
        """Featurise a fixed list of texts once; ``.batch(rows)`` gives tower input."""
        raise NotImplementedError

    def vocabulary(self, texts: Sequence[str]) -> TrigramHasher:
        """The trigram vocabulary of this model over training ``texts`` (``max_trigrams``, ``max_words``)."""
        return TrigramHasher.fit(texts, max_size=self.p.max_trigrams, max_words=self.p.max_words)

    def build(self, hasher: TrigramHasher, seed: int = 0) -> None:
        """Create freshly initialised towers over ``hasher``'s vocabulary."""
        gen = torch.Generator().manual_seed(seed)
        self.hasher = hasher
        self.net = TwoTowers(lambda: self._make_tower(len(hasher), gen), self.p.shared)

    def copy_from(self, other: NeuralEncoder) -> None:
        """Take ``other``'s vocabulary and weights (a trained trial of the same kind)."""
        self.hasher, self.net = other.hasher, other.net

    # -- encoding -------------------------------------------------------------------------------
    def _batched(
        self, texts: Sequence[str], fn: Callable[[Any, Any], torch.Tensor], batch_size: int = 4096
    ) -> torch.Tensor | None:
        """``fn(net, batch input)`` over ``texts`` in batches, in eval mode without gradients,
        concatenated (None for no texts)."""
        net = self._require()
        feats = self.features(texts)
        out = []
        was_training = net.training
        net.eval()
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                rows = np.arange(start, min(start + batch_size, len(texts)), dtype=np.int64)
                out.append(fn(net, feats.batch(rows)))
        net.train(was_training)
        return torch.cat(out) if out else None

    def _encode(self, texts: Sequence[str], side: str) -> np.ndarray:
        v = self._batched(texts, lambda net, x: net.query(x) if side == "query" else net.doc(x))
        if v is None:
            return np.zeros((0, self.dim), dtype=np.float32)
        return torch.nn.functional.normalize(v, dim=1, eps=1e-12).cpu().numpy()

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length query vectors (float32): their dot products are cosines."""
        return self._encode(texts, "query")

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, "doc")

    @property
    def dim(self) -> int:
        return self.p.out

    # -- ranking ----------------------------------------------------------------------------------
    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        same_length(doc_ids, texts, "doc ids", "texts")
        self._ids = list(doc_ids)
        self._doc_vecs = self.encode_documents(texts)
        self._position = {d: i for i, d in enumerate(self._ids)}
        self._id_order = id_ranks(self._ids)

    @property
    def doc_ids(self) -> Sequence[str]:
        return self._ids

    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        same_length(queries, candidates, "queries", "candidate lists")
        q = self.encode_queries(queries)
        out = []
        for i, docs in enumerate(candidates):
            pos = positions(self._position, docs)
            out.append((self._doc_vecs[pos] @ q[i]).astype(np.float64))
        return out

    def retrieve(self, queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        """Exact top-k by cosine over the encoded collection (ties by doc id)."""
        if k < 1:
            raise ValueError("k must be at least 1")
        return dense_top_k(self.encode_queries(queries), self._doc_vecs, self._ids, self._id_order, k)

    # -- persistence --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        net = self._require()
        assert self.hasher is not None  # set with the net
        d = Path(path)
        write_config(
            d,
            {
                "model": self.name,
                "params": self.params(),
                "vocabulary": {"max_words": self.hasher.max_words, "trigrams": self.hasher.trigrams},
            },
        )
        save_weights(net, d)
        seal(d)

    @classmethod
    def load(cls, path: str | Path) -> NeuralEncoder:
        d = Path(path)
        cfg = read_config(d, expect=cls.name)
        try:
            model = cls(**cls.saved_params(cfg["params"]))
            vocab = cfg["vocabulary"]
            model.build(TrigramHasher(vocab["trigrams"], max_words=vocab["max_words"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ModelDirError(f"{d}: corrupt or incomplete {cls.name} model ({e})") from None
        load_weights(model._require(), d, cls.name)
        return model


def save_weights(net: nn.Module, d: Path) -> None:
    """A network's state as safetensors (``WEIGHTS``) in model directory ``d``."""
    from safetensors.torch import save_file

    save_file({k: v.detach().contiguous() for k, v in net.state_dict().items()}, str(d / WEIGHTS))


def load_weights(net: nn.Module, d: Path, name: str) -> None:
    """Load ``d/WEIGHTS`` into ``net``; a corrupt file, or one whose tensors do not fit the
    architecture the config describes, is a ``ModelDirError``."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        state = load_file(str(d / WEIGHTS))
    except (OSError, SafetensorError) as e:
        raise ModelDirError(f"{d}: corrupt or incomplete {name} model ({e})") from None
    expected = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in state.items()}
    if expected != got:
        diff = sorted(k for k in set(expected) | set(got) if expected.get(k) != got.get(k))
        shown = "; ".join(
            f"{k}: config.json gives {expected.get(k, 'no such tensor')}, {WEIGHTS} has {got.get(k, 'no such tensor')}"
            for k in diff[:3]
        )
        raise ModelDirError(
            f"{d}: weights do not match the config's architecture ({shown}"
            f"{f'; {len(diff) - 3} more' if len(diff) > 3 else ''})"
        )
    net.load_state_dict(state)


class DSSM(NeuralEncoder):
    """Deep structured semantic model; ``hidden`` layers then ``out`` units, tanh."""

    name = "dssm"
    Params = DSSMParams
    p: DSSMParams

    def _make_tower(self, vocab: int, gen: torch.Generator) -> nn.Module:
        return DSSMTower(vocab, self.p.hidden, self.p.out, gen)

    def features(self, texts: Sequence[str]) -> WordBagFeatures:
        self._require()
        return WordBagFeatures(self.hasher.table, texts)  # type: ignore[union-attr]  # trained model

    def _encode(self, texts: Sequence[str], side: str) -> np.ndarray:
        """Unit vectors of ``texts`` by one tower, ``ENCODE_CHUNK`` texts at a time, each chunk's
        first layer once per distinct word (``DSSMTower.encode_words``)."""
        net = self._require()
        tower = net.q if side == "query" else net.d
        table = self.hasher.table  # type: ignore[union-attr]  # trained model
        was_training = net.training
        net.eval()
        with torch.inference_mode():
            out = torch.empty(len(texts), self.dim, device=model_device(tower))
            for start in range(0, len(texts), ENCODE_CHUNK):
                indptr, positions, words = table.word_bags(texts[start : start + ENCODE_CHUNK])
                tower.encode_words(words, positions, indptr, out[start : start + ENCODE_CHUNK])
            out /= torch.linalg.vector_norm(out, dim=1, keepdim=True).clamp_min_(1e-12)  # F.normalize, in place
        net.train(was_training)
        return out.cpu().numpy()


class CLSM(NeuralEncoder):
    """Convolutional latent semantic model: ``window`` words, ``conv`` (K) filters, ``out`` (L)."""

    name = "clsm"
    Params = CLSMParams
    p: CLSMParams

    def __init__(self, **params: Any):
        super().__init__(**params)
        self._table: WordTable | None = None

    def build(self, hasher: TrigramHasher, seed: int = 0) -> None:
        super().build(hasher, seed)
        self._table = WordTable(hasher)

    def copy_from(self, other: NeuralEncoder) -> None:
        super().copy_from(other)
        self._table = other._table  # type: ignore[attr-defined]  # noqa: SLF001  # a CLSM: same class

    def _make_tower(self, vocab: int, gen: torch.Generator) -> nn.Module:
        return CLSMTower(vocab, self.p.window, self.p.conv, self.p.out, gen)

    def features(self, texts: Sequence[str]) -> WindowFeatures:
        self._require()
        return WindowFeatures(self._table, texts, self.p.window)  # type: ignore[arg-type]  # trained model
