"""Experiment specs: each paper table to reproduce is data (a TOML file), not code.

A spec names the data set and split, the candidate set, the models (fixed parameters or a grid
tuned on a dev split / by k-fold CV over queries), the metrics, the baselines for significance
markers, the paper's own figures, and the bounds our figures are expected to fall in (Pyserini's
"two-click reproduction" idea: a runner that checks the expected scores)."""

from __future__ import annotations

import itertools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPEC_DIR = Path(__file__).parent / "specs"

_CANDIDATES = re.compile(r"^(judged|full:(\d+)|run:([\w.-]+):(\d+))$")


class SpecError(ValueError):
    """A spec file that does not describe a runnable experiment."""


@dataclass(frozen=True)
class ModelSpec:
    """One row of the table."""

    label: str
    model: str  # a registered model name, a saved model directory, "run:NAME" (a data set's run as
    # is) or "interpolate" (a weighted sum of the rows named in ``combine``; weight tuned by ``grid``)
    params: dict[str, Any] = field(default_factory=dict)  # given to the model's constructor
    grid: dict[str, list[Any]] = field(default_factory=dict)  # tuned, applied with ``with_params``
    train: dict[str, Any] = field(default_factory=dict)  # {split, threshold, fields[, dataset, dev]}: fit before ranking
    combine: list[str] = field(default_factory=list)
    norm: str = "minmax"  # per-query score normalisation of interpolated rows
    analyzer: str | None = None
    fields: str | None = None  # document fields for this row (default: the spec's)
    stats: str = "collection"  # or "exclude-query-pool" (lexical models on pooled corpora)
    paper: dict[str, float] = field(default_factory=dict)
    expect: dict[str, tuple[float, float]] = field(default_factory=dict)

    def settings(self) -> list[dict[str, Any]]:
        """Every grid setting to try (``[{}]`` without a grid)."""
        keys = sorted(self.grid)
        return [dict(zip(keys, values)) for values in itertools.product(*(self.grid[k] for k in keys))]

    @property
    def is_run(self) -> bool:
        return self.model.startswith("run:")

    @property
    def is_interpolation(self) -> bool:
        return self.model == "interpolate"


@dataclass(frozen=True)
class ExperimentSpec:
    """A whole table."""

    name: str
    title: str
    source: str
    dataset: str
    split: str
    candidates: str
    models: list[ModelSpec]
    metrics: list[str]
    gain: str = "exp"
    queries: str = "judged"
    rel_threshold: int = 1
    fields: str = "title+text"
    tune: str = "none"  # "dev" (a split name follows: "split:dev"), "cv2", "cv5", or "none"
    tune_metric: str = "ndcg@10"
    baselines: list[str] = field(default_factory=list)
    crosstab: dict[str, Any] = field(default_factory=dict)  # {rows, columns[, bins]}: top-1 label table
    notes: str = ""

    @property
    def candidate_mode(self) -> tuple[str, str | None, int | None]:
        """("judged", None, None) | ("full", None, k) | ("run", run name, k)."""
        m = _CANDIDATES.match(self.candidates)
        assert m  # validated in load_spec
        if m.group(1) == "judged":
            return "judged", None, None
        if m.group(2):
            return "full", None, int(m.group(2))
        return "run", m.group(3), int(m.group(4))


def load_spec(path: str | Path) -> ExperimentSpec:
    """Parse and validate a spec file."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise SpecError(f"{p}: {e}") from None
    try:
        models = [_model(m) for m in raw.pop("models")]
        spec = ExperimentSpec(models=models, **raw)
    except (KeyError, TypeError) as e:
        raise SpecError(f"{p}: missing or unknown field ({e})") from None
    if not _CANDIDATES.match(spec.candidates):
        raise SpecError(f"{p}: candidates must be 'judged', 'full:K' or 'run:NAME:K', got {spec.candidates!r}")
    if not re.match(r"^(none|cv\d+|split:[\w.-]+)$", spec.tune):
        raise SpecError(f"{p}: tune must be 'none', 'cvK' or 'split:NAME', got {spec.tune!r}")
    labels = [m.label for m in spec.models]
    if len(set(labels)) != len(labels):
        raise SpecError(f"{p}: duplicate model labels")
    missing = [b for b in spec.baselines if b not in labels]
    if missing:
        raise SpecError(f"{p}: baselines {missing} are not model labels")
    if spec.crosstab and any(spec.crosstab.get(k) not in labels for k in ("rows", "columns")):
        raise SpecError(f"{p}: crosstab rows/columns must be model labels")
    for i, m in enumerate(spec.models):
        if m.grid and spec.tune == "none":
            raise SpecError(f"{p}: model {m.label!r} has a grid but the spec has tune = 'none'")
        if m.is_interpolation:
            earlier = labels[:i]
            if len(m.combine) < 2 or any(c not in earlier for c in m.combine):
                raise SpecError(f"{p}: {m.label!r} must combine at least two rows listed before it")
            if set(m.grid) != {"weight"} or len(m.combine) != 2:
                raise SpecError(f"{p}: {m.label!r} interpolates two rows with grid = {{ weight = [...] }}")
        unknown = set(m.train) - {"split", "threshold", "fields", "dataset", "dev"}
        if unknown:
            raise SpecError(f"{p}: {m.label!r} train has unknown keys {sorted(unknown)}")
    return spec


def _model(raw: dict[str, Any]) -> ModelSpec:
    expect = {k: (float(v[0]), float(v[1])) for k, v in raw.pop("expect", {}).items()}
    return ModelSpec(expect=expect, **raw)


def spec_paths() -> dict[str, Path]:
    """Registered specs by name (file stem)."""
    return {p.stem: p for p in sorted(SPEC_DIR.glob("*.toml"))}


def get_spec(name_or_path: str) -> ExperimentSpec:
    """A registered spec by name, or a spec file path."""
    paths = spec_paths()
    if name_or_path in paths:
        return load_spec(paths[name_or_path])
    if Path(name_or_path).is_file():
        return load_spec(name_or_path)
    raise SpecError(f"unknown experiment {name_or_path!r}; known: {', '.join(paths)}")
