"""Training: every way a model learns. ``fit`` trains any registered kind by its family's trainer
(``TRAINERS``); the gradient trainers share ``loop.epoch_loop``, the EM trainers ``loop.em_loop``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..data import EvalSet, TrainingData
from ..models import Model
from ..plugins import family
from .pairwise import train_interaction
from .trainer import dev_score, run_epochs, train_encoder
from .transformer import train_transformer

__all__ = ["TRAINERS", "dev_score", "fit", "run_epochs", "train_encoder", "train_interaction", "train_transformer"]


def _mtdnn(model: Any, data: TrainingData, dev: EvalSet | None, *, progress: bool = True, **options: Any) -> dict[str, Any]:
    from .mtdnn import train_mtdnn

    if options.get("checkpoint_dir"):
        raise ValueError("mt-dnn training does not write checkpoints; train without --checkpoint")
    options.pop("checkpoint_dir", None), options.pop("resume", None)
    return train_mtdnn(model, data if model.config["ranking"] else None, dev, progress=progress, **options)


def _transformer(model: Any, data: TrainingData, dev: EvalSet | None, *, progress: bool = True, **options: Any) -> dict[str, Any]:
    if options:
        raise ValueError(f"{model.name}: training options {sorted(options)} are not supported")
    return train_transformer(model, data, dev, progress=progress)


def _own(model: Any, data: TrainingData, dev: EvalSet | None, *, progress: bool = True, **options: Any) -> dict[str, Any]:
    """Families that learn in closed form or by EM, through the model's ``fit``."""
    if options:
        raise ValueError(f"{model.name}: training options {sorted(options)} are not supported")
    return model.fit(data, dev=dev, progress=progress)


TRAINERS: dict[str, Callable[..., dict[str, Any]]] = {
    "neural": train_encoder,
    "interaction": train_interaction,
    "transformer": _transformer,
    "mtdnn": _mtdnn,
    "topic": _own,
    "translation": _own,
    "projection": _own,
    "plugin": _own,
}


def fit(model: Model, data: TrainingData, dev: EvalSet | None = None, *, progress: bool = True, **options: Any) -> dict[str, Any]:
    """Train ``model`` on ``data`` (early stopping / tuning on ``dev``); returns its training log."""
    trainer = TRAINERS.get(family(model))
    if trainer is None or (trainer is _own and not hasattr(model, "fit")):
        raise ValueError(f"model {model.name!r} ({family(model)}) is not trainable; trainable kinds are in families "
                         f"{', '.join(sorted(TRAINERS))}")
    return trainer(model, data, dev, progress=progress, **options)
