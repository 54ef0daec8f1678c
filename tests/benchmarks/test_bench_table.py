"""benchmarks/run_all.py (make bench): the summary row's ratio points the right way, and the table
shows every row, the verdicts, and a script that failed or gave no rows."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _common import summary_row  # noqa: E402
from run_all import table  # noqa: E402


def test_ratio_direction() -> None:
    fast = summary_row("queries", "queries/s", 200.0, "peer", 100.0, target=">= 1x", met=True)
    assert fast["ratio"] == 2.0
    quick = summary_row("latency", "ms", 5.0, "peer", 10.0, target="", met=None, higher_is_better=False)
    assert quick["ratio"] == 2.0  # half the peer's latency: twice as good
    assert summary_row("x", "ms", 5.0, "none", None, target="", met=None)["ratio"] is None


def test_table_lists_rows_verdicts_and_failures() -> None:
    rows = [
        summary_row("BM25 top-10", "queries/s", 3000.0, "bm25s numba", 2500.0, target=">= 1.0x", met=True),
        summary_row("p99", "ms", 120.0, "target", 50.0, target="< 50 ms", met=False, higher_is_better=False),
    ]
    text = table(
        [
            {"name": "bm25_speed", "status": "ok", "seconds": 12.0, "rows": rows},
            {"name": "train_speed", "status": "over its 300 s limit", "seconds": 300.0, "rows": []},
        ],
        {"nproc": 2},
        312.0,
    )
    assert "| bm25_speed | BM25 top-10 | queries/s | 3,000 | bm25s numba | 2,500 | 1.20× | >= 1.0x | yes |" in text
    assert "| **no** |" in text and "0.42×" in text
    assert "| train_speed | over its 300 s limit |" in text
