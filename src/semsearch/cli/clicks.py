"""``semsearch clicks``: ``clicks compare`` reads back the comparison of two rankers that ``semsearch
serve A --compare B --events DIR`` logged; ``clicks loop`` runs the click loop on simulated users
(docs/clicks.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from ..clicks.distributed import LogCounts

from .common import PLAIN_HELP, app, err, guard, out, parse_params

clicks_app = typer.Typer(
    help="Learn from clicks and compare rankers online: read an event log back, run the click loop.",
    no_args_is_help=True,
    **PLAIN_HELP,
)
app.add_typer(clicks_app, name="clicks")

DEFAULT_SALT = "semsearch-ab"
"""``clicks.abtest.DEFAULT_SALT`` (spelt out so that ``--help`` does not import scipy; a test checks they agree)."""


@clicks_app.command("compare")
@guard
def compare_cmd(
    log_dir: Annotated[
        Path, typer.Argument(help="Event log directory of `semsearch serve A --compare B --events DIR`.")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of Markdown tables.")] = False,
    salt: Annotated[
        str, typer.Option("--salt", help="The service's --compare-salt (ab mode: users are checked against it).")
    ] = DEFAULT_SALT,
    queries: Annotated[
        int,
        typer.Option("--queries", min=0, help="Interleaving: per-query wins of this many queries, most clicked first."),
    ] = 20,
    head_share: Annotated[
        float,
        typer.Option("--head-share", min=0.0, max=1.0, help="A/B: the share of all searches the head queries make up."),
    ] = 0.5,
) -> None:
    """Compare the two rankers of a logged comparison: interleave mode, the impressions, those
    with clicks, wins of A and B, ties, Δ_AB, the sign test's p and the per-query wins (team-draft
    interleaving, Radlinski et al. 2008; Chapelle et al. 2012); ab mode, the clicked-search rate per
    bucket with 95 % intervals on all, head and tail queries and the tests (the 2020 paper's Table 7)."""
    from ..serving.compare import read_comparison

    if not log_dir.is_dir():
        raise FileNotFoundError(f"{log_dir}: no such event log directory")
    report = read_comparison(log_dir, salt=salt, head_share=head_share)
    if as_json:
        typer.echo(json.dumps(report.to_json(), ensure_ascii=False))
        return
    out.print(report.to_markdown(queries), highlight=False, markup=False)


@clicks_app.command("loop")
@guard
def clicks_loop(
    bundle: Annotated[
        Path, typer.Option(help="The grade-trained two-stage bundle (make serve's) the click-learnt bundles build on.")
    ] = Path("bundles/homedepot"),
    data: Annotated[str, typer.Option(help="The judged data set: train queries simulated, test queries scored.")] = (
        "homedepot"
    ),
    out_dir: Annotated[Path, typer.Option("--out", help="Results folder: logs, bundles, runs, tables.")] = Path(
        "results/click-loop"
    ),
    impressions: Annotated[int, typer.Option(help="Simulated impressions per logger.")] = 10_000_000,
    curve: Annotated[
        str, typer.Option(help="Comma-separated log sizes the ranker is learnt from (the last: --impressions).")
    ] = "10000,100000,1000000,10000000",
    loggers: Annotated[str, typer.Option(help="Comma-separated loggers: bm25, two-stage.")] = "bm25,two-stage",
    seed: Annotated[int, typer.Option(help="Seed of every draw.")] = 0,
    param: Annotated[
        list[str],
        typer.Option("--param", help="Another loop setting NAME=VALUE (repeatable; see docs/clicks.md), e.g. eta=2."),
    ] = [],
) -> None:
    """Simulate users clicking on a logger's answers, fit click models, learn bundles from the clicks
    alone, score every bundle through HTTP and compare bundles online; prints goals 4 and 5 of
    docs/clicks.md as tables (also OUT/tables.md and OUT/results.json)."""
    from ..experiments.click_loop import LoopOptions, run_loop, tables

    given = {
        "bundle": str(bundle),
        "data": data,
        "out": str(out_dir),
        "impressions": impressions,
        "curve": [int(x) for x in curve.split(",") if x.strip()],
        "loggers": [x.strip() for x in loggers.split(",") if x.strip()],
        "seed": seed,
    }
    extra = parse_params(param)
    clash = sorted(set(extra) & set(given))
    if clash:
        raise ValueError(f"--param {clash[0]}: give it as --{clash[0]}")
    options = LoopOptions.from_mapping({**given, **extra}, where="clicks loop")
    results = run_loop(options)
    out.print(tables(results), markup=False, highlight=False)
    err.print(f"results in {out_dir} ({results['seconds']:,} s)", highlight=False)


RAY_HELP = "Run on Ray Data: local (a Ray started here), auto, HOST:PORT or ray://HOST:10001 (default: this process)."


def _counts(log_dir: Path, top_n: int, ray: str | None) -> LogCounts:
    from ..clicks.distributed import log_counts

    if top_n < 1:
        raise ValueError(f"--top-n must be >= 1, got {top_n}")
    counts = log_counts(log_dir, top_n=top_n, ray=ray, progress=lambda m: err.print(m, highlight=False))
    err.print(
        f"{counts.partitions:,} partition(s), {counts.impressions:,} impressions: {counts.cells.num_rows:,} distinct "
        f"cells in {counts.seconds:.1f} s ({counts.impressions / max(counts.seconds, 1e-9):,.0f} impressions/s)",
        highlight=False,
    )
    return counts


@clicks_app.command("fit")
@guard
def clicks_fit(
    log_dir: Annotated[Path, typer.Argument(help="An event log, or a folder of them (a partitioned log).")],
    out_file: Annotated[Path, typer.Option("--out", help="The fit as JSON (the examination per rank, ...).")],
    model: Annotated[str, typer.Option(help="pbm or ubm.")] = "pbm",
    top_n: Annotated[int, typer.Option("--top-n", help="Ranks of each impression read.")] = 10,
    ray: Annotated[str | None, typer.Option("--ray", help=RAY_HELP)] = None,
) -> None:
    """Fit a click model (PBM or UBM, by EM) to a log, partition by partition (docs/clicks.md, "At
    cluster scale"): each partition's cells counted (on Ray Data with --ray), added up, the EM run once."""
    from ..clicks.distributed import MODELS, fit
    from ..data.files import write_json

    if model not in MODELS:
        raise ValueError(f"--model must be one of {', '.join(MODELS)}, got {model!r}")
    counts = _counts(log_dir, top_n, ray)
    result = fit(counts.cells, model, positions=top_n)
    write_json(out_file, {**result.to_json(), "impressions": counts.impressions, "partitions": counts.partitions})
    err.print(f"{model} fitted in {result.iterations} iterations; written to {out_file}", highlight=False)


@clicks_app.command("labels")
@guard
def clicks_labels(
    log_dir: Annotated[Path, typer.Argument(help="An event log, or a folder of them (a partitioned log).")],
    out_file: Annotated[Path, typer.Option("--out", help="The labels as one Parquet file.")],
    top_n: Annotated[int, typer.Option("--top-n", help="Ranks of each impression read.")] = 10,
    propensities: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated examination per rank: clicks weighted by their inverse (default: unweighted)."
        ),
    ] = None,
    levels: Annotated[int, typer.Option(help="Grades 0..levels-1 cut from the click-through rate.")] = 5,
    ray: Annotated[str | None, typer.Option("--ray", help=RAY_HELP)] = None,
) -> None:
    """Per shown (query, document) pair of a log: impressions, clicks, propensity-weighted credit,
    click-through rate, grade and most frequent rank (what the click-trained rankers and pair models
    learn from), partition by partition (on Ray Data with --ray), into one Parquet file."""
    from ..clicks.distributed import labels, write_labels

    try:
        prop = None if propensities is None else [float(x) for x in propensities.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--propensities: comma-separated numbers, got {propensities!r}") from None
    counts = _counts(log_dir, top_n, ray)
    table = labels(counts.cells, propensities=prop, levels=levels)
    write_labels(table, out_file)
    err.print(f"{table.num_rows:,} labelled pairs written to {out_file}", highlight=False)
