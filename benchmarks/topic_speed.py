"""Topic-model training speed: our sparse MAP-EM (PLSA, BLTM, BLTM-PR) against gensim's LdaModel
(online variational Bayes), in one process, on the same corpus and topic count.

Corpus: homedepot's train split, pairs graded >= 3 (35,658 query–title pairs; 30,019 distinct
titles), tokenised with the papers' normalisation. PLSA and gensim both train on the distinct
titles (the same bag-of-words matrix, handed to gensim as its corpus format); BLTM trains on the
pairs (query and title tokens both count). Measured per iteration (EM) or per pass (gensim):
tokens per second = corpus tokens / wall time, median over the iterations run. A gensim pass is
not the same work as one EM iteration — it runs up to ``iterations`` (default 50) variational
updates of every document's γ before each topic update — so the ratio compares "one sweep over the
corpus" of each trainer, which is what a user waits for; our EM uses ``--threads`` threads
(default: the CPUs available, at most 2), gensim's LdaModel one (its LdaMulticore uses processes).

Run (prints a table; writes JSON to --out, default results/bench/topic_speed.json):
    .venv/bin/python benchmarks/topic_speed.py              # 100 topics, 10 EM iterations, 3 gensim passes
    .venv/bin/python benchmarks/topic_speed.py --topics 500
    .venv/bin/python benchmarks/topic_speed.py --quick      # smoke test: 2,000 titles, 10 topics
Data come from $SEMSEARCH_DATA (default ../shared/data). Benchmarks print; they never fail on speed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from _common import hardware, hardware_line, maxrss_mb, write_json
from semsearch.data import TrainingData, open_dataset
from semsearch.models.topic import default_threads
from semsearch.plugins import create_model
from semsearch.text import Analyzer, Vocabulary, count_matrix
from semsearch.training import recipe
from semsearch.training.topic import clear_fit_memo, distinct_titles, fit_pairs, fit_texts, to_gensim_corpus


def ours(name: str, texts, args: argparse.Namespace, threads: int, **params) -> dict:  # type: ignore[no-untyped-def]
    clear_fit_memo()
    kw, targs = recipe(name, dict(topics=args.topics, iterations=args.iterations, tol=0.0, threads=threads, **params))
    m = create_model(name, **kw)
    t0 = time.perf_counter()
    log = fit_pairs(m, *texts, args=targs) if name == "bltm" else fit_texts(m, texts, args=targs)
    its = log["iterations"]
    return {
        "tokens": log["tokens"],
        "iterations": len(its),
        "total_s": time.perf_counter() - t0,
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in its),
        "s_per_iteration": statistics.median(r["seconds"] for r in its),
        "final_loglik_per_token": its[-1]["loglik"] / log["tokens"],
        "threads": threads,
    }


def gensim_lda(titles: list[str], args: argparse.Namespace) -> dict:
    import logging

    from gensim.models import LdaModel

    logging.getLogger("gensim").setLevel(logging.WARNING)
    analyzer = Analyzer()
    tokens = [analyzer(t) for t in titles]
    vocab = Vocabulary.build(tokens)
    counts = count_matrix([vocab.encode(t) for t in tokens], len(vocab), dtype=np.float64)
    counts = counts[np.diff(counts.indptr) > 0]
    corpus = to_gensim_corpus(counts)
    n_tokens = int(counts.sum())
    lda = LdaModel(
        num_topics=args.topics,
        id2word=dict(enumerate(vocab.terms)),
        alpha=50.0 / args.topics,
        eta=0.01,
        random_state=0,
        eval_every=None,
        iterations=50,
    )
    times = []
    for _ in range(args.passes):
        t0 = time.perf_counter()
        lda.update(corpus, passes=1)
        times.append(time.perf_counter() - t0)
    return {
        "tokens": n_tokens,
        "passes": len(times),
        "total_s": sum(times),
        "tokens_per_s": n_tokens / statistics.median(times),
        "s_per_pass": statistics.median(times),
        "bound_per_token": float(lda.bound(corpus[:2000])) / max(1, sum(c for d in corpus[:2000] for _, c in d)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke test: 2,000 titles, 10 topics, 3 iterations, 1 pass")
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--iterations", type=int, default=10, help="EM iterations of our models")
    ap.add_argument("--passes", type=int, default=3, help="gensim passes")
    ap.add_argument("--threads", type=int, default=default_threads(), help="threads of our E-step")
    ap.add_argument("--out", default="results/bench/topic_speed.json", help="JSON output (relative: to the repo root)")
    args = ap.parse_args()
    limit = None
    if args.quick:
        args.topics, args.iterations, args.passes, limit = min(args.topics, 10), 3, 1, 2000

    hw = hardware(("numpy", "scipy", "gensim"))
    print("hardware:", hardware_line(hw), flush=True)
    data = TrainingData.from_dataset(open_dataset("homedepot"), "train", threshold=3, fields="title")
    titles = distinct_titles(data)[:limit]
    queries, pair_titles = data.pair_texts()
    pairs = (queries[:limit], pair_titles[:limit])
    print(
        f"homedepot train: {len(titles):,} distinct titles, {len(pairs[0]):,} pairs; {args.topics} topics", flush=True
    )

    res: dict = {}
    res["plsa"] = ours("plsa", titles, args, args.threads)
    if args.threads != 1:
        res["plsa_1_thread"] = ours("plsa", titles, args, 1)
    res["bltm"] = ours("bltm", pairs, args, args.threads)
    res["bltm_pr"] = ours("bltm", pairs, args, args.threads, pr=True)
    try:
        res["gensim_lda"] = gensim_lda(titles, args)
    except ImportError:
        res["gensim_lda"] = None
        print("gensim is not installed: no reference timing")

    g = res["gensim_lda"]
    print(f"\n{'trainer':42} {'tokens':>10} {'s/sweep':>9} {'tokens/s':>12} {'vs gensim':>10}")
    rows = [
        (f"ours PLSA MAP-EM ({args.threads} threads), titles", res["plsa"], "s_per_iteration"),
        ("ours PLSA MAP-EM (1 thread), titles", res.get("plsa_1_thread"), "s_per_iteration"),
        (f"ours BLTM MAP-EM ({args.threads} threads), pairs", res["bltm"], "s_per_iteration"),
        (f"ours BLTM-PR MAP-EM ({args.threads} threads), pairs", res["bltm_pr"], "s_per_iteration"),
        ("gensim LdaModel online VB (1 thread), titles", g, "s_per_pass"),
    ]
    for label, r, key in rows:
        if r is None:
            continue
        ratio = f"{r['tokens_per_s'] / g['tokens_per_s']:.1f}x" if g else "-"
        print(f"{label:42} {r['tokens']:>10,} {r[key]:>9.3f} {r['tokens_per_s']:>12,.0f} {ratio:>10}")
    if args.threads != 1:
        print(
            "\nthread speed-up of our E-step: "
            f"{res['plsa']['tokens_per_s'] / res['plsa_1_thread']['tokens_per_s']:.2f}x "
            f"with {args.threads} threads"
        )
    path = write_json(
        {"hardware": hw, "topics": args.topics, "iterations": args.iterations, "passes": args.passes, "results": res},
        args.out,
    )
    print(f"peak RSS of the process: {maxrss_mb():,.0f} MB; wrote {path}")


if __name__ == "__main__":
    main()
