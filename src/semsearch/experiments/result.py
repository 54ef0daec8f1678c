"""What an experiment run produces: checks against the spec's expected ranges, and the result
of a ranking spec (table, chosen parameters, runs) with its Markdown/JSON/TREC writers."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..data import write_run
from ..data.files import atomic_write, write_json
from ..evaluation import ResultTable, crosstab_markdown
from ..types import Run
from .spec import ExperimentSpec


@dataclass(frozen=True)
class Check:
    """One expectation of the spec against what we measured."""

    label: str
    metric: str
    value: float
    low: float
    high: float

    @property
    def ok(self) -> bool:
        return self.low <= self.value <= self.high


@dataclass
class ExperimentResult:
    spec: ExperimentSpec
    table: ResultTable
    chosen: dict[str, list[dict[str, Any]]]  # label -> parameter setting(s) used (one per CV fold)
    tuning: dict[str, dict[str, float]]  # label -> setting -> tuning-metric mean (dev) / fold means (CV)
    checks: list[Check]
    seconds: float
    runs: dict[str, Run] = field(repr=False, default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)  # label -> the model's training log
    crosstab: dict[str, dict[str, int]] = field(default_factory=dict)
    seed_spread: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> ResultTable.spread over its seeds

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_markdown(self) -> str:
        s = self.spec
        lines = [
            f"# {s.title}",
            "",
            f"Source: {s.source}. Data: `{s.dataset}` split `{s.split}`, candidates `{s.candidates}`, "
            f"fields `{s.fields}`; tuning: `{s.tune}` on {s.tune_metric}.",
            "",
        ]
        if s.notes:
            lines += [s.notes.strip(), ""]
        lines += [self.table.to_markdown(columns=s.metrics)]
        if self.seed_spread:
            lines += [
                "Spread over training seeds (rows with `seeds`; each seed is a row above):",
                "",
                self.table.spread_markdown(self.seed_spread, s.metrics),
            ]
        if self.crosstab:
            lines += [
                f"Top-1 label of each query's first result (rows: {s.crosstab['rows']}, columns: "
                f"{s.crosstab['columns']}):",
                "",
                crosstab_markdown(self.crosstab, s.crosstab["rows"], s.crosstab["columns"]),
            ]
        lines += ["Parameters used:", ""]
        for label, settings in self.chosen.items():
            shown = "; ".join(json.dumps(p, sort_keys=True) for p in settings) or "—"
            lines.append(f"- {label}: {shown}")
        for label, log in self.training.items():
            if isinstance(log, dict) and "importance" in log:
                from ..ranking import importance_markdown

                lines += [
                    "",
                    f"Feature importance of {label} ({log.get('rounds_by', '')}):",
                    "",
                    importance_markdown(log["importance"]),
                ]
        if self.checks:
            lines += ["", "Expected ranges:", ""]
            for c in self.checks:
                mark = "ok" if c.ok else "OUT OF RANGE"
                lines.append(f"- {c.label} {c.metric} = {c.value:.4f}, expected [{c.low}, {c.high}]: {mark}")
        lines += ["", f"Run time: {self.seconds:.1f} s.", ""]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "title": self.spec.title,
            "source": self.spec.source,
            "dataset": self.spec.dataset,
            "split": self.spec.split,
            "candidates": self.spec.candidates,
            "fields": self.spec.fields,
            "tune": self.spec.tune,
            "tune_metric": self.spec.tune_metric,
            "table": self.table.to_json(),
            "chosen": self.chosen,
            "tuning": self.tuning,
            "checks": [dict(c.__dict__, ok=c.ok) for c in self.checks],
            "seconds": self.seconds,
            "training": self.training,
            "crosstab": self.crosstab,
            "seed_spread": self.seed_spread,
        }

    def write(self, out_dir: str | Path) -> Path:
        """Write ``NAME.md``, ``NAME.json`` and the runs ``NAME/LABEL.trec`` under ``out_dir``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with atomic_write(out / f"{self.spec.name}.md") as f:
            f.write(self.to_markdown())
        write_json(out / f"{self.spec.name}.json", self.to_json())
        for label, run in self.runs.items():
            write_run(run, out / self.spec.name / f"{slug(label)}.trec", tag=slug(label))
        return out / f"{self.spec.name}.md"


def slug(label: str) -> str:
    """A row label as a file name: runs of other characters as one underscore, lower case."""
    return re.sub(r"[^\w.-]+", "_", label).strip("_").lower()


def json_default(x: Any) -> Any:
    """``json.dumps``' fallback for a results file: numpy numbers as Python ones, a non-finite
    float as null (JSON has no inf or NaN)."""
    if isinstance(x, float | np.floating) and not math.isfinite(float(x)):
        return None
    if isinstance(x, np.integer | np.floating):
        return x.item()
    raise TypeError(type(x).__name__)
