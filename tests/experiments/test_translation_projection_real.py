"""Translation, projection and term-dependency models on real homedepot (../shared/data): both
paper tables run end to end (training on train, tuning on dev, test figures), land in their
expected ranges, beat the random floor, and keep the orderings that are robust on this data."""

from __future__ import annotations

import contextlib

import pytest

from semsearch.experiments import get_spec, run_experiment

pytestmark = pytest.mark.integration

RANDOM_FLOOR = 0.677  # random order's test NDCG@1 on homedepot's judged products


@pytest.fixture(scope="module", autouse=True)
def _one_blas_thread():
    """Oversubscribed BLAS threads on a shared 2-core machine are many times slower than one."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        yield
        return
    with threadpool_limits(1):
        yield


def _run(name, cache={}):  # noqa: B006 - module-level memo: each table runs once per session
    if name not in cache:
        with contextlib.redirect_stdout(None):
            cache[name] = run_experiment(get_spec(name), progress=False)
    return cache[name]


def _mean(result, label, metric="ndcg@1"):
    return result.table.rows[label].result.mean[metric]


def test_projection_table(shared_data):
    r = _run("gao2011-table2")
    assert r.ok, r.to_markdown()
    for label in ("LSA", "CL-LSA", "OPCA", "S2Net", "LSA + VSM", "S2Net + VSM"):
        assert _mean(r, label) > RANDOM_FLOOR + 0.015, label
        assert 0.86 < _mean(r, label, "ndcg@10") < 0.91, label
    # the discriminatively trained projection beats LSA, significantly (marker β = LSA)
    assert _mean(r, "S2Net", "ndcg@10") > _mean(r, "LSA", "ndcg@10") + 0.005
    assert r.table.p_values("S2Net", "ndcg@10")["LSA"] < 0.05
    # combining LSA with VSM helps LSA (the paper's motivation for the "+ VSM" rows)
    assert _mean(r, "LSA + VSM", "ndcg@10") > _mean(r, "LSA", "ndcg@10")
    assert len(r.chosen["LSA + VSM"]) == 1 and len(r.tuning["LSA + VSM"]) == 11  # weight tuned on dev
    log = r.training["S2Net"]
    assert log["seconds_per_epoch"] > 0 and log["epochs"][0]["pairs_per_s"] > 1000
    assert log["epochs"][-1]["loss"] < log["epochs"][0]["loss"]
    assert log["best_dev_ndcg10"] >= log["dev_ndcg@10_init"]  # early stopping kept the best epoch
    assert r.training["LSA"]["vocabulary"] <= 40_000


def test_term_dependency_and_translation_table(shared_data):
    r = _run("clsm-table5-termdep-translation")
    assert r.ok, r.to_markdown()
    bm25 = _mean(r, "BM25", "ndcg@10")
    for label in ("MRF", "LCE", "WTM", "PTM (maxlen = 3)"):
        assert _mean(r, label) > RANDOM_FLOOR + 0.02, label
        assert _mean(r, label, "ndcg@10") > bm25 - 0.002, label  # at least as good as BM25
    assert r.table.p_values("PTM (maxlen = 3)", "ndcg@10")["BM25"] < 0.05
    em = r.training["WTM"]["em"]
    lls = [it["log_likelihood"] for it in em["iterations"]]
    assert all(b >= a for a, b in zip(lls, lls[1:]))  # EM never lowers the likelihood
    assert r.training["PTM (maxlen = 3)"]["phrases"]["bi_phrase_types"] > 1000
    assert r.table.rows["WTM"].result.n_queries == 1157
