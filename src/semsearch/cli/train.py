"""``semsearch train``: fit a model on a data set's judged pairs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from ..evaluation import QueryFold
from .common import (
    _guard,
    _parse_params,
    app,
    err,
)


@app.command("train")
@_guard
def train_cmd(
    model: Annotated[
        str, typer.Argument(help="Model to train: dssm, clsm, mt-dnn (or any trainable registered model).")
    ],
    data: Annotated[str, typer.Option(help="BEIR-layout data set with a training split.")],
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
    model_kw, args = recipe(model, _parse_params(param), where="--param")  # validated before any data is read
    fold = QueryFold.parse(hold_out, "--hold-out") if hold_out is not None else None
    if not distributed.launched():
        return _train(model, model_kw, args, data, out_dir, split, dev, threshold, fields, checkpoint, resume, fold)
    from ..training.args import TrainArgs

    if not isinstance(args, TrainArgs):
        raise ValueError(
            f"{model} does not train on the epoch loop; distributed training (torchrun) covers dssm, "
            "clsm, mt-dnn, knrm, matchpyramid, bert-rep, bert-rel and s2net: train it without torchrun"
        )
    distributed.check_batch(args.batch_size)  # before any data is read
    distributed.init(args.device)
    try:
        _train(model, model_kw, args, data, out_dir, split, dev, threshold, fields, checkpoint, resume, fold)
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
) -> None:
    """``train``'s work: read the data (less the ``hold_out`` fold's queries), fit, and (on rank 0
    only, under torchrun) save the model; the log names the fold held out."""
    import shutil

    from ..data import EvalSet, TrainingData, open_dataset
    from ..data._io import fsync_tree, replace_dir, tmp_dir, write_json
    from ..models.base import TRAINING_LOG
    from ..plugins import create_model
    from ..training import distributed, fit

    main = distributed.is_main()
    m = create_model(model, **model_kw)
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
    if not main:
        return
    # written beside --out and swapped in whole: a run killed at any point leaves the previous
    # model there intact (its leftover folder is removed by the next run)
    tmp = tmp_dir(out_dir)
    try:
        m.save(tmp)
        write_json(tmp / TRAINING_LOG, log)
        fsync_tree(tmp)
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if "stopped" in log:
        kept = f"; kept epoch {log['best_epoch']}" if "best_epoch" in log else ""
        err.print(f"{log['stopped']}{kept}", highlight=False)
    err.print(f"model saved to {out_dir}", highlight=False)
