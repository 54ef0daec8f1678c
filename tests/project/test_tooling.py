"""The linters and the type checker pass on the tree, as .pre-commit-config.yaml runs them: ruff
check, ruff format --check (on src, tests, benchmarks and examples) and mypy (pyproject's [tool.mypy]:
the package). Each runs from the repository root, so pyproject.toml configures it; a failure shows
the tool's own report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATHS = ["src", "tests", "benchmarks", "examples"]


def _tool(*args: str, timeout: float) -> None:
    """Run ``python -m <args>`` in the repository root; fail with its output unless it exits 0."""
    r = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        output = (r.stdout + r.stderr).strip()
        pytest.fail(f"`{' '.join(args)}` exited {r.returncode}:\n{output}", pytrace=False)


def test_ruff_check() -> None:
    _tool("ruff", "check", *PATHS, timeout=300)


def test_ruff_format() -> None:
    _tool("ruff", "format", "--check", *PATHS, timeout=300)


def test_mypy() -> None:
    # files and options from pyproject.toml; a cold cache takes a minute or two, a warm one seconds
    _tool("mypy", timeout=900)
