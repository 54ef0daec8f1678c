"""Projection models (LSA, CL-LSA, OPCA, S2Net) on tiny generated pairs."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import scipy.sparse as sp

from semsearch.data import EvalSet, TrainingData
from semsearch.models.projection import ProjectionModel, tfidf_matrix
from semsearch.params import ParamError
from semsearch.plugins import create_model, load_model
from semsearch.training import fit, recipe
from semsearch.training.args import OPCAArgs, PCAArgs, S2NetArgs
from semsearch.training.projection import opca_matrices, pca

TOPICS = {
    "sofa": ["couch", "sofa", "sectional", "loveseat"],
    "tv": ["television", "tv", "screen", "hdtv"],
    "fridge": ["refrigerator", "fridge", "freezer", "ice"],
    "drill": ["drill", "driver", "cordless", "bit"],
    "paint": ["paint", "primer", "gallon", "interior"],
}
FILLER = ["black", "white", "steel", "wood", "large", "small", "set", "pack", "new", "pro"]


def _pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        topic = rnd.choice(list(TOPICS))
        words = TOPICS[topic]
        query = " ".join(rnd.sample(words, 2)) + (f" {i % 40}" if rnd.random() < 0.3 else "")
        title = " ".join(rnd.sample(words, 2) + rnd.sample(FILLER, 3))
        out.append((query, title))
    return out


@pytest.fixture(scope="module", autouse=True)
def _one_blas_thread():
    """Oversubscribed BLAS threads on a shared machine are many times slower than one."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        yield
        return
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def data() -> TrainingData:
    return TrainingData.from_pairs(_pairs(300, 0))


@pytest.fixture(scope="module")
def dev(data) -> EvalSet:
    """Dev queries with the pool's titles as candidates: a title on the query's topic is relevant."""
    rnd = random.Random(1)
    queries, cands, qrels = {}, {}, {}
    for i, (_topic, words) in enumerate(TOPICS.items()):
        q = f"dq{i}"
        queries[q] = " ".join(rnd.sample(words, 2))
        docs = rnd.sample(range(len(data.doc_ids)), 12)
        cands[q] = [data.doc_ids[j] for j in docs]
        qrels[q] = {data.doc_ids[j]: int(any(w in data.doc_texts[j].split() for w in words)) for j in docs}
    return EvalSet(queries, cands, qrels)


def trained_model(name: str, data, dev=None, **raw) -> tuple[ProjectionModel, dict]:
    """A model of kind ``name`` trained with ``raw`` (model parameters and training arguments)."""
    kw, args = recipe(name, raw)
    m = create_model(name, **kw)
    return m, fit(m, data, dev, args=args, progress=False)


@pytest.fixture(scope="module")
def trained(data, dev) -> dict[str, ProjectionModel]:
    raws = {
        "lsa": {"dim": 6},
        "cl-lsa": {"dim": 6},
        "opca": {"dim": 6, "reduce": 12},
        "s2net": dict(dim=6, epochs=6, patience=6, batch_size=64, lr=0.01),
    }
    models = {}
    for name, raw in raws.items():
        m, log = trained_model(name, data, dev, **raw)
        m.fit_log = log  # type: ignore[attr-defined]
        m.index(data.doc_ids, data.doc_texts)
        models[name] = m
    return models


# -- PCA and OPCA algebra -------------------------------------------------------------------------
def test_pca_dense_path_is_orthonormal_and_solves_the_eigen_equation():
    X = sp.random(60, 25, density=0.3, random_state=1, format="csr")
    A, var = pca(X, 5)
    np.testing.assert_allclose(A.T @ A, np.eye(5), atol=1e-10)
    Xd = X.toarray()
    C = np.cov(Xd, rowvar=False, bias=True)
    np.testing.assert_allclose(C @ A, A * var, atol=1e-10)  # C a = λ a
    assert (np.diff(var) <= 1e-12).all()
    assert (A[np.argmax(np.abs(A), axis=0), np.arange(5)] > 0).all()  # deterministic signs


@pytest.mark.parametrize("method", ["randomized", "arpack"])
def test_pca_sparse_paths_agree_with_the_dense_solution(method):
    X = sp.random(400, 300, density=0.02, random_state=2, format="csr")
    A, var = pca(X, 8, method=method)
    np.testing.assert_allclose(A.T @ A, np.eye(8), atol=1e-8)
    C = np.cov(X.toarray(), rowvar=False, bias=True)
    evals = np.linalg.eigvalsh(C)[::-1][:8]
    np.testing.assert_allclose(var, evals, rtol=1e-3)
    np.testing.assert_allclose(C @ A, A * var, atol=1e-4)
    with pytest.raises(ValueError, match="method"):
        pca(X, 2, method="magic")


def test_opca_solves_the_generalised_eigenproblem(trained, data):
    m = trained["opca"]
    queries, titles = data.pair_texts()
    Xq, Xd = m.tfidf(queries), m.tfidf(titles)
    U, _ = pca(sp.vstack([Xq, Xd]).tocsr(), 12)
    C, N, eps = opca_matrices(Xq, Xd, U, 0.3)
    B = N + eps * np.eye(U.shape[1])
    W = U.T @ m.A.astype(np.float64)  # the directions, in the reduced coordinates
    lam = np.diag(W.T @ C @ W)
    np.testing.assert_allclose(C @ W, B @ W * lam, atol=1e-4)  # C w = λ (N + εI) w
    np.testing.assert_allclose(W.T @ B @ W, np.eye(W.shape[1]), atol=1e-4)  # eigh's scaling
    assert (np.diff(lam) <= 1e-6).all()
    # OPCA's directions separate a query from its title less than LSA's do (smaller noise share)
    noise, signal = (Xq - Xd).T @ (Xq - Xd), sp.vstack([Xq, Xd]).T @ sp.vstack([Xq, Xd])

    def noise_share(A: np.ndarray) -> float:
        A = A / np.linalg.norm(A, axis=0)
        return float(np.trace(A.T @ (noise @ A)) / np.trace(A.T @ (signal @ A)))

    assert noise_share(m.A.astype(np.float64)) < noise_share(trained["lsa"].A.astype(np.float64))


def test_lsa_and_cl_lsa_are_orthonormal(trained):
    for name in ("lsa", "cl-lsa"):
        A = trained[name].A.astype(np.float64)
        np.testing.assert_allclose(A.T @ A, np.eye(A.shape[1]), atol=1e-5)


def test_tfidf_rows_are_unit_or_zero():
    X = tfidf_matrix([[0, 1, 1], [], [2]], np.array([1.0, 2.0, 0.5]))
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    np.testing.assert_allclose(norms, [1.0, 0.0, 1.0])


# -- S2Net ---------------------------------------------------------------------------------------
def test_s2net_loss_decreases_and_logs_timing(trained):
    log = trained["s2net"].fit_log
    losses = [e["loss"] for e in log["epochs"]]
    assert len(losses) == 6 and losses[-1] < losses[0]
    assert all(e["seconds"] > 0 and e["pairs_per_s"] > 0 for e in log["epochs"])
    assert log["seconds_per_epoch"] > 0 and "dev_ndcg@10" in log["epochs"][0]
    assert 0 <= log["best_epoch"] <= 6 and log["init"] == "lsa"


def test_s2net_early_stops_on_dev(data, dev):
    _, log = trained_model("s2net", data, dev, dim=4, epochs=30, patience=1, batch_size=64, lr=0.05)
    assert len(log["epochs"]) < 30 and log["stopped"].startswith("early stop")
    _, log = trained_model("s2net", data, dim=4, epochs=2, batch_size=128)
    assert log["best_epoch"] == 2 and log["best_dev_ndcg10"] is None


def test_s2net_checkpoint_resume_gives_the_same_projection(data, dev, tmp_path):
    raw = dict(dim=4, epochs=3, patience=3, batch_size=64, lr=0.05)
    whole, _ = trained_model("s2net", data, dev, **raw)
    kw, args = recipe("s2net", {**raw, "epochs": 2})
    part = create_model("s2net", **kw)
    fit(part, data, dev, args=args, progress=False, checkpoint_dir=tmp_path / "ck")
    resumed = create_model("s2net", **kw)
    log = fit(
        resumed, data, dev, args=args.replace(epochs=3), progress=False, checkpoint_dir=tmp_path / "ck", resume=True
    )
    assert [e["epoch"] for e in log["epochs"]][-1] == 3
    np.testing.assert_array_equal(resumed.A, whole.A)


# -- ranking, bad input, persistence -------------------------------------------------------------------
@pytest.mark.parametrize("name", ["lsa", "cl-lsa", "opca", "s2net"])
def test_scores_are_cosines_and_rank_the_topic_first(name, trained, data):
    m = trained[name]
    sofa = [d for d, t in zip(data.doc_ids, data.doc_texts) if "couch" in t.split() and "sofa" in t.split()][:3]
    fridge = [d for d, t in zip(data.doc_ids, data.doc_texts) if "refrigerator" in t.split()][:3]
    (s,) = m.score(["sofa couch"], [sofa + fridge])
    assert np.all(np.abs(s) <= 1 + 1e-6)
    assert s[:3].min() > s[3:].max()
    Q = m.encode_queries(["sofa couch", "tv"])
    assert Q.dtype == np.float32 and Q.shape == (2, 6)
    np.testing.assert_allclose(np.linalg.norm(Q, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("name", ["lsa", "s2net"])
def test_bad_input(name, trained, data):
    m = trained[name]
    docs = data.doc_ids[:5]
    for q in ["", "!!!", "zebra quokka"]:
        (s,) = m.score([q], [docs])
        assert np.isfinite(s).all() and (s == 0).all(), q  # no known term: a zero vector, cosine 0
    empty = create_model(name) if name == "lsa" else None
    if empty is not None:
        with pytest.raises(RuntimeError, match="not trained"):
            empty.encode_queries(["sofa"])
    clone = load_like(m)
    clone.index(["e1", "e2"], ["", "sofa couch"])
    (s,) = clone.score(["sofa"], [["e1", "e2"]])
    assert np.isfinite(s).all() and s[0] == 0
    with pytest.raises(ValueError, match="not in the indexed collection"):
        m.score(["sofa"], [["nope"]])
    with pytest.raises(ValueError, match="duplicate"):
        clone.index(["x", "x"], ["a", "b"])


def load_like(m: ProjectionModel) -> ProjectionModel:
    clone = type(m)(dim=m.p.dim)
    clone.vocab, clone.idf, clone.A = m.vocab, m.idf, m.A
    return clone


def test_no_overlap_vocabulary_fails_clearly():
    data = TrainingData.from_pairs([("!!", "??"), ("...", "--")])
    with pytest.raises(ValueError, match="no terms"):
        trained_model("lsa", data, dim=2)


def test_unknown_settings_are_rejected():
    with pytest.raises(ValueError, match="no parameter 'gamma'"):
        create_model("lsa", gamma=3)
    with pytest.raises(ValueError, match="no parameters"):
        create_model("lsa").with_params(alpha=0.3)


@pytest.mark.parametrize(
    "kind,raw,name",
    [
        ("lsa", {"dims": 5}, "dims"),
        ("opca", {"dim": 0}, "dim"),
        ("opca", {"reg": -1.0}, "reg"),
        ("s2net", {"gamma": "ten"}, "gamma"),
        ("s2net", {"negatives": 0}, "negatives"),
        ("cl-lsa", {"seed": 1.5}, "seed"),
        ("s2net", {"optimizer": "lbfgs"}, "optimizer"),
        ("lsa", {"analyzer": "klingon"}, "analyzer"),
    ],
)
def test_bad_parameters_name_themselves(kind, raw, name):
    with pytest.raises(ParamError, match=f"'{name}'"):
        recipe(kind, raw)


def test_recipe_splits_model_parameters_from_training_arguments():
    kw, args = recipe("s2net", {"dim": 8, "max_terms": 500, "analyzer": "english", "gamma": 5, "epochs": 2, "seed": 3})
    assert kw == {"dim": 8, "max_terms": 500, "analyzer": "english"}
    assert args == S2NetArgs(gamma=5.0, epochs=2, seed=3) and args.lr == 0.01 and args.optimizer == "adam"
    assert args.min_delta == 1e-5
    assert recipe("opca", {"reduce": 50, "dim": 10}) == ({"dim": 10}, OPCAArgs(reduce=50))
    assert recipe("cl-lsa", {}) == ({}, PCAArgs())


def test_a_model_saved_before_typed_parameters_still_loads(trained, data, tmp_path):
    """config.json of the old layout: the analyzer apart, training settings among "settings"."""
    m = trained["s2net"]
    m.save(tmp_path / "s2")
    (tmp_path / "s2" / "config.json").write_text(
        json.dumps(
            {
                "model": "s2net",
                "analyzer": {"stem": None, "stopwords": False},
                "settings": {
                    "dim": 6,
                    "max_terms": 40000,
                    "seed": 0,
                    "gamma": 10.0,
                    "negatives": 4,
                    "epochs": 6,
                    "patience": 6,
                    "batch_size": 64,
                    "lr": 0.01,
                },
            }
        )
    )
    back = load_model(tmp_path / "s2")
    assert back.analyzer == m.analyzer and (back.p.dim, back.p.max_terms) == (6, 40000)
    np.testing.assert_array_equal(back.encode_queries(["sofa couch"]), m.encode_queries(["sofa couch"]))


@pytest.mark.parametrize("name", ["lsa", "cl-lsa", "opca", "s2net"])
def test_save_load_round_trip(name, trained, data, tmp_path):
    m = trained[name]
    m.save(tmp_path / name)
    assert not list((tmp_path / name).glob("*.pkl"))
    back = load_model(tmp_path / name)
    assert type(back) is type(m) and back.config() == m.config()
    cands = data.doc_ids[:8]
    for a, b in zip(back.score(["sofa couch", ""], [cands, cands]), m.score(["sofa couch", ""], [cands, cands])):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert back.retrieve(["tv screen"], 3) == m.retrieve(["tv screen"], 3)


def test_retrieve_is_sorted_and_ties_break_by_id(trained, data):
    m = trained["lsa"]
    hits = m.retrieve(["tv screen", ""], 5)
    scores = [s for _, s in hits[0]]
    assert scores == sorted(scores, reverse=True) and len(hits[0]) == 5
    assert [d for d, _ in hits[1]] == sorted(data.doc_ids)[:5]  # all zero: id order
