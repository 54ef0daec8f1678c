"""``semsearch train``: fit a model on a data set's judged pairs, or on a click log's clicks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from ..evaluation import QueryFold
from .common import (
    app,
    err,
    guard,
    parse_params,
)


@app.command("train")
@guard
def train_cmd(
    model: Annotated[
        str, typer.Argument(help="Model to train: dssm, clsm, mt-dnn (or any trainable registered model).")
    ],
    data: Annotated[
        str,
        typer.Option(
            help="BEIR-layout data set with a training split (with --clicks: the documents, a data set or "
            "an id<TAB>title[<TAB>text] file)."
        ),
    ],
    out_dir: Annotated[Path, typer.Option("--out", help="Directory to save the trained model in.")],
    split: Annotated[str, typer.Option(help="Qrels split to train on.")] = "train",
    dev: Annotated[
        str | None, typer.Option(help="Qrels split for early stopping (default: 'dev' if the data set has one).")
    ] = None,
    threshold: Annotated[int, typer.Option(help="Lowest grade that makes a (query, document) pair a positive.")] = 3,
    fields: Annotated[str, typer.Option(help="Document fields: title, text or title+text.")] = "title",
    param: Annotated[
        list[str],
        typer.Option(
            "--param", help="Model/training parameter NAME=VALUE (JSON values), e.g. negatives=50, gamma=[5,10,20]."
        ),
    ] = [],
    checkpoint: Annotated[Path | None, typer.Option(help="Checkpoint directory (written every epoch).")] = None,
    resume: Annotated[bool, typer.Option(help="Resume from the checkpoint directory.")] = False,
    hold_out: Annotated[
        str | None,
        typer.Option(
            "--hold-out",
            help="Leave fold I/N of the queries out (from 1), for a ranker: --ranker-param train_fold=I/N.",
        ),
    ] = None,
    clicks: Annotated[
        Path | None,
        typer.Option(
            "--clicks",
            help="Train on clicks alone: an event log directory (impressions/, events/) or a "
            "query<TAB>doc_id<TAB>clicks file; every click is a positive pair.",
        ),
    ] = None,
    debias: Annotated[
        str,
        typer.Option(
            help="--clicks DIR: none (every click counts 1) or ipw (a click at rank r counts 1/θ_r, clipped; "
            "θ from --propensities or a PBM fitted to the log).",
        ),
    ] = "none",
    propensities: Annotated[
        str | None,
        typer.Option(
            help="--debias ipw: examination probabilities per rank, comma-separated (e.g. 0.68,0.61,0.48,...).",
        ),
    ] = None,
) -> None:
    """Train a model on a data set's judged pairs; progress shows pairs/s, loss and the dev metric.
    Under ``torchrun --nproc-per-node N -m semsearch train ...`` the N processes train one model
    together (data-parallel; training/distributed.py); rank 0 prints and writes ``--out``."""
    from ..evaluation import QueryFold
    from ..plugins import family, model_names
    from ..training import distributed, recipe, trainable

    if model in model_names() and not trainable(model):
        raise ValueError(
            f"{model} ({family(model)} family) is not trainable: it needs no training; use it directly "
            f"(semsearch run --model {model} ...)"
        )
    model_kw, args = recipe(model, parse_params(param), where="--param")  # validated before any data is read
    fold = QueryFold.parse(hold_out, "--hold-out") if hold_out is not None else None
    source = _click_source(clicks, debias, propensities, fold) if clicks is not None else None
    if source is not None and (split != "train" or threshold != 3):
        raise ValueError("--split and --threshold choose judged positives; with --clicks every click is one")
    if source is None and (debias != "none" or propensities is not None):
        raise ValueError("--debias and --propensities need --clicks")
    if not distributed.launched():
        return _train(
            model, model_kw, args, data, out_dir, split, dev, threshold, fields, checkpoint, resume, fold, source
        )
    from ..training.args import TrainArgs

    if not isinstance(args, TrainArgs):
        raise ValueError(
            f"{model} does not train on the epoch loop; distributed training (torchrun) covers dssm, "
            "clsm, mt-dnn, knrm, matchpyramid, bert-rep, bert-rel and s2net: train it without torchrun"
        )
    distributed.check_batch(args.batch_size)  # before any data is read
    distributed.init(args.device)
    try:
        _train(model, model_kw, args, data, out_dir, split, dev, threshold, fields, checkpoint, resume, fold, source)
        distributed.barrier()  # the other ranks wait while rank 0 writes the model
    finally:
        distributed.teardown()
    distributed.exit_process(0)  # done and written: skip the runtime teardown that can abort (see there)


def _train(
    model: str,
    model_kw: dict[str, Any],
    args: Any,
    data: str,
    out_dir: Path,
    split: str,
    dev: str | None,
    threshold: int,
    fields: str,
    checkpoint: Path | None,
    resume: bool,
    hold_out: QueryFold | None = None,
    clicks: ClickSource | None = None,
) -> None:
    """``train``'s work: read the data (less the ``hold_out`` fold's queries; or, with ``clicks``,
    the click log's clicked pairs over the data's documents), fit, and (on rank 0 only, under
    torchrun) save the model; the log names the fold held out or the click log learnt from."""
    from ..data import EvalSet, TrainingData, open_dataset
    from ..plugins import create_model
    from ..training import distributed, fit

    main = distributed.is_main()
    m = create_model(model, **model_kw)
    if clicks is not None:
        return _train_on_clicks(m, model, args, data, out_dir, dev, fields, checkpoint, resume, clicks)
    ds = open_dataset(data)
    dev_split = dev if dev is not None else ("dev" if "dev" in ds.splits else None)
    train_data = TrainingData.from_dataset(ds, split, threshold=threshold, fields=fields)  # type: ignore[arg-type]  # checked
    held: list[str] = []
    if hold_out is not None:
        held = hold_out.queries(ds.qrels(split))
        train_data = train_data.without_queries(held)
    dev_set = EvalSet.judged(ds, dev_split) if dev_split else None
    if main:
        err.print(
            f"training {model} on {len(train_data.positives)} positive pairs of {ds.name}/{split}"
            + (f" (fold {hold_out} held out: {len(held):,} queries)" if hold_out is not None else "")
            + (f", early stopping on {dev_split}" if dev_split else "")
            + (f", {distributed.world()} processes" if distributed.active() else ""),
            highlight=False,
        )
    options: dict[str, Any] = {"checkpoint_dir": checkpoint, "resume": resume} if checkpoint else {}
    log = fit(m, train_data, dev_set, args=args, **options)
    if hold_out is not None:
        log["held_out"] = {"split": split, "fold": str(hold_out), "queries": len(held)}
    if main:
        _save(m, log, out_dir)


def _save(m: Any, log: dict[str, Any], out_dir: Path) -> None:
    """The trained model and its log into ``out_dir``, swapped in whole."""
    from ..data.files import atomic_dir, write_json
    from ..models.base import TRAINING_LOG

    # written beside --out and swapped in whole: a run killed at any point leaves the previous
    # model there intact (its leftover folder is removed by the next run)
    with atomic_dir(out_dir) as tmp:
        m.save(tmp)
        write_json(tmp / TRAINING_LOG, log)
    if "stopped" in log:
        kept = f"; kept epoch {log['best_epoch']}" if "best_epoch" in log else ""
        err.print(f"{log['stopped']}{kept}", highlight=False)
    err.print(f"model saved to {out_dir}", highlight=False)


@dataclass(frozen=True)
class ClickSource:
    """``train --clicks``: the log (a directory of events, or a click-count file) and its weighting."""

    path: Path
    debias: str
    propensities: list[float] | None


def _click_source(path: Path, debias: str, propensities: str | None, fold: QueryFold | None) -> ClickSource:
    """``--clicks`` and its options, checked before any data is read."""
    if fold is not None:
        raise ValueError("--hold-out leaves judged queries out; with --clicks there are none")
    if debias not in ("none", "ipw"):
        raise ValueError(f"--debias must be none or ipw for a pair model, got {debias!r}")
    if not path.exists():
        raise FileNotFoundError(f"--clicks {path}: no such event log directory or click file")
    if debias == "ipw" and not path.is_dir():
        raise ValueError(
            f"--debias ipw needs the rank of each click: an event log directory, not the click-count file {path}"
        )
    if propensities is not None and debias != "ipw":
        raise ValueError("--propensities weigh clicks under --debias ipw")
    given = None
    if propensities is not None:
        try:
            given = [float(x) for x in propensities.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"--propensities: comma-separated numbers, got {propensities!r}") from None
    return ClickSource(path, debias, given)


def _train_on_clicks(
    m: Any,
    model: str,
    args: Any,
    data: str,
    out_dir: Path,
    dev: str | None,
    fields: str,
    checkpoint: Path | None,
    resume: bool,
    clicks: ClickSource,
) -> None:
    """``train --clicks``: the clicked pairs over ``data``'s documents; no judgments unless
    ``--dev`` names a split to stop early on."""
    from ..data import EvalSet, TrainingData, iter_clicks, load_corpus, open_dataset
    from ..data.errors import DataFormatError
    from ..training import distributed, fit

    ds = None if Path(data).is_file() else open_dataset(data)
    corpus = load_corpus(data) if ds is None else ds.corpus()
    if clicks.path.is_dir():
        from ..data.events import read_sessions
        from ..training.clicks import click_pairs, examination_propensities

        sessions = read_sessions(clicks.path)
        prop = examination_propensities(sessions, clicks.propensities) if clicks.debias == "ipw" else None
        train_data = click_pairs(sessions, corpus, fields=fields, propensities=prop)  # type: ignore[arg-type]  # checked
        what = f"{len(sessions):,} impressions of the event log {clicks.path}" + (
            f", clicks weighted by 1/θ_r (θ = {', '.join(f'{x:.3f}' for x in prop)})" if prop is not None else ""
        )
    else:
        try:
            train_data = TrainingData.from_clicks(iter_clicks(clicks.path), corpus, fields=fields)  # type: ignore[arg-type]
        except DataFormatError:
            raise
        except ValueError as e:
            if "no positive pairs" in str(e):
                raise ValueError(f"--clicks {clicks.path}: no clicks (every line has 0 clicks, or none)") from None
            raise ValueError(f"--clicks {clicks.path}: {e}") from None
        what = f"the click file {clicks.path}"
    if dev is not None and ds is None:
        raise ValueError(f"--dev {dev}: --data {data} is a documents file, with no judgments")
    dev_set = EvalSet.judged(ds, dev) if dev is not None and ds is not None else None
    main = distributed.is_main()
    if main:
        err.print(
            f"training {model} on {len(train_data.positives):,} clicked pairs from {what}"
            + (f", early stopping on {dev}" if dev else ", no dev split (clicks alone)"),
            highlight=False,
        )
    options: dict[str, Any] = {"checkpoint_dir": checkpoint, "resume": resume} if checkpoint else {}
    log = fit(m, train_data, dev_set, args=args, **options)
    log["clicks"] = {"log": str(clicks.path), "positives": len(train_data.positives), "debias": clicks.debias}
    if main:
        _save(m, log, out_dir)
