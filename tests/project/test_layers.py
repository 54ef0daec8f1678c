"""The layers are checked, not only drawn: pyproject's [tool.importlinter] contract (cli on top,
then experiments, serving, training, clicks, index, ranking, plugins, models, evaluation, text,
data, and the foundation modules as independent siblings at the bottom) holds for the package, run
by import-linter, and a failure shows the offending import chain. The same contract run over a
generated package with one upward import and one import between foundation siblings reports both,
so a kept contract means the imports were looked at."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]


def _lint_imports(config: Path, python_path: Path) -> subprocess.CompletedProcess[str]:
    """Run import-linter's ``lint-imports`` on ``config`` with only ``python_path`` ahead of the venv's
    path, so the package checked is the one under ``python_path`` (not an installed copy)."""
    env = {**os.environ, "PYTHONPATH": str(python_path)}
    command = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", command, "--no-cache", "--no-logo", str(config)],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_layers_contract_kept() -> None:
    r = _lint_imports(ROOT / "pyproject.toml", ROOT / "src")
    if r.returncode != 0:
        pytest.fail(f"lint-imports exited {r.returncode}:\n{(r.stdout + r.stderr).strip()}", pytrace=False)
    assert "0 broken" in r.stdout, r.stdout


def test_layers_contract_catches_an_inverted_import(tmp_path: Path) -> None:
    # the contract's own layer list over a package "layered" holding one module per layer
    (contract,) = CONTRACT["contracts"]
    layers: list[str] = contract["layers"]
    package = tmp_path / "layered"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for line in layers:
        for name in line.split("|"):
            (package / f"{name.strip()}.py").write_text("")
    # data (near the bottom) imports serving (near the top); two foundation siblings import each other
    (package / "data.py").write_text("from layered import serving\n")
    (package / "types.py").write_text("from layered import params\n")
    config = tmp_path / "contract.toml"
    config.write_text(
        '[tool.importlinter]\nroot_package = "layered"\n\n[[tool.importlinter.contracts]]\n'
        f'name = "layers"\ntype = "layers"\ncontainers = ["layered"]\nlayers = {json.dumps(layers)}\n'
    )
    r = _lint_imports(config, tmp_path)
    output = r.stdout + r.stderr
    assert r.returncode == 1, output
    assert "1 broken" in output, output
    assert "layered.data -> layered.serving" in output, output
    assert "layered.types -> layered.params" in output, output
