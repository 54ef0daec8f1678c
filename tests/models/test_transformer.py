"""BERT(rep) / BERT(rel) on a tiny randomly initialised BERT (2 layers, hidden 32) with the real
MiniLM tokenizer: shapes, pooling, scoring, persistence, bad input, training, negative sampling."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from semsearch.data import EvalSet, TrainingData
from semsearch.models import ModelDirError, rank
from semsearch.models.transformer import BiEncoder, CrossEncoder
from semsearch.params import ParamError
from semsearch.plugins import create_model, load_model
from semsearch.training import fit, recipe
from semsearch.training.args import BiEncoderArgs, CrossEncoderArgs
from semsearch.training.losses import (
    LIST_LOSSES,
    grade_cross_entropy,
    grade_targets,
    graded_hinge_loss,
    graded_list_loss,
    listnet_loss,
    margin_mse_loss,
)
from semsearch.training.negatives import uniform_negatives
from semsearch.training.transformer import (
    Clusters,
    Example,
    _batch_loss,
    _param_groups,
    _shared_labels,
    add_hard_negatives,
    add_negatives,
    judged_examples,
    list_spread,
    pooled_spread,
    with_teacher,
)

COLOURS = ["red", "blue", "green", "yellow", "black", "white"]
THINGS = ["chair", "table", "lamp", "door", "sofa", "rug"]


def _make(name: str, **raw):  # type: ignore[no-untyped-def]
    """A model and its training arguments from one parameter vocabulary."""
    kw, args = recipe(name, raw)
    return create_model(name, **kw), args


def _data() -> TrainingData:
    """Queries 'colour thing' with graded products: 3 same colour and thing, 1 same thing, 0 else."""
    docs = [f"{c} {t} deluxe" for c in COLOURS for t in THINGS]
    ids = [f"d{i}" for i in range(len(docs))]
    queries, qrels, positives = {}, {}, []
    for i, (c, t) in enumerate(zip(COLOURS * 2, THINGS + THINGS[::-1])):
        q = f"q{i}"
        queries[q] = f"{c} {t}"
        qrels[q] = {}
        for d, text in zip(ids, docs):
            g = 3 if text.startswith(f"{c} {t}") else 1 if t in text else 0 if c in text else None
            if g is not None:
                qrels[q][d] = g
                if g == 3:
                    positives.append((q, d))
    return TrainingData(queries, ids, docs, positives, qrels, threshold=3)


def test_bi_encoder_shapes_pooling_and_dot_product(tiny_bert):
    texts = ["red chair", "a much longer blue table with four legs", ""]
    vecs = {}
    for pooling in ["mean", "cls", "layer:1", "layer:2", "attention"]:
        m = create_model("bert-rep", base=tiny_bert, pooling=pooling)
        v = m.encode_documents(texts)
        assert v.shape == (3, 32) and v.dtype == np.float32 and m.dim == 32
        vecs[pooling] = v
    assert not np.allclose(vecs["mean"], vecs["cls"]) and not np.allclose(vecs["layer:1"], vecs["layer:2"])
    assert np.allclose(vecs["mean"], vecs["layer:2"], atol=1e-5)  # the last of 2 layers
    # attention starts as the plain average of the layers' outputs, then mean over tokens
    assert np.allclose(vecs["attention"], (vecs["layer:1"] + vecs["layer:2"]) / 2, atol=1e-5)
    # batching and length sorting do not change a text's vector
    m = create_model("bert-rep", base=tiny_bert, batch_encode=1)
    assert np.allclose(m.encode_documents(texts), vecs["mean"], atol=1e-5)
    # scoring is the (unnormalised) dot product; normalize=True gives unit vectors
    m.index(["a", "b", "c"], texts)
    q = m.encode_queries(["red chair"])[0]
    (s,) = m.score(["red chair"], [["c", "a"]])
    assert np.allclose(s, [vecs["mean"][2] @ q, vecs["mean"][0] @ q], rtol=1e-4)
    assert not np.allclose(np.linalg.norm(vecs["mean"], axis=1), 1.0)
    unit = create_model("bert-rep", base=tiny_bert, normalize=True).encode_documents(texts)
    assert np.allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-5)
    hits = m.retrieve(["red chair"], 2)[0]
    assert [h[0] for h in hits] == [
        d for d, _ in sorted(zip("abc", m.score(["red chair"], [["a", "b", "c"]])[0]), key=lambda x: -x[1])
    ][:2]


def test_bad_input(tiny_bert, tmp_path):
    m = create_model("bert-rep", base=tiny_bert)
    with pytest.raises(ValueError, match="empty"):
        m.encode_queries(["red", "  "])
    with pytest.raises(ValueError, match="pooling"):
        create_model("bert-rep", base=tiny_bert, pooling="layer:3")
    with pytest.raises(ValueError, match="no parameter 'layers'"):
        create_model("bert-rep", base=tiny_bert, layers=3)
    c = create_model("bert-rel", base=tiny_bert)
    c.index(["a"], ["red chair"])
    with pytest.raises(ValueError, match="empty"):
        c.score([""], [["a"]])
    with pytest.raises(ValueError, match="not in the indexed"):
        c.score(["red"], [["zzz"]])


def test_truncation_of_long_texts(tiny_bert):
    """Texts longer than the limits are cut (the model has only 64 positions)."""
    m = create_model("bert-rep", base=tiny_bert, max_doc_length=8)
    long = "red chair " * 200
    v = m.encode_documents([long, "red chair red"])
    assert v.shape == (2, 32) and np.isfinite(v).all()
    assert np.allclose(v[0], m.encode_documents(["red chair " * 10])[0], atol=1e-5)  # same first 8 pieces
    c = create_model("bert-rel", base=tiny_bert, max_length=16)
    c.index(["a"], [long])
    assert np.isfinite(c.score([long], [["a"]])[0]).all()


def test_save_load_and_sentence_transformers(tiny_bert, tmp_path):
    from sentence_transformers import SentenceTransformer

    texts = ["red chair", "blue table lamp"]
    for pooling in ["mean", "cls", "attention"]:
        m = create_model("bert-rep", base=tiny_bert, pooling=pooling)
        if pooling == "attention":
            with torch.no_grad():
                m.net.pooler.attention.weight.normal_()
        m.save(tmp_path / pooling)
        again = load_model(tmp_path / pooling)
        assert isinstance(again, BiEncoder) and again.params()["pooling"] == pooling
        assert np.allclose(again.encode_documents(texts), m.encode_documents(texts), atol=1e-6)
        if pooling != "attention":
            st = SentenceTransformer(str(tmp_path / pooling), device="cpu")
            assert np.allclose(st.encode(texts), m.encode_documents(texts), atol=1e-5)
        else:
            assert not (tmp_path / pooling / "modules.json").exists()
    c = create_model("bert-rel", base=tiny_bert)
    c.init_head(3)
    c.save(tmp_path / "rel")
    c2 = load_model(tmp_path / "rel")
    for x in (c, c2):
        x.index(["a", "b"], texts)
    assert isinstance(c2, CrossEncoder)
    assert np.allclose(c.score(["red"], [["a", "b"]])[0], c2.score(["red"], [["a", "b"]])[0], atol=1e-6)


def test_corrupt_or_other_model_dirs(tiny_bert, tmp_path):
    m = create_model("bert-rep", base=tiny_bert)
    m.save(tmp_path / "rep")
    with pytest.raises(ModelDirError, match="not 'bert-rel'"):
        CrossEncoder.load(tmp_path / "rep")
    (tmp_path / "rep" / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ModelDirError, match="corrupt"):
        load_model(tmp_path / "rep")
    m.save(tmp_path / "rep2")
    (tmp_path / "rep2" / "model.safetensors").unlink()
    with pytest.raises(ModelDirError, match="corrupt"):
        load_model(tmp_path / "rep2")
    (tmp_path / "rep3").mkdir()
    (tmp_path / "rep3" / "config.json").write_text("{oops")
    with pytest.raises(ModelDirError):
        load_model(tmp_path / "rep3")
    m.save(tmp_path / "rep4")
    cfg = json.loads((tmp_path / "rep4" / "config.json").read_text())
    del cfg["semsearch"]
    (tmp_path / "rep4" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelDirError, match="corrupt"):
        load_model(tmp_path / "rep4")


def test_graded_hinge_loss():
    s = torch.tensor([[2.0, 1.0, 0.0], [0.0, 5.0, 0.0]])
    y = torch.tensor([[2.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    valid = torch.tensor([[True, True, True], [True, False, True]])
    # query 1: pairs (0,1): max(0, 1 - 1*1) = 0; (0,2): max(0, 1 - 2*2) = 0; (1,2): 1 - 1 = 0
    # query 2: only (0,2) is valid with y0 > y2: max(0, 1 - 1*0) = 1 -> mean over queries 0.5
    assert graded_hinge_loss(s, y, valid, 1.0).item() == pytest.approx(0.5)
    assert graded_hinge_loss(s, torch.ones_like(y), valid, 1.0).item() == 0.0  # no graded pair


def test_listnet_loss():
    s = torch.tensor([[2.0, 1.0, 0.0], [0.0, 5.0, 3.0], [1.0, 2.0, 0.0]])
    y = torch.tensor([[2.0, 1.0, 0.0], [1.0, 9.0, 0.0], [1.0, 1.0, 1.0]])
    valid = torch.tensor([[True, True, True], [True, False, True], [True, True, False]])

    def by_hand(scores: list[float], grades: list[float]) -> float:
        p_s, p_y = np.exp(scores) / np.exp(scores).sum(), np.exp(grades) / np.exp(grades).sum()
        return float(-(p_y * np.log(p_s)).sum())

    # query 2 only over its valid slots 0 and 2 (slot 1's score 5 and grade 9 play no part);
    # query 3 has one grade: left out of the mean, as the hinge leaves it out
    want = (by_hand([2, 1, 0], [2, 1, 0]) + by_hand([0, 3], [1, 0])) / 2
    assert listnet_loss(s, y, valid).item() == pytest.approx(want, rel=1e-6)
    assert listnet_loss(s, y, valid, scale=0.25).item() == pytest.approx(want * 2 * 0.25, rel=1e-6)
    assert listnet_loss(s, torch.ones_like(y), valid).item() == 0.0  # no query with two grades
    # scores ordered as the grades beat the reverse order; the gradient raises the better graded
    assert listnet_loss(
        torch.tensor([[3.0, 0.0]]), torch.tensor([[2.0, 0.0]]), torch.ones(1, 2, dtype=torch.bool)
    ) < listnet_loss(torch.tensor([[0.0, 3.0]]), torch.tensor([[2.0, 0.0]]), torch.ones(1, 2, dtype=torch.bool))
    x = torch.zeros(1, 3, requires_grad=True)
    listnet_loss(x, torch.tensor([[3.0, 1.0, 0.0]]), torch.ones(1, 3, dtype=torch.bool)).backward()
    assert x.grad[0, 0] < 0 < x.grad[0, 2]  # descent raises the grade-3 score, lowers the grade-0 one
    assert graded_list_loss("hinge", s, y, valid, 1.0).item() == graded_hinge_loss(s, y, valid, 1.0).item()
    with pytest.raises(ValueError, match="unknown list loss 'softmax'"):
        graded_list_loss("softmax", s, y, valid, 1.0)


@pytest.mark.parametrize(
    "name,loss", [("bert-rep", "hinge"), ("bert-rel", "hinge"), ("bert-rel", "listnet"), ("bert-rep", "listnet")]
)
def test_training_lowers_the_loss(tiny_bert, name, loss):
    data = _data()
    m, args = _make(name, base=tiny_bert, neg_global=2, neg_cluster=0, lr=1e-3, batch_size=4, loss=loss)
    examples = add_negatives(
        judged_examples(data, np.random.default_rng(0), None, 30),
        np.random.default_rng(0),
        len(data.doc_ids),
        2,
        0,
        None,
    )
    m.net.eval()  # no dropout, so the loss compares like for like
    before = _batch_loss(m, examples, data.doc_texts, 1.0, loss=loss).item()
    log = fit(m, data, None, progress=False, args=args)
    after = _batch_loss(m, examples, data.doc_texts, 1.0, loss=loss).item()
    assert log["epochs"][0]["steps"] == 3 and log["queries"] == 12
    assert after < before


def test_margin_mse_loss():
    s = torch.tensor([[2.0, 1.0, 0.0], [0.0, 5.0, 3.0], [1.0, 2.0, 0.0]])
    t = torch.tensor([[1.0, 1.0, -1.0], [4.0, 9.0, 1.0], [7.0, 7.0, 7.0]])
    valid = torch.tensor([[True, True, True], [True, False, True], [True, True, False]])

    def by_hand(scores: list[float], teacher: list[float]) -> float:  # the mean over pairs i < j
        n = len(scores)
        pairs = [((scores[i] - scores[j]) - (teacher[i] - teacher[j])) ** 2 for i in range(n) for j in range(i + 1, n)]
        return sum(pairs) / len(pairs)

    # query 2 over its valid slots 0 and 2 only; query 3's teacher scores are all equal: left out
    want = (by_hand([2, 1, 0], [1, 1, -1]) + by_hand([0, 3], [4, 1])) / 2
    assert margin_mse_loss(s, t, valid).item() == pytest.approx(want, rel=1e-6)
    assert margin_mse_loss(s, t, valid, scale=0.25).item() == pytest.approx(want * 2 * 0.25, rel=1e-6)
    assert graded_list_loss("margin_mse", s, t, valid, 1.0).item() == margin_mse_loss(s, t, valid).item()
    # the margins count, not the offset or the student's level: a shifted teacher costs nothing
    assert margin_mse_loss(t[:2] - 3.0, t[:2], valid[:2]).item() == pytest.approx(0.0, abs=1e-6)
    x = torch.zeros(1, 2, requires_grad=True)
    margin_mse_loss(x, torch.tensor([[1.0, 0.0]]), torch.ones(1, 2, dtype=torch.bool)).backward()
    assert x.grad[0, 0] < 0 < x.grad[0, 1]  # descent opens the teacher's margin
    assert LIST_LOSSES == ("hinge", "listnet", "margin_mse")


def test_hard_negatives_come_from_the_first_models_top(tiny_bert, tmp_path):
    data = _data()
    examples = judged_examples(data, np.random.default_rng(0), None, 30)
    # BM25's top 3 for "red chair" are red or chair titles; a query's judged titles are never drawn
    hard = add_hard_negatives(examples, data, np.random.default_rng(1), 2, "bm25", 3)
    from semsearch.models.lexical import BM25

    bm25 = BM25()
    bm25.index(data.doc_ids, data.doc_texts)
    idx = data.doc_index
    for ex, h in zip(examples, hard):
        new = h.docs[len(ex.docs) :]
        top = {idx[d] for d, _ in bm25.retrieve([ex.query], 3)[0]}
        assert set(new.tolist()) <= top - ex.judged and len(set(new.tolist())) == len(new)
        assert h.grades[len(ex.docs) :].tolist() == [0.0] * len(new)
    # the judged lists here hold every title sharing a word with the query, so BM25's top is judged
    assert sum(len(h.docs) - len(e.docs) for e, h in zip(examples, hard)) == 0
    unjudged = TrainingData(
        data.queries,
        data.doc_ids,
        data.doc_texts,
        data.positives,
        {q: {d: g for d, g in j.items() if g >= 1} for q, j in data.qrels.items()},
        threshold=3,
    )
    ex2 = judged_examples(unjudged, np.random.default_rng(0), None, 30)
    hard2 = add_hard_negatives(ex2, unjudged, np.random.default_rng(1), 2, "bm25", 10)
    assert all(len(h.docs) == len(e.docs) + 2 for e, h in zip(ex2, hard2))
    # a saved bi-encoder can be the first model too: its own top 10, none judged
    first = create_model("bert-rep", base=tiny_bert)
    first.save(tmp_path / "first")
    first = load_model(tmp_path / "first")
    first.index(unjudged.doc_ids, unjudged.doc_texts)
    hard3 = add_hard_negatives(ex2, unjudged, np.random.default_rng(1), 2, str(tmp_path / "first"), 10)
    for ex, h in zip(ex2, hard3):
        top = {idx[d] for d, _ in first.retrieve([ex.query], 10)[0]}
        assert set(h.docs[len(ex.docs) :].tolist()) <= top - ex.judged and len(h.docs) == len(ex.docs) + 2


def test_teacher_scores_are_rescaled_to_the_spread(tiny_bert, tmp_path, monkeypatch):
    data = _data()
    teacher = create_model("bert-rel", base=tiny_bert)
    teacher.init_head(0)
    teacher.save(tmp_path / "teacher")
    teacher = load_model(tmp_path / "teacher")
    examples = judged_examples(data, np.random.default_rng(0), None, 30)
    taught, (factor,) = with_teacher(examples, teacher, data.doc_texts, 0.1)
    raw = [teacher.score_pairs([e.query] * len(e.docs), [data.doc_texts[r] for r in e.docs]) for e in examples]
    for e, r in zip(taught, raw):
        assert np.allclose(e.teacher, r * factor, rtol=1e-5, atol=1e-7)
    assert pooled_spread(e.teacher for e in taught) == pytest.approx(0.1, rel=1e-4)
    dev = np.concatenate([e.teacher - e.teacher.mean() for e in taught])
    dof = sum(len(e.docs) - 1 for e in taught)
    assert np.sqrt((dev**2).sum() / dof) == pytest.approx(0.1, rel=1e-4)
    # an ensemble: each teacher divided by its own spread, averaged, the mean rescaled to the spread,
    # so a teacher whose scores are 10x larger does not outweigh the other
    other = create_model("bert-rel", base=tiny_bert)
    other.init_head(1)
    other.save(tmp_path / "other")
    other = load_model(tmp_path / "other")
    quiet = [other.score_pairs([e.query] * len(e.docs), [data.doc_texts[r] for r in e.docs]) for e in examples]
    ens, factors = with_teacher(examples, [teacher, other], data.doc_texts, 0.1)
    mixed = [a / pooled_spread(raw) + b / pooled_spread(quiet) for a, b in zip(raw, quiet)]
    for e, m, a, b in zip(ens, mixed, raw, quiet):
        assert np.allclose(e.teacher, m * 0.1 / pooled_spread(mixed), rtol=1e-4, atol=1e-6)
        assert np.allclose(e.teacher, factors[0] * a + factors[1] * b, rtol=1e-5, atol=1e-7)
    assert pooled_spread(e.teacher for e in ens) == pytest.approx(0.1, rel=1e-4)
    own = teacher.score_pairs  # the first teacher 10x louder: the same taught scores, its factor / 10
    monkeypatch.setattr(teacher, "score_pairs", lambda q, d: own(q, d) * 10)
    ens10, factors10 = with_teacher(examples, [teacher, other], data.doc_texts, 0.1)
    assert factors10 == pytest.approx([factors[0] / 10, factors[1]], rel=1e-5)
    for a, b in zip(ens, ens10):
        assert np.allclose(a.teacher, b.teacher, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["bert-rep", "bert-rel"])
def test_margin_mse_distillation_learns_the_teachers_margins(tiny_bert, tmp_path, name):
    data = _data()
    teacher, targs = _make("bert-rel", base=tiny_bert, neg_global=0, neg_cluster=0, lr=1e-3, batch_size=4, epochs=3)
    fit(teacher, data, None, progress=False, args=targs)
    teacher.save(tmp_path / "teacher")
    m, args = _make(
        name,
        base=tiny_bert,
        neg_global=1,
        neg_cluster=0,
        neg_hard=1,
        hard_depth=10,
        lr=1e-3,
        batch_size=4,
        loss="margin_mse",
        teacher=str(tmp_path / "teacher"),
        teacher_spread=0.5,
    )
    examples = add_negatives(
        judged_examples(data, np.random.default_rng(0), None, 30),
        np.random.default_rng(0),
        len(data.doc_ids),
        1,
        0,
        None,
    )
    examples, _ = with_teacher(examples, load_model(tmp_path / "teacher"), data.doc_texts, 0.5)
    m.net.eval()
    before = _batch_loss(m, examples, data.doc_texts, 1.0, loss="margin_mse").item()
    log = fit(m, data, None, progress=False, args=args)
    after = _batch_loss(m, examples, data.doc_texts, 1.0, loss="margin_mse").item()
    assert after < before
    assert log["teacher_factors"][0] > 0 and log["teacher_seconds"] >= 0 and "hard_negatives_seconds" in log
    assert log["pairs"] > log["judged_pairs"]  # the global and hard negatives were added


@pytest.mark.parametrize("normalize", [False, True])
def test_margin_mse_measures_the_students_spread_and_notes_a_mismatch(
    tiny_bert, tmp_path, monkeypatch, capsys, normalize
):
    """The student's within-list spread is its own scores' (as ``score`` ranks with), pooled like the
    teacher's; a teacher_spread more than 4x off it is noted, naming the parameter and the fix."""
    data = _data()
    teacher = create_model("bert-rel", base=tiny_bert)
    teacher.init_head(0)
    teacher.save(tmp_path / "teacher")
    student = create_model("bert-rep", base=tiny_bert, normalize=normalize)
    examples = add_negatives(
        judged_examples(data, np.random.default_rng(0), None, 30),
        np.random.default_rng(0),
        len(data.doc_ids),
        2,
        0,
        None,
    )
    student.index(data.doc_ids, data.doc_texts)
    own = student.score([e.query for e in examples], [[data.doc_ids[r] for r in e.docs] for e in examples])
    dev = np.concatenate([s - s.mean() for s in own])
    want = np.sqrt((dev**2).sum() / sum(len(e.docs) - 1 for e in examples))
    for mode in (True, False):  # measured in eval mode (no dropout), the net's own mode left as it was
        student.net.train(mode)
        assert list_spread(student, examples, data.doc_texts, batch=3) == pytest.approx(want, rel=1e-4)
        assert student.net.training is mode
    monkeypatch.setenv("SEMSEARCH_PROGRESS", "1")

    def train(spread: float) -> tuple[float, str]:
        m, args = _make(
            "bert-rep",
            base=tiny_bert,
            normalize=normalize,
            neg_global=2,
            neg_cluster=0,
            epochs=1,
            batch_size=4,
            loss="margin_mse",
            teacher=str(tmp_path / "teacher"),
            teacher_spread=spread,
        )
        capsys.readouterr()
        return fit(m, data, None, progress=False, args=args)["student_spread"], capsys.readouterr().err

    sd, err = train(want)  # the training's own lists (their negatives drawn by its seed): about the same spread
    assert sd == pytest.approx(want, rel=0.25) and "teacher_spread = " not in err
    for spread, noted in ((sd * 10, True), (sd / 10, True), (sd * 3, False), (sd / 3, False)):
        got, err = train(spread)
        assert got == sd  # measured before training, whatever the teacher's scale
        assert ("teacher_spread = " in err) is noted, (spread, sd, err)
        if noted:
            kind = "cosine" if normalize else "dot products"
            assert f"({kind})" in err and f"A teacher_spread near {sd:.2g} matches the student" in err
            assert ("shrink" if spread < sd else "stretch") in err


def test_margin_mse_parameters_are_checked(tiny_bert, tmp_path):
    with pytest.raises(ValueError, match=r"'teacher' .* needed by, and only by, .*'loss' = 'margin_mse'"):
        recipe("bert-rep", {"base": tiny_bert, "loss": "margin_mse"})
    with pytest.raises(ValueError, match=r"'teacher' .* needed by, and only by"):
        recipe("bert-rep", {"base": tiny_bert, "teacher": "somewhere"})
    with pytest.raises(ValueError, match=r"'share_negatives'.*cannot share them"):
        recipe("bert-rep", {"base": tiny_bert, "loss": "margin_mse", "teacher": "t", "share_negatives": True})
    with pytest.raises(ValueError, match=r"'neg_hard' = 40 cannot exceed .*'hard_depth' = 30"):
        recipe("bert-rel", {"base": tiny_bert, "neg_hard": 40})
    with pytest.raises(ValueError, match=r"teacher_spread"):
        recipe("bert-rel", {"base": tiny_bert, "loss": "margin_mse", "teacher": "t", "teacher_spread": 0})
    # a teacher that is not a saved cross-encoder is refused by its directory, before any training
    m, args = _make(
        "bert-rep", base=tiny_bert, neg_global=0, neg_cluster=0, loss="margin_mse", teacher=str(tmp_path / "nothing")
    )
    with pytest.raises(ModelDirError, match="nothing"):
        fit(m, _data(), None, progress=False, args=args)


def test_grade_targets_split_between_levels():
    levels = torch.tensor([0.0, 1.0, 2.0, 3.0])
    t = grade_targets(torch.tensor([[0.0, 2.0 + 1 / 3, 3.0], [1.5, 1.0, 0.0]]), levels)
    assert t.shape == (2, 3, 4) and torch.allclose(t.sum(-1), torch.ones(2, 3))
    assert torch.allclose(t[0, 1], torch.tensor([0.0, 0.0, 2 / 3, 1 / 3]))
    assert torch.allclose(t[0, 0], torch.tensor([1.0, 0, 0, 0])) and torch.allclose(
        t[0, 2], torch.tensor([0.0, 0, 0, 1])
    )
    assert torch.allclose(t[1, 0], torch.tensor([0.0, 0.5, 0.5, 0.0]))
    assert torch.allclose((t * levels).sum(-1), torch.tensor([[0.0, 2 + 1 / 3, 3.0], [1.5, 1.0, 0.0]]))  # mean = grade


def test_grade_cross_entropy_against_a_hand_computation():
    levels = torch.tensor([1.0, 2.0, 3.0])
    logits = torch.tensor(
        [[[2.0, 0.0, -1.0], [0.0, 1.0, 0.0], [5.0, 5.0, 5.0]], [[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [9.0, 9.0, 9.0]]]
    )
    y = torch.tensor([[1.0, 2.5, 0.0], [3.0, 3.0, 0.0]])  # query 1: one grade only (left out)
    valid = torch.tensor([[True, True, False], [True, True, False]])
    lp = torch.log_softmax(logits, -1)
    want = -(lp[0, 0, 0] + 0.5 * lp[0, 1, 1] + 0.5 * lp[0, 1, 2]) / 2
    assert torch.isclose(grade_cross_entropy(logits, y, valid, levels), want)
    assert torch.isclose(grade_cross_entropy(logits, y, valid, levels, scale=0.25), want * 0.25)


def test_graded_head_scores_by_expected_gain(tiny_bert, tmp_path):
    with pytest.raises(ParamError, match="grades.*increasing"):
        create_model("bert-rel", base=tiny_bert, grades=[2, 1])
    with pytest.raises(ParamError, match="grades"):
        create_model("bert-rel", base=tiny_bert, grades=[1])
    texts = ["red chair", "blue table lamp", "green sofa"]
    for gain, gains in (("exp", torch.tensor([0.0, 1.0, 3.0, 7.0])), ("linear", torch.tensor([0.0, 1.0, 2.0, 3.0]))):
        c = create_model("bert-rel", base=tiny_bert, grades=[0, 1, 2, 3], gain=gain)
        assert isinstance(c, CrossEncoder) and c.graded and c.net.head.out_features == 4
        with torch.no_grad():
            c.net.head.weight.normal_(0, 1.0, generator=torch.Generator().manual_seed(1))
        c.index(["a", "b", "c"], texts)
        got = c.score(["red chair"], [["a", "b", "c"]])[0]
        c.net.eval()
        with torch.no_grad():
            head = c.head_output(c._tokens(["red chair"] * 3, texts, 64))
        assert np.allclose(got, (torch.softmax(head, -1) @ gains).numpy(), atol=1e-5)
        assert ((got >= 0) & (got <= gains[-1].item())).all()
        c.save(tmp_path / gain)
        again = load_model(tmp_path / gain)
        assert again.params()["grades"] == [0, 1, 2, 3] and again.params()["gain"] == gain
        again.index(["a", "b", "c"], texts)
        assert np.allclose(again.score(["red chair"], [["a", "b", "c"]])[0], got, atol=1e-6)
    assert not create_model("bert-rel", base=tiny_bert).graded  # Eq. 2's one logit stays the default


@pytest.mark.parametrize("loss", ["listnet", "hinge"])
def test_graded_head_trains_on_list_loss_and_grades(tiny_bert, loss):
    data = _data()
    m, args = _make(
        "bert-rel",
        base=tiny_bert,
        grades=[0, 1, 2, 3],
        neg_global=2,
        neg_cluster=0,
        lr=1e-3,
        batch_size=4,
        loss=loss,
        grade_weight=0.5,
    )
    examples = add_negatives(
        judged_examples(data, np.random.default_rng(0), None, 30),
        np.random.default_rng(0),
        len(data.doc_ids),
        2,
        0,
        None,
    )
    m.net.eval()
    list_only = _batch_loss(m, examples, data.doc_texts, 1.0, loss=loss).item()
    both = _batch_loss(m, examples, data.doc_texts, 1.0, loss=loss, grade_weight=0.5).item()
    assert both > list_only  # the cross-entropy is added (a random head is far from every grade)
    fit(m, data, None, progress=False, args=args)
    assert _batch_loss(m, examples, data.doc_texts, 1.0, loss=loss, grade_weight=0.5).item() < both


def test_graded_head_parameters_are_checked(tiny_bert):
    data = _data()
    # arguments built in Python meet the model only in fit: refused there, before any training
    m, args = create_model("bert-rel", base=tiny_bert), CrossEncoderArgs(neg_global=0, neg_cluster=0, grade_weight=1.0)
    with pytest.raises(ParamError, match=r"'grade_weight'.*one logit; set the model parameter grades"):
        fit(m, data, None, progress=False, args=args)
    m, args = _make("bert-rel", base=tiny_bert, grades=[1, 2, 3], neg_global=2, neg_cluster=0)
    with pytest.raises(ValueError, match=r"grades span 0\.\.3 \(a sampled negative is grade 0\), beyond .*\[1"):
        fit(m, data, None, progress=False, args=args)
    with pytest.raises(ValueError, match="grade_weight"):
        recipe("bert-rel", {"base": tiny_bert, "grade_weight": -1})
    # refused at the edge, before any data is read: the arguments against the model parameters
    with pytest.raises(ParamError, match=r"spec.toml:3: .*'grade_weight'.*one logit"):
        recipe("bert-rel", {"base": tiny_bert, "grade_weight": 1.0}, where="spec.toml:3")
    kw, args = recipe("bert-rel", {"base": tiny_bert, "grades": [0, 1, 2, 3], "grade_weight": 0.5})
    assert kw["grades"] == [0, 1, 2, 3] and args.grade_weight == 0.5


def test_listnet_takes_no_margin_list(tiny_bert):
    with pytest.raises(ValueError, match=r"'margin' is a list of hinge margins .* 'loss' = 'listnet' has no margin"):
        recipe("bert-rel", {"base": tiny_bert, "loss": "listnet", "margin": [0.1, 1.0]})
    with pytest.raises(ValueError, match=r"loss"):
        recipe("bert-rel", {"base": tiny_bert, "loss": "lambdaloss"})


def test_shared_negatives_labels_and_mask():
    # query 0 judged rows {1: 4, 2: 0} + negative 7; query 1 judged {2: 3} + negatives 5, 7
    a = Example("q0", np.array([1, 2, 7]), np.array([4.0, 0.0, 0.0]), {1, 2})
    b = Example("q1", np.array([2, 5, 7]), np.array([3.0, 0.0, 0.0]), {2})
    rows, inv = np.unique(np.concatenate([a.docs, b.docs]), return_inverse=True)
    assert rows.tolist() == [1, 2, 5, 7]
    labels, valid = _shared_labels([a, b], rows, inv)
    # q0 meets row 5 (q1's negative) as a grade-0 negative; q1 meets row 1 (judged for q0 only) as one
    assert labels.tolist() == [[4, 0, 0, 0], [0, 3, 0, 0]]
    assert valid.all()
    # a document judged for a query but not in its (sampled) list is masked for it, never a negative
    c = Example("q2", np.array([5]), np.array([2.0]), {5, 1})
    rows, inv = np.unique(np.concatenate([a.docs, c.docs]), return_inverse=True)
    labels, valid = _shared_labels([a, c], rows, inv)
    assert rows.tolist() == [1, 2, 5, 7]
    assert valid.tolist() == [[True, True, True, True], [False, True, True, True]]
    assert labels[1].tolist() == [0, 0, 2, 0]


def test_shared_negatives_train_and_need_a_bi_encoder(tiny_bert):
    data = _data()
    m, args = _make(
        "bert-rep", base=tiny_bert, neg_global=1, neg_cluster=0, lr=1e-3, batch_size=4, share_negatives=True
    )
    examples = add_negatives(
        judged_examples(data, np.random.default_rng(0), None, 30),
        np.random.default_rng(0),
        len(data.doc_ids),
        1,
        0,
        None,
    )
    m.net.eval()
    before = _batch_loss(m, examples, data.doc_texts, 1.0, share=True).item()
    fit(m, data, None, progress=False, args=args)
    assert _batch_loss(m, examples, data.doc_texts, 1.0, share=True).item() < before
    with pytest.raises(ValueError, match=r"bert-rel has no parameter 'share_negatives'"):
        recipe("bert-rel", {"base": tiny_bert, "share_negatives": True})  # a bi-encoder parameter


def test_margin_list_keeps_the_best_on_dev(tiny_bert):
    data = _data()
    dev = EvalSet(data.queries, {q: list(d) for q, d in data.qrels.items()}, data.qrels)
    m, args = _make(
        "bert-rep",
        base=tiny_bert,
        margin=[0.1, 2.0],
        neg_global=1,
        neg_cluster=1,
        cluster_model="pretrained",
        n_clusters=3,
        lr=1e-3,
    )
    log = fit(m, data, dev, progress=False, args=args)
    assert set(log["trials"]) == {"0.1", "2.0"}
    assert log["best_dev"] == max(t["best_dev"] for t in log["trials"].values())
    m.index(data.doc_ids, data.doc_texts)
    run = rank(m, data.queries, {q: list(d) for q, d in data.qrels.items()})
    assert len(run) == 12
    with pytest.raises(ValueError, match="dev set"):
        fit(create_model("bert-rep", base=tiny_bert), data, None, progress=False, args=BiEncoderArgs(margin=[0.1, 1.0]))


def test_uniform_negatives_are_distinct_and_exclude_judged():
    rng = np.random.default_rng(0)
    population = np.arange(1000)
    for _ in range(20):
        exclude = set(rng.choice(1000, size=30, replace=False).tolist())
        neg = uniform_negatives(rng, population, exclude, 10)
        assert len(neg) == 10 and len(set(neg.tolist())) == 10 and not exclude & set(neg.tolist())
    small = uniform_negatives(rng, np.array([3, 4, 5, 6]), {4}, 10)  # population runs out
    assert sorted(small.tolist()) == [3, 5, 6]
    # uniform: over many draws every allowed document turns up
    seen = np.concatenate([uniform_negatives(rng, np.arange(50), {0, 1}, 5) for _ in range(200)])
    assert set(seen.tolist()) == set(range(2, 50))


def test_cluster_negatives_come_from_the_query_cluster(tiny_bert):
    data = _data()
    rng = np.random.default_rng(0)
    examples = judged_examples(data, rng, None, 30)
    encoder = create_model("bert-rep", base=tiny_bert)
    clusters = Clusters.build(encoder, data.doc_texts, [e.query for e in examples], 4, 1000, rng, 0)
    assert sum(len(m) for m in clusters.members) == len(data.doc_texts)
    out = add_negatives(examples, rng, len(data.doc_texts), 3, 3, clusters)
    for i, (ex, aug) in enumerate(zip(examples, out)):
        n = len(ex.docs)
        glob, clus = aug.docs[n : n + 3], aug.docs[n + 3 :]
        assert (aug.grades[n:] == 0).all() and len(glob) == 3
        members = set(clusters.members[clusters.query_cluster[i]].tolist())
        assert set(clus.tolist()) <= members
        assert len(clus) == min(3, len(members - ex.judged - set(glob.tolist())))
        assert not set(aug.docs[n:].tolist()) & ex.judged
        assert len(set(aug.docs[n:].tolist())) == len(aug.docs) - n


def test_bert_rel_refuses_first_model_clustering(tiny_bert):
    m = create_model("bert-rel", base=tiny_bert)
    with pytest.raises(ValueError, match="bi-encoder"):
        fit(m, _data(), None, progress=False, args=CrossEncoderArgs(neg_cluster=2, cluster_model="first"))


def test_head_lr_gives_the_cross_encoder_head_its_own_step(tiny_bert):
    rel, args = _make("bert-rel", base=tiny_bert, head_lr=1e-3)
    groups = _param_groups(rel.net, args.head_lr)
    assert len(groups) == 2 and groups[1]["lr"] == 1e-3
    assert {id(p) for p in groups[1]["params"]} == {id(p) for p in rel.net.head.parameters()}
    assert sum(len(g["params"]) for g in groups) == len(list(rel.net.parameters()))
    plain = create_model("bert-rel", base=tiny_bert)  # head_lr None: one group at lr
    assert len(_param_groups(plain.net, CrossEncoderArgs().head_lr)) == 1
    rep = create_model("bert-rep", base=tiny_bert)  # no head
    assert len(_param_groups(rep.net, 1e-3)) == 1
    with pytest.raises(ValueError):
        recipe("bert-rep", {"base": tiny_bert, "head_lr": 1e-3})  # not a bi-encoder parameter


def test_parameters_are_typed_and_checked(tiny_bert, tmp_path):
    with pytest.raises(ParamError, match="no parameter 'neg_globl'.*did you mean 'neg_global'"):
        recipe("bert-rep", {"neg_globl": 3})
    with pytest.raises(ParamError, match="'max_doc_length' must be >= 1"):
        create_model("bert-rel", base=tiny_bert, max_doc_length=0)
    with pytest.raises(ParamError, match="'normalize' must be true or false"):
        create_model("bert-rep", base=tiny_bert, normalize="yes")
    with pytest.raises(ParamError, match="'pooling' must be"):
        create_model("bert-rep", base=tiny_bert, pooling="max")
    with pytest.raises(ParamError, match="'cluster_model' must be one of"):
        recipe("bert-rep", {"cluster_model": "kmeans"})
    with pytest.raises(ParamError, match="'optimizer' must be one of 'adam'"):
        recipe("bert-rel", {"optimizer": "sgd"})
    kw, args = recipe(
        "bert-rep",
        {
            "base": tiny_bert,
            "pooling": "cls",
            "max_queries": 80,
            "margin": [0.5, 1],
            "share_negatives": True,
            "lr": 2e-5,
        },
    )
    assert kw == {"base": tiny_bert, "pooling": "cls"}
    assert isinstance(args, BiEncoderArgs) and (args.max_queries, args.margin, args.share_negatives) == (
        80,
        [0.5, 1.0],
        True,
    )
    kw, args = recipe("bert-rel", {"max_length": 64, "head_lr": 1e-3})
    assert kw == {"max_length": 64} and isinstance(args, CrossEncoderArgs) and args.cluster_model == "pretrained"
    # folders saved when the training settings were model parameters still load
    m = create_model("bert-rep", base=tiny_bert)
    m.save(tmp_path / "rep")
    cfg = json.loads((tmp_path / "rep" / "config.json").read_text())
    cfg["semsearch"]["params"].update(
        {
            "margin": 1.0,
            "lr": 1e-5,
            "epochs": 1,
            "batch_size": 8,
            "neg_global": 10,
            "neg_cluster": 10,
            "cluster_model": "first",
            "max_queries": None,
            "dev_metric": "ndcg@10",
            "seed": 0,
            "share_negatives": False,
        }
    )
    (tmp_path / "rep" / "config.json").write_text(json.dumps(cfg))
    again = load_model(tmp_path / "rep")
    assert {k: v for k, v in again.params().items() if k != "base"} == {
        k: v for k, v in m.params().items() if k != "base"
    }
    assert np.allclose(again.encode_documents(["red chair"]), m.encode_documents(["red chair"]), atol=1e-6)


def test_run_and_a_bundle_rank_a_bi_encoder_alike(tiny_bert, tmp_path):
    """``semsearch run`` (the model's own ``retrieve``) and a bundle's vector index compare a
    bi-encoder's vectors the same way (``similarity_of``): by cosine for a sentence-transformers
    model that scores by cosine, by dot product for a plain BERT; the saved model keeps it."""
    import shutil

    from semsearch.data import Corpus
    from semsearch.index import build_bundle
    from semsearch.index.bundle.search import Bundle
    from semsearch.models.base import similarity_of

    st = tmp_path / "st"
    shutil.copytree(tiny_bert, st)
    (st / "config_sentence_transformers.json").write_text('{"similarity_fn_name": "cosine"}', encoding="utf-8")
    ids = [f"d{i}" for i in range(8)]
    texts = ["red chair", "a much longer blue table with four legs", "green lamp", "red red red sofa"]
    texts += ["tiny cat", "big dog barking loudly at night", "chair", "blue"]
    queries = ["red chair", "blue table", "dog"]
    for base, sim in [(str(st), "cosine"), (tiny_bert, "dot")]:
        m = create_model("bert-rep", base=base)
        assert similarity_of(m) == sim
        m.index(ids, texts)
        d, q = m.encode_documents(texts), m.encode_queries(queries)
        if sim == "cosine":
            d, q = d / np.linalg.norm(d, axis=1, keepdims=True), q / np.linalg.norm(q, axis=1, keepdims=True)
        want = [[ids[i] for i in np.argsort(-(d @ qi), kind="stable")] for qi in q]
        assert [[h for h, _ in hits] for hits in m.retrieve(queries, 8)] == want
        assert [list(np.argsort(-s, kind="stable")) for s in m.score(queries, [ids] * 3)] == [
            [ids.index(x) for x in w] for w in want
        ]
        out = build_bundle(Corpus(ids, texts, [""] * len(ids)), [m], tmp_path / f"b-{sim}", fields="title")
        b = Bundle.load(out)
        (name,) = b.semantic
        assert b.semantic[name].metric == ("cosine" if sim == "cosine" else "ip")
        assert [[h for h, _ in hits] for hits in b.semantic[name].retrieve(queries, 8)] == want
        assert similarity_of(b.semantic[name].encoder) == sim
    trained = create_model("bert-rep", base=str(st))
    trained.mark_trained()  # fine-tuned unnormalised: the dot product it was trained with
    assert similarity_of(trained) == "dot"
    assert similarity_of(create_model("bert-rep", base=tiny_bert, normalize=True)) == "cosine"
