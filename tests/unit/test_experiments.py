"""Experiment specs and the runner, on a generated data set."""

from __future__ import annotations

import json

import pytest

from semsearch.experiments import SpecError, get_spec, load_spec, run_experiment, spec_paths

SPEC = """
name = "tiny-table"
title = "Tiny table"
source = "test"
dataset = "tiny"
split = "test"
candidates = "{candidates}"
metrics = ["ndcg@1", "ndcg@3", "recall@10"]
tune = "{tune}"
baselines = ["Random"]

[[models]]
label = "Random"
model = "random"
expect = {{ "ndcg@3" = [0.0, 1.0] }}

[[models]]
label = "BM25"
model = "bm25"
grid = {{ k1 = [0.5, 1.2], b = [0.0, 0.75] }}
paper = {{ "ndcg@1" = 0.305 }}
expect = {{ "ndcg@3" = [0.3, 1.0] }}

[[models]]
label = "ULM"
model = "ulm"
params = {{ mu = 10 }}
stats = "{stats}"
"""


def _spec(tmp_path, candidates="judged", tune="split:dev", stats="collection"):
    p = tmp_path / "tiny.toml"
    p.write_text(SPEC.format(candidates=candidates, tune=tune, stats=stats))
    return load_spec(p)


@pytest.mark.parametrize("candidates,tune", [("judged", "split:dev"), ("run:first:10", "cv2"), ("full:5", "cv2")])
def test_runner_tables_tunes_and_checks(tiny_data, tmp_path, candidates, tune):
    result = run_experiment(_spec(tmp_path, candidates, tune), progress=False)
    assert list(result.table.rows) == ["Random", "BM25", "ULM"]
    means = {label: row.result.mean for label, row in result.table.rows.items()}
    assert means["BM25"]["ndcg@3"] > means["Random"]["ndcg@3"]
    assert len(result.chosen["BM25"]) == (1 if tune.startswith("split") else 2)
    assert len(result.tuning["BM25"]) == (4 if tune.startswith("split") else 8)
    assert [c.ok for c in result.checks] == [True, True]
    md = result.to_markdown()
    assert "| BM25 |" in md and "0.305" in md and "Expected ranges" in md
    out = result.write(tmp_path / "out")
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["name"] == "tiny-table" and data["checks"][1]["ok"] is True
    assert (tmp_path / "out" / "tiny-table" / "bm25.trec").is_file()


def test_out_of_range_is_reported(tiny_data, tmp_path):
    spec = _spec(tmp_path)
    spec.models[0].expect["ndcg@3"] = (0.999, 1.0)
    result = run_experiment(spec, progress=False)
    assert not result.ok and "OUT OF RANGE" in result.to_markdown()


def test_pool_excluded_statistics(tiny_data, tmp_path):
    result = run_experiment(_spec(tmp_path, "run:first:10", "cv2", stats="exclude-query-pool"), progress=False)
    assert result.table.rows["ULM"].result.n_queries > 0


@pytest.mark.parametrize("change,message", [
    (("judged", "nonsense"), "tune must be"),
    (("everything", "cv2"), "candidates must be"),
    (("judged", "none"), "has a grid"),
])
def test_spec_validation(tmp_path, change, message):
    with pytest.raises(SpecError, match=message):
        _spec(tmp_path, *change)


def test_spec_with_unknown_field_or_bad_baseline(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text(SPEC.format(candidates="judged", tune="cv2", stats="collection") + "\ncolour = 'red'\n")
    with pytest.raises(SpecError, match="unknown field"):
        load_spec(p)
    p.write_text(SPEC.format(candidates="judged", tune="cv2", stats="collection").replace('["Random"]', '["Nope"]'))
    with pytest.raises(SpecError, match="not model labels"):
        load_spec(p)
    with pytest.raises(SpecError, match="unknown experiment"):
        get_spec("no-such-table")


def test_registered_specs_all_parse():
    names = spec_paths()
    assert {"clsm-table5-lexical", "scifact-lexical", "trec-dl-2019-rerank", "cranfield-lexical", "cisi-lexical"} <= set(names)
    for name in names:
        spec = get_spec(name)
        assert spec.models and spec.metrics
