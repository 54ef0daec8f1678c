"""One ``device`` setting for training and encoding: ``auto`` is CUDA when torch sees a GPU, else the
CPU. Weights move once, where the setting is applied; every input tensor is built on the device of
the weights it meets (``model_device``), so no other code moves tensors between devices."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch


def resolve_device(name: str) -> torch.device:
    """The torch device a ``device`` setting names (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``).
    Under torchrun with several processes, ``auto`` and ``cuda`` mean each process's own GPU
    (``cuda:LOCAL_RANK``)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and int(os.environ.get("WORLD_SIZE", "1")) > 1 and "LOCAL_RANK" in os.environ:
        name = f"cuda:{int(os.environ['LOCAL_RANK'])}"
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r}: torch sees no CUDA GPU on this machine (use 'auto' or 'cpu')")
    return dev


def model_device(net: torch.nn.Module) -> torch.device:
    """Where ``net``'s weights are: models build their input tensors there."""
    p = next(net.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


# ------------------------------------------------------------------------------------ CPU threads
_POOLS: dict[int, ThreadPoolExecutor] = {}
_KEPT = False


def keep_freed_memory() -> bool:
    """Have glibc's malloc serve large arrays from its heap and keep what is freed for reuse, instead
    of mapping fresh pages for every array over its mmap threshold and returning them on free.
    A training step allocates and frees the same large arrays every step (CLSM's window slots),
    and every fresh page costs a page fault; kept, the pages are reused and training runs faster
    (measured by benchmarks/train_speed.py). The process keeps its peak heap afterwards. Once per
    process, on glibc only; a user's ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` wins.
    Returns whether it applied the setting."""
    global _KEPT
    if _KEPT or "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    import ctypes
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL("libc.so.6")
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    _KEPT = bool(libc.mallopt(m_mmap_threshold, 1 << 30) and libc.mallopt(m_trim_threshold, (1 << 31) - 1))
    return _KEPT


def run_split(fn: Callable[..., Any], n: int, *args: Any, grain: int = 64) -> None:
    """``fn(*args, a, b)`` over ``range(n)`` cut into one slice per torch thread (at least ``grain``
    items a slice), run at once: for kernels that release the GIL (numpy's tanh, the compiled CLSM
    passes), so they are not the serial part of a multi-threaded step. One slice runs on the
    calling thread. Items already weighed into equal runs (``_clsm_kernels.balanced_cuts``) take
    ``grain=1``."""
    threads = max(1, min(torch.get_num_threads(), n // grain or 1))
    if threads == 1:
        fn(*args, 0, n)
        return
    step = -(-n // threads)
    cuts = [(a, min(a + step, n)) for a in range(0, n, step)]
    pool = _POOLS.get(threads) or _POOLS.setdefault(
        threads, ThreadPoolExecutor(threads - 1, thread_name_prefix="semsearch")
    )
    futures = [pool.submit(fn, *args, a, b) for a, b in cuts[1:]]
    fn(*args, *cuts[0])
    for f in futures:
        f.result()
