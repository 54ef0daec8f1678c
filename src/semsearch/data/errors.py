"""Errors and warnings for malformed data files, and the policy deciding what a bad line does.

Every reader in `semsearch.data` reports a bad line as `path:line: message`, so a broken file
names the place to fix. With `skip_bad_lines=True` readers instead drop bad lines and warn once
(a `DataWarning`) after the whole file has been read.
"""

from __future__ import annotations

import os
import warnings


class DataFormatError(ValueError):
    """A data file that does not follow its format; `line` is 1-based, or None for the whole file."""

    def __init__(self, path: str | os.PathLike[str], line: int | None, message: str) -> None:
        super().__init__(path, line, message)
        self.path = os.fspath(path)
        self.line = line
        self.message = message

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.message}"


class DataWarning(UserWarning):
    """Bad lines were skipped while reading a data file (only with `skip_bad_lines=True`)."""


class BadLinePolicy:
    """Raise on the first bad line, or (skip_bad_lines=True) count them and warn once at the end."""

    def __init__(self, path: str | os.PathLike[str], skip_bad_lines: bool = False, show: int = 5) -> None:
        self.path = os.fspath(path)
        self.skip_bad_lines = skip_bad_lines
        self.show = show
        self.skipped = 0
        self.lines: list[int] = []
        self.first_message: str | None = None

    def bad(self, line: int | None, message: str) -> None:
        """Report one bad line: raises DataFormatError unless bad lines are skipped."""
        if not self.skip_bad_lines:
            raise DataFormatError(self.path, line, message)
        self.skipped += 1
        if line is not None and len(self.lines) < self.show:
            self.lines.append(line)
        if self.first_message is None:
            self.first_message = message

    def summary(self) -> str:
        """What was skipped: how many bad lines, which ones (the first few) and the first message."""
        where = ", ".join(map(str, self.lines)) + (", ..." if self.skipped > len(self.lines) else "")
        return (
            f"skipped {self.skipped} bad line{'s' * (self.skipped != 1)} (lines {where}); first: {self.first_message}"
        )

    def finish(self) -> None:
        """Emit the single summary DataWarning if any line was skipped."""
        if self.skipped:
            warnings.warn(f"{self.path}: {self.summary()}", DataWarning, stacklevel=3)
