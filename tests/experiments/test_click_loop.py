"""semsearch clicks loop: the options, and the loop end to end on the tiny set (every bundle served
through HTTP); the simulated online comparison it runs is tested in tests/clicks/test_click_comparison.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.experiments.click_loop import LoopOptions, run_loop, tables
from semsearch.params import ParamError


def test_options_are_checked_where_they_are_made():
    with pytest.raises(ParamError, match="must end at"):
        LoopOptions(impressions=1000, curve=[100, 500])
    with pytest.raises(ParamError, match="increasing"):
        LoopOptions(impressions=1000, curve=[500, 100, 1000])
    with pytest.raises(ParamError, match="'bm25' or 'two-stage'"):
        LoopOptions(loggers=["random"])
    with pytest.raises(ParamError, match="debias"):
        LoopOptions(debias=["magic"])
    with pytest.raises(ParamError, match="shuffl"):
        LoopOptions.from_mapping({"shufle_rate": 0.2})
    r = CliRunner().invoke(app, ["clicks", "loop", "--param", "seed=3"])
    assert r.exit_code == 2 and "--param seed: give it as --seed" in r.output


def test_the_loop_end_to_end_on_the_tiny_set(make_two_stage, tmp_path):
    bundle = make_two_stage(tmp_path / "B")
    o = LoopOptions(
        data="tiny",
        bundle=str(bundle),
        out=str(tmp_path / "loop"),
        impressions=20_000,
        curve=[10_000, 20_000],
        loggers=["bm25"],
        runs=3,
        horizon=300,
        ab_factor=2,
        fit_impressions=10_000,
        stage_depths=[[5, 5]],
        ranker_params={"min_data_in_leaf": 2, "num_boost_round": 20},
    )
    results = run_loop(o)
    out = tmp_path / "loop"
    assert (out / "logs" / "bm25" / "first-10000").is_dir() and (out / "logs" / "bm25" / "first-20000").is_dir()
    saved = json.loads((out / "results.json").read_text())
    assert saved["goal4"] == json.loads(json.dumps(results["goal4"]))
    rows = {(r["impressions"], r["debias"]) for r in results["goal4"]}
    assert rows == {(10_000, "lightgbm"), (20_000, "lightgbm"), (20_000, "none")}
    for r in results["goal4"]:
        assert 0 <= r["ndcg@10"] <= 1 and 0 <= r["vs_logger"]["p"] <= 1
    assert set(results["served_ndcg@10"]) >= {"grade-trained two-stage bundle", "BM25 bundle"}
    assert [m["model"] for m in results["click_models"]["bm25"]["models"]] == ["PBM", "UBM", "cascade", "DBN"]
    assert results["goal5"] and all(c["runs"] == 3 for c in results["goal5"])
    text = tables(results)
    assert "Goal 4" in text and "Goal 5" in text and (out / "tables.md").read_text().strip() == text
    # a second run reuses the log, the bundles and the served runs
    again = run_loop(o)
    assert again["served_ndcg@10"] == results["served_ndcg@10"]
    assert np.isclose(again["goal4"][0]["ndcg@10"], results["goal4"][0]["ndcg@10"])
