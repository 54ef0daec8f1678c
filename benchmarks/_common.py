"""Helpers shared by the benchmark scripts: hardware line, memory readings, timing, JSON output."""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

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
    }


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


def median_time(fn: Callable[[], Any], reps: int) -> tuple[float, Any]:
    """Median wall time of ``reps`` calls of ``fn`` and the last call's result."""
    times, result = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def write_json(obj: Any, out: str | Path) -> Path:
    path = Path(out)
    if not path.is_absolute():
        path = REPO / path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
    return path
