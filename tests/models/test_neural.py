"""DSSM/CLSM towers, encoding, persistence and the trainer, on tiny generated data."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from semsearch.data import EvalSet, TrainingData, open_dataset
from semsearch.models import ModelDirError, rank
from semsearch.models.neural import segment_max
from semsearch.params import ParamError
from semsearch.plugins import create_model, load_model
from semsearch.text import Bags, TrigramHasher, word_trigrams
from semsearch.training import fit, recipe
from semsearch.training.args import EncoderArgs

TEXTS = ["red brick wall", "blue door", "brick", "", "über café ñandú", "x " * 200]


def _make(name, **raw):
    """A model and its training arguments from one parameter vocabulary."""
    kw, args = recipe(name, raw)
    return create_model(name, **kw), args


def _built(name, **kw):
    m = create_model(name, **{"hidden": [16, 8], "out": 4} if name == "dssm" else {"conv": 6, "out": 4, **kw})
    m.build(TrigramHasher.fit(TEXTS[:3] + ["über café"], max_words=8))
    return m


@pytest.mark.parametrize("name", ["dssm", "clsm"])
def test_encoding_is_unit_length_and_handles_odd_texts(name):
    m = _built(name)
    v = m.encode_documents(TEXTS)
    assert v.shape == (len(TEXTS), 4) and v.dtype == np.float32 and np.isfinite(v).all()
    norms = np.linalg.norm(v, axis=1)
    assert np.allclose(norms[norms > 0], 1.0, atol=1e-5)
    # beyond max_words (8) a text is truncated: the tail does not change the vector
    long_a, long_b = "brick " * 8 + "red", "brick " * 8 + "blue door wall"
    assert np.allclose(m.encode_queries([long_a]), m.encode_queries([long_b]))
    # words made of trigrams never seen in training still encode to finite vectors
    assert np.isfinite(m.encode_queries(["qqqq zzzz", "   "])).all()


def test_clsm_convolution_equals_dense_window_reference():
    m = _built("clsm", window=3)
    tower = m.net.q
    h = m.hasher
    text = "red brick wall door"
    words = h.words(text)
    V, K = len(h), 6
    W = tower.embed.weight.detach().view(V, 3, K)  # slot j -> W_j (V x K)
    pad = tower.pad.detach().view(3, K)

    def f(word):  # the word's trigram count vector
        x = torch.zeros(V)
        for t in word_trigrams(word):
            if t in h.index:
                x[h.index[t]] += 1
        return x

    conv = []
    for t in range(len(words)):
        acc = tower.bias.detach().clone()
        for j in range(3):
            p = t + j - 1
            acc += f(words[p]) @ W[:, j] if 0 <= p < len(words) else pad[j]
        conv.append(acc)
    pooled = torch.stack(conv).max(0).values
    want = torch.tanh(tower.semantic(torch.tanh(pooled))).detach()
    with torch.no_grad():
        got = tower(m.features([text]).batch(np.array([0])))[0]
    assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("window", [1, 3, 4])
def test_window_features_give_each_position_its_window(window):
    """``WindowFeatures.batch`` (a compiled pass) against a loop over every text's positions: the
    window's words around each position, the padding past the ends and for an empty text."""
    m = _built("clsm", window=3)
    texts = ["red brick wall door", "", "door", "wall red red wall brick", "brick door"]
    f = m.features(texts)
    f.window = window
    rows = np.array([3, 1, 0, 2, 4, 1])
    b = f.batch(rows)
    wb = f.words.batch(rows)
    pad, half = len(wb.words), (window - 1) // 2
    want_windows, want_segment, want_starts = [], [], [0]
    for i in range(len(rows)):
        words = wb.positions[wb.indptr[i] : wb.indptr[i + 1]]
        for p in range(max(len(words), 1)):
            want_windows.append([words[p + j - half] if 0 <= p + j - half < len(words) else pad for j in range(window)])
            want_segment.append(i)
        want_starts.append(len(want_segment))
    assert b.windows.dtype == np.int64 and b.windows.shape == (window, len(want_segment))
    assert (b.windows.T == np.array(want_windows)).all()
    assert (b.segment == want_segment).all() and (b.starts == want_starts).all() and b.n_words == pad


def test_segment_max_and_its_gradient():
    v = torch.tensor([[1.0, 5.0], [3.0, 2.0], [0.0, 0.0], [7.0, -1.0]], requires_grad=True)
    best, arg = segment_max(v, torch.tensor([0, 0, 0, 1]), 2)
    assert best.tolist() == [[3.0, 5.0], [7.0, -1.0]] and arg.tolist() == [[1, 0], [3, 3]]
    best.sum().backward()
    assert v.grad.tolist() == [[0, 1], [1, 0], [0, 0], [1, 1]]


def test_bad_parameters():
    with pytest.raises(ValueError, match="no parameter 'layers'"):
        create_model("dssm", layers=3)
    with pytest.raises(ValueError, match="odd"):
        create_model("clsm", window=2)
    with pytest.raises(RuntimeError, match="not trained"):
        create_model("dssm").encode_queries(["x"])


def _tiny(tiny_data):
    ds = open_dataset("tiny")
    return ds, TrainingData.from_dataset(ds, "train", threshold=2), EvalSet.judged(ds, "dev")


SMALL = {"batch_size": 16, "neg_pool": 32, "epochs": 4, "patience": 10, "lr": 0.5}


@pytest.mark.parametrize(
    "name,extra",
    [
        ("dssm", {"hidden": [32], "out": 16}),
        ("clsm", {"conv": 16, "out": 8, "window": 3}),
        ("dssm", {"hidden": [32], "out": 16, "sampling": "in-batch", "optimizer": "adam", "lr": 0.01}),
        ("dssm", {"hidden": [32], "out": 16, "hard_negatives": 2, "negatives": 2}),
    ],
)
def test_training_learns_and_ranks(tiny_data, name, extra):
    ds, data, dev = _tiny(tiny_data)
    m, args = _make(name, **{**SMALL, **extra})
    log = fit(m, data, dev, progress=False, args=args)
    losses = [e["loss"] for e in log["epochs"]]
    assert losses[-1] < losses[0]
    assert log["best_dev"] > 0 and 1 <= log["best_epoch"] <= 4 and log["epochs"][0]["pairs_per_s"] > 0
    corpus = ds.corpus()
    m.index(corpus.ids, corpus.joined("title"))
    run = rank(m, {"q": "red"}, k=5)
    assert len(run["q"]) == 5 and all(-1.0001 <= s <= 1.0001 for s in run["q"].values())


def test_training_is_deterministic_and_resumes_exactly(tiny_data, tmp_path):
    ds, data, dev = _tiny(tiny_data)
    cfg = {**SMALL, "hidden": [16], "out": 8}

    def weights(m):
        return {k: v.clone() for k, v in m.net.state_dict().items()}

    (a, args), (b, _) = _make("dssm", **cfg), _make("dssm", **cfg)
    fit(a, data, dev, progress=False, args=args)
    fit(b, data, dev, progress=False, args=args)
    assert all(torch.equal(x, weights(b)[k]) for k, x in weights(a).items())
    # stop after 2 epochs with checkpoints, then resume to 4: same weights as 4 epochs straight
    half = create_model("dssm", hidden=[16], out=8)
    fit(half, data, dev, progress=False, args=args.replace(epochs=2), checkpoint_dir=tmp_path / "ck")
    resumed = create_model("dssm", hidden=[16], out=8)
    log = fit(resumed, data, dev, progress=False, args=args, checkpoint_dir=tmp_path / "ck", resume=True)
    assert [e["epoch"] for e in log["epochs"]] == [1, 2, 3, 4]
    assert all(torch.equal(x, weights(resumed)[k]) for k, x in weights(a).items())


def test_gamma_list_is_tuned_on_dev(tiny_data):
    ds, data, dev = _tiny(tiny_data)
    m, args = _make("dssm", **{**SMALL, "hidden": [16], "out": 8, "epochs": 2, "gamma": [1.0, 10.0]})
    log = fit(m, data, dev, progress=False, args=args)
    assert set(log["trials"]) == {"1.0", "10.0"} and log["gamma"] in (1.0, 10.0)
    assert log["best_dev"] == max(t["best_dev"] for t in log["trials"].values())
    assert m.trained


@pytest.mark.parametrize("name", ["dssm", "clsm"])
def test_save_load_round_trip_and_corruption(tmp_path, name):
    m = _built(name)
    m.save(tmp_path / "m")
    again = load_model(tmp_path / "m")
    assert np.allclose(again.encode_queries(TEXTS), m.encode_queries(TEXTS))
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["params"]["out"] = 5  # the weights no longer fit the architecture
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelDirError, match="do not match"):
        load_model(tmp_path / "m")
    (tmp_path / "m" / "weights.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(
        ModelDirError, match=r"weights\.safetensors: sha256 .*config\.json 'files\.weights\.safetensors'"
    ):
        load_model(tmp_path / "m")
    cfg.pop("files")  # a directory saved before sealing: the safetensors reader's own check
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelDirError, match="corrupt"):
        load_model(tmp_path / "m")
    (tmp_path / "m" / "weights.safetensors").unlink()
    with pytest.raises(ModelDirError):
        load_model(tmp_path / "m")


def test_score_unknown_candidate(tmp_path):
    m = _built("dssm")
    m.index(["a", "b"], ["red brick", "blue door"])
    assert m.score(["red"], [["b", "a"]])[0].shape == (2,)
    with pytest.raises(ValueError, match="not in the indexed collection"):
        m.score(["red"], [["zzz"]])


@pytest.mark.parametrize("name", ["dssm", "clsm"])
def test_parameters_are_typed_and_checked(name):
    with pytest.raises(ParamError, match="no parameter 'negatves'.*did you mean 'negatives'"):
        recipe(name, {"negatves": 4})
    with pytest.raises(ParamError, match="'out' must be a whole number"):
        create_model(name, out="big")
    with pytest.raises(ParamError, match="'out' must be >= 1"):
        create_model(name, out=0)
    with pytest.raises(ParamError, match="'sampling' must be one of"):
        EncoderArgs(sampling="hard")
    with pytest.raises(ParamError, match="'gamma' must be a positive number"):
        recipe(name, {"gamma": [1.0, -2.0]})
    with pytest.raises(ParamError, match="'neg_pool' must be >= 1"):
        recipe(name, {"neg_pool": 0})
    model_kw, args = recipe(
        name,
        {
            "out": 8,
            "max_trigrams": 500,
            "max_words": 16,
            "negatives": 50,
            "gamma": [5, 10],
            "lr": 0.1,
            "seed": 2,
            "device": "cpu",
        },
    )
    assert model_kw == {"out": 8, "max_trigrams": 500, "max_words": 16}
    assert isinstance(args, EncoderArgs) and (args.negatives, args.gamma, args.lr, args.seed) == (
        50,
        [5.0, 10.0],
        0.1,
        2,
    )
    m = create_model(name, **model_kw)
    assert m.params()["max_trigrams"] == 500 and "negatives" not in m.params()
    with pytest.raises(ValueError, match="fixed at training"):
        m.with_params(out=9)
    assert m.with_params(out=8) is m


def test_fit_takes_only_the_kinds_arguments(tiny_data):
    from semsearch.training.args import PairwiseArgs

    ds, data, dev = _tiny(tiny_data)
    with pytest.raises(ValueError, match="takes EncoderArgs, got PairwiseArgs"):
        fit(create_model("dssm"), data, dev, args=PairwiseArgs(), progress=False)


def test_model_dirs_saved_with_training_keys_still_load(tmp_path):
    """Before the split, config.json's "params" held the training settings too."""
    m = _built("clsm")
    m.save(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["params"].update(
        {
            "negatives": 4,
            "sampling": "random",
            "hard_negatives": 0,
            "gamma": 10.0,
            "optimizer": "sgd",
            "lr": 0.5,
            "batch_size": 1024,
            "epochs": 20,
            "patience": 3,
            "dev_metric": "ndcg@10",
            "seed": 0,
            "neg_pool": 8192,
        }
    )
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    again = load_model(tmp_path / "m")
    assert again.params() == m.params()
    assert np.allclose(again.encode_queries(TEXTS), m.encode_queries(TEXTS))


def test_to_device_keeps_the_encoding():
    m = _built("dssm")
    before = m.encode_queries(TEXTS)
    assert m.to("cpu") is m and np.allclose(m.encode_queries(TEXTS), before)


# ---- the fast kernels against the formulas they replace (EmbeddingBag's own backward, torch.tanh,
# the convolution materialised for autograd and segment_reduce's max)
def _text_bags(x):
    """DSSM's batch by distinct words (``WordBags``) as each text's trigram bag: its words'
    trigram ids laid end to end, as DSSM took its input before it summed per word."""
    w = x.words
    per_text = [
        np.concatenate([w.ids[w.offsets[p] : w.offsets[p + 1]] for p in x.positions[a:b]] or [np.zeros(0, np.int64)])
        for a, b in zip(x.indptr[:-1], x.indptr[1:])
    ]
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in per_text])]).astype(np.int64)
    ids = np.concatenate(per_text).astype(np.int64) if per_text else np.zeros(0, np.int64)
    return Bags(ids, np.ones(len(ids), dtype=np.float32), offsets)


def _reference_forward(tower, x):
    """The towers as computed before the fast kernels: nn.EmbeddingBag over each text's trigram
    bag, torch.tanh, segment_reduce."""
    from semsearch.models.neural import CLSMTower, WordBags, _bag_tensors

    if isinstance(tower, CLSMTower):
        conv = tower.convolve(x)
        return torch.tanh(tower.semantic(torch.tanh(tower.pool(conv, x))))
    if isinstance(x, WordBags):
        x = _text_bags(x)
    ids, offsets, weights = _bag_tensors(x, torch.device("cpu"))
    h = torch.tanh(tower.embed(ids, offsets, per_sample_weights=weights) + tower.bias)
    for layer in tower.layers:
        h = torch.tanh(layer(h))
    return h


ODD_TEXTS = [
    "red brick wall",
    "",
    "brick brick brick brick",
    "a b a b a b a b",
    "über café ñandú Ωμέγα ΣΑΣ",
    "x " * 200,
    "red",
    "wall door red brick blue",
    "🙂 ☃ ¡¿",
    "door door",
]


@pytest.mark.parametrize("name", ["dssm", "clsm"])
def test_fast_tower_equals_reference_values_and_gradients(name):
    m = _built(name)
    tower = m.net.q
    rng = np.random.default_rng(0)
    texts = ODD_TEXTS + [
        " ".join(rng.choice(["red", "brick", "wall", "door", "blue", "café", "zz"], rng.integers(0, 12)))
        for _ in range(60)
    ]
    x = m.features(texts).batch(np.arange(len(texts)))
    g = torch.as_tensor(rng.standard_normal((len(texts), 4)), dtype=torch.float32)
    grads = []
    for fn in (tower, lambda b: _reference_forward(tower, b)):
        tower.zero_grad(set_to_none=True)
        out = fn(x)
        out.backward(g)
        grads.append((out.detach(), {k: p.grad.clone() for k, p in tower.named_parameters()}))
    (a, ga), (b, gb) = grads
    assert torch.allclose(a, b, atol=1e-6)
    assert ga.keys() == gb.keys()
    for k in ga:
        assert torch.allclose(ga[k], gb[k], atol=1e-5), k
    assert any(v.abs().sum() > 0 for v in ga.values())
    with torch.inference_mode():  # encoding path (no autograd) gives the same vectors
        assert torch.allclose(tower(x), b, atol=1e-6)


def test_numpy_tanh_matches_torch():
    from semsearch.models.neural import tanh

    x = torch.linspace(-12, 12, 10001).view(-1, 1).repeat(1, 3).requires_grad_()
    y = tanh(x)
    y.backward(torch.ones_like(y))
    gx = x.grad.clone()
    x.grad = None
    torch.tanh(x).backward(torch.ones_like(y))
    assert torch.allclose(y, torch.tanh(x), atol=2e-7, rtol=0) and torch.allclose(gx, x.grad, atol=1e-6)
    assert tanh(x.detach()[:, 1:]).shape == (10001, 2)  # not contiguous: torch's own


def _reference_batch_loss(net, qf, df, pairs, rows, rng, args):
    """trainer.batch_loss before it left undrawn pool documents out (random negatives only)."""
    import torch.nn.functional as F

    from semsearch.training.losses import softmax_cosine_loss
    from semsearch.training.negatives import random_negatives, sample_pool

    q_rows, d_rows = pairs.q_rows[rows], pairs.d_rows[rows]
    pool = sample_pool(rng, len(df), min(args.neg_pool, args.batch_size * args.negatives, len(df)))
    sets = [set(pairs.d_rows[pairs.q_rows == q].tolist()) for q in q_rows]  # each query's positives
    neg = random_negatives(rng, pool, sets, args.negatives)
    qv = F.normalize(net.query(qf.batch(q_rows)), dim=1)
    dv = F.normalize(net.doc(df.batch(np.concatenate([d_rows, pool]))), dim=1)
    b, idx = len(rows), torch.as_tensor(neg)
    nv = dv[b:][idx.clamp(min=0)]
    sims = torch.einsum("bd,bjd->bj", qv, nv).masked_fill(idx < 0, float("-inf"))
    return softmax_cosine_loss((qv * dv[:b]).sum(1), sims, args.gammas[0])


@pytest.mark.parametrize(
    "name,extra", [("dssm", {"hidden": [32], "out": 16}), ("clsm", {"conv": 16, "out": 8, "window": 3})]
)
def test_fast_training_follows_the_reference_loss_curve(tiny_data, monkeypatch, name, extra):
    """Same seed, same data: the fast towers and batch assembly learn what the reference did."""
    from semsearch.models import neural
    from semsearch.training import trainer

    ds, data, dev = _tiny(tiny_data)
    cfg = {**SMALL, **extra, "negatives": 3, "epochs": 3}
    fast, args = _make(name, **cfg)
    log_fast = fit(fast, data, None, progress=False, args=args)
    ref, _ = _make(name, **cfg)
    with monkeypatch.context() as mp:
        mp.setattr(trainer, "batch_loss", _reference_batch_loss)
        mp.setattr(neural.DSSMTower, "forward", _reference_forward)
        mp.setattr(neural.CLSMTower, "forward", _reference_forward)
        log_ref = fit(ref, data, None, progress=False, args=args)
    a, b = ([e["loss"] for e in log["epochs"]] for log in (log_fast, log_ref))
    assert len(a) == 3 and a[-1] < a[0]
    assert np.allclose(a, b, rtol=1e-5, atol=1e-6), (a, b)
    ref_state = ref.net.state_dict()
    for k, v in fast.net.state_dict().items():
        assert torch.allclose(v, ref_state[k], atol=1e-4), k
    texts = ["red door", "", "brick wall über"]
    assert np.allclose(fast.encode_queries(texts), ref.encode_queries(texts), atol=1e-5)


def test_in_batch_loss_masks_each_querys_other_positives(tiny_data):
    """In-batch negatives: a batch document that is another positive of the query (a query with
    two positives in the batch) is left out of its softmax, as a per-query set lookup says."""
    import torch.nn.functional as F

    from semsearch.training.losses import in_batch_loss
    from semsearch.training.trainer import Pairs, batch_loss

    ds, data, dev = _tiny(tiny_data)
    model, args = _make("dssm", hidden=[32], out=16, sampling="in-batch")
    pairs = Pairs.build(data)
    model.build(model.vocabulary(pairs.train_texts(data)), 0)
    qf, df = model.features(pairs.q_texts), model.features(data.doc_texts)
    rows = np.arange(len(pairs.q_rows))  # every pair: queries with several positives meet them all
    q_rows, d_rows = pairs.q_rows[rows], pairs.d_rows[rows]
    sets = [set(pairs.d_rows[pairs.q_rows == q].tolist()) for q in q_rows]
    same = np.array([[int(d) in s for d in d_rows] for s in sets], dtype=bool)
    same[np.arange(len(rows)), np.arange(len(rows))] = False
    assert same.any()  # the mask has work to do here
    with torch.no_grad():
        loss = batch_loss(model.net, qf, df, pairs, rows, np.random.default_rng(0), args)
        qv = F.normalize(model.net.query(qf.batch(q_rows)), dim=1)
        dv = F.normalize(model.net.doc(df.batch(d_rows)), dim=1)
        ref = in_batch_loss(qv @ dv.T, torch.as_tensor(same), args.gammas[0])
        unmasked = in_batch_loss(qv @ dv.T, torch.zeros_like(torch.as_tensor(same)), args.gammas[0])
    assert torch.allclose(loss, ref) and not torch.allclose(loss, unmasked)


def test_gathered_dots_equals_the_gather_and_einsum():
    """Values and gradients (rows 7 and 8 of ``d`` picked by no query: zero gradient)."""
    from semsearch.training.trainer import gathered_dots

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(5, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    d = torch.randn(9, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    idx = torch.tensor([[0, 6, 6], [1, 1, 1], [2, 3, 4], [6, 5, 0], [0, 0, 2]])
    assert torch.allclose(gathered_dots(q, d, idx), torch.einsum("bd,bjd->bj", q, d[idx]))
    assert torch.autograd.gradcheck(gathered_dots, (q, d, idx))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("window", [1, 3, 4])
def test_window_max_kernel_equals_torch_and_picks_the_first_maximum(threads, window, monkeypatch):
    """CLSM's fused convolution + max-pooling: the compiled CPU pass (its one-pass path for the
    papers' window of 3, its general passes otherwise) and the torch path (other devices) give
    the same maxima and winners, ties to the first position, and the same gradient as the
    convolution's max taken by autograd; on two threads the backward runs as two slices."""
    from semsearch.device import run_split
    from semsearch.models import _clsm_kernels as kern
    from semsearch.models._clsm_kernels import (
        balanced_cuts,
        slot_occurrences,
        window_max,
        window_max_grad,
        winner_dtype,
    )
    from semsearch.models.neural import _window_max_torch, _WindowMax

    rng = np.random.default_rng(threads + 10 * window)
    lengths = [4, 1, 3, 7, 3, 1] * 30  # 180 texts: enough for one slice per thread
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    table = rng.integers(0, 3, size=(43, 6)).astype(np.float32)  # small integers: many ties
    slots, pad = table[:40], table[40:]  # 40 word slots, then the padding's 3
    rows = rng.integers(0, 43, size=(starts[-1], window)).astype(np.int64)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        best = np.empty((len(lengths), 6), np.float32)
        local = np.arange(max(lengths), dtype=winner_dtype(max(lengths)))
        assert local.dtype == np.int8 and winner_dtype(128) == np.int16 and winner_dtype(1 << 15) == np.int32
        winner = np.empty((len(lengths), 6), local.dtype)  # within the text
        run_split(window_max, len(lengths), slots, pad, rows, starts, local, best, winner)
        tb, tw = _window_max_torch(torch.from_numpy(table), torch.from_numpy(rows), starts)
        assert np.array_equal(best, tb.numpy()) and np.array_equal(starts[:-1, None] + winner, tw.numpy())
        conv = table[rows].sum(1)
        for t in range(len(lengths)):
            vals = conv[starts[t] : starts[t + 1]]
            assert np.array_equal(best[t], vals.max(0)) and np.array_equal(winner[t], vals.argmax(0))
        g = rng.standard_normal((len(lengths), 6)).astype(np.float32)
        ptr, pos, text = slot_occurrences(rows, 43, starts, local)
        assert ptr[-1] == rows.size and np.array_equal(np.diff(ptr), np.bincount(rows.ravel(), minlength=43))
        for r in range(43):  # each row's readers, positions ascending, with their texts
            p_r = np.flatnonzero((rows == r).any(1)).repeat((rows == r).sum(1)[(rows == r).any(1)])
            t_r = np.searchsorted(starts, p_r, side="right") - 1
            assert pos.dtype == local.dtype and np.array_equal(pos[ptr[r] : ptr[r + 1]], p_r - starts[t_r])
            assert np.array_equal(text[ptr[r] : ptr[r + 1]], t_r)
        gs = np.full_like(table, np.nan)  # every row is written, none needs zeroing
        cuts = balanced_cuts(ptr, threads)
        assert cuts[0] == 0 and cuts[-1] == 43 and np.all(np.diff(cuts) > 0) and len(cuts) == threads + 1
        run_split(window_max_grad, len(cuts) - 1, g, winner, ptr, pos, text, gs, cuts, grain=1)
        scattered = np.zeros_like(table)  # the max's gradient, text by text, in the texts' order
        for t in range(len(lengths)):
            for k in range(6):
                for r in rows[starts[t] + winner[t, k]]:
                    scattered[r, k] += g[t, k]
        assert np.array_equal(gs, scattered)  # the same sums in the same order, bit for bit
        x = torch.from_numpy(table).double().requires_grad_()  # autograd over the full convolution
        full = x[torch.from_numpy(rows)].sum(1)
        pooled = torch.stack(
            [full[starts[t] + torch.from_numpy(winner[t]).long(), torch.arange(6)] for t in range(len(lengths))]
        )
        (pooled * torch.from_numpy(g).double()).sum().backward()
        assert np.allclose(gs, x.grad.numpy(), atol=1e-5)
        # the autograd function: CPU kernels, bias added, gradient to slots and bias
        s = torch.from_numpy(slots.copy()).requires_grad_()
        p = torch.from_numpy(pad.copy()).requires_grad_()
        bias = torch.arange(6, dtype=torch.float32, requires_grad=True)
        out = _WindowMax.apply(s, p, bias, torch.from_numpy(rows), starts)
        assert torch.equal(out.detach(), torch.from_numpy(best) + bias.detach())
        slices = []  # the backward's kernel calls: one slice of rows per thread (it once ran on one)
        monkeypatch.setattr(kern, "window_max_grad", lambda *a: (slices.append(a[-2:]), window_max_grad(*a)))
        (out * torch.from_numpy(g)).sum().backward()
        assert len(slices) == threads
        assert np.allclose(s.grad.numpy(), gs[:40]) and np.allclose(p.grad.numpy(), gs[40:])
        assert np.allclose(bias.grad.numpy(), g.sum(0))
    finally:
        torch.set_num_threads(old)


def test_word_bag_features_batch_holds_each_texts_trigram_bag():
    """``WordBagFeatures.batch``: each distinct word of the batch once, and every text's words as
    positions into them, so its words' bags laid end to end are the text's trigram bag
    (``WordTable.text_bags``), for any rows (repeated, reordered, empty texts, none)."""
    from semsearch.models.neural import WordBagFeatures

    texts = ["red brick wall", "", "blue deck over deck", "wall", "x y z", "brick", "ΟΔΟΣ café"] * 3
    table = TrigramHasher.fit(texts, max_words=3).table
    f = WordBagFeatures(table, texts)
    for rows in ([0, 1, 2], [5], [], [3, 4, 5, 6, 7], [0, 2, 1, 3], [4, 4], [20], list(range(21))):
        rows = np.array(rows, dtype=np.int64)
        got = f.batch(rows)
        assert len(got) == len(rows) and len(np.unique(got.positions)) == len(got.words)
        ptr, ids = table.text_bags([texts[r] for r in rows])
        ref = _text_bags(got)
        assert np.array_equal(ref.offsets, ptr) and np.array_equal(ref.ids, ids)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_in_place_tanh_equals_numpy_bit_for_bit(threads):
    """``tanh_`` (row blocks over a thread pool) gives numpy's tanh exactly, any shape."""
    from semsearch.models.neural import tanh_

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rng = np.random.default_rng(threads)
        for shape in [(0, 300), (1, 5), (4096, 300), (1001, 131), (7, 3)]:
            a = (rng.standard_normal(shape) * 3).astype(np.float32)
            x = torch.from_numpy(a.copy())
            assert tanh_(x) is x and np.array_equal(x.numpy(), np.tanh(a))
    finally:
        torch.set_num_threads(old)


def test_dssm_encoding_path_equals_the_training_forward_bit_for_bit():
    """The tower without autograd (``DSSMTower.encode``: in-place bias and tanh, addmm) gives
    the autograd forward's vectors exactly, on batches large enough for the threaded tanh."""
    rng = np.random.default_rng(1)
    words = ["red", "brick", "wall", "door", "blue", "café", "zz", "ΟΔΟΣ", "2x4"]
    texts = ODD_TEXTS + [" ".join(rng.choice(words, rng.integers(0, 12))) for _ in range(700)]
    m = create_model("dssm")  # the papers' 300 -> 300 -> 128: 700 texts x 300 take the threaded tanh
    m.build(TrigramHasher.fit(texts, max_words=8))
    x = m.features(texts).batch(np.arange(len(texts)))
    tower = m.net.d
    with torch.enable_grad():
        ref = tower(x).detach()
    for threads in (1, 2):
        old = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            with torch.inference_mode():
                assert torch.equal(tower(x), ref)
            with torch.no_grad():
                assert torch.equal(tower(x), ref)
        finally:
            torch.set_num_threads(old)


@pytest.mark.parametrize("hidden", [[40, 30], [40, 30, 50], []])
def test_dssm_encodes_per_distinct_word_as_the_trigram_tower_does(monkeypatch, hidden):
    """``DSSM._encode`` (first layer once per distinct word, ``encode_words``) gives the trigram
    tower's vectors (``DSSMTower.encode`` over each text's trigram bag) up to summation order,
    across chunks and the row batches within a chunk (whose hidden layers reuse their buffers,
    of two widths with three layers; none without hidden layers), for both towers, and for a
    query alone."""
    from semsearch.models import neural

    rng = np.random.default_rng(2)
    words = ["red", "brick", "wall", "door", "blue", "café", "zz", "ΟΔΟΣ", "2x4", "x"]
    texts = ODD_TEXTS + [" ".join(rng.choice(words, rng.integers(0, 12))) for _ in range(500)]
    m = create_model("dssm", hidden=hidden, out=20, shared=False)
    m.build(TrigramHasher.fit(texts[::3], max_words=8), seed=4)
    monkeypatch.setattr(neural, "ENCODE_CHUNK", 128)  # several chunks, each with its own words
    monkeypatch.setattr(neural, "ENCODE_ROWS", 48)  # several row batches a chunk, the last one short
    for side, tower in (("query", m.net.q), ("doc", m.net.d)):
        with torch.inference_mode():
            ref = torch.nn.functional.normalize(
                tower.encode(m.features(texts).batch(np.arange(len(texts)))), dim=1, eps=1e-12
            ).numpy()
        got = m._encode(texts, side)
        assert got.shape == ref.shape and np.allclose(got, ref, atol=1e-6), np.abs(got - ref).max()
        assert np.allclose(m._encode(texts[-1:], side), ref[-1:], atol=1e-6)
    assert m.encode_queries([]).shape == (0, 20)


@pytest.mark.parametrize("name", ["dssm", "clsm"])
def test_sparse_first_layer_gradient_steps_as_the_dense_one(name):
    """Under SGD the first layer takes a sparse gradient of the batch's vocabulary rows; it equals
    the dense one, and an SGD step with it leaves the same weights."""
    from semsearch.training.trainer import make_optimizer

    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(["red", "brick", "wall", "door"], rng.integers(1, 6))) for _ in range(20)]
    nets, grads = [], []
    for sparse in (False, True):
        m = _built(name)
        opt = make_optimizer(
            EncoderArgs(optimizer="sgd", lr=0.5) if sparse else EncoderArgs(optimizer="adam"), m.net.parameters()
        )
        if not sparse:  # Adam's parameters say dense; step them with SGD here to compare like for like
            opt = torch.optim.SGD(m.net.parameters(), lr=0.5)
        out = m.net.q(m.features(texts).batch(np.arange(len(texts))))
        out.backward(torch.ones_like(out))
        w = m.net.q.embed.weight
        assert w.grad.is_sparse == sparse and w.sparse_grad == sparse
        grads.append(w.grad.to_dense().clone())
        opt.step()
        nets.append(m.net.state_dict())
    assert torch.equal(grads[0], grads[1])
    rows = grads[0].abs().sum(1) > 0
    assert 0 < int(rows.sum()) < len(rows)  # the batch touches some rows only
    for k, v in nets[0].items():
        assert torch.allclose(v, nets[1][k], atol=1e-7, rtol=0), k
