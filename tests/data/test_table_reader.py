"""data.table: a user's collection as CSV/TSV with a header, JSON lines, Parquet or a DataFrame, its
extra columns kept typed; every error names the file, the line (or row) and the column."""

from __future__ import annotations

import json

import pytest

from semsearch.data import Corpus, DataFormatError, corpus_from_frame, load_corpus, load_table, write_corpus

CSV = (
    "sku,name,description,brand,category,price,color\n"
    'A1,Cordless drill,"18V drill, with battery",Acme,tools,99.5,red\n'
    "B2,Claw hammer,Steel hammer,Stanley,tools,12,\n"
    "C3,Garden hose,50 ft hose,Acme,garden,,green\n"
)
OPTS = {"id": "sku", "fields": "name,description", "facets": "brand,category", "numeric": "price"}


def _write(tmp_path, name, text):  # type: ignore[no-untyped-def]
    p = tmp_path / name
    p.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return p


def _error(path, **kw) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(DataFormatError) as e:
        load_table(path, **{**OPTS, **kw})
    return str(e.value)


def test_csv_with_header_keeps_facets_numbers_and_other_columns(tmp_path):
    c = load_table(_write(tmp_path, "catalog.csv", CSV), **OPTS)
    assert c.ids == ["A1", "B2", "C3"]
    assert c.titles == ["Cordless drill", "Claw hammer", "Garden hose"]  # the first --fields column
    assert c.texts == ["18V drill, with battery", "Steel hammer", "50 ft hose"]  # the others, joined
    assert c.stored == [
        {"brand": "Acme", "category": "tools", "price": 99.5, "color": "red"},
        {"brand": "Stanley", "category": "tools", "price": 12, "color": ""},
        {"brand": "Acme", "category": "garden", "price": None, "color": "green"},  # an empty number: null
    ]
    assert c.schema == {
        "id": "sku",
        "fields": ["name", "description"],
        "facets": ["brand", "category"],
        "numeric": ["price"],
        "stored": ["color"],  # kept, not dropped
    }
    # the bundle's documents.jsonl round trip: stored fields under "fields", read back typed
    write_corpus(c, tmp_path / "docs.jsonl")
    back = load_corpus(tmp_path / "docs.jsonl", stored_fields=True)
    assert back.stored == c.stored and back.ids == c.ids and list(back)[0].fields == c.stored[0]
    assert load_corpus(tmp_path / "docs.jsonl").stored is None  # a BEIR read ignores them


def test_tsv_with_header_and_default_columns(tmp_path):
    p = _write(tmp_path, "c.tsv", 'doc_id\tTitle\ttext\tbrand\nx1\tA "quoted" drill\tcordless\tAcme\n')
    c = load_table(p)
    assert (c.ids, c.titles, c.texts, c.stored) == (["x1"], ['A "quoted" drill'], ["cordless"], [{"brand": "Acme"}])


def test_jsonl_with_sku_ids_and_typed_values(tmp_path):
    rows = [
        {"sku": "A1", "name": "Cordless drill", "brand": "Acme", "tags": ["x", "y"], "price": 99.5, "stock": 3},
        {"sku": "B2", "name": "Hammer", "description": "steel", "brand": None, "price": 12},
    ]
    p = _write(tmp_path, "catalog.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    c = load_table(p, id="sku", fields="name,description", facets="brand,tags", numeric="price")
    assert c.ids == ["A1", "B2"] and c.texts == ["", "steel"]
    assert c.stored == [
        {"brand": "Acme", "tags": ["x", "y"], "price": 99.5, "stock": 3},
        {"brand": None, "price": 12, "tags": None},
    ]


def test_parquet_and_dataframe(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table(
        {"sku": ["A1", "B2"], "name": ["Drill", "Hammer"], "brand": ["Acme", "Stanley"], "price": [9.5, None]}
    )
    pq.write_table(table, tmp_path / "catalog.parquet")
    c = load_table(tmp_path / "catalog.parquet", id="sku", fields="name", facets="brand", numeric="price")
    assert c.ids == ["A1", "B2"] and c.titles == ["Drill", "Hammer"]
    assert c.stored == [{"brand": "Acme", "price": 9.5}, {"brand": "Stanley", "price": None}]
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"sku": ["A1", "A1"], "name": ["Drill", "Hammer"]})
    with pytest.raises(DataFormatError, match=r"^DataFrame: row 2: column 'sku': duplicate id 'A1' \(first on row 1\)"):
        corpus_from_frame(frame, id="sku", fields="name")
    ok = corpus_from_frame(frame.iloc[:1], id="sku", fields="name", numeric=None)
    assert isinstance(ok, Corpus) and ok.ids == ["A1"]


@pytest.mark.parametrize(
    ("text", "kw", "says"),
    [
        (CSV, {"id": "SKU_ID"}, "catalog.csv:1: --id: no column 'SKU_ID' (header: sku, name, description, brand, "),
        (CSV, {"fields": "name,desc"}, "catalog.csv:1: --fields: no column 'desc' (header: sku, name,"),
        (CSV, {"numeric": "cost"}, "catalog.csv:1: --numeric: no column 'cost' (header: sku,"),
        (CSV.replace("B2,", "A1,"), {}, "catalog.csv:3: column 'sku': duplicate id 'A1' (first on line 2)"),
        (CSV.replace("99.5", "cheap"), {}, "catalog.csv:2: column 'price' (numeric): 'cheap' is not a number"),
        (CSV.replace(",Stanley", ""), {}, "catalog.csv:3: expected 7 columns (the header's), got 6"),
        ("name,brand\nDrill,Acme\n", {"id": None}, "catalog.csv:1: no id column: give --id COLUMN (header: name,"),
    ],
)
def test_errors_name_file_line_and_column(tmp_path, text, kw, says):
    assert _error(_write(tmp_path, "catalog.csv", text), **kw).startswith(str(tmp_path / says))


def test_jsonl_errors_name_line_and_keys(tmp_path):
    p = _write(tmp_path, "c.jsonl", '{"sku": "a", "name": "x"}\n\n{"id": "b", "name": "y"}\n')
    assert _error(p, facets=None, numeric=None) == f"{p}:3: no column 'sku' (this record has: id, name)"
    p = _write(tmp_path, "c.jsonl", '{"sku": "a", "name": "x"}\n{"sku": "a", "name": "y"}\n')
    assert _error(p, facets=None, numeric=None) == f"{p}:2: column 'sku': duplicate id 'a' (first on line 1)"


def test_bad_utf8_names_its_byte_offset(tmp_path):
    raw = CSV.encode() + b"D4,Bad \xff byte,x,Acme,tools,1,red\n"
    offset = len(CSV.encode()) + len(b"D4,Bad ")
    assert _error(_write(tmp_path, "catalog.csv", raw)) == (
        f"{tmp_path / 'catalog.csv'}:5: not valid UTF-8 (invalid start byte at byte offset {offset} of the file)"
    )


def test_a_line_beyond_the_bound_is_refused_without_reading_it_whole(tmp_path):
    big = CSV + "D4,Huge," + "x" * 5000 + ",Acme,tools,1,red\n"
    p = _write(tmp_path, "catalog.csv", big)
    says = _error(p, max_record_bytes=4096)
    assert says == f"{p}:5: line longer than the bound of 4,096 bytes (--max-record-bytes)"
    assert load_table(p, **OPTS, max_record_bytes=8192).ids[-1] == "D4"
    # a quoted field spanning lines is bounded as one record
    p = _write(tmp_path, "q.csv", 'sku,name\nA1,"' + "y\n" * 3000 + '"\n')
    says = _error(p, fields="name", facets=None, numeric=None, max_record_bytes=4096)
    assert says == f"{p}:2: record (to line 2050) longer than the bound of 4,096 bytes (--max-record-bytes)"
    # JSON lines: skip_bad_lines skips the long line to its end and goes on
    p = _write(tmp_path, "c.jsonl", json.dumps({"sku": "a", "name": "x" * 5000}) + '\n{"sku": "b", "name": "y"}\n')
    with pytest.warns(UserWarning, match="line longer than the bound"):
        assert load_table(p, id="sku", fields="name", max_record_bytes=4096, skip_bad_lines=True).ids == ["b"]


def test_unknown_suffix_is_named(tmp_path):
    assert "unknown table format '.xlsx'" in _error(_write(tmp_path, "c.xlsx", "x"))
