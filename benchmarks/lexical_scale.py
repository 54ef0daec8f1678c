"""Lexical top-k at scale: BM25 over 1M-10M synthetic product titles, exhaustive against pruned.

Titles are made by recombining real Home Depot titles (seeded): the first words of one title and
the remaining words of another, with unique ids; queries are the real Home Depot test queries.
So the vocabulary and the query/title term statistics stay those of the real collection while
the collection grows.

Measured, in one process (timings are noisy on a shared machine: compare rows of one run):
  * build time: ``index`` plus the first retrieval (the weights and the kernel are built lazily);
  * memory: what the model holds resident, per title: the resident set once the build is done
    and its input titles and ids are freed (gc + malloc_trim) minus the resident set before the
    input was made; the peak resident set (also over the input's); the growth of the resident
    set during the build; the arrays' own sizes (``LexicalModel.memory``);
  * single-query latency, one query at a time through ``retrieve([q], k)`` on the calling thread,
    p50 and p99 over the queries (each query's median over ``--reps``), top-10 and top-100, with
    pruning off, on and auto (``LexicalModel.pruning``; auto is the default);
  * postings scored with pruning on, as a fraction of the postings exhaustive scoring walks;
  * the pruned and auto results are checked equal to the exhaustive ones (ids, order, scores).

Run:
    PYTHONPATH=src .venv/bin/python benchmarks/lexical_scale.py --n 1000000 [--n 2000000 ...]
    ... --model ulm        # the unigram LM (an addend per document)
Writes JSON to --out (default results/bench/lexical_scale.json). Benchmarks never fail on speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import hardware, hardware_line, maxrss_mb, rss_mb, trim, write_json  # noqa: E402

DATA = Path(os.environ.get("SEMSEARCH_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def homedepot(data: Path = DATA) -> tuple[list[str], list[str]]:
    """The Home Depot titles and its test queries' texts."""
    titles = [json.loads(line)["title"] for line in open(data / "homedepot" / "corpus.jsonl", encoding="utf-8")]
    test = {line.split("\t")[0] for line in open(data / "homedepot" / "qrels" / "test.tsv", encoding="utf-8")}
    queries = [
        q["text"]
        for line in open(data / "homedepot" / "queries.jsonl", encoding="utf-8")
        if (q := json.loads(line))["_id"] in test
    ]
    return titles, queries


def synthetic_titles(titles: list[str], n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``n`` (ids, titles): each title the first words of one real title (a random cut) followed
    by the words of another after a random cut; ids ``s0000000``... in a shuffled order, so the
    index order is not the id order (ties are broken by id)."""
    rng = np.random.default_rng(seed)
    words = [t.split() for t in titles]
    lens = np.array([len(w) for w in words])
    a = rng.integers(0, len(words), n)
    b = rng.integers(0, len(words), n)
    ca = (rng.random(n) * (lens[a] + 1)).astype(np.int64)
    cb = (rng.random(n) * (lens[b] + 1)).astype(np.int64)
    out = [
        " ".join(words[i][:x] + words[j][y:]) for i, j, x, y in zip(a.tolist(), b.tolist(), ca.tolist(), cb.tolist())
    ]
    width = len(str(n - 1))
    ids = [f"s{i:0{width}d}" for i in rng.permutation(n).tolist()]
    return ids, out


def latencies(model, queries: list[str], k: int) -> tuple[list[float], list]:  # type: ignore[no-untyped-def]
    """Wall seconds of ``retrieve([q], k)`` per query, and the hits."""
    times, hits = [], []
    for q in queries:
        t0 = time.perf_counter()
        h = model.retrieve([q], k)[0]
        times.append(time.perf_counter() - t0)
        hits.append(h)
    return times, hits


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1000, p))


def walked_fraction(model, queries: list[str], k: int) -> float | None:  # type: ignore[no-untyped-def]
    """Postings the pruned kernel scored / postings exhaustive scoring walks, over all queries."""
    kern = model._top_k
    if not hasattr(kern, "prune"):
        return None
    ix = model.lexical_index
    qc = ix.query_counts(queries)
    q = model._query_weights(ix, qc).astype(np.float32).tocsr()
    scale = np.asarray(qc.sum(axis=1), dtype=np.float64).ravel()
    out = {}
    for mode in ("off", "on"):
        w = np.zeros(len(queries), dtype=np.int64)
        for i in range(len(queries)):  # one at a time, as served
            sl = slice(q.indptr[i], q.indptr[i + 1])
            kern.search(
                np.array([0, sl.stop - sl.start]),
                q.indices[sl],
                q.data[sl],
                scale[i : i + 1],
                k,
                walked=w[i : i + 1],
                prune=mode,
            )
        out[mode] = int(w.sum())
    return out["on"] / max(out["off"], 1)


def run(n: int, model_name: str, titles: list[str], queries: list[str], reps: int) -> dict:
    from semsearch.plugins import create_model

    trim()
    rss_pre = rss_mb()
    ids, texts = synthetic_titles(titles, n)
    trim()
    rss0 = rss_mb()
    t0 = time.perf_counter()
    m = create_model(model_name)
    m.index(ids, texts)
    t_index = time.perf_counter() - t0
    m.retrieve(["warm up"], 10)  # weights, kernel, numba compile (cached on disk)
    t_build = time.perf_counter() - t0
    trim()
    rss1 = rss_mb()
    row: dict = {
        "n": n,
        "model": model_name,
        "index_s": round(t_index, 1),
        "build_s": round(t_build, 1),
        "input_mb": round(rss0 - rss_pre),
        "build_growth_mb": round(rss1 - rss0),
        "peak_rss_mb": round(maxrss_mb()),
        "peak_over_input_mb": round(maxrss_mb() - rss0),
    }
    if hasattr(m, "memory"):
        row["arrays"] = m.memory()
    del texts, ids  # what the model holds once its input is gone (the old index kept the id strs)
    trim()
    row["resident_mb"] = round(rss_mb() - rss_pre)
    row["bytes_per_title"] = round((rss_mb() - rss_pre) * 2**20 / n)
    has_switch = hasattr(m, "pruning")
    modes = ("off", "on", "auto") if has_switch else ("-",)
    for k in (10, 100):
        res = {}
        for mode in modes:
            if has_switch:
                m.pruning = mode
            runs = [latencies(m, queries, k) for _ in range(reps)]
            per_q = np.median(np.array([r[0] for r in runs]), axis=0).tolist()
            res[mode] = runs[-1][1]
            row[f"top{k}_{mode}_p50_ms"] = round(pct(per_q, 50), 3)
            row[f"top{k}_{mode}_p99_ms"] = round(pct(per_q, 99), 3)
            row[f"top{k}_{mode}_mean_ms"] = round(1000 * statistics.fmean(per_q), 3)
        if has_switch:
            row[f"top{k}_identical"] = res["on"] == res["off"] == res["auto"]
            row[f"top{k}_scored_fraction"] = round(walked_fraction(m, queries, k) or float("nan"), 4)
            m.pruning = "auto"
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, action="append", help="collection sizes (repeatable); default 1M")
    ap.add_argument("--model", default="bm25")
    ap.add_argument("--reps", type=int, default=3, help="latency repetitions per query (median taken)")
    ap.add_argument("--queries", type=int, default=0, help="first N test queries only (0: all)")
    ap.add_argument("--out", default="results/bench/lexical_scale.json")
    args = ap.parse_args()
    import semsearch

    print(f"# {hardware_line(hardware(('numpy', 'scipy', 'numba')))}; semsearch from {semsearch.__file__}", flush=True)
    titles, queries = homedepot()
    if args.queries:
        queries = queries[: args.queries]
    rows = []
    for n in args.n or [1_000_000]:
        row = run(n, args.model, titles, queries, args.reps)
        print(json.dumps(row), flush=True)
        rows.append(row)
        trim()
    write_json({"hardware": hardware(("numpy", "scipy", "numba")), "queries": len(queries), "rows": rows}, args.out)


if __name__ == "__main__":
    main()
