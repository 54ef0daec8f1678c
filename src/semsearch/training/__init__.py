"""Training: every way a model learns. ``fit`` trains any registered kind by its family's trainer
(``TRAINERS``) with the kind's typed arguments (``ARGS``); the gradient trainers share
``loop.epoch_loop``, the EM trainers ``loop.em_loop``.

One parameter vocabulary: a CLI ``--param`` list, a spec row's ``params`` and a Python call name a
kind's model parameters and its training arguments together; ``recipe`` splits them by name into
the model's ``Params`` (what it is: saved in its config.json) and the trainer's ``TrainArgs`` (how
it learns: saved in training.json), validating both where they enter."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..data import EvalSet, TrainingData
from ..models import Model
from ..models.base import TRAINING_LOG
from ..params import ParamError, Params, split
from ..plugins import family, params_type

__all__ = ["ARGS", "TRAINERS", "args_type", "fit", "held_out", "recipe", "trainable", "trainer_of"]


def _own(
    model: Any, data: TrainingData, dev: EvalSet | None, *, progress: bool = True, **options: Any
) -> dict[str, Any]:
    """A plugin kind that learns by its own ``fit(data, dev=, progress=)``."""
    if options:
        raise ValueError(f"{model.name}: training options {sorted(options)} are not supported")
    return model.fit(data, dev=dev, progress=progress)


# family -> its trainer ("module:function" under training/, imported when first used, so checking a
# spec or a --param list does not load torch)
TRAINERS: dict[str, str] = {
    "neural": "trainer:train_encoder",
    "interaction": "pairwise:train_interaction",
    "transformer": "transformer:train_transformer",
    "mtdnn": "mtdnn:train_mtdnn_kind",
    "topic": "topic:train_topic",
    "translation": "translation:train_translation",
    "projection": "projection:train_projection",
    "distill": "distill:train_static_query",
    "ranker": "ranker:train_ranker",
    "plugin": "_own",
}


def _resolve(target: str) -> Any:
    if ":" not in target:
        return globals()[target]
    module, name = target.split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def trainable(kind: str) -> bool:
    """Whether ``kind``'s family learns (the CLI and specs ask before reading any data)."""
    return family(kind) in TRAINERS


def trainer_of(fam: str) -> Callable[..., dict[str, Any]] | None:
    """The trainer function of a family; None when its models do not learn."""
    target = TRAINERS.get(fam)
    return _resolve(target) if target else None


# kind -> its trainer's arguments ("module:Class" under training/); a kind not listed takes none
ARGS: dict[str, str] = {
    "dssm": "args:EncoderArgs",
    "clsm": "args:EncoderArgs",
    "mt-dnn": "args:MTDNNArgs",
    "knrm": "args:PairwiseArgs",
    "matchpyramid": "args:PairwiseArgs",
    "bert-rep": "args:BiEncoderArgs",
    "bert-rel": "args:CrossEncoderArgs",
    "plsa": "args:EMArgs",
    "lda": "args:LDAArgs",
    "bltm": "args:BLTMArgs",
    "wtm": "args:IBM1Args",
    "ptm": "args:IBM1Args",
    "lsa": "args:PCAArgs",
    "cl-lsa": "args:PCAArgs",
    "opca": "args:OPCAArgs",
    "s2net": "args:S2NetArgs",
    "lambdamart": "args:RankerArgs",
    "static-query": "args:DistillArgs",
}


def args_type(kind: str) -> type[Params] | None:
    """The typed training arguments of ``kind`` (``TrainArgs`` for the epoch loop's trainers, a plain
    ``Params`` for closed-form and EM ones; None: it trains without arguments, or not at all)."""
    target = ARGS.get(kind)
    if target is None:
        return None
    return _resolve(target)


def recipe(kind: str, raw: Mapping[str, Any], *, where: str = "") -> tuple[dict[str, Any], Params | None]:
    """``raw`` (one vocabulary) split into the kind's validated model parameters (a dict for its
    constructor) and its training arguments; unknown names and bad values fail here, naming
    ``where`` they came from."""
    targs = args_type(kind)
    mp: type[Params] | None = params_type(kind)
    if mp is None:  # the model checks its own keywords
        train = {k: v for k, v in raw.items() if targs is not None and k in targs.names()}
        return {k: v for k, v in raw.items() if k not in train}, targs.from_mapping(
            train, where=where
        ) if targs else None
    parts = split(raw, mp, *([targs] if targs else []), where=where)
    if targs:
        try:
            parts[1].check_with(parts[0])
        except ParamError as e:
            raise ParamError(f"{where}: {e}" if where else str(e)) from None
    return {k: v for k, v in raw.items() if k in mp.names()}, parts[1] if targs else None


def fit(
    model: Model,
    data: TrainingData,
    dev: EvalSet | None = None,
    *,
    progress: bool = True,
    args: Params | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Train ``model`` on ``data`` (early stopping / tuning on ``dev``); returns its training log.

    Args:
        model: the model of a trainable kind (``trainable``), trained in place.
        data: the training split and collection.
        dev: the dev queries, for early stopping / tuning (None: none).
        progress: show progress.
        args: the kind's typed training arguments (``args_type``; None: its defaults).
        **options: how to run: ``checkpoint_dir`` (where to checkpoint) and ``resume`` (resume from it).

    Returns:
        The training log, with the training arguments used under "args" when the kind takes any.

    Raises:
        ValueError: ``args`` of another type than the kind's, or a model that does not learn."""
    targs = args_type(model.name)
    if args is not None and (targs is None or not isinstance(args, targs)):
        raise ValueError(
            f"{model.name} takes {targs.__name__ if targs else 'no training arguments'}, got {type(args).__name__}"
        )
    if targs is not None:
        options["args"] = args if args is not None else targs()
    train = trainer_of(family(model))
    if train is None or (train is _own and not hasattr(model, "fit")):
        raise ValueError(
            f"model {model.name!r} ({family(model)}) is not trainable; trainable kinds are in families "
            f"{', '.join(sorted(TRAINERS))}"
        )
    log = train(model, data, dev, progress=progress, **options)
    if targs is not None:
        log["args"] = options["args"].as_dict()
    return log


def held_out(model_dir: str | Path) -> dict[str, Any] | None:
    """The fold of its training split a saved model learnt without (``semsearch train --hold-out``):
    ``{"split", "fold", "queries"}`` from the ``training.json`` beside it, or, for a static query
    encoder, its teacher's (``teacher_held_out``); None when it records none (or has no log)."""
    try:
        log = json.loads((Path(model_dir) / TRAINING_LOG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    got = (log.get("held_out") or log.get("teacher_held_out")) if isinstance(log, dict) else None
    return got if isinstance(got, dict) and isinstance(got.get("fold"), str) else None
