"""Topic models (PLSA, LDA, BLTM, BLTM-PR, BLTM-PR-1V) on small generated data: MAP-EM increases
its objective, the PR projection meets its constraint, folding-in recovers a training document's
θ, the ranking formula equals a hand computation, save/load round trips, bad input stays finite."""

from __future__ import annotations

import json
import math
import random
from collections import Counter

import numpy as np
import pytest

from semsearch.models import rank
from semsearch.models import topic_em as em
from semsearch.models.topic import BLTM, PLSA, TopicModel
from semsearch.params import ParamError
from semsearch.plugins import create_model, load_model
from semsearch.text import Vocabulary
from semsearch.training import recipe
from semsearch.training.args import BLTMArgs, EMArgs, LDAArgs
from semsearch.training.topic import (
    bltm_step,
    clear_fit_memo,
    counts_matrix,
    fit_pairs,
    fit_texts,
    normalize_cols,
    plsa_step,
    pr_fractions,
)

TOPICS = 3


def synthetic_docs(n: int = 90, length: int = 8, seed: int = 0, prefix: str = "w") -> tuple[list[str], list[int]]:
    """Documents from 3 well-separated topics (6 words each), with a little cross-topic noise."""
    rng = random.Random(seed)
    docs, labels = [], []
    for i in range(n):
        k = i % TOPICS
        words = [
            f"t{k}{prefix}{rng.randrange(6)}"
            if rng.random() < 0.9
            else f"t{rng.randrange(TOPICS)}{prefix}{rng.randrange(6)}"
            for _ in range(length)
        ]
        docs.append(" ".join(words))
        labels.append(k)
    return docs, labels


def synthetic_pairs(n: int = 90, seed: int = 1) -> tuple[list[str], list[str]]:
    """Query–title pairs whose queries use a different vocabulary ("q" words) than titles ("w")."""
    titles, labels = synthetic_docs(n, 8, seed, "w")
    rng = random.Random(seed + 1)
    queries = [" ".join(f"t{k}q{rng.randrange(4)}" for _ in range(2)) for k in labels]
    return queries, titles


@pytest.fixture(autouse=True)
def _fresh_memo():
    clear_fit_memo()
    yield
    clear_fit_memo()


def trained(name: str, texts, **raw) -> tuple[TopicModel, dict]:
    """A model trained on ``texts`` (documents; (queries, titles) for BLTM) with ``raw``: model
    parameters and training arguments in one vocabulary, split by ``recipe``."""
    kw, args = recipe(name, raw)
    m = create_model(name, **kw)
    return m, (fit_pairs(m, *texts, args=args) if name == "bltm" else fit_texts(m, texts, args=args))


def _objectives(log: dict) -> np.ndarray:
    return np.array([r["objective"] for r in log["iterations"]])


# ------------------------------------------------------------------------------------------- EM
def test_plsa_map_em_objective_increases_monotonically():
    docs, _ = synthetic_docs()
    m, log = trained("plsa", docs, topics=TOPICS, iterations=40, tol=0.0, threads=2)
    obj = _objectives(log)
    assert len(obj) == 40 and np.isfinite(obj).all()
    assert (np.diff(obj) >= -1e-9 * np.abs(obj[1:])).all(), np.diff(obj)
    assert obj[-1] > obj[0]
    json.dumps(log)  # the runner stores it as JSON


@pytest.mark.parametrize("one_vocab", [False, True])
def test_bltm_map_em_objective_increases_monotonically(one_vocab):
    q, t = synthetic_pairs()
    m, log = trained("bltm", (q, t), topics=TOPICS, iterations=30, tol=0.0, one_vocab=one_vocab)
    obj = _objectives(log)
    assert (np.diff(obj) >= -1e-9 * np.abs(obj[1:])).all(), np.diff(obj)


def test_em_stops_early_with_a_message():
    docs, _ = synthetic_docs()
    _, log = trained("plsa", docs, topics=TOPICS, iterations=500, tol=1e-3)
    assert log["stopped"].startswith("converged at iteration")
    assert len(log["iterations"]) < 500


def test_threads_do_not_change_the_result():
    docs, _ = synthetic_docs()
    one, _ = trained("plsa", docs, topics=TOPICS, iterations=10, tol=0.0, threads=1)
    clear_fit_memo()  # threads are not a training parameter: the memo would hand one's result to two
    two, _ = trained("plsa", docs, topics=TOPICS, iterations=10, tol=0.0, threads=2)
    np.testing.assert_allclose(one.phi_query, two.phi_query, rtol=1e-5, atol=1e-7)


def _pair_chunks(q, t, max_nnz=50):
    vq = Vocabulary.build([s.split() for s in q])
    vd = Vocabulary.build([s.split() for s in t])
    nq, nd = counts_matrix([s.split() for s in q], vq), counts_matrix([s.split() for s in t], vd)
    bounds = em.chunk_bounds(nq.indptr + nd.indptr, max_nnz)
    return em.make_chunks(nq, bounds), em.make_chunks(nd, bounds), len(vq), len(vd)


@pytest.mark.parametrize("method,steps", [("diag", 100), ("gradient", 3000)])
def test_pr_projection_equates_topic_fractions(method, steps):
    q, t = synthetic_pairs(30)
    q[0] = ""  # a pair with an empty side is left unconstrained
    qc, dc, vq, vd = _pair_chunks(q, t)
    rng = np.random.default_rng(0)
    theta = em.normalize_rows(rng.random((30, TOPICS)) + 0.1)
    phi_q, phi_d = normalize_cols(rng.random((vq, TOPICS))), normalize_cols(rng.random((vd, TOPICS)))
    fq, fd = pr_fractions(qc, dc, theta, phi_q, phi_d, None)
    assert np.abs(fq - fd)[1:].max() > 0.05  # unprojected posteriors differ: the test has teeth
    lam = np.zeros_like(theta)
    before = theta.copy()
    *_, stats = bltm_step(
        qc, dc, theta, phi_q, phi_d, 1.1, 1.01, 1, lam=lam, pr_steps=steps, pr_tol=1e-7, pr_method=method
    )
    fq, fd = pr_fractions(qc, dc, before, phi_q, phi_d, lam)  # the E-step projected under the old θ
    assert np.abs(fq - fd)[1:].max() < 1e-4
    np.testing.assert_allclose(fq[1:].sum(axis=1), 1.0, atol=1e-9)  # fractions are distributions
    assert stats.pairs == 29 and stats.max_residual < 1e-3
    assert np.all(lam[0] == 0)


def test_bltm_pr_trains_and_logs_its_residuals():
    q, t = synthetic_pairs()
    m, log = trained("bltm", (q, t), topics=TOPICS, iterations=8, tol=0.0, pr=True, pr_steps=20)
    last = log["iterations"][-1]
    assert last["pr_residual_mean"] < 0.01 and np.isfinite(_objectives(log)).all()


def test_fold_in_recovers_a_training_documents_theta():
    docs, _ = synthetic_docs(60)
    vocab = Vocabulary.build([d.split() for d in docs])
    counts = counts_matrix([d.split() for d in docs], vocab)
    chunks = em.make_chunks(counts, em.chunk_bounds(counts.indptr, 64))
    rng = np.random.default_rng(0)
    theta, phiT = (
        em.normalize_rows(rng.random((60, TOPICS)) + 0.1),
        normalize_cols(rng.random((len(vocab), TOPICS)) + 0.1),
    )
    for _ in range(300):
        phiT, _, _ = plsa_step(chunks, theta, phiT, 1.1, 1.01, 2)  # θ in place
    phi = phiT.T  # at convergence θ is the fixed point of folding-in under φ
    folded = em.fold_in(counts, phi, 1.1, 20)
    assert np.abs(folded - theta).max() < 0.05
    folded = em.fold_in(counts, phi, 1.1, 300)
    assert np.abs(folded - theta).max() < 1e-3


def test_bltm_bridges_the_query_and_title_vocabularies():
    q, t = synthetic_pairs(120)
    m, _ = trained("bltm", (q, t), topics=TOPICS, iterations=60, mu=0.0, lam=0.1)
    titles, labels = synthetic_docs(30, seed=9)
    ids = [f"d{i}" for i in range(30)]
    m.index(ids, titles)
    for k in range(TOPICS):
        s = m.score([f"t{k}q1 t{k}q2"], [ids])[0]  # query words never seen in any title
        top = np.argsort(-s)[:5]
        assert all(labels[i] == k for i in top)


# ------------------------------------------------------------------------------------- scoring
def _toy() -> PLSA:
    docs, _ = synthetic_docs(30)
    m, _ = trained("plsa", docs, topics=TOPICS, iterations=20, mu=0.3, lam=0.2)
    m.index(["a", "b", "c", "e"], ["t0w1 t0w2 t0w1", "t1w3 t2w0", "zzz t0w1", ""])
    return m


def test_score_equals_the_formula_by_hand():
    m = _toy()
    theta, phi = m.theta.astype(np.float64), m.phi_query.astype(np.float64)
    tokens = {"a": "t0w1 t0w2 t0w1".split(), "b": "t1w3 t2w0".split(), "c": ["zzz", "t0w1"], "e": []}
    total = sum(len(v) for v in tokens.values())
    query = "t0w1 t1w3 t0w1 zzz unseen"
    for mu, lam in [(0.3, 0.2), (0.0, 0.5), (1.0, 0.1), (0.7, 0.9)]:
        got = m.with_params(mu=mu, lam=lam).score([query], [["a", "b", "c", "e"]])[0]
        for j, d in enumerate(["a", "b", "c", "e"]):
            want = 0.0
            for w in query.split():
                cf = sum(v.count(w) for v in tokens.values())
                p_c = max(cf, 0.5) / total
                p_ml = tokens[d].count(w) / len(tokens[d]) if tokens[d] else 0.0
                p_t = float(theta[j] @ phi[:, m.query_vocab.ids[w]]) if w in m.query_vocab else 0.0
                want += math.log(lam * p_c + (1 - lam) * (mu * p_ml + (1 - mu) * p_t))
            assert got[j] == pytest.approx(want, rel=1e-9), (mu, lam, d)


def test_with_params_changes_only_the_mixture_and_shares_the_model():
    m = _toy()
    other = m.with_params(mu=0.0)
    assert other.params() == {"mu": 0.0, "lam": 0.2} and m.params() == {"mu": 0.3, "lam": 0.2}
    assert other.theta is m.theta and other.phi_query is m.phi_query
    with pytest.raises(ValueError, match="training parameters"):
        m.with_params(topics=5)
    for bad in ({"mu": 1.5}, {"lam": 0.0}, {"lam": 1.0}, {"mu": -0.1}):
        with pytest.raises(ValueError):
            m.with_params(**bad)


def test_rank_and_retrieve():
    m = _toy()
    run = rank(m, {"q": "t0w1"}, {"q": ["b", "a", "c"]})
    assert max(run["q"], key=run["q"].get) == "a"
    hits = m.retrieve(["t0w1"], 2)[0]
    assert [d for d, _ in hits][0] == "a" and len(hits) == 2


# ---------------------------------------------------------------------------------- bad inputs
def test_empty_queries_and_documents_score_finite():
    m = _toy()
    s = m.score(["", "   ", "t0w1"], [["a", "e"], ["e"], ["e", "a"]])
    assert s[0].tolist() == [0.0, 0.0] and s[1].tolist() == [0.0]
    assert np.isfinite(s[2]).all() and s[2][1] > s[2][0]  # the empty title still has a topic mixture
    np.testing.assert_allclose(m.theta[3], 1.0 / TOPICS, rtol=1e-6)  # empty title: the prior's mode


def test_query_with_no_known_word_falls_back_to_the_background():
    m = _toy()
    s = m.score(["nothing known here"], [["a", "b", "c", "e"]])[0]
    assert np.isfinite(s).all() and np.ptp(s) == 0.0
    total = m.lexical_index.cf.sum()
    assert s[0] == pytest.approx(3 * math.log(0.2 * 0.5 / total))


def test_unknown_candidate_is_a_clear_error():
    with pytest.raises(ValueError, match="not in the indexed collection"):
        _toy().score(["t0w1"], [["nope"]])


@pytest.mark.parametrize("name", ["plsa", "bltm"])
def test_too_many_topics_is_a_clear_error(name):
    m = create_model(name, topics=50)
    with pytest.raises(ValueError, match="50 topics but the training data has only"):
        fit_pairs(m, ["a b", "c"], ["x y", "z"]) if name == "bltm" else fit_texts(m, ["x y", "z", ""])


def test_bad_parameters_are_rejected():
    with pytest.raises(ValueError, match="alpha >= 1"):
        create_model("plsa", alpha=0.5)
    with pytest.raises(ValueError, match="no parameter 'topic'"):
        create_model("bltm", topic=5)
    with pytest.raises(ValueError, match="'topics' must be >= 1"):
        create_model("plsa", topics=0)
    with pytest.raises(RuntimeError, match="not trained"):
        create_model("plsa").index(["a"], ["x"])


def test_training_data_with_empty_texts_has_no_nans():
    q, t = synthetic_pairs(30)
    q[:5] = [""] * 5
    t[5:8] = ["!!!"] * 3
    q[8], t[8] = "", ""
    m, log = trained("bltm", (q, t), topics=TOPICS, iterations=5, pr=True)
    assert log["dropped_empty"] == 1 and np.isfinite(_objectives(log)).all()
    assert np.isfinite(m.phi_query).all() and np.isfinite(m.arrays["phi_doc"]).all()


# -------------------------------------------------------------------------------- persistence
@pytest.mark.parametrize("params", [{}, {"pr": True}, {"pr": True, "one_vocab": True}])
def test_bltm_save_load_round_trip(tmp_path, params):
    q, t = synthetic_pairs(45)
    m, _ = trained("bltm", (q, t), topics=TOPICS, iterations=5, mu=0.4, lam=0.3, **params)
    unindexed = tmp_path / "trained"
    m.save(unindexed)
    ids = [f"d{i}" for i in range(len(t))]
    m.index(ids, t)
    m.save(tmp_path / "m")
    for path in (tmp_path / "m", unindexed):
        back = load_model(path)
        assert isinstance(back, BLTM) and back.p == m.p and back.params() == m.params()
        if path == unindexed:
            back.index(ids, t)
        for query in ["t0q1 t1q2", "t2w3", "", "never seen"]:
            np.testing.assert_array_equal(back.score([query], [ids])[0], m.score([query], [ids])[0])
    assert not list(tmp_path.rglob("*.pkl"))


def test_untrained_model_saves_its_config(tmp_path):
    create_model("plsa", topics=7).save(tmp_path / "u")
    back = load_model(tmp_path / "u")
    assert isinstance(back, TopicModel) and back.topics == 7 and not back.trained


def test_lda_fold_in_matches_gensim_inference(tmp_path):
    pytest.importorskip("gensim")
    docs, labels = synthetic_docs(60)
    m, log = trained("lda", docs, topics=TOPICS, passes=5, fold_iterations=500, mu=0.0)
    assert len(log["iterations"]) == 5 and np.isfinite(_objectives(log)).all()
    from gensim.models import LdaModel

    lda = LdaModel(
        num_topics=TOPICS,
        id2word=dict(enumerate(m.doc_vocab.terms)),
        alpha=m.arrays["alpha"],
        eta=0.01,
        random_state=0,
        gamma_threshold=1e-8,
        iterations=500,
    )
    lda.state.sstats[...] = m.arrays["lambda"] - 0.01
    lda.sync_state()
    bows = [[(m.doc_vocab.ids[w], c) for w, c in sorted(Counter(d.split()).items())] for d in docs[:10]]
    gamma, _ = lda.inference(bows)
    ours = m.fold_in(docs[:10])
    np.testing.assert_allclose(ours, gamma / gamma.sum(axis=1, keepdims=True), atol=5e-3)
    m.index([f"d{i}" for i in range(60)], docs)
    m.save(tmp_path / "lda")
    back = load_model(tmp_path / "lda")
    np.testing.assert_array_equal(back.score(["t1w2"], [["d0", "d1"]])[0], m.score(["t1w2"], [["d0", "d1"]])[0])


# ------------------------------------------------------------------------------------- runner
def test_topic_rows_in_an_experiment_spec(tiny_data, tmp_path):
    from semsearch.experiments import load_spec, run_experiment

    spec = tmp_path / "topic.toml"
    spec.write_text("""
name = "tiny-topic"
title = "t"
source = "test"
dataset = "tiny"
split = "test"
candidates = "judged"
fields = "title"
metrics = ["ndcg@1", "ndcg@3"]
tune = "split:dev"
baselines = ["PLSA (mu = 0)"]

[[models]]
label = "PLSA (mu = 0)"
model = "plsa"
params = { topics = 3, iterations = 10, mu = 0.0 }
train = { split = "train", threshold = 2, fields = "title" }
grid = { lam = [0.2, 0.5] }

[[models]]
label = "PLSA"
model = "plsa"
params = { topics = 3, iterations = 10 }
train = { split = "train", threshold = 2, fields = "title" }
grid = { mu = [0.3, 0.9], lam = [0.2, 0.5] }

[[models]]
label = "BLTM-PR"
model = "bltm"
params = { topics = 3, iterations = 10, pr = true }
train = { split = "train", threshold = 2, fields = "title" }
grid = { mu = [0.3, 0.9] }
""")
    result = run_experiment(load_spec(spec), progress=False, model_dir=tmp_path / "models")
    assert list(result.table.rows) == ["PLSA (mu = 0)", "PLSA", "BLTM-PR"]
    assert "reused" in result.training["PLSA"]  # the same training run as the mu = 0 row
    assert result.chosen["PLSA (mu = 0)"][0]["mu"] == 0.0 and len(result.tuning["PLSA"]) == 4
    for row in result.table.rows.values():
        assert all(np.isfinite(v) for v in row.result.mean.values())
    json.dumps(result.to_json())
    saved = [p.parent for p in (tmp_path / "models").rglob("config.json")]
    assert len(saved) == 3 and sum(isinstance(load_model(p), BLTM) for p in saved) == 1


def test_large_candidate_lists_take_the_column_path_with_equal_scores():
    docs, _ = synthetic_docs(1200, length=4, seed=3)
    m, _ = trained("plsa", docs[:90], topics=TOPICS, iterations=5)
    ids = [f"d{i}" for i in range(1200)]
    m.index(ids, docs)
    full = m.score(["t0w1 t2w3 t0w1"], [ids])[0]  # > 1000 candidates
    parts = np.concatenate([m.score(["t0w1 t2w3 t0w1"], [ids[i : i + 400]])[0] for i in range(0, 1200, 400)])
    np.testing.assert_allclose(full, parts, rtol=1e-12)
    assert [d for d, _ in m.retrieve(["t0w1 t2w3"], 5)[0]] == [
        ids[i] for i in np.lexsort((np.arange(1200), -m.score(["t0w1 t2w3"], [ids])[0]))[:5]
    ]


@pytest.mark.parametrize(
    "kind,raw,name",
    [
        ("plsa", {"topcs": 5}, "topcs"),
        ("plsa", {"topics": 2.5}, "topics"),
        ("plsa", {"tol": -1.0}, "tol"),
        ("plsa", {"beta": 0.5}, "beta"),
        ("bltm", {"pr_method": "newton"}, "pr_method"),
        ("bltm", {"pr": "yes"}, "pr"),
        ("bltm", {"pr_steps": -1}, "pr_steps"),
        ("lda", {"eta": 0.0}, "eta"),
        ("lda", {"alpha": -1.0}, "alpha"),
        ("lda", {"passes": 0}, "passes"),
        ("plsa", {"mu": 2.0}, "mu"),
        ("plsa", {"threads": 0}, "threads"),
    ],
)
def test_bad_parameters_name_themselves(kind, raw, name):
    with pytest.raises(ParamError, match=f"'{name}'"):
        recipe(kind, raw)


def test_recipe_splits_model_parameters_from_training_arguments():
    raw = {
        "topics": 50,
        "alpha": 1.2,
        "mu": 0.3,
        "one_vocab": True,
        "iterations": 7,
        "pr": True,
        "seed": 4,
        "beta": 1.1,
    }
    kw, args = recipe("bltm", raw)
    assert kw == {"topics": 50, "alpha": 1.2, "mu": 0.3, "one_vocab": True}
    assert args == BLTMArgs(iterations=7, pr=True, seed=4, beta=1.1)
    assert recipe("plsa", {"min_iterations": 3, "fold_iterations": 5}) == (
        {"fold_iterations": 5},
        EMArgs(min_iterations=3),
    )
    assert recipe("lda", {"passes": 2, "alpha": 0.5}) == ({"alpha": 0.5}, LDAArgs(passes=2))


def test_a_model_saved_before_typed_parameters_still_loads(tmp_path):
    """config.json of the old layout: mixture under "params", the analyzer apart, training keys under "train"."""
    q, t = synthetic_pairs(45)
    m, _ = trained("bltm", (q, t), topics=TOPICS, iterations=5, mu=0.4, lam=0.3, pr=True)
    m.save(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(
        json.dumps(
            {
                "model": "bltm",
                "params": {"mu": 0.4, "lam": 0.3},
                "analyzer": {"stem": None, "stopwords": False},
                "train": {
                    "topics": TOPICS,
                    "iterations": 5,
                    "min_iterations": 20,
                    "tol": 1e-3,
                    "alpha": 1.1,
                    "beta": 1.01,
                    "pr": True,
                    "one_vocab": False,
                    "pr_steps": 10,
                    "pr_tol": 1e-3,
                    "pr_method": "diag",
                    "min_count": 1,
                    "fold_iterations": 20,
                    "seed": 0,
                },
                "trained": True,
            }
        )
    )
    back = load_model(tmp_path / "m")
    assert isinstance(back, BLTM) and back.params() == m.params() and back.topics == TOPICS
    ids = [f"d{i}" for i in range(len(t))]
    back.index(ids, t)
    m.index(ids, t)
    np.testing.assert_array_equal(back.score(["t0q1 t1q2"], [ids])[0], m.score(["t0q1 t1q2"], [ids])[0])
