"""An online A/B test reproduced by simulation (the 2020 semantic-retrieval paper's Table 7:
clicked-search rate in two control and two experiment buckets), as a spec of ``kind = "ab"``.

The two rankers are rows of a ranking spec (``rankers``: run by the ordinary runner, trained
models reused from the model directory); their test runs are shown, top ``k``, to simulated
users (`clicks.comparison.simulate_ab`): searches arrive Zipf-like over the test queries
(`clicks.QueryStream`), each from one of ``users`` user keys, bucketed by
`clicks.abtest.bucket_of` (four buckets, two control, two experiment: `BucketLayout`); a search's
user sees the control or the experiment ranker's list by their bucket and clicks as a
position-based user (`clicks.PositionBasedUser`, η, ε, the test grades; unjudged documents grade
0). `clicks.abtest.ab_table` gives the clicked-search rate per bucket and segment with the tests.
Everything is numpy over all searches at once; ``seeds`` repeats the simulation with the next
seeds and reports the spread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .result import Check
from .spec import ABSpec

SEGMENT_METRICS = {"all": "csr", "head": "head", "tail": "tail"}
DIFF_ROW = "experiment − control"


@dataclass
class ABResult:
    spec: ABSpec
    tables: list[Any]  # one ABTable per seed
    rows: dict[str, dict[str, float]]  # bucket -> csr/head/tail (first seed), DIFF_ROW in points
    spread: dict[str, dict[str, Any]]  # metric -> {mean, sd, min, max} of DIFF_ROW over seeds
    checks: list[Check]
    seconds: float
    rankers: dict[str, dict[str, float]] = field(default_factory=dict)  # arm -> the rankers spec's figures

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_markdown(self) -> str:
        s = self.spec
        out = [f"# {s.title}", "", f"*Source:* {s.source}", ""]
        out += [
            f"Control: {s.control!r}, experiment: {s.experiment!r} (rows of `{s.rankers}`); "
            f"{s.searches:,} searches from {s.users:,} users per seed, seeds {s.seed}..{s.seed + s.seeds - 1}; "
            f"position-based users eta = {s.eta}, epsilon = {s.epsilon}, top {s.k}. {self.seconds:.0f} s.",
            "",
        ]
        if self.rankers:
            out += ["Offline (test split): " + "; ".join(f"{a}: {v}" for a, v in self.rankers.items()), ""]
        for i, t in enumerate(self.tables):
            out += [f"## Seed {s.seed + i}", "", t.to_markdown()]
        if self.spread:
            out += ["## Experiment − control over seeds (points)", "", "| segment | mean | sd | min | max |"]
            out += ["|---|---:|---:|---:|---:|"]
            for m, v in self.spread.items():
                out.append(f"| {m} | {v['mean']:+.3f} | {v['sd']:.3f} | {v['min']:+.3f} | {v['max']:+.3f} |")
            out.append("")
        for c in self.checks:
            out.append(
                f"- check {c.label} {c.metric} = {c.value:.4f} in [{c.low}, {c.high}]: {'ok' if c.ok else 'OUT'}"
            )
        if s.notes:
            out += ["", s.notes.strip(), ""]
        return "\n".join(out) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "rows": self.rows,
            "spread": self.spread,
            "tables": [t.to_json() for t in self.tables],
            "rankers": self.rankers,
            "seconds": self.seconds,
            "checks": [c.__dict__ | {"ok": c.ok} for c in self.checks],
        }

    def write(self, out_dir: str | Path) -> Path:
        from ..data.files import atomic_write, write_json

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with atomic_write(out / f"{self.spec.name}.md") as f:
            f.write(self.to_markdown())
        write_json(out / f"{self.spec.name}.json", self.to_json())
        return out / f"{self.spec.name}.md"


def _rows(table: Any) -> dict[str, dict[str, float]]:
    rows = {
        label: {SEGMENT_METRICS[s]: round(r.rate, 4) for s, r in cells.items()} for label, cells in table.rows.items()
    }
    rows[DIFF_ROW] = {
        SEGMENT_METRICS[c.segment]: round(100 * c.difference, 3)
        for c in table.comparisons
        if c.label == "experiment vs control"
    }
    return rows


def run_ab(
    spec: ABSpec,
    run_rankers: Callable[..., Any],
    *,
    progress: bool = True,
    model_dir: Path | None = None,
    retrain: bool = False,
) -> ABResult:
    """Run the rankers spec with ``run_rankers`` (the runner's ``run_experiment``: its trained rows
    reused from ``model_dir``), then the simulation."""
    from ..clicks import Rankings
    from ..clicks.abtest import ab_table
    from ..clicks.comparison import simulate_ab
    from ..data import open_dataset, ranked
    from .spec import get_spec

    start = time.perf_counter()
    rspec = get_spec(spec.rankers)
    base = run_rankers(rspec, progress=progress, model_dir=model_dir, retrain=retrain)
    ds = open_dataset(rspec.dataset)  # type: ignore[union-attr]  # a ranking spec (checked on load)
    qrels = ds.qrels(rspec.split, check=True)  # type: ignore[union-attr]
    queries = ds.queries()
    arms = {}
    for role in ("control", "experiment"):
        run = base.runs[getattr(spec, role)]
        qids = [q for q in qrels if q in queries]
        arms[role] = Rankings.from_run(
            {q: [d for d, _ in ranked(run.get(q, {}))] for q in qids}, qrels, queries, k=spec.k
        )
    tables = []
    for s in range(spec.seed, spec.seed + spec.seeds):
        keys, qs, clicks = simulate_ab(
            arms["control"],
            arms["experiment"],
            spec.searches,
            spec.users,
            eta=spec.eta,
            epsilon=spec.epsilon,
            exponent=spec.exponent,
            seed=s,
        )
        tables.append(ab_table(keys, qs, clicks, head_share=spec.head_share))
    rows = _rows(tables[0])
    spread: dict[str, dict[str, Any]] = {}
    if spec.seeds > 1:
        diffs = [_rows(t)[DIFF_ROW] for t in tables]
        for m in diffs[0]:
            v = np.array([d[m] for d in diffs])
            spread[m] = {
                "mean": float(v.mean()),
                "sd": float(v.std(ddof=1)),
                "min": float(v.min()),
                "max": float(v.max()),
            }
    checks = [
        Check(label, metric, rows[label][metric], lo, hi)
        for label, bounds in spec.expect.items()
        for metric, (lo, hi) in bounds.items()
        if label in rows and metric in rows[label]
    ]
    offline = {
        getattr(spec, role): {
            m: round(float(v), 4) for m, v in base.table.rows[getattr(spec, role)].result.mean.items()
        }
        for role in ("control", "experiment")
    }
    return ABResult(spec, tables, rows, spread, checks, time.perf_counter() - start, offline)
