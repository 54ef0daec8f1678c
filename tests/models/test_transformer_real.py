"""BERT(rep) on real Home Depot data: the off-the-shelf MiniLM ranks like the measured anchor, and
a brief fine-tune (hinge over graded labels: the paper's recipe and bert-homedepot-full's; ListNet
over the graded lists with BM25-mined hard negatives) does not break it. A fixed random 300 of
the 1,160 test queries keeps each test around a minute on a shared 2-core machine.

The graded cross-encoder's head starts random, and 80 or even 400 training queries leave it at
random order on held-out queries, so its held-out figures come from the specs. What a minute can
show on real titles and grades is that it learns: it fits 20 training queries' judged lists, and
a Margin-MSE student taught by it takes up its order of them."""

from __future__ import annotations

import numpy as np
import pytest

from semsearch.data import EvalSet, TrainingData, open_dataset
from semsearch.evaluation import evaluate
from semsearch.models import rank
from semsearch.plugins import create_model
from semsearch.training import fit, recipe
from semsearch.training.transformer import judged_examples

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def homedepot(shared_data, one_torch_thread):
    ds = open_dataset(shared_data / "homedepot")
    qrels = ds.qrels("test")
    qids = sorted(qrels)
    pick = sorted(np.random.default_rng(0).choice(len(qids), size=300, replace=False))
    sub = {qids[i]: qrels[qids[i]] for i in pick}
    return ds, sub


def _ndcg(model, ds, qrels):
    corpus, queries = ds.corpus(), ds.queries()
    model.index(corpus.ids, corpus.joined("title"))
    run = rank(model, {q: queries[q] for q in qrels}, {q: list(d) for q, d in qrels.items()})
    return evaluate(run, qrels, ["ndcg@1", "ndcg@10"]).mean


def test_off_the_shelf_minilm(homedepot):
    ds, qrels = homedepot
    m = _ndcg(create_model("bert-rep"), ds, qrels)
    rnd = _ndcg(create_model("random"), ds, qrels)
    # anchor on all 1,160 test queries: 0.717 (BM25 0.719, random order ~0.66-0.68)
    assert 0.68 <= m["ndcg@1"] <= 0.76, m
    assert m["ndcg@1"] > rnd["ndcg@1"] + 0.02 and m["ndcg@10"] > rnd["ndcg@10"] + 0.01, (m, rnd)


@pytest.mark.parametrize(
    "name, params, steps",
    [
        ("bert-rep", {"neg_global": 2}, 10),  # the paper's recipe: dot product, τ = 1, batch 8
        # bert-homedepot-full's recipe: cosine, τ = 0.1, a batch of 16 sharing its titles as negatives
        ("bert-rep", {"neg_global": 1, "normalize": True, "margin": 0.1, "share_negatives": True, "batch_size": 16}, 5),
        # issue 21's recipes on the real lists: ListNet over each query's graded list, with hard
        # negatives mined from BM25's top 30 over all 54,667 titles
        ("bert-rep", {"loss": "listnet", "neg_global": 1, "neg_hard": 2, "hard_model": "bm25", "batch_size": 16}, 5),
    ],
)
def test_brief_fine_tune_keeps_quality(homedepot, name, params, steps):
    ds, qrels = homedepot
    data = TrainingData.from_dataset(ds, "train", threshold=3, fields="title")
    kw, args = recipe(name, {"max_queries": 80, "neg_cluster": 0, "dev_queries": 100, **params})
    model = create_model(name, **kw)
    log = fit(model, data, EvalSet.judged(ds, "dev"), progress=False, args=args)
    assert log["queries"] == 80 and log["epochs"][0]["steps"] == steps
    if params.get("neg_hard"):  # mined over the whole collection: 2 per query beside 1 uniform draw
        assert log["hard_negatives_seconds"] > 0 and log["pairs"] >= 80 * 4, log
    assert log["best_dev"] > 0.85  # dev NDCG@10 (random order ~0.87 at @10 over all dev queries)
    m = _ndcg(model, ds, qrels)
    assert 0.68 <= m["ndcg@1"] <= 0.78, m


def test_graded_cross_encoder_and_margin_mse_student_learn_real_lists(homedepot, tmp_path):
    """Issue 21's graded cross-encoder (ListNet over each judged list, scored by expected gain; a
    faster head lr than the specs' 1e-3) fits 20 training queries' lists, and a cosine BERT(rep)
    taught its margins (Margin-MSE, the spec's lr and spread) ranks those lists closer to it.
    Measured on these 20 lists: the teacher 0.69 -> 0.94 NDCG@1, the student 0.57 -> 0.80 (its
    within-list spread before training 0.11)."""
    ds, _ = homedepot
    data = TrainingData.from_dataset(ds, "train", threshold=3, fields="title")
    corpus, queries, train = ds.corpus(), ds.queries(), ds.qrels("train")
    common = {"neg_global": 0, "neg_cluster": 0, "max_queries": 20, "seed": 0}
    kw, args = recipe(
        "bert-rel", {**common, "grades": [0, 1, 2, 3, 4], "loss": "listnet", "head_lr": 0.01, "lr": 5e-5, "epochs": 5}
    )
    lists = {
        e.query for e in judged_examples(data, np.random.default_rng(args.seed), args.max_queries, args.max_judged)
    }
    qrels = {q: train[q] for q in train if queries.get(q) in lists}
    assert len(qrels) == 20

    def ndcg1(model) -> float:
        model.index(corpus.ids, corpus.joined("title"))
        run = rank(model, {q: queries[q] for q in qrels}, {q: list(d) for q, d in qrels.items()})
        return evaluate(run, qrels, ["ndcg@1"]).mean["ndcg@1"]

    teacher = create_model("bert-rel", **kw)
    before = ndcg1(teacher)
    fit(teacher, data, None, progress=False, args=args)
    after = ndcg1(teacher)
    assert after >= 0.85 and after >= before + 0.15, (before, after)
    teacher.save(tmp_path / "teacher")

    kw, args = recipe(
        "bert-rep",
        {
            **common,
            "normalize": True,
            "loss": "margin_mse",
            "teacher": str(tmp_path / "teacher"),
            "lr": 3e-5,
            "batch_size": 8,
            "epochs": 4,
        },
    )
    student = create_model("bert-rep", **kw)
    s_before = ndcg1(student)
    log = fit(student, data, None, progress=False, args=args)
    s_after = ndcg1(student)
    assert s_after >= 0.7 and s_after >= s_before + 0.1, (s_before, s_after, log)
    assert 0.08 <= log["student_spread"] <= 0.4, log  # a cosine MiniLM: no mismatch with the spread 0.1
    epochs = [e["loss"] for e in log["epochs"]]
    assert epochs[-1] < epochs[0] / 2, epochs
