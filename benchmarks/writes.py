"""Changes without rebuilds, measured on a served bundle (issue 50 item 3): ``semsearch serve
--allow-writes`` on a copy of the bundle (hard links; the copy's change log in a temporary
folder), then

1. upserts a second: one client posting batches of 1, 10 and 100 new documents (titles of the
   bundle's documents, new ids) back to back for ``--write-seconds`` each, every batch encoded
   with the bundle's served encoder and fsync'd before its answer; beside it the ceiling, the
   encoder alone encoding the same texts in this process in batches of 100 (documents a second);
2. search p99 at ``--clients`` connections (wrk, closed loop, ``--result-cache 0``: every
   request runs both stages and the ranker) for ``--seconds``: on the bundle before any change
   (the same load without writes, measured first), after step 1's upserts (a delta segment of a
   few thousand documents, no writer), and while one writer upserts batches of
   ``--writer-batch`` continuously; the ratio of the last to the first, and the upserts a second
   the writer reached meanwhile.

Each server worker and this process's encoder use one thread (as ``serve --workers 2`` gives each
worker on 2 cores).

Goals (the issue): >= 300 upserts/s and p99 < 80 ms at 50 clients while a writer upserts.
Prints and writes JSON (default results/bench/writes.json). Needs ``wrk``.

Run:
    .venv/bin/python benchmarks/writes.py --bundle bundles/homedepot --data homedepot --workers 2
    .venv/bin/python benchmarks/writes.py --bundle B --seconds 3 --write-seconds 2 --clients 4   # smoke
Benchmarks print; they never fail on speed.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # (before numpy, onnxruntime and torch load)
import shutil
import tempfile
import threading
import time
from pathlib import Path

import httpx

from _common import REPO, hardware, hardware_line, served, summary_row, write_json
from load_test import queries, run_wrk

TARGET_UPSERTS = 300.0
TARGET_P99_MS = 80.0


def _link_copy(src: Path, dst: Path) -> None:
    """The bundle at ``dst`` as hard links (a merge or rebuild replaces files, never edits them)."""

    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, copy_function=link)


class Writer:
    """Posts batches of new documents to ``/documents`` back to back until stopped."""

    def __init__(self, base: str, titles: list[str], batch: int, prefix: str):
        self.base, self.titles, self.batch, self.prefix = base, titles, batch, prefix
        self.docs = self.requests = self.errors = 0
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        with httpx.Client(base_url=self.base, timeout=60) as http:
            while not self._stop.is_set():
                docs = [
                    {"id": f"{self.prefix}{n + i}", "title": self.titles[(n + i) % len(self.titles)]}
                    for i in range(self.batch)
                ]
                n += self.batch
                t = time.perf_counter()
                r = http.post("/documents", json={"documents": docs})
                self.latencies.append(time.perf_counter() - t)
                self.requests += 1
                if r.status_code == 200:
                    self.docs += self.batch
                else:
                    self.errors += 1

    def run_for(self, seconds: float) -> dict:
        self.start()
        time.sleep(seconds)
        return self.stop()

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._thread.start()

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        elapsed = time.perf_counter() - self._t0
        lat = sorted(self.latencies)
        return {
            "batch": self.batch,
            "documents": self.docs,
            "requests": self.requests,
            "errors": self.errors,
            "seconds": round(elapsed, 2),
            "upserts_per_s": round(self.docs / elapsed, 1),
            "request_p50_ms": round(1000 * lat[len(lat) // 2], 1) if lat else None,
            "request_p99_ms": round(1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 1) if lat else None,
        }


def encoder_ceiling(bundle: Path, texts: list[str], seconds: float) -> float:
    """Documents a second the bundle's first encoder encodes alone here, in batches of 100."""
    from semsearch.index.semantic import SemanticRetriever

    m = __import__("json").loads((bundle / "manifest.json").read_text())["models"][0]
    enc = SemanticRetriever.load(bundle / m["path"]).encoder
    enc.encode_documents(texts[:10])  # (loads the document model)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        enc.encode_documents(texts[n % len(texts) : n % len(texts) + 100])
        n += 100
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, help="bundle directory (copied by hard links; never changed)")
    ap.add_argument("--data", default=None, help="data set whose queries to send (default: a few fixed queries)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30.0, help="each search load run")
    ap.add_argument("--write-seconds", type=float, default=15.0, help="each upsert batch size's run")
    ap.add_argument("--writer-batch", type=int, default=10, help="batch size of the writer during the search load")
    ap.add_argument("--queries", type=int, default=20000)
    ap.add_argument("--out", default=str(REPO / "results" / "bench" / "writes.json"))
    args = ap.parse_args()

    from semsearch.data import load_corpus

    src = Path(args.bundle)
    titles = [t for t in load_corpus(src / "documents.jsonl").titles if t.strip()]
    qs = queries(args.data, args.queries)
    hw = hardware(("numpy", "faiss-cpu", "onnxruntime", "fastapi", "uvicorn"))
    with tempfile.TemporaryDirectory(prefix="semsearch-writes-") as tmp:
        bundle = Path(tmp) / "bundle"
        _link_copy(src, bundle)
        ceiling = encoder_ceiling(bundle, titles, args.write_seconds)
        extra = ["--allow-writes", "--changes", str(Path(tmp) / "changes"), "--merge-at", "0", "--result-cache", "0"]
        with served(bundle, args.workers, extra) as server:
            quiet = run_wrk(server.base, qs, args.clients, args.seconds)
            upserts = [Writer(server.base, titles, b, f"w{b}-").run_for(args.write_seconds) for b in (1, 10, 100)]
            with_delta = run_wrk(server.base, qs, args.clients, args.seconds)
            writer = Writer(server.base, titles, args.writer_batch, "load-")
            writer.start()
            loaded = run_wrk(server.base, qs, args.clients, args.seconds)
            during = writer.stop()
            time.sleep(1.5)  # (every worker searches a change within a second)
            documents = httpx.get(server.base + "/health", timeout=10).json()["documents"]
        hw["load_avg_1min_end"] = round(os.getloadavg()[0], 2)
    best = max(upserts, key=lambda u: u["upserts_per_s"])
    ratio = round(loaded["p99_ms"] / quiet["p99_ms"], 3) if quiet["p99_ms"] else None
    result = {
        "hardware": hw,
        "workers": args.workers,
        "clients": args.clients,
        "encoder_alone_docs_per_s": round(ceiling, 1),
        "upserts": upserts,
        "search_without_writes": quiet,
        "search_with_delta_no_writer": with_delta,
        "search_with_writer": loaded,
        "writer_during_search": during,
        "p99_ratio_with_writer": ratio,
        "documents_served_at_end": documents,
        "summary": [
            summary_row(
                f"upserts/s, served encoder (batches of {best['batch']})",
                "docs/s",
                best["upserts_per_s"],
                "encoder alone (ceiling)",
                round(ceiling, 1),
                target=f">= {TARGET_UPSERTS:g}",
                met=best["upserts_per_s"] >= TARGET_UPSERTS,
            ),
            summary_row(
                f"search p99, {args.clients} clients, writer upserting",
                "ms",
                loaded["p99_ms"],
                "same load, no changes or writes",
                quiet["p99_ms"],
                target=f"< {TARGET_P99_MS:g}",
                met=loaded["p99_ms"] < TARGET_P99_MS and not loaded["errors"],
                higher_is_better=False,
            ),
        ],
    }
    print(hardware_line(hw))
    print(f"encoder alone: {ceiling:.0f} documents/s (batches of 100)")
    for u in upserts:
        print(
            f"upserts, batches of {u['batch']:>3}: {u['upserts_per_s']:.0f} docs/s "
            f"({u['requests']} requests, p50 {u['request_p50_ms']} ms, p99 {u['request_p99_ms']} ms, "
            f"{u['errors']} errors)"
        )
    for name, r in (
        ("no changes, no writes", quiet),
        ("after the upserts, no writer", with_delta),
        ("writer upserting", loaded),
    ):
        print(
            f"search, {args.clients} clients, {name}: {r['throughput_rps']} req/s, p50 {r['p50_ms']} ms, "
            f"p99 {r['p99_ms']} ms, {r['errors']} errors"
        )
    print(
        f"writer during the load: {during['upserts_per_s']:.0f} docs/s in batches of {during['batch']}; "
        f"p99 ratio {ratio}"
    )
    print(f"wrote {write_json(result, args.out)}")


if __name__ == "__main__":
    main()
