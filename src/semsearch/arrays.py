"""Index arithmetic over ragged runs laid end to end (CSR style): the one place for the
repeat-and-offset trick that batch masks, padding and the translation models' EM each need."""

from __future__ import annotations

import numpy as np


def runs(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For runs of ``lengths`` laid end to end, each entry's run and its offset within that run:
    ``runs([2, 0, 3])`` is ``([0, 0, 2, 2, 2], [0, 1, 0, 1, 2])``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    run = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    return run, np.arange(len(run), dtype=np.int64) - (np.cumsum(lengths) - lengths)[run]
