"""``make bench``: every benchmark at its standard size, one after the other, then one markdown
table of what each measured — ours, the strongest peer (or the measured ceiling) from the same
run, the ratio (> 1: ours is better), the issue's target and whether this run met it.

Each script writes its JSON under results/bench/ with a ``summary`` list
(``_common.summary_row``); this collects them into ``--table`` (default docs/benchmarks.md,
linked from the README) with the machine line, the load average and each script's wall time.
A script that fails or overruns its time limit is reported as such in the table, never silently
left out. The load tests (``load_test``, ``filtered``, ``sharded``) need the served bundle (``make bundle``);
without it their rows say so.

Run:
    .venv/bin/python benchmarks/run_all.py               # about 16 min on 2 cores, < 18
    .venv/bin/python benchmarks/run_all.py --only encode_speed,bm25_speed
Benchmarks print; they never fail on speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import REPO, hardware, hardware_line

BUNDLE = REPO / "bundles" / "homedepot"

# (name, arguments, time limit in s, JSON it writes)
PLAN: list[tuple[str, list[str], int, str]] = [
    ("bm25_speed", ["--reps", "2"], 300, "bm25_speed.json"),
    ("encode_speed", [], 300, "encode_speed.json"),
    ("train_speed", ["--steps", "5", "--reps", "5", "--crosscheck-batches", "0"], 240, "train_speed.json"),
    ("vector_speed", ["--skip-encoding"], 150, "vector_speed.json"),
    (
        "load_test",
        [
            "--bundle",
            str(BUNDLE),
            "--data",
            "homedepot",
            "--workers",
            "2",
            "--seconds",
            "30",
            "--result-cache",
            "0",
            "--queries",
            "20000",
            "--out",
            "results/bench/load_test_50.json",
        ],
        150,
        "load_test_50.json",
    ),
    (
        "load_test",
        [
            "--bundle",
            str(BUNDLE),
            "--data",
            "homedepot",
            "--workers",
            "2",
            "--seconds",
            "30",
            "--clients",
            "200",
            "--result-cache",
            "0",
            "--queries",
            "20000",
            "--out",
            "results/bench/load_test_200.json",
        ],
        150,
        "load_test_200.json",
    ),
    (
        "filtered",
        ["--bundle", str(BUNDLE), "--out", "results/bench/filtered.json"],
        300,
        "filtered.json",
    ),
    (
        "writes",
        [
            "--bundle",
            str(BUNDLE),
            "--data",
            "homedepot",
            "--workers",
            "2",
            "--seconds",
            "20",
            "--write-seconds",
            "10",
        ],
        240,
        "writes.json",
    ),
    # the sharded service against the plain one on Home Depot (the synthetic collection: sharded.py
    # --synthetic 4000000, about half an hour, run by hand)
    ("sharded", ["--bundle", str(BUNDLE), "--synthetic", "0", "--seconds", "10"], 600, "sharded.json"),
    ("click_log_ray", ["--events", "10000000"], 600, "click_log_ray.json"),
]


def _run(name: str, args: list[str], limit: int, log: Path) -> tuple[str, float]:
    """Run one benchmark script; its output goes to the terminal and to ``log``."""
    start = time.perf_counter()
    cmd = [sys.executable, str(REPO / "benchmarks" / f"{name}.py"), *args]
    with open(log, "w", encoding="utf-8") as f:
        try:
            proc = subprocess.run(
                cmd,
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=limit,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            f.write(proc.stdout)
            print(proc.stdout[-3000:])
            status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode}, see {log.relative_to(REPO)})"
        except subprocess.TimeoutExpired as e:
            f.write((e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""))
            status = f"over its {limit} s limit (see {log.relative_to(REPO)})"
    return status, time.perf_counter() - start


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
    return str(v)


def table(results: list[dict[str, Any]], hw: dict[str, Any], total_s: float) -> str:
    """The markdown table of every summary row (and of the scripts that gave none)."""
    lines = [
        "# Benchmarks (`make bench`)",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {hardware_line(hw)}; "
        f"all scripts in {total_s / 60:.1f} min. Ratio > 1: ours is better (faster, smaller or "
        "closer to the ceiling, whichever the unit asks). Each script's own output (and the JSON "
        "under results/bench/) has the detail; the scripts' docstrings say what is measured.",
        "",
        "| benchmark | measure | unit | ours | peer / ceiling (same run) | peer | ratio | target | met |",
        "|---|---|---|---:|---|---:|---:|---|---|",
    ]
    for r in results:
        if not r["rows"]:
            lines.append(f"| {r['name']} | {r['status']} |  |  |  |  |  |  |  |")
            continue
        for row in r["rows"]:
            met = {True: "yes", False: "**no**", None: ""}[row.get("met")]
            ratio = row.get("ratio")
            lines.append(
                f"| {r['name']} | {row['measure']} | {row['unit']} | {_fmt(row['ours'])} | {row['peer']} | "
                f"{_fmt(row.get('peer_value'))} | {'' if ratio is None else f'{ratio:.2f}×'} | "
                f"{row.get('target', '')} | {met} |"
            )
    lines += ["", "| script | status | wall time |", "|---|---|---:|"]
    lines += [f"| {r['name']} | {r['status']} | {r['seconds']:.0f} s |" for r in results]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated script names (default: all)")
    ap.add_argument("--table", default="docs/benchmarks.md")
    args = ap.parse_args()
    only = {n.strip() for n in args.only.split(",") if n.strip()}
    out_dir = REPO / "results" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    hw = hardware(("numpy", "torch", "faiss-cpu", "onnxruntime"))
    start = time.perf_counter()
    results = []
    for name, script_args, limit, json_name in PLAN:
        if only and name not in only:
            continue
        print(f"== {name} {' '.join(script_args)}", flush=True)
        if name in ("load_test", "filtered", "sharded") and not (BUNDLE / "manifest.json").is_file():
            results.append(
                {
                    "name": name,
                    "status": f"not run: no bundle at {BUNDLE.relative_to(REPO)} (make bundle)",
                    "seconds": 0.0,
                    "rows": [],
                }
            )
            continue
        json_path = out_dir / json_name
        json_path.unlink(missing_ok=True)  # a stale file must not pass for this run's figures
        status, secs = _run(name, script_args, limit, out_dir / f"{Path(json_name).stem}.log")
        rows: list[dict[str, Any]] = []
        if json_path.is_file():
            rows = json.loads(json_path.read_text(encoding="utf-8")).get("summary", [])
            if status == "ok" and not rows:
                status = "ok, but its JSON has no summary rows"
        results.append({"name": name, "status": status, "seconds": secs, "rows": rows})
    text = table(results, hw, time.perf_counter() - start)
    path = REPO / args.table
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    print(text)
    print(f"written to {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
