"""Simulated users at volume (issue 49 item 2) and click models fitted from their log (item 3).

Rankings: ``--queries`` synthetic queries (default 10,000) with a top 10 each drawn from a pool
of 54,667 documents (Home Depot's product count), grades 0-4: a document is unjudged (grade 0)
with probability 0.5, otherwise graded with Home Depot's test qrels' grade frequencies. Queries
arrive Zipf-like (exponent 1). Measured, in this process:

1. ``sessions``: ``--impressions`` impressions (default 1,000,000) with their clicks as arrays
   only, for each user (position-based η = 1, cascade informational, DBN γ = 0.9).
2. ``log``: the same number of position-based impressions and clicks written through
   ``EventLogWriter`` to Parquet segments (each impression's top 10 in a random order, the
   randomised logger that makes position bias estimable); impressions/s, the projected time for
   10M at that rate, the log's size on disk and the peak resident memory (bounded: one chunk of
   100,000 impressions and at most four segments' rows wait).
3. ``read``: the log read back as ``Sessions`` (DuckDB join over the segments).
4. ``fit``: PBM, UBM, cascade and DBN fitted on 75 % of the sessions read back, held-out
   log-likelihood and perplexity on the other 25 %, and PBM's examination per rank (anchored at
   θ_1 = 0.68 and unanchored, as θ_r/θ_1) against the simulator's ρ.
5. ``recovery``: PBM fitted on all the sessions read back, its examination per rank against the
   simulator's ρ: the issue's check (±0.02 per rank at 1M sessions).

Run:
    .venv/bin/python benchmarks/click_simulation.py                         # 1M impressions, ~1 min
    .venv/bin/python benchmarks/click_simulation.py --impressions 100000   # smoke test
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from _common import hardware, hardware_line, maxrss_mb, summary_row, write_json

N_DOCS = 54_667
HOMEDEPOT_GRADES = np.array([226, 951, 1184, 3061, 1916], dtype=np.float64)  # qrels/test.tsv grades 0-4


def rankings(n_queries: int, seed: int = 0) -> Any:
    from semsearch.clicks import Rankings

    rng = np.random.default_rng(seed)
    docs = np.stack([rng.choice(N_DOCS, 10, replace=False) for _ in range(n_queries)]).astype(np.int32)
    graded = rng.choice(5, size=(n_queries, 10), p=HOMEDEPOT_GRADES / HOMEDEPOT_GRADES.sum())
    grades = np.where(rng.random((n_queries, 10)) < 0.5, 0, graded).astype(np.int8)
    return Rankings(
        [f"q{i}" for i in range(n_queries)],
        [f"synthetic query {i}" for i in range(n_queries)],
        [str(100_001 + i) for i in range(N_DOCS)],
        docs,
        grades,
        max_grade=4,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impressions", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--chunk", type=int, default=100_000)
    ap.add_argument("--flush-rows", type=int, default=500_000)
    ap.add_argument("--log", default="", help="where to write the event log (default: a temporary folder)")
    ap.add_argument("--out", default="results/bench/click_simulation.json")
    args = ap.parse_args()

    from semsearch.clicks import PBM_EXAMINATION, CascadeUser, DBNUser, PositionBasedUser, simulate
    from semsearch.clicks.log import EventLogWriter
    from semsearch.clicks.models import DBN, PBM, UBM, CascadeModel, log_likelihood, perplexity_by_rank, split_sessions
    from semsearch.clicks.sessions import read_sessions

    hw = hardware(("numpy", "pyarrow", "duckdb", "numba"))
    print(hardware_line(hw))
    r = rankings(args.queries)
    n = args.impressions
    out: dict[str, Any] = {"hardware": hw, "impressions": n, "queries": args.queries}

    sessions_rate = {}
    for name, user in [
        ("position-based", PositionBasedUser(4)),
        ("cascade informational", CascadeUser(4, "informational")),
        ("DBN", DBNUser(4)),
    ]:
        t0 = time.perf_counter()
        clicks = sum(int(c.clicks.sum()) for c in simulate(r, user, n, seed=1, chunk_size=args.chunk))
        dt = time.perf_counter() - t0
        sessions_rate[name] = n / dt
        print(f"sessions  {name:22s} {n / dt:12,.0f} impressions/s  ({clicks / n:.2f} clicks per impression)")
    out["sessions_per_s"] = sessions_rate

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(args.log or tmp)
        t0 = time.perf_counter()
        with EventLogWriter(log, flush_rows=args.flush_rows, flush_seconds=30) as w:
            for _ in simulate(r, PositionBasedUser(4), n, seed=2, chunk_size=args.chunk, shuffle_rate=1.0, writer=w):
                pass
        t_log = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in log.rglob("part-*.parquet"))
        rss_log = maxrss_mb()
        t0 = time.perf_counter()
        sessions = read_sessions(log)
        t_read = time.perf_counter() - t0
    rate = n / t_log
    projected = 10_000_000 / rate
    print(
        f"log       position-based (shuffled) {rate:12,.0f} impressions/s with clicks into Parquet; "
        f"10M projected {projected / 60:.1f} min; {size / n:.0f} bytes an impression on disk; "
        f"peak RSS {rss_log:.0f} MiB"
    )
    print(f"read      {len(sessions):,} sessions in {t_read:.1f} s ({len(sessions) / t_read:,.0f}/s)")
    out.update(
        log_per_s=rate,
        projected_10m_s=projected,
        bytes_per_impression=size / n,
        peak_rss_mb_after_log=rss_log,
        read_s=t_read,
    )

    train, test = split_sessions(sessions, 0.25, seed=0)
    fits: dict[str, Any] = {}
    true = np.asarray(PBM_EXAMINATION)
    for name, model in [
        ("PBM", PBM(examination_rank1=0.68)),
        ("PBM unanchored", PBM()),
        ("UBM", UBM()),
        ("cascade", CascadeModel()),
        ("DBN", DBN()),
    ]:
        t0 = time.perf_counter()
        model.fit(train)
        dt = time.perf_counter() - t0
        by_rank = perplexity_by_rank(model, test)
        fits[name] = {
            "fit_s": dt,
            "iterations": getattr(model, "iterations", None),
            "log_likelihood": log_likelihood(model, test),
            "perplexity": float(np.nanmean(by_rank)),
            "perplexity_by_rank": by_rank.tolist(),
        }
        print(
            f"fit       {name:15s} {dt:6.1f} s  held-out LL {fits[name]['log_likelihood']:.4f}  "
            f"perplexity {fits[name]['perplexity']:.4f}  by rank {np.round(by_rank, 3).tolist()}"
        )
        if name == "PBM":
            err = model.examination - true  # type: ignore[attr-defined]
            fits[name]["examination"] = model.examination.tolist()  # type: ignore[attr-defined]
            fits[name]["examination_error"] = err.tolist()
            print(f"          examination − ρ per rank {np.round(err, 4).tolist()}; max |err| {np.abs(err).max():.4f}")
        if name == "PBM unanchored":
            rel = model.examination / model.examination[0] - true / true[0]  # type: ignore[attr-defined]
            fits[name]["relative_error"] = rel.tolist()
            print(f"          θ_r/θ_1 − ρ_r/ρ_1 per rank {np.round(rel, 4).tolist()}")
        if name == "DBN":
            print(f"          γ {model.continuation:.3f}")  # type: ignore[attr-defined]
    out["fits"] = fits
    t0 = time.perf_counter()
    whole = PBM(examination_rank1=0.68).fit(sessions)
    err = whole.examination - true
    max_err = float(np.abs(err).max())
    out["recovery"] = {
        "sessions": len(sessions),
        "fit_s": time.perf_counter() - t0,
        "examination": whole.examination.tolist(),
        "error": err.tolist(),
    }
    print(
        f"recovery  PBM on all {len(sessions):,} sessions, θ_1 anchored at 0.68: θ_r − ρ_r per rank "
        f"{np.round(err, 4).tolist()}; max |err| {max_err:.4f}"
    )
    out["summary"] = [
        summary_row(
            "simulated impressions with clicks into the event log",
            "impressions/s",
            rate,
            "10M in 1 h",
            10_000_000 / 3600,
            target="10M impressions ≤ 1 h",
            met=projected <= 3600,
        ),
        summary_row(
            f"PBM examination recovered from {len(sessions):,} simulated sessions",
            "max |θ_r − ρ_r|",
            max_err,
            "",
            None,
            target="≤ 0.02 per rank at 1M sessions",
            met=max_err <= 0.02 if n >= 1_000_000 else None,
            higher_is_better=False,
        ),
    ]
    print(f"wrote {write_json(out, args.out)}")


if __name__ == "__main__":
    main()
