"""Training the trigram encoders (DSSM, CLSM, and later MT-DNN's ranking task) on positive pairs.

Minibatches of (query, clicked title) pairs; negatives random from the document pool (or the
other pairs of the batch, or judged low-grade documents); loss −log softmax over γ·cosine (CLSM
§4); SGD as the papers, or Adam. After every epoch the model re-ranks the dev queries' candidates
and training stops when the dev metric has not improved for ``patience`` epochs; the best epoch's
weights are kept. Runs are seeded (same seed, same data → same weights) and can checkpoint every
epoch and resume from the last checkpoint."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..data import EvalSet, TrainingData
from ..evaluation import evaluate
from ..models.base import Model, rank
from ..models.neural import NeuralEncoder
from ..progress import enabled as progress_enabled
from ..text import TrigramHasher
from .losses import in_batch_loss, softmax_cosine_loss
from .negatives import hard_negatives, random_negatives, sample_pool


@dataclass
class _Pairs:
    """The training pairs as row indices into featurised query and document lists."""

    q_rows: np.ndarray
    d_rows: np.ndarray
    pos_sets: list[set[int]]  # per query row: its positive document rows
    hard: list[list[int]]  # per query row: judged documents below the positive grade
    q_texts: list[str]

    @classmethod
    def build(cls, data: TrainingData) -> "_Pairs":
        qids = list(dict.fromkeys(q for q, _ in data.positives))
        qrow = {q: i for i, q in enumerate(qids)}
        di = data.doc_index
        q_rows = np.fromiter((qrow[q] for q, _ in data.positives), dtype=np.int64, count=len(data.positives))
        d_rows = np.fromiter((di[d] for _, d in data.positives), dtype=np.int64, count=len(data.positives))
        pos_sets: list[set[int]] = [set() for _ in qids]
        for q, d in zip(q_rows, d_rows):
            pos_sets[q].add(int(d))
        hn = data.hard_negatives()
        hard = [[di[d] for d in hn.get(q, [])] for q in qids]
        return cls(q_rows, d_rows, pos_sets, hard, [data.queries[q] for q in qids])


@dataclass
class TrainLog:
    epochs: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0
    best_dev: float = float("-inf")
    stopped: str = ""

    def record(self, entry: dict[str, Any], net: torch.nn.Module, best_state: dict[str, torch.Tensor],
               bad: int) -> tuple[dict[str, torch.Tensor], int]:
        """Log one epoch's ``entry``; with a ``dev`` score, keep the weights when it improves and
        count the epochs since it last did (no dev score: the latest epoch is the best).
        Returns the best weights so far and the epochs since the best."""
        epoch = int(entry["epoch"])
        if "dev" in entry:
            if entry["dev"] > self.best_dev:
                self.best_dev, self.best_epoch, best_state, bad = entry["dev"], epoch, _state(net), 0
            else:
                bad += 1
        else:
            self.best_epoch, best_state = epoch, _state(net)
        entry["since_best"] = bad
        self.epochs.append(entry)
        return best_state, bad

    def to_dict(self) -> dict[str, Any]:
        return {"epochs": self.epochs, "best_epoch": self.best_epoch, "best_dev": self.best_dev, "stopped": self.stopped}


def train_encoder(
    model: NeuralEncoder,
    data: TrainingData,
    dev: EvalSet | None = None,
    *,
    progress: bool = True,
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Train ``model`` in place; returns a JSON-serialisable log. A list-valued ``gamma`` trains
    one model per value and keeps the best on the dev set (γ "set on a held-out set", CLSM §4)."""
    gammas = model.config["gamma"] if isinstance(model.config["gamma"], list) else [model.config["gamma"]]
    if len(gammas) == 1:
        return _train(model, data, dev, float(gammas[0]), progress, checkpoint_dir, resume)
    if dev is None:
        raise ValueError("tuning gamma needs a dev set")
    trials, best = {}, None
    for g in gammas:
        trial = type(model)(**{**model.config, "gamma": float(g)})
        sub = Path(checkpoint_dir) / f"gamma-{g}" if checkpoint_dir else None
        log = _train(trial, data, dev, float(g), progress, sub, resume)
        trials[str(g)] = log
        if best is None or log["best_dev"] > trials[str(best[0])]["best_dev"]:
            best = (g, trial)
    assert best is not None
    model.hasher, model.net = best[1].hasher, best[1].net
    if hasattr(best[1], "_table"):
        model._table = best[1]._table  # type: ignore[attr-defined]
    return {"gamma": float(best[0]), "trials": trials, **trials[str(best[0])]}


def _train(
    model: NeuralEncoder, data: TrainingData, dev: EvalSet | None, gamma: float, progress: bool,
    checkpoint_dir: str | Path | None, resume: bool,
) -> dict[str, Any]:
    cfg = model.config
    seed = int(cfg["seed"])
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    pairs = _Pairs.build(data)
    q_texts, d_texts = pairs.q_texts, data.doc_texts
    train_doc_texts = [d_texts[i] for i in np.unique(pairs.d_rows)]
    hasher = TrigramHasher.fit(q_texts + train_doc_texts, max_size=cfg["max_trigrams"], max_words=int(cfg["max_words"]))
    model.build(hasher, seed)
    net = model._require()
    qf, df = model.features(q_texts), model.features(d_texts)
    opt = _optimizer(cfg, net.parameters())
    b, j, n_docs = int(cfg["batch_size"]), int(cfg["negatives"]), len(d_texts)
    pool_size = min(int(cfg["neg_pool"]), b * max(j, 1), n_docs)
    h = int(cfg["hard_negatives"])

    def step(rows: np.ndarray) -> torch.Tensor:
        return _batch_loss(net, qf, df, pairs, rows, rng, cfg, gamma, pool_size, j, h, n_docs)

    out = run_epochs(model, net, opt, hasher, step, len(pairs.q_rows), rng, data, dev,
                     progress=progress, checkpoint_dir=checkpoint_dir, resume=resume)
    out["gamma"] = gamma
    return out


def run_epochs(
    model: Model, net: torch.nn.Module, opt: torch.optim.Optimizer, vocab: Any,
    step: Callable[[np.ndarray], torch.Tensor], n_items: int, rng: np.random.Generator,
    data: TrainingData, dev: EvalSet | None, *, progress: bool = True,
    checkpoint_dir: str | Path | None = None, resume: bool = False,
) -> dict[str, Any]:
    """The epoch loop every torch-trained model shares: shuffle the ``n_items`` training items,
    ``step(rows)`` gives a minibatch's loss, dev ``model.config["dev_metric"]`` after each epoch,
    early stopping after ``patience`` epochs without improvement (best weights kept), and a
    checkpoint per epoch (``vocab`` — anything with ``save(path)`` — is saved with it so a resume
    can refuse other data). ``rng`` is restored in place on resume, so ``step`` may close over it."""
    cfg = model.config
    log = TrainLog()
    best_state = _state(net)
    start_epoch = 0
    ckpt = Path(checkpoint_dir) if checkpoint_dir else None
    if ckpt is not None and resume and (ckpt / "trainer.json").is_file():
        start_epoch, log, best_state = _load_checkpoint(ckpt, net, opt, vocab, rng)
    b = int(cfg["batch_size"])
    bad = 0 if not log.epochs else log.epochs[-1].get("since_best", 0)
    show = progress and progress_enabled()
    for epoch in range(start_epoch, int(cfg["epochs"])):
        net.train()
        perm = rng.permutation(n_items)
        t0, total, seen = time.perf_counter(), 0.0, 0
        batches = range(0, len(perm), b)
        bar = _Bar(f"{model.name} epoch {epoch + 1}", len(batches)) if show else None
        for start in batches:
            rows = perm[start : start + b]
            loss = step(rows)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(rows)
            seen += len(rows)
            if bar:
                bar.advance(seen / (time.perf_counter() - t0), total / seen, log.best_dev)
        if bar:
            bar.close()
        secs = time.perf_counter() - t0
        entry = {"epoch": epoch + 1, "loss": total / max(seen, 1), "pairs_per_s": seen / secs, "seconds": secs}
        if dev is not None:
            entry["dev"] = dev_score(model, data, dev, str(cfg["dev_metric"]))
        best_state, bad = log.record(entry, net, best_state, bad)
        if ckpt is not None:
            _save_checkpoint(ckpt, net, opt, vocab, epoch + 1, log, rng, best_state)
        if dev is not None and bad >= int(cfg["patience"]):
            log.stopped = f"no {cfg['dev_metric']} improvement on dev for {bad} epochs"
            break
    else:
        log.stopped = f"reached {cfg['epochs']} epochs"
    net.load_state_dict(best_state)
    return log.to_dict()


def _batch_loss(net, qf, df, pairs, rows, rng, cfg, gamma, pool_size, j, h, n_docs) -> torch.Tensor:  # type: ignore[no-untyped-def]
    q_rows, d_rows = pairs.q_rows[rows], pairs.d_rows[rows]
    qv = F.normalize(net.query(qf.batch(q_rows)), dim=1)
    if cfg["sampling"] == "in-batch":
        dv = F.normalize(net.doc(df.batch(d_rows)), dim=1)
        pos_sets = [pairs.pos_sets[q] for q in q_rows]
        same = torch.from_numpy(np.array([[int(d) in s for d in d_rows] for s in pos_sets], dtype=bool))
        same.fill_diagonal_(False)
        return in_batch_loss(qv @ dv.T, same, gamma)
    if cfg["sampling"] != "random":
        raise ValueError(f"sampling must be 'random' or 'in-batch', got {cfg['sampling']!r}")
    pool = sample_pool(rng, n_docs, pool_size) if j > 0 else np.zeros(0, dtype=np.int64)
    neg = random_negatives(rng, pool, [pairs.pos_sets[q] for q in q_rows], j) if j > 0 else np.zeros((len(rows), 0), np.int64)
    hard = hard_negatives(rng, [pairs.hard[q] for q in q_rows], h) if h > 0 else np.zeros((len(rows), 0), np.int64)
    hard_rows = hard[hard >= 0]
    dv = F.normalize(net.doc(df.batch(np.concatenate([d_rows, pool, hard_rows]))), dim=1)
    b = len(rows)
    pos = (qv * dv[:b]).sum(1)
    sims = [torch.zeros((b, 0))]
    if j > 0:  # each query's J pool documents: gathered, not a full (batch x pool) similarity matrix
        idx = torch.from_numpy(neg)
        nv = dv[b : b + len(pool)][idx.clamp(min=0)]  # (b, J, dim)
        sims.append(torch.einsum("bd,bjd->bj", qv, nv).masked_fill(idx < 0, float("-inf")))
    if h > 0:
        slot = np.full(hard.shape, -1, dtype=np.int64)
        slot[hard >= 0] = b + len(pool) + np.arange(len(hard_rows))
        hs = torch.from_numpy(slot)
        hv = dv[hs.clamp(min=0)]  # (b, h, dim)
        sims.append((qv[:, None, :] * hv).sum(-1).masked_fill(hs < 0, float("-inf")))
    return softmax_cosine_loss(pos, torch.cat(sims, dim=1), gamma)


def dev_score(model: Model, data: TrainingData, dev: EvalSet, metric: str) -> float:
    """Mean ``metric`` of the model re-ranking the dev queries' candidates."""
    ids = sorted({d for c in dev.candidates.values() for d in c if d in data.doc_index})
    model.index(ids, [data.doc_texts[data.doc_index[d]] for d in ids])
    cands = {q: [d for d in c if d in data.doc_index] for q, c in dev.candidates.items()}
    run = rank(model, dev.queries, cands)
    return float(evaluate(run, dev.qrels, [metric]).mean[metric])


def _optimizer(cfg: dict[str, Any], params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """SGD (the papers) or Adam over ``params`` at ``cfg["lr"]``."""
    if cfg["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=float(cfg["lr"]))
    if cfg["optimizer"] == "adam":
        return torch.optim.Adam(params, lr=float(cfg["lr"]))
    raise ValueError(f"optimizer must be 'sgd' or 'adam', got {cfg['optimizer']!r}")


def _state(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


class _Bar:
    """One epoch's progress bar: batches, pairs/s, running loss, best dev metric so far."""

    def __init__(self, title: str, total: int):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn(title), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[pps]:>7.0f} pairs/s  loss {task.fields[loss]:.4f}  best dev {task.fields[dev]}"),
            TimeElapsedColumn(), console=Console(stderr=True), transient=True,
        )
        self.progress.start()
        self.task = self.progress.add_task(title, total=total, pps=0.0, loss=0.0, dev="-")

    def advance(self, pps: float, loss: float, dev: float) -> None:
        self.progress.update(self.task, advance=1, pps=pps, loss=loss, dev="-" if dev == float("-inf") else f"{dev:.4f}")

    def close(self) -> None:
        self.progress.stop()


# ------------------------------------------------------------------------------------ checkpoints
def _save_checkpoint(d: Path, net, opt, vocab, epoch, log, rng, best_state) -> None:  # type: ignore[no-untyped-def]
    """Weights, best weights, optimizer state and RNG states: safetensors + JSON, no pickle."""
    from safetensors.torch import save_file

    d.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(d / "weights.safetensors"))
    save_file({k: v.contiguous() for k, v in best_state.items()}, str(d / "best.safetensors"))
    sd = opt.state_dict()
    tensors = {f"{pid}.{k}": v.contiguous() for pid, st in sd["state"].items() for k, v in st.items() if torch.is_tensor(v)}
    tensors["torch_rng"] = torch.get_rng_state()
    save_file(tensors, str(d / "optimizer.safetensors"))
    vocab.save(d / "vocabulary.json")
    meta = {"epoch": epoch, "log": log.to_dict(), "rng": rng.bit_generator.state, "param_groups": sd["param_groups"]}
    tmp = d / "trainer.json.tmp"
    tmp.write_text(json.dumps(meta))
    tmp.replace(d / "trainer.json")  # the checkpoint counts only once this is written


def _load_checkpoint(d: Path, net, opt, vocab, rng):  # type: ignore[no-untyped-def]
    from safetensors.torch import load_file

    meta = json.loads((d / "trainer.json").read_text())
    saved_vocab = type(vocab).load(d / "vocabulary.json")
    if _vocab_key(saved_vocab) != _vocab_key(vocab):
        raise ValueError(f"{d}: checkpoint was trained on other data (vocabulary differs); cannot resume")
    net.load_state_dict(load_file(str(d / "weights.safetensors")))
    best = load_file(str(d / "best.safetensors"))
    tensors = load_file(str(d / "optimizer.safetensors"))
    torch.set_rng_state(tensors.pop("torch_rng"))
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, v in tensors.items():
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    rng.bit_generator.state = meta["rng"]
    log = TrainLog(**{k: meta["log"][k] for k in ("epochs", "best_epoch", "best_dev", "stopped")})
    return int(meta["epoch"]), log, best


def _vocab_key(vocab: Any) -> Any:
    """What identifies a training vocabulary: trigrams (trigram encoders) or terms (word models)."""
    return getattr(vocab, "trigrams", None) or getattr(vocab, "terms")
