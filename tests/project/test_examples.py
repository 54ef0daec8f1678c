"""The scripts in examples/ run as a user runs them (a subprocess, the repository's src on the
path) on the tiny generated data set and bundles, so they cannot rot as the library changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from semsearch.data import open_dataset, read_run, write_run
from semsearch.evaluation import evaluate
from semsearch.index.bundle import Bundle
from semsearch.plugins import load_model

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _run(script: str, *args: str, cwd: Path, ok: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if ok:
        assert r.returncode == 0, f"{script} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r


def test_search_bundle_searches_a_hybrid_bundle(make_bundle, tmp_path):
    b = make_bundle(tmp_path / "b")
    r = _run("search_bundle.py", "--bundle", str(b), "-k", "3", "--json", "red cat", "blue dog", cwd=tmp_path)
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    bundle = Bundle.load(b)
    try:
        for query in ("red cat", "blue dog"):
            got = [h for h in lines if h["query"] == query]
            want = bundle.search(query, 3)
            assert [h["rank"] for h in got] == [1, 2, 3]
            assert [h["doc_id"] for h in got] == [h.doc_id for h in want.hits]
            assert [h["source"] for h in got] == [h.sources.name for h in want.hits]
    finally:
        bundle.close()


def test_search_bundle_builds_a_bm25_bundle_first(tiny_data, tmp_path):
    out = tmp_path / "bm25"
    r = _run("search_bundle.py", "--build-from", "tiny", "--bundle", str(out), "-k", "4", "green", cwd=tmp_path)
    assert (out / "manifest.json").is_file()
    rows = [line.split() for line in r.stdout.splitlines() if line.strip()[:1].isdigit() and "hits" not in line]
    assert r.stdout.lstrip().startswith("'green'") and "4 hits in" in r.stdout
    assert [int(row[0]) for row in rows] == [1, 2, 3, 4] and {row[2] for row in rows} == {"LEXICAL"}
    corpus = open_dataset("tiny").corpus()
    assert all("green" in corpus.titles[corpus.index[row[3]]] for row in rows)  # BM25 over titles
    missing = _run("search_bundle.py", "--bundle", str(tmp_path / "none"), "x", cwd=tmp_path, ok=False)
    assert missing.returncode == 2 and "no bundle at" in missing.stderr


def test_train_model_trains_saves_and_scores(tiny_data, tmp_path):
    out = tmp_path / "dssm"
    shape = ["hidden=[32]", "out=8", "batch_size=16", "neg_pool=32", "epochs=2"]
    params = [a for p in shape for a in ("--param", p)]
    args = ["--data", "tiny", "--threshold", "2", *params, "--out", str(out), "--quiet", "--json"]
    r = _run("train_model.py", *args, cwd=tmp_path)
    summary = json.loads(r.stdout)
    assert summary["model"] == "dssm" and summary["stopped"] == "reached 2 epochs" and summary["positive_pairs"] > 0
    assert set(summary["test"]) == {"ndcg@1", "ndcg@3", "ndcg@10"}
    assert all(0 <= v <= 1 for v in summary["test"].values())
    qrels = open_dataset("tiny").qrels("test")
    assert summary["test_queries"] == sum(1 for docs in qrels.values() if max(docs.values()) >= 1)
    model = load_model(out)
    assert model.name == "dssm" and (out / "training.json").is_file()
    bad = _run(
        "train_model.py", "--data", "tiny", "--param", "gama=3", "--out", str(tmp_path / "x"), cwd=tmp_path, ok=False
    )
    assert bad.returncode == 2 and "did you mean 'gamma'" in bad.stderr and not (tmp_path / "x").exists()


def test_evaluate_run_matches_evaluate_and_tests_against_the_first_run(tiny_data, tmp_path):
    ds = open_dataset("tiny")
    first = read_run(ds.runs["first"])
    reversed_run = {q: {d: -s for d, s in docs.items()} for q, docs in first.items()}
    write_run(reversed_run, tmp_path / "reversed.trec")
    metrics = ["ndcg@10", "recall@20", "mrr"]
    runs = ["first", str(tmp_path / "reversed.trec")]  # a run of the data set by name, a run file
    r = _run(
        "evaluate_run.py", *runs, "--data", "tiny", "--split", "test", "--metrics", *metrics, "--json", cwd=tmp_path
    )
    got = json.loads(r.stdout)
    assert list(got) == ["first", "reversed"]
    qrels = ds.qrels("test")
    for name, run in (("first", first), ("reversed", reversed_run)):
        want = evaluate(run, qrels, metrics)
        assert got[name]["mean"] == want.mean and got[name]["n_queries"] == want.n_queries
    assert set(got["reversed"]["p_vs_first"]) == set(metrics) and "p_vs_first" not in got["first"]
    assert all(0 <= p <= 1 for p in got["reversed"]["p_vs_first"].values())
    table = _run("evaluate_run.py", "--data", "tiny", "--split", "test", cwd=tmp_path).stdout  # every run of tiny
    assert table.splitlines()[1].startswith("first ") and "differs from first" in table
    missing = _run("evaluate_run.py", "nope", "--data", "tiny", cwd=tmp_path, ok=False)
    assert missing.returncode == 2 and "no run 'nope'" in missing.stderr and "first" in missing.stderr
