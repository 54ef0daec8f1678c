"""Data-parallel training across the processes torchrun starts
(``torchrun --nproc-per-node N -m semsearch train ...``): gloo on the CPU, NCCL on CUDA.

How the trainers split the work (``loop.epoch_loop`` does the rest): every rank runs the same seeded
code, so it draws the same global batch (``batch_size`` items), the same shared random negatives
and the same judged ones; it then computes the loss of its contiguous slice of the batch
(``shard``) against the whole batch's documents (``batch_documents``: in-batch negatives gathered
from every rank, with gradients flowing back to the rank that encoded them) and sums it times
``loss_scale``, so that the ranks' gradients, averaged (``sync_gradients``), are the one-process
gradient of the global batch's mean loss.

Everything here is a no-op on one process: ``shard`` is the whole batch, ``loss_scale`` None (the
trainer's own mean), ``batch_documents`` returns what it is given."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import numpy as np

if TYPE_CHECKING:  # torch loads where a network trains (the loop imports this module; EM runs without it)
    import torch

T = TypeVar("T")


# ------------------------------------------------------------------------------------ the group
def launched() -> bool:
    """Whether torchrun started this process as one of several (its ``WORLD_SIZE``/``RANK``)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


def init(device: str = "auto") -> bool:
    """Join torchrun's process group (once; its rendezvous is ``MASTER_ADDR``/``MASTER_PORT``): NCCL
    when ``device`` resolves to CUDA, else gloo. False, and nothing done, when not launched so."""
    import torch
    import torch.distributed as dist

    if not launched() or not dist.is_available():
        return False
    if not dist.is_initialized():
        from ..device import resolve_device

        cuda = resolve_device(device).type == "cuda"
        if cuda:
            torch.cuda.set_device(local_rank())
        dist.init_process_group("nccl" if cuda else "gloo")
    return True


def active() -> bool:
    """Whether this process trains as one of several (a process group of more than one is up)."""
    if "torch.distributed" not in sys.modules:  # no group without it; and asking does not load torch
        return False
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world() -> int:
    """How many processes train together (1 when not distributed)."""
    if not active():
        return 1
    import torch.distributed as dist

    return dist.get_world_size()


def rank() -> int:
    """This process's rank (0 when not distributed)."""
    if not active():
        return 0
    import torch.distributed as dist

    return dist.get_rank()


def is_main() -> bool:
    """Whether this process writes files and prints progress (rank 0, or the only process)."""
    return rank() == 0


def local_rank() -> int:
    """This process's rank on its machine (torchrun's ``LOCAL_RANK``): which GPU it takes."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def barrier() -> None:
    """Wait until every rank is here (no-op on one process)."""
    if active():
        import torch.distributed as dist

        dist.barrier()


def teardown() -> None:
    """Leave the process group (no-op when none is up)."""
    if "torch.distributed" not in sys.modules:
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def exit_process(code: int = 0) -> NoReturn:
    """End a torchrun worker whose work is done and written: flush the logs and the terminal, then
    leave without the interpreter's and the C++ runtime's own teardown (``os._exit``). About one
    run in twenty of the two-process test launch aborted in that teardown here ("terminate called
    without an active exception", no Python frame left, every file already written: a thread pool
    of gloo, OpenMP or numba destroyed while running; gloo issue #155 reports the same race), and
    torchrun then reports the whole job failed and kills the other ranks."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing more can be written there
            pass
    os._exit(code)


def check_batch(batch_size: int, label: str = "batch_size") -> None:
    """Refuse a global batch the ranks cannot split evenly."""
    w = world() if active() else int(os.environ.get("WORLD_SIZE", "1"))
    if w > 1 and batch_size % w:
        raise ValueError(
            f"training parameter {label!r} = {batch_size} is not divisible by the {w} processes "
            f"(torchrun --nproc-per-node); each takes {label}/{w} items of every batch, so use a "
            f"multiple of {w}"
        )


# ------------------------------------------------------------------------------------ sharding
def bounds(n: int) -> np.ndarray:
    """Where each rank's slice of a global batch of ``n`` items starts (``world() + 1`` offsets;
    ``np.array_split``'s: sizes differ by at most one, e.g. in an epoch's last, short batch)."""
    w = world()
    sizes = np.full(w, n // w, dtype=np.int64)
    sizes[: n % w] += 1
    return np.concatenate([[0], np.cumsum(sizes)])


def shard(n: int) -> slice:
    """This rank's contiguous slice of a global batch of ``n`` items (all of it on one process)."""
    if not active():
        return slice(0, n)
    b = bounds(n)
    r = rank()
    return slice(int(b[r]), int(b[r + 1]))


def loss_scale(n: int) -> float | None:
    """None on one process (the trainer takes its usual mean over the batch); otherwise
    ``world / n``: a rank's loss summed over its slice times this, averaged over the ranks (as the
    gradients are), is the mean over the ``n`` items (or pairs, or queries: the loss's own
    denominator) of the global batch, whatever the slices' sizes."""
    return world() / max(n, 1) if active() else None


def gather(x: torch.Tensor, n: int) -> torch.Tensor:
    """Every rank's rows of a global batch of ``n`` items, concatenated in rank order, where each
    rank holds its ``shard(n)`` rows as ``x``. Autograd-aware: torch's functional
    ``all_gather_single_autograd`` (what ``torch.distributed.nn.functional.all_gather``, now
    deprecated, points to), whose backward is a reduce-scatter: the gradient every rank's loss
    puts on a row returns, summed, to the rank that computed it. Slices of unequal size are
    padded to the largest and cut back."""
    if not active():
        return x
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    sizes = np.diff(bounds(n))
    m, w = int(sizes.max()), len(sizes)
    if len(x) < m:
        x = torch.cat([x, x.new_zeros((m - len(x), *x.shape[1:]))])
    out = funcol.wait_tensor(funcol.all_gather_single_autograd(x.contiguous(), 0, dist.group.WORLD))  # type: ignore[arg-type]  # initialised
    if int(sizes.min()) == m:
        return out
    parts = out.view(w, m, *x.shape[1:])
    return torch.cat([parts[r, : int(s)] for r, s in enumerate(sizes)])


def batch_documents(mine: torch.Tensor, ids: np.ndarray) -> tuple[torch.Tensor, np.ndarray, int]:
    """The in-batch documents this rank's queries are scored against: ``mine`` holds the vectors of
    ``ids[shard(len(ids))]``; returns every rank's vectors (``gather``), their ids, and where this
    rank's own rows start among them (its queries' positives). Per-rank negatives would silently
    give each query ``world`` times fewer of them than the one-process run on the same batch."""
    return gather(mine, len(ids)), ids, shard(len(ids)).start


# ------------------------------------------------------------------------------------ the step
def sync_gradients(params: Sequence[torch.nn.Parameter], *figures: float | torch.Tensor) -> list[float]:
    """Average ``params``' gradients over the ranks in place, and ``figures`` (the step's loss),
    returned. By hand, one flat all-reduce per dtype after ``backward()``, rather than
    ``DistributedDataParallel``: DDP's reducer needs its wrapper's ``forward`` called every step,
    while our trainers call the towers' own methods (``net.query``, ``net.doc``, ``net.logits``) and
    custom autograd functions; MT-DNN's steps leave other tasks' layers without a gradient. Here a
    parameter no rank gave a gradient keeps ``None`` (an optimizer such as Adam then skips it,
    as on one process); one some ranks did not reach counts as zero there. Gradients are dense
    (the towers' embedding-bag backward produces dense ones); a sparse one is refused."""
    import torch
    import torch.distributed as dist

    w = world()
    grads = [p.grad for p in params]
    if any(g is not None and g.is_sparse for g in grads):
        raise ValueError("distributed training averages dense gradients; this model produced a sparse one")
    head = torch.tensor([*(g is not None for g in grads), *(float(f) for f in figures)], dtype=torch.float64)
    groups: dict[tuple[torch.dtype, torch.device], list[int]] = {}
    for i, p in enumerate(params):
        groups.setdefault((p.dtype, p.device), []).append(i)
    flats = {}
    for key, idx in groups.items():
        flat = torch.cat([(grads[i] if grads[i] is not None else torch.zeros_like(params[i])).reshape(-1) for i in idx])  # type: ignore[union-attr]  # not None
        dist.all_reduce(flat)
        flats[key] = flat.div_(w)
    device = params[0].device if params else torch.device("cpu")
    head = head.to(device)
    dist.all_reduce(head)
    head = head.cpu()
    for key, idx in groups.items():
        at = 0
        for i in idx:
            p, k = params[i], params[i].numel()
            p.grad = flats[key][at : at + k].view_as(p) if head[i] > 0 else None
            at += k
    return [float(v) / w for v in head[len(params) :]]


def broadcast_state(net: torch.nn.Module) -> None:
    """Rank 0's weights and buffers to every rank (they start identical from the seed; this
    guarantees it, as DDP does)."""
    import torch
    import torch.distributed as dist

    if active():
        with torch.no_grad():
            for t in [*net.parameters(), *net.buffers()]:
                dist.broadcast(t.data, 0)


def check_in_step(what: str, value: Any) -> None:
    """Refuse to go on when the ranks disagree about ``value`` (e.g. the sampler's random state
    after an epoch): ranks that drew different batches or negatives would train on a mix of
    batches, silently. One small all-gather; no-op on one process."""
    if not active():
        return
    import torch.distributed as dist

    seen: list[Any] = [None] * world()
    dist.all_gather_object(seen, value)
    if any(v != seen[0] for v in seen):
        raise RuntimeError(
            f"distributed training: the ranks' {what} differ (rank {rank()}); every rank must draw "
            "the same batches and negatives from the same seed"
        )


def broadcast_object(obj: T) -> T:
    """Rank 0's ``obj`` on every rank (e.g. its dev scores, so all take the same early-stopping
    decision); the object itself on one process."""
    if not active():
        return obj
    import torch.distributed as dist

    box: list[Any] = [obj]
    dist.broadcast_object_list(box, 0)
    return box[0]
