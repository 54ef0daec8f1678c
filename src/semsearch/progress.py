"""One progress reporter for every long loop (training epochs, EM iterations, encoding, ranking).

On a terminal it draws a rich bar; when stderr is not a terminal (a log file, CI, ``make serve``
piped) it writes plain lines instead — one per epoch with epoch k/K, items/s, loss, the dev metric
and an ETA, and within long epochs or loops one every ``LINE_EVERY`` seconds — so a run can be
followed in a log with no setting. ``SEMSEARCH_PROGRESS=0`` silences both (tests)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
LINE_EVERY = 30.0  # seconds between plain progress lines inside an epoch or loop


def mode() -> str:
    """``"bar"`` on a terminal, ``"lines"`` elsewhere, ``"off"`` with SEMSEARCH_PROGRESS=0."""
    flag = os.environ.get("SEMSEARCH_PROGRESS")
    if flag is not None and flag.lower() in ("0", "false", "no"):
        return "off"
    return "bar" if sys.stderr.isatty() else "lines"


def _duration(secs: float) -> str:
    secs = int(round(secs))
    h, rest = divmod(secs, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def _line(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def note(text: str) -> None:
    """One timestamped line on stderr, on a terminal and in a log (nothing with progress off)."""
    if mode() != "off":
        _line(text)


class Reporter:
    """Progress of ``total`` steps of work (batches of an epoch, items of a loop).

    ``advance(steps, items, **fields)`` after each batch (``items``: pairs or texts done, for the
    rate; ``fields``: e.g. running ``loss``); ``close()`` at the end. ``epoch_line`` reports one
    finished epoch of ``epochs`` with its metrics and the time left if every epoch runs."""

    def __init__(self, title: str, total: int | None = None, *, unit: str = "items", show: bool = True):
        self.title, self.total, self.unit = title, total, unit
        self.mode = mode() if show else "off"
        self.done = self.items = 0
        self.t0 = self.last = time.perf_counter()
        self.fields: dict[str, Any] = {}
        self._bar: Any = None
        if self.mode == "bar":
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn(title),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(title, total=total, status="")

    def rate(self) -> float:
        return self.items / max(time.perf_counter() - self.t0, 1e-9)

    def status(self) -> str:
        r = self.rate()
        parts = [f"{r:,.0f} {self.unit}/s" if r >= 10 else f"{r:.2f} {self.unit}/s"] if self.items else []
        parts += [f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in self.fields.items()]
        return "  ".join(parts)

    def advance(self, steps: int = 1, items: int | None = None, **fields: Any) -> None:
        self.done += steps
        self.items += steps if items is None else items
        self.fields.update(fields)
        if self.mode == "bar":
            self._bar.update(self._task, advance=steps, status=self.status())
        elif self.mode == "lines" and time.perf_counter() - self.last >= LINE_EVERY:
            self.last = time.perf_counter()
            elapsed = self.last - self.t0
            where = f"{self.done}/{self.total}" if self.total else f"{self.done}"
            eta = (
                f"  ETA {_duration(elapsed * (self.total - self.done) / self.done)}" if self.total and self.done else ""
            )
            _line(f"{self.title}: {where}  {self.status()}{eta}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def epoch_line(self, epoch: int, epochs: int, seconds_so_far: float, **metrics: Any) -> None:
        """One line for finished epoch ``epoch`` of ``epochs`` (the title names it), on a terminal too."""
        if self.mode == "off":
            return
        shown = "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items())
        eta = seconds_so_far / epoch * (epochs - epoch) if epoch else 0.0
        _line(
            f"{self.title}  {self.rate():,.0f} {self.unit}/s  {shown}  "
            f"ETA {_duration(eta)}" + (" (at most: early stopping may end sooner)" if epoch < epochs else "")
        )


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate ``items`` while reporting progress (a bar, or lines in a log for long loops)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]  # has __len__
    rep = Reporter(description, total)
    try:
        for item in items:
            yield item
            rep.advance()
    finally:
        rep.close()
