"""``semsearch clicks``: read a service's event log back; ``clicks compare``: the comparison of two
rankers that ``semsearch serve A --compare B --events DIR`` logged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from .common import PLAIN_HELP, _guard, app, out

clicks_app = typer.Typer(
    help="Read a search service's event log (impressions and clicks).", no_args_is_help=True, **PLAIN_HELP
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
