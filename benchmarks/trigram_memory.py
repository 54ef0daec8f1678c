"""Letter-trigram hashing at scale: time and memory of ``TrigramHasher.transform`` on 1M titles.

The vocabulary is fit on the 54,667 homedepot product titles (in this process). The titles to
hash are those titles cycled up to ``--n`` (1,000,000); with ``--titles counter`` (the default)
each also gets a distinct counter word appended (``"<title> <i>"``), so all rows differ and the
hasher's per-word cache sees ~n distinct words (a worst case for it); ``--titles cycle`` repeats
the titles verbatim (the cache stays at the homedepot vocabulary).

The transform runs in a fresh subprocess, so its resident-memory high-water mark (ru_maxrss) is
its own: reported as the peak above the resident size just before the transform. Then, in the
same subprocess with a fresh hasher (empty cache), the transform runs again under tracemalloc for
the peak of Python + numpy allocations (tracemalloc slows allocation, so that run is not timed).
Reported: wall time, titles/s, non-zeros, final CSR bytes, both peaks in bytes per non-zero, and
what a dense float32 (n x V) matrix would take.

Run:
    .venv/bin/python benchmarks/trigram_memory.py                  # 1M titles, ~1 minute
    .venv/bin/python benchmarks/trigram_memory.py --titles cycle   # verbatim repeats
    .venv/bin/python benchmarks/trigram_memory.py --quick          # smoke test: 20,000 titles
JSON goes to --out (default results/bench/trigram_memory.json). Data: $SEMSEARCH_DATA.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from _common import hardware, hardware_line, maxrss_mb, rss_mb, write_json
from semsearch.data import open_dataset
from semsearch.text import TrigramHasher

MB = 2**20


def make_titles(n: int, mode: str) -> list[str]:
    base = open_dataset("homedepot").corpus().titles
    if mode == "counter":
        return [f"{base[i % len(base)]} {i}" for i in range(n)]
    return [base[i % len(base)] for i in range(n)]


def worker(vocab: str, n: int, mode: str, chunk: int) -> dict:
    """Runs in the fresh subprocess: the timed transform, then the tracemalloc one."""
    titles = make_titles(n, mode)
    hasher = TrigramHasher.load(vocab)
    gc.collect()
    rss_before, maxrss_before = rss_mb(), maxrss_mb()
    t0 = time.perf_counter()
    m = hasher.transform(titles, chunk=chunk)
    wall = time.perf_counter() - t0
    maxrss_after = maxrss_mb()
    out = {
        "wall_s": wall,
        "shape": list(m.shape),
        "nnz": int(m.nnz),
        "csr_bytes": int(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes),
        "csr_dtypes": [str(m.data.dtype), str(m.indices.dtype), str(m.indptr.dtype)],
        "word_cache_entries": len(hasher.table),
        "rss_before_mb": rss_before,
        "maxrss_before_mb": maxrss_before,
        "maxrss_after_mb": maxrss_after,
        # A high-water mark only says something about the transform if the transform raised it.
        "rss_peak_extra_mb": maxrss_after - rss_before if maxrss_after > maxrss_before else None,
    }
    del m, hasher
    gc.collect()
    hasher = TrigramHasher.load(vocab)
    tracemalloc.start()
    m = hasher.transform(titles, chunk=chunk)  # held until measured: "kept" is the matrix's memory
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del m
    out.update(tracemalloc_peak_bytes=peak, tracemalloc_kept_bytes=kept)
    return out


def report(args: argparse.Namespace, fit: dict, r: dict) -> None:
    n, v = r["shape"]
    nnz, csr = r["nnz"], r["csr_bytes"]
    dense = n * v * 4
    peak_tm = r["tracemalloc_peak_bytes"]
    peak_rss = r["rss_peak_extra_mb"] * MB if r["rss_peak_extra_mb"] is not None else None
    per = lambda b: f"{b / nnz:.1f} B/nnz" if nnz else "-"  # noqa: E731
    what = "cycled + a distinct counter word" if args.titles == "counter" else "cycled verbatim"
    print(
        f"\ntrigram hashing of {n:,} titles (homedepot titles {what}), V = {v:,} trigrams "
        f"(fit on {fit['fit_titles']:,} titles in {fit['fit_s']:.1f} s), chunk = {args.chunk:,}"
    )
    rows = [
        ("wall time", f"{r['wall_s']:.2f} s", f"{n / r['wall_s']:,.0f} titles/s"),
        ("output non-zeros", f"{nnz:,}", f"{nnz / n:.1f} per title; word cache {r['word_cache_entries']:,} words"),
        (f"final CSR ({'/'.join(r['csr_dtypes'])})", f"{csr / MB:,.1f} MB", per(csr)),
        ("peak, tracemalloc", f"{peak_tm / MB:,.1f} MB", f"{per(peak_tm)}, {peak_tm / csr:.1f}x the final CSR"),
        ("kept after, tracemalloc", f"{r['tracemalloc_kept_bytes'] / MB:,.1f} MB", "CSR + the hasher's word cache"),
    ]
    if peak_rss is not None:
        rows.append(
            (
                "peak RSS above pre-transform RSS",
                f"{peak_rss / MB:,.1f} MB",
                f"{per(peak_rss)}, {peak_rss / csr:.1f}x the final CSR (RSS before: {r['rss_before_mb']:.0f} MB)",
            )
        )
    else:
        rows.append(("peak RSS", "n/a", "the process peaked higher before the transform"))
    worst = max(peak_tm, peak_rss or 0)
    rows.append(
        (
            f"dense float32 {n:,} x {v:,}",
            f"{dense / 2**30:,.1f} GiB",
            f"{dense / csr:,.0f}x the CSR, {dense / worst:,.0f}x the transform's peak",
        )
    )
    for label, value, note in rows:
        print(f"  {label:36} {value:>12}   {note}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="number of titles to hash")
    ap.add_argument("--titles", choices=("counter", "cycle"), default="counter", help="how the n titles are made")
    ap.add_argument("--max-size", type=int, default=None, help="trigram vocabulary size cap (default: all seen)")
    ap.add_argument("--chunk", type=int, default=100_000, help="transform chunk size (TrigramHasher default)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 20,000 titles")
    ap.add_argument(
        "--out", default="results/bench/trigram_memory.json", help="JSON output (relative: to the repo root)"
    )
    ap.add_argument("--worker", metavar="VOCAB", help=argparse.SUPPRESS)  # internal: the measuring subprocess
    args = ap.parse_args()
    if args.quick:
        args.n = min(args.n, 20_000)
    if args.worker:
        print(json.dumps(worker(args.worker, args.n, args.titles, args.chunk)))
        return

    hw = hardware()
    print("hardware:", hardware_line(hw), flush=True)
    base = open_dataset("homedepot").corpus().titles
    t0 = time.perf_counter()
    hasher = TrigramHasher.fit(base, max_size=args.max_size)
    fit = {"fit_s": time.perf_counter() - t0, "fit_titles": len(base), "vocab": len(hasher)}
    with tempfile.TemporaryDirectory() as tmp:
        vocab = Path(tmp) / "trigrams.json"
        hasher.save(vocab)
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            str(vocab),
            "--n",
            str(args.n),
            "--titles",
            args.titles,
            "--chunk",
            str(args.chunk),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    report(args, fit, r)
    path = write_json(
        {"hardware": hw, "n": args.n, "titles": args.titles, "chunk": args.chunk, "fit": fit, **r}, args.out
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
