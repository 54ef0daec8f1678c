"""Simulated clicks on Home Depot (../shared/data): the logger's lists, the click volume and the
grades of what is clicked, as clsm-table5-clicks trains on them (here 200k pairs, not 10M)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.integration


def test_homedepot_simulated_clicks(shared_data, monkeypatch):
    from semsearch.data import open_dataset
    from semsearch.data.training import PairList
    from semsearch.experiments.simclicks import simulated_training

    monkeypatch.setenv("SEMSEARCH_DATA", str(shared_data))
    ds = open_dataset("homedepot")
    data, log = simulated_training(ds, "train", "title", {"pairs": 200_000, "seed": 0})
    assert isinstance(data.positives, PairList) and len(data.positives) == 200_000
    assert log["queries"] == 8_295 and len(data.doc_ids) == 54_667
    # position-based users on BM25's top 10: about 0.8 clicks an impression, rank 1 the most clicked,
    # most clicks on titles graded 3-4, a quarter on grade 0 (epsilon and unjudged titles)
    assert 0.7 < log["clicks_per_impression"] < 0.9
    by_rank, by_grade = np.array(log["clicks_by_rank"]), np.array(log["clicks_by_grade"])
    assert by_rank.argmax() == 0 and by_rank[0] > 10 * by_rank[-1]
    assert by_grade[3:].sum() > 0.6 * by_grade.sum() and 0.15 < by_grade[0] / by_grade.sum() < 0.35
    again, _ = simulated_training(ds, "train", "title", {"pairs": 200_000, "seed": 0})
    assert np.array_equal(again.positives.q, data.positives.q)  # type: ignore[attr-defined]
