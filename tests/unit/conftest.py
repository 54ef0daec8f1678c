"""Fixtures for the bundle and service tests: a tiny trained CLSM and a BM25 + CLSM bundle."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from semsearch.data import EvalSet, TrainingData, open_dataset
from semsearch.index import build_bundle
from semsearch.models import Model
from semsearch.plugins import create_model
from semsearch.training import fit, recipe


def _trained_clsm(seed: int = 0, name: str = "clsm") -> Model:
    ds = open_dataset("tiny")
    shape = {"conv": 16, "out": 8, "window": 3} if name == "clsm" else {"hidden": [32], "out": 8}
    kw, args = recipe(name, {**shape, "batch_size": 16, "neg_pool": 32, "epochs": 3, "patience": 10, "lr": 0.5, "seed": seed})
    m = create_model(name, **kw)
    fit(m, TrainingData.from_dataset(ds, "train", threshold=2), EvalSet.judged(ds, "dev"), progress=False, args=args)
    return m


@pytest.fixture
def trained_clsm(tiny_data) -> Callable[..., Model]:
    """Factory: a tiny CLSM trained for a few epochs on the tiny data set (seconds)."""
    return _trained_clsm


@pytest.fixture
def make_bundle(tiny_data) -> Callable[..., Path]:
    """Factory: a BM25 + CLSM (or DSSM) bundle of the tiny data set at the given path."""

    def make(out: Path, seed: int = 0, model: str = "clsm") -> Path:
        ds = open_dataset("tiny")
        return build_bundle(ds.corpus(), [create_model("bm25", analyzer="english"), _trained_clsm(seed, model)], out,
                            dataset="tiny")

    return make
