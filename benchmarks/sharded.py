"""The sharded service against the single-process service (issue 51 item 4), on one 2-core machine.

Two collections, each served three ways over HTTP and loaded with ``wrk``:

* **Home Depot** (54,667 titles): the served bundle (``--bundle``) with its vector index rebuilt
  exact (``index reindex --vector-index flat``, from its stored vectors, so the sharded answers can
  be compared exactly), served as it is (one process: the peer), and the same bundle split in
  ``--shards`` (2 and 4) served in one process (``serve SHARDED``: the scatter-gather's own cost)
  and on Ray Serve (``serve SHARDED --cluster local``: one replica per shard, each its own process,
  plus the coordinator: the cost of the calls between processes).
* **Synthetic** (``--synthetic N`` titles, 10M by default; ``--synthetic 0``: skipped): Home
  Depot's titles recombined as ``scale.py`` makes them, BM25 (english) ∪ a DSSM (128-d) over
  IVF-PQ with exact re-scoring (``scale.py``'s settings), no ranker, built once as a plain bundle
  from 1M-title encoded parts (``index build --encoded``) and split in 4. Served as a plain bundle,
  in one process sharded, and on Ray Serve with the 4 shards in 4 processes. The per-shard cost is
  the mean time of a call to each shard, every round (``/metrics``: ``semsearch_shard_call_seconds``).

Every run: ``--result-cache 0`` (each search computed), ``--clients`` connections, ``--seconds`` of
1,000 real Home Depot queries cycling, after a warm-up; p50/p95/p99, req/s and the ratio to the
plain bundle's. Before the load the answers of ``--check`` queries through HTTP are compared with
the plain bundle's (ids and scores). All processes share the 2 cores: the coordinator, the shards
and ``wrk`` compete, so the sharded figures are what scatter-gather costs on one box, not what N
machines would give (there each shard has its machine).

From the 10M figures, ``docs/scaling.md``'s 100M estimate: 40 shards of 2.5M (4 per 24 GiB box by
the measured resident memory), the coordinator's measured cost, a search's latency the slowest of
its shards' stage 1 plus the coordinator's overhead, both measured.

Run (writes results/bench/sharded.json; the 10M build takes about half an hour):
    .venv/bin/python benchmarks/sharded.py --bundle /work/fresh/bundles/homedepot
    .venv/bin/python benchmarks/sharded.py --bundle bundles/homedepot --synthetic 0 --seconds 5   # smoke
Benchmarks print; they never fail on speed.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import httpx

from _common import REPO, Served, hardware, hardware_line, summary_row, write_json
from load_test import queries, run_wrk

SEMSEARCH = [sys.executable, "-m", "semsearch.cli"]


def sh(*args: str) -> None:
    t = time.perf_counter()
    r = subprocess.run([*SEMSEARCH, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"semsearch {' '.join(args[:3])} failed: {r.stderr[-3000:]}")
    print(f"  semsearch {' '.join(args[:2])}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)


def rss_mb_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return round(total, 1)


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants (a Ray serve process: its raylet, workers, replicas)."""
    out = subprocess.run(["ps", "-eo", "pid,ppid"], capture_output=True, text=True).stdout.split("\n")[1:]
    children: dict[int, list[int]] = {}
    for line in out:
        if line.strip():
            p, pp = map(int, line.split())
            children.setdefault(pp, []).append(p)
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += children.get(p, [])
    return seen


def shard_seconds(base: str) -> dict[str, float]:
    """Mean ms of a call to each shard so far (every round), from ``/metrics`` (sum / count)."""
    text = httpx.get(base + "/metrics", timeout=30).text
    sums = dict(re.findall(r'semsearch_shard_call_seconds_sum\{shard="(\d+)"\} ([0-9.e+-]+)', text))
    counts = dict(re.findall(r'semsearch_shard_call_seconds_count\{shard="(\d+)"\} ([0-9.e+-]+)', text))
    return {s: round(1000 * float(sums[s]) / max(1.0, float(counts[s])), 2) for s in sorted(sums)}


def check(base: str, want: dict[str, list[tuple[str, float]]]) -> dict:
    """The served answers against ``want`` (query -> [(id, score)] of the plain bundle)."""
    same = 0
    worst = 0.0
    for q, hits in want.items():
        got = httpx.get(base + f"/search?k=10&q={quote(q)}", timeout=60).json()["hits"]
        if [h["doc_id"] for h in got] == [d for d, _ in hits]:
            same += 1
            worst = max([worst, *(abs(h["score"] - s) for h, (_, s) in zip(got, hits))])
    return {"queries": len(want), "identical_ids": same, "max_score_diff": worst}


def measure(bundle: Path, extra: list[str], qs: list[str], want: dict | None, args: argparse.Namespace) -> dict:
    """One way of serving ``bundle``: started, its answers checked against ``want`` (a sharded
    bundle), warmed up, then loaded."""
    sharded = want is not None
    t = time.perf_counter()
    with_cache = ["--result-cache", "0", *extra]
    server = Served(bundle, 1, with_cache)
    try:
        server.wait_healthy(timeout=1800)
        started = round(time.perf_counter() - t, 1)
        answers = check(server.base, want) if want is not None else None
        run_wrk(server.base, qs, args.clients, args.warmup)  # warm-up, not counted
        warm = shard_seconds(server.base) if sharded else {}
        w = run_wrk(server.base, qs, args.clients, args.seconds)
        row = {**w, "start_s": started, "rss_mb": rss_mb_of(tree_pids(server.proc.pid))}
        if answers is not None:
            row["answers"] = answers
        if sharded:
            row["shard_call_ms"] = shard_seconds(server.base)  # (mean over the warm-up and the run)
            row["shard_call_ms_warmup"] = warm
        return row
    finally:
        server.stop()


def plain_answers(bundle: Path, qs: list[str]) -> dict[str, list[tuple[str, float]]]:
    from semsearch.index.bundle import Bundle

    b = Bundle.load(bundle, result_cache=0)
    try:
        return {q: [(h.doc_id, h.score) for h in b.search(q, 10).hits] for q in qs}
    finally:
        b.close()


def ways(plain: Path, sharded: dict[int, Path], qs: list[str], checks: list[str], args: argparse.Namespace) -> dict:
    want = plain_answers(plain, checks)
    out = {"plain": measure(plain, [], qs, None, args)}
    for n, path in sharded.items():
        out[f"{n} shards, one process"] = measure(path, [], qs, want, args)
        if not args.no_ray:
            out[f"{n} shards, Ray Serve"] = measure(path, ["--cluster", "local"], qs, want, args)
    base = out["plain"]
    for name, row in out.items():
        if name != "plain":
            row["p50_ratio"] = round(row["p50_ms"] / max(base["p50_ms"], 1e-9), 2)
            row["p99_ratio"] = round(row["p99_ms"] / max(base["p99_ms"], 1e-9), 2)
            row["rps_ratio"] = round(row["throughput_rps"] / max(base["throughput_rps"], 1e-9), 2)
    return out


def homedepot(args: argparse.Namespace, work: Path, qs: list[str]) -> dict:
    flat = work / "homedepot-flat"
    if not (flat / "manifest.json").is_file():
        sh("index", "reindex", args.bundle, "--data", str(Path(args.bundle) / "documents.jsonl"), "--out", str(flat),
           "--vector-index", "flat")  # fmt: skip
    sharded = {}
    for n in args.shards:
        p = work / f"homedepot-{n}"
        if not (p / "sharded.json").is_file():
            sh("index", "shard", str(flat), "--out", str(p), "--shards", str(n))
        sharded[n] = p
    return ways(flat, sharded, qs, qs[: args.check], args)


def synthetic(args: argparse.Namespace, work: Path, qs: list[str]) -> dict:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from scale import encode_shards, ivfpq_params, synthetic_titles

    n = args.synthetic
    plain, sharded = work / f"synthetic-{n}", work / f"synthetic-{n}-4"
    built: dict[str, float] = {}
    if not (plain / "manifest.json").is_file():
        t = time.perf_counter()
        ids, titles = synthetic_titles(n)
        corpus = work / f"synthetic-{n}.jsonl"
        with corpus.open("w", encoding="utf-8") as f:
            for i, title in zip(ids, titles):
                f.write(json.dumps({"_id": i, "title": title}) + "\n")
        parts, enc_s = encode_shards(Path(args.dssm), ids, titles, work / f"synthetic-{n}-vectors")
        del ids, titles
        built["generate_encode_s"] = round(time.perf_counter() - t, 1)
        params = [x for k, v in ivfpq_params(n).items() for x in ("--vector-param", f"{k}={v}")]
        t = time.perf_counter()
        sh("index", "build", "--data", str(corpus), "--models", f"bm25,{args.dssm}", "--analyzer", "english",
           "--fields", "title", "--vector-index", "ivfpq", *params, *[x for p in parts for x in ("--encoded", str(p))],
           "--no-correct-queries", "--out", str(plain))  # fmt: skip
        built["build_s"] = round(time.perf_counter() - t, 1)
    if not (sharded / "sharded.json").is_file():
        t = time.perf_counter()
        sh("index", "shard", str(plain), "--out", str(sharded), "--shards", "4")
        built["shard_s"] = round(time.perf_counter() - t, 1)
    return {"documents": n, "built": built, "ways": ways(plain, {4: sharded}, qs, qs[: args.check], args)}


def summary(out: dict) -> list[dict]:
    """The ``make bench`` rows: each sharded way's p99 against the plain bundle's (the overhead)."""
    rows = []
    for name in ("homedepot", "synthetic"):
        if name not in out:
            continue
        ways_ = out[name]
        ways_ = ways_.get("ways", ways_)
        label = "Home Depot" if name == "homedepot" else f"{out[name]['documents']:,} synthetic titles"
        for way, r in ways_.items():
            if way == "plain":
                continue
            a = r.get("answers") or {}
            rows.append(
                summary_row(
                    f"{label}: p99, {way} (2 cores shared)",
                    "ms",
                    r["p99_ms"],
                    "the plain bundle in one process",
                    ways_["plain"]["p99_ms"],
                    target="the overhead of scatter-gather stated; answers = the plain bundle's",
                    met=r["errors"] == 0 and a.get("identical_ids") == a.get("queries"),
                    higher_is_better=False,
                )
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", default=str(REPO / "bundles" / "homedepot"), help="the served Home Depot bundle")
    ap.add_argument("--shards", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4])
    ap.add_argument("--synthetic", type=int, default=10_000_000, help="synthetic titles (0: skip)")
    ap.add_argument("--dssm", default=str(REPO / "results" / "models" / "scale-dssm"))
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--check", type=int, default=200, help="queries whose answers are compared over HTTP")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray Serve runs")
    ap.add_argument("--work", default=str(REPO / "results" / "sharded"))
    ap.add_argument("--only", choices=["homedepot", "synthetic"], default=None)
    ap.add_argument("--out", default="results/bench/sharded.json")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    qs = queries("homedepot", 1000)
    hw = hardware()
    print(hardware_line(hw), file=sys.stderr)
    out: dict = json.loads(Path(args.out).read_text()) if args.only and Path(args.out).is_file() else {}
    out.update({"hardware": hw, "clients": args.clients, "seconds": args.seconds, "result_cache": 0})
    if args.only in (None, "homedepot"):
        out["homedepot"] = homedepot(args, work, qs)
        write_json(out, args.out)
    if args.synthetic and args.only in (None, "synthetic"):
        out["synthetic"] = synthetic(args, work, qs)
        write_json(out, args.out)
    out["summary"] = summary(out)
    write_json(out, args.out)
    for name in ("homedepot", "synthetic"):
        rows = out.get(name, {})
        rows = rows.get("ways", rows)
        if not rows:
            continue
        print(f"\n{name}: wrk {args.clients} clients, {args.seconds:g} s, result cache off, 2 cores shared")
        print("| served | p50 ms | p99 ms | req/s | p99 / plain | req/s / plain | answers = plain | resident MB |")
        print("|---|---:|---:|---:|---:|---:|---|---:|")
        for way, r in rows.items():
            a = r.get("answers")
            same = f"{a['identical_ids']}/{a['queries']}" if a else "(the peer)"
            print(
                f"| {way} | {r['p50_ms']} | {r['p99_ms']} | {r['throughput_rps']} | {r.get('p99_ratio', 1.0)} "
                f"| {r.get('rps_ratio', 1.0)} | {same} | {r['rss_mb']:.0f} |"
            )
    print(f"\nwritten {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
