"""Experiment specs: each paper table to reproduce is data (a TOML file), not code.

A spec names the data set and split, the candidate set, the models (fixed parameters or a grid
tuned on a dev split / by k-fold CV over queries), the metrics, the baselines for significance
markers, the paper's own figures, and the bounds our figures are expected to fall in (Pyserini's
"two-click reproduction" idea: a runner that checks the expected scores)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import tomllib
import types
import typing
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
    # is), "interpolate" (a weighted sum of the rows named in ``combine``, interpolated rows
    # included: two rows, weight tuned by ``grid``; or, with no grid, the mean of two or more, seed
    # rows included: a seed ensemble) or
    # "lambdamart" with ``combine`` (LambdaMART over those rows' scores; ``params``: booster settings
    # and ``pair_features``; ``train.split``: the queries it learns from)
    params: dict[str, Any] = field(default_factory=dict)  # given to the model's constructor
    grid: dict[str, list[Any]] = field(default_factory=dict)  # tuned, applied with ``with_params``
    train: dict[str, Any] = field(
        default_factory=dict
    )  # {split, threshold, fields[, dataset, dev]}: fit before ranking;
    # lambdamart rows under tune = "cvK": {cv_folds}, trees by an inner CV in each outer fold; under
    # tune = "split:…": {split[, cross_fit]}, cross_fit = K scores the split's queries out of fold
    combine: list[str] = field(default_factory=list)
    norm: str = "minmax"  # per-query score normalisation of interpolated rows
    analyzer: str | None = None
    fields: str | None = None  # document fields for this row (default: the spec's)
    paper: dict[str, float] = field(default_factory=dict)
    expect: dict[str, tuple[float, float]] = field(default_factory=dict)
    depth: int | None = None  # full-collection rows: this row's own top-k (default: the spec's K)
    index: dict[str, Any] = field(default_factory=dict)  # retrieve through a vector index: {kind, metric, params}
    hybrid: dict[str, Any] = field(default_factory=dict)  # model = "hybrid": {scorer, weight, rrf_k, norm}
    seeds: int = 1  # trained rows: also train with the next seeds - 1 seeds ("LABEL (seed S)" rows) and
    # report the spread (mean ± sd, min–max, significance per seed); only this row feeds later rows
    correct_queries: bool = False  # rank with the queries spell-corrected against the collection's
    # words (``text.SpellCorrector``); training queries stay as typed. lambdamart rows: their pair
    # features' queries (the rows they combine correct their own, or not)

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

    @property
    def is_hybrid(self) -> bool:
        """Lexical rows ∪ semantic rows (``combine`` = [lexical, semantic]), merged per query."""
        return self.model == "hybrid"

    @property
    def is_ltr(self) -> bool:
        return self.model == "lambdamart" and bool(self.combine)


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


@dataclass(frozen=True)
class ClassificationSpec:
    """A query-classification table (MT-DNN Table 2, ``kind = "classification"``) or the
    domain-adaptation study (Figures 4-5, ``kind = "adaptation"``): AUC per domain."""

    name: str
    title: str
    source: str
    kind: str
    domain_set: str  # query-domains/NAME.tsv under the data root
    domains: list[str]
    ranking_dataset: str = ""  # MT-DNN's ranking task ("" = classification tasks only)
    mtdnn: dict[str, Any] = field(default_factory=dict)  # MT-DNN constructor parameters
    dnn: dict[str, Any] = field(default_factory=dict)  # single-task DNN parameters
    svm_c: list[float] = field(default_factory=lambda: [0.01, 0.1, 1.0, 10.0, 100.0])
    fractions: list[float] = field(default_factory=lambda: [0.001, 0.01, 0.1, 1.0])
    seeds: int = 3  # label samples averaged for fractions below 10 %
    dnn_steps: int = 300  # minibatch updates of DNN1/DNN2 in the adaptation study
    paper: dict[str, dict[str, float]] = field(default_factory=dict)  # system -> domain -> AUC
    expect: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)  # "mean" allowed
    notes: str = ""


SYSTEMS = ("SVM-Word", "SVM-Letter", "DNN", "MT-DNN")


def _typed_value(value: Any, tp: Any, key: str) -> Any:
    """``value`` (from TOML) checked against the field type ``tp``; ``(lo, hi)`` bounds become tuples.
    SpecError names the key (e.g. ``models[2].grid.weight``), what it must be and what it is."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (types.UnionType, typing.Union):  # X | None: TOML has no null, so X when present
        return _typed_value(value, next(a for a in args if a is not type(None)), key)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SpecError(f"{key} must be a finite number, got {value!r}")
        return float(value)
    if tp in (str, int, bool):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise SpecError(f"{key} must be {_TYPE_NAMES[tp]}, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, list) or len(value) != len(args):
            raise SpecError(f"{key} must be a list of {len(args)} values [low, high], got {value!r}")
        return tuple(_typed_value(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if origin is list:
        if not isinstance(value, list):
            raise SpecError(f"{key} must be a list, got {value!r}")
        if args and args[0] is ModelSpec:
            return [_model(v, f"{key}[{i}]") for i, v in enumerate(value)]
        return [_typed_value(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)] if args else value
    if origin is dict:
        if not isinstance(value, dict):
            raise SpecError(f"{key} must be a table, got {value!r}")
        return {k: _typed_value(v, args[1], f"{key}.{k}") for k, v in value.items()}
    raise TypeError(f"spec field type {tp!r} has no check")  # a new field type: add its check here


_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false"}


def _typed(cls: type, raw: Any, where: str) -> Any:
    """A spec dataclass from one TOML table: every key known, every required key present, every
    value of its field's type (the one place a spec's raw TOML becomes typed)."""
    if not isinstance(raw, dict):
        raise SpecError(f"{where or 'the spec'} must be a table, got {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    prefix = f"{where}." if where else ""
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise SpecError(f"unknown field {prefix}{unknown[0]}; fields: {', '.join(fields)}")
    missing = [
        n
        for n, f in fields.items()
        if n not in raw and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise SpecError(f"missing field {prefix}{missing[0]}")
    return cls(**{k: _typed_value(v, hints[k], f"{prefix}{k}") for k, v in raw.items()})


def _classification_spec(p: Path, raw: dict[str, Any]) -> ClassificationSpec:
    try:
        spec = _typed(ClassificationSpec, raw, "")
    except SpecError as e:
        raise SpecError(f"{p}: {e}") from None
    if spec.kind not in ("classification", "adaptation"):
        raise SpecError(f"{p}: kind must be 'classification' or 'adaptation', got {spec.kind!r}")
    if not spec.domains or len(set(spec.domains)) != len(spec.domains):
        raise SpecError(f"{p}: domains must be a non-empty list without repeats")
    for table in (spec.paper, spec.expect):
        for system, per_domain in table.items():
            if spec.kind == "classification" and system not in SYSTEMS:
                raise SpecError(f"{p}: unknown system {system!r}; systems: {', '.join(SYSTEMS)}")
            unknown = set(per_domain) - set(spec.domains) - {"mean"}
            if unknown:
                raise SpecError(f"{p}: {system} names domains {sorted(unknown)} that the spec does not list")
    if any(not 0 < f <= 1 for f in spec.fractions):
        raise SpecError(f"{p}: fractions must lie in (0, 1]")
    return spec


def load_spec(path: str | Path) -> ExperimentSpec | ClassificationSpec:
    """Parse and validate a spec file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        raw = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise SpecError(f"{p}: {e}") from None
    if raw.get("kind") == "ab":  # a simulated A/B test of two rows of a ranking spec
        return ab_spec(p, raw)  # type: ignore[return-value]  # ExperimentSpec | ClassificationSpec | ABSpec
    if "kind" in raw:
        return _classification_spec(p, raw)
    try:
        spec = _typed(ExperimentSpec, raw, "")
    except SpecError as e:
        raise SpecError(f"{p}: {e}") from None
    if not _CANDIDATES.match(spec.candidates):
        raise SpecError(f"{p}: candidates must be 'judged', 'full:K' or 'run:NAME:K', got {spec.candidates!r}")
    if not re.match(r"^(none|cv\d+|split:[\w.-]+)$", spec.tune):
        raise SpecError(f"{p}: tune must be 'none', 'cvK' or 'split:NAME', got {spec.tune!r}")
    labels = [m.label for m in spec.models]
    by_label = {
        lb: (j, e) for j, e in enumerate(spec.models) for lb in seed_labels(e)
    }  # seed rows too: they may be named
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
            earlier = [lb for lb, (j, _) in by_label.items() if j < i]
            if len(m.combine) < 2 or any(c not in earlier for c in m.combine):
                raise SpecError(f"{p}: {m.label!r} must combine at least two rows listed before it")
            if m.grid and (set(m.grid) != {"weight"} or len(m.combine) != 2):
                raise SpecError(
                    f"{p}: {m.label!r} interpolates two rows with grid = {{ weight = [...] }}, "
                    "or averages two or more with no grid"
                )
        if m.is_hybrid:
            earlier = labels[:i]
            if len(m.combine) != 2 or any(c not in earlier for c in m.combine):
                raise SpecError(f"{p}: {m.label!r} must combine a lexical and a semantic row listed before it")
            unknown = set(m.hybrid) - {"scorer", "weight", "rrf_k", "norm"}
            if unknown:
                raise SpecError(f"{p}: {m.label!r} hybrid has unknown keys {sorted(unknown)}")
        if (m.depth is not None or m.is_hybrid) and not spec.candidates.startswith("full:"):
            raise SpecError(f"{p}: {m.label!r}: depth and hybrid rows need candidates = 'full:K'")
        if m.depth is not None and m.depth < 1:
            raise SpecError(f"{p}: {m.label!r}: depth must be at least 1")
        if m.is_ltr:
            if any(c not in labels[:i] for c in m.combine):
                raise SpecError(f"{p}: {m.label!r} must combine rows listed before it")
            if m.grid:
                raise SpecError(f"{p}: {m.label!r} (lambdamart) takes params, not a grid")
        nested = m.is_ltr and spec.tune.startswith("cv")  # only there does an inner CV pick the trees
        cross_fit = m.is_ltr and spec.tune.startswith("split:")  # out-of-fold scores of the training split
        unknown = (
            set(m.train)
            - {"split", "threshold", "fields", "dataset", "dev", "clicks"}
            - ({"cv_folds"} if nested else set())
            - ({"cross_fit"} if cross_fit else set())
        )
        if unknown:
            raise SpecError(f"{p}: {m.label!r} train has unknown keys {sorted(unknown)}")
        if "clicks" in m.train:
            from .simclicks import ClickSource

            if m.is_ltr or m.is_interpolation:
                raise SpecError(f"{p}: {m.label!r}: train.clicks is for rows that train a pair model")
            try:
                ClickSource.of(m.train["clicks"], f"{m.label!r} train.clicks")
            except (TypeError, ValueError) as e:
                raise SpecError(f"{p}: {e}") from None
        k = m.train.get("cross_fit")
        if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 2):
            raise SpecError(f"{p}: {m.label!r} train.cross_fit must be an integer >= 2 (folds), got {k!r}")
        if m.correct_queries and (m.is_interpolation or m.is_hybrid or m.is_run):
            raise SpecError(
                f"{p}: {m.label!r}: correct_queries applies to rows that rank queries themselves; "
                "this row combines other rows' runs (set it on those rows)"
            )
        if m.seeds < 1:
            raise SpecError(f"{p}: {m.label!r}: seeds must be at least 1, got {m.seeds}")
        if m.seeds > 1 and (not m.train or m.is_ltr):
            raise SpecError(f"{p}: {m.label!r}: seeds = {m.seeds} needs a trained model row (a train block)")
        clash = [lb for lb in seed_labels(m)[1:] if lb in labels]
        if clash:
            raise SpecError(f"{p}: {m.label!r}: seeds = {m.seeds} would add rows {clash}, which other rows already use")
        teacher = m.params.get("teacher")
        for name in teacher if isinstance(teacher, list) else [teacher]:
            if isinstance(name, str) and name in by_label:
                j, t = by_label[name]
                if j >= i or not t.train or t.model != "bert-rel":
                    raise SpecError(
                        f"{p}:{_label_line(text, m.label, i)}: row {m.label!r}: teacher {name!r} must be "
                        f"a trained bert-rel row listed before it"
                    )
        _check_params(m, f"{p}:{_label_line(text, m.label, i)}: row {m.label!r}")
    return spec


def seed_rows(m: ModelSpec) -> list[ModelSpec]:
    """Row ``m`` and, with ``seeds = N``, its N - 1 copies trained with the next seeds (``seed``
    in ``params``, a training argument of every neural trainer; the first copy keeps ``m``'s own
    params, so a model trained before is reused). The copies carry no paper figures or
    expectations."""
    base = int(m.params.get("seed", 0))
    return [m] + [
        dataclasses.replace(m, label=lb, params={**m.params, "seed": base + s}, seeds=1, paper={}, expect={})
        for s, lb in enumerate(seed_labels(m)[1:], 1)
    ]


def seed_labels(m: ModelSpec) -> list[str]:
    """The labels of ``seed_rows(m)``: ``m.label``, then ``m.label (seed S)``."""
    base = int(m.params.get("seed", 0))
    return [m.label] + [f"{m.label} (seed {base + s})" for s in range(1, m.seeds)]


def _label_line(text: str, label: str, i: int) -> int:
    """The line of row ``label`` (its ``label = ...`` line, else the i-th ``[[models]]``)."""
    lines = text.splitlines()
    quoted = re.compile(r"""^\s*label\s*=\s*(["'])""" + re.escape(label) + r"\1\s*(#.*)?$")
    hit = next((n for n, line in enumerate(lines, 1) if quoted.match(line)), None)
    starts = [n for n, line in enumerate(lines, 1) if line.strip() == "[[models]]"]
    return hit or (starts[i] if i < len(starts) else 0)


def _check_params(m: ModelSpec, where: str) -> None:
    """The row's ``params`` and ``grid`` against its kind's parameters and training arguments
    (``training.recipe``), and its ``train`` block against the kind being trainable, before any
    data is read. Rows of saved model directories, runs, interpolations and hybrids are skipped,
    and so are kinds whose class declares no ``Params`` (their constructor checks)."""
    from ..params import ParamError
    from ..plugins import KINDS, create_model, params_type
    from ..training import recipe, trainable

    if m.model not in KINDS or (m.combine and m.model != "lambdamart"):
        return
    if m.train and not trainable(m.model):
        raise SpecError(f"{where}: {m.model} is not trainable; remove its train block")
    if params_type(m.model) is None:
        return
    params = dict(m.params, **({"analyzer": m.analyzer} if m.analyzer else {}))
    try:
        model_kw, _ = recipe(m.model, params)
        for key, values in m.grid.items():
            if not isinstance(values, list) or not values:
                raise SpecError(f"{where}: grid {key!r} must be a non-empty list of values")
            recipe(m.model, {**params, key: values[0]})  # the name and one value, then every setting:
        if m.grid and not m.train and not m.combine:
            base = create_model(m.model, **model_kw)  # no data: validation only
            for setting in m.settings():
                base.with_params(**setting)
    except ParamError as e:
        raise SpecError(f"{where}: {e}") from None


def _model(raw: Any, where: str) -> ModelSpec:
    if isinstance(raw, dict) and "stats" in raw:
        raise SpecError(
            f"{where} (row {raw.get('label', '?')!r}): the field 'stats' moved into the model's params: "
            f"write params = {{ stats = {raw['stats']!r} }} (lexical models)"
        )
    return _typed(ModelSpec, raw, where)


def spec_paths() -> dict[str, Path]:
    """Registered specs by name (file stem)."""
    return {p.stem: p for p in sorted(SPEC_DIR.glob("*.toml"))}


def get_spec(name_or_path: str) -> ExperimentSpec | ClassificationSpec:
    """A registered spec by name, or a spec file path."""
    paths = spec_paths()
    if name_or_path in paths:
        return load_spec(paths[name_or_path])
    if Path(name_or_path).is_file():
        return load_spec(name_or_path)
    raise SpecError(f"unknown experiment {name_or_path!r}; known: {', '.join(paths)}")


@dataclass(frozen=True)
class ABSpec:
    """A simulated A/B test of two rows of the ranking spec ``rankers``."""

    name: str
    title: str
    source: str
    kind: str
    rankers: str  # a registered ranking spec (or spec file) whose rows are the two arms
    control: str  # its row label served to the control buckets
    experiment: str  # its row label served to the experiment buckets
    searches: int = 1_000_000
    users: int = 100_000
    k: int = 10
    eta: float = 1.0
    epsilon: float = 0.1
    exponent: float = 1.0
    head_share: float = 0.5
    seed: int = 0
    seeds: int = 1
    paper: dict[str, dict[str, float]] = field(default_factory=dict)  # bucket -> csr / head / tail / ...
    expect: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    notes: str = ""


def ab_spec(p: Path, raw: dict[str, Any]) -> ABSpec:
    """An ``kind = "ab"`` spec (run by ``abtest.run_ab``) from its TOML table (``load_spec`` dispatches here)."""
    try:
        spec = _typed(ABSpec, raw, "")
    except SpecError as e:
        raise SpecError(f"{p}: {e}") from None
    if spec.searches < 1 or spec.users < 1 or spec.seeds < 1 or not 1 <= spec.k <= 10:
        raise SpecError(f"{p}: searches, users and seeds must be >= 1 and k in 1..10")
    if not 0 <= spec.epsilon <= 1 or not 0 <= spec.head_share <= 1:
        raise SpecError(f"{p}: epsilon and head_share must lie in [0, 1]")

    rankers = get_spec(spec.rankers)
    if not isinstance(rankers, ExperimentSpec):
        raise SpecError(f"{p}: rankers must name a ranking spec, {spec.rankers!r} is not one")
    labels = [m.label for m in rankers.models]
    for role in ("control", "experiment"):
        if getattr(spec, role) not in labels:
            raise SpecError(f"{p}: {role} {getattr(spec, role)!r} is not a row of {spec.rankers}")
    return spec
