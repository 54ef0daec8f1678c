"""mkdocs hook: the reproduction tables, generated from the specs and one results file.

A page line ``{{ spec_table("NAME") }}`` becomes a table of spec NAME's rows: the paper's figure
(the spec's ``paper = {...}``), ours (``docs/reproductions/results.yaml``) and the expected range
(the spec's ``expect = {...}``), one line a row and metric. ``{{ headline_table() }}`` becomes the
README's headline table (``python docs/hooks/reproductions.py`` prints it; the docs test checks that
the README holds exactly that). ``{{ click_loop_tables() }}`` becomes the tables of the click loop's
last recorded run (``docs/reproductions/click-loop.json``), ``{{ portable_tables() }}`` the table of
the portable two-stage search's (``docs/reproductions/portable.json``, ``make portable``). So a figure
is typed once: in the spec (paper, expected range), in results.yaml (ours) or in a run's results file;
a headline cell names a results file with ``json: NAME`` beside its ``from`` path.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "src" / "semsearch" / "experiments" / "specs"
RESULTS = ROOT / "docs" / "reproductions" / "results.yaml"
SEED_ROW = re.compile(r"^(.*) \(seed \d+\)$")
CALL = re.compile(
    r"\{\{\s*(spec_table|headline_table|click_loop_tables|portable_tables)\(\s*(?:\"([^\"]+)\")?\s*\)\s*\}\}"
)
CLICK_LOOP = ROOT / "docs" / "reproductions" / "click-loop.json"
PORTABLE = ROOT / "docs" / "reproductions" / "portable.json"


class _Loader(yaml.SafeLoader):
    """Figures kept as written (0.780 stays 0.780, not 0.78)."""


_Loader.add_constructor("tag:yaml.org,2002:float", lambda loader, node: loader.construct_scalar(node))


def load_results() -> dict:
    return yaml.load(RESULTS.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 (a SafeLoader)


def load_spec(name: str) -> dict:
    path = SPECS / f"{name}.toml"
    if not path.exists():
        raise ValueError(f"spec_table: no spec {name!r} under {SPECS}")
    with path.open("rb") as f:
        return tomllib.load(f)


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _range(r) -> str:
    return f"{_fmt(r[0])}–{_fmt(r[1])}" if r else ""


def _inside(ours, r) -> str:
    """✓ when our figure lies in the spec's expected range, ✗ when not, nothing for a spread."""
    try:
        value = float(ours)
    except (TypeError, ValueError):
        return ""
    if not r:
        return ""
    return " ✓" if r[0] <= value <= r[1] else " ✗"


def _spec_rows(spec: dict) -> dict[str, tuple[dict, dict]]:
    """label -> (paper figures, expected ranges), in the spec's order."""
    rows: dict[str, tuple[dict, dict]] = {}
    for m in spec.get("models", []):
        rows[m["label"]] = (m.get("paper", {}), m.get("expect", {}))
    # classification specs: [paper] and [expect] tables keyed by system
    if "models" not in spec:
        for system, figs in (spec.get("paper") or {}).items():
            rows.setdefault(system, ({}, {}))[0].update(figs)
        for system, figs in (spec.get("expect") or {}).items():
            rows.setdefault(system, ({}, {}))[1].update(figs)
    return rows


def _order(label: str, labels: list[str]) -> tuple[int, str]:
    """Seed rows right after their spec row."""
    m = SEED_ROW.match(label)
    base = m.group(1) if m and m.group(1) in labels else label
    return (labels.index(base), label)


def spec_table(name: str) -> str:
    spec = load_spec(name)
    entry = load_results()["specs"].get(name)
    if entry is None:
        raise ValueError(f"spec_table: {name!r} has no entry in {RESULTS.name}")
    ours_rows: dict = entry.get("rows", {})
    spec_rows = _spec_rows(spec)
    if "models" not in spec:  # a classification spec names its systems in its results
        for label in ours_rows:
            spec_rows.setdefault(label, ({}, {}))
    for label in ours_rows:  # a seed row of a spec row: "LABEL (seed N)"
        m = SEED_ROW.match(label)
        if label not in spec_rows and m and m.group(1) in spec_rows:
            spec_rows[label] = spec_rows[m.group(1)]
    spec_rows = {k: spec_rows[k] for k in sorted(spec_rows, key=lambda k: _order(k, list(spec_rows)))}
    unknown = [label for label in ours_rows if label not in spec_rows]
    if unknown:
        raise ValueError(f"spec_table: {RESULTS.name} names rows {unknown} that spec {name!r} does not have")
    out = [
        f"**`{name}`** — {spec['title']}",
        "",
        f"*Source:* {spec['source']}. *Measured:* {entry['measured']}.",
        "",
        "| row | metric | paper | ours | expected |",
        "|---|---|---:|---:|---|",
    ]
    left_out = 0
    for label, (paper, expect) in spec_rows.items():
        ours = ours_rows.get(label, {})
        figures = {k: v for k, v in ours.items() if k != "note"}
        metrics = list(dict.fromkeys([*figures, *paper, *expect]))
        if not metrics:
            left_out += 1
            continue
        for i, metric in enumerate(metrics):
            o = figures.get(metric)
            cell = (_fmt(o) if o is not None else "—") + _inside(o, expect.get(metric))
            note = f" ({ours['note']})" if i == 0 and ours.get("note") else ""
            out.append(
                f"| {label + note if i == 0 else ''} | {metric} | {_fmt(paper.get(metric))} | {cell} "
                f"| {_range(expect.get(metric))} |"
            )
    out.append("")
    if left_out:
        out.append(
            f"{left_out} more row(s) of the spec have no figure recorded here; "
            f"`semsearch reproduce {name}` writes every row to `results/{name}.md`."
        )
        out.append("")
    if entry.get("summary"):
        out.append(entry["summary"].strip())
        out.append("")
    return "\n".join(out)


def _figures(ref: dict, results: dict) -> str:
    """One headline cell: figures looked up in results.yaml (``from``) or a spec's paper figures."""
    if "from" in ref:
        node = results
        if "json" in ref:  # a run's results file beside results.yaml
            import json

            node = json.loads((RESULTS.parent / ref["json"]).read_text(encoding="utf-8"))
        for key in ref["from"]:
            node = node[key]
    else:
        node = _spec_rows(load_spec(ref["spec"]))[ref["row"]][0]
    fmt = (lambda v: format(float(v), ref["format"])) if "format" in ref else _fmt
    values = " / ".join(fmt(node[m]) for m in ref["metrics"])
    return f"{ref.get('prefix', '')}{values}{ref.get('suffix', '')}"


def headline_table(prefix: str = "docs/") -> str:
    """The README's headline table (links under docs/); prefix "" for a page inside docs/."""
    results = load_results()
    out = ["| measure | ours | reference | details |", "|---|---:|---:|---|"]
    for r in results["headline"]:
        out.append(
            f"| {r['what']} | {_figures(r['ours'], results)} | {_figures(r['reference'], results)} "
            f"| [{r['page']}]({prefix}{r['link']}) |"
        )
    return "\n".join(out)


def click_loop_tables() -> str:
    """The tables ``semsearch clicks loop`` printed, from the results.json it wrote (kept as
    ``docs/reproductions/click-loop.json``), rendered by the same code."""
    import json

    from semsearch.experiments.click_loop import tables

    return tables(json.loads(CLICK_LOOP.read_text(encoding="utf-8")))


def portable_tables() -> str:
    """The table ``make portable`` printed, from the results.json it wrote (kept as
    ``docs/reproductions/portable.json``), rendered by the same code."""
    import json

    from semsearch.experiments.portable import tables

    return tables(json.loads(PORTABLE.read_text(encoding="utf-8")))


def render(markdown: str, prefix: str = "") -> str:
    def sub(m: re.Match) -> str:
        if m.group(1) == "click_loop_tables":
            return click_loop_tables()
        if m.group(1) == "portable_tables":
            return portable_tables()
        return spec_table(m.group(2)) if m.group(1) == "spec_table" else headline_table(prefix)

    return CALL.sub(sub, markdown)


def on_page_markdown(markdown, page, config, files):  # mkdocs hook
    depth = page.file.src_uri.count("/")
    return render(markdown, "../" * depth)


if __name__ == "__main__":
    sys.stdout.write(headline_table() + "\n")
