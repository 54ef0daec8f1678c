"""Typed parameters: every model kind and every trainer declares its settings as a frozen dataclass
deriving from ``Params``. Construction is the one place where values from the edge (a CLI
``--param``, a spec file's row, a Python call, a saved ``config.json``) become typed: unknown names,
wrong types and out-of-range values fail at once with the parameter's name, what it allows, and
where it came from (compare Hugging Face ``TrainingArguments``)."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, TypeVar, Union

P = TypeVar("P", bound="Params")


class ParamError(ValueError):
    """A parameter value or name that the receiving kind does not accept."""


def param(
    default: Any, *, ge: float | None = None, gt: float | None = None, le: float | None = None, lt: float | None = None
) -> Any:
    """A dataclass field with a default (lists and dicts copied per instance) and optional bounds.

    Args:
        default: the field's default (a list or dict is copied per instance).
        ge: lower bound, inclusive.
        gt: lower bound, exclusive.
        le: upper bound, inclusive.
        lt: upper bound, exclusive.

    Returns:
        The dataclass field."""
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le), ("lt", lt)) if v is not None}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=bounds)
    return dataclasses.field(default=default, metadata=bounds)


_BOUND_TEXT = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
_BOUND_OK = {"ge": lambda v, b: v >= b, "gt": lambda v, b: v > b, "le": lambda v, b: v <= b, "lt": lambda v, b: v < b}


@dataclasses.dataclass(frozen=True)
class Params:
    """Base of every parameter set. ``kind`` names the owner in messages (e.g. ``bm25``)."""

    kind: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for f in dataclasses.fields(self):
            value = _coerce(getattr(self, f.name), hints[f.name], self._label(f.name))
            for bound, limit in f.metadata.items():
                if isinstance(value, (int, float)) and not _BOUND_OK[bound](value, limit):
                    raise ParamError(f"{self._label(f.name)} must be {_BOUND_TEXT[bound]} {limit}, got {value!r}")
            object.__setattr__(self, f.name, value)
        self.check()

    def check(self) -> None:
        """Rules between fields; raise ``ParamError`` (subclasses override)."""

    def check_with(self, other: Params) -> None:
        """Rules between this set and another one of the same recipe (a kind's training arguments
        against its model parameters, which share one vocabulary); raise ``ParamError``. None by
        default (subclasses override)."""

    def _label(self, name: str) -> str:
        return f"{self.kind} parameter {name!r}" if self.kind else f"parameter {name!r}"

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_mapping(cls: type[P], raw: Mapping[str, Any] | None = None, *, where: str = "") -> P:
        """Validate ``raw`` (name -> value) into this type; errors start with ``where`` (e.g. the
        spec file and line, or ``--param``)."""
        raw = dict(raw or {})
        known = cls.names()
        unknown = [n for n in raw if n not in known]
        try:
            if unknown:
                n = unknown[0]
                near = difflib.get_close_matches(n, known, n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                owner = cls.kind or cls.__name__
                raise ParamError(f"{owner} has no parameter {n!r}{hint}; known: {', '.join(known) or 'none'}")
            return cls(**raw)
        except ParamError as e:
            raise ParamError(f"{where}: {e}" if where else str(e)) from None

    def as_dict(self) -> dict[str, Any]:
        """JSON-serialisable values by name (what ``from_mapping`` reads back)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def replace(self: P, *, where: str = "", **changes: Any) -> P:
        """A validated copy with ``changes``."""
        return type(self).from_mapping({**self.as_dict(), **changes}, where=where)


def needs(owner: str, present: bool, given: Mapping[str, bool]) -> None:
    """Refuse each option of ``given`` that was given (True) while ``owner`` is absent
    (``present`` False), naming both: ``ParamError("--changes needs --allow-writes")``. Options
    that only mean something with another are checked this way before any work."""
    for option, was_given in given.items():
        if was_given and not present:
            raise ParamError(f"{option} needs {owner}")


def split(raw: Mapping[str, Any], *types_: type[Params], where: str = "") -> list[Params]:
    """One mapping of names spread over several parameter types (a kind's model parameters and its
    trainer's arguments share one vocabulary): each name goes to the first type that has it."""
    parts: list[dict[str, Any]] = [{} for _ in types_]
    for name, value in raw.items():
        for i, t in enumerate(types_):
            if name in t.names():
                parts[i][name] = value
                break
        else:
            known = sorted({n for t in types_ for n in t.names()})
            near = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            owner = types_[0].kind or types_[0].__name__
            msg = f"{owner} has no parameter {name!r}{hint}; known: {', '.join(known) or 'none'}"
            raise ParamError(f"{where}: {msg}" if where else msg)
    return [t.from_mapping(p, where=where) for t, p in zip(types_, parts)]


# ------------------------------------------------------------------------------------ coercion
def _hints(cls: type) -> dict[str, Any]:
    cache = cls.__dict__.get("_hints_cache")
    if cache is None:
        cache = typing.get_type_hints(cls)
        cls._hints_cache = cache  # type: ignore[attr-defined]  # a per-class memo
    return cache


def _plain(v: Any) -> Any:
    if isinstance(v, Params):
        return v.as_dict()
    return list(v) if isinstance(v, tuple) else v


def _describe(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is bool:
        return "true or false"
    if tp is int:
        return "a whole number"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if tp is type(None):
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin in (list, tuple):
        return f"a list of {_describe(args[0]).removeprefix('a ').removeprefix('an ')}s" if args else "a list"
    if origin is dict or tp is dict:
        return "a table of name = value"
    if isinstance(tp, type) and issubclass(tp, Params):
        return f"a table of {tp.kind or tp.__name__} parameters"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, label: str) -> Any:
    """``value`` as type ``tp`` (int -> float widening, integral floats -> int, list/tuple -> list),
    or ``ParamError`` naming what ``tp`` allows."""
    try:
        return _as(value, tp)
    except ParamError as e:  # from a nested set: its own message says what it allows
        raise ParamError(f"{label}: {e}") from None
    except (TypeError, ValueError):
        raise ParamError(f"{label} must be {_describe(tp)}, got {value!r}") from None


def _as(v: Any, tp: Any) -> Any:
    if tp is Any:
        return v
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        for a in args:
            try:
                return _as(v, a)
            except (TypeError, ValueError):
                continue
        raise TypeError
    if tp is type(None):
        if v is None:
            return None
        raise TypeError
    if origin is Literal:
        if v in args and not isinstance(v, bool):
            return v
        raise ValueError
    if tp is bool:
        if isinstance(v, bool):
            return v
        raise TypeError
    if tp is int:
        if isinstance(v, bool):
            raise TypeError
        if isinstance(v, int):
            return v
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise TypeError
    if tp is float:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        raise TypeError
    if tp is str:
        if isinstance(v, str):
            return v
        raise TypeError
    if origin in (list, tuple) or tp in (list, tuple):
        if not isinstance(v, (list, tuple)):
            raise TypeError
        return [_as(x, args[0]) for x in v] if args else list(v)
    if origin is dict or tp is dict:
        if not isinstance(v, Mapping):
            raise TypeError
        return dict(v)
    if isinstance(tp, type) and issubclass(tp, Params):  # a nested set: given whole, or as its mapping
        if isinstance(v, tp):
            return v
        if isinstance(v, Mapping):
            return tp.from_mapping(v)
        raise TypeError
    raise TypeError(f"unsupported parameter type {tp}")
