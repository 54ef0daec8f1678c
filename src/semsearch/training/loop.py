"""The one epoch loop every gradient-trained family uses (DSSM/CLSM, MT-DNN, K-NRM/MatchPyramid,
the transformers, S2Net), and the one EM loop of the topic and translation models.

What differs per family is passed in as small functions: ``batches()`` (one epoch's minibatches, in
order), ``loss(batch)`` (a scalar tensor, or ``(tensor, task name)`` for multi-task training),
``size(batch)`` (training items in it, for the rate) and ``dev()`` (dev metrics after an epoch; its
``"dev"`` entry is what early stopping watches). The loop owns the rest: optimizer steps, the one
early-stopping rule (stop after ``patience`` epochs without ``dev`` rising by more than
``min_delta``; keep the best epoch's weights), checkpoints with exact resume, the device, and
the device (``args.device``: the net moves there once; models build their inputs where their
weights are) and progress (``progress.Reporter``: a bar on a terminal, a line per epoch with rate
and ETA in a log).

Under torchrun (``training.distributed``) the loop is also where the processes meet: ``batches()``
yields the global batch on every rank and ``loss(batch)`` returns the rank's share of it (a trainer
that splits its batches so says with ``sharded=True``; others are refused); after ``backward()``
the gradients and the loss are averaged over the ranks (one all-reduce, by hand rather than
``DistributedDataParallel``: ``distributed.sync_gradients`` says why); after each epoch the ranks'
sampler states are compared (ranks that drew different batches would train on a mix, silently);
rank 0 scores dev and broadcasts the scores, so every rank takes the same early-stopping decision;
only rank 0 prints progress and writes checkpoints, and the others wait for each checkpoint (a
resume reads it on every rank). On one process none of this runs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..progress import Reporter
from . import distributed
from .args import TrainArgs

if TYPE_CHECKING:  # torch loads where a network trains: EM (topic, translation models) runs without it
    import torch

B = TypeVar("B")


def state_copy(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


@dataclass
class EarlyStopping:
    """The one early-stopping rule: an epoch improves when its ``dev`` exceeds the best by more than
    ``min_delta``; after ``patience`` epochs without one, training stops; the best epoch's weights
    are kept (no dev score: the latest epoch is the best). Its ``log`` is the training log."""

    patience: int
    min_delta: float = 0.0
    epochs: list[dict[str, Any]] = field(default_factory=list)
    best_epoch: int = 0
    best_dev: float = float("-inf")
    since_best: int = 0
    stopped: str = ""

    def record(self, entry: dict[str, Any]) -> bool:
        """Log one epoch; True when it is the best so far (its weights should be kept)."""
        better = "dev" not in entry or entry["dev"] > self.best_dev + self.min_delta
        if better:
            self.best_epoch, self.since_best = int(entry["epoch"]), 0
            if "dev" in entry:
                self.best_dev = float(entry["dev"])
        else:
            self.since_best += 1
        entry["since_best"] = self.since_best
        self.epochs.append(entry)
        return better

    @property
    def should_stop(self) -> bool:
        return bool(self.epochs) and "dev" in self.epochs[-1] and self.since_best >= self.patience

    def to_dict(self) -> dict[str, Any]:
        return {
            "epochs": self.epochs,
            "best_epoch": self.best_epoch,
            "best_dev": self.best_dev,
            "stopped": self.stopped,
        }


@dataclass
class Checkpoint:
    """Where to write a checkpoint after every epoch: weights, best weights, optimizer and RNG
    states as safetensors + JSON (never pickle). ``vocab`` (anything with ``save``/``load`` and
    ``trigrams`` or ``terms``) is saved with it so a resume on other data is refused."""

    path: Path
    vocab: Any = None
    resume: bool = False


def epoch_loop(
    net: torch.nn.Module,
    opt: torch.optim.Optimizer,
    args: TrainArgs,
    *,
    batches: Callable[[], Iterable[B]],
    loss: Callable[[B], torch.Tensor | tuple[torch.Tensor, str]],
    size: Callable[[B], int],
    dev: Callable[[], dict[str, float]] | None = None,
    title: str = "training",
    rng: np.random.Generator | None = None,
    checkpoint: Checkpoint | None = None,
    progress: bool = True,
    dev_before: bool = False,
    n_batches: Callable[[], int] | None = None,
    sharded: bool = False,
) -> dict[str, Any]:
    """Train ``net`` for at most ``args.epochs`` epochs (module docstring); returns the log.
    ``rng`` (restored in place on resume, so ``batches`` and ``loss`` may close over it);
    ``dev_before``: score the untrained weights first, as epoch 0, so training can keep them;
    ``sharded``: under torchrun, ``loss`` computes this rank's share of each global batch
    (``training.distributed``) and ``size`` counts the global batch.

    Args:
        net: the network trained.
        opt: its optimizer.
        args: epochs, patience, dev metric and the like.
        batches: an epoch's batches.
        loss: a batch's loss (or loss and task name).
        size: items in a batch.
        dev: the dev figures of the current weights.
        title: the progress bar's title.
        rng: the random state checkpoints save and restore.
        checkpoint: where and how often to checkpoint.
        progress: show progress.
        dev_before: score the untrained weights as epoch 0.
        n_batches: batches in an epoch, for the progress bar.
        sharded: ``loss`` computes this rank's share (torchrun).

    Returns:
        The training log."""
    from ..device import keep_freed_memory, resolve_device

    keep_freed_memory()  # each step frees and allocates the same large arrays: no page faults anew
    par = distributed.init(args.device) and distributed.active()
    if par:
        if not sharded:
            raise ValueError(
                f"{title}: this trainer does not split its batches across processes; train it without torchrun"
            )
        distributed.check_batch(args.batch_size)
    main = distributed.is_main()
    net.to(resolve_device(args.device))  # the one place training moves weights; inputs follow them
    params = [p for p in net.parameters() if p.requires_grad] if par else []
    stop = EarlyStopping(args.patience, args.min_delta)
    keep = args.epochs > 1 or dev_before  # one epoch and nothing to compare: no copy of the weights
    best_state = state_copy(net) if keep else None
    start = 0
    base_lrs = [g["lr"] for g in opt.param_groups]  # as configured, before a checkpoint's scaled ones load
    if checkpoint is not None and checkpoint.resume and (checkpoint.path / "trainer.json").is_file():
        start, best_state = _load_checkpoint(checkpoint, net, opt, rng, stop)
    elif dev_before and dev is not None:
        stop.record({"epoch": 0, **_dev(dev, main)})
    if par:
        distributed.broadcast_state(net)
    per_epoch = None  # batches an epoch has: the schedule's clock (a constant rate needs none)
    if args.lr_schedule != "constant":
        if n_batches is None:
            raise ValueError(f"{title}: lr_schedule = {args.lr_schedule!r} needs the number of batches an epoch has")
        per_epoch = n_batches()
    t_start = time.perf_counter()
    for epoch in range(start, args.epochs):
        net.train()
        rep = Reporter(
            f"{title} epoch {epoch + 1}/{args.epochs}",
            n_batches() if n_batches else None,
            unit="pairs",
            show=progress and main,
        )
        t0 = time.perf_counter()
        totals: dict[Any, list[float]] = {}
        seen, steps = 0, 0
        for batch in batches():
            if per_epoch is not None:  # the step's rate, from the step's place in the whole training
                f = lr_factor(args.lr_schedule, epoch * per_epoch + steps, args.epochs * per_epoch, args.warmup)
                for g, lr in zip(opt.param_groups, base_lrs):
                    g["lr"] = lr * f
            out = loss(batch)
            value, task = out if isinstance(out, tuple) else (out, "")
            opt.zero_grad(set_to_none=True)
            if par:  # every rank's share of the global batch: gradients and loss averaged over ranks
                if value.requires_grad:
                    value.backward()
                figure = distributed.sync_gradients(params, value.detach())[0]
            else:
                value.backward()
            opt.step()
            n = size(batch)
            s = totals.setdefault(task, [0.0, 0, 0])
            s[0] += (figure if par else float(value.detach())) * n
            s[1] += n
            s[2] += 1
            seen, steps = seen + n, steps + 1
            rep.advance(1, n, loss=s[0] / max(s[1], 1))
        rep.close()
        if par and rng is not None:  # the same global batches and negatives on every rank, still
            distributed.check_in_step("sampler states", json.dumps(rng.bit_generator.state, sort_keys=True))
        secs = time.perf_counter() - t0
        entry: dict[str, Any] = {
            "epoch": epoch + 1,
            "seconds": secs,
            "steps": steps,
            "pairs_per_s": seen / max(secs, 1e-9),
        }
        entry.update({f"loss_{t}" if t else "loss": s[0] / max(s[1], 1) for t, s in totals.items()})
        if dev is not None:
            net.eval()
            entry.update(_dev(dev, main))
        if stop.record(entry) and keep:
            best_state = state_copy(net)
        shown = {k: v for k, v in entry.items() if k.startswith("loss")}
        if "dev" in entry:
            shown[f"dev {args.dev_metric}"] = entry["dev"]
        rep.epoch_line(epoch + 1, args.epochs, time.perf_counter() - t_start, **shown)
        if checkpoint is not None:
            if main:
                _save_checkpoint(checkpoint, net, opt, epoch + 1, stop, rng, best_state if keep else state_copy(net))
            if par:  # no rank runs ahead of the checkpoint on disk (a resume reads it on every rank)
                distributed.barrier()
        if stop.should_stop:
            stop.stopped = f"no {args.dev_metric} improvement on dev for {stop.since_best} epochs"
            break
    else:
        stop.stopped = f"reached {args.epochs} epochs"
    if best_state is not None and stop.best_epoch != (stop.epochs[-1]["epoch"] if stop.epochs else 0):
        net.load_state_dict(best_state)
    net.eval()
    return stop.to_dict()


def lr_factor(schedule: str, step: int, total: int, warmup: float = 0.0) -> float:
    """The learning rate of step ``step`` (0-based) of ``total``, as a fraction of the configured
    one. "linear" (Devlin et al. 2019's fine-tuning schedule, sentence-transformers' WarmupLinear):
    (step + 1) / w over the first w = round(warmup · total) steps, then falling linearly to reach
    0 after the last step; "constant": 1."""
    if schedule == "constant":
        return 1.0
    w = int(round(warmup * total))
    if step < w:
        return (step + 1) / w
    return max(0.0, (total - step) / max(1, total - w))


def _dev(dev: Callable[[], dict[str, float]], main: bool) -> dict[str, float]:
    """The dev scores: on one process its own; under torchrun rank 0's, broadcast (the weights are
    the same on every rank; one scoring is enough, and every rank then stops at the same epoch).
    So ``dev`` must not draw from the training's random numbers (the ranks would then part ways;
    ``check_in_step`` after each epoch would catch it)."""
    return distributed.broadcast_object(dev() if main else {})


def em_loop(
    step: Callable[[int], dict[str, float]],
    iterations: int,
    *,
    tol: float = 0.0,
    min_iterations: int = 0,
    title: str = "EM",
    progress: bool = True,
    key: str = "loglik",
    unit: str = "iterations",
    items: int | None = None,
    shown: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The one EM loop: ``step(i)`` runs iteration ``i`` (E and M) and returns its figures; stops
    after ``iterations`` or, from iteration ``min_iterations`` on, when ``key`` changes by less than
    ``tol`` relative to its size. The progress shows ``key`` and the ``shown`` figures, and a rate
    of ``items`` (per iteration) ``unit``.

    Args:
        step: runs iteration i and returns its figures.
        iterations: the most iterations.
        tol: the relative change of ``key`` that stops it.
        min_iterations: iterations before ``tol`` applies.
        title: the progress bar's title.
        progress: show progress.
        key: the figure that decides convergence.
        unit: what ``items`` counts.
        items: items per iteration, for the rate shown.
        shown: further figures shown.

    Returns:
        The log."""
    rep = Reporter(title, iterations, unit=unit, show=progress)
    log: list[dict[str, float]] = []
    stopped = f"reached {iterations} iterations"
    try:
        for i in range(iterations):
            entry = {"iteration": i + 1, **step(i)}
            log.append(entry)
            rep.advance(1, items, **{k: entry[k] for k in (key, *shown) if k in entry})
            if tol > 0 and len(log) > 1 and key in entry and i + 1 >= min_iterations:
                prev = log[-2][key]
                if abs(entry[key] - prev) <= tol * max(abs(prev), 1e-12):
                    stopped = f"{key} changed by less than {tol:g} (relative) at iteration {i + 1}"
                    break
    finally:
        rep.close()
    return {"iterations": log, "stopped": stopped}


# ------------------------------------------------------------------------------------ checkpoints
def _save_checkpoint(ck: Checkpoint, net, opt, epoch, stop, rng, best_state) -> None:
    # the whole checkpoint is written beside ck.path and swapped in at once: a run killed at any
    # point resumes from the previous epoch's complete checkpoint, never a mix of two epochs
    from ..data.files import atomic_dir

    with atomic_dir(ck.path) as d:
        _write_checkpoint(d, ck, net, opt, epoch, stop, rng, best_state)


def _write_checkpoint(d, ck: Checkpoint, net, opt, epoch, stop, rng, best_state) -> None:
    import torch
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(d / "weights.safetensors"))
    save_file({k: v.contiguous() for k, v in best_state.items()}, str(d / "best.safetensors"))
    sd = opt.state_dict()
    tensors = {
        f"{pid}.{k}": v.contiguous() for pid, st in sd["state"].items() for k, v in st.items() if torch.is_tensor(v)
    }
    tensors["torch_rng"] = torch.get_rng_state()
    save_file(tensors, str(d / "optimizer.safetensors"))
    if ck.vocab is not None:
        ck.vocab.save(d / "vocabulary.json")
    meta = {
        "epoch": epoch,
        "log": stop.to_dict(),
        "since_best": stop.since_best,
        "rng": rng.bit_generator.state if rng is not None else None,
        "param_groups": sd["param_groups"],
    }
    (d / "trainer.json").write_text(json.dumps(meta))


def _load_checkpoint(ck: Checkpoint, net, opt, rng, stop):
    import torch
    from safetensors.torch import load_file

    d = ck.path
    meta = json.loads((d / "trainer.json").read_text())
    if ck.vocab is not None:
        saved = type(ck.vocab).load(d / "vocabulary.json")
        if _vocab_key(saved) != _vocab_key(ck.vocab):
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
    if rng is not None and meta["rng"] is not None:
        rng.bit_generator.state = meta["rng"]
    log = meta["log"]
    stop.epochs, stop.best_epoch, stop.best_dev = log["epochs"], log["best_epoch"], log["best_dev"]
    stop.since_best = int(meta.get("since_best", log["epochs"][-1].get("since_best", 0) if log["epochs"] else 0))
    return int(meta["epoch"]), best


def _vocab_key(vocab: Any) -> Any:
    """What identifies a training vocabulary: trigrams (trigram encoders) or terms (word models)."""
    return getattr(vocab, "trigrams", None) or vocab.terms
