"""Click logs in the formats other tools and the public click data sets use, read into the event
log's two tables (and so into the same `Sessions` a log read back gives), and written out.

- **Yandex** (`read_yandex`, `write_yandex`): the tab-separated search log of Yandex's Relevance
  Prediction Challenge (WSCD 2012), the format PyClick reads (its ``YandexRelPredChallengeParser``)
  and click-model papers use. A query line is ``SessionID TimePassed Q QueryID RegionID URL_1 ...
  URL_k`` (URL_i shown at rank i), a click line ``SessionID TimePassed C URL``; a session's lines
  are together, in time order. A session may hold several queries: each is one impression, with
  the search id ``SessionID/i`` (i = 0, 1, ... its query's order in the session), and a click goes
  to the latest query of its session that showed the URL (PyClick credits only the latest query,
  and drops the click when that query did not show it). A click on a URL no query of its session
  showed is not counted (``LogTables.skipped_clicks``). The format carries no date:
  TimePassed is kept as milliseconds from the Unix epoch; ``client_id`` is the SessionID.
- **UBI JSON** (`read_ubi`, `write_ubi`): OpenSearch's User Behavior Insights query and event
  documents (the ``ubi_queries`` and ``ubi_events`` indexes; schema: o19s/ubi 1.3.0), one folder
  holding ``ubi_queries.jsonl`` and ``ubi_events.jsonl`` (JSON Lines, or a JSON array, a
  document per item; an item ``{"_source": {...}}``, as an OpenSearch search returns hits, is
  read as its source). A query document gives ``query_id``, ``user_query``, ``client_id``,
  ``timestamp`` and ``query_response_hit_ids`` (the hits in shown order); an event document
  ``action_name``, ``query_id``, ``client_id``, ``timestamp``,
  ``event_attributes.object.object_id`` and ``event_attributes.position.ordinal`` (the 1-based
  position, as the event log's ``position``). Timestamps are ISO 8601 (UTC when no zone is given)
  or Unix milliseconds. The log's own columns without a UBI field (``bundle``, ``k``,
  ``offset``, ``hit_stages``, ``hit_teams``, ...) travel in ``query_attributes``, so a log
  written out and read back is the same log. Events of other actions than the one read are
  skipped unread (UBI logs hold many: hovers, filters, logins).

Input is checked once, here: a line or document that breaks its format is a `DataFormatError`
naming the file, the line (or item) and the field.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ..data.errors import DataFormatError
from ..data.files import atomic_write
from .log import EVENT_SCHEMA, IMPRESSION_LOG_SCHEMA, PathLike, write_segment
from .sessions import Sessions, read_log, read_sessions, sessions_from_tables

Format = Literal["log", "yandex", "ubi"]
FORMATS: tuple[Format, ...] = ("log", "yandex", "ubi")
"""What `load_sessions` reads: the event log (Parquet segments), a Yandex search log, UBI JSON."""
UBI_QUERIES = "ubi_queries.jsonl"
UBI_EVENTS = "ubi_events.jsonl"
YANDEX_FIELDS = ("SessionID", "TimePassed", "TypeOfAction")
_QUERY_ATTRIBUTES = ("bundle", "bundle_version", "arm", "k", "offset", "hit_stages", "hit_teams")


@dataclass(frozen=True)
class LogTables:
    """A click log in memory: ``impressions`` and ``events`` in the event log's schemas
    (`clicks.log.SCHEMAS`); ``skipped_clicks``: clicks of the source that name no shown result."""

    impressions: pa.Table
    events: pa.Table
    source: str = "log"
    skipped_clicks: int = 0

    def sessions(self, *, top_n: int = 10, action: str = "click") -> Sessions:
        """The sessions view, as `clicks.sessions.read_sessions` gives it for the same log."""
        return sessions_from_tables(self.impressions, self.events, top_n=top_n, action=action, where=self.source)

    def write_log(self, directory: PathLike) -> Path:
        """The log as an event log folder (one segment per kind, each written atomically)."""
        write_segment(directory, "impressions", self.impressions)
        if self.events.num_rows:
            write_segment(directory, "events", self.events)
        return Path(directory)


def read_log_tables(directory: PathLike) -> LogTables:
    """An event log folder's impressions and events (`clicks.sessions.read_log`)."""
    return LogTables(read_log(directory, "impressions"), read_log(directory, "events"), str(directory))


def load_sessions(source: PathLike, fmt: Format = "log", *, top_n: int = 10, action: str = "click") -> Sessions:
    """The sessions of a click log in any of `FORMATS`: an event log folder, a Yandex file, a UBI
    JSON folder."""
    if fmt == "log":
        return read_sessions(source, top_n=top_n, action=action)
    if fmt == "yandex":
        return read_yandex(source).sessions(top_n=top_n, action=action)
    if fmt == "ubi":
        return read_ubi(source, action=action).sessions(top_n=top_n, action=action)
    raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")


# -- Yandex Relevance Prediction Challenge ----------------------------------------------------------


def _ms(value: datetime) -> int:
    return int((value - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1000)


def read_yandex(path: PathLike) -> LogTables:
    """A Yandex (Relevance Prediction Challenge) search log as the event log's tables (see the
    module docstring for how sessions, queries and clicks map)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such Yandex log file")
    imp: dict[str, list[Any]] = {n: [] for n in ("query_id", "timestamp", "user_query", "client_id", "hit_ids")}
    ev: dict[str, list[Any]] = {n: [] for n in ("query_id", "timestamp", "client_id", "object_id", "position")}
    finished: set[str] = set()
    session: str | None = None
    shown: list[tuple[str, list[str]]] = []  # the current session's queries: search id, URLs
    skipped = 0
    with open(path, encoding="utf-8", newline="") as f:
        for line_no, line in enumerate(f, 1):
            text = line.rstrip("\r\n")
            if not text.strip():
                continue
            fields = text.split("\t")

            def bad(message: str, _line: int = line_no) -> DataFormatError:
                return DataFormatError(path, _line, message)

            if len(fields) < 4:
                raise bad(f"{len(fields)} tab-separated fields; a query line has 5 or more, a click line 4")
            sid, passed, kind = fields[0], fields[1], fields[2]
            if not sid:
                raise bad("field 1 (SessionID) is empty")
            try:
                ms = int(passed)
            except ValueError:
                raise bad(f"field 2 (TimePassed): an integer, got {passed!r}") from None
            if kind not in ("Q", "C"):
                raise bad(f"field 3 (TypeOfAction): Q or C, got {kind!r}")
            if sid != session:
                if sid in finished:
                    raise bad(f"field 1 (SessionID): session {sid!r} resumes after another began")
                if kind == "C":
                    raise bad(f"field 1 (SessionID): a click of session {sid!r} before any of its queries")
                if session is not None:
                    finished.add(session)
                session, shown = sid, []
            if kind == "Q":
                if len(fields) < 5:
                    raise bad(f"a query line has 5 or more fields got {len(fields)}")
                if not fields[3]:
                    raise bad("field 4 (QueryID) is empty")
                urls = fields[5:]
                for i, url in enumerate(urls, 6):
                    if not url:
                        raise bad(f"field {i} (URL {i - 5}) is empty")
                search_id = f"{sid}/{len(shown)}"
                shown.append((search_id, urls))
                imp["query_id"].append(search_id)
                imp["timestamp"].append(ms)
                imp["user_query"].append(fields[3])
                imp["client_id"].append(sid)
                imp["hit_ids"].append(urls)
            else:
                if len(fields) != 4:
                    raise bad(f"a click line has 4 fields (SessionID TimePassed C URL), got {len(fields)}")
                url = fields[3]
                if not url:
                    raise bad("field 4 (URL) is empty")
                for search_id, urls in reversed(shown):
                    if url in urls:
                        ev["query_id"].append(search_id)
                        ev["timestamp"].append(ms)
                        ev["client_id"].append(sid)
                        ev["object_id"].append(url)
                        ev["position"].append(urls.index(url) + 1)
                        break
                else:
                    skipped += 1
    n, m = len(imp["query_id"]), len(ev["query_id"])
    impressions = pa.table(
        {
            "query_id": imp["query_id"],
            "timestamp": pa.array(imp["timestamp"], pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
            "user_query": imp["user_query"],
            "client_id": imp["client_id"],
            "bundle": pa.array([""] * n, pa.string()),
            "bundle_version": pa.array([""] * n, pa.string()),
            "arm": pa.nulls(n, pa.string()),
            "k": pa.array([len(h) for h in imp["hit_ids"]], pa.int32()),
            "offset": pa.array([0] * n, pa.int32()),
            "hit_ids": pa.array(imp["hit_ids"], pa.list_(pa.string())),
            "hit_stages": pa.nulls(n, pa.list_(pa.string())),
            "hit_teams": pa.nulls(n, pa.list_(pa.string())),
        }
    )
    events = pa.table(
        {
            "query_id": ev["query_id"],
            "timestamp": pa.array(ev["timestamp"], pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
            "client_id": ev["client_id"],
            "action_name": pa.array(["click"] * m, pa.string()),
            "object_id": ev["object_id"],
            "position": pa.array(ev["position"], pa.int32()),
        }
    )
    return LogTables(
        impressions.cast(IMPRESSION_LOG_SCHEMA), events.cast(EVENT_SCHEMA), str(path), skipped_clicks=skipped
    )


def _tsv_field(value: str, what: str) -> str:
    if not value or "\t" in value or "\n" in value or "\r" in value:
        raise ValueError(f"{what} {value!r} cannot be written as a Yandex log field (empty, or a tab or newline in it)")
    return value


def write_yandex(log: LogTables, path: PathLike, *, action: str = "click") -> Path:
    """A log as a Yandex search log (written whole or not at all): each impression a session of its
    own (SessionID its row number), QueryID its ``user_query``, RegionID 0, its hits the URLs, then
    its clicks (``action`` events on the result shown at their position; repeated clicks on one
    position once) in time order, TimePassed the milliseconds since the impression. An impression
    shown from a later page (offset > 0) has no place in the format and is refused."""
    imp, ev = log.impressions, log.events
    offsets = pc.fill_null(imp.column("offset"), 0).to_pylist() if "offset" in imp.column_names else [0] * imp.num_rows
    if any(offsets):
        raise ValueError("an impression with offset > 0 (a later page) cannot be written in the Yandex format")
    ev = ev.filter(pc.equal(ev.column("action_name"), action)) if ev.num_rows else ev
    ev = ev.sort_by([("timestamp", "ascending")])
    clicks: dict[str, list[tuple[int, int, str]]] = {}
    for qid, ts, obj, pos in zip(
        ev.column("query_id").to_pylist(),
        ev.column("timestamp").cast(pa.int64()).to_pylist(),
        ev.column("object_id").to_pylist(),
        ev.column("position").to_pylist(),
        strict=True,
    ):
        clicks.setdefault(qid, []).append((ts, pos, obj))
    with atomic_write(path) as f:
        for row, (qid, ts, query, hits) in enumerate(
            zip(
                imp.column("query_id").to_pylist(),
                imp.column("timestamp").cast(pa.int64()).to_pylist(),
                imp.column("user_query").to_pylist(),
                imp.column("hit_ids").to_pylist(),
                strict=True,
            )
        ):
            urls = [_tsv_field(h, "document id") for h in hits]
            f.write("\t".join([str(row), "0", "Q", _tsv_field(query, "query"), "0", *urls]) + "\n")
            done: set[int] = set()
            for click_ts, pos, obj in clicks.get(qid, []):
                if 1 <= pos <= len(urls) and urls[pos - 1] == obj and pos not in done:
                    done.add(pos)
                    f.write(f"{row}\t{max(click_ts - ts, 0)}\tC\t{obj}\n")
    return Path(path)


# -- OpenSearch User Behavior Insights JSON ---------------------------------------------------------


def _documents(path: Path) -> Iterator[tuple[int, Any]]:
    """(line or item number, document) of a JSON Lines file or a JSON array file; an item with a
    ``_source`` is its source."""
    with open(path, "rb") as f:
        head = f.read(4096).lstrip()
        f.seek(0)
        if head.startswith(b"["):
            try:
                items = orjson.loads(f.read())
            except orjson.JSONDecodeError as e:
                raise DataFormatError(path, None, f"not valid JSON ({e})") from None
            for i, item in enumerate(items, 1):
                yield i, item.get("_source", item) if isinstance(item, dict) else item
            return
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise DataFormatError(path, i, f"not valid JSON ({e})") from None
            yield i, item.get("_source", item) if isinstance(item, dict) else item


def _timestamp(doc: dict[str, Any], path: Path, line: int) -> int:
    """Unix milliseconds of a document's ``timestamp``: an ISO 8601 string (UTC when it names no
    zone) or a number of milliseconds."""
    value = _field(doc, "timestamp", path, line, (str, int, float))
    if isinstance(value, int | float):
        return int(value)
    if value.isdigit():
        return int(value)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise DataFormatError(path, line, f"field timestamp: ISO 8601 or Unix milliseconds, got {value!r}") from None
    return _ms(parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC))


def _field(doc: Any, dotted: str, path: Path, line: int, kinds: tuple[type, ...], required: bool = True) -> Any:
    value = doc
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        if required:
            raise DataFormatError(path, line, f"field {dotted}: missing")
        return None
    if not isinstance(value, kinds) or isinstance(value, bool):
        raise DataFormatError(path, line, f"field {dotted}: {' or '.join(k.__name__ for k in kinds)}, got {value!r}")
    return value


def _ubi_file(folder: Path, name: str) -> Path:
    for candidate in (folder / name, folder / name.removesuffix("l")):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{folder}: no {name} (or {name.removesuffix('l')}) in this UBI folder")


def read_ubi(folder: PathLike, *, action: str = "click") -> LogTables:
    """UBI query and event documents (``folder/ubi_queries.jsonl``, ``folder/ubi_events.jsonl``)
    as the event log's tables; only ``action`` events are read (see the module docstring)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such UBI folder (ubi_queries.jsonl, ubi_events.jsonl)")
    qpath = _ubi_file(folder, UBI_QUERIES)
    rows: dict[str, list[Any]] = {f.name: [] for f in IMPRESSION_LOG_SCHEMA}
    for line, doc in _documents(qpath):
        if not isinstance(doc, dict):
            raise DataFormatError(qpath, line, f"a query document is a JSON object, got {doc!r}")
        hits = _field(doc, "query_response_hit_ids", qpath, line, (list,))
        if not all(isinstance(h, str | int) and not isinstance(h, bool) for h in hits):
            raise DataFormatError(qpath, line, "field query_response_hit_ids: a list of ids (strings)")
        ts = _timestamp(doc, qpath, line)
        attrs = _field(doc, "query_attributes", qpath, line, (dict,), required=False) or {}
        rows["query_id"].append(_field(doc, "query_id", qpath, line, (str,)))
        rows["timestamp"].append(ts)
        rows["user_query"].append(_field(doc, "user_query", qpath, line, (str,)))
        rows["client_id"].append(_field(doc, "client_id", qpath, line, (str,), required=False))
        rows["hit_ids"].append([str(h) for h in hits])
        for name in _QUERY_ATTRIBUTES:
            rows[name].append(attrs.get(name))
    rows["bundle"] = [b if b is not None else "" for b in rows["bundle"]]
    rows["bundle_version"] = [b if b is not None else "" for b in rows["bundle_version"]]
    rows["k"] = [k if k is not None else len(h) for k, h in zip(rows["k"], rows["hit_ids"], strict=True)]
    rows["offset"] = [o if o is not None else 0 for o in rows["offset"]]
    try:
        ts_type = pa.timestamp("ms", tz="UTC")
        impressions = pa.table(
            {
                f.name: pa.array(rows[f.name], pa.int64()).cast(ts_type)
                if f.name == "timestamp"
                else pa.array(rows[f.name], f.type)
                for f in IMPRESSION_LOG_SCHEMA
            }
        ).cast(IMPRESSION_LOG_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise DataFormatError(qpath, None, f"query_attributes of the wrong type ({e})") from None
    epath = _ubi_file(folder, UBI_EVENTS)
    ev: dict[str, list[Any]] = {f.name: [] for f in EVENT_SCHEMA}
    for line, doc in _documents(epath):
        if not isinstance(doc, dict):
            raise DataFormatError(epath, line, f"an event document is a JSON object, got {doc!r}")
        if _field(doc, "action_name", epath, line, (str,)) != action:
            continue
        ts = _timestamp(doc, epath, line)
        position = _field(doc, "event_attributes.position.ordinal", epath, line, (int,))
        if position < 1:
            raise DataFormatError(epath, line, f"field event_attributes.position.ordinal: 1-based, got {position}")
        ev["query_id"].append(_field(doc, "query_id", epath, line, (str,)))
        ev["timestamp"].append(ts)
        ev["client_id"].append(_field(doc, "client_id", epath, line, (str,), required=False))
        ev["action_name"].append(action)
        ev["object_id"].append(str(_field(doc, "event_attributes.object.object_id", epath, line, (str, int))))
        ev["position"].append(position)
    events = pa.table(
        {
            f.name: pa.array(ev[f.name], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
            if f.name == "timestamp"
            else pa.array(ev[f.name], f.type)
            for f in EVENT_SCHEMA
        }
    ).cast(EVENT_SCHEMA)
    return LogTables(impressions, events, str(folder))


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_ubi(log: LogTables, folder: PathLike) -> Path:
    """A log as UBI JSON Lines: ``folder/ubi_queries.jsonl`` (a query document per impression) and
    ``folder/ubi_events.jsonl`` (an event document per event), each written whole or not at all.
    The log's columns UBI has no field for go into ``query_attributes`` (nulls left out)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    imp = log.impressions
    cols = {name: imp.column(name).to_pylist() for name in imp.column_names if name != "timestamp"}
    stamps = imp.column("timestamp").cast(pa.int64()).to_pylist()
    with atomic_write(folder / UBI_QUERIES, binary=True) as f:
        for i, ts in enumerate(stamps):
            doc: dict[str, Any] = {"query_id": cols["query_id"][i], "user_query": cols["user_query"][i]}
            if cols["client_id"][i] is not None:
                doc["client_id"] = cols["client_id"][i]
            doc["timestamp"] = _iso(ts)
            doc["query_response_hit_ids"] = cols["hit_ids"][i]
            attrs = {n: cols[n][i] for n in _QUERY_ATTRIBUTES if n in cols and cols[n][i] is not None}
            if attrs:
                doc["query_attributes"] = attrs
            f.write(orjson.dumps(doc) + b"\n")
    ev = log.events
    ecols = {name: ev.column(name).to_pylist() for name in ev.column_names if name != "timestamp"}
    with atomic_write(folder / UBI_EVENTS, binary=True) as f:
        for i, ts in enumerate(ev.column("timestamp").cast(pa.int64()).to_pylist()):
            doc = {"action_name": ecols["action_name"][i], "query_id": ecols["query_id"][i]}
            if ecols["client_id"][i] is not None:
                doc["client_id"] = ecols["client_id"][i]
            doc["timestamp"] = _iso(ts)
            doc["event_attributes"] = {
                "object": {"object_id": ecols["object_id"][i]},
                "position": {"ordinal": ecols["position"][i]},
            }
            f.write(orjson.dumps(doc) + b"\n")
    return folder


__all__ = [
    "FORMATS",
    "UBI_EVENTS",
    "UBI_QUERIES",
    "Format",
    "LogTables",
    "load_sessions",
    "read_log_tables",
    "read_ubi",
    "read_yandex",
    "write_ubi",
    "write_yandex",
]
