"""Filters on a bundle's facet and numeric fields, compiled to the ``allowed`` mask every search
stage takes, and the facet counts of a set of documents.

The syntax (one expression per ``filter`` parameter, ``--filter`` option or list item):

* ``field:value`` — a facet field equals ``value`` (exactly, after trimming the blanks around it;
  a document whose facet is a list matches when any of its values does);
* ``field:[lo,hi]`` — a numeric field within ``lo`` and ``hi``, both inclusive; ``*`` leaves an
  end open (``price:[10,*]``); ``field:x`` with a number ``x`` is ``field:[x,x]``.

Expressions on the same field are OR'ed (``brand:DEWALT`` and ``brand:RYOBI``: either brand), on
different fields AND'ed. A document whose field is null matches no expression on that field.

A ``FilterIndex`` is built once per loaded bundle from the documents' stored values: per facet
field, the positions of each value (an inverted list) and each document's value ids (for the
counts); per numeric field, a float column with NaN for null. It compiles a ``Filter`` to the mask
and keeps the masks of recent filters."""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MASK_CACHE = 64
"""Masks of recent distinct filters a ``FilterIndex`` keeps."""
MAX_FILTERS = 32
"""Most expressions one search's filter takes."""


class FilterError(ValueError):
    """A filter expression that cannot be read against the bundle's fields; the message names the
    expression and its bad part."""


@dataclass(frozen=True)
class FacetClause:
    """``field`` equals one of ``values`` (sorted, distinct)."""

    field: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class RangeClause:
    """``field`` lies in one of ``ranges`` (inclusive; None: an open end; sorted, distinct)."""

    field: str
    ranges: tuple[tuple[float | None, float | None], ...]


Clause = FacetClause | RangeClause


@dataclass(frozen=True)
class Filter:
    """A parsed filter: one clause per field (sorted by field), AND'ed. Equal filters (whatever
    the order or repetition of their expressions) are equal and hash alike: the key of the mask
    cache, the result cache and the service's micro-batches."""

    clauses: tuple[Clause, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.clauses)

    def expressions(self) -> list[str]:
        """The filter written back as expressions, one per value or range (canonical order)."""
        out = []
        for c in self.clauses:
            if isinstance(c, FacetClause):
                out += [f"{c.field}:{v}" for v in c.values]
            else:
                out += [f"{c.field}:[{_end(lo)},{_end(hi)}]" for lo, hi in c.ranges]
        return out


def _end(x: float | None) -> str:
    if x is None:
        return "*"
    return str(int(x)) if float(x).is_integer() and abs(x) < 2**53 else repr(float(x))


_RANGE = re.compile(r"^\[\s*([^,\]]*?)\s*,\s*([^,\]]*?)\s*\]$")


def _number(text: str, expr: str, field: str) -> float | None:
    if text == "*":
        return None
    try:
        x = float(text)
    except ValueError:
        raise FilterError(
            f"filter {expr!r}: {text!r} is not a number (numeric field {field!r}; '*' leaves an end open)"
        ) from None
    if not math.isfinite(x):
        raise FilterError(f"filter {expr!r}: {text!r} is not a finite number")
    return x


def parse_filter(expressions: str | Iterable[str], facets: Sequence[str], numeric: Sequence[str]) -> Filter:
    """``expressions`` (the module docstring's syntax) against a bundle's ``facets`` and
    ``numeric`` fields, as a canonical ``Filter``.

    Raises:
        FilterError: a malformed expression, an unknown field (the message lists the filterable
            fields), a range on a facet field or a value that is no number on a numeric one."""
    exprs = [expressions] if isinstance(expressions, str) else list(expressions)
    if len(exprs) > MAX_FILTERS:
        raise FilterError(f"at most {MAX_FILTERS} filter expressions, got {len(exprs)}")
    facet_values: dict[str, set[str]] = {}
    ranges: dict[str, set[tuple[float | None, float | None]]] = {}
    for expr in exprs:
        if not isinstance(expr, str):
            raise FilterError(f"filter {expr!r}: expected text such as brand:DEWALT or price:[10,100]")
        field, sep, rest = expr.partition(":")
        field, rest = field.strip(), rest.strip()
        if not sep or not field:
            raise FilterError(f"filter {expr!r}: expected field:value or field:[lo,hi] ({_fields(facets, numeric)})")
        if field in facets:
            if not rest:
                raise FilterError(f"filter {expr!r}: no value after {field + ':'!r}")
            if _RANGE.match(rest):
                raise FilterError(
                    f"filter {expr!r}: {field!r} is a facet field, matched by value (e.g. {field}:VALUE), "
                    f"not by a range; the numeric fields are {', '.join(numeric) or 'none'}"
                )
            facet_values.setdefault(field, set()).add(rest)
        elif field in numeric:
            m = _RANGE.match(rest)
            if m:
                lo, hi = _number(m.group(1), expr, field), _number(m.group(2), expr, field)
                if lo is not None and hi is not None and lo > hi:
                    raise FilterError(
                        f"filter {expr!r}: the range's low end {m.group(1)} is above its high end {m.group(2)}"
                    )
            elif rest and rest != "*":
                try:
                    lo = hi = _number(rest, expr, field)
                except FilterError:
                    raise FilterError(
                        f"filter {expr!r}: {field!r} is a numeric field, matched by a range [lo,hi] "
                        f"(e.g. {field}:[10,100], '*' for an open end) or a number, not {rest!r}"
                    ) from None
            else:
                raise FilterError(f"filter {expr!r}: expected a range [lo,hi] or a number after {field + ':'!r}")
            ranges.setdefault(field, set()).add((lo, hi))
        else:
            raise FilterError(f"filter {expr!r}: no field {field!r} to filter on ({_fields(facets, numeric)})")
    clauses: list[Clause] = [FacetClause(f, tuple(sorted(v))) for f, v in facet_values.items()]
    clauses += [
        RangeClause(
            f, tuple(sorted(r, key=lambda x: (-math.inf if x[0] is None else x[0], math.inf if x[1] is None else x[1])))
        )
        for f, r in ranges.items()
    ]
    return Filter(tuple(sorted(clauses, key=lambda c: c.field)))


def _fields(facets: Sequence[str], numeric: Sequence[str]) -> str:
    if not facets and not numeric:
        return "this bundle has no facet or numeric fields; build it from a table with --facets / --numeric"
    return f"facet fields: {', '.join(facets) or 'none'}; numeric fields: {', '.join(numeric) or 'none'}"


class FilterIndex:
    """Per-field columns of a collection's facet and numeric values (the module docstring), built
    once; compiles filters to masks (cached) and counts facet values."""

    def __init__(self, stored: Sequence[Mapping[str, Any]], facets: Sequence[str], numeric: Sequence[str]):
        """Columns of ``stored`` (each document's stored fields, in position order).

        Args:
            stored: per document, its stored fields (facet: text, a list of text or null; numeric: a number or null).
            facets: the facet fields.
            numeric: the numeric fields."""
        self.n = len(stored)
        self.facets, self.numeric = list(facets), list(numeric)
        # per facet field: the distinct values, each document's value ids (CSR) and each value's positions
        self._values: dict[str, list[str]] = {}
        self._doc_ptr: dict[str, np.ndarray] = {}
        self._doc_vals: dict[str, np.ndarray] = {}
        self._postings: dict[str, dict[str, np.ndarray]] = {}
        for f in self.facets:
            ids: dict[str, int] = {}
            ptr = np.zeros(self.n + 1, dtype=np.int64)
            vals: list[int] = []
            for i, doc in enumerate(stored):
                v = doc.get(f)
                if v is not None:
                    for x in dict.fromkeys([v] if isinstance(v, str) else v):  # (a value once per document)
                        vals.append(ids.setdefault(str(x), len(ids)))
                ptr[i + 1] = len(vals)
            dv = np.array(vals, dtype=np.int32)
            docs = np.repeat(np.arange(self.n, dtype=np.int64), np.diff(ptr))
            order = np.argsort(dv, kind="stable")
            bounds = np.searchsorted(dv[order], np.arange(len(ids) + 1))
            names = list(ids)
            self._values[f], self._doc_ptr[f], self._doc_vals[f] = names, ptr, dv
            self._postings[f] = {names[j]: docs[order[bounds[j] : bounds[j + 1]]] for j in range(len(names))}
        self._columns: dict[str, np.ndarray] = {}
        for f in self.numeric:
            self._columns[f] = np.array(
                [np.nan if (v := d.get(f)) is None else float(v) for d in stored], dtype=np.float64
            )
        self._masks: OrderedDict[Filter, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def fields(self) -> list[str]:
        """Every filterable field: the facets, then the numeric ones."""
        return [*self.facets, *self.numeric]

    def parse(self, expressions: str | Iterable[str]) -> Filter:
        """``parse_filter`` against this collection's fields."""
        return parse_filter(expressions, self.facets, self.numeric)

    def mask(self, flt: Filter) -> np.ndarray | None:
        """The documents ``flt`` allows (a read-only bool array; None: an empty filter, every
        document), cached for the ``MASK_CACHE`` most recent filters."""
        if not flt:
            return None
        with self._lock:
            hit = self._masks.get(flt)
            if hit is not None:
                self._masks.move_to_end(flt)
                return hit
        out = np.ones(self.n, dtype=bool)
        for c in flt.clauses:
            m = np.zeros(self.n, dtype=bool)
            if isinstance(c, FacetClause):
                if c.field not in self._postings:
                    raise FilterError(f"no facet field {c.field!r} ({_fields(self.facets, self.numeric)})")
                for v in c.values:
                    pos = self._postings[c.field].get(v)
                    if pos is not None:
                        m[pos] = True
            else:
                if c.field not in self._columns:
                    raise FilterError(f"no numeric field {c.field!r} ({_fields(self.facets, self.numeric)})")
                col = self._columns[c.field]
                with np.errstate(invalid="ignore"):  # (NaN, a null, compares False)
                    for lo, hi in c.ranges:
                        m |= (col >= (-np.inf if lo is None else lo)) & (col <= (np.inf if hi is None else hi))
            out &= m
        out.setflags(write=False)
        with self._lock:
            self._masks[flt] = out
            while len(self._masks) > MASK_CACHE:
                self._masks.popitem(last=False)
        return out

    def tally(self, positions: np.ndarray) -> Tally:
        """The facet value counts and numeric values of the documents at ``positions`` (a
        ``Tally``: several collections' tallies add up, e.g. a served bundle's and its delta's)."""
        pos = np.asarray(positions, dtype=np.int64)
        values: dict[str, dict[str, int]] = {}
        for f in self.facets:
            ptr, dv = self._doc_ptr[f], self._doc_vals[f]
            starts, lengths = ptr[pos], ptr[pos + 1] - ptr[pos]
            total = int(lengths.sum())
            counted: dict[str, int] = {}
            if total:
                offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(total)
                n = np.bincount(dv[offsets], minlength=len(self._values[f]))
                names = self._values[f]
                counted = {names[j]: int(n[j]) for j in np.flatnonzero(n).tolist()}
            values[f] = counted
        numbers = {f: self._columns[f][pos] for f in self.numeric}
        return Tally(values, {f: v[~np.isnan(v)] for f, v in numbers.items()})

    def counts(self, positions: np.ndarray, top: int) -> dict[str, Any]:
        """The facet counts of the documents at ``positions`` (``Tally.counts``)."""
        return self.tally(positions).counts(top)


@dataclass(frozen=True)
class Tally:
    """Facet value counts (per facet field, value -> documents) and the non-null values of each
    numeric field, of a set of documents; ``+`` joins the tallies of disjoint sets."""

    values: Mapping[str, Mapping[str, int]]
    numbers: Mapping[str, np.ndarray]

    def __add__(self, other: Tally) -> Tally:
        values = {f: dict(c) for f, c in self.values.items()}
        for f, c in other.values.items():
            mine = values.setdefault(f, {})
            for value, n in c.items():
                mine[value] = mine.get(value, 0) + n
        numbers = dict(self.numbers)
        for f, col in other.numbers.items():
            numbers[f] = np.concatenate([numbers[f], col]) if f in numbers else col
        return Tally(values, numbers)

    def counts(self, top: int) -> dict[str, Any]:
        """Per facet field its ``top`` values by count (count descending, then value), as
        [value, count] pairs, and how many distinct values there are; per numeric field the min
        and max of the non-null values and how many there are (null min/max when none)."""
        out: dict[str, Any] = {}
        for f, c in self.values.items():
            best = sorted(c.items(), key=lambda vn: (-vn[1], vn[0]))[:top]
            out[f] = {"values": [[v, n] for v, n in best], "distinct": len(c)}
        for f, v in self.numbers.items():
            out[f] = {
                "min": float(v.min()) if len(v) else None,
                "max": float(v.max()) if len(v) else None,
                "count": len(v),
            }
        return out
