"""A sharded bundle answers as its bundle at 1M titles (issue 51's done-when, the synthetic half):
the agreement of the top ``--k`` of ``--queries`` real Home Depot queries, ids and scores.

The collection: ``--n`` synthetic titles (``scale.synthetic_titles``: Home Depot's titles
recombined, model codes drawn Zipf-like), BM25 (english) ∪ an untrained DSSM (a fixed random
projection of the titles' letter trigrams: cheap vectors, exactness does not need good ones) over
``--kind`` (IVF-PQ with ``scale.py``'s settings, exact re-scoring of a 500-long short list; or
flat), no ranker, no spelling. Built once as a plain bundle (``index build``), split in
``--shards`` (``index shard``), both loaded in this process; each query searched in both
(``merge_by`` union, the default), unfiltered and again under an ``allowed`` mask of
``--mask-share`` of the documents, drawn at random (spread evenly over the shards) and taken from
the start (whole shards allowed, others not: a filter on a field the documents are sorted by).
The peer is the plain bundle: its answers are the reference and its per-query latency is printed
beside the sharded one's (one process, shards in a thread pool).

Printed per case: queries with identical ids, the largest score difference over those, and the
latency ratio. Benchmarks print; they never fail on agreement or speed.

Run (writes results/bench/sharded_exact.json; the build takes minutes on 2 cores):
    .venv/bin/python benchmarks/sharded_exact.py
    .venv/bin/python benchmarks/sharded_exact.py --n 20000 --queries 50 --kind flat   # smoke
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _common import REPO, hardware, hardware_line, write_json

SEMSEARCH = [sys.executable, "-m", "semsearch.cli"]


def sh(*args: str) -> float:
    t = time.perf_counter()
    r = subprocess.run([*SEMSEARCH, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"semsearch {' '.join(args[:2])} failed: {r.stderr[-3000:]}")
    secs = time.perf_counter() - t
    print(f"  semsearch {' '.join(args[:2])}: {secs:.0f} s", file=sys.stderr, flush=True)
    return round(secs, 1)


def build(args: argparse.Namespace, work: Path) -> tuple[Path, Path, dict]:
    """The plain bundle and it split in ``--shards`` (reused when a run already wrote them)."""
    from scale import ivfpq_params, synthetic_titles
    from semsearch.plugins import create_model
    from semsearch.text import TrigramHasher

    plain, sharded = work / f"plain-{args.kind}", work / f"sharded-{args.kind}-{args.shards}"
    built: dict[str, float] = {}
    if not (plain / "manifest.json").is_file():
        ids, titles = synthetic_titles(args.n)
        corpus = work / "corpus.jsonl"
        with corpus.open("w", encoding="utf-8") as f:
            for i, title in zip(ids, titles):
                f.write(json.dumps({"_id": i, "title": title}) + "\n")
        dssm = create_model("dssm", hidden=[64], out=32)  # untrained: a fixed projection
        dssm.build(TrigramHasher.fit(titles[:50_000], max_words=8))
        dssm.save(work / "dssm")
        del ids, titles
        vec = ["--vector-index", args.kind]
        if args.kind == "ivfpq":
            vec += [x for k, v in ivfpq_params(args.n).items() for x in ("--vector-param", f"{k}={v}")]
        built["build_s"] = sh("index", "build", "--data", str(corpus), "--models", f"bm25,{work / 'dssm'}",
                              "--analyzer", "english", "--fields", "title", *vec, "--no-correct-queries",
                              "--out", str(plain))  # fmt: skip
    if not (sharded / "sharded.json").is_file():
        built["shard_s"] = sh("index", "shard", str(plain), "--out", str(sharded), "--shards", str(args.shards))
    return plain, sharded, built


def compare(plain, sharded, queries: list[str], k: int, allowed: np.ndarray | None) -> dict:  # type: ignore[no-untyped-def]
    same, worst, full = 0, 0.0, 0
    t_plain, t_sharded, differ = [], [], []
    for q in queries:
        t = time.perf_counter()
        a = plain.search(q, k, allowed=allowed).hits
        t_plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        b = sharded.search(q, k, allowed=allowed).hits
        t_sharded.append(time.perf_counter() - t)
        full += len(a) == k
        if [h.doc_id for h in a] == [h.doc_id for h in b]:
            same += 1
            worst = max([worst, *(abs(x.score - y.score) for x, y in zip(a, b))])
        else:
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x.doc_id != y.doc_id), min(len(a), len(b)))
            differ.append({"query": q, "first_difference_at": first, "lengths": [len(a), len(b)]})
    p50_plain, p50_sharded = statistics.median(t_plain) * 1000, statistics.median(t_sharded) * 1000
    return {
        "queries": len(queries),
        "identical_ids": same,
        "full_top_k": full,
        "max_score_diff": worst,
        "p50_ms_plain": round(p50_plain, 2),
        "p50_ms_sharded": round(p50_sharded, 2),
        "p50_ratio": round(p50_sharded / max(p50_plain, 1e-9), 2),
        "differ": differ[:10],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="synthetic titles")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--kind", choices=["ivfpq", "flat"], default="ivfpq")
    ap.add_argument("--mask-share", type=float, default=0.5, help="share of the documents the masked case allows")
    ap.add_argument("--work", default=None, help="build folder (default results/sharded-exact-N)")
    ap.add_argument("--out", default="results/bench/sharded_exact.json")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "benchmarks"))
    from scale import sample_queries
    from semsearch.index.bundle import Bundle
    from semsearch.index.bundle.coordinator import ShardedBundle
    from semsearch.index.bundle.options import LoadOptions

    work = Path(args.work or REPO / "results" / f"sharded-exact-{args.n}")
    work.mkdir(parents=True, exist_ok=True)
    hw = hardware()
    print(hardware_line(hw), file=sys.stderr)
    plain_dir, sharded_dir, built = build(args, work)
    queries = sample_queries(args.queries)
    plain = Bundle.load(plain_dir, result_cache=0)
    sharded = ShardedBundle.open_local(sharded_dir, LoadOptions(result_cache=0))
    try:
        n = len(plain.corpus)
        spread = np.random.default_rng(7).random(n) < args.mask_share
        first = np.arange(n) < int(n * args.mask_share)
        cases = {
            "unfiltered": compare(plain, sharded, queries, args.k, None),
            f"allowed mask, {args.mask_share:.0%} of documents at random": compare(
                plain, sharded, queries, args.k, spread
            ),
            f"allowed mask, the first {args.mask_share:.0%} of documents": compare(
                plain, sharded, queries, args.k, first
            ),
        }
    finally:
        sharded.close()
        plain.close()
    out = {"hardware": hw, "documents": n, "shards": args.shards, "kind": args.kind, "k": args.k,
           "built": built, "cases": cases}  # fmt: skip
    write_json(out, args.out)
    print(f"\n{n:,} synthetic titles, BM25 ∪ DSSM ({args.kind}), {args.shards} shards, top {args.k}")
    print("| case | identical ids | full top-k | max score diff | p50 ms plain | p50 ms sharded | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in cases.items():
        print(
            f"| {name} | {r['identical_ids']}/{r['queries']} | {r['full_top_k']} | {r['max_score_diff']:.2e} "
            f"| {r['p50_ms_plain']} | {r['p50_ms_sharded']} | {r['p50_ratio']} |"
        )
    print(f"\nwritten {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
