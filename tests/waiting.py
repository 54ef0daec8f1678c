"""Waiting in tests on the state a test checks, not on the clock: a test that sleeps a fixed time
before asserting, or gives up after a few seconds, passes on a quiet machine and fails on a busy
one. ``wait_until`` polls the state itself, with a bound generous enough for a loaded 2-core
laptop (the bound only decides how long a broken test takes to fail), and fails naming what it
awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

WAIT_S = 300.0
"""How long a test waits for a state before failing (a busy machine can be many times slower than
a quiet one; a state that holds is seen at the first poll after it does)."""

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T], what: str | Callable[[], str], timeout: float = WAIT_S, every: float = 0.05
) -> T:
    """Poll ``condition`` every ``every`` s until it returns a true value, and return that value;
    after ``timeout`` s fail the test with "waited … for WHAT" (``what``: a string, or a callable
    called then, to show the state reached). A condition that raises (e.g. asserts that the
    server it asks is still running) fails the test at once."""
    deadline = time.monotonic() + timeout
    while not (got := condition()):
        if time.monotonic() >= deadline:
            pytest.fail(f"waited {timeout:g} s for {what() if callable(what) else what}")
        time.sleep(every)
    return got
