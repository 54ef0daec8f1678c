"""Train a model through the Python API, save it, load it back and score a test split with it.

The same steps as `semsearch train` followed by `semsearch run --candidates judged` and
`semsearch evaluate`: the judged documents of each test query are re-ranked (the papers' setting).
Run from the repository root:

    .venv/bin/python examples/train_model.py                          # a DSSM on homedepot, 2 epochs
    .venv/bin/python examples/train_model.py --param epochs=5 --param negatives=50
    .venv/bin/python examples/train_model.py --model clsm --param negatives=50  # -> models/example-clsm
    .venv/bin/python examples/train_model.py --model lsa --param dim=100        # not gradient-trained: no epochs

``--param NAME=VALUE`` (a JSON value, or else a string) names model parameters and training
arguments alike; ``semsearch.training.recipe`` splits them. Data sets are named under
$SEMSEARCH_DATA (default ../shared/data), or given as a folder.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from semsearch.data import EvalSet, TrainingData, open_dataset
from semsearch.evaluation import evaluate
from semsearch.models import rank
from semsearch.plugins import create_model, load_model
from semsearch.training import args_type, fit, recipe

REPO = Path(__file__).resolve().parents[1]
QUICK = {"epochs": 2}  # a short run; --param epochs=N overrides it
METRICS = ["ndcg@1", "ndcg@3", "ndcg@10"]


def parse_param(pair: str) -> tuple[str, object]:
    name, eq, value = pair.partition("=")
    if not eq or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {pair!r}")
    try:
        return name.strip(), json.loads(value)
    except json.JSONDecodeError:
        return name.strip(), value


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="homedepot", help="data set name or folder (default: %(default)s)")
    p.add_argument("--model", default="dssm", help="a trainable kind: dssm, clsm, knrm, lsa, plsa, ...")
    p.add_argument("--param", type=parse_param, action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--split", default="train", help="qrels split to learn from")
    p.add_argument("--dev", default="dev", help="split for early stopping ('' for none)")
    p.add_argument("--test", default="test", help="split to score the saved model on")
    p.add_argument("--threshold", type=int, default=3, help="lowest grade that makes a positive pair")
    p.add_argument("--fields", default="title", help="document fields: title, text or title+text")
    p.add_argument("--out", type=Path, help="where to save the model (default: models/example-MODEL)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    args = p.parse_args()
    args.out = args.out or REPO / "models" / f"example-{args.model}"

    # model parameters and training arguments, validated before any data is read
    takes = args_type(args.model)  # the kind's training arguments (None: it takes none)
    quick = {k: v for k, v in QUICK.items() if takes is not None and k in takes.names()}
    try:
        model_kw, train_args = recipe(args.model, {**quick, **dict(args.param)}, where="--param")
    except ValueError as e:  # an unknown kind, parameter or value, named
        p.error(str(e))
    model = create_model(args.model, **model_kw)

    ds = open_dataset(args.data)
    data = TrainingData.from_dataset(ds, args.split, threshold=args.threshold, fields=args.fields)
    dev = EvalSet.judged(ds, args.dev) if args.dev else None
    log = fit(model, data, dev, progress=not args.quiet, args=train_args)
    model.save(args.out)
    (args.out / "training.json").write_text(json.dumps(log, indent=1, default=str), encoding="utf-8")

    # a saved model is a directory; load_model reads any kind back
    trained = load_model(args.out)
    corpus = ds.corpus()
    trained.index(corpus.ids, corpus.joined(args.fields))
    qrels = ds.qrels(args.test)
    queries = ds.queries()
    run = rank(trained, {q: queries[q] for q in qrels}, {q: list(docs) for q, docs in qrels.items()})
    result = evaluate(run, qrels, METRICS)

    best_dev = log.get("best_dev")
    if not (isinstance(best_dev, float) and math.isfinite(best_dev)):
        best_dev = None  # no dev split (or a family that logs none)
    summary = {
        "model": args.model,
        "out": str(args.out),
        "positive_pairs": len(data.positives),
        # what the gradient trainers log (other families log their own keys: see training.json)
        "best_epoch": log.get("best_epoch"),
        "best_dev": best_dev,
        "stopped": log.get("stopped"),
        "test_queries": result.n_queries,
        "test": result.mean,
    }
    if args.json:
        print(json.dumps(summary))
        return
    print(
        f"{args.model} trained on {len(data.positives):,} positive pairs of {ds.name}/{args.split}, saved to {args.out}"
    )
    if log.get("stopped"):
        kept = f"; kept epoch {log['best_epoch']}" if "best_epoch" in log else ""
        kept += f" (dev {best_dev:.4f})" if best_dev is not None else ""
        print(log["stopped"] + kept)
    print(f"{ds.name}/{args.test}, {result.n_queries} queries, judged documents re-ranked:")
    for metric, value in result.mean.items():
        print(f"  {metric:8} {value:.4f}")


if __name__ == "__main__":
    main()
