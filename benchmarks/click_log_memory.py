"""Peak memory of turning a click log into training pairs (issue 20 item 4), ours against the
former list-of-tuples reading, each in a fresh process on the same generated log.

The log: ``--lines`` rows (default 10,000,000) ``query<TAB>doc_id<TAB>clicks``: queries from a
pool of lines/20 made of Home Depot's queries recombined, drawn Zipf-like (s = 1.2: head queries
repeat, a long tail), documents uniformly from its 54,667 product ids, clicks 0-5 (a fifth 0). Written
once to ``--log`` (default /tmp/semsearch-clicks-<lines>.tsv, reused when present).

Measured per reading, in a child process: the resident memory before reading (corpus loaded),
the peak resident memory (ru_maxrss) after ``TrainingData.from_clicks(iter_clicks(log), corpus)``,
and the time. Ours keeps the distinct queries' texts and 8 bytes a positive (``PairList``); the
former reading kept a Python tuple per positive. The summary row is ours / the former's peak
growth. Run:
    .venv/bin/python benchmarks/click_log_memory.py                 # 10M lines, a few minutes
    .venv/bin/python benchmarks/click_log_memory.py --lines 200000  # smoke test
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _common import REPO, hardware, hardware_line, summary_row, write_json


def generate(path: Path, lines: int, seed: int = 0) -> None:
    from semsearch.data import open_dataset

    ds = open_dataset("homedepot")
    qs = list(ds.queries().values())
    ids = ds.corpus().ids
    rng = np.random.default_rng(seed)
    # a pool of lines/20 distinct queries (a query's first word + another query), drawn Zipf-like
    # (a few head queries repeat often, a long tail rarely), as in real logs
    n_pool = max(1, lines // 20)
    a, b = rng.integers(0, len(qs), n_pool), rng.integers(0, len(qs), n_pool)
    pool = [f"{qs[x].split()[0]} {qs[y]}" for x, y in zip(a.tolist(), b.tolist())]
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w", encoding="utf-8") as f:
        for start in range(0, lines, 1_000_000):
            n = min(1_000_000, lines - start)
            q = np.minimum(rng.zipf(1.2, n) - 1, n_pool - 1)
            d = rng.integers(0, len(ids), n)
            c = np.where(rng.random(n) < 0.2, 0, rng.integers(1, 6, n))
            f.writelines(f"{pool[x]}\t{ids[z]}\t{k}\n" for x, z, k in zip(q.tolist(), d.tolist(), c.tolist()))
    tmp.replace(path)


CHILD = r"""
import json, resource, sys, time
from semsearch.data import iter_clicks, open_dataset
from semsearch.data.training import TrainingData

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

corpus = open_dataset("homedepot").corpus()
corpus.joined("title")
before = rss()
t = time.perf_counter()
if sys.argv[2] == "ours":
    data = TrainingData.from_clicks(iter_clicks(sys.argv[1]), corpus)
    pairs, queries = len(data.positives), len(data.queries)
else:  # the former reading: a list of (query id, doc id) tuples, one per click (cap 10)
    queries_, positives = {}, []
    for q, d, clicks in iter_clicks(sys.argv[1]):
        if d not in corpus.index:
            raise ValueError(d)
        qid = queries_.setdefault(q, f"q{len(queries_)}")
        if clicks >= 1:
            positives += [(qid, d)] * min(clicks, 10)
    pairs, queries = len(positives), len(queries_)
secs = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"before_mb": before, "peak_mb": peak, "growth_mb": peak - before, "seconds": secs,
                  "pairs": pairs, "queries": queries}))
"""


def measure(log: Path, which: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(log), which], cwd=REPO, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=10_000_000)
    ap.add_argument("--log", type=Path, default=None)
    ap.add_argument("--skip-former", action="store_true", help="measure ours only")
    ap.add_argument("--out", default="results/bench/click_log_memory.json")
    args = ap.parse_args()
    log = args.log or Path(f"/tmp/semsearch-clicks-{args.lines}.tsv")
    hw = hardware(("numpy",))
    print("hardware:", hardware_line(hw), flush=True)
    if not log.exists():
        t = time.perf_counter()
        generate(log, args.lines)
        print(
            f"generated {log} ({args.lines:,} lines, {log.stat().st_size / 2**20:,.0f} MB) in "
            f"{time.perf_counter() - t:.0f} s",
            flush=True,
        )
    res = {"lines": args.lines, "log_mb": log.stat().st_size / 2**20, "ours": measure(log, "ours")}
    if not args.skip_former:
        res["former"] = measure(log, "former")
    for k in ("ours", "former"):
        if k in res:
            r = res[k]
            print(
                f"{k:7} {r['pairs']:,} positives, {r['queries']:,} distinct queries: peak RSS {r['peak_mb']:,.0f} MB "
                f"(+{r['growth_mb']:,.0f} MB over the loaded corpus) in {r['seconds']:.0f} s",
                flush=True,
            )
    summary = []
    if "former" in res:
        summary.append(
            summary_row(
                f"click log -> training pairs, {args.lines:,} lines ({res['ours']['queries']:,} distinct "
                f"queries, {res['ours']['pairs']:,} positives), memory growth",
                "MB",
                res["ours"]["growth_mb"],
                "former list-of-tuples reading",
                res["former"]["growth_mb"],
                target="bounded memory (issue 20 item 4)",
                met=None,
                higher_is_better=False,
            )
        )
    path = write_json({"summary": summary, "hardware": hw, "results": res}, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
