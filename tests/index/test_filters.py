"""Filter expressions (``index.filters``): parsing into a canonical ``Filter``, clear errors naming
the expression and the bad part, masks equal to evaluating every document by hand, facet counts."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from semsearch.index.filters import FacetClause, Filter, FilterError, FilterIndex, RangeClause, parse_filter

FACETS, NUMERIC = ["brand", "color"], ["price", "rating"]


def test_parse_canonical_form() -> None:
    a = parse_filter(["brand:DEWALT", "price:[10,100]", "brand: RYOBI ", "brand:DEWALT"], FACETS, NUMERIC)
    b = parse_filter(["price:[10, 100]", "brand:RYOBI", "brand:DEWALT"], FACETS, NUMERIC)
    assert a == b and hash(a) == hash(b)
    assert a.clauses == (FacetClause("brand", ("DEWALT", "RYOBI")), RangeClause("price", ((10.0, 100.0),)))
    assert a.expressions() == ["brand:DEWALT", "brand:RYOBI", "price:[10,100]"]
    assert parse_filter("price:[*,5.5]", FACETS, NUMERIC).clauses == (RangeClause("price", ((None, 5.5),)),)
    assert parse_filter("rating:4", FACETS, NUMERIC).clauses == (RangeClause("rating", ((4.0, 4.0),)),)
    assert parse_filter("color:a:b", FACETS, NUMERIC).clauses == (FacetClause("color", ("a:b",)),)  # first colon
    assert not parse_filter([], FACETS, NUMERIC) and parse_filter([], FACETS, NUMERIC) == Filter()


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        (
            "size:XL",
            "filter 'size:XL': no field 'size' to filter on "
            "(facet fields: brand, color; numeric fields: price, rating)",
        ),
        ("brand", "filter 'brand': expected field:value or field:[lo,hi]"),
        (":x", "expected field:value"),
        ("brand:", "filter 'brand:': no value after 'brand:'"),
        ("brand:[1,2]", "'brand' is a facet field, matched by value"),
        ("price:cheap", "'price' is a numeric field, matched by a range [lo,hi]"),
        ("price:[ten,20]", "filter 'price:[ten,20]': 'ten' is not a number"),
        ("price:[20,10]", "the range's low end 20 is above its high end 10"),
        ("price:[1,inf]", "'inf' is not a finite number"),
        ("price:", "expected a range [lo,hi] or a number after 'price:'"),
    ],
)
def test_parse_errors_name_the_expression_and_part(expr: str, says: str) -> None:
    with pytest.raises(FilterError) as e:
        parse_filter([expr], FACETS, NUMERIC)
    assert says in str(e.value)


def test_no_filterable_fields_says_how_to_get_some() -> None:
    with pytest.raises(FilterError, match="no facet or numeric fields; build it from a table with --facets"):
        parse_filter(["brand:x"], [], [])


def _docs(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        d: dict = {}
        r = rng.random()
        d["brand"] = (
            None
            if r < 0.1
            else [rng.choice("ABCDE") for _ in range(rng.randint(0, 3))]
            if r < 0.3
            else rng.choice("ABCDE")
        )
        d["color"] = rng.choice(["red", "blue", None])
        d["price"] = None if rng.random() < 0.1 else rng.choice([rng.randint(0, 200), rng.random() * 200])
        d["rating"] = rng.choice([None, 1, 2, 3, 4, 5])
        out.append(d)
    return out


def _matches(d: dict, flt: Filter) -> bool:
    for c in flt.clauses:
        v = d.get(c.field)
        if isinstance(c, FacetClause):
            vals = [] if v is None else [v] if isinstance(v, str) else v
            if not set(vals) & set(c.values):
                return False
        elif v is None or not any((lo is None or v >= lo) and (hi is None or v <= hi) for lo, hi in c.ranges):
            return False
    return True


def test_masks_equal_evaluating_every_document() -> None:
    docs = _docs(3000)
    ix = FilterIndex(docs, FACETS, NUMERIC)
    rng = random.Random(1)
    for _ in range(200):
        exprs = []
        for _ in range(rng.randint(1, 4)):
            f = rng.choice(FACETS + NUMERIC)
            if f == "brand":
                exprs.append(f"brand:{rng.choice('ABCDEZ')}")
            elif f == "color":
                exprs.append(f"color:{rng.choice(['red', 'blue', 'green'])}")
            else:
                lo, hi = sorted(rng.sample(range(0, 210), 2))
                exprs.append(f"{f}:[{rng.choice([str(lo), '*'])},{rng.choice([str(hi), '*'])}]")
        flt = ix.parse(exprs)
        m = ix.mask(flt)
        want = np.array([_matches(d, flt) for d in docs])
        assert np.array_equal(m, want), exprs
        assert ix.mask(ix.parse(list(reversed(exprs)))) is m  # cached by the canonical filter
        assert not m.flags.writeable
    assert ix.mask(Filter()) is None


def test_facet_counts_of_a_set_of_documents() -> None:
    docs = _docs(500, seed=2)
    ix = FilterIndex(docs, FACETS, NUMERIC)
    pos = np.array(sorted(random.Random(3).sample(range(500), 120)))
    got = ix.counts(pos, 3)
    brands: Counter[str] = Counter()
    for i in pos:
        v = docs[i]["brand"]
        brands.update(set([] if v is None else [v] if isinstance(v, str) else v))
    want = sorted(brands.items(), key=lambda x: (-x[1], x[0]))
    assert got["brand"] == {"values": [list(x) for x in want[:3]], "distinct": len(want)}
    prices = [docs[i]["price"] for i in pos if docs[i]["price"] is not None]
    assert got["price"] == {"min": float(min(prices)), "max": float(max(prices)), "count": len(prices)}
    empty = ix.counts(np.zeros(0, dtype=np.int64), 5)
    assert empty["brand"] == {"values": [], "distinct": 0} and empty["rating"] == {"min": None, "max": None, "count": 0}
