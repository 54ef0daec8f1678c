"""Load test of the search service on loopback: ``semsearch serve BUNDLE`` in a subprocess,
``--clients`` concurrent clients (asyncio + httpx, one request at a time each) sending
``/search?q=…&k=10`` for ``--seconds`` seconds, queries drawn in turn from a data set's queries.

Prints and writes (JSON, default results/bench/load_test.json): requests, errors (non-200 or
failed), throughput (requests/s), client-side latency p50 / p95 / p99 (ms), the server's own mean
total_ms, and the hardware line with the 1-minute load average at the start and end (the machine
may be shared). Target for a homedepot bundle (BM25 + one neural model): p99 < 50 ms, 0 errors.

Run:
    .venv/bin/python benchmarks/load_test.py --bundle results/bundles/homedepot --data homedepot
    .venv/bin/python benchmarks/load_test.py --bundle B --seconds 2 --clients 4   # smoke
Benchmarks print; they never fail on speed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from _common import REPO, hardware, hardware_line, write_json

FALLBACK = ["cordless drill", "red cat", "stainless steel sink", "wood screws", "led light bulb"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def queries(data: str | None, n: int) -> list[str]:
    """Up to ``n`` query texts of a data set (all splits), else a few fixed ones."""
    if not data:
        return FALLBACK
    from semsearch.data import open_dataset

    qs = [t for t in open_dataset(data).queries().values() if t.strip()]
    return qs[:n] or FALLBACK


async def client(http: httpx.AsyncClient, qs: list[str], start: int, stop_at: float, lat: list[float],
                 server_ms: list[float], errors: list[str]) -> None:
    i = start
    while time.perf_counter() < stop_at:
        q = qs[i % len(qs)]
        i += 1
        t = time.perf_counter()
        try:
            r = await http.get("/search", params={"q": q, "k": 10})
            lat.append(1000 * (time.perf_counter() - t))
            if r.status_code != 200:
                errors.append(f"{r.status_code}: {r.text[:100]}")
            else:
                server_ms.append(r.json()["timing_ms"]["total_ms"])
        except httpx.HTTPError as e:
            errors.append(repr(e))


async def run_load(base: str, qs: list[str], clients: int, seconds: float) -> dict:
    lat: list[float] = []
    server_ms: list[float] = []
    errors: list[str] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as http:
        for q in qs[:20]:  # warm-up, not counted
            await http.get("/search", params={"q": q, "k": 10})
        t0 = time.perf_counter()
        stop_at = t0 + seconds
        await asyncio.gather(*(client(http, qs, c * 97, stop_at, lat, server_ms, errors) for c in range(clients)))
        wall = time.perf_counter() - t0
    a = np.asarray(lat) if lat else np.zeros(1)
    return {"requests": len(lat), "errors": len(errors), "error_examples": errors[:5],
            "throughput_rps": round(len(lat) / wall, 1), "p50_ms": round(float(np.percentile(a, 50)), 2),
            "p95_ms": round(float(np.percentile(a, 95)), 2), "p99_ms": round(float(np.percentile(a, 99)), 2),
            "max_ms": round(float(a.max()), 2), "server_mean_total_ms": round(float(np.mean(server_ms)), 2) if server_ms else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, help="bundle directory (semsearch index build)")
    ap.add_argument("--data", default=None, help="data set whose queries to send (default: a few fixed queries)")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--workers", type=int, default=1, help="server worker processes (semsearch serve --workers)")
    ap.add_argument("--queries", type=int, default=2000, help="distinct queries to cycle through")
    ap.add_argument("--out", default=str(REPO / "results" / "bench" / "load_test.json"))
    args = ap.parse_args()

    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    cmd = [sys.executable, "-m", "semsearch.cli", "serve", args.bundle, "--host", "127.0.0.1", "--port", str(port), "--workers", str(args.workers)]
    server = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while True:
            if server.poll() is not None:
                raise SystemExit(f"server exited: {server.stderr.read().decode(errors='replace')[-2000:]}")
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                raise SystemExit("server did not become healthy in 300 s")
            time.sleep(0.2)
        hw = hardware(("numpy", "torch", "faiss-cpu", "fastapi", "uvicorn"))
        qs = queries(args.data, args.queries)
        res = run_load(base, qs, args.clients, args.seconds)
        res = asyncio.run(res)
        hw["load_avg_1min_end"] = round(os.getloadavg()[0], 2)
    finally:
        server.terminate()  # SIGTERM: uvicorn shuts down gracefully
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
    stderr = server.stderr.read().decode(errors="replace") if server.stderr else ""
    # uvicorn re-raises SIGTERM after its graceful shutdown, so the exit code is -15 either way
    result = {"bundle": args.bundle, "workers": args.workers, "clients": args.clients, "seconds": args.seconds, "distinct_queries": len(qs),
              "server_stopped_cleanly": "server stopped cleanly" in stderr, **res, "hardware": hw}
    print(hardware_line(hw), f"| load avg at end {hw['load_avg_1min_end']}")
    print(f"{args.clients} clients x {args.seconds:.0f} s: {res['requests']} requests, {res['errors']} errors, "
          f"{res['throughput_rps']} req/s, p50 {res['p50_ms']} ms, p95 {res['p95_ms']} ms, p99 {res['p99_ms']} ms "
          f"(server mean {res['server_mean_total_ms']} ms)")
    print(f"written to {write_json(result, args.out)}")


if __name__ == "__main__":
    main()
