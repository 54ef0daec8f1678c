"""``semsearch clicks``: ``clicks compare`` reads back the comparison of two rankers that ``semsearch
serve A --compare B --events DIR`` logged; ``clicks loop`` runs the click loop on simulated users
(docs/clicks.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    import pyarrow as pa

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


def _pair(text: str, option: str) -> tuple[float, float]:
    try:
        a, b = (float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"{option}: two comma-separated numbers A,B, got {text!r}") from None
    return a, b


def _write_pairs(table: pa.Table, path: Path) -> None:
    """A table as Parquet (``.parquet``) or tab-separated text (``.tsv``), written whole or not at all."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from ..data.files import atomic_write

    with atomic_write(path, binary=True) as f:
        if path.suffix == ".parquet":
            pq.write_table(table, f)
        else:
            pcsv.write_csv(table, f, pcsv.WriteOptions(delimiter="\t"))


@clicks_app.command("fit")
@guard
def clicks_fit(
    log_dir: Annotated[
        Path,
        typer.Argument(help="The click log: an event log or a folder of them (log), a file (yandex), a folder (ubi)."),
    ],
    out_file: Annotated[Path, typer.Option("--out", help="The fits and their held-out evaluation as JSON.")],
    model: Annotated[str, typer.Option(help="Comma-separated models: pbm, ubm, dbn, cascade, or all.")] = "all",
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="log (the event log's Parquet segments), yandex (the Yandex/PyClick search log), "
            "ubi (OpenSearch UBI ubi_queries.jsonl and ubi_events.jsonl in one folder).",
        ),
    ] = "log",
    prior: Annotated[
        str, typer.Option(help="Beta pseudo-counts A,B added to every probability (0,0: maximum likelihood).")
    ] = "1,1",
    max_iter: Annotated[
        int | None, typer.Option("--max-iter", min=1, help="EM iteration cap (default: each model's, 200 or 100).")
    ] = None,
    attractiveness: Annotated[
        Path | None,
        typer.Option(help="Write each (model, query, document)'s attractiveness here (.parquet or .tsv)."),
    ] = None,
    test_fraction: Annotated[
        float, typer.Option("--test-fraction", min=0.0, max=0.9, help="Share of sessions held out (0: none).")
    ] = 0.25,
    seed: Annotated[int, typer.Option(help="Seed of the held-out split.")] = 0,
    top_n: Annotated[int, typer.Option("--top-n", help="Ranks of each impression read.")] = 10,
    ray: Annotated[str | None, typer.Option("--ray", help=RAY_HELP)] = None,
) -> None:
    """Fit click models (PBM, UBM and DBN by EM, the cascade model in closed form; docs/clicks.md) to
    a log and score each on a held-out share of its sessions: log-likelihood per session and
    perplexity by rank. A partitioned log, or --ray, fits PBM or UBM from the partitions' added-up
    cell counts (docs/clicks.md, "At cluster scale"), with no held-out evaluation."""
    from ..clicks.formats import FORMATS, load_sessions
    from ..clicks.models import MODEL_NAMES, fit_models
    from ..data.files import write_json

    names = list(MODEL_NAMES) if model.strip() == "all" else [m.strip() for m in model.split(",") if m.strip()]
    bad = [m for m in names if m not in MODEL_NAMES]
    if bad or not names:
        raise ValueError(f"--model: comma-separated names of {', '.join(MODEL_NAMES)} or all, got {model!r}")
    if fmt not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    pseudo = _pair(prior, "--prior")
    if min(pseudo) < 0:
        raise ValueError(f"--prior: pseudo-counts >= 0, got {prior!r}")
    if top_n < 1:
        raise ValueError(f"--top-n must be >= 1, got {top_n}")
    if attractiveness is not None and attractiveness.suffix not in (".parquet", ".tsv"):
        raise ValueError(f"--attractiveness: a .parquet or .tsv file, got {attractiveness}")
    settings: dict[str, object] = {"format": fmt, "top_n": top_n, "prior": list(pseudo), "max_iter": max_iter}
    if fmt == "log" and (ray is not None or (log_dir.is_dir() and not (log_dir / "impressions").is_dir())):
        _fit_partitioned(log_dir, out_file, names, pseudo, max_iter, attractiveness, top_n, ray, settings)
        return
    if ray is not None:
        raise ValueError("--ray reads a partitioned event log (--format log)")
    if not log_dir.exists():
        raise FileNotFoundError(f"{log_dir}: no such click log")
    sessions = load_sessions(log_dir, fmt, top_n=top_n)
    err.print(
        f"{len(sessions):,} impressions of {len(sessions.queries):,} queries read from {log_dir}", highlight=False
    )
    fits = fit_models(sessions, names, prior=pseudo, max_iter=max_iter, test_fraction=test_fraction, seed=seed)
    if attractiveness is not None:
        _write_pairs(fits.attractiveness(), attractiveness)
    write_json(
        out_file,
        {
            "log": str(log_dir),
            "impressions": len(sessions),
            **settings,
            "test_fraction": test_fraction,
            "seed": seed,
            "models": fits.report,
        },
    )
    for name, row in fits.report.items():
        ho = row.get("held_out")
        figures = f"held-out log-likelihood {ho['log_likelihood']:.4f}, perplexity {ho['perplexity']:.4f}" if ho else ""
        steps = "" if name == "cascade" else f"{row['iterations']} iterations{'' if row['converged'] else ' (cap)'}; "
        err.print(f"{name}: {steps}{figures}", highlight=False)
    err.print(f"written to {out_file}" + (f" and {attractiveness}" if attractiveness else ""), highlight=False)


def _fit_partitioned(
    log_dir: Path,
    out_file: Path,
    names: list[str],
    prior: tuple[float, float],
    max_iter: int | None,
    attractiveness: Path | None,
    top_n: int,
    ray: str | None,
    settings: dict[str, object],
) -> None:
    import pyarrow as pa

    from ..clicks.distributed import MODELS, fit
    from ..data.files import write_json

    if len(names) != 1 or names[0] not in MODELS:
        raise ValueError(
            f"a partitioned log (or --ray) fits one of {', '.join(MODELS)} from cell counts; DBN and the "
            f"cascade model need each session's clicks: fit them on one event log (--model, got {','.join(names)})"
        )
    counts = _counts(log_dir, top_n, ray)
    params: dict[str, object] = {"prior": prior} | ({"max_iter": max_iter} if max_iter is not None else {})
    result = fit(counts.cells, names[0], positions=top_n, **params)
    if attractiveness is not None:
        _write_pairs(result.pairs.add_column(0, "model", pa.array([names[0]] * result.pairs.num_rows)), attractiveness)
    write_json(
        out_file,
        {**result.to_json(), **settings, "impressions": counts.impressions, "partitions": counts.partitions},
    )
    err.print(f"{names[0]} fitted in {result.iterations} iterations; written to {out_file}", highlight=False)


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
