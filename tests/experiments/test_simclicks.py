"""Simulated clicks as a spec's training data (experiments/simclicks.py), and the click and A/B
specs (experiments/abtest.py), on tiny generated fixtures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from semsearch.data.training import PairList, TrainingData
from semsearch.experiments import SpecError, get_spec, load_spec
from semsearch.experiments.simclicks import ClickSource, simulated_training


def test_click_source_checks_its_keys():
    assert ClickSource.of({"pairs": 5}).pairs == 5
    with pytest.raises(ValueError, match="unknown keys"):
        ClickSource.of({"pairz": 5})
    with pytest.raises(ValueError, match="pairs or impressions"):
        ClickSource.of({"pairs": 0})
    with pytest.raises(ValueError, match="k must be in 1..10"):
        ClickSource.of({"k": 20})
    with pytest.raises(ValueError, match="logger"):
        ClickSource.of({"logger": "dense"})


def test_pair_list_builds_the_same_trainer_pairs_as_tuples():
    from semsearch.training.trainer import Pairs

    qids, dids = ["a", "b", "c"], ["x", "y", "z", "w"]
    q = np.array([2, 0, 2, 1, 0], np.int32)
    d = np.array([3, 1, 0, 0, 1], np.int32)
    queries = {"a": "qa", "b": "qb", "c": "qc"}
    fast = Pairs.build(TrainingData(queries, dids, ["tx", "ty", "tz", "tw"], PairList(qids, dids, q, d)))
    slow = Pairs.build(TrainingData(queries, dids, ["tx", "ty", "tz", "tw"], list(PairList(qids, dids, q, d))))
    assert np.array_equal(fast.q_rows, slow.q_rows) and np.array_equal(fast.d_rows, slow.d_rows)
    assert fast.q_texts == slow.q_texts == ["qc", "qa", "qb"]


def test_simulated_training_over_a_tiny_data_set(tiny_data):
    from semsearch.data import open_dataset

    ds = open_dataset("tiny")
    data, log = simulated_training(ds, "train", "title", {"pairs": 3_000, "seed": 0, "k": 5, "judgments": True})
    assert isinstance(data.positives, PairList) and len(data.positives) == 3_000 == log["pairs"]
    assert set(q for q, _ in data.positives[:100]) <= set(data.queries) <= set(ds.qrels("train"))
    assert data.qrels and log["impressions"] > 0 and sum(log["clicks_by_rank"]) == 3_000
    again, _ = simulated_training(ds, "train", "title", {"pairs": 3_000, "seed": 0, "k": 5})
    assert np.array_equal(again.positives.d, data.positives.d) and not again.qrels  # type: ignore[attr-defined]


def test_a_spec_row_trains_on_simulated_clicks(tiny_data, tmp_path):
    from semsearch.experiments import run_experiment

    spec = tmp_path / "tiny-clicks.toml"
    spec.write_text(
        """
name = "tiny-clicks"
title = "t"
source = "s"
dataset = "tiny"
split = "test"
candidates = "judged"
fields = "title"
metrics = ["ndcg@3"]
tune = "split:dev"

[[models]]
label = "DSSM clicks"
model = "dssm"
params = { negatives = 2, epochs = 1, batch_size = 64, hidden = [16], out = 8 }
train = { split = "train", clicks = { pairs = 500, seed = 0, k = 5 } }
""",
        encoding="utf-8",
    )
    r = run_experiment(load_spec(spec), progress=False)
    log = r.training["DSSM clicks"]
    assert log["clicks"]["pairs"] == 500 and log["pairs_per_second"] > 0
    assert "DSSM clicks" in r.table.rows


@pytest.mark.parametrize("name", ["clsm-table5-clicks", "bert-homedepot-clicks", "bert-table7-rankers"])
def test_click_specs_parse_and_their_rows_resolve(name):
    from semsearch.experiments.simclicks import ClickSource as Source

    spec = get_spec(name)
    clicks = [m for m in spec.models if "clicks" in m.train]  # type: ignore[union-attr]
    assert name == "bert-table7-rankers" or clicks
    sizes = {m.label: Source.of(m.train["clicks"]).pairs for m in clicks}
    assert all(n >= 100_000 for n in sizes.values())
    if name == "clsm-table5-clicks":  # DSSM and CLSM at click scale, each beside its judged row
        assert {m.model for m in clicks if sizes[m.label] >= 10_000_000} == {"dssm", "clsm"}
        assert {"DSSM (J=50)", "CLSM (J=50)"} <= {m.label for m in spec.models}  # type: ignore[union-attr]


def test_ab_spec_parses_and_names_rows_of_its_rankers():
    from semsearch.experiments.spec import ABSpec

    spec = get_spec("bert-table7-ab")
    assert isinstance(spec, ABSpec)
    rankers = get_spec(spec.rankers)
    labels = [m.label for m in rankers.models]  # type: ignore[union-attr]
    assert spec.control in labels and spec.experiment in labels
    assert spec.paper["control 1"]["csr"] == pytest.approx(0.7674)


def test_bad_click_and_ab_specs_are_spec_errors(tmp_path: Path):
    text = get_spec("clsm-table5-clicks").__class__  # noqa: F841 - the registered spec loads
    src = Path(__file__).parents[2] / "src/semsearch/experiments/specs"
    bad = (src / "clsm-table5-clicks.toml").read_text(encoding="utf-8").replace("seed = 0 }", "sed = 0 }", 1)
    (tmp_path / "bad.toml").write_text(bad, encoding="utf-8")
    with pytest.raises(SpecError, match="unknown keys"):
        load_spec(tmp_path / "bad.toml")
    ab = (src / "bert-table7-ab.toml").read_text(encoding="utf-8").replace('control = "BM25"', 'control = "BM26"')
    (tmp_path / "ab.toml").write_text(ab, encoding="utf-8")
    with pytest.raises(SpecError, match="BM26"):
        load_spec(tmp_path / "ab.toml")
