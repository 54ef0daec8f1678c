"""A click log read back: every row of one kind as a table (`read_log`), each impression with
its clicks counted (`read_clicked`), and the sessions view click models and learners take
(`read_sessions` into `Sessions`).

The log is the one `clicks.log` writes (UBI field names, ``impressions/`` and ``events/``
Parquet segments). Reading joins impressions and clicks with DuckDB over the Parquet files (no
Python loop over rows); each segment's schema is checked first (`clicks.log.validate_segment`),
so a malformed segment is a `DataFormatError` naming the file and the column.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..data.errors import DataFormatError
from .log import REQUIRED, SCHEMAS, Kind, PathLike, segments, validate_segment


def _checked(directory: PathLike, kind: Kind) -> list[str]:
    paths = segments(directory, kind)
    for p in paths:
        validate_segment(p, kind)
    return [str(p) for p in paths]


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_files(paths: list[str]) -> str:
    return "[" + ", ".join(_sql_string(p) for p in paths) + "]"


def _connect() -> Any:
    import duckdb

    return duckdb.connect(":memory:")


def _arrow(relation: Any) -> pa.Table:
    """A DuckDB relation's rows as one Arrow table (``to_arrow_table`` in DuckDB >= 1.4, ``arrow``
    before)."""
    if hasattr(relation, "to_arrow_table"):
        return relation.to_arrow_table()
    table = relation.arrow()
    return table.read_all() if isinstance(table, pa.RecordBatchReader) else table


def _columns(paths: list[str], kind: Kind) -> str:
    """The SQL select list of ``kind``'s columns (`SCHEMAS`) over these segments: each column by
    name, an added column none of them has as a typed null (DuckDB's ``union_by_name`` fills it
    in for the segments without it when some have it)."""
    present: set[str] = set()
    for p in paths:
        present.update(pq.read_schema(p).names)
    sql = {pa.string(): "VARCHAR", pa.list_(pa.string()): "VARCHAR[]"}
    return ", ".join(
        f'"{f.name}"'
        if f.name in present or f.name in REQUIRED[kind].names
        else f'CAST(NULL AS {sql[f.type]}) AS "{f.name}"'
        for f in SCHEMAS[kind]
    )


def read_log(directory: PathLike, kind: Kind) -> pa.Table:
    """Every row of one kind, validated, as one table in the kind's schema (`SCHEMAS`; empty if
    none). Segments written before a column was added read with nulls in it."""
    paths = _checked(directory, kind)
    if not paths:
        return SCHEMAS[kind].empty_table()
    con = _connect()
    try:
        table = _arrow(
            con.sql(f"SELECT {_columns(paths, kind)} FROM read_parquet({_sql_files(paths)}, union_by_name = true)")
        )
    finally:
        con.close()
    return table.cast(SCHEMAS[kind])


@dataclass(frozen=True)
class Sessions:
    """Impressions and their clicks as arrays, for click models and learners.

    Row i is one impression; column j is position j + 1. ``docs[i, j]`` is the code (into
    ``doc_ids``) of the document shown at position j + 1, or -1 where nothing was shown there
    (past the end of the list, or before ``offset`` on a later page); ``clicks[i, j]`` whether it
    was clicked. ``query[i]`` is the code (into ``queries``) of the impression's query text;
    ``search_ids`` the impressions' ``query_id`` as an Arrow string array (None when not kept, as
    in bulk simulation).
    """

    docs: np.ndarray  # int32 (n, positions)
    clicks: np.ndarray  # bool (n, positions)
    query: np.ndarray  # int32 (n,)
    queries: list[str]
    doc_ids: list[str]
    search_ids: pa.Array | None = None  # string (n,)

    def __post_init__(self) -> None:
        n = len(self.query)
        if self.docs.shape != self.clicks.shape or self.docs.ndim != 2 or self.docs.shape[0] != n:
            raise ValueError(
                f"docs {self.docs.shape}, clicks {self.clicks.shape} and query ({n},) do not describe the same sessions"
            )
        if np.any(self.clicks & (self.docs < 0)):
            raise ValueError("a click where no document was shown")

    def __len__(self) -> int:
        return len(self.query)

    @property
    def positions(self) -> int:
        return int(self.docs.shape[1])

    def take(self, index: np.ndarray | slice) -> Sessions:
        """A subset of the impressions (same vocabularies)."""
        return Sessions(
            docs=self.docs[index],
            clicks=self.clicks[index],
            query=self.query[index],
            queries=self.queries,
            doc_ids=self.doc_ids,
            search_ids=None if self.search_ids is None else self.search_ids.take(np.arange(len(self))[index]),
        )


def _arrow_batches(relation: Any, rows: int) -> Any:
    """A DuckDB relation's rows as a stream of Arrow record batches of about ``rows`` rows."""
    if hasattr(relation, "to_arrow_reader"):
        return relation.to_arrow_reader(rows)
    return relation.fetch_arrow_reader(rows)


_CLICK_MATCH = (
    "e.position > i.off AND e.position <= i.off + len(i.hit_ids) AND i.hit_ids[e.position - i.off] = e.object_id"
)
"""When event ``e`` is a click on impression ``i`` (``off``: its offset): the position was on its
page and the object is the document shown there."""


def read_clicked(directory: PathLike, *, action: str = "click") -> pa.Table:
    """Each impression with its clicks, counted as `read_sessions` counts them (a click names a
    logged impression, a position on its page and the document shown there; repeated clicks on
    one position count once): ``query_id``, ``timestamp``, ``user_query``, ``client_id``,
    ``bundle``, ``bundle_version``, ``arm``, ``clicks`` (clicked positions), ``clicks_a`` and
    ``clicks_b`` (those whose ``hit_teams`` entry is "A" / "B": the credit of team-draft
    interleaving, Radlinski et al. 2008), in order of time then id. Joined in DuckDB over the
    Parquet segments; a log written before ``hit_teams`` reads with no team credit. Two
    impressions with one ``query_id`` are an error, as in `read_sessions`."""
    imp_paths = _checked(directory, "impressions")
    if not imp_paths:
        raise DataFormatError(Path(directory) / "impressions", None, "no impression segments (part-*.parquet)")
    ev_paths = _checked(directory, "events")
    columns = _columns(imp_paths, "impressions")
    imp = f"(SELECT {columns} FROM read_parquet({_sql_files(imp_paths)}, union_by_name = true))"
    con = _connect()
    try:
        dup = con.execute(f"SELECT query_id FROM {imp} GROUP BY query_id HAVING count(*) > 1 LIMIT 1").fetchall()
        if dup:
            raise DataFormatError(
                Path(directory) / "impressions", None, f"query_id {dup[0][0]!r} names more than one impression"
            )
        if ev_paths:
            clicks = (
                "(SELECT DISTINCT i.query_id, e.position, i.hit_teams[e.position - i.off] AS team FROM "
                f'(SELECT query_id, coalesce(CAST("offset" AS INTEGER), 0) AS off, hit_ids, hit_teams FROM {imp}) i '
                f"JOIN read_parquet({_sql_files(ev_paths)}, union_by_name = true) e ON e.query_id = i.query_id "
                f"WHERE e.action_name = {_sql_string(action)} AND {_CLICK_MATCH})"
            )
        else:
            clicks = "(SELECT NULL::VARCHAR AS query_id, NULL::INTEGER AS position, NULL::VARCHAR AS team WHERE false)"
        sql = (
            "SELECT i.query_id, i.timestamp, i.user_query, i.client_id, i.bundle, i.bundle_version, i.arm, "
            "CAST(count(c.position) AS INTEGER) AS clicks, "
            "CAST(count(c.position) FILTER (WHERE c.team = 'A') AS INTEGER) AS clicks_a, "
            "CAST(count(c.position) FILTER (WHERE c.team = 'B') AS INTEGER) AS clicks_b "
            f"FROM {imp} i LEFT JOIN {clicks} c ON c.query_id = i.query_id "
            "GROUP BY ALL ORDER BY i.timestamp, i.query_id"
        )
        return _arrow(con.sql(sql))
    finally:
        con.close()


def read_sessions(
    directory: PathLike, *, top_n: int = 10, action: str = "click", batch_rows: int = 1_000_000
) -> Sessions:
    """The sessions view of a log: each impression's documents at positions 1..``top_n`` and which
    of them were clicked (events with ``action_name == action``); impressions in segment order
    (segment names start with their writing time) and, within a segment, in the order written.

    The join runs in DuckDB over the Parquet segments. A click counts when its ``query_id`` names
    a logged impression and its ``object_id`` is the document that impression showed at the
    click's ``position``; other clicks (unknown search, position past ``top_n``, document not the
    one shown there) are not counted. Repeated clicks on one position count once. Two impressions
    with one ``query_id`` are an error (a search id names one answer). ``doc_ids`` and
    ``queries`` are sorted. Nothing is materialised in DuckDB: the impressions stream out of the
    Parquet scan ``batch_rows`` at a time into the arrays returned, so memory beyond those is a
    batch plus DuckDB's hash tables (the events' side of the join, the distinct ids)."""
    if top_n < 1:
        raise ValueError(f"top_n must be >= 1, got {top_n}")
    imp_paths = _checked(directory, "impressions")
    if not imp_paths:
        raise DataFormatError(Path(directory) / "impressions", None, "no impression segments (part-*.parquet)")
    ev_paths = _checked(directory, "events")
    # row numbers: segments in name order (names start with the writing time), rows in file order
    counts = np.array([pq.ParquetFile(p).metadata.num_rows for p in imp_paths], dtype=np.int64)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    n = int(counts.sum())
    imp = f"read_parquet({_sql_files(imp_paths)}, union_by_name = true, filename = true, file_row_number = true)"
    con = _connect()
    try:
        con.register("segment", pa.table({"filename": imp_paths, "first": first}))
        rows = f"(SELECT s.first + i.file_row_number AS row, i.* FROM {imp} i JOIN segment s USING (filename))"
        dup = con.execute(f"SELECT query_id FROM {imp} GROUP BY query_id HAVING count(*) > 1 LIMIT 1").fetchall()
        if dup:
            raise DataFormatError(
                Path(directory) / "impressions", None, f"query_id {dup[0][0]!r} names more than one impression"
            )
        doc_vocab = _arrow(
            con.sql(
                f"SELECT DISTINCT doc FROM (SELECT unnest(hit_ids) AS doc FROM {imp}) "
                "WHERE doc IS NOT NULL ORDER BY doc"
            )
        ).column(0)
        query_vocab = _arrow(con.sql(f"SELECT DISTINCT user_query FROM {imp} ORDER BY user_query")).column(0)
        if ev_paths:
            clicks = con.execute(
                "SELECT DISTINCT i.row, CAST(e.position AS INTEGER) - 1 AS col FROM "
                f'(SELECT row, query_id, coalesce(CAST("offset" AS INTEGER), 0) AS off, hit_ids FROM {rows}) i '
                f"JOIN read_parquet({_sql_files(ev_paths)}, union_by_name = true) e ON e.query_id = i.query_id "
                f"WHERE e.action_name = ? AND e.position >= 1 AND e.position <= ? AND {_CLICK_MATCH}",
                [action, top_n],
            ).fetchnumpy()
        else:
            clicks = {"row": np.zeros(0, np.int64), "col": np.zeros(0, np.int64)}
        docs = np.full((n, top_n), -1, np.int32)
        query = np.zeros(n, np.int32)
        id_rows: list[np.ndarray] = []
        ids: list[pa.Array] = []
        select = f'SELECT row, query_id, user_query, coalesce(CAST("offset" AS INTEGER), 0) AS off, hit_ids FROM {rows}'
        for batch in _arrow_batches(con.sql(select), batch_rows):
            row = batch.column("row").to_numpy(zero_copy_only=False).astype(np.int64)
            _fill_docs(docs, row, batch, doc_vocab)
            query[row] = pc.index_in(batch.column("user_query"), value_set=query_vocab).to_numpy(zero_copy_only=False)
            id_rows.append(row)
            ids.extend(_chunks(batch.column("query_id")))
    finally:
        con.close()
    click = np.zeros((n, top_n), bool)
    click[np.asarray(clicks["row"], np.int64), np.asarray(clicks["col"], np.int64)] = True
    order = np.argsort(np.concatenate(id_rows), kind="stable") if id_rows else np.zeros(0, np.int64)
    return Sessions(
        docs=docs,
        clicks=click & (docs >= 0),
        query=query,
        queries=query_vocab.to_pylist(),
        doc_ids=doc_vocab.to_pylist(),
        search_ids=pa.concat_arrays(ids).take(pa.array(order)) if ids else pa.array([], pa.string()),
    )


def _chunks(column: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return list(column.chunks) if isinstance(column, pa.ChunkedArray) else [column]


def _fill_docs(docs: np.ndarray, rows: np.ndarray, batch: pa.RecordBatch, vocab: pa.Array) -> None:
    """Write one batch of impressions' document codes into ``docs[rows]``: hit i of an impression
    with offset o goes to column o + i, if that is inside ``docs``."""
    hits = batch.column("hit_ids")
    if isinstance(hits, pa.ChunkedArray):
        hits = hits.combine_chunks()
    flat = pc.list_flatten(hits)
    if not len(flat):
        return
    codes = pc.fill_null(pc.index_in(flat, value_set=vocab), -1).to_numpy(zero_copy_only=False).astype(np.int32)
    parent = pc.list_parent_indices(hits).to_numpy(zero_copy_only=False)
    starts = np.asarray(hits.offsets, dtype=np.int64)[:-1] - hits.offsets[0].as_py()
    offsets = batch.column("off").to_numpy(zero_copy_only=False).astype(np.int64)
    col = offsets[parent] + (np.arange(len(flat)) - starts[parent])
    keep = col < docs.shape[1]
    docs[rows[parent[keep]], col[keep]] = codes[keep]


def sessions_from_tables(
    impressions: pa.Table, events: pa.Table, *, top_n: int = 10, action: str = "click", where: str = "log"
) -> Sessions:
    """The sessions view of a log held in memory as two tables (the impression and event columns
    of `clicks.log`, e.g. a log read from another format by `clicks.formats`), by the rules of
    `read_sessions`: impressions in table order; documents at positions 1..``top_n`` (hit i of an
    impression with offset o at position o + i + 1); a click counts when its ``query_id`` names an
    impression, ``action_name == action`` and its ``object_id`` is the document shown at its
    ``position`` (repeated clicks count once); ``queries`` and ``doc_ids`` sorted. Two impressions
    with one ``query_id`` are an error naming ``where``."""
    if top_n < 1:
        raise ValueError(f"top_n must be >= 1, got {top_n}")
    n = impressions.num_rows
    ids = impressions.column("query_id").combine_chunks()
    if pc.count_distinct(ids).as_py() != n:
        counts = pc.value_counts(ids)
        dup = counts.field("values").filter(pc.greater(counts.field("counts"), 1))[0].as_py()
        raise DataFormatError(where, None, f"query_id {dup!r} names more than one impression")
    hits = impressions.column("hit_ids").combine_chunks()
    flat = pc.list_flatten(hits)
    doc_vocab = pc.unique(flat.filter(pc.is_valid(flat))).sort() if len(flat) else pa.array([], pa.string())
    query_text = impressions.column("user_query").combine_chunks()
    query_vocab = pc.unique(query_text).sort() if n else pa.array([], pa.string())
    if "offset" in impressions.column_names:
        offset = pc.fill_null(impressions.column("offset"), 0).to_numpy().astype(np.int64)
    else:
        offset = np.zeros(n, np.int64)
    docs = np.full((n, top_n), -1, np.int32)
    _fill_docs(docs, np.arange(n, dtype=np.int64), pa.record_batch({"hit_ids": hits, "off": offset}), doc_vocab)
    click = np.zeros((n, top_n), bool)
    ev = events.filter(pc.equal(events.column("action_name"), action)) if events.num_rows else events
    if ev.num_rows and n:
        row = pc.index_in(ev.column("query_id"), value_set=ids)
        position = pc.fill_null(ev.column("position"), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        row_np = np.asarray(pc.fill_null(row, -1).to_numpy(zero_copy_only=False), np.int64)
        col = position - 1
        ok = (row_np >= 0) & (col >= 0) & (col < top_n)
        obj = pc.fill_null(pc.index_in(ev.column("object_id"), value_set=doc_vocab), -2)
        obj_np = np.asarray(obj.to_numpy(zero_copy_only=False), np.int64)
        r, c, o = row_np[ok], col[ok], obj_np[ok]
        shown = docs[r, c] == o  # the document at that position is the one clicked (-1: nothing shown)
        click[r[shown], c[shown]] = True
    return Sessions(
        docs=docs,
        clicks=click & (docs >= 0),
        query=np.asarray(pc.index_in(query_text, value_set=query_vocab).to_numpy(zero_copy_only=False), np.int32),
        queries=query_vocab.to_pylist(),
        doc_ids=doc_vocab.to_pylist(),
        search_ids=ids.cast(pa.string()),
    )
