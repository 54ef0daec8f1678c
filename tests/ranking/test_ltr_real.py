"""Learning to rank and the interaction baselines on real Home Depot data (subsampled to stay fast):
LambdaMART over lexical features is at least as good as BM25 and far above random; K-NRM trained
for one short epoch learns (well above the random floor); TREC DL's cross-validated ranker runs."""

from __future__ import annotations

import pytest

from semsearch.data import EvalSet, TrainingData, open_dataset
from semsearch.evaluation import evaluate
from semsearch.models import rank
from semsearch.plugins import create_model
from semsearch.training import fit
from semsearch.training.args import PairwiseArgs
from semsearch.training.ranker import fit_ranker

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def homedepot(shared_data):
    ds = open_dataset(shared_data / "homedepot")
    corpus = ds.corpus()
    test = EvalSet.judged(ds, "test")
    return ds, corpus, test


def _ndcg(model, test):
    return evaluate(rank(model, test.queries, test.candidates), test.qrels, ["ndcg@1", "ndcg@10"]).mean


@pytest.mark.parametrize(
    "prior", [{}, {"query_norm": "zscore", "prior_features": ["BM25"]}], ids=["trees", "boosted-from-zscore-sum"]
)
def test_lambdamart_over_lexical_features_is_at_least_bm25(homedepot, prior):
    ds, corpus, test = homedepot
    train = EvalSet.judged(ds, "train")
    train = train.subset(sorted(train.queries)[:3000])  # a subsample keeps this under a minute
    dev = EvalSet.judged(ds, "dev")
    ranker = create_model(
        "lambdamart",
        features=[{"name": "BM25", "model": "bm25", "params": {"k1": 1.2, "b": 0.25}}, "ulm", "tfidf"],
        pair_features=["query_words", "doc_words", "query_coverage"],
        **prior,
    )
    ranker.index(corpus.ids, corpus.joined("title"))
    log = fit_ranker(ranker, train, dev)
    assert 1 <= log["trees"] <= 1000 and log["held-out ndcg@10"] > 0.87
    imp = log["importance"]
    assert max(imp, key=lambda n: imp[n]["gain"]).split(" (")[0] in ("BM25", "ulm", "tfidf", "query_coverage")
    ltr = _ndcg(ranker, test)
    bm25 = create_model("bm25", k1=1.2, b=0.25)
    bm25.index(corpus.ids, corpus.joined("title"))
    base = _ndcg(bm25, test)
    rnd = create_model("random")
    rnd.index(corpus.ids, corpus.joined("title"))
    floor = _ndcg(rnd, test)
    assert ltr["ndcg@1"] >= base["ndcg@1"] - 0.01, (ltr, base)  # BM25 0.719
    assert ltr["ndcg@1"] >= floor["ndcg@1"] + 0.03, (ltr, floor)  # random 0.677


def test_match_features_and_group_statistics_carry_weight(homedepot):
    """The fusion issue's query-title match features and per-query group statistics on real data:
    trained on 3,000 train queries, the ranker stays at least at BM25's level and gives the match
    features a real share of its gain."""
    from semsearch.ranking import MATCH_FEATURES

    ds, corpus, test = homedepot
    train = EvalSet.judged(ds, "train")
    train = train.subset(sorted(train.queries)[:3000])
    ranker = create_model(
        "lambdamart",
        features=[{"name": "BM25", "model": "bm25", "params": {"k1": 1.2, "b": 0.25}}, "ulm"],
        pair_features=["query_words", "doc_words", "query_coverage", *MATCH_FEATURES],
        query_norm="zscore",
        group_stats=["rank", "max"],
    )
    ranker.index(corpus.ids, corpus.joined("title"))
    log = fit_ranker(ranker, train, EvalSet.judged(ds, "dev"))
    share = sum(v["gain"] for n, v in log["importance"].items() if n.split(" (")[0] in MATCH_FEATURES)
    assert share > 0.3, log["importance"]  # measured 0.91 (BM25 and ULM, their z-scores and ranks: the rest)
    bm25 = create_model("bm25", k1=1.2, b=0.25)
    bm25.index(corpus.ids, corpus.joined("title"))
    ltr, base = _ndcg(ranker, test), _ndcg(bm25, test)
    # measured 0.728 / 0.891 against BM25's 0.723 / 0.890
    assert ltr["ndcg@1"] >= base["ndcg@1"] - 0.01 and ltr["ndcg@10"] >= base["ndcg@10"] - 0.002, (ltr, base)


def test_knrm_learns_in_one_short_epoch(homedepot, one_torch_thread):
    ds, corpus, test = homedepot
    full = TrainingData.from_dataset(ds, "train")
    keep = set(sorted(full.queries)[:3000])
    data = TrainingData(
        full.queries,
        full.doc_ids,
        full.doc_texts,
        [p for p in full.positives if p[0] in keep],
        full.qrels,
        full.threshold,
    )
    model = create_model("knrm", dim=64)
    log = fit(model, data, progress=False, args=PairwiseArgs(epochs=1))
    assert log["epochs"][0]["loss"] < 1.0  # the hinge starts at the margin (1) for untrained scores
    model.index(corpus.ids, corpus.joined("title"))
    m = _ndcg(model, test)
    assert 0.685 <= m["ndcg@1"] <= 0.78, m  # random 0.677, BM25 0.719; measured 0.691 (dim 64, 1 epoch, 3,000 queries)


def test_trec_dl_cross_validated_ltr(shared_data):
    from semsearch.experiments import get_spec, run_experiment

    r = run_experiment(get_spec("bert-table4-ltr-trec-dl"), progress=False)
    assert r.ok, r.to_markdown()
    mean = {label: row.result.mean["ndcg@10"] for label, row in r.table.rows.items()}
    ltr = mean["LambdaMART (lexical features, 5-fold CV)"]
    assert ltr > mean["TF-IDF cosine (pool-excluded statistics)"] + 0.05  # learns from ~34 queries
    assert ltr < mean["TAS-B run as given"]  # lexical features alone stay far below a dense retriever
    log = r.training["LambdaMART (lexical features, 5-fold CV)"]
    assert len(log["folds"]) == 5 and sum(f["test_queries"] for f in log["folds"]) == 43
    assert "Feature importance" in r.to_markdown()


NESTED = """
name = "homedepot-dev-nested"
title = "LambdaMART by nested CV over the Home Depot dev queries"
source = "test"
dataset = "homedepot"
split = "dev"
candidates = "judged"
fields = "title"
metrics = ["ndcg@1", "ndcg@10"]
tune = "cv5"
baselines = ["BM25"]

[[models]]
label = "BM25"
model = "bm25"
params = { k1 = 1.2, b = 0.25 }

[[models]]
label = "TF-IDF"
model = "tfidf"

[[models]]
label = "LambdaMART boosted from BM25"
model = "lambdamart"
combine = ["BM25", "TF-IDF"]
params = { query_norm = "zscore", prior_features = ["BM25"], pair_features = [
    "query_words", "doc_words", "query_coverage"] }
train = { cv_folds = 5 }
"""


def test_nested_cv_ranker_on_dev(homedepot, tmp_path):
    """bert-ltr-selection's protocol on lexical features: every dev query is scored by a ranker
    that never saw it, whose trees an inner 5-fold CV picked; boosting from BM25 keeps its level."""
    from semsearch.experiments import load_spec, run_experiment

    p = tmp_path / "nested.toml"
    p.write_text(NESTED)
    r = run_experiment(load_spec(p), progress=False)
    log = r.training["LambdaMART boosted from BM25"]
    assert log["rounds_by"] == "mean of 5 CV folds, trees by inner 5-fold CV"
    assert sum(f["test_queries"] for f in log["folds"]) == len(homedepot[0].qrels("dev"))  # each scored once
    bm25 = r.table.rows["BM25"].result.mean
    ltr = r.table.rows["LambdaMART boosted from BM25"].result.mean
    assert ltr["ndcg@10"] >= bm25["ndcg@10"] - 0.005 and ltr["ndcg@1"] >= bm25["ndcg@1"] - 0.015, (ltr, bm25)
    assert ltr["ndcg@1"] > 0.68  # random order ~0.67 on dev
