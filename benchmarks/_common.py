"""Helpers shared by the benchmark scripts: hardware line, memory readings, timing, JSON output, and
a bundle served on a free loopback port."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

_TORCH_FIRST = "torch" in sys.modules  # torch's libgomp read its settings before semsearch set its default
import semsearch  # noqa: E402,F401 - imported before torch (each script imports this module before torch), so its

# OpenMP default (semsearch/__init__.py) is in effect here as it is for users of the package and CLI

REPO = Path(__file__).resolve().parents[1]


def hardware(packages: tuple[str, ...] = ("numpy", "scipy")) -> dict[str, Any]:
    """CPU count and model, Python and package versions."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for p in packages:
        try:
            versions[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            versions[p] = "not installed"
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        **versions,
        "openmp": openmp_setting(),
    }


def openmp_setting() -> str:
    """How torch's OpenMP threads wait, as its libgomp read it when torch loaded."""
    got = (
        ",".join(f"{k}={os.environ[k]}" for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY") if k in os.environ) or "default"
    )
    return f"{got} (set after torch loaded: not in effect)" if _TORCH_FIRST and got != "default" else got


def hardware_line(hw: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in hw.items() if k != "platform")


def rss_mb() -> float:
    """Current resident set size (Linux /proc), in MiB; NaN elsewhere."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def maxrss_mb() -> float:
    """High-water mark of this process's resident set size, in MiB (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def trim() -> None:
    """gc, then hand freed heap pages back to the system (glibc's malloc_trim), so the resident
    set shows what is held, not what the allocator kept."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def median_time(fn: Callable[[], Any], reps: int) -> tuple[float, Any]:
    """Median wall time of ``reps`` calls of ``fn`` and the last call's result."""
    times, result = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def summary_row(
    measure: str,
    unit: str,
    ours: float,
    peer: str,
    peer_value: float | None,
    *,
    target: str,
    met: bool | None,
    higher_is_better: bool = True,
) -> dict[str, Any]:
    """One line of the ``make bench`` table (``benchmarks/run_all.py`` collects every script's
    ``summary`` list): what was measured, ours, the strongest peer (or ceiling) measured in the same
    run, their ratio (>1 means ours is better, whichever way the unit points), the issue's target
    and whether this run met it (None: nothing to meet)."""
    ratio = None
    if peer_value:
        ratio = ours / peer_value if higher_is_better else peer_value / ours if ours else None
    return {
        "measure": measure,
        "unit": unit,
        "ours": ours,
        "peer": peer,
        "peer_value": peer_value,
        "ratio": ratio,
        "target": target,
        "met": met,
    }


def write_json(obj: Any, out: str | Path) -> Path:
    path = Path(out)
    if not path.is_absolute():
        path = REPO / path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
    return path


class Served:
    """A ``semsearch serve`` process on a free loopback port; ``stderr`` holds its log once stopped."""

    def __init__(self, bundle: str | Path, workers: int = 1, extra: list[str] | None = None):
        import socket
        import subprocess
        import sys

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        self.workers = workers
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        cmd = [
            sys.executable,
            "-m",
            "semsearch.cli",
            "serve",
            str(bundle),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
            *(extra or []),
        ]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.stderr = ""

    def wait_healthy(self, timeout: float = 300.0) -> None:
        """Until every worker answers ``/health`` (each new connection goes to whichever worker
        accepts it first; a load started while one worker still loads the bundle would pile its
        connections on the other, and the measurement would be of the start-up, not the service)."""
        import httpx

        deadline = time.time() + timeout
        pids: set[int] = set()
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited: {self.proc.stderr.read().decode(errors='replace')[-2000:]}")  # type: ignore[union-attr]
            try:
                r = httpx.get(self.base + "/health", timeout=2)
                if r.status_code == 200:
                    pids.add(r.json().get("pid", 0))
                    if len(pids) >= self.workers:
                        return
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                raise SystemExit(f"server did not become healthy in {timeout:.0f} s")
            time.sleep(0.2)

    def stop(self) -> None:
        import subprocess

        self.proc.terminate()  # SIGTERM: uvicorn shuts down gracefully
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.stderr = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""


def add_rescore_options(ap: Any, prefix: str = "") -> None:
    """The scripts' ``--rescore DEPTH`` and ``--rescore-weight W`` (``rescore_args`` turns them
    into ``semsearch serve`` options); ``prefix`` starts ``--rescore``'s help (e.g. "--bundle: ")."""
    ap.add_argument(
        "--rescore",
        type=int,
        default=None,
        metavar="DEPTH",
        help=f"{prefix}serve with the bundle's stage-3 cross-encoder re-scoring the first DEPTH hits "
        "(0: the bundle's depth)",
    )
    ap.add_argument(
        "--rescore-weight",
        type=float,
        default=None,
        metavar="W",
        help="--rescore: the cross-encoder's weight beside the ranker's (inf: its order alone; default: the bundle's)",
    )


def rescore_args(depth: int | None, weight: float | None = None) -> list[str]:
    """``semsearch serve`` options for stage 3: none (off), ``--rescore`` (0: the bundle's depth)
    or ``--rescore --rescore-depth DEPTH``, and ``--rescore-weight W`` (None: the bundle's)."""
    if depth is None:
        if weight is not None:
            raise SystemExit("--rescore-weight needs --rescore")
        return []
    return (
        ["--rescore"]
        + (["--rescore-depth", str(depth)] if depth > 0 else [])
        + (["--rescore-weight", str(weight)] if weight is not None else [])
    )


@contextlib.contextmanager
def served(bundle: str | Path, workers: int = 1, extra: list[str] | None = None) -> Iterator[Served]:
    """Serve ``bundle`` (``extra``: more ``semsearch serve`` options) for the duration of a ``with``
    block; yields the healthy server."""
    server = Served(bundle, workers, extra)
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()
