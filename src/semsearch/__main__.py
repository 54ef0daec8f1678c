"""``python -m semsearch``: the ``semsearch`` command (what ``torchrun ... -m semsearch train`` runs)."""

from .cli import main

main()
