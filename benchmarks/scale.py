"""One box at 1M, 2M and 10M titles (issue 20 items 0 and 5): lexical and vector retrieval built,
held resident and queried, each size in a fresh process.

The collection: ``N`` synthetic product titles recombined from Home Depot's 54,667 (the first
words of one title + the rest of another, cut at random points; three in ten also carry a model
code drawn Zipf-like from N/4 codes, so the vocabulary grows with N as real catalogues' does).
Ids ``s00000000``... Queries: real Home Depot queries (all splits, a seeded sample).

Measured per size, in one child process (so peak memory is that size's alone):

* **lexical** (BM25, english analyzer, the served search's): build time (``index`` and the first
  retrieval, which builds the weights and the kernel's blocks), resident memory kept (RSS once the
  titles and the caller's ids are freed, ``malloc_trim``, minus before generating: ``rss_kept``),
  the arrays by part (``LexicalModel.memory``), peak RSS;
  single-query latency p50 / p99 (one query per call, ``retrieve_arrays``) at top-10 and top-100,
  for each top-k kernel (pruning "auto", the default; "on"; "off", the exhaustive walk), and
  whether they returned the same ids and scores for every query (they must).
* **ivfpq**: the titles encoded by a trained DSSM (128-d, letter trigrams) into 1M-title shards
  exactly as ``semsearch encode --shard I/N`` writes them, then one index of all shards as
  ``semsearch index from-shards --one-index`` builds it (IVF-PQ quantizers trained once on a sample;
  exact re-scoring of a short list from the memory-mapped vectors): encode and build time, resident memory
  after saving and loading it back,
  p50 / p99 single-query latency, recall@10 against exact search (brute force over all vectors).
  In the same process as the lexical index, so "everything resident" is the two together
  (anonymous memory, and apart the pages of the memory-mapped vectors that re-scoring touched).
* **hnsw** (sizes up to ``--hnsw-max``): one faiss HNSW index (M 32) of the same vectors: build
  time, bytes per document, p50 / p99, recall@10.
* **pgvector** (``--pg-size`` vectors, default 0 = not run): the same vectors in the embedded
  PostgreSQL with pgvector's HNSW: load and index time, table + index size, p50 / p99, recall@10.

The parent prints a markdown table per engine and extrapolates each measured trend (a power law
fitted to the measured sizes) to 10M where it was not measured and to 100M, marked as such, with
the machines of this kind (24 GiB, 16 GiB of it for the index) each engine needs for 100M.

Run (writes results/bench/scale.json; the 10M size takes about half an hour on 2 cores):
    .venv/bin/python benchmarks/scale.py --sizes 1000000,2000000,10000000
    .venv/bin/python benchmarks/scale.py --sizes 20000 --queries 50 --dssm '' --hnsw-max 20000   # smoke test
Benchmarks print; they never fail on speed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _common import REPO, hardware, hardware_line, maxrss_mb, rss_mb, summary_row, trim, write_json

GOAL_LEXICAL_P99_MS = 50.0  # issue 20 item 0, at 10M titles
GOAL_VECTOR_P99_MS = 10.0
GOAL_RESIDENT_GB = 16.0
BOX_GB = 16.0  # of a 24 GiB machine, what an index may keep resident (the budget)
SHARD = 1_000_000  # titles per encoded shard


# ------------------------------------------------------------------------------------ the data
def synthetic_titles(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``n`` (ids, titles) recombined from Home Depot's titles (module docstring)."""
    from semsearch.data import open_dataset

    corpus = open_dataset("homedepot").corpus()
    words = [t.split() for t in corpus.titles if t.split()]
    rng = np.random.default_rng(seed)
    n_codes = max(1, n // 4)
    titles: list[str] = []
    for start in range(0, n, 1_000_000):
        m = min(1_000_000, n - start)
        a = rng.integers(0, len(words), m).tolist()
        b = rng.integers(0, len(words), m).tolist()
        ua, ub = rng.random(m).tolist(), rng.random(m).tolist()
        code = np.where(rng.random(m) < 0.3, np.minimum(rng.zipf(1.3, m), n_codes), 0).tolist()
        for x, y, fa, fb, c in zip(a, b, ua, ub, code):
            wa, wb = words[x], words[y]
            head = wa[: 1 + int(fa * len(wa))]
            tail = wb[int(fb * len(wb)) :]
            t = " ".join(head + tail)
            titles.append(f"{t} M{c:x}" if c else t)
    ids = [f"s{i:08d}" for i in range(n)]
    return ids, titles


def sample_queries(n: int, seed: int = 1) -> list[str]:
    from semsearch.data import open_dataset

    qs = sorted(set(open_dataset("homedepot").queries().values()))
    rng = np.random.default_rng(seed)
    return [qs[i] for i in rng.choice(len(qs), size=min(n, len(qs)), replace=False)]


def _status_mb(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_anon_mb() -> float:
    """Anonymous resident memory (heap, arrays): what the process keeps, without file pages."""
    return _status_mb("RssAnon:")


def rss_file_mb() -> float:
    """Resident pages of memory-mapped files (the page cache the kernel may drop)."""
    return _status_mb("RssFile:")


def latencies(fn, items) -> dict[str, float]:  # type: ignore[no-untyped-def]
    fn(items[0])  # warm-up (compilation, first touches)
    lat = []
    for it in items:
        t0 = time.perf_counter()
        fn(it)
        lat.append(time.perf_counter() - t0)
    ms = np.array(lat) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)), "mean_ms": float(ms.mean())}


# ------------------------------------------------------------------------------ one size (child)
def lexical(ids: list[str], titles: list[str], queries: list[str], rss0: float) -> tuple[object, dict]:
    from semsearch.plugins import create_model

    m = create_model("bm25", analyzer="english")
    t0 = time.perf_counter()
    m.index(ids, titles)
    m.retrieve_arrays(["warm up"], 10)  # the weights and the kernel's blocks are built on first use
    build = time.perf_counter() - t0
    out: dict = {"build_s": build, "peak_rss_mb_after_build": maxrss_mb()}
    if hasattr(m, "memory"):
        out["arrays_bytes"] = m.memory()
    return m, out


def lexical_queries(m, queries: list[str]) -> dict:  # type: ignore[no-untyped-def]
    """Latencies at top-10 and top-100 for each top-k kernel (``pruning``: "auto", the default,
    prunes the queries with many postings; "on" every query; "off" none, the exhaustive walk),
    and whether all three returned the same ids and scores for every query."""
    out: dict = {}
    modes = ("auto", "on", "off") if hasattr(m, "pruning") else ("off",)
    for k in (10, 100):
        got = {}
        for mode in modes:
            if hasattr(m, "pruning"):
                m.pruning = mode
            # latencies calls the closure within this iteration; the default binds k all the same
            out[f"top{k}_{mode}"] = latencies(lambda q, k=k: m.retrieve_arrays([q], k), queries)
            ids, scores, _ = m.retrieve_arrays(queries, k)
            got[mode] = (ids, scores)
        if hasattr(m, "pruning"):
            m.pruning = "auto"
            out[f"top{k}_identical"] = all(np.array_equal(got[a][i], got["off"][i]) for a in modes for i in range(2))
    return out


def encode_shards(model_dir: Path, ids: list[str], titles: list[str], folder: Path) -> tuple[list[Path], float]:
    """The titles encoded into 1M-title shards, each written as ``semsearch encode --shard I/N``
    writes it (.npy, then its sidecar); a complete shard from an earlier run is reused."""
    from semsearch.index.sharded import EncodedShard, shard_path
    from semsearch.plugins import load_model

    folder.mkdir(parents=True, exist_ok=True)
    model = load_model(model_dir)
    n_shards = max(1, math.ceil(len(titles) / SHARD))
    paths, secs = [], 0.0
    for i in range(n_shards):
        lo, hi = i * len(titles) // n_shards, (i + 1) * len(titles) // n_shards
        p = shard_path(folder, i, n_shards)
        info = EncodedShard(
            p,
            model=str(model_dir.resolve()),
            texts=f"synthetic-{len(titles)}",
            side="document",
            shard=(i, n_shards),
            rows=(lo, hi),
            ids=ids[lo:hi],
        )
        if not info.done():
            t0 = time.perf_counter()
            v = model.encode_documents(titles[lo:hi])
            secs += time.perf_counter() - t0
            info.write(np.asarray(v, dtype=np.float32))
            del v
        paths.append(p)
        print(f"  encoded shard {i + 1}/{n_shards}", file=sys.stderr, flush=True)
    return paths, secs


def untrained_dssm(titles: list[str], work: Path) -> Path:
    """A DSSM with untrained weights over the titles' letter trigrams (``--dssm untrained``: smoke
    tests; it encodes exactly as fast as a trained one, but its vectors cluster differently)."""
    from semsearch.plugins import create_model
    from semsearch.text import TrigramHasher

    m = create_model("dssm")
    m.build(TrigramHasher.fit(titles[:50_000], max_words=int(m.params()["max_words"])))
    m.save(work / "dssm-untrained")
    return work / "dssm-untrained"


def exact_top(paths: list[Path], ids: list[str], qv: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
    """Exact cosine top-k over every shard's vectors (brute force), ties by id."""
    q = qv / np.maximum(np.linalg.norm(qv, axis=1, keepdims=True), 1e-12)
    best_s = np.full((len(q), 0), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(q), 0), dtype=np.int64)
    base = 0
    for p in paths:
        v = np.load(p, mmap_mode="r")
        for s in range(0, len(v), 200_000):
            x = np.asarray(v[s : s + 200_000], dtype=np.float32)
            x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
            sc = q @ x.T
            kk = min(k, sc.shape[1])
            part = np.argpartition(-sc, kk - 1, axis=1)[:, :kk]
            best_s = np.hstack([best_s, np.take_along_axis(sc, part, 1)])
            best_i = np.hstack([best_i, part + base + s])
            keep = np.argsort(-best_s, axis=1, kind="stable")[:, :k]
            best_s, best_i = np.take_along_axis(best_s, keep, 1), np.take_along_axis(best_i, keep, 1)
        base += len(v)
    return [[(ids[i], float(s)) for i, s in zip(ri, rs)] for ri, rs in zip(best_i, best_s)]


def ivfpq_params(n: int) -> dict[str, int]:
    """~4 sqrt(N) lists (a power of 2) up to 4,096 (k-means and assigning 10M vectors to more lists
    take too long on 2 cores), 8-dim sub-quantisers, 64 lists probed, 500 re-scored exactly."""
    nlist = min(4096, int(2 ** round(math.log2(max(16, 4 * math.sqrt(n))))))
    nprobe = 64 if n <= 2_000_000 else 128  # capped lists grow with N: probe more for the same recall
    return {"nlist": min(nlist, max(1, n // 39)), "m": 16, "nbits": 8, "nprobe": nprobe, "rerank": 500}


def vectors(
    ids: list[str],
    titles: list[str],
    queries: list[str],
    args: argparse.Namespace,
    work: Path,
    rss_before: float,
    out: dict,
) -> None:
    from semsearch.index import VectorIndex, recall_at_k, set_threads
    from semsearch.index.sharded import one_index_from_encoded
    from semsearch.plugins import load_model

    set_threads(args.threads)
    model_dir = Path(args.dssm) if args.dssm != "untrained" else untrained_dssm(titles, work)
    n = len(ids)
    paths, enc = encode_shards(model_dir, ids, titles, work / "shards")
    out["encode_s"] = enc
    titles.clear()  # the caller's list: from here on only what the indexes keep stays resident
    trim()
    qv = np.asarray(load_model(model_dir).encode_queries(queries), dtype=np.float32)
    nq_recall = min(len(queries), args.recall_queries)
    t0 = time.perf_counter()
    exact = exact_top(paths, ids, qv[:nq_recall], 10)
    out["exact_s_per_query"] = (time.perf_counter() - t0) / max(nq_recall, 1)
    # IVF-PQ with re-scoring, built from the shards as `semsearch index from-shards --one-index` does
    params = ivfpq_params(n)
    t0 = time.perf_counter()
    ix = one_index_from_encoded(
        paths,
        kind="ivfpq",
        metric="cosine",
        threads=args.threads,
        train_sample=min(n, max(100_000, 64 * params["nlist"])),
        **params,
    )
    build = time.perf_counter() - t0
    ix.save(work / "ivfpq")
    del ix
    trim()
    r0, a0 = rss_mb(), rss_anon_mb()
    ix = VectorIndex.load(work / "ivfpq")
    trim()
    iv: dict = {
        "params": params,
        "build_s": build,
        "shards": len(paths),
        "one_index": True,
        "resident_mb": rss_mb() - r0,
        "resident_anon_mb": rss_anon_mb() - a0,
        "disk_vectors_mb": n * qv.shape[1] * 4 / 2**20,
    }
    iv.update(latencies(lambda i: ix.search(qv[i : i + 1], 10), list(range(len(qv)))))
    iv["recall@10"] = float(recall_at_k(ix.search(qv[:nq_recall], 10), exact, 10))
    iv["sweep"] = []  # the recall / latency trade-off: lists probed and candidates re-scored
    for nprobe, rerank in ((32, 200), (64, 500), (128, 500), (256, 500), (256, 1000)):
        ix.set_search_params(nprobe=nprobe, rerank=rerank)
        row = {
            "nprobe": nprobe,
            "rerank": rerank,
            **latencies(lambda i: ix.search(qv[i : i + 1], 10), list(range(len(qv)))),
        }
        row["recall@10"] = float(recall_at_k(ix.search(qv[:nq_recall], 10), exact, 10))
        iv["sweep"].append(row)
    ix.set_search_params(nprobe=params["nprobe"], rerank=params["rerank"])
    out["ivfpq"] = iv
    out["rss_everything_mb"] = rss_mb() - rss_before  # ids, lexical index and IVF-PQ, all loaded
    out["rss_everything_anon_mb"] = rss_anon_mb() - out["rss_anon0_mb"]  # without mapped file pages
    out["rss_file_mb"] = rss_file_mb()  # pages of memory-mapped files touched (the re-scored vectors)
    print(f"  ivfpq: {json.dumps(iv)}", file=sys.stderr, flush=True)
    # released by rebinding, not del: pyflakes reads a function-level del of a name that the search
    # closures above use as the name being undefined in them (F821); the index is freed the same
    ix = None
    trim()
    if n <= args.hnsw_max:
        v = np.vstack([np.load(p) for p in paths])
        t0 = time.perf_counter()
        h = VectorIndex.build(ids, v, kind="hnsw", metric="cosine", threads=args.threads)
        hb = time.perf_counter() - t0
        del v
        trim()
        hn: dict = {"build_s": hb, "bytes_per_doc": h.bytes_per_doc(), "params": h.params}
        hn.update(latencies(lambda i: h.search(qv[i : i + 1], 10), list(range(len(qv)))))
        hn["recall@10"] = float(recall_at_k(h.search(qv[:nq_recall], 10), exact, 10))
        out["hnsw"] = hn
        print(f"  hnsw: {json.dumps(hn)}", file=sys.stderr, flush=True)
        del h
        trim()
    if args.pg_size and args.pg_size <= n:
        out["pgvector"] = pgvector(ids[: args.pg_size], paths, qv, args, work)


def pgvector(ids: list[str], paths: list[Path], qv: np.ndarray, args: argparse.Namespace, work: Path) -> dict:
    from semsearch.index import recall_at_k
    from semsearch.index.pgstore import EmbeddedPostgres, PgVectorStore, connect

    n = len(ids)
    v = np.vstack([np.load(p) for p in paths])[:n]
    exact = exact_top([_tmp_npy(v, work)], ids, qv[: args.recall_queries], 10)
    with EmbeddedPostgres(work / "pg", delete=True) as pg:
        t0 = time.perf_counter()
        store = PgVectorStore.create(
            pg.dsn,
            "scale",
            ids,
            v,
            metric="cosine",
            model="dssm",
            log=lambda s: print(f"  pgvector: {s}", file=sys.stderr, flush=True),
        )
        build = time.perf_counter() - t0
        with connect(pg.dsn) as c:
            size = c.execute("SELECT pg_total_relation_size('scale')").fetchone()[0]
        out: dict = {"docs": n, "build_s": build, "bytes_per_doc": size / n, "params": store.params}
        out.update(latencies(lambda i: store.search(qv[i : i + 1], 10), list(range(len(qv)))))
        out["recall@10"] = float(recall_at_k(store.search(qv[: args.recall_queries], 10), exact, 10))
        store.close()
    print(f"  pgvector: {json.dumps(out)}", file=sys.stderr, flush=True)
    return out


def _tmp_npy(v: np.ndarray, work: Path) -> Path:
    p = work / "pg-vectors.npy"
    np.save(p, v, allow_pickle=False)
    return p


def warm_up(args: argparse.Namespace) -> None:
    """Import and compile everything the run uses before the baseline reading, so the memory
    figures are the indexes', not the libraries'."""
    import faiss  # noqa: F401

    from semsearch.plugins import create_model, load_model

    m = create_model("bm25", analyzer="english")
    m.index(["a", "b"], ["cordless drill", "drill bit"])
    m.retrieve_arrays(["drill"], 1)
    if args.dssm and args.dssm != "untrained" and "ivfpq" in args.parts:
        load_model(Path(args.dssm)).encode_documents(["cordless drill"])


def child(args: argparse.Namespace) -> None:
    n = args.child
    work = Path(args.work) / str(n)
    work.mkdir(parents=True, exist_ok=True)
    queries = sample_queries(args.queries)
    warm_up(args)
    trim()
    rss0 = rss_mb()
    anon0 = rss_anon_mb()
    t0 = time.perf_counter()
    ids, titles = synthetic_titles(n)
    out: dict = {
        "titles": n,
        "generate_s": time.perf_counter() - t0,
        "rss_titles_mb": rss_mb() - rss0,
        "queries": len(queries),
        "rss_anon0_mb": anon0,
    }
    print(f"  {n:,} titles generated in {out['generate_s']:.0f}s", file=sys.stderr, flush=True)
    m = None
    if "lexical" in args.parts:
        trim()
        r_ids = rss_mb()
        m, lx = lexical(ids, titles, queries, rss0)
        trim()
        lx["resident_mb"] = rss_mb() - r_ids  # what the build added (the ids list is the caller's)
        lx.update(lexical_queries(m, queries))
        out["lexical"] = lx
        print(f"  lexical: {json.dumps(lx)}", file=sys.stderr, flush=True)
    if "ivfpq" in args.parts and args.dssm:
        vectors(ids, titles, queries, args, work, rss0, out)  # empties ``titles`` once encoded
    titles.clear()
    del ids  # the caller's list: the lexical index keeps what it needs of it
    trim()
    out["rss_kept_mb"] = rss_mb() - rss0  # what is still loaded: the lexical index (+ allocator leftovers)
    out["rss_kept_anon_mb"] = rss_anon_mb() - anon0
    out["peak_rss_mb"] = maxrss_mb()
    Path(args.child_out).write_text(json.dumps(out, indent=2))


# ------------------------------------------------------------------------------------ the parent
def fit(xs: list[float], ys: list[float], at: float) -> float | None:
    """A power law through the measured points (log-log least squares), read at ``at``."""
    pts = [(x, y) for x, y in zip(xs, ys) if y and y > 0]
    if not pts:
        return None
    if len(pts) == 1:
        return pts[0][1] * at / pts[0][0]  # one point: proportional
    lx, ly = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    b, a = np.polyfit(lx, ly, 1)
    return float(math.exp(a + b * math.log(at)))


def passed_on(argv: list[str]) -> list[str]:
    """The parent's arguments for a child, but those the parent passes itself."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--sizes", "--dssm", "--queries", "--recall-queries", "--hnsw-max"):
            skip = True  # passed explicitly (after --quick's settings)
        elif a != "--quick" and not a.startswith(
            ("--sizes=", "--dssm=", "--queries=", "--recall-queries=", "--hnsw-max=")
        ):
            out.append(a)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,2000000,10000000")
    ap.add_argument("--parts", default="lexical,ivfpq")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--recall-queries", type=int, default=300)
    ap.add_argument(
        "--dssm",
        default=str(REPO / "results" / "models" / "scale-dssm"),
        help="a trained DSSM (`semsearch train dssm --data homedepot --out DIR`); '' skips the vectors",
    )
    ap.add_argument("--hnsw-max", type=int, default=1_000_000, help="build HNSW for sizes up to this")
    ap.add_argument("--pg-size", type=int, default=0, help="load this many vectors into pgvector (0: not run)")
    ap.add_argument("--threads", type=int, default=1, help="faiss threads (queries are single, one at a time)")
    ap.add_argument("--work", default=str(REPO / "results" / "scale"))
    ap.add_argument("--out", default="results/bench/scale.json")
    ap.add_argument("--quick", action="store_true", help="smoke test: 4,000 and 8,000 titles, an untrained DSSM")
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.queries, args.recall_queries, args.dssm, args.hnsw_max = "4000,8000", 40, 40, "untrained", 8000
    if args.child:
        return child(args)
    if args.dssm and args.dssm != "untrained" and not Path(args.dssm).is_dir():
        sys.exit(
            f"scale.py: no trained DSSM at {args.dssm} (train one: .venv/bin/semsearch train dssm --data "
            f"homedepot --out {args.dssm}), or pass --dssm '' to skip the vector indexes"
        )
    hw = hardware(("numpy", "numba", "faiss-cpu"))
    print(hardware_line(hw), flush=True)
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        res = Path(args.work) / f"size-{n}.json"
        res.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            __file__,
            "--child",
            str(n),
            "--child-out",
            str(res),
            "--dssm",
            args.dssm,
            "--queries",
            str(args.queries),
            "--recall-queries",
            str(args.recall_queries),
            "--hnsw-max",
            str(args.hnsw_max),
        ] + passed_on(sys.argv[1:])
        print(f"{n:,} titles ...", flush=True)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        r = json.loads(res.read_text())
        r["wall_s"] = time.perf_counter() - t0
        rows.append(r)
        print(json.dumps(r, indent=1), flush=True)
    summary = summarise(rows)
    write_json(
        {"hardware": hw, "sizes": rows, "extrapolated": summary["extrapolated"], "summary": summary["rows"]}, args.out
    )
    print(summary["table"])


def summarise(rows: list[dict]) -> dict:

    lines = [
        "| engine | titles | build | resident (GB) | p50 (ms) | p99 (ms) | recall@10 | measured? |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    srows: list[dict] = []
    extra: dict = {}

    def series(get):  # type: ignore[no-untyped-def]
        xs, ys = [], []
        for r in rows:
            try:
                y = get(r)
            except (KeyError, TypeError):
                continue
            if y is not None:
                xs.append(r["titles"])
                ys.append(float(y))
        return xs, ys

    engines = {
        "BM25 (top-10, pruning auto)": (
            lambda r: r["lexical"]["build_s"],
            lambda r: r.get("rss_kept_anon_mb", r["rss_kept_mb"]) / 1024,
            lambda r: r["lexical"].get("top10_auto", r["lexical"]["top10_off"])["p50_ms"],
            lambda r: r["lexical"].get("top10_auto", r["lexical"]["top10_off"])["p99_ms"],
            lambda r: None,
        ),
        "IVF-PQ + re-scoring": (
            lambda r: r["ivfpq"]["build_s"] + r["encode_s"],
            lambda r: r["ivfpq"].get("resident_anon_mb", r["ivfpq"]["resident_mb"]) / 1024,
            lambda r: r["ivfpq"]["p50_ms"],
            lambda r: r["ivfpq"]["p99_ms"],
            lambda r: r["ivfpq"]["recall@10"],
        ),
        "HNSW (M 32)": (
            lambda r: r["hnsw"]["build_s"],
            lambda r: r["hnsw"]["bytes_per_doc"] * r["titles"] / 2**30,
            lambda r: r["hnsw"]["p50_ms"],
            lambda r: r["hnsw"]["p99_ms"],
            lambda r: r["hnsw"]["recall@10"],
        ),
        "pgvector HNSW": (
            lambda r: r["pgvector"]["build_s"],
            lambda r: r["pgvector"]["bytes_per_doc"] * r["pgvector"]["docs"] / 2**30,
            lambda r: r["pgvector"]["p50_ms"],
            lambda r: r["pgvector"]["p99_ms"],
            lambda r: r["pgvector"]["recall@10"],
        ),
    }
    for name, (b, mem, p50, p99, rec) in engines.items():
        measured = {}
        for r in rows:
            try:
                n = r["pgvector"]["docs"] if name.startswith("pgvector") else r["titles"]
                measured[n] = (b(r), mem(r), p50(r), p99(r), rec(r))
            except (KeyError, TypeError):
                continue
        if not measured:
            continue
        xs = sorted(measured)
        for n in xs:
            bb, mm, a, z, rc = measured[n]
            lines.append(
                f"| {name} | {n:,} | {bb:,.0f} s | {mm:.2f} | {a:.2f} | {z:.2f} | "
                f"{'' if rc is None else f'{rc:.3f}'} | measured |"
            )
        for at in (10_000_000, 100_000_000):
            if at in measured:
                continue
            cols = [fit(xs, [measured[x][i] for x in xs], at) if i < 2 or len(xs) > 1 else None for i in range(4)]
            extra.setdefault(name, {})[at] = cols
            if cols[0] is None or cols[1] is None:
                continue
            lat = "| |" if cols[2] is None or cols[3] is None else f"| {cols[2]:.1f} | {cols[3]:.1f} |"
            lines.append(
                f"| {name} | {at:,} | {cols[0]:,.0f} s | {cols[1]:.1f} {lat} | "
                f"extrapolated from {', '.join(f'{x:,}' for x in xs)} |"
            )
        at100 = measured.get(100_000_000) or extra.get(name, {}).get(100_000_000)
        if at100 and at100[1]:
            extra.setdefault(name, {})["machines_100M"] = math.ceil(at100[1] / BOX_GB)
    for r in rows:
        if r["titles"] == 10_000_000 or r is rows[-1]:
            n = r["titles"]
            lx = r.get("lexical", {})
            t10 = lx.get("top10_auto") or lx.get("top10_off")
            if t10:
                srows.append(
                    summary_row(
                        f"BM25 p99, {n:,} synthetic titles, top-10, one query at a time",
                        "ms",
                        t10["p99_ms"],
                        "the issue's goal",
                        GOAL_LEXICAL_P99_MS,
                        target="< 50 ms at 10M",
                        met=t10["p99_ms"] < GOAL_LEXICAL_P99_MS if n >= 10_000_000 else None,
                        higher_is_better=False,
                    )
                )
            if "ivfpq" in r:
                srows.append(
                    summary_row(
                        f"IVF-PQ + re-scoring p99, {n:,} (recall@10 {r['ivfpq']['recall@10']:.3f})",
                        "ms",
                        r["ivfpq"]["p99_ms"],
                        "the issue's goal",
                        GOAL_VECTOR_P99_MS,
                        target="< 10 ms at 10M",
                        met=r["ivfpq"]["p99_ms"] < GOAL_VECTOR_P99_MS if n >= 10_000_000 else None,
                        higher_is_better=False,
                    )
                )
                srows.append(
                    summary_row(
                        f"resident, BM25 + IVF-PQ, {n:,} titles (anonymous memory)",
                        "GB",
                        r.get("rss_everything_anon_mb", r["rss_everything_mb"]) / 1024,
                        "the issue's budget",
                        GOAL_RESIDENT_GB,
                        target="< 16 GB at 10M",
                        met=r.get("rss_everything_anon_mb", r["rss_everything_mb"]) / 1024 < GOAL_RESIDENT_GB
                        if n >= 10_000_000
                        else None,
                        higher_is_better=False,
                    )
                )
    machines = [
        f"- {k}: {v['machines_100M']} machine(s) of 16 GB usable for 100M titles (memory alone)"
        for k, v in extra.items()
        if "machines_100M" in v
    ]
    return {
        "rows": srows,
        "extrapolated": {k: {str(a): c for a, c in v.items()} for k, v in extra.items()},
        "table": "\n".join(lines + [""] + machines),
    }


if __name__ == "__main__":
    main()
