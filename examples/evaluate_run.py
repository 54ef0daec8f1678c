"""Evaluate TREC runs against a data set's qrels, with paired t-tests against the first run.

Run from the repository root:

    .venv/bin/python examples/evaluate_run.py                        # every run shipped with trec-dl-2019
    .venv/bin/python examples/evaluate_run.py bm25 tasb --metrics ndcg@10 recall@100 --gain linear
    .venv/bin/python examples/evaluate_run.py my.trec --qrels my-qrels.tsv

A run is a name under the data set's runs/ folder or a TREC run file (``qid Q0 docid rank score
tag``); qrels are BEIR TSV or TREC 4-column. Data sets are named under $SEMSEARCH_DATA (default
../shared/data), or given as a folder.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from semsearch.data import load_qrels, open_dataset, read_run
from semsearch.evaluation import evaluate, paired_ttest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "runs", nargs="*", help="run names or files (default: every run of --data); the first is the baseline"
    )
    p.add_argument("--data", default="trec-dl-2019", help="data set name or folder (default: %(default)s)")
    p.add_argument("--split", default="test", help="qrels split of --data (default: %(default)s)")
    p.add_argument("--qrels", type=Path, help="a qrels file instead of --data's split")
    p.add_argument("--metrics", nargs="+", default=["ndcg@10", "recall@100", "mrr@10"])
    p.add_argument("--gain", default="exp", choices=["exp", "linear"], help="nDCG gain: 2^g-1 or g (trec_eval)")
    p.add_argument("--rel-threshold", type=int, default=1, help="lowest grade that is relevant (binary metrics)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    args = p.parse_args()

    # the data set is read only when something comes from it: its qrels, a run by name, or every run
    needs_data = args.qrels is None or not args.runs or not all(Path(r).is_file() for r in args.runs)
    ds = open_dataset(args.data) if needs_data else None
    qrels = load_qrels(args.qrels) if args.qrels else ds.qrels(args.split)  # type: ignore[union-attr]
    files: dict[str, Path] = {}
    for r in args.runs or list(ds.runs):  # type: ignore[union-attr]
        path = Path(r) if Path(r).is_file() else ds.runs.get(r) if ds else None
        if path is None:
            p.error(f"no run {r!r}: not a file, nor a run of {args.data} ({', '.join(ds.runs) if ds else 'none'})")
        files[path.stem] = path
    if not files:
        p.error(f"{args.data} has no runs/*.trec: name run files")

    results = {
        name: evaluate(read_run(path), qrels, args.metrics, gain=args.gain, rel_threshold=args.rel_threshold)
        for name, path in files.items()
    }
    base = next(iter(results))
    out: dict[str, dict] = {}
    for name, r in results.items():
        out[name] = {"n_queries": r.n_queries, "mean": r.mean}
        if name != base:  # paired over the queries both runs were scored on
            out[name]["p_vs_" + base] = {m: paired_ttest(r.per_query[m], results[base].per_query[m]).p for m in r.mean}

    if args.json:
        print(json.dumps(out))
        return
    metrics = list(results[base].mean)
    print(f"{'run':24}" + "".join(f"{m:>13}" for m in metrics) + "   queries")
    for name, row in out.items():
        p_values = row.get("p_vs_" + base, {})
        cells = [f"{row['mean'][m]:.4f}{'*' if p_values.get(m, 1.0) < 0.05 else ' '}" for m in metrics]
        print(f"{name:24}" + "".join(f"{c:>13}" for c in cells) + f"   {row['n_queries']:>7}")
    print(f"* differs from {base} at p < 0.05 (paired two-sided t-test)")


if __name__ == "__main__":
    main()
