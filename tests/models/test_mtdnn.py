"""MT-DNN: the network, Algorithm 1 training, the SVM baselines and the classification specs,
on tiny generated query-domain sets."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from semsearch.data import DataFormatError, DomainTasks, EvalSet, TrainingData, load_query_domains, open_dataset
from semsearch.evaluation import auc
from semsearch.experiments import SpecError, load_spec, run_experiment
from semsearch.experiments.classification import label_sample
from semsearch.models import rank
from semsearch.models.classifiers import letter_trigram_features, svm_scores, word_ngram_features
from semsearch.params import ParamError
from semsearch.plugins import create_model, load_model
from semsearch.text import TrigramHasher
from semsearch.training import fit, recipe
from semsearch.training.args import MTDNNArgs
from semsearch.training.mtdnn import classification_auc, train_mtdnn

WORDS = {
    "food": ["restaurant", "dinner", "eat", "lunch", "pizza", "table"],
    "hotel": ["hotel", "room", "stay", "night", "suite", "check"],
    "flight": ["flight", "plane", "airport", "fly", "ticket", "seat"],
}
FILLER = ["please", "find", "me", "a", "the", "want", "need", "book", "for", "today"]


def write_domains(path: Path, n: int = 240, seed: int = 3) -> Path:
    """An SGD-layout file: each text draws words from its domain(s), splits train/dev/test."""
    rnd = random.Random(seed)
    lines = ["split\tdialogue_id\tdomains\ttext"]
    names = list(WORDS)
    for i in range(n):
        doms = [names[i % 3]] + ([names[(i + 1) % 3]] if i % 7 == 0 else [])
        words = rnd.sample(FILLER, 3) + [rnd.choice(WORDS[d]) for d in doms for _ in range(2)]
        rnd.shuffle(words)
        split = ["train", "train", "train", "dev", "test"][i % 5]
        lines.append(f"{split}\td{i}\t{','.join(doms)}\t{' '.join(words)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture()
def domain_data(tiny_data):
    write_domains(tiny_data / "query-domains" / "toy.tsv")
    return tiny_data


def small_args(**kw):
    """An MT-DNN and its training arguments from one parameter vocabulary."""
    base = {
        "l2": 16,
        "out": 8,
        "domain_set": "toy",
        "domains": ["food", "hotel", "flight"],
        "batch_size": 32,
        "epochs": 6,
        "lr": 0.5,
        "negatives": 4,
    }
    model_kw, args = recipe("mt-dnn", {**base, **kw})
    return create_model("mt-dnn", **model_kw), args


def small(**kw):
    return small_args(**kw)[0]


# ------------------------------------------------------------------------------------ data
def test_domain_tasks_labels_and_errors(tmp_path):
    records = load_query_domains(write_domains(tmp_path / "d.tsv"))
    tasks = DomainTasks.from_records(records, ["food", "hotel"], "train")
    assert tasks.labels.shape == (len(tasks), 2) and set(np.unique(tasks.labels)) == {0, 1}
    assert (tasks.column("food") == tasks.labels[:, 0]).all()
    with pytest.raises(ValueError, match="unknown domain 'nightlife'"):
        DomainTasks.from_records(records, ["nightlife"], "train")
    with pytest.raises(ValueError, match="no records in split 'validation-x'"):
        DomainTasks.from_records(records, ["food"], "validation-x")
    with pytest.raises(ValueError, match="unknown domain"):
        tasks.column("flight")
    # a domain that occurs only in the training split has no positives in test
    p = tmp_path / "one.tsv"
    p.write_text(
        "split\tdomain\tintent\ttext\ntrain\tfood\tx\teat pizza\ntrain\thotel\ty\tbook room\n"
        "test\thotel\ty\tstay a night\ntest\thotel\ty\tsuite\n"
    )
    recs = load_query_domains(p)
    with pytest.raises(ValueError, match="domain 'food' has no positive examples in split 'test'"):
        DomainTasks.from_records(recs, ["food"], "test")
    with pytest.raises(ValueError, match="domain 'hotel' has no negative examples in split 'test'"):
        DomainTasks.from_records(recs, ["hotel"], "test")


def test_empty_utterance_and_empty_label_are_file_errors(tmp_path):
    p = tmp_path / "bad.tsv"
    p.write_text("split\tdialogue_id\tdomains\ttext\ntrain\td1\tHotels\t   \n")
    with pytest.raises(DataFormatError, match=r"bad.tsv:2: .*empty text"):
        load_query_domains(p)
    p.write_text("split\tdialogue_id\tdomains\ttext\ntrain\td1\tHotels,\tbook a room\n")
    with pytest.raises(DataFormatError, match=r"bad.tsv:2: .*empty label"):
        load_query_domains(p)
    p.write_text("split\tlabel\ttext\ntrain\tHotels\tbook a room\n")
    with pytest.raises(DataFormatError, match="unknown header"):
        load_query_domains(p)


# ------------------------------------------------------------------------------------ model
def test_network_shapes_variants_and_save_load(domain_data, tmp_path):
    for share in ("all", "query"):
        m = small(share=share)
        m.build(TrigramHasher.fit(["find a hotel room", "cheap pizza dinner", "flight ticket"]))
        probs = m.classify(["hotel room", "pizza"])
        assert probs.shape == (2, 3) and ((probs > 0) & (probs < 1)).all()
        assert m.semantic(["hotel room"]).shape == (1, 16)
        q = m.encode_queries(["hotel room"])
        assert q.shape == (1, 8) and np.allclose(np.linalg.norm(q, axis=1), 1, atol=1e-5)
        has_doc_tower = hasattr(m.net, "doc_tower")
        assert has_doc_tower == (share == "query")
        m.save(tmp_path / share)
        again = load_model(tmp_path / share)
        assert np.allclose(again.classify(["hotel room"]), m.classify(["hotel room"]))
        assert np.allclose(again.encode_documents(["pizza place"]), m.encode_documents(["pizza place"]))
    with pytest.raises(ValueError, match="empty query"):
        m.classify(["  "])


def test_bad_configurations(domain_data):
    with pytest.raises(ValueError, match="at least one task"):
        create_model("mt-dnn", domains=[], ranking=False)
    with pytest.raises(ValueError, match="'share' must be"):
        create_model("mt-dnn", share="docs")
    with pytest.raises(ValueError, match="'select' must be"):
        recipe("mt-dnn", {"select": "best"})
    with pytest.raises(ValueError, match="'rank' names the ranking task"):
        create_model("mt-dnn", domains=["rank"])
    with pytest.raises(ValueError, match="duplicate domains"):
        create_model("mt-dnn", domains=["a", "a"])
    m = small(ranking=False)
    m.build(TrigramHasher.fit(["a b c"]))
    with pytest.raises(ValueError, match="without the ranking task"):
        m.index(["d1"], ["some title"])
    frozen, args = small_args(ranking=False, freeze_l2=True)
    with pytest.raises(ValueError, match="freeze_l2 needs init_l2"):
        train_mtdnn(frozen, args=args, progress=False)
    with pytest.raises(ValueError, match="give ranking training data"):
        train_mtdnn(small(), args=MTDNNArgs(), progress=False)


# ------------------------------------------------------------------------------------ training
def test_algorithm1_trains_every_task_and_learns(domain_data):
    ds = open_dataset("tiny")
    data = TrainingData.from_dataset(ds, "train", threshold=2)
    dev = EvalSet.judged(ds, "dev")
    m, args = small_args(epochs=12, batch_size=16, neg_pool=32, patience=20)
    log = fit(m, data, dev, progress=False, args=args)
    assert log["tasks"] == ["rank", "food", "hotel", "flight"]
    first = log["epochs"][0]
    aucs_dev = [first[f"dev_auc_{d}"] for d in ("food", "hotel", "flight")]
    assert first["dev"] == pytest.approx(np.mean([first["dev_rank"], *aucs_dev]))  # select = "mean"
    for t in log["tasks"]:  # every task was picked, and its loss fell
        assert np.isfinite(first[f"loss_{t}"])
        assert min(e[f"loss_{t}"] for e in log["epochs"]) < first[f"loss_{t}"]
    from semsearch.training.mtdnn import domain_tasks

    aucs = classification_auc(m, domain_tasks(m, "test"))
    assert min(aucs.values()) > 0.8, aucs  # the domains' words separate them
    test = EvalSet.judged(ds, "train")  # the tiny test split is too small to tell; it learned its pairs
    c = ds.corpus()
    m.index(c.ids, c.titles)
    from semsearch.evaluation import evaluate

    run = rank(m, test.queries, test.candidates)
    c_rand = create_model("random")
    c_rand.index(c.ids, c.titles)
    rand = evaluate(rank(c_rand, test.queries, test.candidates), test.qrels, ["ndcg@10"]).mean["ndcg@10"]
    assert evaluate(run, test.qrels, ["ndcg@10"]).mean["ndcg@10"] > rand + 0.05


@pytest.mark.parametrize("select", ["rank", "classification"])
def test_selection_score(domain_data, select):
    ds = open_dataset("tiny")
    m, args = small_args(epochs=2, batch_size=16, neg_pool=32, select=select)
    e = fit(
        m, TrainingData.from_dataset(ds, "train", threshold=2), EvalSet.judged(ds, "dev"), progress=False, args=args
    )["epochs"][0]
    aucs = [e[f"dev_auc_{d}"] for d in ("food", "hotel", "flight")]
    assert e["dev"] == pytest.approx(e["dev_rank"] if select == "rank" else np.mean(aucs))


def test_single_task_dnn_and_frozen_shared_layer(domain_data):
    mt, args = small_args(ranking=False, domains=["hotel", "flight"])
    train_mtdnn(mt, args=args, progress=False)
    from semsearch.data import open_domain_set

    recs = open_domain_set("toy")
    tr = DomainTasks.from_records(recs, ["food"], "train")
    te = DomainTasks.from_records(recs, ["food"], "test")
    before = mt.net.shared.embed.weight.detach().clone()
    dnn2, args2 = small_args(ranking=False, domains=["food"], freeze_l2=True, epochs=10)
    train_mtdnn(dnn2, args=args2, tasks=tr, hasher=mt.hasher, init_l2=mt, progress=False)
    assert torch.equal(dnn2.net.shared.embed.weight, before)  # l2 stayed as MT-DNN trained it
    assert torch.equal(mt.net.shared.embed.weight, before)
    assert classification_auc(dnn2, te)["food"] > 0.7
    dnn1, args1 = small_args(ranking=False, domains=["food"], epochs=10)
    train_mtdnn(dnn1, args=args1, tasks=tr, hasher=mt.hasher, progress=False)
    assert not torch.equal(dnn1.net.shared.embed.weight, before)
    other = TrigramHasher.fit(["completely different words"])
    with pytest.raises(ValueError, match="same trigram vocabulary"):
        train_mtdnn(
            small(ranking=False, domains=["food"]), args=args2, tasks=tr, hasher=other, init_l2=mt, progress=False
        )
    with pytest.raises(ValueError, match="tasks are for domains"):
        train_mtdnn(small(ranking=False, domains=["hotel"]), args=args1, tasks=tr, progress=False)


def test_parameters_are_typed_and_checked(domain_data, tmp_path):
    with pytest.raises(ParamError, match="no parameter 'task_sampler'.*did you mean 'task_sampling'"):
        recipe("mt-dnn", {"task_sampler": "uniform"})
    with pytest.raises(ParamError, match="'domains' must be a list of strings"):
        create_model("mt-dnn", domains="food")
    with pytest.raises(ParamError, match="'l2' must be >= 1"):
        create_model("mt-dnn", l2=0)
    with pytest.raises(ParamError, match="'cls_lr' must be > 0"):
        MTDNNArgs(cls_lr=0.0)
    with pytest.raises(ParamError, match="'gamma' must be one number"):
        MTDNNArgs(gamma=[1.0, 10.0])
    with pytest.raises(ParamError, match="hard_negatives"):
        MTDNNArgs(hard_negatives=2)
    kw, args = recipe(
        "mt-dnn",
        {
            "l2": 16,
            "domains": ["food"],
            "ranking": False,
            "max_trigrams": 300,
            "freeze_l2": True,
            "cls_lr": 0.1,
            "select": "classification",
            "negatives": 50,
        },
    )
    assert kw == {"l2": 16, "domains": ["food"], "ranking": False, "max_trigrams": 300}
    assert isinstance(args, MTDNNArgs) and (args.freeze_l2, args.cls_lr, args.select, args.negatives) == (
        True,
        0.1,
        "classification",
        50,
    )
    # a model directory saved when the training settings were model parameters still loads
    m = small()
    m.build(TrigramHasher.fit(["find a hotel room", "cheap pizza dinner"]))
    m.save(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["params"].update(
        {
            "task_sampling": "uniform",
            "cls_lr": None,
            "freeze_l2": False,
            "select": "mean",
            "negatives": 4,
            "sampling": "random",
            "gamma": 10.0,
            "lr": 0.5,
            "seed": 0,
        }
    )
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    again = load_model(tmp_path / "m")
    assert again.params() == m.params() and np.allclose(again.classify(["hotel"]), m.classify(["hotel"]))


# ------------------------------------------------------------------------------------ SVMs
def test_svm_baselines_and_label_samples(tmp_path):
    recs = load_query_domains(write_domains(tmp_path / "d.tsv", n=300))
    tr = DomainTasks.from_records(recs, ["food"], "train")
    te = DomainTasks.from_records(recs, ["food"], "test")
    xw, xw_te = word_ngram_features(tr.texts, te.texts)
    assert xw.shape[1] > len(set(" ".join(tr.texts).split()))  # bigrams and trigrams too
    h = TrigramHasher.fit(tr.texts)
    xl, xl_te = letter_trigram_features(h, tr.texts, te.texts)
    for x, x_te in ((xw, xw_te), (xl, xl_te)):
        res = svm_scores(x, tr.column("food"), x_te, grid=[0.1, 1.0])
        assert auc(te.column("food"), res.scores) > 0.9 and set(res.cv_auc) == {0.1, 1.0}
    y = tr.column("food")
    rows = label_sample(y, 0.001, np.random.default_rng(0))
    assert len(rows) == 2 and set(y[rows]) == {0, 1}  # at least one of each class
    res = svm_scores(xw[rows], y[rows], xw_te)  # one example per class: no CV, C = 1
    assert res.c == 1.0 and res.cv_auc == {}
    assert len(label_sample(y, 1.0, np.random.default_rng(0))) == len(y)
    with pytest.raises(ValueError, match="positive and negative"):
        svm_scores(xw[:5], np.zeros(5, dtype=int), xw_te)


# ------------------------------------------------------------------------------------ specs
SPEC = """
name = "toy-table2"
kind = "{kind}"
title = "toy"
source = "test"
domain_set = "toy"
domains = ["food", "hotel", "flight"]
mtdnn = {{ l2 = 16, out = 8, batch_size = 32, epochs = 4 }}
dnn = {{ l2 = 16, out = 8, batch_size = 32, epochs = 4 }}
svm_c = [0.1, 1.0]
fractions = [0.05, 1.0]
seeds = 2
dnn_steps = 20
{extra}
"""


def test_classification_specs_run_end_to_end(domain_data, tmp_path):
    p = tmp_path / "t2.toml"
    p.write_text(SPEC.format(kind="classification", extra='[expect]\n"MT-DNN" = { mean = [0.8, 1.0] }\n'))
    res = run_experiment(load_spec(p), progress=False, model_dir=tmp_path / "models")
    assert set(res.auc) == {"SVM-Word", "SVM-Letter", "DNN", "MT-DNN"}
    assert all(0.5 < row["mean"] <= 1 for row in res.auc.values()), res.auc
    assert res.ok and res.details["compactness"]["mtdnn_bytes"] > 0
    md = res.write(tmp_path / "out").read_text()
    assert "| MT-DNN |" in md and "Compactness" in md
    again = run_experiment(load_spec(p), progress=False, model_dir=tmp_path / "models")  # cached MT-DNN
    assert again.auc["MT-DNN"] == res.auc["MT-DNN"]

    p.write_text(SPEC.format(kind="adaptation", extra=""))
    res = run_experiment(load_spec(p), progress=False, model_dir=tmp_path / "models")
    assert set(res.figures) == {"figure4", "figure5"}
    assert set(res.figures["figure5"]["food"]) == {"DNN1", "DNN2", "SVM"}
    assert all(len(v) == 2 for v in res.figures["figure4"]["hotel"].values())
    res.write(tmp_path / "out")
    png = (tmp_path / "out" / "toy-table2-figure4.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_classification_spec_errors(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(SPEC.format(kind="regression", extra=""))
    with pytest.raises(SpecError, match="kind must be"):
        load_spec(p)
    p.write_text(SPEC.format(kind="classification", extra='[paper]\n"SVM-RBF" = { food = 90.0 }\n'))
    with pytest.raises(SpecError, match="unknown system 'SVM-RBF'"):
        load_spec(p)
    p.write_text(SPEC.format(kind="classification", extra='[paper]\n"DNN" = { nightlife = 90.0 }\n'))
    with pytest.raises(SpecError, match="nightlife"):
        load_spec(p)
    p.write_text(SPEC.format(kind="adaptation", extra="").replace("[0.05, 1.0]", "[0.0, 1.0]"))
    with pytest.raises(SpecError, match="fractions"):
        load_spec(p)


# ------------------------------------------------------------------------------------ CLI
def test_cli_train_and_classify(domain_data, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from semsearch.cli import app

    monkeypatch.delenv("SEMSEARCH_PROGRESS", raising=False)  # the epoch lines a log shows carry each task's loss
    runner = CliRunner()
    out = tmp_path / "mt"
    params = [
        "--param",
        "l2=16",
        "--param",
        "out=8",
        "--param",
        'domain_set="toy"',
        "--param",
        'domains=["food","hotel","flight"]',
        "--param",
        "batch_size=16",
        "--param",
        "epochs=3",
    ]
    r = runner.invoke(app, ["train", "mt-dnn", "--data", "tiny", "--out", str(out), "--threshold", "2", *params])
    assert r.exit_code == 0, r.output
    assert "loss_rank" in r.output and (out / "config.json").is_file()
    r = runner.invoke(app, ["classify", "--model", str(out), "--json", "book a hotel room", "pizza dinner"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [set(x) for x in rows] == [{"query", "food", "hotel", "flight"}] * 2
    r = runner.invoke(app, ["classify", "--model", str(out), " "])
    assert r.exit_code == 2 and "empty query" in r.output
    r = runner.invoke(
        app,
        [
            "train",
            "mt-dnn",
            "--data",
            "tiny",
            "--out",
            str(tmp_path / "x"),
            "--checkpoint",
            str(tmp_path / "ck"),
            *params,
        ],
    )
    assert r.exit_code == 2 and "checkpoints" in r.output
