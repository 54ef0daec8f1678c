"""Paper-style result tables: mean per metric, significance markers against baselines, paper figures.

Each baseline gets a Greek marker (α, β, γ, ... in the order given); a cell carries the marker of
every baseline it beats: paired t-test over queries with p < alpha (0.05) and a higher mean.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from semsearch.evaluation.metrics import EvalResult, canonical_metric, parse_metric
from semsearch.evaluation.significance import paired_ttest

__all__ = ["MARKERS", "ResultTable", "metric_header"]

MARKERS = "αβγδεζηθικλμνξοπρστυφχψω"
"""The significance markers, one per baseline in order: at most this many baselines a table."""
_HEADER = {"ndcg": "NDCG", "recall": "Recall", "p": "P", "mrr": "MRR", "map": "MAP", "success": "Success"}
_GAIN_NOTE = {"exp": "2^label − 1 (papers)", "linear": "label (trec_eval)"}


def metric_header(name: str) -> str:
    """Column header as the papers print it: ``ndcg@1`` -> ``NDCG@1``, ``recall@10`` -> ``Recall@10``."""
    base, k = parse_metric(name)
    return f"{_HEADER[base]}@{k}" if k else _HEADER[base]


@dataclass
class _Row:
    label: str
    result: EvalResult
    paper: dict[str, float] = field(default_factory=dict)


class ResultTable:
    """Rows = models (an EvalResult each, optional paper figures), columns = metrics."""

    def __init__(self, baselines: Sequence[str] = (), *, alpha: float = 0.05) -> None:
        self.baselines: list[str] = list(baselines)
        self.alpha = alpha
        self.rows: dict[str, _Row] = {}

    def add(self, label: str, result: EvalResult, paper: Mapping[str, float] | None = None) -> ResultTable:
        """Append a row; ``paper`` maps metric name -> the figure the paper reports."""
        if label in self.rows:
            raise ValueError(f"duplicate row label {label!r}")
        figures = {canonical_metric(m): float(v) for m, v in (paper or {}).items()}
        self.rows[label] = _Row(label, result, figures)
        return self

    @property
    def metrics(self) -> list[str]:
        """Metrics of all rows, in first-seen order."""
        return list(dict.fromkeys(m for r in self.rows.values() for m in r.result.mean))

    def markers(self) -> dict[str, str]:
        """Baseline label -> its marker; every baseline must be a row."""
        if len(self.baselines) > len(MARKERS):
            raise ValueError(f"at most {len(MARKERS)} baselines")
        missing = [b for b in self.baselines if b not in self.rows]
        if missing:
            raise ValueError(f"baselines without a row: {missing}")
        return dict(zip(self.baselines, MARKERS))

    def p_values(self, label: str, metric: str) -> dict[str, float | None]:
        """Baseline -> paired t-test p of row ``label`` vs it on ``metric`` (None if untestable)."""
        out: dict[str, float | None] = {}
        row = self.rows[label].result.per_query.get(metric)
        for b in self.baselines:
            if b == label:
                continue
            base = self.rows[b].result.per_query.get(metric)
            if row is None or base is None or len(row.keys() & base.keys()) < 2:
                out[b] = None
            else:
                out[b] = paired_ttest(row, base).p
        return out

    def _cell_markers(self, label: str, metric: str, marks: Mapping[str, str], p: Mapping[str, float | None]) -> str:
        """Markers of the baselines this row beats significantly (p < alpha, higher mean)."""
        mean = self.rows[label].result.mean.get(metric)
        return "".join(
            marks[b]
            for b, pb in p.items()
            if pb is not None and pb < self.alpha and mean > self.rows[b].result.mean[metric]  # type: ignore[operator]  # has the metric when p does
        )

    def _footnote(self, marks: Mapping[str, str], columns: Sequence[str]) -> str:
        """Which marker means which baseline, the test, the number of queries and the nDCG gain."""
        parts = []
        if marks:
            legend = ", ".join(f"{m} = {b}" for b, m in marks.items())
            parts.append(
                f"Markers: {legend}: significantly better than that baseline "
                f"(paired t-test over queries, p < {self.alpha:g})."
            )
        ns = sorted({r.result.n_queries for r in self.rows.values()})
        parts.append(f"n = {ns[0]} queries." if len(ns) == 1 else f"n = {ns[0]}–{ns[-1]} queries.")
        if any(parse_metric(c)[0] == "ndcg" for c in columns):
            gains = sorted({r.result.gain for r in self.rows.values()})
            parts.append("NDCG gain: " + "; ".join(_GAIN_NOTE[g] for g in gains) + ".")
        return " ".join(parts)

    def spread(self, labels: Sequence[str], metrics: Sequence[str]) -> dict[str, Any]:
        """The spread of one model over its training seeds (``labels``: one row per seed): per
        metric the mean, the sample standard deviation (n − 1; 0 for one seed), min and max of the
        seeds' means, and per baseline in how many seeds the row is significantly better (the
        table's markers: paired t-test over queries, p < alpha, higher mean)."""
        marks = self.markers()
        out: dict[str, Any] = {"seeds": len(labels), "rows": list(labels), "metrics": {}}
        for m in (canonical_metric(c) for c in metrics):
            values = [self.rows[lb].result.mean[m] for lb in labels]
            mean, sd = statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0
            better = {
                b: sum(marks[b] in self._cell_markers(lb, m, marks, self.p_values(lb, m)) for lb in labels)
                for b in self.baselines
                if b not in labels
            }
            out["metrics"][m] = {
                "mean": mean,
                "sd": sd,
                "min": min(values),
                "max": max(values),
                "values": values,
                "significantly_better": better,
            }
        return out

    def spread_markdown(self, spreads: Mapping[str, Mapping[str, Any]], columns: Sequence[str]) -> str:
        """``spreads`` (label -> ``spread``) as a table: mean ± sd (min–max) per metric, then per
        baseline the seeds significantly better than it."""
        cols = [canonical_metric(c) for c in columns]
        marks = self.markers()
        header = ["Model", "seeds", *(metric_header(c) for c in cols)]
        lines = ["| " + " | ".join(header) + " |", "|---|---:|" + "---|" * len(cols)]
        for label, sp in spreads.items():
            cells = [label, str(sp["seeds"])]
            for c in cols:
                d = sp["metrics"][c]
                better = ", ".join(f"{n}/{sp['seeds']} {marks[b]}" for b, n in d["significantly_better"].items() if n)
                cells.append(
                    f"{d['mean']:.3f} ± {d['sd']:.3f} ({d['min']:.3f}–{d['max']:.3f})"
                    + (f"; {better}" if better else "")
                )
            lines.append("| " + " | ".join(cells) + " |")
        legend = ", ".join(f"{m} = {b}" for b, m in marks.items())
        note = (
            (
                f'Mean ± sample sd of the seeds\' means (min–max); "k/n {MARKERS[0]}": '
                "k of the n seeds significantly better than that baseline "
                f"(paired t-test over queries, p < {self.alpha:g}; {legend})."
            )
            if marks
            else "Mean ± sample sd of the seeds' means (min–max)."
        )
        return "\n".join(lines) + "\n\n" + note + "\n"

    def to_markdown(self, columns: Sequence[str] | None = None, show_paper: bool = True) -> str:
        """Markdown table (rows = models) plus a footnote line; ``(paper)`` columns where given."""
        cols = [canonical_metric(c) for c in columns] if columns else self.metrics
        marks = self.markers()
        rows = list(self.rows.values())
        header, body = ["Model"], [[r.label] for r in rows]
        for c in cols:
            header.append(metric_header(c))
            for r, cells in zip(rows, body):
                mean = r.result.mean.get(c)
                if mean is None:
                    cells.append("")
                else:
                    p = self.p_values(r.label, c)
                    cells.append(f"{mean:.3f}{self._cell_markers(r.label, c, marks, p)}")
            if show_paper and any(c in r.paper for r in rows):
                header.append(f"{metric_header(c)} (paper)")
                for r, cells in zip(rows, body):
                    cells.append(f"{r.paper[c]:.3f}" if c in r.paper else "")
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" + "---:|" * (len(header) - 1)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return "\n".join(lines) + "\n\n" + self._footnote(marks, cols) + "\n"

    def to_json(self) -> dict[str, Any]:
        """JSON-serialisable dict: per-row means, p-values against each baseline, markers, paper figures."""
        marks = self.markers()
        metrics = self.metrics
        rows = []
        for r in self.rows.values():
            p = {m: self.p_values(r.label, m) for m in metrics}
            rows.append(
                {
                    "label": r.label,
                    "n_queries": r.result.n_queries,
                    "gain": r.result.gain,
                    "queries": r.result.queries,
                    "mean": dict(r.result.mean),
                    "paper": dict(r.paper),
                    "p_values": {b: {m: p[m][b] for m in metrics} for b in self.baselines if b != r.label},
                    "markers": {m: self._cell_markers(r.label, m, marks, p[m]) for m in metrics},
                }
            )
        baselines = [{"label": b, "marker": m} for b, m in marks.items()]
        return {"metrics": metrics, "alpha": self.alpha, "baselines": baselines, "rows": rows}
