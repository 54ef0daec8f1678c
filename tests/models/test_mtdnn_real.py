"""MT-DNN on real data: the SGD query-domain tasks plus Home Depot ranking, and the SVM
baselines on CLINC150, with quality bounds from measured runs."""

from __future__ import annotations

import pytest

from semsearch.data import DomainTasks, EvalSet, TrainingData, open_dataset, open_domain_set
from semsearch.evaluation import auc, evaluate
from semsearch.models import rank
from semsearch.models.classifiers import svm_scores, word_ngram_features
from semsearch.plugins import create_model, load_model
from semsearch.training import fit
from semsearch.training.args import MTDNNArgs
from semsearch.training.mtdnn import classification_auc, domain_tasks

pytestmark = pytest.mark.integration


def test_svm_word_on_clinc150(shared_data):
    recs = open_domain_set(str(shared_data / "query-domains" / "clinc150.tsv"))
    tr = DomainTasks.from_records(recs, ["banking", "travel"], "train")
    te = DomainTasks.from_records(recs, ["banking", "travel"], "test")
    x, x_te = word_ngram_features(tr.texts, te.texts)
    for d in ("banking", "travel"):  # measured 0.99+: CLINC's labels describe each request
        assert auc(te.column(d), svm_scores(x, tr.column(d), x_te, grid=[0.1, 1.0]).scores) > 0.97


def test_mtdnn_learns_ranking_and_classification(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("SEMSEARCH_DATA", str(shared_data))
    ds = open_dataset("homedepot")
    m = create_model("mt-dnn")
    log = fit(
        m,
        TrainingData.from_dataset(ds, "train"),
        EvalSet.judged(ds, "dev"),
        progress=False,
        args=MTDNNArgs(negatives=50, epochs=2),
    )
    assert log["tasks"] == ["rank", "Restaurants", "Hotels", "Flights", "Events"]
    aucs = classification_auc(m, domain_tasks(m, "test"))
    # measured (20 epochs, early stopped): Restaurants 0.69, Flights 0.69, Events 0.78; SGD's
    # Hotels labels carry almost no signal in the opening turn (0.46-0.49 for every system)
    assert aucs["Events"] > 0.70 and aucs["Flights"] > 0.60 and aucs["Restaurants"] > 0.60, aucs
    m.save(tmp_path / "mt")
    m = load_model(tmp_path / "mt")
    test = EvalSet.judged(ds, "test")
    corpus = ds.corpus()
    m.index(corpus.ids, corpus.titles)
    ndcg = evaluate(rank(m, test.queries, test.candidates), test.qrels, ["ndcg@1"]).mean["ndcg@1"]
    assert 0.69 < ndcg < 0.78  # random order 0.677, BM25 0.719, MT-DNN (full training) 0.72
