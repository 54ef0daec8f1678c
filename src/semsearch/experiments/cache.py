"""Trained models saved under a model directory and reused when their recipe matches.

A saved model's key is its recipe (data, split, parameters, seed, training block: whatever the
caller puts in it), its kind's name and the kind's trainer version from
``semsearch.training.versions`` — never the source code, so refactoring keeps cached models.
Bump the version when a change alters what training produces.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..data.files import write_json
from ..models import Model
from ..models.base import RECIPE, TRAINING_LOG
from ..plugins import load_model
from ..training.versions import trainer_version


def keyed_recipe(kind: str, recipe: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe with the kind's name and trainer version: what ``recipe.json`` records."""
    return {**recipe, "kind": kind, "trainer_version": trainer_version(kind)}


def cache_key(kind: str, recipe: Mapping[str, Any]) -> str:
    """12 hex digits of SHA-1 over the keyed recipe (JSON, sorted keys). A function of ``kind``,
    ``recipe`` and the version table only: no file is read."""
    return hashlib.sha1(json.dumps(keyed_recipe(kind, recipe), sort_keys=True).encode()).hexdigest()[:12]


def saved_dir(model_dir: Path, kind: str, recipe: Mapping[str, Any]) -> Path:
    """Where ``cached_training`` keeps the model of ``recipe``: ``model_dir/KIND-KEY``."""
    return model_dir / f"{kind}-{cache_key(kind, recipe)}"


def cached_training(
    model_dir: Path | None,
    kind: str,
    recipe: Mapping[str, Any],
    train: Callable[[], tuple[Model, dict[str, Any]]],
    retrain: bool = False,
) -> tuple[Model, dict[str, Any]]:
    """``train()`` → (model, training log), or the model saved earlier under ``model_dir`` as
    ``KIND-KEY`` with the same keyed recipe (see ``cache_key``) unless ``retrain``.

    Args:
        model_dir: the folder of saved models (None: always train, save nothing).
        kind: the registered model name.
        recipe: everything that decides the trained model, keyed into its folder name.
        train: trains a fresh model and returns it with its log.
        retrain: train even when a saved model matches.

    Returns:
        The model and its training log."""
    keyed = keyed_recipe(kind, recipe)
    saved = saved_dir(model_dir, kind, recipe) if model_dir else None
    if saved is not None and not retrain and (saved / RECIPE).is_file():
        try:
            if json.loads((saved / RECIPE).read_text(encoding="utf-8")) == keyed:
                return load_model(saved), json.loads((saved / TRAINING_LOG).read_text(encoding="utf-8"))
        except (OSError, ValueError):  # a corrupt entry (ModelDirError, bad JSON) is a miss: train again
            pass
    model, log = train()
    if saved is not None:
        model.save(saved)
        write_json(saved / RECIPE, keyed)
        write_json(saved / TRAINING_LOG, log)
    return model, log
