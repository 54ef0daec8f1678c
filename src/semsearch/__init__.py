"""semsearch: learn, measure and serve semantic search models.

Layers (see DESIGN.md): data -> text -> models -> training -> index -> ranking -> serving,
with evaluation reading runs from anywhere and experiments tying them together.
"""

import os

# Idle OpenMP threads spin by default; on a shared 2-core machine that makes torch's 2-thread
# runs several times slower than 1 thread (benchmarks/train_speed.py). Passive waiting fixes it.
# Only a default: takes effect if torch has not been imported yet, and a user's setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
