"""``train KIND --clicks`` and ``index build --train-ranker --clicks``: models and a bundle learnt from
a simulated click log over the tiny data set, no judgments; and the errors for bad logs."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.clicks import PositionBasedUser, Rankings, simulate
from semsearch.clicks.log import EventLogWriter, segments
from semsearch.data import open_dataset, write_clicks
from semsearch.models import rank
from semsearch.plugins import create_model

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def _write_log(out: Path, impressions: int = 3000, seed: int = 0) -> Path:
    """BM25 (english) top 10 of the tiny set's train and dev queries, shown to position-based users."""
    ds = open_dataset("tiny")
    corpus = ds.corpus()
    qrels = {**ds.qrels("train"), **ds.qrels("dev")}
    queries = {q: t for q, t in ds.queries().items() if q in qrels}
    bm25 = create_model("bm25", analyzer="english")
    bm25.index(corpus.ids, corpus.joined("title"))
    run = rank(bm25, queries, k=10)
    top = {q: sorted(s, key=lambda d: -s[d]) for q, s in run.items()}
    rankings = Rankings.from_run(top, qrels, queries, k=10)
    with EventLogWriter(out) as w:
        for _ in simulate(rankings, PositionBasedUser(rankings.max_grade), impressions, seed=seed, writer=w):
            pass
    return out


@pytest.fixture
def click_log(tiny_data, tmp_path) -> Path:
    return _write_log(tmp_path / "log")


def test_train_dssm_from_an_event_log(click_log, tmp_path):
    out = tmp_path / "dssm"
    r = invoke(
        "train", "dssm", "--data", "tiny", "--clicks", str(click_log), "--out", str(out),
        "--param", "epochs=1", "--param", "hidden=[16]", "--param", "out=8", "--param", "neg_pool=16",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "clicked pairs" in r.output and "no dev split" in r.output
    log = json.loads((out / "training.json").read_text())
    assert log["clicks"]["log"] == str(click_log) and log["clicks"]["positives"] > 100
    # weighted by inverse propensity (given, the log's logger being deterministic)
    r = invoke(
        "train", "dssm", "--data", "tiny", "--clicks", str(click_log), "--out", str(tmp_path / "ipw"),
        "--param", "epochs=1", "--debias", "ipw", "--propensities", "0.68,0.61,0.48,0.34,0.28,0.20,0.11,0.10,0.08,0.06",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    ipw = json.loads((tmp_path / "ipw" / "training.json").read_text())["clicks"]
    assert ipw["debias"] == "ipw" and ipw["positives"] > log["clicks"]["positives"]
    # fitting the propensities to a deterministic logger's log is refused, with what to do instead
    r = invoke(
        "train", "dssm", "--data", "tiny", "--clicks", str(click_log), "--out", str(tmp_path / "x"), "--debias", "ipw"
    )
    assert r.exit_code == 2 and "give the propensities" in r.output


def test_train_from_a_click_count_file(tiny_data, tmp_path):
    f = tmp_path / "clicks.tsv"
    write_clicks([("red", "d00", 3), ("blue cat", "d01", 1), ("dog", "d02", 0)], f)
    r = invoke(
        "train", "dssm", "--data", "tiny", "--clicks", str(f), "--out", str(tmp_path / "m"), "--param", "epochs=1"
    )
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "m" / "training.json").read_text())["clicks"]["positives"] == 4
    bad = tmp_path / "bad.tsv"
    bad.write_text("red\td00\t2\nblue\td01\tmany\n")
    r = invoke("train", "dssm", "--data", "tiny", "--clicks", str(bad), "--out", str(tmp_path / "m2"))
    assert r.exit_code == 2 and f"{bad}:2" in r.output
    zero = tmp_path / "zero.tsv"
    write_clicks([("red", "d00", 0)], zero)
    r = invoke("train", "dssm", "--data", "tiny", "--clicks", str(zero), "--out", str(tmp_path / "m3"))
    assert r.exit_code == 2 and "no clicks" in r.output
    r = invoke("train", "dssm", "--data", "tiny", "--clicks", str(f), "--out", str(tmp_path / "m4"), "--debias", "ipw")
    assert r.exit_code == 2 and "rank of each click" in r.output
    r = invoke("train", "dssm", "--data", "tiny", "--clicks", str(f), "--out", str(tmp_path / "m5"), "--threshold", "2")
    assert r.exit_code == 2 and "with --clicks every click is one" in r.output


def _build(tmp_path: Path, clicks: Path, trained_clsm, *extra: str, name: str = "B"):
    enc = tmp_path / "enc"
    if not enc.exists():
        trained_clsm(0, "dssm").save(enc)
    return invoke(
        "index", "build", "--data", "tiny", "--models", f"bm25,{enc}", "--analyzer", "english", "--fields", "title",
        "--out", str(tmp_path / name), "--train-ranker", "--clicks", str(clicks),
        "--ranker-param", "stage_depths=[[10,5]]", "--ranker-param", "min_data_in_leaf=2",
        "--ranker-param", "num_boost_round=20", *extra,
    )  # fmt: skip


@pytest.mark.parametrize(("debias", "unshown"), [("lightgbm", "negative"), ("none", "drop")])
def test_index_build_trains_the_stage_2_ranker_from_clicks(click_log, tmp_path, trained_clsm, debias, unshown):
    r = _build(
        tmp_path, click_log, trained_clsm, "--ranker-param", f"debias={debias}", "--ranker-param", f"unshown={unshown}"
    )
    assert r.exit_code == 0, r.output
    log = json.loads((tmp_path / "B" / "ranker" / "training.json").read_text())
    assert log["debias"] == debias and "click log" in log["learnt_from"]
    assert log["trees"] >= 1
    assert log["labels"].endswith("left out" if unshown == "drop" else "= 0")
    if unshown == "drop":  # only the shown documents, at most 10 a query
        assert log["train_pairs"] <= 10 * log["train_queries"]
    r = invoke("search", "--index", str(tmp_path / "B"), "red", "--json")
    assert r.exit_code == 0 and r.output.strip()


def test_index_build_from_clicks_refuses_bad_logs_and_parameters(click_log, tmp_path, trained_clsm):
    r = _build(tmp_path, click_log, trained_clsm, "--ranker-param", "debias=magic")
    assert r.exit_code == 2 and "debias" in r.output and "lightgbm" in r.output
    r = _build(
        tmp_path, click_log, trained_clsm, "--ranker-param", "debias=ipw"
    )  # a deterministic logger: not identified
    assert r.exit_code == 2 and "propensities" in r.output
    r = invoke(
        "index", "build", "--data", "tiny", "--models", "bm25", "--out", str(tmp_path / "C"),
        "--train-ranker", "--ranker-param", "debias=ipw",
    )  # fmt: skip
    assert r.exit_code == 2 and "needs --clicks" in r.output
    r = invoke("index", "build", "--data", "tiny", "--out", str(tmp_path / "C"), "--clicks", str(click_log))
    assert r.exit_code == 2 and "--clicks needs --train-ranker" in r.output
    # an empty log directory
    empty = tmp_path / "empty"
    empty.mkdir()
    r = _build(tmp_path, empty, trained_clsm)
    assert r.exit_code == 2 and "no impression segments" in r.output
    # a segment without a column: named with its file
    seg = segments(click_log, "events")[0]
    pq.write_table(pq.read_table(seg).drop_columns(["position"]), seg)
    r = _build(tmp_path, click_log, trained_clsm)
    assert r.exit_code == 2 and str(seg) in r.output and "'position'" in r.output


def test_a_log_over_another_collection_is_refused(tiny_data, tmp_path, trained_clsm):
    log = tmp_path / "foreign"
    with EventLogWriter(log) as w:
        w.append_table(
            pa.table(
                {
                    "query_id": ["s1"],
                    "timestamp": pa.array([0], pa.timestamp("ms", tz="UTC")),
                    "user_query": ["red"],
                    "client_id": pa.nulls(1, pa.string()),
                    "bundle": [""],
                    "bundle_version": [""],
                    "arm": pa.nulls(1, pa.string()),
                    "k": pa.array([10], pa.int32()),
                    "offset": pa.array([0], pa.int32()),
                    "hit_ids": [["d00", "elsewhere-1"]],
                    "hit_stages": pa.nulls(1, pa.list_(pa.string())),
                }
            )
        )
    r = _build(tmp_path, log, trained_clsm)
    assert r.exit_code == 2 and "not in the collection" in r.output and "elsewhere-1" in r.output
    r = invoke("train", "dssm", "--data", "tiny", "--clicks", str(log), "--out", str(tmp_path / "m"))
    assert r.exit_code == 2 and "not in the collection" in r.output
