"""The change log of a served bundle: every upsert and delete since the bundle was built, one
record a line, appended and fsync'd before the service acknowledges the change, and replayed
over the bundle when a worker loads it (``index.live``).

A line is ``<crc32 hex> <compact JSON>\\n``; the JSON holds the record's sequence number
``seq`` (1, 2, ... across the log's life), its ``op`` and its data. A line is acknowledged only
once it is whole on disk, so a line without its newline at the end of the file is the torn write
of a process killed mid-append: readers ignore it and the next append cuts it off. A whole line
whose checksum does not match is corruption, reported, never skipped. Appends from several
processes (the service's workers) take an exclusive ``flock`` on ``lock`` beside the log.

A merge (``LiveIndex.merge``) folds the records up to some ``seq`` into a new bundle, which says
so in its manifest (``changes_seq``), then ``rotate`` rewrites the log without them: a
``checkpoint`` record carrying that ``seq`` and the records after it, written beside the log,
fsync'd and renamed over it. Killed at any point, the log holds every acknowledged change the
served bundle does not.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

LOG = "log.jsonl"
LOCK = "lock"
OPS = ("upsert", "delete", "checkpoint")


class ChangeLogError(RuntimeError):
    """A change log that cannot be read: a whole line with a bad checksum or an unknown record."""


@dataclass(frozen=True)
class Position:
    """Where a reader of the log is: the file it read (device, inode) and the byte after the
    last whole line it took."""

    file: tuple[int, int]
    offset: int


def encode_line(record: dict[str, Any]) -> bytes:
    """One log line: the record's compact JSON behind its crc32."""
    payload = json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()
    return b"%08x " % zlib.crc32(payload) + payload + b"\n"


def decode_line(line: bytes, where: str) -> dict[str, Any]:
    """The record of one whole log line (``ChangeLogError`` naming ``where`` if it is damaged)."""
    head, _, payload = line.rstrip(b"\n").partition(b" ")
    try:
        ok = len(head) == 8 and int(head, 16) == zlib.crc32(payload)
    except ValueError:
        ok = False
    if not ok:
        raise ChangeLogError(f"{where}: checksum mismatch (the change log is corrupt)")
    try:
        record = json.loads(payload)
    except ValueError as e:
        raise ChangeLogError(f"{where}: unreadable record ({e})") from None
    if not isinstance(record, dict) or record.get("op") not in OPS or not isinstance(record.get("seq"), int):
        raise ChangeLogError(f"{where}: not a change record")
    return record


def pack_vectors(v: np.ndarray) -> dict[str, Any]:
    """A float32 matrix as JSON: its shape and its bytes in base64."""
    a = np.ascontiguousarray(v, dtype="<f4")
    return {"shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode("ascii")}


def unpack_vectors(obj: dict[str, Any]) -> np.ndarray:
    """``pack_vectors``'s matrix back."""
    shape = tuple(int(x) for x in obj["shape"])
    return np.frombuffer(base64.b64decode(obj["data"]), dtype="<f4").reshape(shape).astype(np.float32)


class ChangeLog:
    """The change log in ``folder`` (created if missing): ``append`` (durable, several processes),
    ``read`` (the records after a reader's position), ``rotate`` (after a merge)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / LOG
        self._lock_path = self.folder / LOCK

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the log's exclusive lock (appends and rotation; readers need none)."""
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # (releases the lock)

    def append(self, record: dict[str, Any]) -> int:
        """Append ``record`` (an ``op`` and its data) as the next sequence number, fsync'd before
        this returns it: once it returns, a crash of any process loses nothing of it. A torn last
        line (a writer killed mid-append, never acknowledged) is cut off first."""
        if record.get("op") not in ("upsert", "delete"):
            raise ValueError(f"a change is an upsert or a delete, got {record.get('op')!r}")
        with self.locked():
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                end, last = self._last_whole(fd, size)
                if end != size:
                    os.ftruncate(fd, end)
                seq = (last["seq"] if last is not None else 0) + 1
                os.lseek(fd, end, os.SEEK_SET)
                line = encode_line({"seq": seq, **record})
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
                if size == 0:  # a new file: its directory entry made durable too
                    dfd = os.open(self.folder, os.O_RDONLY)
                    try:
                        os.fsync(dfd)
                    finally:
                        os.close(dfd)
            finally:
                os.close(fd)
        return seq

    def _last_whole(self, fd: int, size: int) -> tuple[int, dict[str, Any] | None]:
        """The byte after the last whole line of the open log and that line's record (None: none)."""
        buf, pos = b"", size
        while pos > 0:  # back from the end to the newline ending the last whole line, and the one before
            start = max(0, pos - (1 << 16))
            buf = os.pread(fd, pos - start, start) + buf
            pos = start
            last_nl = buf.rfind(b"\n")
            if last_nl >= 0:
                before = buf.rfind(b"\n", 0, last_nl)
                if before >= 0 or pos == 0:
                    return pos + last_nl + 1, decode_line(buf[before + 1 : last_nl + 1], f"{self.path} (last line)")
        return 0, None

    def read(self, position: Position | None = None) -> tuple[list[dict[str, Any]], Position]:
        """The whole records after ``position`` (None: from the start) and the reader's new
        position. A log replaced since (rotated by a merge) is read from its start; the caller
        skips the sequence numbers it has."""
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            return [], Position((0, 0), 0)
        with f:
            st = os.fstat(f.fileno())
            ident = (st.st_dev, st.st_ino)
            offset = position.offset if position is not None and position.file == ident else 0
            if offset > st.st_size:
                offset = 0
            f.seek(offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a torn last line (no newline) is left for later, or cut off
        records = []
        at = offset
        for line in data[:end].splitlines(keepends=True):
            records.append(decode_line(line, f"{self.path} at byte {at}"))
            at += len(line)
        return records, Position(ident, offset + end)

    def last_seq(self) -> int:
        """The sequence number of the last whole record (0: none)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return 0
        try:
            _, last = self._last_whole(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        return last["seq"] if last is not None else 0

    def rotate(self, folded: int) -> None:
        """Drop the records up to ``folded`` (a merged bundle holds them): the log becomes a
        checkpoint record with that sequence number, then the later records, replaced atomically."""
        with self.locked():
            records, _ = self.read()
            keep = [r for r in records if r["seq"] > folded and r["op"] != "checkpoint"]
            last = max([folded, *(r["seq"] for r in records)])
            tmp = self.folder / f".{LOG}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(encode_line({"seq": folded if keep else last, "op": "checkpoint"}))
                for r in keep:
                    f.write(encode_line(r))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            dfd = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)


__all__ = [
    "ChangeLog",
    "ChangeLogError",
    "Position",
    "decode_line",
    "encode_line",
    "pack_vectors",
    "unpack_vectors",
]
