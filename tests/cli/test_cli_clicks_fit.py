"""``semsearch clicks fit``: every click model fitted to a log in each input format, the
attractiveness per (query, document) written as Parquet or TSV, the held-out evaluation as JSON,
and bad options and input refused naming what is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.clicks.formats import read_yandex, write_ubi

YANDEX = Path(__file__).resolve().parents[1] / "fixtures" / "pyclick" / "sim.tsv"


def _fit(*args: str):
    return CliRunner().invoke(app, ["clicks", "fit", *args])


def test_every_model_on_a_yandex_log(tmp_path: Path) -> None:
    out, pairs = tmp_path / "fit.json", tmp_path / "pairs.tsv"
    r = _fit(str(YANDEX), "--format", "yandex", "--out", str(out), "--attractiveness", str(pairs), "--max-iter", "50")
    assert r.exit_code == 0, r.output
    fit = json.loads(out.read_text())
    assert fit["format"] == "yandex" and fit["impressions"] == 800 and fit["prior"] == [1.0, 1.0]
    assert set(fit["models"]) == {"pbm", "ubm", "dbn", "cascade"}
    for name, row in fit["models"].items():
        held = row["held_out"]
        assert held["log_likelihood"] < 0 and 1 < held["perplexity"] < 2 and len(held["perplexity_by_rank"]) == 10
        assert row["pairs"] > 0 and (name == "cascade" or row["iterations"] <= 50)
    assert len(fit["models"]["pbm"]["examination"]) == 10 and 0 < fit["models"]["dbn"]["continuation"] <= 1
    table = pcsv.read_csv(pairs, parse_options=pcsv.ParseOptions(delimiter="\t"))
    assert table.column_names == ["model", "query", "doc", "attractiveness", "satisfaction"]
    assert set(table["model"].to_pylist()) == {"pbm", "ubm", "dbn", "cascade"}


def test_a_ubi_log_with_a_prior_and_a_cap(tmp_path: Path) -> None:
    write_ubi(read_yandex(YANDEX), tmp_path / "ubi")
    out = tmp_path / "fit.json"
    r = _fit(
        str(tmp_path / "ubi"),
        "--format",
        "ubi",
        "--model",
        "pbm,cascade",
        "--prior",
        "0,0",
        "--max-iter",
        "2",
        "--test-fraction",
        "0",
        "--attractiveness",
        str(tmp_path / "a.parquet"),
        "--out",
        str(out),
    )
    assert r.exit_code == 0, r.output
    fit = json.loads(out.read_text())
    pbm = fit["models"]["pbm"]
    assert pbm["iterations"] == 2 and pbm["converged"] is False and pbm["last_change"] > 0
    assert "held_out" not in pbm and fit["prior"] == [0.0, 0.0]
    assert pq.read_table(tmp_path / "a.parquet").num_rows > 375


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "ctr"], "--model: comma-separated names of pbm, ubm, dbn, cascade or all"),
        (["--prior", "1"], "--prior: two comma-separated numbers"),
        (["--prior", "-1,1"], "--prior: pseudo-counts >= 0"),
        (["--format", "csv"], "--format must be one of log, yandex, ubi"),
        (["--attractiveness", "a.csv"], "--attractiveness: a .parquet or .tsv file"),
    ],
)
def test_bad_options_are_refused_naming_them(tmp_path: Path, args: list[str], message: str) -> None:
    r = _fit(str(YANDEX), "--format", "yandex", "--out", str(tmp_path / "x.json"), *args)
    assert r.exit_code != 0 and message in " ".join(r.output.split())
    assert not (tmp_path / "x.json").exists()


def test_bad_input_names_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tsv"
    bad.write_text("1\t0\tQ\t7\t0\tu1\n1\t0\tZ\tu1\n")
    r = _fit(str(bad), "--format", "yandex", "--out", str(tmp_path / "x.json"))
    assert r.exit_code != 0 and "bad.tsv:2" in r.output and "TypeOfAction" in r.output
    r = _fit(str(tmp_path / "missing.tsv"), "--format", "yandex", "--out", str(tmp_path / "x.json"))
    assert r.exit_code != 0 and "missing.tsv" in r.output
