"""Vector search speed on homedepot titles: encoding throughput, then faiss Flat (exact), HNSW and
IVF-PQ on the SAME embeddings in one process.

Measured:
  * encoding throughput (titles/s): BERT(rep) (``bert-rep``, off-the-shelf all-MiniLM-L6-v2,
    CPU) on ``--encode-sample`` titles, and DSSM (300-300-128 over letter
    trigrams; untrained weights, which encode exactly as fast as trained ones) on all titles;
  * per index kind: build time (s; IVF-PQ includes k-means training), size (bytes per document
    of the serialised faiss index, ids excluded) and the resident-memory increase while building,
    single-query k-NN latency p50 / p99 (ms, one query per call, ``--queries`` queries), batch
    throughput (queries/s, all queries in one call, median of 3), and recall@k of the k-NN lists
    against the exact Flat index (index quality, not relevance). Ratios are against Flat in the
    same run. A second HNSW / IVF-PQ row changes only the search effort (efSearch / nprobe); the
    last row is IVF-PQ with twice the code bytes (4-dim sub-quantisers).
The indexed vectors are BERT(rep)'s title embeddings (``--vectors minilm``, 384-d; read from the
embedding cache the Table 3 spec writes under results/models/embeddings when present, else
encoded here, about 15 min on one core for all 54,667 titles) or DSSM's (``--vectors dssm``).
Queries: homedepot queries of every split, encoded by the same model. faiss and torch use
``--threads`` threads (default 1).

Run (prints a table; writes JSON to --out, default results/bench/vector_speed.json):
    .venv/bin/python benchmarks/vector_speed.py            # full size
    .venv/bin/python benchmarks/vector_speed.py --quick    # smoke test: 300 titles, 50 queries
Data come from $SEMSEARCH_DATA (default ../shared/data). Benchmarks print; they never fail on speed.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

from _common import REPO, hardware, hardware_line, median_time, rss_mb, summary_row, write_json
from semsearch.data import open_dataset
from semsearch.index import SemanticRetriever, VectorIndex, recall_at_k, set_threads
from semsearch.plugins import create_model
from semsearch.text import TrigramHasher

TARGET_RECALL = 0.95  # IVF-PQ with exact re-scoring, recall@10 against Flat (the speed issue)
TARGET_MEMORY = 5.0  # ... at >= 5x less resident memory than Flat
# make serve's MiniLM title vectors: the static query encoder's index (MiniLM's document vectors), or the
# MiniLM bundle's before it
SERVED = next(
    (
        d
        for d in (REPO / "bundles" / "homedepot" / "models" / m / "index" for m in ("static-query", "bert-rep"))
        if (d / "vector_index.json").is_file()
    ),
    REPO / "bundles" / "homedepot" / "models" / "static-query" / "index",
)


def bert_rep_encoder():  # type: ignore[no-untyped-def]
    """The BERT(rep) encoder benchmarked: off-the-shelf MiniLM, unit vectors (cosine as inner
    product), through ONNX Runtime fp32 when it is installed (the vectors torch gives)."""
    m = create_model("bert-rep", normalize=True)
    from semsearch.models import onnxrt

    if onnxrt.available():
        m.use_onnx("fp32")
    return m


def synthetic(vecs: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """``n`` unit vectors shaped like the trained ones: each a random convex mix of two trained
    vectors plus 5 % Gaussian noise, renormalised (isotropic random vectors would make every
    index look alike; these keep the clusters of real titles)."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, vecs.shape[1]), dtype=np.float32)
    for s in range(0, n, 100_000):
        e = min(n, s + 100_000)
        a, b = rng.integers(0, len(vecs), e - s), rng.integers(0, len(vecs), e - s)
        w = rng.uniform(0.6, 1.0, (e - s, 1)).astype(np.float32)
        x = (
            w * vecs[a]
            + (1 - w) * vecs[b]
            + 0.05 * rng.normal(size=(e - s, vecs.shape[1])).astype(np.float32) / np.sqrt(vecs.shape[1])
        )
        out[s:e] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def dssm_encoder(titles: list[str]):  # type: ignore[no-untyped-def]
    m = create_model("dssm")
    m.build(TrigramHasher.fit(titles, max_words=int(m.params()["max_words"])))
    return m


def titles_per_s(encoder, titles: list[str]) -> float:  # type: ignore[no-untyped-def]
    encoder.encode_documents(titles[:8])  # warm-up (lazy loading, first-call overheads)
    t0 = time.perf_counter()
    encoder.encode_documents(titles)
    return len(titles) / (time.perf_counter() - t0)


def ivfpq_params(n: int, dim: int) -> dict[str, int]:
    """IVF-PQ settings that fit the collection: ~n/39 lists up to 256 (faiss wants 39 training
    points per centroid), 8-dim sub-quantisers, 8 bits (fewer on tiny collections)."""
    m = max(1, dim // 8)
    while dim % m:
        m -= 1
    return {
        "nlist": max(1, min(256, n // 39)) if n < 200_000 else 1024,
        "m": m,
        "nbits": 8 if n >= 256 else max(1, int(math.log2(n))),
        "nprobe": 16,
        "rerank": 0,
    }


def finer_m(dim: int) -> int:
    """Sub-quantisers of 4 dimensions (twice the codes of ``ivfpq_params``) where dim allows."""
    m = max(1, dim // 4)
    while dim % m:
        m -= 1
    return m


def measure(ix: VectorIndex, queries: np.ndarray, k: int) -> dict[str, float]:
    lat = []
    for i in range(len(queries)):
        t0 = time.perf_counter()
        ix.search(queries[i : i + 1], k)
        lat.append(time.perf_counter() - t0)
    batch, hits = median_time(lambda: ix.search(queries, k), 3)
    ms = np.array(lat) * 1000
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "batch_qps": len(queries) / batch,
        "hits": hits,
    }  # type: ignore[dict-item]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny run for smoke tests")
    ap.add_argument("--docs", type=int, default=0, help="index only the first N titles (0 = all)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--encode-sample", type=int, default=2000, help="titles the transformer encodes for its speed")
    ap.add_argument("--vectors", choices=["minilm", "dssm"], default="minilm")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument(
        "--scale",
        type=int,
        default=0,
        help="also index this many synthetic vectors made from the trained ones (e.g. 1000000)",
    )
    ap.add_argument(
        "--skip-encoding",
        action="store_true",
        help="no encoding-speed measurement (make bench: encode_speed.py measures it)",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", default=str(REPO / "results" / "models" / "embeddings"))
    ap.add_argument("--out", default="results/bench/vector_speed.json")
    args = ap.parse_args()
    if args.quick:
        args.docs, args.queries, args.encode_sample = (
            args.docs or 300,
            min(args.queries, 50),
            min(args.encode_sample, 50),
        )

    import torch

    torch.set_num_threads(args.threads)
    set_threads(args.threads)
    hw = hardware(("numpy", "faiss-cpu", "torch", "sentence-transformers"))
    print(
        f"hardware: {hardware_line(hw)}; threads (faiss, torch) = {args.threads}, OMP_NUM_THREADS = "
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')}"
    )

    ds = open_dataset("homedepot")
    corpus = ds.corpus()
    ids, titles = corpus.ids, corpus.titles
    if args.docs:
        ids, titles = ids[: args.docs], titles[: args.docs]
    queries = list(ds.queries().values())[: args.queries]

    bert, dssm = bert_rep_encoder(), dssm_encoder(titles)
    sample = titles[: args.encode_sample]
    enc: dict[str, float] = {}
    if not args.skip_encoding:
        enc = {
            "bert_rep_titles_per_s": titles_per_s(bert, sample),
            "bert_rep_sample": len(sample),
            "dssm_titles_per_s": titles_per_s(dssm, titles),
            "dssm_sample": len(titles),
        }
        print(
            f"encoding: BERT(rep) {enc['bert_rep_titles_per_s']:.0f} titles/s ({len(sample)} titles), "
            f"DSSM {enc['dssm_titles_per_s']:.0f} titles/s ({len(titles)} titles): "
            f"DSSM is {enc['dssm_titles_per_s'] / enc['bert_rep_titles_per_s']:.0f}x faster"
        )

    encoder = bert if args.vectors == "minilm" else dssm
    t0 = time.perf_counter()
    if args.vectors == "minilm" and not args.docs and (SERVED / "vector_index.json").is_file():
        served = VectorIndex.load(SERVED)  # the same model's unit title vectors, as make serve indexed them
        assert served.doc_ids == list(ids), "the served bundle indexes other titles"
        vecs = np.array(served.stored_vectors(), dtype=np.float32)
        print(f"title vectors read from {SERVED.relative_to(REPO)}")
    else:
        vecs = SemanticRetriever(encoder, cache=args.cache if args.vectors == "minilm" else None).embed(ids, titles)
    embed_s = time.perf_counter() - t0
    qvecs = np.asarray(encoder.encode_queries(queries), dtype=np.float32)
    n, dim = vecs.shape
    print(
        f"vectors: {args.vectors}, {n} titles x {dim} (embedded or read from cache in {embed_s:.1f} s), "
        f"{len(queries)} queries, k = {args.k}"
    )

    rows = run_configs(ids, vecs, qvecs, args)
    scaled: list[dict] = []
    if args.scale:
        big = synthetic(vecs, args.scale)
        big_ids = [f"s{i:08d}" for i in range(args.scale)]
        print(f"synthetic: {args.scale:,} vectors mixed from the trained ones")
        scaled = run_configs(big_ids, big, qvecs, args, label=f"{args.scale:,} synthetic")
    summary = summarise(rows, args.k) + (summarise(scaled, args.k) if scaled else [])
    path = write_json(
        {
            "summary": summary,
            "hardware": hw,
            "args": vars(args),
            "encoding": enc,
            "vectors": {"model": args.vectors, "n": n, "dim": dim, "embed_or_cache_s": embed_s},
            "results": rows,
            "scaled": scaled,
        },
        args.out,
    )
    print(f"wrote {path}")


def summarise(rows: list[dict], k: int) -> list[dict]:
    """The make bench lines: re-scored IVF-PQ's recall and memory against Flat, HNSW's latency and
    recall against Flat, our wrapper against raw faiss on the same HNSW."""
    flat = rows[0]
    best = max(
        (r for r in rows if r["index"] == "ivfpq" and r["params"].get("rerank")), key=lambda r: r[f"recall@{k}_vs_flat"]
    )
    hnsw = next(r for r in rows if r["index"] == "hnsw")
    n = f"{flat['n']:,}"
    ratio = flat["bytes_per_doc"] / best["bytes_per_doc"]
    return [
        summary_row(
            f"IVF-PQ + exact re-scoring recall@{k} vs Flat, {n} vectors ({best['label']})",
            "recall",
            best[f"recall@{k}_vs_flat"],
            "Flat (exact)",
            1.0,
            target=f"recall@10 >= {TARGET_RECALL} at >= {TARGET_MEMORY:.0f}x less memory",
            met=best[f"recall@{k}_vs_flat"] >= TARGET_RECALL and ratio >= TARGET_MEMORY,
        ),
        summary_row(
            f"IVF-PQ + re-scoring resident bytes/doc, {n} vectors (full vectors memory-mapped: "
            f"{best['disk_bytes_per_doc']:.0f} B/doc on disk)",
            "B/doc",
            best["bytes_per_doc"],
            "Flat",
            flat["bytes_per_doc"],
            target=f">= {TARGET_MEMORY:.0f}x less than Flat",
            met=ratio >= TARGET_MEMORY,
            higher_is_better=False,
        ),
        summary_row(
            f"HNSW p50 search, {n} vectors (recall@{k} {hnsw[f'recall@{k}_vs_flat']:.3f})",
            "ms",
            hnsw["p50_ms"],
            "Flat (exact)",
            flat["p50_ms"],
            target="",
            met=None,
            higher_is_better=False,
        ),
        summary_row(
            f"HNSW p50 search through our VectorIndex, {n} vectors",
            "ms",
            hnsw["p50_ms"],
            "raw faiss, same index",
            hnsw["raw_faiss_p50_ms"],
            target="",
            met=None,
            higher_is_better=False,
        ),
    ]


def run_configs(
    ids: list[str], vecs: np.ndarray, qvecs: np.ndarray, args: argparse.Namespace, label: str = ""
) -> list[dict]:
    """Flat, HNSW, HNSW over 8-bit codes and IVF-PQ (without and with exact re-scoring) over
    ``vecs``: one row each."""
    n, dim = vecs.shape
    ivf = ivfpq_params(n, dim)
    configs = [
        ("flat", {}, {}),
        ("hnsw", {"M": 32, "efConstruction": 200 if n < 200_000 else 100, "efSearch": 128}, {}),
        ("hnsw", None, {"efSearch": 32}),
        ("ivfpq", ivf, {}),
        ("ivfpq", None, {"nprobe": 64}),
        ("ivfpq", {**ivf, "nprobe": 64, "rerank": 200}, {}),
        ("ivfpq", None, {"rerank": 100}),
    ]
    if n < 200_000:  # HNSW over 8-bit codes, re-scored exactly (make serve's index; not built at the synthetic scale)
        configs.insert(3, ("hnswsq", {"M": 32, "efConstruction": 200, "efSearch": 128}, {}))
    rows: list[dict] = []
    built: dict[str, VectorIndex] = {}
    exact = None
    for kind, params, search in configs:
        if params is not None:
            before = rss_mb()
            t0 = time.perf_counter()
            ix = VectorIndex.build(ids, vecs, kind, metric="ip", model=args.vectors, **params)
            build_s, grew = time.perf_counter() - t0, rss_mb() - before
            built[kind] = ix
        else:
            ix = built[kind]
            ix.set_search_params(**search)
            build_s = grew = float("nan")
        m = measure(ix, qvecs, args.k)
        hits = m.pop("hits")
        if kind == "flat":
            exact = hits
        row = {
            "index": kind,
            "params": dict(ix.params),
            "build_s": build_s,
            "bytes_per_doc": ix.bytes_per_doc(),
            "disk_bytes_per_doc": 4.0 * dim
            if kind == "hnswsq" or (kind == "ivfpq" and ix.params.get("rerank"))
            else 0.0,
            "index_mib": ix.nbytes() / 2**20,
            "rss_growth_mib": grew,
            **m,
            "n": n,
            f"recall@{args.k}_vs_flat": recall_at_k(hits, exact, args.k),
            "label": ",".join(f"{k}={v}" for k, v in ix.params.items()),
        }
        if kind == "hnsw" and "raw_faiss_p50_ms" not in [key for r in rows for key in r]:
            raw = ix._faiss  # the same faiss index called directly: our wrapper's overhead
            lat = []
            for i in range(len(qvecs)):
                t0 = time.perf_counter()
                raw.search(qvecs[i : i + 1], args.k)
                lat.append(time.perf_counter() - t0)
            row["raw_faiss_p50_ms"] = float(np.percentile(np.array(lat) * 1000, 50))
        rows.append(row)
    flat = rows[0]
    for r in rows:
        r["p50_speedup_vs_flat"] = flat["p50_ms"] / r["p50_ms"]
        r["batch_speedup_vs_flat"] = r["batch_qps"] / flat["batch_qps"]

    if label:
        print(f"-- {label}")
    head = (
        f"{'index':<46}{'build s':>8}{'B/doc':>8}{'MiB':>7}{'RSS+':>7}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'x flat':>7}{'batch q/s':>10}{'x flat':>7}{f'R@{args.k}':>7}"
    )
    print(head)
    for r in rows:
        label = r["index"] + " " + ",".join(f"{k}={v}" for k, v in r["params"].items())
        print(
            f"{label:<46}{r['build_s']:>8.2f}{r['bytes_per_doc']:>8.0f}{r['index_mib']:>7.1f}"
            f"{r['rss_growth_mib']:>7.0f}{r['p50_ms']:>8.3f}{r['p99_ms']:>8.3f}{r['p50_speedup_vs_flat']:>7.1f}"
            f"{r['batch_qps']:>10.0f}{r['batch_speedup_vs_flat']:>7.1f}{r[f'recall@{args.k}_vs_flat']:>7.3f}"
        )
    return rows


if __name__ == "__main__":
    main()
