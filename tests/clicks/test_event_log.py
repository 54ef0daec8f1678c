"""The event log (semsearch.clicks.log, read back by semsearch.clicks.sessions): UBI-named Parquet
segments, the buffered writer, the sessions view joined in DuckDB, errors for malformed logs, and a
SIGKILL crash test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from semsearch.clicks.log import (
    EVENT_SCHEMA,
    IMPRESSION_LOG_SCHEMA,
    IMPRESSION_SCHEMA,
    Event,
    EventLogWriter,
    Impression,
    event_row,
    impression_row,
    impressions_table,
    segments,
    write_segment,
)
from semsearch.clicks.sessions import Sessions, read_log, read_sessions
from semsearch.data.errors import DataFormatError
from waiting import wait_until

SRC = Path(__file__).resolve().parents[2] / "src"
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def _imp(i: int, hits: list[str], query: str = "drill", offset: int = 0, **kw: object) -> Impression:
    return Impression(
        query_id=f"s{i}",
        user_query=query,
        hit_ids=hits,
        offset=offset,
        timestamp=datetime.fromtimestamp(T0.timestamp() + i, UTC),
        **kw,
    )


def test_records_round_trip_with_ubi_names_and_types(tmp_path: Path) -> None:
    with EventLogWriter(tmp_path) as w:
        w.append(
            _imp(
                0,
                ["d1", "d2"],
                bundle="homedepot",
                bundle_version="v3",
                client_id="u9",
                arm="B",
                k=2,
                hit_stages=["LEXICAL", None],
            )
        )
        w.append(Event("s0", "d2", 2, client_id="u9", timestamp=T0))
    imp, ev = read_log(tmp_path, "impressions"), read_log(tmp_path, "events")
    assert imp.schema.equals(IMPRESSION_LOG_SCHEMA) and ev.schema.equals(EVENT_SCHEMA)
    row = imp.to_pylist()[0]
    assert row["query_id"] == "s0" and row["user_query"] == "drill" and row["timestamp"] == T0
    assert (row["bundle"], row["bundle_version"], row["client_id"], row["arm"], row["k"], row["offset"]) == (
        "homedepot",
        "v3",
        "u9",
        "B",
        2,
        0,
    )
    assert row["hit_ids"] == ["d1", "d2"] and row["hit_stages"] == ["LEXICAL", None]
    assert ev.to_pylist() == [
        {"query_id": "s0", "timestamp": T0, "client_id": "u9", "action_name": "click", "object_id": "d2", "position": 2}
    ]
    # segments are written under their final names only; nothing temporary is left behind
    for kind in ("impressions", "events"):
        names = [p.name for p in (tmp_path / kind).iterdir()]
        assert len(names) == 1 and names[0].startswith("part-") and names[0].endswith(".parquet")


def test_sessions_view_counts_only_clicks_on_what_was_shown(tmp_path: Path) -> None:
    with EventLogWriter(tmp_path) as w:
        w.append(_imp(0, ["a", "b", "c"], query="q1"))
        w.append(_imp(1, ["c", "a"], query="q2"))
        w.append(_imp(2, ["x", "y"], query="q1", offset=2))  # page 2: positions 3 and 4
        w.append(Event("s0", "b", 2))
        w.append(Event("s0", "b", 2))  # repeated: counts once
        w.append(Event("s0", "a", 2))  # not the document shown at 2: not counted
        w.append(Event("s1", "c", 1))
        w.append(Event("s1", "a", 2, action_name="hover"))  # not a click
        w.append(Event("s2", "y", 4))
        w.append(Event("s9", "a", 1))  # unknown search id
        w.append(Event("s0", "c", 3))
    s = read_sessions(tmp_path, top_n=4)
    assert s.search_ids is not None and s.search_ids.to_pylist() == ["s0", "s1", "s2"]
    assert [s.queries[q] for q in s.query] == ["q1", "q2", "q1"]
    shown = [[s.doc_ids[d] if d >= 0 else None for d in row] for row in s.docs]
    assert shown == [["a", "b", "c", None], ["c", "a", None, None], [None, None, "x", "y"]]
    assert s.clicks.tolist() == [
        [False, True, True, False],
        [True, False, False, False],
        [False, False, False, True],
    ]
    two = read_sessions(tmp_path, top_n=2)  # position 3 and beyond are cut off
    assert two.clicks.tolist() == [[False, True], [True, False], [False, False]]
    assert two.docs[2].tolist() == [-1, -1]


def test_writer_flushes_at_flush_rows_and_after_flush_seconds(tmp_path: Path) -> None:
    with EventLogWriter(tmp_path / "rows", flush_rows=5, flush_seconds=600) as w:
        for i in range(5):
            w.append(_imp(i, ["a"]))
        wait_until(lambda: segments(tmp_path / "rows", "impressions"), "a segment written at 5 rows", every=0.01)
        assert len(read_log(tmp_path / "rows", "impressions")) == 5  # written before close, by row count
    with EventLogWriter(tmp_path / "time", flush_rows=1000, flush_seconds=0.2) as w:
        w.append(Event("s0", "a", 1))
        wait_until(lambda: segments(tmp_path / "time", "events"), "a segment written after 0.2 s", every=0.01)
        assert len(read_log(tmp_path / "time", "events")) == 1  # written before close, by age
        assert not segments(tmp_path / "time", "impressions")


def test_rows_keep_the_order_appended_across_records_and_tables(tmp_path: Path) -> None:
    with EventLogWriter(tmp_path) as w:
        w.append(_imp(0, ["a"]))
        w.append_table(impressions_table([_imp(1, ["b"]), _imp(2, ["c"])]))
        w.append(_imp(3, ["d"]))
        w.append(_imp(4, ["e"]))
    assert read_log(tmp_path, "impressions").column("query_id").to_pylist() == ["s0", "s1", "s2", "s3", "s4"]


def test_append_is_thread_safe(tmp_path: Path) -> None:
    def worker(t: int) -> None:
        for i in range(300):
            w.append(_imp(t * 1000 + i, ["a", "b"]))

    with EventLogWriter(tmp_path, flush_rows=97, flush_seconds=0.05) as w:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    ids = read_log(tmp_path, "impressions").column("query_id").to_pylist()
    assert sorted(ids) == sorted(f"s{t * 1000 + i}" for t in range(6) for i in range(300))
    assert w.rows_written == 1800 and w.segments_written == len(segments(tmp_path, "impressions"))


def test_append_table_takes_only_the_two_schemas_and_closed_writer_refuses(tmp_path: Path) -> None:
    w = EventLogWriter(tmp_path)
    with pytest.raises(ValueError, match="impression or the event columns"):
        w.append_table(pa.table({"query_id": ["s0"]}))
    with pytest.raises(TypeError):
        w.append("s0")
    w.close()
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.append(Event("s0", "a", 1))


def test_reader_ignores_temporary_files(tmp_path: Path) -> None:
    with EventLogWriter(tmp_path) as w:
        w.append(_imp(0, ["a"]))
    (tmp_path / "impressions" / ".part-1-2-torn.parquet.tmp").write_bytes(b"PAR1 torn")
    assert read_sessions(tmp_path).docs.shape == (1, 10)


def _segment(tmp_path: Path, kind: str, table: pa.Table) -> Path:
    folder = tmp_path / kind
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "part-0.parquet"
    pq.write_table(table, path)
    return path


def test_malformed_logs_name_the_file_and_the_column(tmp_path: Path) -> None:
    with EventLogWriter(tmp_path / "ok") as w:
        w.append(_imp(0, ["a"]))
    good = read_log(tmp_path / "ok", "impressions")

    missing = _segment(tmp_path / "missing", "impressions", good.drop_columns(["hit_ids"]))
    with pytest.raises(DataFormatError, match="missing column 'hit_ids'") as e:
        read_sessions(tmp_path / "missing")
    assert e.value.path == str(missing)

    wrong = good.set_column(good.schema.get_field_index("offset"), "offset", pa.array(["0"]))
    path = _segment(tmp_path / "wrong", "impressions", wrong)
    with pytest.raises(DataFormatError, match="column 'offset' is string, expected int32") as e:
        read_sessions(tmp_path / "wrong")
    assert str(path) in str(e.value)

    bad_events = pa.table({"query_id": ["s0"], "timestamp": pa.array([T0]), "client_id": [None]})
    path = _segment(tmp_path / "ok", "events", bad_events)
    with pytest.raises(DataFormatError, match="missing column 'action_name'") as e:
        read_sessions(tmp_path / "ok")
    assert str(path) in str(e.value)

    torn = tmp_path / "torn" / "impressions" / "part-1.parquet"
    torn.parent.mkdir(parents=True)
    torn.write_bytes(b"not parquet at all")
    with pytest.raises(DataFormatError, match="not a readable Parquet") as e:
        read_sessions(tmp_path / "torn")
    assert str(torn) in str(e.value)

    with pytest.raises(DataFormatError, match="no impression segments"):
        read_sessions(tmp_path / "nothing")


def test_one_search_id_for_two_impressions_is_an_error(tmp_path: Path) -> None:
    with EventLogWriter(tmp_path) as w:
        w.append(_imp(0, ["a"]))
        w.append(_imp(0, ["b"]))
    with pytest.raises(DataFormatError, match="'s0' names more than one impression"):
        read_sessions(tmp_path)


def test_other_integer_widths_and_extra_columns_are_read(tmp_path: Path) -> None:
    """Logs from other tools: int64 positions and an extra UBI field are fine."""
    write_segment(tmp_path, "impressions", pa.Table.from_pylist([vars_of(_imp(0, ["a", "b"]))], IMPRESSION_SCHEMA))
    events = pa.table(
        {
            "query_id": ["s0"],
            "timestamp": pa.array([T0], pa.timestamp("us", tz="UTC")),
            "client_id": ["u1"],
            "action_name": ["click"],
            "object_id": ["b"],
            "position": pa.array([2], pa.int64()),
            "application": ["shop"],
        }
    )
    _segment(tmp_path, "events", events)
    assert read_sessions(tmp_path, top_n=2).clicks.tolist() == [[False, True]]


def vars_of(r: Impression) -> dict[str, object]:
    return {name: getattr(r, name) for name in IMPRESSION_SCHEMA.names}


def test_sessions_check_their_shapes() -> None:
    docs = np.array([[0, -1]], np.int32)
    with pytest.raises(ValueError, match="a click where no document was shown"):
        Sessions(docs, np.array([[False, True]]), np.zeros(1, np.int32), ["q"], ["a"])
    with pytest.raises(ValueError, match="same sessions"):
        Sessions(docs, np.zeros((1, 3), bool), np.zeros(1, np.int32), ["q"], ["a"])


CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from semsearch.clicks.log import EventLogWriter, Event, Impression, impressions_table

    # mostly bulk tables (the writer then spends most of its time writing segments, where a kill
    # is the most likely to tear one), and single records too
    w = EventLogWriter(sys.argv[1], flush_rows=4000, flush_seconds=60)
    template = impressions_table([Impression("s", "drill", [f"d{j}" for j in range(10)])] * 4000)
    n = 0
    while True:
        ids = pc.binary_join_element_wise("s", pc.cast(pa.array(np.arange(n, n + 4000)), pa.string()), "")
        w.append_table(template.set_column(0, "query_id", ids))
        for i in range(n, n + 20):
            w.append(Event(f"s{i}", "d0", 1))
        n += 4000
        if n % 20000 == 0:
            w.flush()
            print(n, flush=True)
    """
)


@pytest.mark.parametrize("delay", [0.05, 0.137, 0.29])
def test_sigkill_leaves_whole_segments_and_every_flushed_row(tmp_path: Path, delay: float) -> None:
    """A child appends and flushes (segments are also written in between, by row count); it is
    SIGKILLed ``delay`` seconds after a flush, in the middle of further appends and writes. The
    reader then finds only whole segments: every row the child had flushed when it reported, none
    torn, no row twice. (With the temporary name and rename taken out of `write_segment`, many of
    these kills leave a torn segment and the test fails.)"""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, env=env, text=True)
    assert child.stdout is not None
    flushed = 0
    try:
        while flushed < 40_000:
            line = child.stdout.readline()
            assert line, "the child stopped"
            flushed = int(line)
        time.sleep(delay)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    for kind in ("impressions", "events"):
        for path in segments(tmp_path, kind):
            pq.read_table(path)  # every segment whole: a torn file would not parse
    imp = read_log(tmp_path, "impressions")
    ids = imp.column("query_id").to_pylist()
    assert len(ids) == len(set(ids)) >= flushed
    assert set(ids) >= {f"s{i}" for i in range(flushed)}
    assert all(len(h) == 10 for h in imp.column("hit_ids").to_pylist())
    s = read_sessions(tmp_path)
    assert s.search_ids is not None
    clicked = set(s.search_ids.take(np.flatnonzero(s.clicks[:, 0])).to_pylist())
    assert clicked >= {f"s{i}" for i in range(flushed) if i % 4000 < 20}


def test_a_writer_refuses_appends_after_a_fork(tmp_path: Path) -> None:
    """In a forked child the writer refuses appends, and its close writes nothing: the rows
    buffered before the fork are written once, by the parent."""
    w = EventLogWriter(tmp_path, flush_seconds=600)
    w.append(Event("s0", "a", 1))
    pid = os.fork()
    if pid == 0:  # the child: its copy of the writer has no writing thread
        w.close()
        try:
            w.append(Event("s9", "a", 1))
        except RuntimeError:
            os._exit(0)
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    w.append(Event("s1", "a", 1))
    w.close()
    assert [e["query_id"] for e in read_log(tmp_path, "events").to_pylist()] == ["s0", "s1"]


def test_records_are_checked_when_made() -> None:
    with pytest.raises(ValueError, match="1-based"):
        Event("s0", "a", 0)
    with pytest.raises(ValueError, match="2 hit_stages for 1 hit_ids"):
        Impression("s0", "q", ["a"], hit_stages=["LEXICAL", "BOTH"])
    with pytest.raises(ValueError, match="got 'VECTOR'"):
        Impression("s0", "q", ["a"], hit_stages=["VECTOR"])
    with pytest.raises(ValueError, match="offset and k"):
        Impression("s0", "q", ["a"], offset=-1)
    assert Impression("s0", "q", ["a", "b"], hit_stages=["SEMANTIC", None]).hit_stages == ["SEMANTIC", None]


def test_rows_made_for_the_hot_path_round_trip_and_are_checked(tmp_path: Path) -> None:
    """impression_row / event_row with append_row (a service's path: a tuple, buffered as a JSON
    line) give the same rows as records: any text (newlines, quotes, non-ASCII), a timestamp as a
    datetime (aware or naive, taken as UTC) or Unix ms, hit ids as any sequence."""
    text = 'perceuse "sans fil"\n\u00e9t\u00e9 \U0001f527'
    with EventLogWriter(tmp_path) as w:
        w.append_row("impressions", impression_row("s0", text, ("d1", "d2"), ("BOTH", None), k=2, timestamp=T0))
        ms = int(T0.timestamp() * 1000) + 1
        w.append_row("impressions", impression_row("s1", "x", np.array(["d3"]), client_id="u", arm="B", timestamp=ms))
        w.append_row("impressions", impression_row("s2", "y", [], timestamp=T0.replace(tzinfo=None)))
        w.append_row("events", event_row("s0", "d2", 2, client_id="u", timestamp=T0))
    imp = read_log(tmp_path, "impressions").to_pylist()
    assert [r["user_query"] for r in imp] == [text, "x", "y"]
    assert [r["timestamp"] for r in imp] == [T0, datetime.fromtimestamp(ms / 1000, UTC), T0]
    assert [r["hit_ids"] for r in imp] == [["d1", "d2"], ["d3"], []]
    assert imp[0]["hit_stages"] == ["BOTH", None] and imp[1]["hit_stages"] is None
    assert (imp[1]["client_id"], imp[1]["arm"], imp[0]["k"], imp[0]["offset"]) == ("u", "B", 2, 0)
    assert read_log(tmp_path, "events").to_pylist() == [
        {"query_id": "s0", "timestamp": T0, "client_id": "u", "action_name": "click", "object_id": "d2", "position": 2}
    ]
    with pytest.raises(ValueError, match="1-based"):
        event_row("s0", "a", 0)
    with pytest.raises(ValueError, match="got 'VECTOR'"):
        impression_row("s0", "q", ["a"], ["VECTOR"])
    with pytest.raises(ValueError, match="offset and k"):
        impression_row("s0", "q", ["a"], k=-1)
