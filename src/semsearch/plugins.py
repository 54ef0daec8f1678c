"""The one registry: every kind of model the CLI, specs, bundles and the service can name, listed
explicitly (no import side effects), with the family it belongs to.

A kind maps to ``"module:Class"``; the class is imported when first asked for. Composite kinds (a
LambdaMART ranker over feature models) get their children from here too, so a saved ranker loads,
bundles, serves and searches like any model."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from .models.base import CONFIG, Model, ModelDirError, read_config
from .params import ParamError, Params


class Kind(NamedTuple):
    # lexical, termdep, topic, translation, projection, neural, interaction, transformer, mtdnn, distill, ranker
    family: str
    target: str | type  # "module:Class" under semsearch, or (a plugin's) class
    params: str = ""  # "module:Class" of its Params where importing the class would load torch


KINDS: dict[str, Kind] = {
    "bm25": Kind("lexical", "models.lexical:BM25"),
    "ulm": Kind("lexical", "models.lexical:UnigramLM"),
    "tfidf": Kind("lexical", "models.lexical:TfIdf"),
    "random": Kind("lexical", "models.lexical:RandomOrder"),
    "mrf": Kind("termdep", "models.termdep:SequentialDependence"),
    "lce": Kind("termdep", "models.termdep:LatentConceptExpansion"),
    "plsa": Kind("topic", "models.topic:PLSA"),
    "lda": Kind("topic", "models.topic:LDA"),
    "bltm": Kind("topic", "models.topic:BLTM"),
    "wtm": Kind("translation", "models.translation:WordTranslationModel"),
    "ptm": Kind("translation", "models.translation:PhraseTranslationModel"),
    "lsa": Kind("projection", "models.projection:LSA"),
    "cl-lsa": Kind("projection", "models.projection:CLLSA"),
    "opca": Kind("projection", "models.projection:OPCA"),
    "s2net": Kind("projection", "models.projection:S2Net"),
    "dssm": Kind("neural", "models.neural:DSSM", "models.hparams:DSSMParams"),
    "clsm": Kind("neural", "models.neural:CLSM", "models.hparams:CLSMParams"),
    "knrm": Kind("interaction", "models.interaction:KNRM", "models.hparams:KNRMParams"),
    "matchpyramid": Kind("interaction", "models.interaction:MatchPyramid", "models.hparams:MatchPyramidParams"),
    "bert-rep": Kind("transformer", "models.transformer:BiEncoder", "models.hparams:BiEncoderParams"),
    "bert-rel": Kind("transformer", "models.transformer:CrossEncoder", "models.hparams:CrossEncoderParams"),
    "mt-dnn": Kind("mtdnn", "models.mtdnn:MTDNN", "models.hparams:MTDNNParams"),
    "static-query": Kind("distill", "models.static_query:StaticQueryEncoder", "models.static_query:StaticQueryParams"),
    "lambdamart": Kind("ranker", "ranking.lambdamart:LambdaMARTRanker"),
}


def register(kind: str, family: str = "plugin") -> Callable[[type[Model]], type[Model]]:
    """Class decorator for a model defined outside semsearch: adds ``kind`` to the table. A
    ``plugin`` family model trains by its own ``fit(data, dev=, progress=)`` if it has one."""

    def add(cls: type[Model]) -> type[Model]:
        if kind in KINDS and KINDS[kind].target is not cls:
            raise ValueError(f"model name {kind!r} registered twice")
        cls.name = kind
        KINDS[kind] = Kind(family, cls)
        return cls

    return add


def model_names() -> list[str]:
    return sorted(KINDS)


def model_class(kind: str) -> type[Model]:
    """The class behind a kind name (imported on first use)."""
    try:
        target = KINDS[kind].target
    except KeyError:
        raise ValueError(f"unknown model {kind!r}; known: {', '.join(model_names())}") from None
    if isinstance(target, type):
        return target
    module, cls_name = target.split(":")
    cls = getattr(importlib.import_module(f"{__package__}.{module}"), cls_name)
    assert cls.name == kind, f"{target} is named {cls.name!r}, registered as {kind!r}"
    return cls


def params_type(kind: str) -> type[Params] | None:
    """The kind's typed model parameters (None: its constructor checks its own), without importing
    torch where the kind names them apart."""
    entry = KINDS.get(kind)
    if entry is not None and entry.params:
        module, cls_name = entry.params.split(":")
        return getattr(importlib.import_module(f"{__package__}.{module}"), cls_name)
    return getattr(model_class(kind), "Params", None)


def create_model(kind: str, **params: Any) -> Model:
    """A new, untrained and unindexed model of ``kind``; a composite's children (``features``: names,
    saved directories or ``{name, model, params}``) are resolved here."""
    cls = model_class(kind)
    if KINDS[kind].family == "ranker":
        specs = [
            {"name": f, "model": f, "params": {}}
            if isinstance(f, str)
            else {"name": f.get("name", f["model"]), "model": f["model"], "params": dict(f.get("params", {}))}
            for f in params.pop("features", ())
        ]
        return cls.from_models({s["name"]: _feature_model(s) for s in specs}, **params)  # type: ignore[attr-defined]  # a ranker class
    return cls(**params)


def _feature_model(spec: dict[str, Any]) -> Model:
    """A ranker's feature model: a saved (trained) model directory, or a kind that needs no
    training (lexical and term-dependency models)."""
    name = spec["model"]
    if name in KINDS and KINDS[name].family not in ("lexical", "termdep") and not (Path(name) / CONFIG).exists():
        raise ValueError(
            f"lambdamart feature {spec['name']!r}: a {name} model must be trained first "
            f"(semsearch train {name} ...); name its saved directory instead"
        )
    return resolve_model(name, **spec["params"])


def load_model(path: str | Path) -> Model:
    """Any saved model directory (its ``config.json`` names the kind); a composite's children too.
    Every refusal is a ``ModelDirError`` naming the directory: a value the kind's parameters
    reject (``ParamError``) is a corrupt ``config.json``."""
    p = Path(path)
    if not p.is_dir():
        raise ModelDirError(f"no model at {p} ({'a file, not a directory' if p.exists() else 'no such directory'})")
    config = read_config(p)
    kind = config["model"]
    if kind not in KINDS:
        raise ModelDirError(f"{p}: config.json names unknown model {kind!r}; known: {', '.join(model_names())}")
    cls = model_class(kind)
    try:
        if KINDS[kind].family == "ranker":
            children = cls.child_dirs(config)  # type: ignore[attr-defined]  # a ranker class
            for sub in children.values():
                if not isinstance(sub, str) or Path(sub).is_absolute() or ".." in Path(sub).parts:
                    raise ModelDirError(f"{p / CONFIG}: 'feature_dirs' names {sub!r}, not a directory inside the model")
            return cls.load(p, models={n: load_model(p / d) for n, d in children.items()})  # type: ignore[call-arg]  # a ranker's load
        return cls.load(p)
    except ParamError as e:
        raise ModelDirError(f"{p / CONFIG}: {e}") from None


def resolve_model(name_or_dir: str, **params: Any) -> Model:
    """A saved model directory if ``name_or_dir`` is one (``params`` must match its own), else a new
    model of that kind."""
    p = Path(name_or_dir)
    if (p / CONFIG).exists():
        model = load_model(p)
        return model.with_params(**params) if params else model
    if p.is_dir():
        raise ModelDirError(f"no model at {p}: a directory without {CONFIG}")
    if name_or_dir not in KINDS and (len(p.parts) > 1 or name_or_dir.startswith(".")):
        raise ModelDirError(f"no model at {name_or_dir} (no such directory)")
    return create_model(name_or_dir, **params)


def family(model: Model | str) -> str:
    """The family of a model or kind name (``plugin`` for a model class not in the table)."""
    kind = KINDS.get(model if isinstance(model, str) else model.name)
    return kind.family if kind else "plugin"
