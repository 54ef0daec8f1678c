"""``semsearch reproduce``: the paper tables, our figures beside the paper's."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import (
    EXIT_CHECK_FAILED,
    app,
    err,
    guard,
    out,
)


@app.command("reproduce")
@guard
def reproduce_cmd(
    names: Annotated[list[str] | None, typer.Argument(help="Experiment names (see --list) or spec files.")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the registered experiments.")] = False,
    all_: Annotated[bool, typer.Option("--all", help="Run every registered experiment.")] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="Where to write NAME.md, NAME.json and runs.")] = Path(
        "results"
    ),
    check: Annotated[bool, typer.Option(help="Exit 1 when a figure falls outside the spec's expected range.")] = True,
    models_dir: Annotated[
        Path | None, typer.Option(help="Where trained models are saved and reused (default OUT/models).")
    ] = None,
    retrain: Annotated[
        bool, typer.Option(help="Train every model again instead of reusing a saved one with the same recipe.")
    ] = False,
) -> None:
    """Reproduce paper tables: our figures beside the paper's, as markdown and JSON."""
    from ..experiments import get_spec, spec_paths

    if list_:
        for name in spec_paths():
            spec = get_spec(name)
            out.print(f"[bold]{name}[/]  {spec.title}", highlight=False)
        return
    todo = list(spec_paths()) if all_ else (names or [])
    if not todo:
        raise ValueError("name an experiment, or use --all / --list")
    specs = [get_spec(n) for n in todo]  # validate every spec before running any (or loading torch)
    from ..experiments import run_experiment

    failed = []
    for spec in specs:
        result = run_experiment(spec, model_dir=models_dir or out_dir / "models", retrain=retrain)
        path = result.write(out_dir)
        out.print(result.to_markdown(), highlight=False)
        err.print(f"wrote {path} and {path.with_suffix('.json')}", highlight=False)
        failed += [c for c in result.checks if not c.ok]
    if failed and check:
        for c in failed:
            err.print(
                f"[red]out of range:[/] {c.label} {c.metric} = {c.value:.4f} not in [{c.low}, {c.high}]",
                highlight=False,
            )
        raise typer.Exit(EXIT_CHECK_FAILED)
