"""Query-by-query comparison of two rankings: the label of each model's top-1 document
(CLSM paper Table 7: CLSM vs DSSM on top-1 results, bad / fair / good+)."""

from __future__ import annotations

from collections.abc import Mapping

from ..types import Qrels, Run

PAPER_BINS: dict[str, tuple[int, int]] = {"bad": (0, 0), "fair": (1, 1), "good+": (2, 4)}
"""The paper's 5-level scale 0-4 with good, excellent and perfect merged into good+."""


def _top1(scores: Mapping[str, float]) -> str | None:
    return min(scores.items(), key=lambda ds: (-ds[1], ds[0]))[0] if scores else None


def _bin(grade: int, bins: Mapping[str, tuple[int, int]]) -> str:
    for name, (lo, hi) in bins.items():
        if lo <= grade <= hi:
            return name
    raise ValueError(f"grade {grade} falls in no bin of {dict(bins)}")


def top1_crosstab(
    rows: Run, columns: Run, qrels: Qrels, bins: Mapping[str, tuple[int, int]] = PAPER_BINS
) -> dict[str, dict[str, int]]:
    """Counts of queries by (label bin of ``rows``' top-1, label bin of ``columns``' top-1), over
    the queries both runs rank; an unjudged top-1 document counts as grade 0."""
    table = {r: dict.fromkeys(bins, 0) for r in bins}
    for q in sorted(set(rows) & set(columns)):
        a, b = _top1(rows[q]), _top1(columns[q])
        if a is None or b is None:
            continue
        judged = qrels.get(q, {})
        table[_bin(judged.get(a, 0), bins)][_bin(judged.get(b, 0), bins)] += 1
    return table


def crosstab_markdown(table: Mapping[str, Mapping[str, int]], row_label: str, column_label: str) -> str:
    """A ``top1_crosstab`` table as a markdown table: one row per bin of ``row_label``'s top-1,
    one column per bin of ``column_label``'s."""
    names = list(table)
    lines = [f"| {row_label} \\\\ {column_label} | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    lines += [f"| {r} | " + " | ".join(str(table[r][c]) for c in names) + " |" for r in names]
    return "\n".join(lines) + "\n"
