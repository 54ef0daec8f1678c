"""``python -m semsearch.cli``: the ``semsearch`` command."""

from . import main

if __name__ == "__main__":
    main()
