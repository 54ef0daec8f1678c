"""``semsearch clicks``: ``clicks compare`` reads back the comparison of two rankers that ``semsearch
serve A --compare B --events DIR`` logged; ``clicks loop`` runs the click loop on simulated users
(docs/clicks.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from .common import PLAIN_HELP, _guard, _parse_params, app, err, out

clicks_app = typer.Typer(
    help="Learn from clicks and compare rankers online: read an event log back, run the click loop.",
    no_args_is_help=True,
    **PLAIN_HELP,
)
app.add_typer(clicks_app, name="clicks")

DEFAULT_SALT = "semsearch-ab"
"""``evaluation.online.DEFAULT_SALT`` (spelt out so that ``--help`` does not import scipy; a test checks they agree)."""


@clicks_app.command("compare")
@_guard
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
@_guard
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
    extra = _parse_params(param)
    clash = sorted(set(extra) & set(given))
    if clash:
        raise ValueError(f"--param {clash[0]}: give it as --{clash[0]}")
    options = LoopOptions.from_mapping({**given, **extra}, where="clicks loop")
    results = run_loop(options)
    out.print(tables(results), markup=False, highlight=False)
    err.print(f"results in {out_dir} ({results['seconds']:,} s)", highlight=False)
