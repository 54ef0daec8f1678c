"""The event log of a search service: impressions and clicks as append-only Parquet segments.

Field names follow OpenSearch's User Behavior Insights (UBI) schema, so a log moves between tools:
an impression is one search answer shown (UBI's query record: ``query_id``, ``timestamp``,
``user_query``, ``client_id``), an event is one thing a user did with it (UBI's event record:
``action_name`` "click", ``object_id`` the document id, ``position`` as UBI's ``position.ordinal``,
1-based). A log directory holds ``impressions/part-*.parquet`` and ``events/part-*.parquet``.

What holds, and why:

- A segment is written whole or not at all: it is written under a temporary name in the same
  folder (``.part-*.parquet.tmp``), fsynced, then renamed to ``part-*.parquet`` (rename is atomic
  on POSIX) and the folder fsynced. Readers only look at ``part-*.parquet``, so a writer killed
  at any instant (SIGKILL included) leaves no torn segment; it loses the rows it had not flushed.
- `EventLogWriter` flushes a kind's buffer once it holds ``flush_rows`` rows, and in any case
  ``flush_seconds`` after its oldest unflushed row was appended (defaults 10,000 rows and 5 s): a
  crash loses at most the rows appended in the last ``flush_seconds`` (plus the segment being
  written at that instant, and whatever waits behind it when the disk cannot keep up).
  Segments are written by a background thread, off the caller's path; ``append`` only blocks
  when ``max_pending_rows`` rows are waiting (bounded memory: back-pressure instead of growth).
  A row waits in the buffer as one JSON line (bytes: nothing for the garbage collector to scan),
  which the thread parses with Arrow's JSON reader, the GIL released, so the appending threads
  (a service's event loop) do not wait while rows become a table.
- Segment names carry the writing time, process id, a per-process sequence number and a random
  token, so several processes (a service's workers) can write into one log directory without
  coordination, and one process's segments sort in the order written.
- `validate_segment` checks a segment's schema before it is read: a missing column or a column
  of the wrong type is a `DataFormatError` naming the file and the column. Reading a log back
  (as a table, or as the sessions click models and learners take) is `clicks.sessions`.
"""

from __future__ import annotations

import itertools
import os
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import orjson
import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq

from ..data.errors import DataFormatError

PathLike = str | os.PathLike[str]
Kind = Literal["impressions", "events"]
KINDS: tuple[Kind, Kind] = ("impressions", "events")
STAGES = ("LEXICAL", "SEMANTIC", "BOTH")

IMPRESSION_SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("timestamp", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("user_query", pa.string(), nullable=False),
        pa.field("client_id", pa.string()),
        pa.field("bundle", pa.string()),
        pa.field("bundle_version", pa.string()),
        pa.field("arm", pa.string()),
        pa.field("k", pa.int32()),
        pa.field("offset", pa.int32()),
        pa.field("hit_ids", pa.list_(pa.string()), nullable=False),
        pa.field("hit_stages", pa.list_(pa.string())),
    ]
)
"""The columns every impression segment has (what other tools, e.g. the click simulator, write)."""
IMPRESSION_ADDED = pa.schema([pa.field("hit_teams", pa.list_(pa.string()))])
"""Impression columns added since the first logs: the service writes them, and a segment without
them still reads (as nulls). ``hit_teams[i]``: the ranker ("A" or "B") that contributed
``hit_ids[i]`` when two are compared (``serve A --compare B``), else null."""
IMPRESSION_LOG_SCHEMA = pa.schema(list(IMPRESSION_SCHEMA) + list(IMPRESSION_ADDED))
"""What the writer writes and `read_log` returns: `IMPRESSION_SCHEMA` then `IMPRESSION_ADDED`."""
TEAMS = ("A", "B")
EVENT_SCHEMA = pa.schema(
    [
        pa.field("query_id", pa.string(), nullable=False),
        pa.field("timestamp", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("client_id", pa.string()),
        pa.field("action_name", pa.string(), nullable=False),
        pa.field("object_id", pa.string(), nullable=False),
        pa.field("position", pa.int32(), nullable=False),
    ]
)
SCHEMAS: dict[str, pa.Schema] = {"impressions": IMPRESSION_LOG_SCHEMA, "events": EVENT_SCHEMA}
REQUIRED: dict[str, pa.Schema] = {"impressions": IMPRESSION_SCHEMA, "events": EVENT_SCHEMA}
"""The columns a segment of each kind must have (`SCHEMAS` less the columns added since)."""
CONVERT_ROWS = 4096
"""Buffered rows (JSON lines) the writer's thread parses into a table in one call."""
_JSON_SCHEMAS = {  # what Arrow's JSON reader parses a kind's rows as: the timestamp as Unix ms, cast after
    kind: pa.schema([pa.field(f.name, pa.int64()) if f.name == "timestamp" else f for f in schema])
    for kind, schema in SCHEMAS.items()
}
_NAMES = {kind: tuple(schema.names) for kind, schema in SCHEMAS.items()}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_STAGES_OR_NONE = frozenset((*STAGES, None))
_TEAMS_OR_NONE = frozenset((*TEAMS, None))


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Impression:
    """One search answer shown: ``hit_ids[i]`` was at position ``offset + i + 1``.

    ``query_id`` is the search id (UBI's name); ``client_id`` an opaque user key, never a client
    address; ``arm`` which ranker answered when two are compared; ``hit_stages[i]`` LEXICAL,
    SEMANTIC, BOTH or None; ``hit_teams[i]`` which of two compared rankers contributed
    ``hit_ids[i]``, "A" or "B" (None: not compared)."""

    query_id: str
    user_query: str
    hit_ids: Sequence[str]
    bundle: str = ""
    bundle_version: str = ""
    k: int = 10
    offset: int = 0
    client_id: str | None = None
    arm: str | None = None
    hit_stages: Sequence[str | None] | None = None
    timestamp: datetime = field(default_factory=_now)
    hit_teams: Sequence[str | None] | None = None

    def __post_init__(self) -> None:
        _check_impression(self.hit_ids, self.hit_stages, self.k, self.offset, self.hit_teams)


def _check_impression(
    hit_ids: Sequence[str],
    hit_stages: Sequence[str | None] | None,
    k: int,
    offset: int,
    hit_teams: Sequence[str | None] | None = None,
) -> None:
    if offset < 0 or k < 0:
        raise ValueError(f"offset and k must be >= 0, got offset={offset}, k={k}")
    if hit_stages is not None:
        if len(hit_stages) != len(hit_ids):
            raise ValueError(f"{len(hit_stages)} hit_stages for {len(hit_ids)} hit_ids")
        if not _STAGES_OR_NONE.issuperset(hit_stages):
            bad = [x for x in hit_stages if x not in _STAGES_OR_NONE]
            raise ValueError(f"hit_stages are {', '.join(STAGES)} or None, got {bad[0]!r}")
    if hit_teams is not None:
        if len(hit_teams) != len(hit_ids):
            raise ValueError(f"{len(hit_teams)} hit_teams for {len(hit_ids)} hit_ids")
        if not _TEAMS_OR_NONE.issuperset(hit_teams):
            bad = [x for x in hit_teams if x not in _TEAMS_OR_NONE]
            raise ValueError(f"hit_teams are {', '.join(TEAMS)} or None, got {bad[0]!r}")


def impression_row(
    query_id: str,
    user_query: str,
    hit_ids: Sequence[str],
    hit_stages: Sequence[str | None] | None = None,
    *,
    bundle: str = "",
    bundle_version: str = "",
    k: int = 10,
    offset: int = 0,
    client_id: str | None = None,
    arm: str | None = None,
    timestamp: datetime | int | None = None,
    hit_teams: Sequence[str | None] | None = None,
) -> tuple[Any, ...]:
    """One impression as a row for `EventLogWriter.append_row`: the values of the written
    impression schema's columns (`SCHEMAS`) in its order, checked as `Impression` checks them;
    ``timestamp`` a datetime or Unix milliseconds (None: now). The cheap form of an `Impression`
    for a hot path (a served search): a tuple of strings and numbers, which the cyclic garbage
    collector stops tracking, and no datetime made per row."""
    _check_impression(hit_ids, hit_stages, k, offset, hit_teams)
    ts = time.time_ns() // 1_000_000 if timestamp is None else timestamp
    return (query_id, ts, user_query, client_id, bundle, bundle_version, arm, k, offset, hit_ids, hit_stages, hit_teams)


@dataclass(frozen=True, slots=True)
class Event:
    """One user action on a shown result (UBI's event): a click on ``object_id`` at ``position``
    (1-based, UBI's ``position.ordinal``) of the answer ``query_id``."""

    query_id: str
    object_id: str
    position: int
    action_name: str = "click"
    client_id: str | None = None
    timestamp: datetime = field(default_factory=_now)

    def __post_init__(self) -> None:
        if self.position < 1:
            raise ValueError(f"position is 1-based, got {self.position}")


def event_row(
    query_id: str,
    object_id: str,
    position: int,
    *,
    action_name: str = "click",
    client_id: str | None = None,
    timestamp: datetime | int | None = None,
) -> tuple[Any, ...]:
    """One event as a row for `EventLogWriter.append_row` (`EVENT_SCHEMA`'s columns in order),
    checked as `Event` checks it; ``timestamp`` a datetime or Unix milliseconds (None: now)."""
    if position < 1:
        raise ValueError(f"position is 1-based, got {position}")
    ts = time.time_ns() // 1_000_000 if timestamp is None else timestamp
    return (query_id, ts, client_id, action_name, object_id, position)


def record_row(record: Impression | Event) -> tuple[Any, ...]:
    """A record as a row of its kind's columns, in the schema's order (the records' fields are
    named as the schema's columns)."""
    schema = SCHEMAS["impressions"] if isinstance(record, Impression) else EVENT_SCHEMA
    return tuple(getattr(record, name) for name in schema.names)


def _json_value(x: Any) -> Any:
    """orjson's fallback for a row's values: a datetime as Unix ms (a naive one taken as UTC, as
    Arrow takes it), an array or other sequence as a list."""
    if isinstance(x, datetime):
        return ((x if x.tzinfo is not None else x.replace(tzinfo=UTC)) - _EPOCH) // _MS
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, Sequence) and not isinstance(x, str | bytes):
        return list(x)
    raise TypeError(f"an event-log value cannot be {type(x).__name__}")


def _json_line(names: Sequence[str], row: tuple[Any, ...]) -> bytes:
    """A row as one JSON object (a line for Arrow's JSON reader), its timestamp as Unix ms."""
    if len(row) != len(names):
        raise ValueError(f"a row of {len(row)} values for the {len(names)} columns {', '.join(names)}")
    ts = row[1]  # the timestamp: the second column of both kinds
    if isinstance(ts, datetime):
        row = (row[0], _json_value(ts), *row[2:])
    return orjson.dumps(dict(zip(names, row, strict=True)), default=_json_value)


def json_table(lines: Sequence[bytes], schema: pa.Schema) -> pa.Table:
    """JSON lines of one kind's rows (`_json_line`) as one table of ``schema``, parsed by Arrow's
    JSON reader, which gives up the GIL while it parses."""
    kind = next(k for k, s in SCHEMAS.items() if s.equals(schema))
    table = pj.read_json(
        pa.BufferReader(b"\n".join(lines)),
        read_options=pj.ReadOptions(use_threads=False, block_size=1 << 22),
        parse_options=pj.ParseOptions(explicit_schema=_JSON_SCHEMAS[kind], unexpected_field_behavior="error"),
    )
    return table.select(schema.names).cast(schema)


def records_table(rows: Sequence[Impression] | Sequence[Event], schema: pa.Schema) -> pa.Table:
    """Records as one table of ``schema``: each record's field of the column's name (the records'
    fields are named as the schema's columns; sequences such as ``hit_ids`` become lists)."""
    return pa.Table.from_pydict({name: [getattr(r, name) for r in rows] for name in schema.names}, schema=schema)


def impressions_table(rows: Sequence[Impression]) -> pa.Table:
    """Impression records as one table of `IMPRESSION_LOG_SCHEMA`."""
    return records_table(rows, IMPRESSION_LOG_SCHEMA)


def events_table(rows: Sequence[Event]) -> pa.Table:
    """Event records as one table of `EVENT_SCHEMA`."""
    return records_table(rows, EVENT_SCHEMA)


def _as_log_table(table: pa.Table) -> tuple[Kind, pa.Table]:
    """The kind of a table with the impression or event columns, and the table cast to its schema
    (`SCHEMAS`; a table with only the `REQUIRED` columns gets the added ones as nulls)."""
    for kind in KINDS:
        full = SCHEMAS[kind]
        if table.schema.names == REQUIRED[kind].names and len(full) > len(REQUIRED[kind]):
            for f in list(full)[len(REQUIRED[kind]) :]:
                table = table.append_column(f, pa.nulls(table.num_rows, f.type))
        if table.schema.names == full.names:
            return kind, table if table.schema.equals(full) else table.cast(full)
    raise ValueError(
        "a table to append must have the impression or the event columns, in order "
        f"(semsearch.clicks.log.IMPRESSION_SCHEMA / EVENT_SCHEMA); got {', '.join(table.schema.names)}"
    )


_SEGMENT_SEQ = itertools.count()  # segments of one process sort in the order written, within a millisecond too


def write_segment(directory: PathLike, kind: Kind, table: pa.Table) -> Path:
    """Write ``table`` as one new segment ``directory/kind/part-*.parquet``, atomically: temporary
    name in the same folder, fsync, rename, fsync of the folder. Returns the segment's path."""
    folder = Path(directory) / kind
    folder.mkdir(parents=True, exist_ok=True)
    seq = next(_SEGMENT_SEQ)
    name = f"part-{time.time_ns() // 1_000_000:013d}-{os.getpid()}-{seq:09d}-{secrets.token_hex(4)}.parquet"
    tmp = folder / f".{name}.tmp"
    try:
        with open(tmp, "wb") as f:
            pq.write_table(table, f, compression="zstd")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, folder / name)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return folder / name


class EventLogWriter:
    """Append impressions and clicks to a log directory; thread-safe; bounded in memory.

    Rows are buffered per kind and written as a segment by a background thread when a kind holds
    ``flush_rows`` rows, or ``flush_seconds`` after its oldest buffered row arrived, or on
    `flush` / `close`. So a crash loses at most the rows appended in the last ``flush_seconds``.
    `append` takes one `Impression` or `Event` (validated when made), `append_row` one row made by
    `impression_row` or `event_row` (the same checks, no record object); `append_table` a whole table
    of either schema (the simulator's bulk path; its values are not checked row by row). All three
    block while ``max_pending_rows`` rows (default four times ``flush_rows``) wait to be written
    (``append(record, block=False)`` drops the record instead and says so).
    An error of the writing thread is raised by the next call. One writer per process (its
    thread does not survive a fork): several processes may write into one directory, each with
    its own writer. Rows still buffered when the process ends without `close` are lost, as in a
    crash.
    """

    def __init__(
        self,
        directory: PathLike,
        *,
        flush_rows: int = 10_000,
        flush_seconds: float = 5.0,
        max_pending_rows: int | None = None,
    ) -> None:
        if flush_rows < 1:
            raise ValueError(f"flush_rows must be >= 1, got {flush_rows}")
        if not flush_seconds > 0:
            raise ValueError(f"flush_seconds must be > 0, got {flush_seconds}")
        self.directory = Path(directory)
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.max_pending_rows = max_pending_rows or 4 * flush_rows
        if self.max_pending_rows < flush_rows:
            raise ValueError(f"max_pending_rows ({self.max_pending_rows}) must be >= flush_rows ({flush_rows})")
        for kind in KINDS:
            (self.directory / kind).mkdir(parents=True, exist_ok=True)
        # per kind, in the order appended: tables, and runs of single rows (lists of JSON lines:
        # bytes, which the cyclic GC does not track and Arrow parses without the GIL)
        self._items: dict[Kind, list[pa.Table | list[Any]]] = {k: [] for k in KINDS}
        self._rows: dict[Kind, int] = {k: 0 for k in KINDS}
        self._oldest: dict[Kind, float | None] = {k: None for k in KINDS}
        self._writing = 0  # rows taken from the buffers, not yet on disk
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._io = threading.Lock()  # one segment write at a time, in the order the rows were taken
        self._closed = False
        self._error: BaseException | None = None
        self._pid = os.getpid()
        self.segments_written = 0
        self.rows_written = 0
        self._thread = threading.Thread(target=self._run, name="semsearch-event-log", daemon=True)
        self._thread.start()

    # -- appending -------------------------------------------------------------------------------

    def append(self, record: Impression | Event, *, block: bool = True) -> bool:
        """Buffer one record (written within ``flush_seconds``); True once buffered. With ``block``
        False, a full buffer (``max_pending_rows`` rows waiting) drops the record and returns False
        rather than waiting for the disk (a caller that must never wait on it: a service's event
        loop)."""
        if not isinstance(record, Impression | Event):
            raise TypeError(f"append takes an Impression or an Event, got {type(record).__name__}")
        kind: Kind = "impressions" if isinstance(record, Impression) else "events"
        return self.append_row(kind, record_row(record), block=block)

    def append_row(self, kind: Kind, row: tuple[Any, ...], *, block: bool = True) -> bool:
        """Buffer one row of ``kind`` made by `impression_row` or `event_row` (checked there):
        `append` without a record object, for a hot path. Returns as `append` does. The row is
        buffered as one JSON line (orjson, about a microsecond), which the writer's thread parses
        with Arrow's JSON reader: turning Python objects into Arrow columns there held the GIL, and
        the appending thread (a service's event loop) waited behind it."""
        return self._add(kind, _json_line(_NAMES[kind], row), 1, block)

    def append_table(self, table: pa.Table) -> None:
        """Buffer a table with `IMPRESSION_SCHEMA`'s or `EVENT_SCHEMA`'s columns (cast to it)."""
        kind, table = _as_log_table(table)
        if table.num_rows:
            self._add(kind, table, table.num_rows)

    def _add(self, kind: Kind, item: Any, rows: int, block: bool = True) -> bool:
        self._check_process()
        with self._changed:
            self._raise_error()
            if self._closed:
                raise ValueError("EventLogWriter is closed")
            while self._pending() >= self.max_pending_rows and self._error is None:
                self._changed.notify_all()
                if not block:
                    return False
                self._changed.wait()
            self._raise_error()
            items = self._items[kind]
            if isinstance(item, pa.Table):
                items.append(item)
            elif items and isinstance(items[-1], list):
                items[-1].append(item)
            else:
                items.append([item])
            self._rows[kind] += rows
            if self._oldest[kind] is None:
                self._oldest[kind] = time.monotonic()
            if self._rows[kind] >= self.flush_rows:
                self._changed.notify_all()
            return True

    def _check_process(self) -> None:
        if os.getpid() != self._pid:
            raise RuntimeError(
                "an EventLogWriter cannot be used across a fork (its writing thread stays in the parent): "
                "create one in each process that appends"
            )

    def _pending(self) -> int:
        return sum(self._rows.values()) + self._writing

    def _raise_error(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"event log writer failed writing to {self.directory}") from self._error

    # -- writing ---------------------------------------------------------------------------------

    def _take(self, kind: Kind) -> tuple[list[pa.Table | list[Any]], int]:
        """Under the lock: this kind's buffered items and their row count, the buffer emptied."""
        items, rows = self._items[kind], self._rows[kind]
        self._writing += rows
        self._items[kind], self._rows[kind], self._oldest[kind] = [], 0, None
        return items, rows

    def _drain(self, kinds: Sequence[Kind]) -> None:
        with self._io:
            for kind in kinds:
                with self._lock:
                    items, rows = self._take(kind)
                if not rows:
                    continue
                try:  # records become a table outside the lock: appends go on meanwhile
                    parts = self._tables(kind, items)
                    write_segment(self.directory, kind, pa.concat_tables(parts) if len(parts) > 1 else parts[0])
                finally:
                    with self._changed:
                        self._writing -= rows
                        self._changed.notify_all()
                self.segments_written += 1
                self.rows_written += rows

    @staticmethod
    def _tables(kind: Kind, items: list[pa.Table | list[Any]]) -> list[pa.Table]:
        """The buffered items as tables, JSON lines parsed ``CONVERT_ROWS`` at a time by Arrow's
        JSON reader, which gives up the GIL while it parses: the threads that append (a service's
        event loop) do not wait behind the log."""
        schema = SCHEMAS[kind]
        parts: list[pa.Table] = []
        for x in items:
            if isinstance(x, pa.Table):
                parts.append(x)
                continue
            for i in range(0, len(x), CONVERT_ROWS):
                parts.append(json_table(x[i : i + CONVERT_ROWS], schema))
        return parts

    def _due(self) -> tuple[list[Kind], float]:
        """Under the lock: the kinds to write now, and how long to wait otherwise."""
        now, due, wait = time.monotonic(), [], self.flush_seconds
        for kind in KINDS:
            oldest = self._oldest[kind]
            if self._rows[kind] >= self.flush_rows or (oldest is not None and now - oldest >= self.flush_seconds):
                due.append(kind)
            elif oldest is not None:
                wait = min(wait, oldest + self.flush_seconds - now)
        return due, wait

    def _run(self) -> None:
        while True:
            with self._changed:
                due, wait = self._due()
                while not due and not self._closed:
                    self._changed.wait(timeout=max(wait, 0.001))
                    due, wait = self._due()
                if self._closed and not due:
                    return
            try:
                self._drain(due)
            except BaseException as e:  # noqa: BLE001  # kept for the caller: raised by its next call
                with self._changed:
                    self._error = e
                    self._changed.notify_all()
                return

    def flush(self) -> None:
        """Write every buffered row now; returns once they are on disk."""
        self._check_process()
        self._raise_error()
        self._drain(KINDS)

    def close(self) -> None:
        """Flush and stop the writing thread. Idempotent. In a forked child it does nothing: the
        rows buffered before the fork are the parent's to write."""
        if os.getpid() != self._pid:
            return
        with self._changed:
            if self._closed:
                return
            self._closed = True
            self._changed.notify_all()
        self._thread.join()
        self._raise_error()
        self._drain(KINDS)

    def __enter__(self) -> EventLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- segments ------------------------------------------------------------------------------------


def segments(directory: PathLike, kind: Kind) -> list[Path]:
    """The whole segments of one kind, sorted by name (temporary files are not segments)."""
    return sorted((Path(directory) / kind).glob("part-*.parquet"))


def _compatible(expected: pa.DataType, got: pa.DataType) -> bool:
    if pa.types.is_string(expected):
        return pa.types.is_string(got) or pa.types.is_large_string(got)
    if pa.types.is_int32(expected):
        return pa.types.is_integer(got)
    if pa.types.is_timestamp(expected):
        return pa.types.is_timestamp(got)
    if pa.types.is_list(expected):
        return (pa.types.is_list(got) or pa.types.is_large_list(got)) and _compatible(
            expected.value_type, got.value_type
        )
    return expected.equals(got)


def validate_segment(path: PathLike, kind: Kind) -> None:
    """Check one segment's schema against its kind's: a file that is not Parquet, a missing column
    or a column of another type is a DataFormatError naming the file and the column. Extra columns
    (other UBI fields) are allowed; string/large_string and integer widths are interchangeable, and
    a column that may hold nulls may be of the null type (all null, as other tools write it). A
    column added since the first logs (`IMPRESSION_ADDED`) may be missing (a log written before
    it, or by another tool); when present it has its type."""
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise DataFormatError(path, None, f"not a readable Parquet {kind} segment ({e})") from None
    required = REQUIRED[kind].names
    for f in SCHEMAS[kind]:
        if f.name not in schema.names:
            if f.name not in required:
                continue
            raise DataFormatError(path, None, f"missing column {f.name!r} ({kind} need {', '.join(required)})")
        got = schema.field(f.name).type
        if not (_compatible(f.type, got) or (f.nullable and pa.types.is_null(got))):
            raise DataFormatError(path, None, f"column {f.name!r} is {got}, expected {f.type}")
