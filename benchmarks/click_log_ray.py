"""The click log at cluster scale (issue 51 item 5): a partitioned log of >= 100M simulated events
counted, fitted and labelled by Ray Data, against the same work in one process, on one 2-core box.

The log: ``--events`` events (default 100,000,000: impressions and their clicks, UBI's query and
event records) of position-based users (η = 1, ρ = the simulator's PBM examination, one list in ten
shuffled so that position bias is estimable) on ``--queries`` synthetic queries' top 10 (as
``click_simulation.py`` makes them), arriving Zipf-like; written as partitions of ``--per-part``
impressions (default 1M), each an event log of its own (``EventLogWriter``), two partitions at a
time (one per core). Reused when present (``--log``); removed at the end unless ``--keep``.

Measured, each in this process (``clicks.distributed``):

1. ``one process``: every partition's cell counts, one after another, added up (pyarrow);
2. ``ray data``: the same as a Ray Data job on a local Ray (``--ray``, default "local": each
   partition a task, the sums by Ray Data's group-by); the two counts must be equal (checked);
3. the PBM's EM on the sums, and the click labels (``clicks labels``) from them.

Printed: events/s of each path and the ratio (Ray Data / one process). Both paths use the same
2 cores: what Ray Data adds here is the second core and its own overhead; on N machines each
partition's counting is where the time goes and it divides by N.

Run (writes results/bench/click_log_ray.json; about 15 minutes on 2 cores):
    .venv/bin/python benchmarks/click_log_ray.py
    .venv/bin/python benchmarks/click_log_ray.py --events 2000000 --per-part 250000   # smoke test
Benchmarks print; they never fail on speed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from _common import REPO, hardware, hardware_line, summary_row, write_json

CLICK_RATE = 0.88  # clicks per impression of this user on these rankings (measured; sizes the log only)


def _write_part(args: tuple[str, int, int, int]) -> tuple[int, int]:
    """One partition: ``n`` impressions (seed ``i``) and their clicks; (impressions, clicks)."""
    folder, i, n, n_queries = args
    from click_simulation import rankings
    from semsearch.clicks import PositionBasedUser, simulate
    from semsearch.clicks.log import EventLogWriter

    clicks = 0
    with EventLogWriter(folder, flush_rows=500_000, max_pending_rows=2_000_000) as w:
        for s in simulate(
            rankings(n_queries), PositionBasedUser(max_grade=4), n, seed=i, writer=w, start_ms=0,
            shuffle_rate=0.1, chunk_size=250_000, id_prefix=f"p{i}-",
        ):  # fmt: skip
            clicks += int(s.clicks.sum())
    return n, clicks


def generate(log: Path, events: int, per_part: int, n_queries: int) -> dict:
    t = time.perf_counter()
    parts = max(1, -(-events // int(per_part * (1 + CLICK_RATE))))
    todo = [(str(log / f"part={i:04d}"), i, per_part, n_queries) for i in range(parts)]
    with ProcessPoolExecutor(2) as pool:
        done = list(pool.map(_write_part, todo))
    imp, clicks = sum(d[0] for d in done), sum(d[1] for d in done)
    return {"partitions": parts, "impressions": imp, "clicks": clicks, "events": imp + clicks,
            "seconds": round(time.perf_counter() - t, 1)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000_000)
    ap.add_argument("--per-part", type=int, default=1_000_000, help="impressions per partition")
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--ray", default="local", help="the Ray cluster of the Ray Data job ('': not run, a smoke test)")
    ap.add_argument("--log", default=str(REPO / "results" / "click-log-ray"))
    ap.add_argument("--keep", action="store_true", help="keep the generated log")
    ap.add_argument("--out", default="results/bench/click_log_ray.json")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "benchmarks"))
    from semsearch.clicks.distributed import fit, labels, log_counts

    hw = hardware(("numpy", "pyarrow", "duckdb", "ray"))
    print(hardware_line(hw), file=sys.stderr)
    log = Path(args.log)
    marker = log / "generated.json"
    if marker.is_file():
        import json

        gen = json.loads(marker.read_text())
    else:
        shutil.rmtree(log, ignore_errors=True)
        log.mkdir(parents=True)
        gen = generate(log, args.events, args.per_part, args.queries)
        write_json(gen, marker)
    size_gb = sum(f.stat().st_size for f in log.rglob("*.parquet")) / 1e9
    print(f"log: {gen['events']:,} events ({gen['impressions']:,} impressions, {gen['clicks']:,} clicks) in "
          f"{gen['partitions']} partitions, {size_gb:.2f} GB", file=sys.stderr)  # fmt: skip
    say = lambda m: print(f"  {m}", file=sys.stderr, flush=True)  # noqa: E731
    one = log_counts(log, progress=say)
    ray = log_counts(log, ray=args.ray, progress=say) if args.ray else one
    same = ray.cells.equals(one.cells)
    t = time.perf_counter()
    pbm = fit(ray.cells, "pbm")
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    table = labels(ray.cells)
    labels_s = time.perf_counter() - t
    ev = gen["events"]
    out = {
        "hardware": hw,
        "log": {**gen, "gb": round(size_gb, 2)},
        "one_process": {"seconds": round(one.seconds, 1), "events_per_s": round(ev / one.seconds)},
        "ray_data": {"seconds": round(ray.seconds, 1), "events_per_s": round(ev / ray.seconds), "address": args.ray},
        "counts_equal": same,
        "cells": ray.cells.num_rows,
        "pbm": {"seconds": round(fit_s, 1), "iterations": pbm.iterations, "examination": pbm.to_json()["examination"]},
        "labels": {"seconds": round(labels_s, 1), "pairs": table.num_rows},
        "ratio_ray_over_one": round(one.seconds / ray.seconds, 2),
        "summary": [
            summary_row(
                f"click-log counting, {ev:,} events, Ray Data on one 2-core box",
                "events/s",
                round(ev / ray.seconds),
                "one process (DuckDB + numpy)",
                round(ev / one.seconds),
                target=">= 100M events processed, throughput stated",
                met=ev >= 100_000_000 and same and bool(args.ray),
            )
        ],
    }
    write_json(out, args.out)
    print(f"\n{ev:,} events, 2 cores, one machine")
    print("| counting (read, join, reduce) | seconds | events/s |")
    print("|---|---:|---:|")
    print(f"| one process | {one.seconds:.0f} | {ev / one.seconds:,.0f} |")
    print(f"| Ray Data ({args.ray}) | {ray.seconds:.0f} | {ev / ray.seconds:,.0f} |")
    print(f"\nRay Data / one process: {one.seconds / ray.seconds:.2f}x the throughput; counts equal: {same}")
    print(f"PBM EM on {ray.cells.num_rows:,} cells: {fit_s:.1f} s, {pbm.iterations} iterations; "
          f"labels of {table.num_rows:,} pairs: {labels_s:.1f} s")  # fmt: skip
    print("examination:", " ".join(f"{x:.3f}" for x in pbm.examination))
    if not args.keep:
        shutil.rmtree(log, ignore_errors=True)


if __name__ == "__main__":
    main()
