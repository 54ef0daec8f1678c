"""``semsearch data``: the data sets under the data root."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from .common import (
    PLAIN_HELP,
    app,
    fail,
    guard,
    out,
)

data_app = typer.Typer(
    help="Inspect the data sets under $SEMSEARCH_DATA (default ../shared/data).", no_args_is_help=True, **PLAIN_HELP
)
app.add_typer(data_app, name="data")


@data_app.command("list")
@guard
def data_list() -> None:
    """List the data sets found under the data root."""
    from ..data import data_root, list_datasets

    root = data_root()
    names = list_datasets(root)
    if not names:
        fail(f"no data sets under {root} (set SEMSEARCH_DATA)")
    out.print(f"data root: {root}")
    for n in names:
        out.print(f"  {n}")


@data_app.command("info")
@guard
def data_info(
    name: Annotated[str, typer.Argument(help="Data set name under the data root, or a folder path.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a summary.")] = False,
) -> None:
    """Documents, queries, splits, grade histograms and runs of one data set."""
    from ..data import dataset_info

    info = dataset_info(name)
    if as_json:
        out.print_json(json.dumps(info))
        return
    out.print(json.dumps(info, indent=2, ensure_ascii=False), highlight=False)
