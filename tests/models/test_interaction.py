"""K-NRM and MatchPyramid: kernels, matching matrix, shapes, training, persistence, on tiny data."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from semsearch.data import EvalSet, TrainingData, open_dataset
from semsearch.models import ModelDirError, rank
from semsearch.models.interaction import dynamic_pool_index, knrm_kernels, pad_rows
from semsearch.params import ParamError
from semsearch.plugins import create_model, load_model
from semsearch.text import Vocabulary
from semsearch.training import fit, recipe
from semsearch.training.args import PairwiseArgs

SMALL = {"knrm": {"dim": 8}, "matchpyramid": {"dim": 8, "channels": 2, "hidden": 8, "query_words": 4, "doc_words": 6}}


def _built(name, **kw):
    m = create_model(name, **SMALL[name], **kw)
    m.build(Vocabulary(["red", "brick", "wall", "blue", "door"]))
    return m


def test_knrm_kernels_are_the_papers():
    mu, sigma = knrm_kernels(11)
    assert np.allclose(mu, [1.0, 0.9, 0.7, 0.5, 0.3, 0.1, -0.1, -0.3, -0.5, -0.7, -0.9])
    assert sigma[0] == pytest.approx(1e-3) and np.allclose(sigma[1:], 0.1)
    with pytest.raises(ValueError):
        knrm_kernels(1)


def test_matching_matrix_exact_matches_unknown_words_and_padding():
    m = _built("knrm")
    q, d = m.encode(["red zebra"]), m.encode(["zebra red door okapi"])
    assert q[0][0] >= 2 and q[0][1] < 0 and d[0][3] < 0 and d[0][3] != q[0][1]  # unknown words: own negative ids
    with torch.no_grad():
        M, qmask, dmask = m.net.match(pad_rows(q, 3), pad_rows(d, 5))
    assert M.shape == (1, 3, 5)
    assert M[0, 0, 1] == pytest.approx(1.0) and M[0, 1, 0] == pytest.approx(1.0)  # red=red, zebra=zebra (OOV)
    assert M[0, 1, 3] == 0.0  # two different unknown words do not match
    assert torch.all(M[0, 2] == 0) and torch.all(M[0, :, 4] == 0)  # padding
    assert qmask.tolist() == [[1, 1, 0]] and dmask.tolist() == [[1, 1, 1, 1, 0]]


def test_knrm_exact_match_kernel_counts_matches():
    m = _built("knrm")
    q, d = pad_rows(m.encode(["red"]), 1), pad_rows(m.encode(["red red blue"]), 3)
    with torch.no_grad():
        phi = m.net.features(q, d)
    assert phi.shape == (1, 11)
    assert phi[0, 0].item() == pytest.approx(0.01 * np.log(2.0), rel=1e-4)  # soft TF of μ=1: two exact matches


@pytest.mark.parametrize("name", ["knrm", "matchpyramid"])
def test_scores_shapes_and_odd_inputs(name):
    m = _built(name)
    m.index(["a", "b", "c", "d"], ["red brick wall", "blue door", "", "x " * 100])
    scores = m.score(["red wall", "", "zebra"], [["a", "b"], ["c", "d", "a"], []])
    assert [len(s) for s in scores] == [2, 3, 0] and all(np.isfinite(s).all() for s in scores)
    assert len(m.retrieve(["red"], k=2)[0]) == 2
    with pytest.raises(ValueError, match="not in the indexed"):
        m.score(["red"], [["zz"]])


def test_dynamic_pooling_stretches_the_real_region():
    idx = dynamic_pool_index(torch.tensor([2, 5, 0]), 5)
    assert idx.tolist() == [[0, 0, 0, 1, 1], [0, 1, 2, 3, 4], [0, 0, 0, 0, 0]]
    m = _built("matchpyramid")
    q = pad_rows(m.encode(["red blue", "red"]), 4)
    d = pad_rows(m.encode(["red door wall", "red"]), 6)
    assert m.net(q, d).shape == (2,)


def test_bad_parameters():
    with pytest.raises(ValueError, match="no parameter 'kernel_count'"):
        create_model("knrm", kernel_count=3)
    with pytest.raises(ValueError, match="dim = 384"):
        create_model("matchpyramid", init="minilm", dim=50)
    with pytest.raises(RuntimeError, match="not trained"):
        create_model("knrm").score(["a"], [[]])
    with pytest.raises(ValueError, match="fixed at training"):
        _built("knrm").with_params(dim=3)


@pytest.mark.parametrize("name", ["knrm", "matchpyramid"])
def test_training_lowers_loss_and_ranks(tiny_data, name):
    ds = open_dataset("tiny")
    data = TrainingData.from_dataset(ds, "train", threshold=2)
    dev = EvalSet.judged(ds, "dev")
    m = create_model(name, **SMALL[name], min_count=1)
    log = fit(m, data, dev, progress=False, args=PairwiseArgs(epochs=4, batch_size=8, lr=0.01, patience=10))
    losses = [e["loss"] for e in log["epochs"]]
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert 0 < log["best_dev"] <= 1 and 1 <= log["best_epoch"] <= 4
    corpus = ds.corpus()
    m.index(corpus.ids, corpus.joined("title"))
    run = rank(m, {"q": "red"}, {"q": corpus.ids})
    assert len(run["q"]) == len(corpus.ids)


def test_training_is_deterministic_and_resumes(tiny_data, tmp_path):
    ds = open_dataset("tiny")
    data = TrainingData.from_dataset(ds, "train", threshold=2)
    kw, args = recipe("knrm", dict(SMALL["knrm"], epochs=3, batch_size=8, min_count=1, lr=0.01))
    a, b = create_model("knrm", **kw), create_model("knrm", **kw)
    fit(a, data, progress=False, args=args)
    fit(b, data, progress=False, args=args, checkpoint_dir=tmp_path / "ck")
    assert all(torch.equal(x, y) for x, y in zip(a.net.state_dict().values(), b.net.state_dict().values()))
    c = create_model("knrm", **kw)  # resuming after the last epoch changes nothing
    fit(c, data, progress=False, args=args, checkpoint_dir=tmp_path / "ck", resume=True)
    assert all(torch.equal(x, y) for x, y in zip(a.net.state_dict().values(), c.net.state_dict().values()))


@pytest.mark.parametrize("name", ["knrm", "matchpyramid"])
def test_save_load_round_trip_and_corruption(tmp_path, name):
    m = _built(name)
    docs = ["red brick wall", "blue door", "brick door"]
    m.index(["a", "b", "c"], docs)
    before = m.score(["red door", "wall"], [["a", "b", "c"], ["c", "a"]])
    m.save(tmp_path / "m")
    back = load_model(tmp_path / "m")
    back.index(["a", "b", "c"], docs)
    after = back.score(["red door", "wall"], [["a", "b", "c"], ["c", "a"]])
    assert all(np.array_equal(x, y) for x, y in zip(before, after))
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["params"]["dim"] = 4  # weights no longer fit the architecture
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelDirError, match="do not match"):
        load_model(tmp_path / "m")
    (tmp_path / "m" / "weights.safetensors").write_bytes(b"garbage")
    with pytest.raises(ModelDirError):
        load_model(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text("{")
    with pytest.raises(ModelDirError, match="unreadable"):
        load_model(tmp_path / "m")


@pytest.mark.parametrize("name", ["knrm", "matchpyramid"])
def test_parameters_are_typed_and_checked(name):
    with pytest.raises(ParamError, match="no parameter 'margn'.*did you mean 'margin'"):
        recipe(name, {"margn": 2.0})
    with pytest.raises(ParamError, match="'dim' must be a whole number"):
        create_model(name, dim=8.5)
    with pytest.raises(ParamError, match="'min_count' must be >= 1"):
        create_model(name, min_count=0)
    with pytest.raises(ParamError, match="'init' must be one of"):
        create_model(name, init="glove")
    with pytest.raises(ParamError, match="'margin' must be > 0"):
        recipe(name, {"margin": 0})
    kw, args = recipe(name, {"dim": 8, "min_count": 1, "max_vocab": 100, "negatives": 3, "margin": 0.5, "epochs": 2})
    assert kw == {"dim": 8, "min_count": 1, "max_vocab": 100}
    assert isinstance(args, PairwiseArgs) and (args.negatives, args.margin, args.epochs, args.optimizer) == (
        3,
        0.5,
        2,
        "adam",
    )
    if name == "matchpyramid":
        with pytest.raises(ParamError, match="'pool' must be two positive"):
            create_model(name, pool=[3])


def test_model_dirs_saved_with_training_keys_still_load(tmp_path):
    m = _built("knrm")
    m.index(["a", "b"], ["red brick wall", "blue door"])
    m.save(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["params"].update(
        {
            "negatives": 2,
            "hard_negatives": 4,
            "margin": 1.0,
            "optimizer": "adam",
            "lr": 1e-3,
            "batch_size": 256,
            "epochs": 6,
            "patience": 2,
            "dev_metric": "ndcg@10",
            "seed": 0,
            "neg_pool": 4096,
        }
    )
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    back = load_model(tmp_path / "m")
    back.index(["a", "b"], ["red brick wall", "blue door"])
    assert back.params() == m.params()
    assert np.array_equal(back.score(["red door"], [["a", "b"]])[0], m.score(["red door"], [["a", "b"]])[0])
