"""Test fixtures shared by unit and integration tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _data_root() -> Path:
    env = os.environ.get("SEMSEARCH_DATA")
    return Path(env) if env else (REPO.parent / "shared" / "data")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to ../shared/data; integration tests fail (not skip) under CI=true when it is missing."""
    root = _data_root()
    if not (root / "homedepot" / "corpus.jsonl").exists():
        msg = f"real data not found at {root} (set SEMSEARCH_DATA)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return root
