"""``semsearch train``: fit a model on a data set's judged pairs, or on a click log's clicks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from ..evaluation import QueryFold
from .common import app, err, guard, parse_params

# the command's flags, in --help order
ModelArg = Annotated[
    str, typer.Argument(help="Model to train: dssm, clsm, mt-dnn (or any trainable registered model).")
]
DataOpt = Annotated[
    str,
    typer.Option(
        help="BEIR-layout data set with a training split (with --clicks: the documents, a data set or "
        "an id<TAB>title[<TAB>text] file)."
    ),
]
OutDirOpt = Annotated[Path, typer.Option("--out", help="Directory to save the trained model in.")]
SplitOpt = Annotated[str, typer.Option(help="Qrels split to train on.")]
DevOpt = Annotated[
    str | None, typer.Option(help="Qrels split for early stopping (default: 'dev' if the data set has one).")
]
ThresholdOpt = Annotated[int, typer.Option(help="Lowest grade that makes a (query, document) pair a positive.")]
FieldsOpt = Annotated[str, typer.Option(help="Document fields: title, text or title+text.")]
ParamOpt = Annotated[
    list[str],
    typer.Option(
        "--param", help="Model/training parameter NAME=VALUE (JSON values), e.g. negatives=50, gamma=[5,10,20]."
    ),
]
CheckpointOpt = Annotated[Path | None, typer.Option(help="Checkpoint directory (written every epoch).")]
ResumeOpt = Annotated[bool, typer.Option(help="Resume from the checkpoint directory.")]
HoldOutOpt = Annotated[
    str | None,
    typer.Option(
        "--hold-out",
        help="Leave fold I/N of the queries out (from 1), for a ranker: --ranker-param train_fold=I/N.",
    ),
]
ClicksOpt = Annotated[
    Path | None,
    typer.Option(
        "--clicks",
        help="Train on clicks alone: an event log directory (impressions/, events/) or a "
        "query<TAB>doc_id<TAB>clicks file; every click is a positive pair.",
    ),
]
DebiasOpt = Annotated[
    str,
    typer.Option(
        help="--clicks DIR: none (every click counts 1) or ipw (a click at rank r counts 1/θ_r, clipped; "
        "θ from --propensities or a PBM fitted to the log).",
    ),
]
PropensitiesOpt = Annotated[
    str | None,
    typer.Option(
        help="--debias ipw: examination probabilities per rank, comma-separated (e.g. 0.68,0.61,0.48,...).",
    ),
]


@app.command("train")
@guard
def train_cmd(
    model: ModelArg,
    data: DataOpt,
    out_dir: OutDirOpt,
    split: SplitOpt = "train",
    dev: DevOpt = None,
    threshold: ThresholdOpt = 3,
    fields: FieldsOpt = "title",
    param: ParamOpt = [],
    checkpoint: CheckpointOpt = None,
    resume: ResumeOpt = False,
    hold_out: HoldOutOpt = None,
    clicks: ClicksOpt = None,
    debias: DebiasOpt = "none",
    propensities: PropensitiesOpt = None,
) -> None:
    """Train a model on a data set's judged pairs; progress shows pairs/s, loss and the dev metric.
    Under ``torchrun --nproc-per-node N -m semsearch train ...`` the N processes train one model
    together (data-parallel; training/distributed.py); rank 0 prints and writes ``--out``."""
    from ..training import distributed

    request = TrainRequest.from_cli(
        model,
        data,
        out_dir,
        split=split,
        dev=dev,
        threshold=threshold,
        fields=fields,
        param=param,
        checkpoint=checkpoint,
        resume=resume,
        hold_out=hold_out,
        clicks=clicks,
        debias=debias,
        propensities=propensities,
    )
    if not distributed.launched():
        return _train(request)
    from ..training.args import TrainArgs

    if not isinstance(request.args, TrainArgs):
        raise ValueError(
            f"{model} does not train on the epoch loop; distributed training (torchrun) covers dssm, "
            "clsm, mt-dnn, knrm, matchpyramid, bert-rep, bert-rel and s2net: train it without torchrun"
        )
    distributed.check_batch(request.args.batch_size)  # before any data is read
    distributed.init(request.args.device)
    try:
        _train(request)
        distributed.barrier()  # the other ranks wait while rank 0 writes the model
    finally:
        distributed.teardown()
    distributed.exit_process(0)  # done and written: skip the runtime teardown that can abort (see there)


@dataclass(frozen=True)
class TrainRequest:
    """What ``train`` was asked for, checked together before any data is read (``from_cli``):
    the model kind with its parameters (``model_kw``) and trainer arguments (``args``), the data,
    ``--out``, the judged split and its positives' ``threshold`` (or the click log instead), the
    early-stopping split, the document fields, the checkpoint, and the query fold held out."""

    model: str
    model_kw: dict[str, Any]
    args: Any
    data: str
    out_dir: Path
    split: str = "train"
    dev: str | None = None
    threshold: int = 3
    fields: str = "title"
    checkpoint: Path | None = None
    resume: bool = False
    hold_out: QueryFold | None = None
    clicks: ClickSource | None = None

    @classmethod
    def from_cli(
        cls,
        model: str,
        data: str,
        out_dir: Path,
        *,
        split: str = "train",
        dev: str | None = None,
        threshold: int = 3,
        fields: str = "title",
        param: list[str] | None = None,
        checkpoint: Path | None = None,
        resume: bool = False,
        hold_out: str | None = None,
        clicks: Path | None = None,
        debias: str = "none",
        propensities: str | None = None,
    ) -> TrainRequest:
        """``train``'s flags, each message naming its flag: a trainable kind, its ``--param``
        (model parameters and trainer arguments), the ``--hold-out`` fold, and ``--clicks`` with
        its weighting in place of ``--split`` / ``--threshold``'s judged positives."""
        from ..evaluation import QueryFold
        from ..plugins import family, model_names
        from ..training import recipe, trainable

        if model in model_names() and not trainable(model):
            raise ValueError(
                f"{model} ({family(model)} family) is not trainable: it needs no training; use it directly "
                f"(semsearch run --model {model} ...)"
            )
        model_kw, args = recipe(model, parse_params(param or []), where="--param")
        fold = QueryFold.parse(hold_out, "--hold-out") if hold_out is not None else None
        source = ClickSource.from_cli(clicks, debias, propensities, fold) if clicks is not None else None
        if source is not None and (split != "train" or threshold != 3):
            raise ValueError("--split and --threshold choose judged positives; with --clicks every click is one")
        if source is None and (debias != "none" or propensities is not None):
            raise ValueError("--debias and --propensities need --clicks")
        return cls(
            model, model_kw, args, data, out_dir, split, dev, threshold, fields, checkpoint, resume, fold, source
        )


def _train(r: TrainRequest) -> None:
    """``train``'s work: read the data (less the ``hold_out`` fold's queries; or, with ``clicks``,
    the click log's clicked pairs over the data's documents), fit, and (on rank 0 only, under
    torchrun) save the model; the log names the fold held out or the click log learnt from."""
    from ..data import EvalSet, TrainingData, open_dataset
    from ..plugins import create_model
    from ..training import distributed, fit

    main = distributed.is_main()
    m = create_model(r.model, **r.model_kw)
    if r.clicks is not None:
        return _train_on_clicks(m, r, r.clicks)
    ds = open_dataset(r.data)
    dev_split = r.dev if r.dev is not None else ("dev" if "dev" in ds.splits else None)
    train_data = TrainingData.from_dataset(ds, r.split, threshold=r.threshold, fields=r.fields)  # type: ignore[arg-type]  # checked
    held: list[str] = []
    if r.hold_out is not None:
        held = r.hold_out.queries(ds.qrels(r.split))
        train_data = train_data.without_queries(held)
    dev_set = EvalSet.judged(ds, dev_split) if dev_split else None
    if main:
        err.print(
            f"training {r.model} on {len(train_data.positives)} positive pairs of {ds.name}/{r.split}"
            + (f" (fold {r.hold_out} held out: {len(held):,} queries)" if r.hold_out is not None else "")
            + (f", early stopping on {dev_split}" if dev_split else "")
            + (f", {distributed.world()} processes" if distributed.active() else ""),
            highlight=False,
        )
    log = fit(m, train_data, dev_set, args=r.args, **_checkpointing(r))
    if r.hold_out is not None:
        log["held_out"] = {"split": r.split, "fold": str(r.hold_out), "queries": len(held)}
    if main:
        _save(m, log, r.out_dir)


def _checkpointing(r: TrainRequest) -> dict[str, Any]:
    """``fit``'s checkpoint arguments: ``--checkpoint`` and ``--resume``, or none."""
    return {"checkpoint_dir": r.checkpoint, "resume": r.resume} if r.checkpoint else {}


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

    @classmethod
    def from_cli(cls, path: Path, debias: str, propensities: str | None, fold: QueryFold | None) -> ClickSource:
        """``--clicks`` and its options (``--debias``, ``--propensities``; no ``--hold-out``), checked
        before any data is read."""
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
        return cls(path, debias, given)


def _train_on_clicks(m: Any, r: TrainRequest, clicks: ClickSource) -> None:
    """``train --clicks``: the clicked pairs over ``--data``'s documents; no judgments unless
    ``--dev`` names a split to stop early on."""
    from ..data import EvalSet, TrainingData, iter_clicks, load_corpus, open_dataset
    from ..data.errors import DataFormatError
    from ..training import distributed, fit

    ds = None if Path(r.data).is_file() else open_dataset(r.data)
    corpus = load_corpus(r.data) if ds is None else ds.corpus()
    if clicks.path.is_dir():
        from ..clicks.labels import click_pairs, examination_propensities
        from ..clicks.sessions import read_sessions

        sessions = read_sessions(clicks.path)
        prop = examination_propensities(sessions, clicks.propensities) if clicks.debias == "ipw" else None
        train_data = click_pairs(sessions, corpus, fields=r.fields, propensities=prop)  # type: ignore[arg-type]  # checked
        what = f"{len(sessions):,} impressions of the event log {clicks.path}" + (
            f", clicks weighted by 1/θ_r (θ = {', '.join(f'{x:.3f}' for x in prop)})" if prop is not None else ""
        )
    else:
        try:
            train_data = TrainingData.from_clicks(iter_clicks(clicks.path), corpus, fields=r.fields)  # type: ignore[arg-type]
        except DataFormatError:
            raise
        except ValueError as e:
            if "no positive pairs" in str(e):
                raise ValueError(f"--clicks {clicks.path}: no clicks (every line has 0 clicks, or none)") from None
            raise ValueError(f"--clicks {clicks.path}: {e}") from None
        what = f"the click file {clicks.path}"
    if r.dev is not None and ds is None:
        raise ValueError(f"--dev {r.dev}: --data {r.data} is a documents file, with no judgments")
    dev_set = EvalSet.judged(ds, r.dev) if r.dev is not None and ds is not None else None
    main = distributed.is_main()
    if main:
        err.print(
            f"training {r.model} on {len(train_data.positives):,} clicked pairs from {what}"
            + (f", early stopping on {r.dev}" if r.dev else ", no dev split (clicks alone)"),
            highlight=False,
        )
    log = fit(m, train_data, dev_set, args=r.args, **_checkpointing(r))
    log["clicks"] = {"log": str(clicks.path), "positives": len(train_data.positives), "debias": clicks.debias}
    if main:
        _save(m, log, r.out_dir)
