"""Projection models' training speed on homedepot: S2Net seconds per epoch and pairs/s, and the
fit time of LSA, CL-LSA and OPCA (and the PCA solvers underneath).

Training data: homedepot's train positives (grade >= 3, 35,658 query-title pairs), TF-IDF over
the 40k highest-DF terms (16,041 on homedepot), k = 100. Measured, in one process:
  * fit time (s) of LSA, CL-LSA, OPCA (reduce = 200) and S2Net (LSA init + ``--epochs`` epochs,
    no early stopping, so every run does the same work);
  * S2Net seconds per epoch and training pairs per second (each pair = 1 query, its title and
    4 random negative titles; minibatch 1024, Adam, sparse inputs), mean over the epochs;
  * the PCA step alone (70k texts x 16k terms, k = 100) with the randomized subspace iteration
    that the models use and with ARPACK (``scipy.sparse.linalg.svds``) for reference;
  * encoding throughput (titles/s) of the trained S2Net over the whole corpus.
Thread counts (BLAS, torch) are printed: on a shared machine oversubscribed BLAS threads are
much slower than one thread (set OPENBLAS_NUM_THREADS=1 there).

Run (prints a table; writes JSON to --out, default results/bench/projection_speed.json):
    .venv/bin/python benchmarks/projection_speed.py            # full size, about a minute
    .venv/bin/python benchmarks/projection_speed.py --quick    # smoke test: 500 pairs, k = 10
Data come from $SEMSEARCH_DATA (default ../shared/data). Benchmarks print; they never fail on speed.
"""

from __future__ import annotations

import argparse
import os
import time

import scipy.sparse as sp

from _common import hardware, hardware_line, maxrss_mb, write_json
from semsearch.data import TrainingData, open_dataset
from semsearch.plugins import create_model
from semsearch.training import fit, recipe
from semsearch.training.projection import pca


def load(args: argparse.Namespace) -> TrainingData:
    """Train positives of homedepot (in --quick: the first ``--max-pairs`` of whatever split
    exists, any positive grade, so that tiny generated data sets work too)."""
    ds = open_dataset("homedepot")
    split = "train" if "train" in ds.splits else sorted(ds.splits)[0]
    data = TrainingData.from_dataset(ds, split, threshold=args.threshold)
    if args.max_pairs:
        data = TrainingData(data.queries, data.doc_ids, data.doc_texts, data.positives[: args.max_pairs])
    return data


def timed_fit(name: str, data: TrainingData, **settings) -> tuple[float, dict, object]:
    kw, targs = recipe(name, settings)
    model = create_model(name, **kw)
    t0 = time.perf_counter()
    log = fit(model, data, args=targs, progress=False)
    return time.perf_counter() - t0, log, model


def threads() -> dict[str, object]:
    import torch

    out: dict[str, object] = {"torch_threads": torch.get_num_threads()}
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        out[var] = os.environ.get(var, "unset")
    try:
        from threadpoolctl import threadpool_info

        out["blas_threads"] = [p.get("num_threads") for p in threadpool_info() if p.get("user_api") == "blas"]
    except ImportError:
        pass
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke test: 500 pairs, k = 10, 1 epoch")
    ap.add_argument("--epochs", type=int, default=3, help="S2Net epochs to time")
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument(
        "--out", default="results/bench/projection_speed.json", help="JSON output (relative: to the repo root)"
    )
    args = ap.parse_args()
    args.threshold, args.max_pairs, reduce = 3, None, 200
    if args.quick:
        args.threshold, args.max_pairs, args.dim, args.epochs, reduce = 1, 500, 10, 1, 20

    hw = hardware(("numpy", "scipy", "torch"))
    th = threads()
    print("hardware:", hardware_line(hw), flush=True)
    print("threads:", ", ".join(f"{k}={v}" for k, v in th.items()), flush=True)
    t0 = time.perf_counter()
    data = load(args)
    print(f"{len(data.positives):,} training pairs, {len(data.doc_ids):,} pool titles; k = {args.dim}", flush=True)

    res: dict[str, dict] = {}
    for name, settings in (("lsa", {}), ("cl-lsa", {}), ("opca", {"reduce": reduce})):
        secs, log, _ = timed_fit(name, data, dim=args.dim, **settings)
        res[name] = {"fit_s": secs, "vocabulary": log["vocabulary"]}
        print(f"  {name:7} fit {secs:6.2f} s", flush=True)
    secs, log, s2net = timed_fit("s2net", data, dim=args.dim, epochs=args.epochs, patience=args.epochs)
    epochs = log["epochs"]
    res["s2net"] = {
        "fit_s": secs,
        "init_s": log["init_seconds"],
        "epochs": len(epochs),
        "seconds_per_epoch": sum(e["seconds"] for e in epochs) / len(epochs),
        "pairs_per_s": sum(e["pairs_per_s"] for e in epochs) / len(epochs),
        "pairs": log["pairs"],
        "negatives": 4,
        "batch_size": 1024,
    }
    t = time.perf_counter()
    s2net.encode_documents(data.doc_texts)  # type: ignore[attr-defined]
    res["s2net"]["encode_titles_per_s"] = len(data.doc_texts) / (time.perf_counter() - t)

    queries, titles = data.pair_texts()
    _, _, lsa = timed_fit("lsa", data, dim=args.dim)
    X = sp.vstack([lsa.tfidf(queries), lsa.tfidf(titles)]).tocsr()
    pca_times = {}
    for method in ("randomized", "arpack"):
        t = time.perf_counter()
        pca(X, args.dim, method=method)
        pca_times[method] = time.perf_counter() - t
    res["pca"] = {
        "shape": list(X.shape),
        "nnz": int(X.nnz),
        "k": args.dim,
        **{f"{m}_s": v for m, v in pca_times.items()},
    }

    s = res["s2net"]
    print(f"\nhomedepot: {s['pairs']:,} pairs, TF-IDF over {res['lsa']['vocabulary']:,} terms, k = {args.dim}")
    head = f"{'':44} {'value':>12}"
    print(head + "\n" + "-" * len(head))
    rows = [
        ("LSA fit, s", res["lsa"]["fit_s"]),
        ("CL-LSA fit, s", res["cl-lsa"]["fit_s"]),
        (f"OPCA fit (reduce = {reduce}), s", res["opca"]["fit_s"]),
        (f"S2Net fit ({s['epochs']} epochs + LSA init), s", s["fit_s"]),
        ("S2Net seconds per epoch", s["seconds_per_epoch"]),
        ("S2Net training pairs/s (1 + 4 titles each)", s["pairs_per_s"]),
        ("S2Net encoding, titles/s", s["encode_titles_per_s"]),
        (f"PCA {X.shape[0]:,} x {X.shape[1]:,}, randomized, s", pca_times["randomized"]),
        (f"PCA {X.shape[0]:,} x {X.shape[1]:,}, ARPACK svds, s", pca_times["arpack"]),
    ]
    for label, v in rows:
        print(f"{label:44} {v:12,.2f}")
    path = write_json({"hardware": hw, "threads": th, "quick": args.quick, "results": res}, args.out)
    print(f"\npeak RSS of the process: {maxrss_mb():,.0f} MB; total {time.perf_counter() - t0:.0f} s; wrote {path}")


if __name__ == "__main__":
    main()
