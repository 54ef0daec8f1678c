"""Served quality: send a split's queries to a running search service and score what comes back.

This measures search as a user meets it: every query goes through HTTP ``/search`` over the whole
collection the bundle holds (not a re-ranking of each query's judged documents, the papers'
protocol). Unjudged documents count as not relevant. nDCG@1/3/10 use the papers' gain
(2^grade − 1) over every query with a judged document; Recall@10/100 count documents graded at
least ``--rel-threshold`` (3 on Home Depot: the "relevant" half of its 1-3 scale), over the queries
that have one. With ``--baseline RUN`` (a TREC run, e.g. an earlier ``--out-run``),
each metric gets a paired t-test over queries.

    python benchmarks/served_quality.py --url http://127.0.0.1:8000 --data homedepot --split test
    python benchmarks/served_quality.py --bundle bundles/homedepot --data homedepot --split dev
"""

from __future__ import annotations

import argparse
import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from _common import REPO, add_rescore_options, rescore_args, served, write_json
from semsearch.data import open_dataset, read_run, write_run
from semsearch.evaluation import evaluate, paired_ttest

NDCG = ["ndcg@1", "ndcg@3", "ndcg@10"]
RECALL = ["recall@10", "recall@100"]
METRICS = NDCG + RECALL


def score(
    run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], rel_threshold: int
) -> dict[str, dict[str, float]]:
    """Per metric, per query: nDCG over every judged query, recall over those with a relevant document."""
    ndcg = evaluate(run, qrels, NDCG).per_query
    recall = evaluate(run, qrels, RECALL, rel_threshold=rel_threshold).per_query
    return {**ndcg, **recall}


def mean(per_query: dict[str, float]) -> float:
    return sum(per_query.values()) / max(len(per_query), 1)


def fetch_run(
    base: str, queries: dict[str, str], k: int, merge: str | None, threads: int
) -> dict[str, dict[str, float]]:
    """Each query's hits from ``/search`` as a run (query id -> doc id -> a score in rank order)."""
    params = {"k": k, **({"merge": merge} if merge else {})}

    with httpx.Client(base_url=base, timeout=60) as client:

        def one(item: tuple[str, str]) -> tuple[str, dict[str, float]]:
            qid, text = item
            r = client.get("/search", params={"q": text, **params})
            if r.status_code != 200:
                raise SystemExit(f"query {qid} ({text!r}): HTTP {r.status_code}: {r.text[:300]}")
            hits = r.json()["hits"]
            return qid, {h["doc_id"]: float(len(hits) - i) for i, h in enumerate(hits)}  # rank order, ties impossible

        with ThreadPoolExecutor(threads) as pool:
            return dict(pool.map(one, queries.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a running service, e.g. http://127.0.0.1:8000")
    where.add_argument("--bundle", help="a bundle directory to serve on a free loopback port for the run")
    ap.add_argument("--data", required=True, help="the data set whose queries and qrels to use")
    ap.add_argument("--split", default="test")
    ap.add_argument("--k", type=int, default=100, help="hits asked per query (Recall@100 needs 100)")
    ap.add_argument("--merge", default=None, help="the service's merge setting (default: the service's own)")
    ap.add_argument("--rel-threshold", type=int, default=3)
    ap.add_argument("--threads", type=int, default=4, help="requests in flight")
    ap.add_argument("--baseline", default=None, help="a TREC run to compare with (paired t-test)")
    ap.add_argument("--out-run", default=None, help="write the served run here (TREC format)")
    add_rescore_options(ap, "--bundle: ")
    ap.add_argument(
        "--out",
        default=None,
        help="the JSON summary (default: results/bench/served_quality-DATA-SPLIT.json, "
        "so a dev run and a test run do not overwrite each other)",
    )
    args = ap.parse_args()
    args.out = args.out or str(REPO / "results" / "bench" / f"served_quality-{Path(args.data).name}-{args.split}.json")

    ds = open_dataset(args.data)
    qrels = ds.qrels(args.split, check=True)
    texts = ds.queries()
    queries = {q: texts[q] for q in qrels if q in texts and texts[q].strip()}
    ctx = (
        served(args.bundle, 1, rescore_args(args.rescore, args.rescore_weight))
        if args.bundle
        else contextlib.nullcontext()
    )
    with ctx as server:
        base = server.base if server is not None else args.url
        t0 = time.perf_counter()
        run = fetch_run(base, queries, args.k, args.merge, args.threads)
        secs = time.perf_counter() - t0
    result = score(run, qrels, args.rel_threshold)
    out = {
        "data": args.data,
        "split": args.split,
        "k": args.k,
        "merge": args.merge,
        "rel_threshold": args.rel_threshold,
        "rescore": args.rescore,
        "rescore_weight": args.rescore_weight,
        "queries_sent": len(queries),
        "queries_scored": {m: len(v) for m, v in result.items()},
        "seconds": round(secs, 2),
        "mean": {m: mean(v) for m, v in result.items()},
        "source": args.url or args.bundle,
    }
    lines = [
        "| metric | served |" + (" baseline | p |" if args.baseline else ""),
        "|---|---:|" + ("---:|---:|" if args.baseline else ""),
    ]
    base_result = score(read_run(args.baseline), qrels, args.rel_threshold) if args.baseline else None
    for m in METRICS:
        row = f"| {m} | {out['mean'][m]:.4f} |"
        if base_result is not None:
            t = paired_ttest(result[m], base_result[m])
            row += f" {mean(base_result[m]):.4f} | {t.p:.3g} |"
            out.setdefault("baseline", {})[m] = {"mean": mean(base_result[m]), "p_value": t.p}
        lines.append(row)
    if args.out_run:
        write_run(run, args.out_run, tag="served")
    print(
        f"{len(queries)} queries of {args.data}/{args.split} through {out['source']} in {secs:.1f} s; nDCG over "
        f"{len(result['ndcg@10'])} judged queries, recall over the {len(result['recall@10'])} with a document graded "
        f">= {args.rel_threshold}; unjudged = not relevant"
    )
    print("\n".join(lines))
    print(f"written to {write_json(out, args.out)}")


if __name__ == "__main__":
    main()
