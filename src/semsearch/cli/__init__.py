"""The ``semsearch`` command: parses arguments and calls the layers; nothing else lives here.

Exit codes: 0 success; 1 a reproduced figure fell outside its expected range; 2 bad input
(unreadable data, unknown model, wrong option)."""

from __future__ import annotations

from .common import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, app

# each module registers its commands on ``app`` when imported; ``--help`` lists them in this order
# isort: off
from . import data, run, index, serve, clicks, train, models, reproduce  # noqa: F401
# isort: on


def main() -> None:  # pragma: no cover
    app()


__all__ = ["EXIT_BAD_INPUT", "EXIT_CHECK_FAILED", "app", "main"]
