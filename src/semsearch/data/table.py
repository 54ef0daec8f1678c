"""A user's own collection as a table: CSV/TSV with a header, JSON lines, Parquet, or (in Python) a
pandas or Polars DataFrame, read into a `Corpus` whose documents keep their other columns.

The columns: ``id`` (default: the first column named like an id, see `TSV_ID_NAMES`), ``fields``
(the columns searched and encoded: the first is the document's title, the others joined make its
text; default: ``title`` and ``text``, those present), ``facets`` (keyword fields: a string, or in
JSON/Parquet a list of strings), ``numeric`` (range fields: int or float; an empty cell is null).
Every other column is kept as a stored field (CSV/TSV: its text; JSON/Parquet: its value), so
nothing is dropped silently; stored, facet and numeric values are returned with hits.

Errors name the file, the line (Parquet and DataFrames: the row) and the column: a missing column
lists the header found, a duplicate id names both lines, bad UTF-8 names its byte offset in the
file, and a line (a record) longer than ``max_record_bytes`` is refused without being read whole.
"""

from __future__ import annotations

import csv
import datetime as _dt
import decimal
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .beir import TSV_ID_NAMES, Corpus
from .errors import BadLinePolicy, DataFormatError
from .files import PathLike

MAX_RECORD_BYTES = 1 << 20
"""The default bound on one line (one record) of a table file: 1 MiB."""
TABLE_SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
TABLE_SUFFIXES |= {".json": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
_BOM = b"\xef\xbb\xbf"


def table_format(path: PathLike) -> str:
    """csv, tsv, jsonl or parquet, by the file's suffix (ValueError naming the suffixes read)."""
    kind = TABLE_SUFFIXES.get(Path(path).suffix.lower())
    if kind is None:
        raise DataFormatError(
            path, None, f"unknown table format {Path(path).suffix!r}: name it {', '.join(sorted(TABLE_SUFFIXES))}"
        )
    return kind


def _names(value: str | Sequence[str] | None) -> list[str]:
    """A column list: a comma-separated string or a sequence, blanks dropped."""
    if value is None:
        return []
    parts = value.split(",") if isinstance(value, str) else list(value)
    return [p.strip() for p in parts if p.strip()]


class _Columns:
    """The columns of one table resolved against its header (or, JSON lines, given as named)."""

    def __init__(
        self,
        where: str,
        header: Sequence[str] | None,
        id: str | None,
        fields: Sequence[str],
        facets: Sequence[str],
        numeric: Sequence[str],
    ) -> None:
        self.where, self.header = where, list(header) if header is not None else None
        if header is not None:
            dup = sorted({h for h in header if list(header).count(h) > 1})
            if dup:
                raise ValueError(f"the header names column {dup[0]!r} twice (header: {', '.join(header)})")
        if id is None:
            found = [h for h in header or () if h.strip().lower() in TSV_ID_NAMES]
            if not found:
                known = "" if header is None else f" (header: {', '.join(header)})"
                raise ValueError(f"no id column: give --id COLUMN{known}")
            id = found[0]
        self.id = self._find(id, "--id")
        if not fields:
            present = [h for h in header or ("title", "text") if h.strip().lower() in ("title", "text")]
            if not present:
                raise ValueError(f"no title or text column: give --fields COLUMNS (header: {self._header()})")
            fields = sorted(present, key=lambda h: h.strip().lower() != "title")
        self.fields = [self._find(f, "--fields") for f in fields]
        self.facets = [self._find(f, "--facets") for f in facets]
        self.numeric = [self._find(f, "--numeric") for f in numeric]
        for name in self.facets:
            if name in self.numeric:
                raise ValueError(f"column {name!r} is given as both a facet and a numeric field")
        for name in (*self.facets, *self.numeric, *self.fields):
            if name == self.id:
                raise ValueError(f"the id column {name!r} cannot also be a field, facet or numeric column")

    def _header(self) -> str:
        return ", ".join(self.header) if self.header is not None else "(none: JSON lines)"

    def _find(self, name: str, option: str) -> str:
        """``name`` in the header: as written, else the one column equal to it ignoring case."""
        if self.header is None or name in self.header:
            return name
        folded = [h for h in self.header if h.strip().lower() == name.strip().lower()]
        if len(folded) == 1:
            return folded[0]
        raise ValueError(f"{option}: no column {name!r} (header: {self._header()})")

    def schema(self, stored: Iterable[str]) -> dict[str, Any]:
        return {
            "id": self.id,
            "fields": self.fields,
            "facets": self.facets,
            "numeric": self.numeric,
            "stored": [s for s in stored if s not in self.facets and s not in self.numeric],
        }


def _text(value: Any, column: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
        raise ValueError(f"column {column!r}: expected text, got {type(value).__name__} {_short(value)}")
    return str(value)


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


def _facet(value: Any, column: str) -> str | list[str] | None:
    """A keyword value: a string (blank: null), or a list of them; integers read as their text."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return [v for v in value if v.strip()]
    raise ValueError(f"column {column!r} (a facet): expected a string or a list of strings, got {_short(value)}")


def _number(value: Any, column: str) -> int | float | None:
    """A numeric value: int or float (a CSV cell's text parsed; blank: null); NaN and inf refused."""
    if value is None:
        return None
    if isinstance(value, str):
        s = value.strip().replace("_", "!")  # int()/float() accept 1_000, a reader of the file would not
        if not s:
            return None
        try:
            value = int(s)
        except ValueError:
            try:
                value = float(s)
            except ValueError:
                raise ValueError(f"column {column!r} (numeric): {value!r} is not a number") from None
    if isinstance(value, decimal.Decimal):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"column {column!r} (numeric): expected a number, got {_short(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        if math.isnan(value):  # pandas' missing value
            return None
        raise ValueError(f"column {column!r} (numeric): {value!r} is not a finite number")
    return value


def _stored(value: Any) -> Any:
    """A stored column's value as JSON can carry it (dates as ISO text, NaN as null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, _dt.date | _dt.datetime | _dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {str(k): _stored(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_stored(v) for v in value]
    return value


class _Builder:
    """Collects records into the parallel lists of a `Corpus`, checking each one."""

    def __init__(self, columns: _Columns, unit: str) -> None:
        self.c, self.unit = columns, unit
        self.ids: list[str] = []
        self.titles: list[str] = []
        self.texts: list[str] = []
        self.stored: list[dict[str, Any]] = []
        self.first: dict[str, int] = {}
        self.extra: dict[str, None] = {}  # stored columns seen, in order

    def add(self, number: int, record: Mapping[str, Any]) -> None:
        c = self.c
        if c.id not in record:
            raise ValueError(f"no column {c.id!r} (this record has: {', '.join(map(str, record)) or 'nothing'})")
        doc_id = _text(record[c.id], c.id).strip()
        if not doc_id:
            raise ValueError(f"column {c.id!r}: empty id")
        if "\r" in doc_id or "\n" in doc_id:
            raise ValueError(f"column {c.id!r}: id {doc_id!r} contains a line break")
        if doc_id in self.first:
            raise ValueError(f"column {c.id!r}: duplicate id {doc_id!r} (first on {self.unit} {self.first[doc_id]})")
        parts = [_text(record.get(f), f) for f in c.fields]
        if not any(p.strip() for p in parts):
            raise ValueError(f"document {doc_id!r} has no text in {', '.join(repr(f) for f in c.fields)}")
        stored: dict[str, Any] = {}
        for name, value in record.items():
            if name == c.id or (name in c.fields and name not in c.facets and name not in c.numeric):
                continue
            if name in c.facets:
                stored[name] = _facet(value, name)
            elif name in c.numeric:
                stored[name] = _number(value, name)
            else:
                stored[name] = _stored(value)
                self.extra.setdefault(name)
        for name in (*c.facets, *c.numeric):
            stored.setdefault(name, None)
        self.first[doc_id] = number
        self.ids.append(doc_id)
        self.titles.append(parts[0])
        self.texts.append(" ".join(p for p in parts[1:] if p.strip()))
        self.stored.append(stored)

    def corpus(self, where: PathLike | str, policy: BadLinePolicy) -> Corpus:
        if not self.ids:
            message = f"no valid records ({policy.summary()})" if policy.skipped else "no records (empty table)"
            raise DataFormatError(where, None, message)
        policy.finish()
        return Corpus(self.ids, self.titles, self.texts, self.stored, self.c.schema(self.extra))


def _lines(path: PathLike, limit: int, policy: BadLinePolicy | None) -> Iterator[tuple[int, str]]:
    """(line number, decoded line with its ending) of a UTF-8 file, each read at most ``limit`` + 1
    bytes at a time: a longer line is refused (or, under ``policy``, skipped to its end) without
    ever being held whole. Bad UTF-8 names its byte offset in the file."""
    with open(path, "rb") as f:
        number, offset = 0, 0
        while raw := f.readline(limit + 1):
            number += 1
            start = offset
            offset += len(raw)
            if len(raw) > limit and not raw.endswith(b"\n"):
                message = f"line longer than the bound of {limit:,} bytes (--max-record-bytes)"
                if policy is None:
                    raise DataFormatError(path, number, message)
                policy.bad(number, message)
                while (rest := f.readline(limit + 1)) and not rest.endswith(b"\n"):
                    offset += len(rest)
                offset += len(rest)
                continue
            if number == 1 and raw.startswith(_BOM):
                raw, start = raw[len(_BOM) :], start + len(_BOM)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                message = f"not valid UTF-8 ({e.reason} at byte offset {start + e.start} of the file)"
                if policy is None:
                    raise DataFormatError(path, number, message) from None
                policy.bad(number, message)
                continue
            yield number, line


def _read_delimited(path: PathLike, delimiter: str, b: Callable[[Sequence[str]], _Builder], limit: int, skip: bool):
    policy = BadLinePolicy(path, skip)
    old = csv.field_size_limit()
    csv.field_size_limit(limit)  # a runaway quoted field stops at the bound, not at the end of the file
    try:
        numbers: list[int] = []

        def text() -> Iterator[str]:
            for number, line in _lines(path, limit, None):  # a record may span lines: errors here are fatal
                numbers.append(number)
                yield line

        if delimiter == ",":
            reader = csv.reader(text(), delimiter=delimiter, quoting=csv.QUOTE_MINIMAL, strict=True)
        else:  # TSV: quotes are text
            reader = csv.reader(text(), delimiter=delimiter, quoting=csv.QUOTE_NONE)
        builder: _Builder | None = None
        header: list[str] = []
        while True:
            start = len(numbers) + 1
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                first = numbers[start - 1] if start - 1 < len(numbers) else start
                if "field limit" in str(e):  # a quoted field running on: reported where its record starts
                    message = f"record (to line {numbers[-1]}) longer than the bound of {limit:,} bytes"
                    raise DataFormatError(path, first, f"{message} (--max-record-bytes)") from None
                raise DataFormatError(path, numbers[-1] if numbers else start, f"malformed CSV ({e})") from None
            first = numbers[start - 1] if start - 1 < len(numbers) else start
            if not row or all(not cell.strip() for cell in row):
                continue
            if builder is None:
                header = [h.strip() for h in row]
                try:
                    builder = b(header)
                except ValueError as e:
                    raise DataFormatError(path, first, str(e)) from None
                continue
            try:
                if sum(len(cell) for cell in row) > limit:
                    raise ValueError(f"record longer than the bound of {limit:,} bytes (--max-record-bytes)")
                if len(row) != len(header):
                    raise ValueError(f"expected {len(header)} columns (the header's), got {len(row)}")
                builder.add(first, dict(zip(header, row, strict=True)))
            except ValueError as e:
                policy.bad(first, str(e))
        if builder is None:
            raise DataFormatError(path, None, "no header (empty file)")
        return builder.corpus(path, policy)
    finally:
        csv.field_size_limit(old)


def _read_jsonl(path: PathLike, b: Callable[[Sequence[str] | None], _Builder], limit: int, skip: bool) -> Corpus:
    policy = BadLinePolicy(path, skip)
    try:
        builder = b(None)
    except ValueError as e:
        raise DataFormatError(path, None, str(e)) from None
    for number, line in _lines(path, limit, policy):
        if not line.strip():
            continue
        try:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"invalid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
            builder.add(number, obj)
        except ValueError as e:
            policy.bad(number, str(e))
    return builder.corpus(path, policy)


def _read_arrow(
    where: str, table: Any, b: Callable[[Sequence[str] | None], _Builder], limit: int, skip: bool
) -> Corpus:
    """Rows of a pyarrow Table (or ParquetFile), numbered from 1 as ``row N``."""
    policy = BadLinePolicy(where, skip)
    names = list(table.schema.names)
    try:
        builder = b(names)
    except ValueError as e:
        raise DataFormatError(where, None, str(e)) from None
    batches = table.iter_batches(batch_size=1024) if hasattr(table, "iter_batches") else table.to_batches(1024)
    number = 0
    for batch in batches:
        for row in batch.to_pylist():
            number += 1
            try:
                size = sum(len(v) for v in row.values() if isinstance(v, str | bytes))
                if size > limit:
                    raise ValueError(f"record longer than the bound of {limit:,} bytes (max_record_bytes)")
                builder.add(number, row)
            except ValueError as e:
                policy.bad(None, f"row {number}: {e}")
    return builder.corpus(where, policy)


def load_table(
    path: PathLike,
    *,
    id: str | None = None,
    fields: str | Sequence[str] | None = None,
    facets: str | Sequence[str] | None = None,
    numeric: str | Sequence[str] | None = None,
    max_record_bytes: int = MAX_RECORD_BYTES,
    skip_bad_lines: bool = False,
) -> Corpus:
    """Read a CSV/TSV file with a header, a JSON lines file or a Parquet file into a `Corpus`
    (the columns: see the module's docstring; ``fields`` etc.: comma-separated or a list).

    Raises:
        DataFormatError: naming the file, the line (Parquet: the row) and the column."""
    if max_record_bytes < 1:
        raise ValueError(f"max_record_bytes must be >= 1, got {max_record_bytes}")
    kind = table_format(path)
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such file")
    field_names, facet_names, numeric_names = _names(fields), _names(facets), _names(numeric)

    def builder(unit: str) -> Callable[[Sequence[str] | None], _Builder]:
        return lambda header: _Builder(
            _Columns(os.fspath(path), header, id, field_names, facet_names, numeric_names), unit
        )

    if kind in ("csv", "tsv"):
        return _read_delimited(path, "," if kind == "csv" else "\t", builder("line"), max_record_bytes, skip_bad_lines)
    if kind == "jsonl":
        return _read_jsonl(path, builder("line"), max_record_bytes, skip_bad_lines)
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # noqa: BLE001  # pyarrow's errors: ArrowInvalid, OSError, ...
        raise DataFormatError(path, None, f"not a readable Parquet file ({e})") from None
    return _read_arrow(os.fspath(path), pf, builder("row"), max_record_bytes, skip_bad_lines)


def corpus_from_frame(
    frame: Any,
    *,
    id: str | None = None,
    fields: str | Sequence[str] | None = None,
    facets: str | Sequence[str] | None = None,
    numeric: str | Sequence[str] | None = None,
    max_record_bytes: int = MAX_RECORD_BYTES,
    name: str = "DataFrame",
) -> Corpus:
    """A pandas or Polars DataFrame (or a pyarrow Table) as a `Corpus`, its columns read as
    `load_table`'s; errors name ``name`` and the row (1-based, in the frame's order). Neither
    pandas nor Polars is a dependency: a frame is turned into Arrow by its own method."""
    import pyarrow as pa

    if isinstance(frame, pa.Table):
        table = frame
    elif callable(getattr(frame, "to_arrow", None)):  # Polars
        table = frame.to_arrow()
    elif type(frame).__module__.split(".")[0] == "pandas":
        table = pa.Table.from_pandas(frame, preserve_index=False)
    else:
        raise TypeError(f"expected a pandas or Polars DataFrame or a pyarrow Table, got {type(frame).__name__}")
    field_names, facet_names, numeric_names = _names(fields), _names(facets), _names(numeric)

    def builder(header: Sequence[str] | None) -> _Builder:
        return _Builder(_Columns(name, header, id, field_names, facet_names, numeric_names), "row")

    return _read_arrow(name, table, builder, max_record_bytes, False)


__all__ = ["MAX_RECORD_BYTES", "corpus_from_frame", "load_table", "table_format"]
