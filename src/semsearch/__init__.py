"""semsearch: learn, measure and serve semantic search models.

Each subpackage and module is a layer importing only those below it; the order is pyproject.toml's
import-linter contract (checked by tests/project/test_layers.py), explained in docs/design.md.
"""

import os

# torch's OpenMP (GNU libgomp) threads spin 300,000 times after each parallel region before they
# sleep. On 2 cores that spinning takes the CPU from the other threads of a step (the compiled
# CLSM passes' own, ``device.run_split``; other processes on a shared machine), while sleeping at
# once (OMP_WAIT_POLICY=PASSIVE) makes every region wake its threads: a short spin sits between
# the two (DSSM and CLSM training speed is measured by benchmarks/train_speed.py).
# Only a default: it takes effect if torch has not been imported yet, and a user's setting of
# either variable wins (libgomp reads GOMP_SPINCOUNT over OMP_WAIT_POLICY).
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "3000"

__version__ = "0.1.0"
