"""index retrain: a new stage-2 ranker on a built bundle's stage 1, the other files shared."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.clicks import PositionBasedUser, Rankings, simulate
from semsearch.clicks.log import EventLogWriter
from semsearch.data import open_dataset
from semsearch.index import Bundle
from semsearch.index.bundle import read_manifest


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _log(bundle: Path, out: Path, impressions: int = 4000) -> Path:
    """The bundle's own top 10 for the tiny set's train queries, shown to position-based users."""
    ds = open_dataset("tiny")
    qrels = ds.qrels("train")
    queries = {q: t for q, t in ds.queries().items() if q in qrels}
    b = Bundle.load(bundle)
    top = {q: [h.doc_id for h in b.search(t, 10).hits] for q, t in queries.items()}
    b.close()
    rankings = Rankings.from_run(top, qrels, queries, k=10)
    with EventLogWriter(out) as w:
        for _ in simulate(rankings, PositionBasedUser(rankings.max_grade), impressions, seed=3, writer=w):
            pass
    return out


def test_retrain_from_judgments_shares_every_file_but_the_ranker(two_stage, tmp_path):
    out = tmp_path / "R"
    r = invoke("index", "retrain", str(two_stage), "--out", str(out), "--ranker-param", "stage_depths=[[5,5]]",
               "--ranker-param", "min_data_in_leaf=2", "--ranker-param", "num_boost_round=20")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "ranker from judgments of tiny" in r.output
    old, new = read_manifest(two_stage), read_manifest(out)
    assert new["retrained"]["from"] == str(two_stage.resolve())
    assert new["retrained"]["learnt_from"] == "judgments of tiny"
    for rel, digest in old["files"].items():
        if not rel.startswith("ranker/"):
            assert new["files"][rel] == digest, rel
            assert os.stat(two_stage / rel).st_ino == os.stat(out / rel).st_ino, rel  # a hard link, no copy
    assert any(rel.startswith("ranker/") for rel in new["files"])
    log = json.loads((out / "ranker" / "training.json").read_text())
    assert log["chosen"]["n_lexical"] == 5
    b = Bundle.load(out)  # every checksum verified
    assert b.two_stage and b.search("red cat", 5).hits
    b.close()


def test_retrain_from_clicks_in_place(two_stage, tmp_path):
    log = _log(two_stage, tmp_path / "log")
    before = read_manifest(two_stage)
    r = invoke("index", "retrain", str(two_stage), "--out", str(two_stage), "--clicks", str(log),
               "--ranker-param", "stage_depths=[[5,5]]", "--ranker-param", "min_data_in_leaf=2",
               "--ranker-param", "num_boost_round=20")  # fmt: skip
    assert r.exit_code == 0, r.output
    after = read_manifest(two_stage)
    assert after["retrained"]["learnt_from"] == f"clicks of {log}"
    assert after["files"]["documents.jsonl"] == before["files"]["documents.jsonl"]
    training = json.loads((two_stage / "ranker" / "training.json").read_text())
    assert "click log" in training["learnt_from"] and training["debias"] == "lightgbm"
    b = Bundle.load(two_stage)
    assert b.search("blue dog", 3).hits
    b.close()


def test_retrain_refusals(two_stage, tmp_path):
    r = invoke("index", "retrain", str(two_stage), "--out", str(tmp_path / "R"), "--data", "tiny",
               "--clicks", str(tmp_path))  # fmt: skip
    assert r.exit_code == 2 and "not both" in r.output
    r = invoke("index", "retrain", str(tmp_path / "nothing"), "--out", str(tmp_path / "R"))
    assert r.exit_code == 2 and "not a semsearch bundle" in r.output
    r = invoke("index", "retrain", str(two_stage), "--out", str(tmp_path / "R.tmp-12"))
    assert r.exit_code == 2 and ".tmp-<number>" in r.output
    r = invoke("index", "retrain", str(two_stage), "--out", str(tmp_path / "R"), "--ranker-param", "nope=1")
    assert r.exit_code == 2 and "nope" in r.output
    assert not (tmp_path / "R").exists()


def test_retrain_api_refuses_a_ranker_over_other_documents(two_stage, tmp_path):
    from types import SimpleNamespace

    from semsearch.index.bundle.retrain import retrain_ranker

    def other(search):  # a ranker indexing other documents than the bundle's
        assert search(["red"], 3, 3)  # the bundle's stage 1 answers
        return SimpleNamespace(name="lambdamart", doc_ids=["x1", "x2"]), {}

    with pytest.raises(ValueError, match="other documents"):
        retrain_ranker(two_stage, tmp_path / "R", other)
    assert not (tmp_path / "R").exists()
