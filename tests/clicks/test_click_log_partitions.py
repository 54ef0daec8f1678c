"""Click-log processing at cluster scale (issue 51 item 5): a partitioned log's cell counts, added up
in this process or by Ray Data, give the fit and the labels of one process over the whole log."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.clicks import PBM, UBM, PositionBasedUser, Rankings, simulate
from semsearch.clicks.distributed import fit, labels, log_counts, partitions, write_labels
from semsearch.clicks.labels import click_judgments
from semsearch.clicks.log import EventLogWriter
from semsearch.clicks.sessions import read_sessions

CI = os.environ.get("CI") == "true"


def _rankings(n_queries: int = 40, n_docs: int = 120, k: int = 5) -> Rankings:
    rng = np.random.default_rng(3)
    docs = np.stack([rng.choice(n_docs, k, replace=False) for _ in range(n_queries)]).astype(np.int32)
    return Rankings(
        [f"q{i}" for i in range(n_queries)],
        [f"query {i}" for i in range(n_queries)],
        [f"d{i:03d}" for i in range(n_docs)],
        docs,
        rng.integers(0, 4, size=docs.shape).astype(np.int8),
        max_grade=3,
    )


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> tuple[Path, Path]:
    """(a log in 3 partitions, the same segments as one log)."""
    d = tmp_path_factory.mktemp("clicklog")
    r = _rankings()
    user = PositionBasedUser(max_grade=3, examination=(0.9, 0.7, 0.5, 0.35, 0.2))
    for i in range(3):  # each partition its own impressions and their clicks (its own ids)
        with EventLogWriter(d / "parted" / f"part={i:03d}") as w:
            for _ in simulate(r, user, 3000, seed=i, writer=w, start_ms=0, shuffle_rate=0.5, id_prefix=f"p{i}-"):
                pass
    whole = d / "whole"
    for kind in ("impressions", "events"):
        (whole / kind).mkdir(parents=True)
        for part in partitions(d / "parted"):
            for f in (part / kind).glob("part-*.parquet"):
                shutil.copy(f, whole / kind / f"part-{part.name.replace('=', '')}-{f.name[5:]}")
    return d / "parted", whole


@pytest.mark.parametrize("model", ["pbm", "ubm"])
def test_fitting_the_added_up_counts_is_fitting_the_whole_log(logs, model):
    parted, whole = logs
    counts = log_counts(parted, top_n=5)
    assert counts.partitions == 3 and counts.impressions == 9000
    got = fit(counts.cells, model, positions=5)
    sessions = read_sessions(whole, top_n=5)
    want = (PBM if model == "pbm" else UBM)().fit(sessions)
    assert got.iterations == want.iterations
    assert np.allclose(got.examination.ravel(), want.theta, rtol=0, atol=1e-12)
    alpha = dict(
        zip(zip(got.pairs["query"].to_pylist(), got.pairs["doc"].to_pylist()), got.pairs["attractiveness"].to_pylist())
    )
    keys = want.pairs.keys
    n_docs = len(sessions.doc_ids)
    expected = {
        (sessions.queries[k // n_docs], sessions.doc_ids[k % n_docs]): a for k, a in zip(keys.tolist(), want.alpha[:-1])
    }
    assert alpha.keys() == expected.keys()
    assert np.allclose([alpha[p] for p in expected], list(expected.values()), atol=1e-12)
    assert got.pooled == pytest.approx(want.alpha[-1], abs=1e-12)


@pytest.mark.parametrize("propensities", [None, [0.9, 0.7, 0.5, 0.35, 0.2]])
def test_the_labels_are_the_whole_logs_click_judgments(logs, tmp_path, propensities):
    parted, whole = logs
    table = labels(log_counts(parted, top_n=5).cells, propensities=propensities, levels=5)
    sessions = read_sessions(whole, top_n=5)
    want = click_judgments(sessions, debias="none" if propensities is None else "ipw", propensities=propensities)
    got = {
        (q, d): g for q, d, g in zip(table["query"].to_pylist(), table["doc"].to_pylist(), table["grade"].to_pylist())
    }
    for qid, judged in want.qrels.items():
        for doc, grade in judged.items():
            assert got[(want.queries[qid], doc)] == grade
    assert int(np.sum(table["clicks"].to_numpy())) == int(sessions.clicks.sum())
    ranks = {
        (q, d): r for q, d, r in zip(table["query"].to_pylist(), table["doc"].to_pylist(), table["rank"].to_pylist())
    }
    lgb = click_judgments(sessions, debias="lightgbm")
    for qid, pos in lgb.positions.items():
        for doc, r in pos.items():
            assert ranks[(lgb.queries[qid], doc)] == r
    out = write_labels(table, tmp_path / "labels.parquet")
    assert pq.read_table(out).num_rows == table.num_rows


def test_ray_data_adds_up_the_partitions_as_this_process_does(logs):
    parted, _ = logs
    try:
        import ray.data  # noqa: F401
    except ImportError:
        if CI:
            raise
        pytest.skip("ray is not installed")
    here = log_counts(parted, top_n=5)
    on_ray = log_counts(parted, top_n=5, ray="local")
    assert on_ray.cells.equals(here.cells)


def test_clicks_fit_and_labels_on_the_command_line(logs, tmp_path):
    parted, _ = logs
    r = CliRunner().invoke(
        app, ["clicks", "fit", str(parted), "--model", "pbm", "--top-n", "5", "--out", str(tmp_path / "fit.json")]
    )
    assert r.exit_code == 0, r.output
    assert '"examination"' in (tmp_path / "fit.json").read_text()
    r = CliRunner().invoke(
        app,
        [
            "clicks",
            "labels",
            str(parted),
            "--top-n",
            "5",
            "--propensities",
            "0.9,0.7,0.5,0.35,0.2",
            "--out",
            str(tmp_path / "l.parquet"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert pq.read_table(tmp_path / "l.parquet").num_rows > 100
    r = CliRunner().invoke(app, ["clicks", "fit", str(tmp_path / "nothing"), "--out", str(tmp_path / "x.json")])
    assert r.exit_code != 0 and "nothing" in r.output


def test_an_address_that_names_no_ray_cluster_is_refused_naming_it():
    pytest.importorskip("ray") if not CI else None
    from semsearch.ray_cluster import connect

    with pytest.raises(ValueError, match="cannot reach a Ray cluster at 'foo'"):
        connect("foo")
    with pytest.raises(ValueError, match="address is needed"):
        connect(" ")
