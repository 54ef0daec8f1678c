"""Training: negatives, losses, and the trainer loop shared by the neural models; ``fit`` trains
any model the experiments name (neural encoders here, EM/closed-form models by their own ``fit``)."""

from __future__ import annotations

from typing import Any

from ..data import EvalSet, TrainingData
from ..models import Model
from ..models.mtdnn import MTDNN
from ..models.interaction import InteractionModel
from ..models.neural import NeuralEncoder
from ..models.transformer import TransformerModel
from .pairwise import train_interaction
from .trainer import dev_score, run_epochs, train_encoder
from .transformer import train_transformer

__all__ = ["dev_score", "fit", "run_epochs", "train_encoder", "train_interaction", "train_transformer"]


def fit(model: Model, data: TrainingData, dev: EvalSet | None = None, *, progress: bool = True, **options: Any) -> dict[str, Any]:
    """Train ``model`` on ``data`` (early stopping / tuning on ``dev``); returns its training log."""
    if isinstance(model, MTDNN):
        from .mtdnn import train_mtdnn

        if options.get("checkpoint_dir"):
            raise ValueError("mt-dnn training does not write checkpoints; train without --checkpoint")
        options.pop("checkpoint_dir", None), options.pop("resume", None)

        return train_mtdnn(model, data if model.config["ranking"] else None, dev, progress=progress, **options)
    if isinstance(model, NeuralEncoder):
        return train_encoder(model, data, dev, progress=progress, **options)
    if isinstance(model, InteractionModel):
        return train_interaction(model, data, dev, progress=progress, **options)
    if isinstance(model, TransformerModel):
        if options:
            raise ValueError(f"{model.name}: training options {sorted(options)} are not supported")
        return train_transformer(model, data, dev, progress=progress)
    own = getattr(model, "fit", None)
    if own is None:
        raise ValueError(f"model {model.name!r} is not trainable")
    return own(data, dev=dev, progress=progress)
