"""Shared plumbing for every reader and writer: the data folder, numbered line parsing, atomic writes and
folder swaps (public: every layer that writes a file uses it)."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np

from .errors import BadLinePolicy, DataFormatError

PathLike = str | os.PathLike[str]
T = TypeVar("T")
_BOM = b"\xef\xbb\xbf"


def data_root() -> Path:
    """The data folder: $SEMSEARCH_DATA, else ../shared/data from the working directory if it
    exists, else ../shared/data beside the repository (the project's layout)."""
    env = os.environ.get("SEMSEARCH_DATA")
    if env:
        return Path(env)
    beside_cwd = Path.cwd() / ".." / "shared" / "data"
    if beside_cwd.is_dir():
        return beside_cwd.resolve()
    return (Path(__file__).resolve().parents[3] / ".." / "shared" / "data").resolve()


def _decoded(raw: bytes, number: int) -> str:
    """One raw line as text without its line ending (a UTF-8 BOM on line 1 is dropped)."""
    if number == 1 and raw.startswith(_BOM):
        raw = raw[len(_BOM) :]
    return raw.decode("utf-8").rstrip("\r\n")


def _bad_utf8(e: UnicodeDecodeError) -> str:
    return f"not valid UTF-8 ({e.reason} at byte {e.start})"


def read_lines(path: PathLike) -> list[str]:
    """Every line of a UTF-8 text file, blank ones included (one text a line: row i is line i+1),
    without line endings; only LF (or CRLF) ends a line, not the other characters
    ``str.splitlines`` splits at (U+2028, U+0085, form feed, ...), so rows stay aligned with lines.
    Bad UTF-8 is a DataFormatError naming its line; an empty file is one too."""
    out = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                out.append(_decoded(raw, number))
            except UnicodeDecodeError as e:
                raise DataFormatError(path, number, _bad_utf8(e)) from None
    if not out:
        raise DataFormatError(path, None, "no lines (empty file)")
    return out


def parse_lines(
    path: PathLike,
    parse: Callable[[str], T],
    *,
    skip_bad_lines: bool = False,
    header: Callable[[str], bool] | None = None,
    max_line_bytes: int | None = None,
) -> Iterator[T]:
    """Stream `parse(line)` over the non-blank lines of a UTF-8 text file.

    ``max_line_bytes``: a longer line is a bad line, read in pieces of that size and never held
    whole (None: no bound).

    Each line's bytes are decoded on their own so an encoding error names its line. A ValueError
    from `parse` marks the line bad (raised as DataFormatError, or skipped and counted under
    `skip_bad_lines`). The first non-blank line is dropped when `header(line)` is true. A file
    without any record is an error, also when all its lines were skipped as bad.
    """
    policy = BadLinePolicy(path, skip_bad_lines)
    records, first = 0, True
    with open(path, "rb") as f:
        for number, raw in enumerate(f if max_line_bytes is None else _bounded(f, max_line_bytes), 1):
            if raw is None:
                policy.bad(number, f"line longer than the bound of {max_line_bytes:,} bytes (--max-record-bytes)")
                continue
            try:
                line = _decoded(raw, number)
            except UnicodeDecodeError as e:
                policy.bad(number, _bad_utf8(e))
                continue
            if not line.strip():
                continue
            if first:
                first = False
                if header is not None and header(line):
                    continue
            try:
                record = parse(line)
            except ValueError as e:
                policy.bad(number, str(e))
                continue
            records += 1
            yield record
    if records == 0 and policy.skipped == 0:
        raise DataFormatError(path, None, "no records (empty file)")
    if records == 0:  # every line was bad: an empty result would only fail later, far from the cause
        raise DataFormatError(path, None, f"no valid records ({policy.summary()})")
    policy.finish()


def _bounded(f: IO[bytes], limit: int) -> Iterator[bytes | None]:
    """The lines of a binary file, each read at most ``limit`` + 1 bytes at a time; a longer line
    is read to its end in such pieces and given as None."""
    while raw := f.readline(limit + 1):
        if len(raw) > limit and not raw.endswith(b"\n"):
            while (rest := f.readline(limit + 1)) and not rest.endswith(b"\n"):
                pass
            yield None
        else:
            yield raw


def first_line(path: PathLike) -> tuple[int, str] | None:
    """The first non-blank line and its number (undecodable bytes replaced), or None if none."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if number == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if line.strip():
                return number, line
    return None


@contextlib.contextmanager
def atomic_write(path: PathLike, *, binary: bool = False) -> Iterator[IO]:
    """Write a UTF-8 text file (or, `binary`, a bytes file) via a temporary file in the same
    folder and `os.replace`.

    If the body raises, the temporary file is removed and any existing file is left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # 0o666 & ~umask, like open()
    try:
        with open(fd, "wb") if binary else open(fd, "w", encoding="utf-8", newline="\n") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: PathLike, obj: Any, *, ensure_ascii: bool = True) -> Path:
    """Write ``obj`` as the project's JSON files are written (indented by two, one final newline,
    UTF-8; ``ensure_ascii=False`` keeps non-ASCII characters as they are), atomically
    (``atomic_write``): a reader finds the old file or the new one, never half of it."""
    path = Path(path)
    with atomic_write(path) as f:
        f.write(json.dumps(obj, indent=2, ensure_ascii=ensure_ascii) + "\n")
    return path


def cached_array(path: PathLike | None, compute: Callable[[], np.ndarray], *, rows: int | None = None) -> np.ndarray:
    """The array saved at ``path`` (an ``.npy``, read without pickle; with ``rows``, only if it
    has that many), else ``compute()``, saved there atomically for the next call. No ``path``:
    just ``compute()``. The caller's file name is the cache key (a recipe, not a hash of code)."""
    f = Path(path) if path is not None else None
    if f is not None and f.is_file():
        v = np.load(f, allow_pickle=False)
        if rows is None or v.shape[0] == rows:
            return v
    v = compute()
    if f is not None:
        with atomic_write(f, binary=True) as out:
            np.save(out, v, allow_pickle=False)
    return v


_RENAME_EXCHANGE = 2  # linux/fs.h
TMP_SUFFIX = re.compile(r"\.tmp-(\d+)$")


def _renameat2_exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux renameat2 RENAME_EXCHANGE); False where the call
    or the file system does not offer it."""
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    return rc == 0


def fsync_tree(root: Path) -> None:
    """Flush every file and folder under ``root`` to disk (before it is swapped in)."""
    for p in sorted(root.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    for d in [root, *[p for p in root.rglob("*") if p.is_dir()]]:
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def replace_dir(tmp: Path, out: Path) -> None:
    """Put the finished folder ``tmp`` in place of ``out`` so that ``out`` is always either the
    old folder or the new one, whenever the process dies: one atomic exchange where Linux offers
    it (then the old folder, now at ``tmp``, is removed), else two renames through ``.NAME.old``
    (which loaders of bundles fall back to)."""
    tmp, out = Path(tmp), Path(out)
    if out.exists() and _renameat2_exchange(tmp, out):
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        old = out.with_name(f".{out.name}.old")
        if out.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    fd = os.open(out.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` is running (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def tmp_dir(out: Path) -> Path:
    """A fresh ``out.tmp-<pid>`` folder beside ``out`` (after removing those of dead processes)."""
    out = Path(out)
    if TMP_SUFFIX.search(out.name):
        raise ValueError(f"{out}: a name may not end in .tmp-<number> (kept for the temporary folders of writers)")
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(out)
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


@contextlib.contextmanager
def atomic_dir(out: Path) -> Iterator[Path]:
    """A folder to write in place of ``out``: a fresh ``tmp_dir`` beside it, synced and swapped in
    whole (``replace_dir``) when the block ends, removed if it raises, so ``out`` is always either
    the old folder or the complete new one."""
    tmp = tmp_dir(out)
    try:
        yield tmp
        fsync_tree(tmp)
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_stale_tmp(out: Path) -> list[Path]:
    """Remove ``out.tmp-<pid>`` folders left by killed writers (their pid is no longer running) and
    a ``.out.old`` left between two renames when ``out`` itself is there; those of running writers
    stay. Returns the removed folders."""
    out = Path(out)
    removed = []
    for p in out.parent.glob(f"{glob.escape(out.name)}.tmp-*"):
        m = TMP_SUFFIX.search(p.name)
        if m and p.name == f"{out.name}{m.group(0)}" and p.is_dir() and not pid_alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    old = out.with_name(f".{out.name}.old")
    if old.is_dir() and out.is_dir():
        shutil.rmtree(old, ignore_errors=True)
        removed.append(old)
    return removed


def tsv_field(value: object, what: str, forbidden: str = "\t\r\n") -> str:
    """Check that a value can be written as one field (a non-empty str without separators)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    if any(c in value for c in forbidden):
        raise ValueError(f"{what} {value!r} contains a separator character")
    return value


def token(value: object, what: str) -> str:
    """Check a field of a whitespace-separated format (TREC runs/qrels): no white space at all."""
    if not isinstance(value, str) or value.split() != [value]:
        raise ValueError(f"{what} must be a non-empty string without white space, got {value!r}")
    return value
