"""The click loop on Home Depot (real queries, grades and titles) at a small scale: a two-stage
bundle (BM25 ∪ a DSSM trained for 2 epochs, LambdaMART on the train grades), BM25 as the logger,
200k simulated impressions, click-learnt bundles served and scored through HTTP on the test
queries, and the online comparison of the two bundles furthest apart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_click_loop_on_homedepot(shared_data: Path, tmp_path: Path) -> None:
    os.environ["SEMSEARCH_DATA"] = str(shared_data)
    from semsearch.data import EvalSet, TrainingData, open_dataset
    from semsearch.experiments.click_loop import LoopOptions, run_loop
    from semsearch.index import build_bundle
    from semsearch.plugins import create_model
    from semsearch.training import fit
    from semsearch.training.args import EncoderArgs
    from semsearch.training.ranker import stage_ranker_trainer

    ds = open_dataset("homedepot")
    dssm = create_model("dssm")
    fit(
        dssm,
        TrainingData.from_dataset(ds, "train", threshold=3, fields="title"),
        EvalSet.judged(ds, "dev"),
        progress=False,
        args=EncoderArgs(epochs=2),
    )
    corpus = ds.corpus()
    trainer = stage_ranker_trainer("homedepot", corpus, "title", {"stage_depths": [[50, 50]], "rel_threshold": 3})
    grade = build_bundle(
        corpus,
        [create_model("bm25", analyzer="english"), dssm],
        tmp_path / "hd",
        dataset="homedepot",
        fields="title",
        train_ranker=trainer,
    )
    o = LoopOptions(
        bundle=str(grade),
        out=str(tmp_path / "loop"),
        impressions=200_000,
        curve=[100_000, 200_000],
        loggers=["bm25"],
        runs=4,
        horizon=5_000,
        ab_factor=4,
        fit_impressions=200_000,
        stage_depths=[[50, 50]],
    )
    r = run_loop(o)
    served = r["served_ndcg@10"]
    grade_score, bm25 = served["grade-trained two-stage bundle"], served["BM25 bundle"]
    # the strongest BM25 through HTTP on the test queries (docs/serving.md: 0.398), and the
    # grade-trained two-stage bundle above it
    assert 0.37 < bm25 < 0.43 and grade_score > bm25 + 0.005
    for row in r["goal4"]:  # learnt from clicks alone: near the grade-trained bundle, not below BM25
        assert 0.85 < row["of_grade"] < 1.05, row
        assert row["ndcg@10"] > bm25 - 0.01, row
    pbm = r["click_models"]["bm25"]["models"][0]
    # examination recovered from the 10 %-shuffled share of 150k sessions (at 1M: within 0.02, docs/clicks.md)
    assert pbm["model"] == "PBM" and pbm["max_error"] < 0.1
    top = max(r["goal5"], key=lambda c: c["delta_ndcg@10"])  # the pair furthest apart
    assert top["counterfactual"]["ips"]["value"] > 0  # the A/B log's estimate agrees in sign
    assert top["interleaving"]["wins_a"] > top["interleaving"]["wins_b"]
