"""Typed options of the search service (``semsearch serve``): what bundle, how it is loaded, the
guards it keeps, where it listens and how many worker processes serve it. Validated once when
made (at the command line); the service and each of its worker processes receive this object
as it is, never settings re-read from the environment."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..index.bundle.options import LoadOptions
from .exposure import Exposure

LOOPS = ("asyncio", "uvloop")
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8000


@dataclass(frozen=True)
class ServeOptions:
    """``bundle``: the bundle directory; ``load``: how each worker opens it (``LoadOptions``);
    ``exposure``: the API key and rate limit (``Exposure``); ``host`` / ``port``: where to
    listen; ``workers``: processes, each with its own copy of the bundle; ``loop``: the event
    loop (one of ``LOOPS``)."""

    bundle: str
    load: LoadOptions = field(default_factory=LoadOptions)
    exposure: Exposure = field(default_factory=Exposure)
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    workers: int = 1
    loop: str = "asyncio"

    def __post_init__(self) -> None:
        if not isinstance(self.load, LoadOptions) or not isinstance(self.exposure, Exposure):
            raise TypeError("ServeOptions: load must be LoadOptions and exposure Exposure")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        if self.loop not in LOOPS:
            raise ValueError(f"--loop must be {' or '.join(LOOPS)}, got {self.loop!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"--port must be in [0, 65535], got {self.port}")


__all__ = ["LOOPS", "ServeOptions"]
