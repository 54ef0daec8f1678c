"""The CPU runtime defaults semsearch sets: torch's OpenMP spin (semsearch/__init__.py) and glibc
keeping freed memory while training (``device.keep_freed_memory``)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest


def _spincount(env: dict[str, str]) -> str:
    """GOMP_SPINCOUNT after ``import semsearch`` in a fresh interpreter with ``env``'s OpenMP variables."""
    base = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    code = "import os, semsearch; print(os.environ.get('GOMP_SPINCOUNT', 'unset'))"
    return subprocess.run(
        [sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_importing_semsearch_sets_a_short_openmp_spin_unless_the_user_chose_a_wait():
    assert _spincount({}) == "3000"
    assert _spincount({"OMP_WAIT_POLICY": "PASSIVE"}) == "unset"  # the user's policy is left to libgomp
    assert _spincount({"GOMP_SPINCOUNT": "7"}) == "7"


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_keep_freed_memory_applies_once_and_yields_to_the_users_malloc_settings(monkeypatch):
    from semsearch import device

    monkeypatch.setattr(device, "_KEPT", False)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1000000")
    assert device.keep_freed_memory() is False  # the user's setting wins
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert device.keep_freed_memory() is True
    assert device.keep_freed_memory() is False  # once per process


def test_keep_freed_memory_stops_large_arrays_faulting_in_anew():
    """Freed large arrays are reused: allocating and freeing a 64 MB array again page-faults
    (next to) nothing once memory is kept; otherwise glibc maps a fresh one every time (here 544
    faults with transparent huge pages, 16k with 4 KB pages)."""
    import resource

    import numpy as np

    from semsearch import device

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's mallopt")
    device.keep_freed_memory()

    def faults() -> int:
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        np.ones(1 << 24, dtype=np.float32)  # 64 MB, written, then freed
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0

    faults()
    assert faults() < 50
