"""Training and encoding speed of DSSM and CLSM against their compute ceiling, in one process.

Data: homedepot, the train split's positive pairs (grade >= 3, ~35.6k) and the 54,667 product
titles as the document pool. Sizes as the papers: DSSM 300 → 300 → 128, CLSM window 3, K = 300,
L = 128; softmax over γ·cosine (γ = 10), SGD (lr 0.5), batch 1024, J = 4 and J = 50 negatives.

Measured:
  * training throughput (positive pairs/s) of OUR models: the trainer's own step —
    ``trainer.batch_loss`` (sampling the negative pool, assembling the featurised batch,
    forward, loss) + ``zero_grad`` + ``backward`` + ``optimizer.step`` + reading the loss —
    median of ``--steps`` steps after ``--warmup`` warm-up steps, at torch's default thread
    count and again single-threaded (``torch.set_num_threads(1)``). Phases are timed too:
    batch assembly (numpy: negative sampling, CSR slicing, CLSM window building; timed
    separately with the same calls), forward, backward, optimizer step. A short
    ``train_encoder`` run (1 epoch over a subset of the pairs, its own ``pairs_per_s``) checks
    that the timed loop measures what the trainer does.
  * the COMPUTE CEILING of the same step (``Ceiling``), right after ours at the same thread
    count: only the matrix products of the model's layers at the model's shapes (issue 18's
    ceiling, "a dense matmul of the model's shapes"; ``step_shapes``: per tower its texts, and the
    first layer's input — DSSM: each text's trigram bag; CLSM: each word position's window of
    trigram vectors times W_c, the convolution as the paper writes it, ``position_windows`` — the
    sampled batches' own sparse matrices, not random ones of their sizes), forward and backward:
    the first layer sparse-times-dense (``torch.sparse.mm`` on CSR: X·W, and Xᵀ·G for the weight
    gradient, or the same products as ``F.embedding_bag`` row sums when that is faster — it is,
    ~2x, here), the dense layers ``torch.mm`` (forward, input gradient, weight gradient).
    Activations, the loss, gathers, DSSM's sums of each text's word rows, CLSM's window sums and
    max-pooling over word positions, the optimizer and all Python are left out, so ours / ceiling
    is the fraction of the step's time that is the model's essential arithmetic. Targets (issue
    18): DSSM J=4 ≥ 20k pairs/s, J=50 ≥ 10k, CLSM J=4 ≥ 10k, each at ≥ 50 % of the ceiling.
    Printed beside for both, not judged: the ceiling of the products ours computes, with the
    first layer once per distinct word of the batch (DSSM: its trigram bag; CLSM: its window·K
    slots), each text then summing or windowing its words' rows. It is the stricter one where
    words repeat (CLSM: 1.9-3x the model's shapes, so CLSM's window passes, which it leaves out,
    weigh on the fraction; DSSM: 10-15 % above it).
  * encoding throughput (titles/s) over all titles: ``model.encode_documents(texts)`` on new
    titles (featurisation + towers, the model's words known, its text cache emptied before
    each run; median of ``--reps``), the same on titles met before (text cache warm), with a
    freshly built model (no word known; once), featurisation alone, batch slicing alone
    (CLSM), the document tower alone on precomputed batches, and the tower's ceiling (its
    matrix products alone, forward: DSSM per ``ENCODE_CHUNK`` titles, the first layer over
    the chunk's distinct words as ``encode_documents`` computes it; CLSM batch 4096). Target:
    DSSM ≥ 300k new titles/s.
  * where the time goes: torch.autograd.profiler tables (top ops by self CPU time) of one
    CLSM J=4 step, at the default thread count and single-threaded, and of one DSSM step.

The machine is shared. Torch's parallel regions (2 threads here) wait for their slowest
thread, so when other processes keep the cores busy a 2-thread step can be several times
slower than a 1-thread one; the 1-minute load average is printed at the start and end and
stored with every measurement, and the single-thread figures are the more stable ones. Much of
that slowdown is OpenMP's idle threads spin-waiting for CPU the busy one needs. The script runs
with semsearch's OpenMP default (a short spin, ``GOMP_SPINCOUNT=3000``: semsearch/__init__.py,
in effect because ``_common`` imports semsearch before torch loads) unless the environment sets
``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY``; the hardware line records which (``openmp``). Our
steps run with glibc keeping freed memory (``device.keep_freed_memory``), as the training loop
sets it.

Run (prints tables; writes JSON to --out, default results/bench/train_speed.json):
    .venv/bin/python benchmarks/train_speed.py           # full size, ~10 minutes
    .venv/bin/python benchmarks/train_speed.py --quick   # smoke test: tiny batches, seconds
Data come from $SEMSEARCH_DATA (default ../shared/data). Benchmarks print; they never fail on speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from _common import (
    hardware,
    hardware_line,
    maxrss_mb,
    median_time,
    summary_row,
    write_json,
)  # first: before torch loads
from semsearch.data import TrainingData, open_dataset
from semsearch.device import keep_freed_memory
from semsearch.models.neural import ENCODE_CHUNK, WindowBatch, WordBags
from semsearch.plugins import create_model
from semsearch.text import Bags, TrigramHasher
from semsearch.training.args import EncoderArgs
from semsearch.training.negatives import drawn_documents, random_negatives, sample_pool
from semsearch.training.trainer import Pairs, batch_loss, make_optimizer, train_encoder

GAMMA, LR, SEED, WINDOW = 10.0, 0.5, 0, 3
HIDDEN, OUT, CONV = (300, 300), 128, 300
TARGETS = {("dssm", 4): 20_000, ("dssm", 50): 10_000, ("clsm", 4): 10_000}  # training pairs/s (issue 18 item 2)
CEILING_ROUNDS = 3  # each ceiling is timed this many times in turns, the fastest kept (Ceiling.measure)
FRACTION_TARGET = 0.5  # ... and at least this fraction of the measured ceiling
MODEL_SHAPES = {
    "dssm": "each text's trigram bag",
    "clsm": "the convolution at every word position",
}  # what each model's shapes are
ENCODE_TARGET = {"dssm": 300_000}  # titles/s, featurisation included (issue 18 item 3)
THREADS = torch.get_num_threads()


def load1() -> float:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else float("nan")


def time_steps(step: Callable[[], Any], warmup: int, steps: int, budget_s: float = float("inf")) -> dict[str, Any]:
    """Warm-up calls, then up to ``steps`` timed calls (stopping once ``budget_s`` of timed time
    has passed, after at least one); median and mean step time."""
    for _ in range(warmup):
        step()
    times: list[float] = []
    while len(times) < steps and sum(times) < budget_s:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {
        "steps": len(times),
        "median_step_s": statistics.median(times),
        "mean_step_s": statistics.mean(times),
        "step_s": [round(t, 4) for t in times],
        "load_avg_1min": load1(),
    }


class Batches:
    """Consecutive batches of a seeded permutation of the pairs, as the trainer walks an epoch."""

    def __init__(self, n: int, b: int, rng: np.random.Generator):
        self.n, self.b, self.rng = n, min(b, n), rng
        self.perm, self.start = rng.permutation(n), 0

    def next(self) -> np.ndarray:
        if self.start + self.b > self.n:
            self.perm, self.start = self.rng.permutation(self.n), 0
        rows = self.perm[self.start : self.start + self.b]
        self.start += self.b
        return rows


# ------------------------------------------------------------------------------------ ours
class Ours:
    """Our model, set up as ``trainer._train`` does, stepping exactly as its inner loop."""

    def __init__(self, name: str, j: int, batch: int, hasher: TrigramHasher, data: TrainingData, pairs: Pairs):
        self.name, self.j = name, j
        keep_freed_memory()  # as the training loop (training.loop.epoch_loop) does
        self.model = create_model(name)
        self.model.build(hasher, SEED)
        self.net = self.model.net
        self.qf, self.df = self.model.features(pairs.q_texts), self.model.features(data.doc_texts)
        self.model_texts = data.doc_texts
        self.pairs, self.n_docs = pairs, len(data.doc_texts)
        self.rng = np.random.default_rng(SEED)
        self.batches = Batches(len(pairs.q_rows), batch, self.rng)
        self.b = self.batches.b
        self.args = EncoderArgs(negatives=j, batch_size=self.b, optimizer="sgd", lr=LR, gamma=GAMMA, seed=SEED)
        self.opt = make_optimizer(self.args, self.net.parameters())
        self.pool_size = min(self.args.neg_pool, self.b * max(j, 1), self.n_docs)
        self.phases: list[tuple[float, float, float]] = []
        self.net.train()

    def step(self) -> None:
        rows = self.batches.next()
        t0 = time.perf_counter()
        loss = batch_loss(self.net, self.qf, self.df, self.pairs, rows, self.rng, self.args)
        t1 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        self.opt.step()
        float(loss.detach())
        self.phases.append((t1 - t0, t2 - t1, time.perf_counter() - t2))

    def assembly(self) -> None:
        """The numpy part of ``batch_loss`` alone: pool, negatives, featurised batches."""
        rows = self.batches.next()
        q_rows, d_rows = self.pairs.q_rows[rows], self.pairs.d_rows[rows]
        pool = sample_pool(self.rng, self.n_docs, self.pool_size)
        neg = random_negatives(self.rng, pool, self.pairs.positives(q_rows), self.j)
        self.qf.batch(q_rows)
        self.df.batch(np.concatenate([d_rows, drawn_documents(pool, neg)[0]]))  # the drawn documents

    def measure(self, warmup: int, steps: int, reps_assembly: int) -> dict[str, Any]:
        self.phases = []
        r = time_steps(self.step, warmup, steps)
        loss_s, back_s, opt_s = (statistics.median(p[i] for p in self.phases[warmup:]) for i in range(3))
        asm, _ = median_time(self.assembly, reps_assembly)
        r.update(
            batch=self.b,
            pairs_per_s=self.b / r["median_step_s"],
            pool=self.pool_size,
            phases_ms={
                "assembly": 1e3 * asm,
                "forward+loss": 1e3 * max(loss_s - asm, 0.0),
                "backward": 1e3 * back_s,
                "optimizer": 1e3 * opt_s,
            },
        )
        return r


# ------------------------------------------------------------------------------------ ceiling
def step_shapes(ours: Ours, batches: int = 5) -> tuple[dict[str, Any], dict[str, list[sp.csr_matrix]]]:
    """What one step of ``ours`` must compute, over ``batches`` batches sampled as the trainer
    samples them (its own generator): per tower the texts, and the sparse first layer's input
    — DSSM: one row per text, its trigram bag (counts; its words' bags summed), the model's
    shapes, and ``word_rows`` / ``word_nnz`` for its first layer per distinct word, as it computes
    it (each text then sums its words' rows); CLSM: one row per distinct word of the batch, as it
    computes it, and ``pos_rows`` / ``pos_nnz`` for the model's shapes, each word position's
    window (``position_windows``). Returns the mean sizes and the batches' own first-layer
    matrices (``q``, ``d``, DSSM's ``q_words``, ``d_words``, CLSM's ``q_positions``,
    ``d_positions``): the ceiling multiplies those, so its row gathers hit the
    vocabulary as a real batch does (a few frequent trigrams, a long tail), not uniformly."""
    rng = np.random.default_rng(SEED + 1)
    bt = Batches(len(ours.pairs.q_rows), ours.b, rng)
    acc: dict[str, list[float]] = {}
    mats: dict[str, list[sp.csr_matrix]] = {}
    v = len(ours.model.hasher)
    for _ in range(batches):
        rows = bt.next()
        q_rows, d_rows = ours.pairs.q_rows[rows], ours.pairs.d_rows[rows]
        pool = sample_pool(rng, ours.n_docs, ours.pool_size)
        neg = random_negatives(rng, pool, ours.pairs.positives(q_rows), ours.j)
        docs = np.concatenate([d_rows, drawn_documents(pool, neg)[0]])
        for side, f, r in (("q", ours.qf, q_rows), ("d", ours.df, docs)):
            x = f.batch(r)
            if isinstance(x, Bags):  # one bag per text
                m = x.csr(v)
                vals = {"texts": len(r), "rows": len(r), "nnz": m.nnz}
            elif isinstance(x, WordBags):  # the model's shapes: each text's bag, its words' bags summed
                words = x.words.csr(v)
                m = (x.texts().csr(len(x.words)) @ words).tocsr()
                mats.setdefault(f"{side}_words", []).append(words)
                vals = {
                    "texts": len(r),
                    "rows": len(r),
                    "nnz": m.nnz,
                    "word_rows": len(x.words),
                    "word_nnz": words.nnz,
                    "positions": len(x.positions),
                }
            else:
                m = x.bags.csr(v)
                pos = position_windows(x, v)
                mats.setdefault(f"{side}_positions", []).append(pos)
                vals = {
                    "texts": len(r),
                    "rows": x.n_words,
                    "nnz": m.nnz,
                    "positions": x.windows.shape[1],
                    "pos_rows": pos.shape[0],
                    "pos_nnz": pos.nnz,
                }
            mats.setdefault(side, []).append(m)
            for k, val in vals.items():
                acc.setdefault(f"{side}_{k}", []).append(val)
    return {k: int(round(statistics.mean(val))) for k, val in acc.items()}, mats


def position_windows(x: WindowBatch, v: int) -> sp.csr_matrix:
    """CLSM's convolution input as the paper writes it (§3.2-3.3): one row per word position, the
    window's words' trigram vectors laid side by side (slot j's at columns j·V..), a padded slot
    as one entry of its own column (the ``<s>`` word); times W_c (window·V x K) it is every
    position's convolution. Ours computes each distinct word's slots once instead."""
    words = sp.vstack([x.bags.csr(v), sp.csr_matrix((1, v), dtype=np.float32)]).tocsr()  # + the padding's empty row
    window, n_pos = x.windows.shape
    at, slot = np.nonzero(x.windows.T == x.n_words)  # the padded slots
    pad = sp.csr_matrix((np.ones(len(at), dtype=np.float32), (at, slot)), shape=(n_pos, window))
    return sp.hstack([words[x.windows[j]] for j in range(window)] + [pad], format="csr")


def _touched(mt: sp.csr_matrix) -> sp.csr_matrix:
    """Xᵀ's rows that hold anything: the weight gradient Xᵀ·G is zero in every vocabulary row
    the batch does not hold, so only these are computed, as our first layer's sparse gradient
    does (``models.neural.bag_product``). The full (V x dim) product would also time writing
    the zeros: for CLSM a fresh 34 MB array per call, past glibc's mmap threshold, so every
    call page-faults it in anew: that alone made the ceiling read 30-37k pairs/s in one process
    and 65-93k in another (huge pages, ``THP_MEM_ALLOC_ENABLE=1``, fault 512x fewer times)."""
    return mt[np.flatnonzero(np.diff(mt.indptr))]


def _torch_csr(m: sp.csr_matrix) -> torch.Tensor:
    return torch.sparse_csr_tensor(
        torch.from_numpy(m.indptr.astype(np.int64)),
        torch.from_numpy(m.indices.astype(np.int64)),
        torch.from_numpy(m.data.astype(np.float32)),
        m.shape,
    )


class Ceiling:
    """The compute ceiling of a step: only the matrix products of the model's own layers at the
    step's sizes (``step_shapes``), forward and backward, nothing else (no activations, loss,
    gathers, optimizer or Python). The first layer is sparse-times-dense on the sampled batches'
    own input matrices (one per step, in turn; ``torch.sparse.mm`` on CSR: X·W forward, Xᵀ·G for
    the weight gradient; or the same product as ``F.embedding_bag``'s weighted row sums, whichever
    is faster), the others dense ``torch.mm`` (forward; input gradient, except into the sparse
    input; weight gradient) at the batches' mean text counts. DSSM: trigram bag → 300 → 300 → 128
    per text, the model's shapes (``words``: the first layer per distinct word of the batch
    instead, as DSSM computes it); CLSM: per distinct word its trigram bag → window·K (the
    convolution's per-slot projections, as CLSM computes it), then K → L per text
    (``positions``: per word position its window's trigram vectors → K instead, the convolution
    as the paper writes it, the model's shapes). The ceiling judged (issue 18's) is the model's
    shapes of each. ``fwd_only``: encoding.

    The weight gradient is computed for the vocabulary rows the batch holds (``_touched``), as
    ours computes it. The batches' own matrices, not random ones of the same sizes: their row
    gathers fall on the vocabulary as a real batch's do (many on a few frequent trigrams)."""

    def __init__(
        self,
        name: str,
        v: int,
        shapes: dict[str, Any],
        mats: dict[str, list[sp.csr_matrix]],
        j: int,
        fwd_only: bool = False,
        words: bool = False,
        positions: bool = False,
    ):
        gen = torch.Generator().manual_seed(SEED)
        if words:
            shapes = {**shapes, **{f"{s}_{k}": shapes[f"{s}_word_{k}"] for s in ("q", "d") for k in ("rows", "nnz")}}
            mats = {s: mats[f"{s}_words"] for s in ("q", "d")}
        if positions:  # CLSM's convolution at every position (``position_windows``): window·V (+ padding) -> K
            shapes = {**shapes, **{f"{s}_{k}": shapes[f"{s}_pos_{k}"] for s in ("q", "d") for k in ("rows", "nnz")}}
            mats = {s: mats[f"{s}_positions"] for s in ("q", "d")}
            v = mats["q"][0].shape[1]
        self.fwd_only, self.kernel, self.turn = fwd_only, "sparse.mm", 0
        first = HIDDEN[0] if name == "dssm" else CONV if positions else WINDOW * CONV
        dense = list(zip(HIDDEN, [*HIDDEN[1:], OUT])) if name == "dssm" else [(CONV, OUT)]
        self.sides = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch: sparse CSR support "in beta"
            for side in ("q", "d"):
                if not mats.get(side):
                    continue
                xs = [(_torch_csr(m), _torch_csr(_touched(m.T.tocsr()))) for m in mats[side]]
                w = torch.randn(v, first, generator=gen)
                g1 = torch.randn(max(m.shape[0] for m in mats[side]), first, generator=gen)
                n = shapes[f"{side}_texts"]
                layers = [
                    (
                        torch.randn(n, a, generator=gen),
                        torch.randn(a, b, generator=gen),
                        torch.randn(n, b, generator=gen),
                    )
                    for a, b in dense
                ]
                self.sides.append((xs, w, g1, layers))
        self.shapes = shapes

    def step(self) -> None:
        for xs, w, g1, layers in self.sides:
            x, xt = xs[self.turn % len(xs)]
            self.sparse_mm(x, w)
            if not self.fwd_only:
                self.sparse_mm(xt, g1[: x.shape[0]])
            for h, wl, g in layers:
                torch.mm(h, wl)
                if not self.fwd_only:
                    torch.mm(g, wl.T)
                    torch.mm(h.T, g)
        self.turn += 1

    def sparse_mm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if self.kernel == "bag":  # the same product as a weighted bag-sum of rows
            return F.embedding_bag(x.col_indices(), w, x.crow_indices()[:-1], mode="sum", per_sample_weights=x.values())
        return torch.sparse.mm(x, w)

    def flops(self) -> float:
        """Multiply-adds × 2 of one ``step``."""
        total = 0.0
        for xs, w, _, layers in self.sides:
            total += statistics.mean(x.values().numel() for x, _ in xs) * w.shape[1] * (1 if self.fwd_only else 2)
            total += sum(h.shape[0] * h.shape[1] * wl.shape[1] * (1 if self.fwd_only else 3) for h, wl, _ in layers)
        return 2.0 * total

    def measure(self, warmup: int, steps: int, per_step: int, rounds: int = CEILING_ROUNDS) -> dict[str, Any]:
        """Timed with each sparse kernel (``torch.sparse.mm`` on CSR, ``F.embedding_bag`` on the same
        arrays), ``rounds`` times in turns; the fastest median is the ceiling (a round can land on a
        busy moment of this shared machine)."""
        runs: dict[str, list[dict[str, Any]]] = {"sparse.mm": [], "bag": []}
        for _ in range(rounds):
            for kernel, timed in runs.items():
                self.kernel = kernel
                timed.append(time_steps(self.step, warmup, steps))
        best = {k: min(v, key=lambda x: x["median_step_s"]) for k, v in runs.items()}
        kernel = min(best, key=lambda k: best[k]["median_step_s"])
        r = best[kernel]
        r.update(
            pairs_per_s=per_step / r["median_step_s"],
            gflops=self.flops() / 1e9 / r["median_step_s"],
            shapes=self.shapes,
            sparse_kernel=kernel,
            round_medians_s={k: [round(x["median_step_s"], 5) for x in v] for k, v in runs.items()},
            other_kernel_median_step_s={k: v["median_step_s"] for k, v in best.items() if k != kernel},
        )
        return r


# ------------------------------------------------------------------------------------ encoding
def chunks(n: int, size: int) -> list[np.ndarray]:
    return [np.arange(s, min(s + size, n), dtype=np.int64) for s in range(0, n, size)]


def encode_ours(ours: Ours, texts: list[str], hasher: TrigramHasher, reps: int, cold: bool) -> dict[str, Any]:
    model, n = ours.model, len(texts)
    r: dict[str, Any] = {"titles": n, "load_avg_1min": load1()}
    tables = [model.hasher.table, *([model._table] if getattr(model, "_table", None) is not None else [])]

    def new_texts() -> None:  # the words known, the titles not: every title tokenised again
        for table in tables:
            if hasattr(table, "forget_texts"):  # (a version without the text cache: nothing to forget)
                table.forget_texts()

    t, _ = median_time(lambda: (new_texts(), model.encode_documents(texts)), reps)
    r["words_warm_titles_per_s"] = n / t
    t, _ = median_time(lambda: model.encode_documents(texts), reps)
    r["full_titles_per_s"] = n / t
    if cold:  # a freshly built model: empty word cache (and, for CLSM, an empty word table)
        fresh = create_model(ours.name)
        fresh.build(TrigramHasher(hasher.trigrams, max_words=hasher.max_words), SEED)
        t0 = time.perf_counter()
        fresh.encode_documents(texts)
        r["cold_titles_per_s"] = n / (time.perf_counter() - t0)
    net = model.net
    if ours.name == "dssm":  # encode_documents' path: chunks of ENCODE_CHUNK texts as distinct words' bags
        table, rows = model.hasher.table, chunks(n, ENCODE_CHUNK)

        def featurise() -> list:
            return [table.word_bags(texts[x[0] : x[-1] + 1]) for x in rows]

        t, batches = median_time(lambda: (new_texts(), featurise())[1], reps)
        r["featurise_titles_per_s"] = n / t
        t, batches = median_time(featurise, reps)
        r["featurise_cached_titles_per_s"] = n / t

        def tower(b):
            return net.d.encode_words(b[2], b[1], b[0])

    else:
        t, feats = median_time(lambda: (new_texts(), model.features(texts))[1], reps)
        r["featurise_titles_per_s"] = n / t
        t, feats = median_time(lambda: model.features(texts), reps)
        r["featurise_cached_titles_per_s"] = n / t
        rows = chunks(n, 4096)  # encode_documents' batch size
        t, batches = median_time(lambda: [feats.batch(x) for x in rows], reps)
        r["batching_titles_per_s"] = n / t
        tower = net.doc
    net.eval()

    def towers() -> torch.Tensor:
        with torch.inference_mode():
            return F.normalize(torch.cat([tower(b) for b in batches]), dim=1)

    t, _ = median_time(towers, reps)
    net.train()
    r["tower_titles_per_s"] = n / t
    return r


def encode_shapes(ours: Ours, n: int, batch: int = 4096) -> tuple[dict[str, Any], dict[str, list[sp.csr_matrix]]]:
    """The document tower's work for ``n`` titles in batches of ``batch``: the mean sizes of a
    full batch and up to four batches' own first-layer matrices (``q``; the ceiling computes one
    tower). DSSM encodes ``ENCODE_CHUNK`` titles at a time, its first layer once per distinct
    word of the chunk: that layer's rows are those words and its non-zeros their trigrams; CLSM
    likewise per distinct word of a batch."""
    v = len(ours.model.hasher)
    if ours.name == "dssm":
        texts, table = ours.model_texts, ours.model.hasher.table
        rows = chunks(n, ENCODE_CHUNK)

        def first_layer(r):
            return table.word_bags(texts[r[0] : r[-1] + 1])[2]

    else:
        rows = chunks(n, batch)

        def first_layer(r):
            return ours.df.batch(r).bags

    mats = [first_layer(r).csr(v) for r in rows[: max(1, min(len(rows) - 1, 4))]]  # the last batch is partial
    return (
        {
            "batches": len(rows),
            "q_texts": len(rows[0]),
            "q_rows": int(statistics.mean(m.shape[0] for m in mats)),
            "q_nnz": int(statistics.mean(m.nnz for m in mats)),
            "d_texts": 0,
            "d_rows": 0,
            "d_nnz": 0,
        },
        {"q": mats},
    )


# ------------------------------------------------------------------------------------ profile
def profile_step(ours: Ours, rows: int) -> dict[str, Any]:
    from torch.autograd.profiler import profile, record_function

    ours.step()  # warm
    t0 = time.perf_counter()
    with profile() as prof:
        with record_function("step"):
            ours.step()
    wall = time.perf_counter() - t0
    avgs = prof.key_averages()
    top = sorted((e for e in avgs if e.key != "step"), key=lambda e: e.self_cpu_time_total, reverse=True)[:rows]
    ops_self = sum(e.self_cpu_time_total for e in avgs if e.key != "step") / 1e3
    nodes = sorted(
        (e for e in avgs if e.key.startswith("autograd::engine::evaluate_function: ")),
        key=lambda e: e.cpu_time_total,
        reverse=True,
    )[:5]
    return {
        "model": f"{ours.name} J={ours.j}",
        "threads": torch.get_num_threads(),
        "wall_ms": 1e3 * wall,
        "ops_self_cpu_ms": ops_self,
        "load_avg_1min": load1(),
        "top": [
            {
                "op": e.key,
                "self_cpu_ms": e.self_cpu_time_total / 1e3,
                "cpu_total_ms": e.cpu_time_total / 1e3,
                "calls": e.count,
            }
            for e in top
        ],
        "backward_nodes": [
            {"node": e.key.split(": ", 1)[1], "cpu_total_ms": e.cpu_time_total / 1e3, "calls": e.count} for e in nodes
        ],
    }


def print_profile(p: dict[str, Any]) -> None:
    print(
        f"\n--- torch.autograd.profiler, one {p['model'].upper()} step, {p['threads']} thread(s), "
        f"load {p['load_avg_1min']}: "
        f"wall {p['wall_ms']:.0f} ms (profiled), torch ops' self CPU {p['ops_self_cpu_ms']:.0f} ms "
        f"(the rest: Python/numpy batch assembly, profiler overhead)"
    )
    print(f"  {'op (top by self CPU)':56} {'self ms':>9} {'share':>6} {'total ms':>9} {'calls':>6}")
    for e in p["top"]:
        print(
            f"  {e['op'][:56]:56} {e['self_cpu_ms']:9.1f} {e['self_cpu_ms'] / p['ops_self_cpu_ms']:6.1%} "
            f"{e['cpu_total_ms']:9.1f} {e['calls']:6d}"
        )
    print(
        "  backward nodes by CPU total (incl. their ops): "
        + "; ".join(
            f"{n['node']} {n['cpu_total_ms']:.0f} ms ({n['cpu_total_ms'] / p['ops_self_cpu_ms']:.0%})"
            for n in p["backward_nodes"]
        )
    )


# ------------------------------------------------------------------------------------ main
def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 1 else f"{x:.3f}"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:,.0f}x" if a and b and a / b >= 100 else f"{a / b:.1f}x" if a and b else "-"


def with_threads(n: int, fn: Callable[[], Any]) -> Any:
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return fn()
    finally:
        torch.set_num_threads(old)


def crosscheck(name: str, data: TrainingData, n_pairs: int, batch: int) -> dict[str, Any]:
    """``train_encoder`` itself, 1 epoch over the first ``n_pairs`` positives (its vocabulary is
    fit on that subset, so it is a little smaller than the full run's)."""
    sub = TrainingData(data.queries, data.doc_ids, data.doc_texts, data.positives[:n_pairs], data.qrels, data.threshold)
    model = create_model(name)
    args = EncoderArgs(negatives=4, batch_size=batch, optimizer="sgd", lr=LR, gamma=GAMMA, epochs=1, seed=SEED)
    log = train_encoder(model, sub, None, args=args, progress=False)
    e = log["epochs"][0]
    return {
        "pairs": len(sub.positives),
        "pairs_per_s": e["pairs_per_s"],
        "seconds": e["seconds"],
        "vocab": len(model.hasher),
        "load_avg_1min": load1(),
    }  # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke test: batch 16, 2 steps, 1 thread")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--negatives", default="4,50", help="J values, comma-separated")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up steps before timing")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (median reported)")
    ap.add_argument(
        "--reps",
        type=int,
        default=5,
        help="repetitions per encoding timing (median; one can take twice the usual on a busy machine)",
    )
    ap.add_argument(
        "--crosscheck-batches", type=int, default=12, help="train_encoder check: batches of pairs (0: skip)"
    )
    ap.add_argument("--dense-budget", type=float, default=None, help=argparse.SUPPRESS)  # gone with the dense
    # reference; still accepted because benchmarks/run_all.py passes it
    ap.add_argument(
        "--threads", type=int, default=None, help="torch threads for the main figures (default: torch's; --quick: 1)"
    )
    ap.add_argument("--out", default="results/bench/train_speed.json", help="JSON output (relative: to the repo root)")
    args = ap.parse_args()
    js = [int(x) for x in args.negatives.split(",")]
    if args.quick:
        args.batch, args.warmup, args.steps, args.reps = 16, 1, 2, 1
        args.crosscheck_batches = min(args.crosscheck_batches, 2)
        args.threads = args.threads or 1  # a smoke test on a shared machine: no waiting on a busy second thread
    global THREADS
    if args.threads:
        torch.set_num_threads(args.threads)
    THREADS = torch.get_num_threads()

    hw = {
        **hardware(("numpy", "scipy", "torch")),
        "torch_threads": THREADS,
        "torch_interop_threads": torch.get_num_interop_threads(),
    }
    print("hardware:", hardware_line(hw), flush=True)
    t_start = time.perf_counter()
    data = TrainingData.from_dataset(open_dataset("homedepot"), "train")
    pairs = Pairs.build(data)
    train_docs = [data.doc_texts[i] for i in np.unique(pairs.d_rows)]
    hasher = TrigramHasher.fit(pairs.q_texts + train_docs, max_words=64)  # as trainer._train does
    texts = data.doc_texts
    print(
        f"homedepot train: {len(data.positives):,} positive pairs, {len(pairs.q_texts):,} queries, "
        f"{len(texts):,} titles, {len(hasher):,} trigrams (V); batch {args.batch}, J in {js}, "
        f"{args.warmup} warm-up + {args.steps} timed steps; torch threads {THREADS}",
        flush=True,
    )

    training: dict[str, Any] = {}
    encoding: dict[str, Any] = {}
    profiles: dict[str, Any] = {}
    v = len(hasher)
    for name in ("dssm", "clsm"):
        for j in js:
            key = f"{name} J={j}"
            ours = Ours(name, j, args.batch, hasher, data, pairs)
            shapes, mats = step_shapes(ours)
            ceiling = Ceiling(name, v, shapes, mats, j, positions=name == "clsm")  # issue 18's: the model's shapes
            by_word = Ceiling(
                name, v, shapes, mats, j, words=name == "dssm"
            )  # the first layer per distinct word, as ours
            r: dict[str, Any] = {"shapes": shapes}
            # ours and its ceilings back to back at each thread count, so load changes hit them alike
            r["ours"] = ours.measure(args.warmup, args.steps, max(args.reps, 3))
            r["ceiling"] = ceiling.measure(args.warmup, args.steps, ours.b)
            r["ceiling_words"] = by_word.measure(args.warmup, args.steps, ours.b)
            # with_threads calls its function at once: partial binds this iteration's objects (B023)
            r["ours_1thread"] = with_threads(1, partial(ours.measure, args.warmup, args.steps, max(args.reps, 3)))
            r["ceiling_1thread"] = with_threads(1, partial(ceiling.measure, args.warmup, args.steps, ours.b))
            r["ceiling_words_1thread"] = with_threads(1, partial(by_word.measure, args.warmup, args.steps, ours.b))
            training[key] = r
            print(
                f"[{key}] ours {r['ours']['pairs_per_s']:,.0f} pairs/s, ceiling {r['ceiling']['pairs_per_s']:,.0f} "
                f"({THREADS} thr); ours {r['ours_1thread']['pairs_per_s']:,.0f}, ceiling "
                f"{r['ceiling_1thread']['pairs_per_s']:,.0f} (1 thr); load {load1()}",
                flush=True,
            )
            if j == js[0]:
                es, enc_mats = encode_shapes(ours, len(texts))
                tower_ceiling = Ceiling(name, v, es, enc_mats, 0, fwd_only=True)
                n_titles = es["batches"] * es["q_texts"]  # the ceiling's batches are all full
                enc = {
                    "shapes": es,
                    "ours": encode_ours(ours, texts, hasher, args.reps, cold=True),
                    "ours_1thread": with_threads(1, partial(encode_ours, ours, texts, hasher, args.reps, cold=False)),
                }
                for tag, thr in (("ours", THREADS), ("ours_1thread", 1)):
                    c = with_threads(
                        thr, partial(tower_ceiling.measure, 1, max(args.reps, 3), n_titles // es["batches"])
                    )
                    enc[tag]["tower_ceiling_titles_per_s"] = c["pairs_per_s"]
                encoding[name] = enc
                print(
                    f"[{name} encoding] ours {enc['ours']['full_titles_per_s']:,.0f} titles/s (cold "
                    f"{enc['ours']['cold_titles_per_s']:,.0f}), tower {enc['ours']['tower_titles_per_s']:,.0f}, "
                    f"tower ceiling {enc['ours']['tower_ceiling_titles_per_s']:,.0f}; load {load1()}",
                    flush=True,
                )
            if name == "clsm" and j == 4:
                profiles["clsm J=4"] = profile_step(ours, 15)
                profiles["clsm J=4, 1 thread"] = with_threads(1, partial(profile_step, ours, 15))
            if name == "dssm" and j == js[-1]:
                profiles[f"dssm J={j}, 1 thread"] = with_threads(1, partial(profile_step, ours, 10))

    checks: dict[str, Any] = {}
    if args.crosscheck_batches > 0 and 4 in js:
        for name in ("dssm", "clsm"):
            checks[f"{name} J=4"] = with_threads(
                1, partial(crosscheck, name, data, args.crosscheck_batches * args.batch, args.batch)
            )

    # ---- report
    print(
        f"\nTraining throughput, positive pairs/s (homedepot train, J random negatives, SGD, batch {args.batch}; "
        f"median step of {args.steps} after {args.warmup} warm-up). ours: the trainer's step incl. batch assembly and "
        "negative sampling; ceiling: the matrix products alone of the same layers at the model's shapes (fwd + bwd)"
    )
    head = (
        f"{'':10} | {f'ours {THREADS}thr':>10} {'ceiling':>9} {'fraction':>8} | {'ours 1thr':>10} {'ceiling':>9} "
        f"{'fraction':>8} | {'target':>7} {'met':>8}"
    )
    print(head + "\n" + "-" * len(head))
    for key, r in training.items():
        o, c, o1, c1 = (r[k]["pairs_per_s"] for k in ("ours", "ceiling", "ours_1thread", "ceiling_1thread"))
        name, j = key.split(" J=")
        tgt = TARGETS.get((name, int(j)))
        met = (
            "-"
            if tgt is None
            else "/".join("yes" if x >= tgt and x >= FRACTION_TARGET * y else "no" for x, y in ((o, c), (o1, c1)))
        )
        print(
            f"{key:10} | {fmt(o):>10} {fmt(c):>9} {o / c:8.0%} | {fmt(o1):>10} {fmt(c1):>9} {o1 / c1:8.0%} | "
            f"{fmt(tgt):>7} {met:>8}"
        )
    print(
        f"(target: pairs/s and a fraction >= {FRACTION_TARGET:.0%}; met: at {THREADS} / 1 thread(s). Ceiling GFLOP/s "
        + ", ".join(
            f"{k} {r['ceiling']['gflops']:.0f}/{r['ceiling_1thread']['gflops']:.0f}" for k, r in training.items()
        )
        + "; first layer's kernel: "
        + ", ".join(
            f"{k} {r['ceiling']['sparse_kernel']}/{r['ceiling_1thread']['sparse_kernel']}" for k, r in training.items()
        )
        + ")"
    )
    for key, r in training.items():
        cw, cw1 = r["ceiling_words"]["pairs_per_s"], r["ceiling_words_1thread"]["pairs_per_s"]
        print(
            f"{key}: the ceiling above is the model's shapes ({MODEL_SHAPES[key.split()[0]]}); computing the first "
            f"layer once per distinct word of the batch, as ours does, has its own ceiling, {fmt(cw)} / {fmt(cw1)} "
            f"pairs/s at {THREADS} / 1 thread(s): ours at {r['ours']['pairs_per_s'] / cw:.0%} / "
            f"{r['ours_1thread']['pairs_per_s'] / cw1:.0%} of it (printed, not judged)"
        )
    print(
        "Sizes per step (mean of 5 sampled batches): "
        + "; ".join(f"{k}: " + ", ".join(f"{n} {v:,}" for n, v in r["shapes"].items()) for k, r in training.items())
    )

    print(
        "\nWhere a step's time goes, ours, ms (median over the timed steps; assembly = the numpy part of "
        "batch_loss timed alone, forward+loss = the rest of batch_loss)"
    )
    head = (
        f"{'':22} {'assembly':>9} {'fwd+loss':>9} {'backward':>9} {'optimizer':>10} "
        f"{'step':>8} {'ceiling':>8} {'load':>6}"
    )
    print(head + "\n" + "-" * len(head))
    for key, r in training.items():
        for tag, ctag, lab in (("ours", "ceiling", f"{THREADS} thr"), ("ours_1thread", "ceiling_1thread", "1 thr")):
            p = r[tag]["phases_ms"]
            print(
                f"{key + ', ' + lab:22} {p['assembly']:9.0f} {p['forward+loss']:9.0f} {p['backward']:9.0f} "
                f"{p['optimizer']:10.0f} {1e3 * r[tag]['median_step_s']:8.0f} {1e3 * r[ctag]['median_step_s']:8.0f} "
                f"{r[tag]['load_avg_1min']:6.2f}"
            )

    print(
        f"\nEncoding throughput, titles/s ({len(texts):,} homedepot titles, document tower, batch 4096; "
        f"median of {args.reps}; cold: once)"
    )
    head = f"{'':46} | {f'{THREADS} thr':>10} {'1 thr':>10} | {'target':>7}"
    print(head + "\n" + "-" * len(head))
    for name, enc in encoding.items():
        o, o1 = enc["ours"], enc["ours_1thread"]
        rows = [
            ("full: encode_documents, new titles (words known)", "words_warm_titles_per_s", ENCODE_TARGET.get(name)),
            ("  same, titles met before (text cache)", "full_titles_per_s", None),
            ("  same, fresh model (cold: no word known)", "cold_titles_per_s", None),
            ("  featurisation alone, new titles", "featurise_titles_per_s", None),
            ("  featurisation alone, titles met before", "featurise_cached_titles_per_s", None),
            ("  batch slicing alone (features.batch)", "batching_titles_per_s", None),
            ("  tower alone (precomputed batches)", "tower_titles_per_s", None),
            ("  tower ceiling (its matrix products alone)", "tower_ceiling_titles_per_s", None),
        ]
        print(name.upper())
        for lab, k, tgt in rows:
            print(f"{lab:46} | {fmt(o.get(k)):>10} {fmt(o1.get(k)):>10} | {fmt(tgt):>7}")

    for p in profiles.values():
        print_profile(p)
    if checks:
        print(
            "\ntrain_encoder cross-check, 1 thread (1 epoch over a subset, first step included, its log's "
            "pairs_per_s; vocabulary fit on the subset, so smaller V):"
        )
        for key, c in checks.items():
            print(
                f"  {key}: {c['pairs']:,} pairs, V={c['vocab']:,}: {c['pairs_per_s']:,.0f} pairs/s "
                f"(timed loop above, 1 thread: {training[key]['ours_1thread']['pairs_per_s']:,.0f}); "
                f"load {c['load_avg_1min']}"
            )

    hw_end = load1()
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    settings.update(
        gamma=GAMMA,
        lr=LR,
        window=WINDOW,
        hidden=list(HIDDEN),
        out=OUT,
        conv=CONV,
        vocab=len(hasher),
        pairs=len(data.positives),
        titles=len(texts),
    )
    summary = []
    for key, r in training.items():
        name, j = key.split(" J=")
        tgt = TARGETS.get((name, int(j)))
        tag = max(("ours", "ours_1thread"), key=lambda t: r[t]["pairs_per_s"])
        best, ceil = r[tag]["pairs_per_s"], r[tag.replace("ours", "ceiling")]["pairs_per_s"]
        by_word = r[tag.replace("ours", "ceiling_words")]["pairs_per_s"]
        summary.append(
            summary_row(
                f"{name.upper()} training J={j} (batch {args.batch}, best of {THREADS} and 1 threads)",
                "pairs/s",
                best,
                f"compute ceiling of the model's shapes ({MODEL_SHAPES[name]}; "
                "matrix products alone, same sizes and threads): "
                f"ours at {best / ceil:.0%}; with the first layer once per distinct word, as ours computes it, "
                f"{by_word:,.0f}: ours at {best / by_word:.0%}",
                ceil,
                target=f">= {tgt:,} pairs/s and >= {FRACTION_TARGET:.0%} of the ceiling" if tgt else "",
                met=(best >= tgt and best >= FRACTION_TARGET * ceil) if tgt else None,
            )
        )
    for name, enc in encoding.items():
        tgt = ENCODE_TARGET.get(name)
        tag = max(("ours", "ours_1thread"), key=lambda t: enc[t]["words_warm_titles_per_s"])
        best = enc[tag]["words_warm_titles_per_s"]
        summary.append(
            summary_row(
                f"{name.upper()} encoding of new titles, featurisation included (titles met before "
                f"{enc[tag]['full_titles_per_s']:,.0f}, fresh model {enc['ours']['cold_titles_per_s']:,.0f})",
                "titles/s",
                best,
                "tower ceiling (its matrix products alone)",
                enc[tag]["tower_ceiling_titles_per_s"],
                target=f">= {tgt:,} titles/s" if tgt else "",
                met=(best >= tgt) if tgt else None,
            )
        )
    path = write_json(
        {
            "summary": summary,
            "hardware": hw,
            "load_avg_1min_end": hw_end,
            "settings": settings,
            "targets": {
                "train_pairs_per_s": {f"{n} J={j}": t for (n, j), t in TARGETS.items()},
                "fraction_of_ceiling": FRACTION_TARGET,
                "encode_titles_per_s": ENCODE_TARGET,
            },
            "training": training,
            "encoding": encoding,
            "profile": profiles,
            "train_encoder_check": checks,
        },
        args.out,
    )
    note = (
        (
            f": torch's {THREADS}-thread regions wait for their slowest thread, so contention slows them "
            "disproportionately; the 1-thread figures are the more stable ones"
        )
        if THREADS > 1
        else ""
    )
    print(f"\nload average (1 min) at start {hw['load_avg_1min']}, at end {hw_end} on {hw['nproc']} CPUs{note}.")
    print(f"peak RSS of the process: {maxrss_mb():,.0f} MB; total {time.perf_counter() - t_start:.0f} s; wrote {path}")


if __name__ == "__main__":
    main()
