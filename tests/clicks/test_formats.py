"""Click logs in other formats (semsearch.clicks.formats): the Yandex search log PyClick reads and
OpenSearch UBI JSON, read into the same sessions the event log gives, written back out, and bad
input refused naming the file, the line and the field."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pytest

from semsearch.clicks import EventLogWriter, PositionBasedUser, Rankings, simulate
from semsearch.clicks.formats import (
    LogTables,
    load_sessions,
    read_log_tables,
    read_ubi,
    read_yandex,
    write_ubi,
    write_yandex,
)
from semsearch.clicks.sessions import Sessions, read_sessions
from semsearch.data.errors import DataFormatError


def _same(a: Sessions, b: Sessions, ids: bool = True) -> None:
    assert a.queries == b.queries and a.doc_ids == b.doc_ids
    assert np.array_equal(a.docs, b.docs) and np.array_equal(a.clicks, b.clicks)
    assert np.array_equal(a.query, b.query)
    if ids:
        assert a.search_ids is not None and b.search_ids is not None and a.search_ids.equals(b.search_ids)


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """600 simulated position-based impressions of 30 queries' top 5 (half shuffled), 5 clients."""
    rng = np.random.default_rng(0)
    docs = np.stack([rng.choice(200, 5, replace=False) for _ in range(30)]).astype(np.int32)
    r = Rankings(
        [f"q{i}" for i in range(30)],
        [f"query {i}" for i in range(30)],
        [f"d{i}" for i in range(200)],
        docs,
        rng.integers(0, 5, (30, 5)).astype(np.int8),
        4,
    )
    out = tmp_path_factory.mktemp("formats") / "log"
    with EventLogWriter(out) as w:
        for _ in simulate(r, PositionBasedUser(4), 600, seed=1, writer=w, shuffle_rate=0.5, n_clients=5, start_ms=0):
            pass
    return out


def test_every_format_reads_back_the_sessions_of_the_event_log(log: Path, tmp_path: Path) -> None:
    """The event log read as tables, written as UBI JSON and read back, and written as a Yandex
    log and read back, give the sessions `read_sessions` gives (the Yandex log renames the search
    ids: SessionID/0); UBI JSON carries every column of the log."""
    want = read_sessions(log, top_n=5)
    assert want.clicks.sum() > 100
    tables = read_log_tables(log)
    _same(tables.sessions(top_n=5), want)
    back = read_ubi(write_ubi(tables, tmp_path / "ubi"))
    assert back.impressions.equals(tables.impressions) and back.events.equals(tables.events)
    _same(load_sessions(tmp_path / "ubi", "ubi", top_n=5), want)
    yandex = read_yandex(write_yandex(tables, tmp_path / "log.tsv"))
    assert yandex.skipped_clicks == 0
    got = yandex.sessions(top_n=5)
    _same(got, want, ids=False)
    assert got.search_ids is not None and got.search_ids[0].as_py() == "0/0"
    # and a log in another format written as an event log reads back the same
    yandex.write_log(tmp_path / "converted")
    _same(read_sessions(tmp_path / "converted", top_n=5), got)


YANDEX = """\
10\t0\tQ\t7\t213\tu1\tu2\tu3
10\t5\tC\tu2
10\t9\tQ\t8\t213\tu4\tu1
10\t12\tC\tu3
10\t13\tC\tu1
10\t14\tC\tu9
11\t0\tQ\t7\t2\tu2\tu1\tu3
11\t3\tC\tu2
11\t4\tC\tu2
"""


def test_a_yandex_session_of_several_queries_gets_a_search_id_per_query(tmp_path: Path) -> None:
    """Session 10 holds two queries: each is an impression (10/0, 10/1); the click on u3, shown
    only by the first query, goes to it, the click on u1 to the later query that also showed it,
    the click on u9 (shown by none) is not counted; a repeated click counts once."""
    path = tmp_path / "log.tsv"
    path.write_text(YANDEX)
    t = read_yandex(path)
    assert t.impressions.column("query_id").to_pylist() == ["10/0", "10/1", "11/0"]
    assert t.impressions.column("client_id").to_pylist() == ["10", "10", "11"]
    assert t.impressions.column("hit_ids").to_pylist() == [["u1", "u2", "u3"], ["u4", "u1"], ["u2", "u1", "u3"]]
    assert t.skipped_clicks == 1
    assert list(zip(t.events["query_id"].to_pylist(), t.events["position"].to_pylist(), strict=True)) == [
        ("10/0", 2),
        ("10/0", 3),
        ("10/1", 2),
        ("11/0", 1),
        ("11/0", 1),
    ]
    s = t.sessions(top_n=3)
    assert s.queries == ["7", "8"] and s.doc_ids == ["u1", "u2", "u3", "u4"]
    assert s.clicks.tolist() == [[False, True, True], [False, True, False], [True, False, False]]
    assert s.docs.tolist() == [[0, 1, 2], [3, 0, -1], [1, 0, 2]]


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("1\t0\tQ\t7\t0\tu1\n1\t0\tX\tu1\n", 2, "field 3 (TypeOfAction): Q or C"),
        ("1\tsoon\tQ\t7\t0\tu1\n", 1, "field 2 (TimePassed): an integer"),
        ("1\t0\tC\tu1\n", 1, "a click of session '1' before any of its queries"),
        ("1\t0\tQ\t7\t0\tu1\n1\t0\tC\tu1\textra\n", 2, "a click line has 4 fields"),
        ("1\t0\tQ\t7\t0\tu1\n2\t0\tQ\t7\t0\tu1\n1\t0\tQ\t7\t0\tu1\n", 3, "session '1' resumes"),
        ("1\t0\tQ\t\t0\tu1\n", 1, "field 4 (QueryID) is empty"),
        ("1\t0\tQ\t7\t0\tu1\t\tu3\n", 1, "field 7 (URL 2) is empty"),
        ("1\t0\n", 1, "2 tab-separated fields"),
    ],
)
def test_a_bad_yandex_line_names_the_file_the_line_and_the_field(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text(text)
    with pytest.raises(DataFormatError, match=re.escape(message)) as e:
        read_yandex(path)
    assert e.value.path == str(path) and e.value.line == line


def _ubi(tmp_path: Path, queries: list[object], events: list[object], array: bool = False) -> Path:
    folder = tmp_path / "ubi"
    folder.mkdir(exist_ok=True)
    if array:
        (folder / "ubi_queries.json").write_bytes(orjson.dumps(queries))
        (folder / "ubi_events.json").write_bytes(orjson.dumps(events))
    else:
        (folder / "ubi_queries.jsonl").write_bytes(b"".join(orjson.dumps(q) + b"\n" for q in queries))
        (folder / "ubi_events.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    return folder


QUERY = {
    "query_id": "a",
    "user_query": "drill",
    "client_id": "c1",
    "timestamp": "2024-05-01T12:00:00",
    "query_response_hit_ids": ["x", "y", "z"],
}


def _click(position: int, object_id: object = "y", action: str = "click") -> dict[str, object]:
    return {
        "action_name": action,
        "query_id": "a",
        "client_id": "c1",
        "timestamp": 1714564801000,
        "event_attributes": {"object": {"object_id": object_id}, "position": {"ordinal": position}},
    }


@pytest.mark.parametrize("array", [False, True])
def test_ubi_documents_as_opensearch_exports_them(tmp_path: Path, array: bool) -> None:
    """JSON Lines or a JSON array, hits wrapped in ``_source`` or not, an ISO timestamp without a
    zone read as UTC, a numeric object id, events of other actions skipped."""
    folder = _ubi(
        tmp_path,
        [{"_source": QUERY}],
        [_click(2), {"action_name": "login", "timestamp": 1}, _click(3, object_id=7)],
        array=array,
    )
    t = read_ubi(folder)
    assert t.impressions.column("timestamp").cast("int64").to_pylist() == [1714564800000]
    assert t.events.column("object_id").to_pylist() == ["y", "7"]
    s = t.sessions(top_n=3)
    assert s.clicks.tolist() == [[False, True, False]]  # "7" was not shown at 3


@pytest.mark.parametrize(
    ("query", "event", "where", "message"),
    [
        ({**QUERY, "query_response_hit_ids": None}, _click(1), "ubi_queries", "field query_response_hit_ids: missing"),
        ({**QUERY, "timestamp": "yesterday"}, _click(1), "ubi_queries", "field timestamp: ISO 8601"),
        ({**QUERY, "user_query": 3}, _click(1), "ubi_queries", "field user_query: str"),
        (QUERY, _click(0), "ubi_events", "ordinal: 1-based"),
        (QUERY, {**_click(1), "event_attributes": {"position": {"ordinal": 1}}}, "ubi_events", "object.object_id"),
        (QUERY, {**_click(1), "query_id": None}, "ubi_events", "field query_id: missing"),
    ],
)
def test_bad_ubi_documents_name_the_file_the_line_and_the_field(
    tmp_path: Path, query: dict[str, object], event: dict[str, object], where: str, message: str
) -> None:
    folder = _ubi(tmp_path, [QUERY, query], [_click(1), event])
    with pytest.raises(DataFormatError, match=message) as e:
        read_ubi(folder)
    assert Path(e.value.path).name.startswith(where) and e.value.line == 2


def test_missing_inputs_and_unwritable_logs_are_refused(tmp_path: Path, log: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such Yandex log file"):
        read_yandex(tmp_path / "none.tsv")
    with pytest.raises(FileNotFoundError, match="no such UBI folder"):
        read_ubi(tmp_path / "none")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "ubi_queries.jsonl").write_text("")
    with pytest.raises(FileNotFoundError, match="no ubi_events.jsonl"):
        read_ubi(tmp_path / "half")
    with pytest.raises(ValueError, match="format must be one of log, yandex, ubi"):
        load_sessions(log, "csv")  # type: ignore[arg-type]
    t = read_log_tables(log)
    offsets = pa.array([10] * t.impressions.num_rows, pa.int32())
    paged = LogTables(t.impressions.set_column(8, "offset", offsets), t.events)
    with pytest.raises(ValueError, match="offset > 0"):
        write_yandex(paged, tmp_path / "x.tsv")
    with pytest.raises(DataFormatError, match="names more than one impression"):
        LogTables(t.impressions.slice(0, 2).take([0, 0]), t.events).sessions()
