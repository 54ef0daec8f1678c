"""The two sparse logs of docs/clicks.md's "Priors" figures, in the Yandex format: synthetic rankings
(5,000 queries, 10 random documents each), and Home Depot's train queries with BM25 (english) over
the product titles, both shown to position-based users (eta 1, eps 0.1), 20,000 impressions of a
Zipf query stream, one list in ten shuffled.

    .venv/bin/python benchmarks/click_prior_logs.py OUT
    .venv/bin/semsearch clicks fit OUT/homedepot.tsv --format yandex --prior 0,0 --seed 0 --out fit.json
"""

from __future__ import annotations

import argparse

import numpy as np

from semsearch.clicks import EventLogWriter, PositionBasedUser, Rankings, simulate
from semsearch.clicks.formats import read_log_tables, write_yandex
from semsearch.data import open_dataset
from semsearch.models import rank
from semsearch.plugins import create_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder the logs are written to")
    out = parser.parse_args().out
    rng = np.random.default_rng(0)
    nq, nd = 5000, 50000
    synthetic = Rankings(
        [f"q{i}" for i in range(nq)],
        [f"query{i}" for i in range(nq)],
        [f"d{i}" for i in range(nd)],
        np.stack([rng.choice(nd, 10, replace=False) for _ in range(nq)]).astype(np.int32),
        rng.integers(0, 5, (nq, 10)).astype(np.int8),
        4,
    )
    ds = open_dataset("homedepot")
    corpus, qrels = ds.corpus(), ds.qrels("train")
    queries = {q: t for q, t in ds.queries().items() if q in qrels}
    bm25 = create_model("bm25", analyzer="english")
    bm25.index(corpus.ids, corpus.joined("title"))
    run = rank(bm25, queries, k=10)
    top = {q: sorted(s, key=lambda d: -s[d]) for q, s in run.items() if len(s) >= 10}
    homedepot = Rankings.from_run(top, qrels, queries, k=10)
    for name, r in (("synthetic", synthetic), ("homedepot", homedepot)):
        with EventLogWriter(f"{out}/{name}-log") as w:
            for _ in simulate(
                r, PositionBasedUser(r.max_grade), 20_000, seed=0, shuffle_rate=0.1, writer=w, start_ms=0
            ):
                pass
        write_yandex(read_log_tables(f"{out}/{name}-log"), f"{out}/{name}.tsv")
        print(name, len(r.query_ids), "queries")


if __name__ == "__main__":
    main()
