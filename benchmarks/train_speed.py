"""Training and encoding speed of DSSM and CLSM against a dense-input reference, in one process.

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
  * the same step for a DENSE-INPUT REFERENCE written here: DSSM's first layer an
    ``nn.Linear`` over dense letter-trigram count vectors (``torch.zeros(batch, V)`` +
    scatter per batch); CLSM a ``nn.Linear`` over the concatenation of the window's dense
    per-word trigram vectors (window·(V+1) inputs, the +1 a one-hot ``<s>`` padding word) at
    every position of padded (texts, max_len) word sequences, tanh, max over positions. Each
    query gets J independent uniform random negatives (never its own positive), encoded
    separately: B·(1+J) document encodings per step, no pool sharing. Its cost grows with
    texts × V (× positions), so its batch is cut to fit ``--dense-dssm-texts`` /
    ``--dense-clsm-texts`` document+query encodings per step (a power of two ≤ the batch) and
    it runs at most ``--dense-budget`` seconds of timed steps (at least one): the output says
    which batch and how many steps. Per-pair throughput is what is compared.
  * encoding throughput (titles/s) over all titles: ``model.encode_documents(texts)``
    (featurisation + towers, the model's hasher cache warm, median of ``--reps``), the same
    with a freshly built model (cold word cache; once), featurisation alone, and the document
    tower alone on precomputed batches; the dense reference's tower (densify + MLP / windows),
    on as many titles as fit in ``--dense-budget`` seconds, and its full rate = the same
    featuriser's rate combined with that.
  * where the time goes: torch.autograd.profiler tables (top ops by self CPU time) of one
    CLSM J=4 step, at the default thread count and single-threaded.

The machine is shared. Torch's parallel regions (2 threads here) wait for their slowest
thread, so when other processes keep the cores busy a 2-thread step can be several times
slower than a 1-thread one; the 1-minute load average is printed at the start and end and
stored with every measurement, and the single-thread figures are the more stable ones. Much of
that slowdown is OpenMP's idle threads spin-waiting for CPU the busy one needs: run with
``OMP_WAIT_POLICY=PASSIVE`` in the environment (it must be set before torch loads) to compare;
the hardware line records the setting.

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
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from _common import summary_row
from _common import hardware, hardware_line, maxrss_mb, median_time, write_json
from semsearch.data import TrainingData, open_dataset
from semsearch.plugins import create_model
from semsearch.models.neural import BagFeatures, WindowFeatures, csr_take
from semsearch.text import TrigramHasher
from semsearch.training.losses import softmax_cosine_loss
from semsearch.training.negatives import random_negatives, sample_pool
from semsearch.training.trainer import Pairs, batch_loss, make_optimizer, train_encoder
from semsearch.training.args import EncoderArgs

GAMMA, LR, SEED, WINDOW = 10.0, 0.5, 0, 3
HIDDEN, OUT, CONV = (300, 300), 128, 300
TARGETS = {("dssm", 4): 20_000, ("dssm", 50): 10_000, ("clsm", 4): 10_000}  # training pairs/s (the speed issue's goals)
ENCODE_TARGET = {"dssm": 300_000}  # titles/s, featurisation included (the speed issue's goal)
THREADS = torch.get_num_threads()


def load1() -> float:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else float("nan")


def pow2_at_most(x: float) -> int:
    return 1 << (max(int(x), 1).bit_length() - 1)


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
    return {"steps": len(times), "median_step_s": statistics.median(times), "mean_step_s": statistics.mean(times),
            "step_s": [round(t, 4) for t in times], "load_avg_1min": load1()}


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
        self.model = create_model(name)
        self.model.build(hasher, SEED)
        self.net = self.model.net
        self.qf, self.df = self.model.features(pairs.q_texts), self.model.features(data.doc_texts)
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
        random_negatives(self.rng, pool, [self.pairs.pos_sets[q] for q in q_rows], self.j)
        self.qf.batch(q_rows)
        self.df.batch(np.concatenate([d_rows, pool]))

    def measure(self, warmup: int, steps: int, reps_assembly: int) -> dict[str, Any]:
        self.phases = []
        r = time_steps(self.step, warmup, steps)
        loss_s, back_s, opt_s = (statistics.median(p[i] for p in self.phases[warmup:]) for i in range(3))
        asm, _ = median_time(self.assembly, reps_assembly)
        r.update(batch=self.b, pairs_per_s=self.b / r["median_step_s"], pool=self.pool_size,
                 phases_ms={"assembly": 1e3 * asm, "forward+loss": 1e3 * max(loss_s - asm, 0.0),
                            "backward": 1e3 * back_s, "optimizer": 1e3 * opt_s})
        return r


# ------------------------------------------------------------------------------------ dense reference
def dense_bags(f: BagFeatures, rows: np.ndarray, v: int) -> torch.Tensor:
    """(len(rows), V) trigram-count vectors: torch.zeros + scatter of the CSR rows."""
    ptr, pos = csr_take(f.indptr, f.ids, rows)
    r = np.repeat(np.arange(len(rows), dtype=np.int64), np.diff(ptr))
    x = torch.zeros(len(rows), v)
    x.view(-1).scatter_add_(0, torch.from_numpy(r * v + f.ids[pos]), torch.from_numpy(f.weights[pos]))
    return x


def dense_windows(f: WindowFeatures, rows: np.ndarray, v: int, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(texts, max_len, window·(V+1)) concatenated dense per-word trigram vectors, column V of
    each word slot the one-hot ``<s>`` padding word; and the (texts, max_len) valid positions
    (an empty text has one, all padding)."""
    ptr, pos = csr_take(f.indptr, f.ids, rows)
    words, n = f.ids[pos], np.diff(ptr)
    length = max(int(n.max()) if len(n) else 1, 1)
    half = (window - 1) // 2
    width = length + 2 * half
    text = np.repeat(np.arange(len(rows), dtype=np.int64), n)
    slot = text * width + (np.arange(len(words), dtype=np.int64) - ptr[:-1][text]) + half
    bags = f.table.bags(words)
    x = torch.zeros(len(rows), width, v + 1)
    flat = np.repeat(slot, np.diff(bags.offsets)) * (v + 1) + bags.ids
    x.view(-1).scatter_add_(0, torch.from_numpy(flat), torch.from_numpy(bags.weights))
    is_word = torch.zeros(len(rows) * width, dtype=torch.bool)
    is_word[torch.from_numpy(slot)] = True
    x[..., v] = (~is_word).view(len(rows), width).float()
    xw = torch.cat([x[:, j : j + length] for j in range(window)], dim=2)
    valid = torch.arange(length)[None, :] < torch.from_numpy(np.maximum(n, 1))[:, None]
    return xw, valid


class DenseDSSMTower(nn.Module):
    def __init__(self, v: int):
        super().__init__()
        sizes = [v, *HIDDEN, OUT]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


class DenseCLSMTower(nn.Module):
    def __init__(self, v: int, window: int):
        super().__init__()
        self.conv = nn.Linear(window * (v + 1), CONV)
        self.semantic = nn.Linear(CONV, OUT)

    def forward(self, x: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        xw, valid = x
        h = torch.tanh(self.conv(xw)).masked_fill(~valid[..., None], float("-inf"))
        return torch.tanh(self.semantic(h.max(dim=1).values))


class Dense:
    """The dense-input reference: same sizes, loss and optimizer; J independent negatives."""

    def __init__(self, ours: Ours, j: int, batch: int):
        torch.manual_seed(SEED)
        self.name, self.j, self.pairs, self.n_docs = ours.name, j, ours.pairs, ours.n_docs
        self.qf, self.df = ours.qf, ours.df  # the same featurisation: CSR bags / word-id sequences
        v = len(ours.model.hasher)  # type: ignore[arg-type]
        if self.name == "dssm":
            self.q, self.d = DenseDSSMTower(v), DenseDSSMTower(v)
            self.inputs = lambda f, rows: dense_bags(f, rows, v)  # noqa: E731
        else:
            self.q, self.d = DenseCLSMTower(v, WINDOW), DenseCLSMTower(v, WINDOW)
            self.inputs = lambda f, rows: dense_windows(f, rows, v, WINDOW)  # noqa: E731
        self.opt = torch.optim.SGD([*self.q.parameters(), *self.d.parameters()], lr=LR)
        self.rng = np.random.default_rng(SEED)
        self.batches = Batches(len(self.pairs.q_rows), batch, self.rng)
        self.b = self.batches.b
        self.all_docs = np.arange(self.n_docs, dtype=np.int64)

    def step(self) -> None:
        rows = self.batches.next()
        q_rows, d_rows = self.pairs.q_rows[rows], self.pairs.d_rows[rows]
        neg = random_negatives(self.rng, self.all_docs, [self.pairs.pos_sets[q] for q in q_rows], self.j)
        docs = np.concatenate([d_rows[:, None], np.maximum(neg, 0)], axis=1)  # (B, 1+J)
        qv = F.normalize(self.q(self.inputs(self.qf, q_rows)), dim=1)
        dv = F.normalize(self.d(self.inputs(self.df, docs.ravel())), dim=1).view(len(rows), 1 + self.j, -1)
        sims = torch.einsum("bd,bkd->bk", qv, dv)
        negs = sims[:, 1:].masked_fill(torch.from_numpy(neg < 0), float("-inf"))
        loss = softmax_cosine_loss(sims[:, 0], negs, GAMMA)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        float(loss.detach())

    def measure(self, warmup: int, steps: int, budget_s: float) -> dict[str, Any]:
        r = time_steps(self.step, warmup, steps, budget_s)
        r.update(batch=self.b, pairs_per_s=self.b / r["median_step_s"])
        return r


# ------------------------------------------------------------------------------------ encoding
def chunks(n: int, size: int) -> list[np.ndarray]:
    return [np.arange(s, min(s + size, n), dtype=np.int64) for s in range(0, n, size)]


def encode_ours(ours: Ours, texts: list[str], hasher: TrigramHasher, reps: int, cold: bool) -> dict[str, Any]:
    model, n = ours.model, len(texts)
    r: dict[str, Any] = {"titles": n, "load_avg_1min": load1()}
    t, _ = median_time(lambda: model.encode_documents(texts), reps)
    r["full_titles_per_s"] = n / t
    if cold:  # a freshly built model: empty word cache (and, for CLSM, an empty word table)
        fresh = create_model(ours.name)
        fresh.build(TrigramHasher(hasher.trigrams, max_words=hasher.max_words), SEED)
        t0 = time.perf_counter()
        fresh.encode_documents(texts)
        r["cold_titles_per_s"] = n / (time.perf_counter() - t0)
    t, feats = median_time(lambda: model.features(texts), reps)
    r["featurise_titles_per_s"] = n / t
    rows = chunks(n, 4096)  # encode_documents' batch size
    t, batches = median_time(lambda: [feats.batch(x) for x in rows], reps)
    r["batching_titles_per_s"] = n / t
    tower, net = model.net.doc, model.net
    net.eval()

    def towers() -> torch.Tensor:
        with torch.inference_mode():
            return F.normalize(torch.cat([tower(b) for b in batches]), dim=1)

    t, _ = median_time(towers, reps)
    net.train()
    r["tower_titles_per_s"] = n / t
    return r


def encode_dense(dense: Dense, n: int, batch: int, budget_s: float) -> dict[str, Any]:
    """The dense document tower (densify + network) over the first titles, for up to
    ``budget_s`` seconds (at least one batch) after one small warm-up batch."""
    dense.d.eval()
    done, secs = 0, 0.0
    with torch.inference_mode():
        dense.d(dense.inputs(dense.df, np.arange(min(8, n), dtype=np.int64)))
        for rows in chunks(n, batch):
            t0 = time.perf_counter()
            dense.d(dense.inputs(dense.df, rows))
            secs += time.perf_counter() - t0
            done += len(rows)
            if secs >= budget_s:
                break
    dense.d.train()
    return {"titles": done, "batch": batch, "tower_titles_per_s": done / secs, "load_avg_1min": load1()}


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
    nodes = sorted((e for e in avgs if e.key.startswith("autograd::engine::evaluate_function: ")),
                   key=lambda e: e.cpu_time_total, reverse=True)[:5]
    return {
        "model": f"{ours.name} J={ours.j}", "threads": torch.get_num_threads(), "wall_ms": 1e3 * wall,
        "ops_self_cpu_ms": ops_self, "load_avg_1min": load1(),
        "top": [{"op": e.key, "self_cpu_ms": e.self_cpu_time_total / 1e3, "cpu_total_ms": e.cpu_time_total / 1e3,
                 "calls": e.count} for e in top],
        "backward_nodes": [{"node": e.key.split(": ", 1)[1], "cpu_total_ms": e.cpu_time_total / 1e3, "calls": e.count}
                           for e in nodes],
    }


def print_profile(p: dict[str, Any]) -> None:
    print(f"\n--- torch.autograd.profiler, one {p['model'].upper()} step, {p['threads']} thread(s), load {p['load_avg_1min']}: "
          f"wall {p['wall_ms']:.0f} ms (profiled), torch ops' self CPU {p['ops_self_cpu_ms']:.0f} ms "
          f"(the rest: Python/numpy batch assembly, profiler overhead)")
    print(f"  {'op (top by self CPU)':56} {'self ms':>9} {'share':>6} {'total ms':>9} {'calls':>6}")
    for e in p["top"]:
        print(f"  {e['op'][:56]:56} {e['self_cpu_ms']:9.1f} {e['self_cpu_ms'] / p['ops_self_cpu_ms']:6.1%} "
              f"{e['cpu_total_ms']:9.1f} {e['calls']:6d}")
    print("  backward nodes by CPU total (incl. their ops): " + "; ".join(
        f"{n['node']} {n['cpu_total_ms']:.0f} ms ({n['cpu_total_ms'] / p['ops_self_cpu_ms']:.0%})" for n in p["backward_nodes"]))


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
    return {"pairs": len(sub.positives), "pairs_per_s": e["pairs_per_s"], "seconds": e["seconds"],
            "vocab": len(model.hasher), "load_avg_1min": load1()}  # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke test: batch 16, 2 steps, tiny budgets, 1 thread")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--negatives", default="4,50", help="J values, comma-separated")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up steps before timing")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (median reported)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per encoding timing (median)")
    ap.add_argument("--dense-dssm-texts", type=int, default=8192, help="dense DSSM: encodings per step, at most")
    ap.add_argument("--dense-clsm-texts", type=int, default=256, help="dense CLSM: encodings per step, at most")
    ap.add_argument("--dense-budget", type=float, default=20.0, help="dense: seconds of timed steps / encoding, at most")
    ap.add_argument("--crosscheck-batches", type=int, default=12, help="train_encoder check: batches of pairs (0: skip)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads for the main figures (default: torch's; --quick: 1)")
    ap.add_argument("--out", default="results/bench/train_speed.json", help="JSON output (relative: to the repo root)")
    args = ap.parse_args()
    js = [int(x) for x in args.negatives.split(",")]
    if args.quick:
        args.batch, args.warmup, args.steps, args.reps = 16, 1, 2, 1
        args.dense_dssm_texts, args.dense_clsm_texts, args.dense_budget = 128, 64, 1.0
        args.crosscheck_batches = min(args.crosscheck_batches, 2)
        args.threads = args.threads or 1  # a smoke test on a shared machine: no waiting on a busy second thread
    global THREADS
    if args.threads:
        torch.set_num_threads(args.threads)
    THREADS = torch.get_num_threads()

    hw = {**hardware(("numpy", "scipy", "torch")), "torch_threads": THREADS,
          "torch_interop_threads": torch.get_num_interop_threads(),
          "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "unset")}
    print("hardware:", hardware_line(hw), flush=True)
    t_start = time.perf_counter()
    data = TrainingData.from_dataset(open_dataset("homedepot"), "train")
    pairs = Pairs.build(data)
    train_docs = [data.doc_texts[i] for i in np.unique(pairs.d_rows)]
    hasher = TrigramHasher.fit(pairs.q_texts + train_docs, max_words=64)  # as trainer._train does
    texts = data.doc_texts
    print(f"homedepot train: {len(data.positives):,} positive pairs, {len(pairs.q_texts):,} queries, "
          f"{len(texts):,} titles, {len(hasher):,} trigrams (V); batch {args.batch}, J in {js}, "
          f"{args.warmup} warm-up + {args.steps} timed steps; torch threads {THREADS}", flush=True)

    training: dict[str, Any] = {}
    encoding: dict[str, Any] = {}
    profiles: dict[str, Any] = {}
    for name in ("dssm", "clsm"):
        for j in js:
            key = f"{name} J={j}"
            ours = Ours(name, j, args.batch, hasher, data, pairs)
            r: dict[str, Any] = {"ours": ours.measure(args.warmup, args.steps, max(args.reps, 3))}
            r["ours_1thread"] = with_threads(1, lambda: ours.measure(args.warmup, args.steps, max(args.reps, 3)))
            per_step = args.dense_dssm_texts if name == "dssm" else args.dense_clsm_texts
            db = min(args.batch, pow2_at_most(per_step / (1 + j)))
            dense = Dense(ours, j, db)
            r["dense"] = dense.measure(1, args.steps, args.dense_budget)
            r["dense_1thread"] = with_threads(1, lambda: dense.measure(1, args.steps, args.dense_budget))
            training[key] = r
            print(f"[{key}] ours {r['ours']['pairs_per_s']:,.0f} pairs/s ({THREADS} thr), "
                  f"{r['ours_1thread']['pairs_per_s']:,.0f} (1 thr); dense (batch {db}, {r['dense']['steps']} steps) "
                  f"{r['dense']['pairs_per_s']:,.1f} ({THREADS} thr), {r['dense_1thread']['pairs_per_s']:,.1f} (1 thr); "
                  f"load {load1()}", flush=True)
            if j == js[0]:
                enc = {"ours": encode_ours(ours, texts, hasher, args.reps, cold=True),
                       "ours_1thread": with_threads(1, lambda: encode_ours(ours, texts, hasher, args.reps, cold=False)),
                       "dense": encode_dense(dense, len(texts), 4096 if name == "dssm" else 128, args.dense_budget)}
                enc["dense_1thread"] = with_threads(
                    1, lambda: encode_dense(dense, len(texts), 4096 if name == "dssm" else 128, args.dense_budget))
                for side, mine in (("dense", "ours"), ("dense_1thread", "ours_1thread")):
                    d = enc[side]  # the same featuriser as ours, then the dense tower
                    d["full_titles_per_s"] = 1 / (1 / enc[mine]["featurise_titles_per_s"] + 1 / d["tower_titles_per_s"])
                d = enc["dense"]
                encoding[name] = enc
                print(f"[{name} encoding] ours {enc['ours']['full_titles_per_s']:,.0f} titles/s, "
                      f"dense tower {d['tower_titles_per_s']:,.0f} ({d['titles']:,} titles); load {load1()}", flush=True)
            if name == "clsm" and j == 4:
                profiles["clsm J=4"] = profile_step(ours, 15)
                profiles["clsm J=4, 1 thread"] = with_threads(1, lambda: profile_step(ours, 15))
            if name == "dssm" and j == 4:
                profiles["dssm J=4, 1 thread"] = with_threads(1, lambda: profile_step(ours, 10))
            del ours, dense

    checks: dict[str, Any] = {}
    if args.crosscheck_batches > 0 and 4 in js:
        for name in ("dssm", "clsm"):
            checks[f"{name} J=4"] = with_threads(
                1, lambda: crosscheck(name, data, args.crosscheck_batches * args.batch, args.batch))

    # ---- report
    print(f"\nTraining throughput, positive pairs/s (homedepot train, J random negatives, SGD; median step of "
          f"{args.steps} after {args.warmup} warm-up). ours: batch {args.batch}, the trainer's step incl. batch "
          f"assembly and negative sampling; dense: its batch as shown, {args.dense_budget:.0f} s budget")
    head = (f"{'':10} {'dense B':>7} {'steps':>6} | {f'ours {THREADS}thr':>10} {f'dense {THREADS}thr':>10} {'ours/dense':>10} | "
            f"{'ours 1thr':>10} {'dense 1thr':>10} {'ours/dense':>10} | {'target':>7} {'met':>8}")
    print(head + "\n" + "-" * len(head))
    for key, r in training.items():
        o, o1, d, d1 = (r[k]["pairs_per_s"] for k in ("ours", "ours_1thread", "dense", "dense_1thread"))
        name, j = key.split(" J=")
        tgt = TARGETS.get((name, int(j)))
        met = "-" if tgt is None else f"{'yes' if o >= tgt else 'no'}/{'yes' if o1 >= tgt else 'no'}"
        steps = f"{r['dense']['steps']}/{r['dense_1thread']['steps']}"
        print(f"{key:10} {r['dense']['batch']:>7} {steps:>6} | {fmt(o):>10} {fmt(d):>10} {ratio(o, d):>10} | "
              f"{fmt(o1):>10} {fmt(d1):>10} {ratio(o1, d1):>10} | {fmt(tgt):>7} {met:>8}")
    print(f"(dense B / steps: the dense reference's batch and its timed steps at {THREADS}/1 thread(s); "
          f"ours: batch {args.batch}, {args.steps} steps; met: at {THREADS} / 1 thread(s))")

    print("\nWhere a step's time goes, ours, ms (median over the timed steps; assembly = the numpy part of "
          "batch_loss timed alone, forward+loss = the rest of batch_loss)")
    head = f"{'':22} {'assembly':>9} {'fwd+loss':>9} {'backward':>9} {'optimizer':>10} {'step':>8} {'load':>6}"
    print(head + "\n" + "-" * len(head))
    for key, r in training.items():
        for tag, lab in (("ours", f"{THREADS} thr"), ("ours_1thread", "1 thr")):
            p = r[tag]["phases_ms"]
            print(f"{key + ', ' + lab:22} {p['assembly']:9.0f} {p['forward+loss']:9.0f} {p['backward']:9.0f} "
                  f"{p['optimizer']:10.0f} {1e3 * r[tag]['median_step_s']:8.0f} {r[tag]['load_avg_1min']:6.2f}")

    print(f"\nEncoding throughput, titles/s ({len(texts):,} homedepot titles, document tower, batch 4096; "
          f"median of {args.reps}; dense: tower on the first titles within {args.dense_budget:.0f} s)")
    head = (f"{'':42} | {f'ours {THREADS}thr':>10} {f'dense {THREADS}thr':>10} {'ours/dense':>10} | "
            f"{'ours 1thr':>10} {'dense 1thr':>10} {'ours/dense':>10} | {'target':>7}")
    print(head + "\n" + "-" * len(head))
    for name, enc in encoding.items():
        o, o1, d, d1 = enc["ours"], enc["ours_1thread"], enc["dense"], enc["dense_1thread"]
        rows = [
            ("full: encode_documents (featurise+tower)", "full_titles_per_s", ENCODE_TARGET.get(name)),
            ("  same, fresh model (cold word cache)", "cold_titles_per_s", None),
            ("  featurisation alone (model.features)", "featurise_titles_per_s", None),
            ("  batch slicing alone (features.batch)", "batching_titles_per_s", None),
            ("  tower alone (precomputed batches)", "tower_titles_per_s", None),
        ]
        print(f"{name.upper()} (dense: {d['titles']:,}/{d1['titles']:,} titles at {THREADS}/1 thread(s), batch "
              f"{d['batch']}; its full = our featuriser + its tower)")
        for lab, k, tgt in rows:
            a, b, a1, b1 = o.get(k), d.get(k), o1.get(k), d1.get(k)
            print(f"{lab:42} | {fmt(a):>10} {fmt(b):>10} {ratio(a, b):>10} | {fmt(a1):>10} {fmt(b1):>10} "
                  f"{ratio(a1, b1):>10} | {fmt(tgt):>7}")

    for p in profiles.values():
        print_profile(p)
    if checks:
        print("\ntrain_encoder cross-check, 1 thread (1 epoch over a subset, first step included, its log's "
              "pairs_per_s; vocabulary fit on the subset, so smaller V):")
        for key, c in checks.items():
            print(f"  {key}: {c['pairs']:,} pairs, V={c['vocab']:,}: {c['pairs_per_s']:,.0f} pairs/s "
                  f"(timed loop above, 1 thread: {training[key]['ours_1thread']['pairs_per_s']:,.0f}); load {c['load_avg_1min']}")

    hw_end = load1()
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    settings.update(gamma=GAMMA, lr=LR, window=WINDOW, hidden=list(HIDDEN), out=OUT, conv=CONV, vocab=len(hasher),
                    pairs=len(data.positives), titles=len(texts))
    summary = []
    for key, r in training.items():
        name, j = key.split(" J=")
        tgt = TARGETS.get((name, int(j)))
        best = max(r["ours"]["pairs_per_s"], r["ours_1thread"]["pairs_per_s"])
        summary.append(summary_row(f"{name.upper()} training J={j} (batch {args.batch}, best of {THREADS} and 1 threads)",
                                   "pairs/s", best, "dense-input reference (not a compute ceiling)",
                                   max(r["dense"]["pairs_per_s"], r["dense_1thread"]["pairs_per_s"]),
                                   target=f">= {tgt:,} pairs/s" if tgt else "", met=(best >= tgt) if tgt else None))
    for name, enc in encoding.items():
        tgt = ENCODE_TARGET.get(name)
        best = max(enc["ours"]["full_titles_per_s"], enc["ours_1thread"]["full_titles_per_s"])
        summary.append(summary_row(f"{name.upper()} encoding, featurisation included", "titles/s", best,
                                   "dense tower + our featuriser", max(enc["dense"]["full_titles_per_s"], enc["dense_1thread"]["full_titles_per_s"]),
                                   target=f">= {tgt:,} titles/s" if tgt else "", met=(best >= tgt) if tgt else None))
    path = write_json({"summary": summary, "hardware": hw, "load_avg_1min_end": hw_end, "settings": settings, "targets": {
        "train_pairs_per_s": {f"{n} J={j}": t for (n, j), t in TARGETS.items()},
        "encode_titles_per_s": ENCODE_TARGET}, "training": training, "encoding": encoding,
        "profile": profiles, "train_encoder_check": checks}, args.out)
    note = (f": torch's {THREADS}-thread regions wait for their slowest thread, so contention slows them "
            "disproportionately; the 1-thread figures are the more stable ones") if THREADS > 1 else ""
    if THREADS > 1 and hw["OMP_WAIT_POLICY"] == "unset":
        note += " (OMP_WAIT_POLICY unset: idle OpenMP threads spin; compare a run with OMP_WAIT_POLICY=PASSIVE)"
    print(f"\nload average (1 min) at start {hw['load_avg_1min']}, at end {hw_end} on {hw['nproc']} CPUs{note}.")
    print(f"peak RSS of the process: {maxrss_mb():,.0f} MB; total {time.perf_counter() - t_start:.0f} s; wrote {path}")


if __name__ == "__main__":
    main()
