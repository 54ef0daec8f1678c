"""The first requests after ``/ready`` (issue 60 item 5, warm before ready): in a fresh worker
process each run (``create_app`` with writes, its lifespan run by a test client), the time of the
first and second search, the first and second filtered search, the first upsert (``wait=true``)
and the searches after it, and the time from the start to ``/ready``. With ``--src`` given
twice (e.g. ``main``'s tree and this one), the runs of the two trees interleave in one
invocation, so both see the same machine load; every figure is a median and its range.

The bundle is a table's (filters need facet and numeric fields): by default one built here from
a generated catalogue of ``--rows`` rows (``--id sku --fields name,description --facets brand
--numeric price``, BM25). The upserted row is sent in the catalogue's shape, or as
id/title/text where a tree takes only that (before issue 60 item 6).

Run:
    .venv/bin/python benchmarks/first_search.py --runs 5 --src /path/to/main/src --src src
Benchmarks print; they never fail on speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

STEPS = [
    "ready_s",
    "first",
    "second",
    "first_filter",
    "second_filter",
    "first_upsert",
    "first_after_upsert",
    "second_after_upsert",
]


def child(bundle: str) -> dict[str, float]:
    """One fresh worker's first requests (milliseconds; ``ready_s``: seconds to /ready)."""
    from fastapi.testclient import TestClient

    from semsearch.serving import create_app

    t0 = time.perf_counter()
    app = create_app(bundle, allow_writes=True, changes=tempfile.mkdtemp())
    out: dict[str, float] = {}
    with TestClient(app) as c:
        assert c.get("/ready").status_code == 200
        out["ready_s"] = round(time.perf_counter() - t0, 2)

        def timed(name: str, method: str, path: str, **kw: Any) -> Any:
            t = time.perf_counter()
            r = c.request(method, path, **kw)
            out[name] = round((time.perf_counter() - t) * 1000, 1)
            return r

        facet = (app.state.service.bundle.filters.facets or [None])[0]
        numeric = (app.state.service.bundle.filters.numeric or [None])[0]
        timed("first", "GET", "/search", params={"q": "cordless drill"})
        timed("second", "GET", "/search", params={"q": "garden tool"})
        if facet is not None and numeric is not None:
            timed("first_filter", "GET", "/search", params=[("q", "drill"), ("filter", f"{facet}:DEWALT")])
            timed("second_filter", "GET", "/search", params=[("q", "tool"), ("filter", f"{numeric}:[10,50]")])
        schema = app.state.service.bundle.manifest.get("schema") or {}
        row = {schema.get("id", "id"): "zz-new", **dict.fromkeys(schema.get("fields", []), "Zorblax drill")}
        r = timed("first_upsert", "POST", "/documents", params={"wait": "true"}, json={"documents": [row]})
        if r.status_code == 422:  # a tree before issue 60 item 6: the id/title/text shape only
            doc = {"id": "zz-new", "title": "Zorblax drill"}
            r = timed("first_upsert", "POST", "/documents", params={"wait": "true"}, json={"documents": [doc]})
        assert r.status_code == 200, r.text
        timed("first_after_upsert", "GET", "/search", params={"q": "zorblax tool"})
        timed("second_after_upsert", "GET", "/search", params={"q": "fine description"})
    return out


def build_catalog(rows: int, tree: str) -> str:
    """A bundle of a generated catalogue (``rows`` drills of three brands, a price and a colour),
    built with the tree ``tree``'s ``index build``; its path."""
    folder = tempfile.mkdtemp(prefix="first-search-")
    brands = ["DEWALT", "RYOBI", "BOSCH"]
    lines = ["sku,name,description,brand,price,color"] + [
        f"A{i},Cordless drill {i}V model {i % 7},A fine description of tool {i} with words {i % 13},"
        f"{brands[i % 3]},{10 + i},red"
        for i in range(rows)
    ]
    csv = os.path.join(folder, "catalog.csv")
    with open(csv, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    out = os.path.join(folder, "bundle")
    cols = ["--id", "sku", "--fields", "name,description", "--facets", "brand", "--numeric", "price"]
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree), "SEMSEARCH_PROGRESS": "0"}
    cmd = [sys.executable, "-m", "semsearch", "index", "build", "--data", csv, *cols, "--out", out]
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", help="a table's bundle (facet and numeric fields); default: one built here")
    ap.add_argument("--rows", type=int, default=200, help="rows of the generated catalogue")
    ap.add_argument("--runs", type=int, default=5, help="fresh worker processes per tree")
    ap.add_argument("--src", action="append", help="a source tree to import semsearch from (repeatable)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.bundle)))
        return
    trees = args.src or [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")]
    if args.bundle is None:
        args.bundle = build_catalog(args.rows, trees[-1])

    def run(tree: str) -> dict[str, float]:
        env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
        cmd = [sys.executable, os.path.abspath(__file__), "--bundle", args.bundle, "--child"]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]

    for tree in trees:  # one run each first: numba's on-disk cache of each tree written
        run(tree)
    load = os.getloadavg()[0]
    runs: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
    for _ in range(args.runs):
        for tree in trees:
            runs[tree].append(run(tree))
    print(f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}; {args.runs} fresh processes per tree")
    print("| request after /ready (ms; ready: s) | " + " | ".join(trees) + " |")
    print("|---|" + "---:|" * len(trees))
    for step in STEPS:
        cells = []
        for tree in trees:
            xs = [r[step] for r in runs[tree] if step in r]
            cells.append(f"{statistics.median(xs):g} ({min(xs):g}-{max(xs):g})" if xs else "-")
        print(f"| {step} | " + " | ".join(cells) + " |")
    print(f"bundle: {args.bundle}")


if __name__ == "__main__":
    main()
