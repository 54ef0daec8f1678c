"""Trained models saved under a model directory and reused when their recipe matches."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..models import Model, load_model


def code_version(cls: type) -> str:
    """Hash of the source a trained model depends on: its module, and the text and training
    packages. Any change there retrains instead of reusing a cached model."""
    import sys

    root = Path(__file__).resolve().parents[1]
    files = [Path(sys.modules[cls.__module__].__file__ or "")]
    files += sorted((root / "text").glob("*.py")) + sorted((root / "training").glob("*.py"))
    h = hashlib.sha1()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def cached_training(
    model_dir: Path | None, name: str, recipe: dict[str, Any], train: Callable[[], tuple[Model, dict[str, Any]]],
    retrain: bool = False,
) -> tuple[Model, dict[str, Any]]:
    """``train()`` → (model, training log), or the model saved earlier under ``model_dir`` with the
    same ``recipe`` (data, parameters, code version) unless ``retrain``."""
    digest = hashlib.sha1(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    saved = model_dir / f"{name}-{digest}" if model_dir else None
    if saved is not None and not retrain and (saved / "recipe.json").is_file():
        if json.loads((saved / "recipe.json").read_text()) == recipe:
            return load_model(saved), json.loads((saved / "training.json").read_text())
    model, log = train()
    if saved is not None:
        model.save(saved)
        (saved / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")
        (saved / "training.json").write_text(json.dumps(log, indent=2) + "\n")
    return model, log
