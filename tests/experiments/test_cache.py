"""The model cache key: recipe + kind + trainer version, never the source code."""

from __future__ import annotations

import ast
import builtins
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import semsearch.training.versions as versions
from semsearch.experiments.cache import cache_key, keyed_recipe
from semsearch.training.versions import TRAINER_VERSIONS, trainer_version

RECIPE = {"dataset": "homedepot", "model": "dssm", "params": {"seed": 0}, "train": {"split": "train"}}
DIGEST = "18f7e386428f"  # cache_key("dssm", RECIPE) with dssm at version 1


def test_key_is_a_function_of_kind_and_recipe_only():
    assert list(inspect.signature(cache_key).parameters) == ["kind", "recipe"]
    assert cache_key("dssm", RECIPE) == cache_key("dssm", dict(reversed(RECIPE.items()))) == DIGEST


def test_key_reads_no_file(monkeypatch):
    def no_files(*args, **kwargs):
        raise AssertionError("the cache key read a file")

    monkeypatch.setattr(builtins, "open", no_files)
    monkeypatch.setattr(Path, "read_bytes", no_files)
    monkeypatch.setattr(Path, "read_text", no_files)
    assert cache_key("dssm", RECIPE) == DIGEST


def test_key_is_the_same_in_another_process():
    code = (
        "import json, sys; from semsearch.experiments.cache import cache_key; "
        "print(cache_key('dssm', json.loads(sys.argv[1])))"
    )
    out = subprocess.run([sys.executable, "-c", code, json.dumps(RECIPE)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == DIGEST


@pytest.mark.parametrize(
    "change",
    [
        {"dataset": "other"},
        {"params": {"seed": 1}},
        {"train": {"split": "train", "threshold": 2}},
        {"model": "clsm"},
    ],
)
def test_key_changes_with_the_recipe(change):
    assert cache_key("dssm", {**RECIPE, **change}) != DIGEST


def test_key_changes_with_the_kind_and_its_trainer_version(monkeypatch):
    assert cache_key("clsm", RECIPE) != DIGEST
    monkeypatch.setitem(TRAINER_VERSIONS, "dssm", TRAINER_VERSIONS["dssm"] + 1)
    assert keyed_recipe("dssm", RECIPE)["trainer_version"] == 2
    assert cache_key("dssm", RECIPE) != DIGEST


def test_every_trainable_kind_has_a_version():
    from semsearch.plugins import model_names
    from semsearch.training import trainable

    kinds = {n for n in model_names() if trainable(n) and not n.startswith("test-")}
    assert kinds == set(TRAINER_VERSIONS)
    assert all(trainer_version(k) >= 1 for k in kinds)
    assert trainer_version("bm25") == 0 and trainer_version("no-such-kind") == 0


def test_versions_module_is_a_leaf():
    tree = ast.parse(Path(versions.__file__).read_text())
    imported = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert all(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in imported)
