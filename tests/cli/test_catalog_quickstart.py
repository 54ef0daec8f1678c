"""Quick start: a user's own CSV (or JSON lines, Parquet) -> `semsearch index build` -> `semsearch
serve` answers, each hit carrying the document's stored fields (facets, numbers, other columns)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.index.bundle import Bundle
from semsearch.serving import create_app

runner = CliRunner()
CSV = (
    "sku,name,description,brand,category,price,color\n"
    'A1,Cordless drill,"18V drill, with battery",Acme,tools,99.5,red\n'
    "B2,Claw hammer,Steel hammer for nails,Stanley,tools,12,\n"
    "C3,Garden hose,50 ft hose,Acme,garden,,green\n"
)
COLUMNS = ["--id", "sku", "--fields", "name,description", "--facets", "brand,category", "--numeric", "price"]


def _build(data, out, *extra: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["index", "build", "--data", str(data), "--out", str(out), *extra])


def test_csv_to_index_build_to_serve(tmp_path):
    (tmp_path / "catalog.csv").write_text(CSV, encoding="utf-8")
    r = _build(tmp_path / "catalog.csv", tmp_path / "bundle", *COLUMNS)
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert manifest["schema"] == {
        "id": "sku",
        "fields": ["name", "description"],
        "facets": ["brand", "category"],
        "numeric": ["price"],
        "stored": ["color"],
    }
    with TestClient(create_app(tmp_path / "bundle")) as c:
        answer = c.get("/search", params={"q": "cordless drill battery"})
        assert answer.status_code == 200, answer.text
        top = answer.json()["hits"][0]
    assert top["doc_id"] == "A1" and top["title"] == "Cordless drill"
    assert top["fields"] == {"brand": "Acme", "category": "tools", "price": 99.5, "color": "red"}
    # the description is searched too (the --fields columns joined)
    b = Bundle.load(tmp_path / "bundle")
    hits = b.hits(b.search("nails", 3))
    b.close()
    assert [h.doc_id for h in hits] == ["B2"] and hits[0].fields["price"] == 12 and hits[0].fields["color"] == ""


def test_jsonl_with_sku_and_parquet_build(tmp_path):
    rows = [
        {"sku": "A1", "name": "Cordless drill", "brand": "Acme", "price": 99.5},
        {"sku": "B2", "name": "Claw hammer", "brand": "Stanley", "price": 12},
    ]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    args = ["--id", "sku", "--fields", "name", "--facets", "brand", "--numeric", "price"]
    assert _build(tmp_path / "c.jsonl", tmp_path / "bj", *args).exit_code == 0
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    assert _build(tmp_path / "c.parquet", tmp_path / "bp", *args).exit_code == 0
    for b in ("bj", "bp"):
        r = runner.invoke(app, ["search", "--index", str(tmp_path / b), "hammer", "--json"])
        hit = json.loads(r.output.splitlines()[0])
        assert hit["doc_id"] == "B2" and hit["fields"] == {"brand": "Stanley", "price": 12}


@pytest.mark.parametrize(
    ("text", "args", "says"),
    [
        (CSV, ["--id", "SKU_ID"], "catalog.csv:1: --id: no column 'SKU_ID' (header: sku, name, description,"),
        (CSV.replace("B2,", "A1,"), COLUMNS, "catalog.csv:3: column 'sku': duplicate id 'A1' (first on line 2)"),
    ],
)
def test_build_errors_name_file_line_and_column(tmp_path, text, args, says):
    (tmp_path / "catalog.csv").write_text(text, encoding="utf-8")
    r = _build(tmp_path / "catalog.csv", tmp_path / "bundle", *args)
    assert r.exit_code == 2 and says in " ".join(r.output.split()).replace(str(tmp_path) + "/", "")
    assert not (tmp_path / "bundle").exists()


def test_tsv_and_beir_inputs_read_as_before(tiny_data, tmp_path):
    (tmp_path / "docs.tsv").write_text("d1\tRed cat\tsleeps\nd2\tBlue dog\t\n", encoding="utf-8")
    assert _build(tmp_path / "docs.tsv", tmp_path / "bt", "--fields", "title").exit_code == 0
    manifest = json.loads((tmp_path / "bt" / "manifest.json").read_text())
    assert manifest["fields"] == "title" and "schema" not in manifest
    assert '"fields"' not in (tmp_path / "bt" / "documents.jsonl").read_text()
    assert _build("tiny", tmp_path / "bb", "--fields", "title").exit_code == 0
    r = _build("tiny", tmp_path / "bx", "--facets", "brand")
    assert r.exit_code == 2 and "is not a file" in r.output


def test_a_line_beyond_the_bound_is_refused_in_every_file_format(tiny_data, tmp_path):
    (tmp_path / "corpus.jsonl").write_text(
        '{"_id": "a", "title": "small"}\n' + json.dumps({"_id": "b", "title": "x" * 5000}) + "\n", encoding="utf-8"
    )
    (tmp_path / "docs.tsv").write_text("d1\tRed cat\n" + "d2\t" + "y" * 5000 + "\n", encoding="utf-8")
    for name in ("corpus.jsonl", "docs.tsv"):
        r = _build(tmp_path / name, tmp_path / "b", "--max-record-bytes", "4096")
        says = f"{name}:2: line longer than the bound of 4,096 bytes (--max-record-bytes)"
        assert r.exit_code == 2 and says in " ".join(r.output.split()), r.output
        assert _build(tmp_path / name, tmp_path / "b").exit_code == 0  # within the default 1 MiB
    r = _build("tiny", tmp_path / "b", "--max-record-bytes", "4096")
    assert r.exit_code == 2 and "--max-record-bytes needs a file as --data" in r.output
