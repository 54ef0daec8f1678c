"""LambdaMART learning to rank: features, training, importance, persistence, the runner's LTR row."""

from __future__ import annotations

import json

import numpy as np
import pytest

from semsearch.data import EvalSet, open_dataset
from semsearch.experiments import load_spec, run_experiment
from semsearch.experiments.spec import SpecError
from semsearch.models import ModelDirError, rank
from semsearch.params import ParamError
from semsearch.plugins import create_model, load_model
from semsearch.ranking import LambdaMART, LambdaMARTParams, LambdaMARTRanker, groups, pair_columns, run_columns
from semsearch.training.ranker import cross_validated, fit_ranker, train_booster

FAST = {"num_boost_round": 40, "min_data_in_leaf": 5, "num_leaves": 7, "early_stopping": 10}


def _synthetic(n_queries: int = 60, per: int = 12, seed: int = 0):
    """Feature 'signal' decides the label (0-3); 'noise_a' and 'noise_b' are random."""
    rng = np.random.default_rng(seed)
    cands = {f"q{i}": [f"d{i}_{j}" for j in range(per)] for i in range(n_queries)}
    signal = rng.normal(size=n_queries * per)
    X = np.column_stack([rng.normal(size=len(signal)), signal, rng.normal(size=len(signal))])
    labels = np.digitize(signal + 0.3 * rng.normal(size=len(signal)), [-0.5, 0.5, 1.2])
    qrels = {}
    r = 0
    for q, docs in cands.items():
        qrels[q] = {}
        for d in docs:
            qrels[q][d] = int(labels[r])
            r += 1
    return groups(cands, X, qrels)


def test_groups_runs_and_columns():
    cands = {"a": ["x", "y"], "b": [], "c": ["z"]}
    X = run_columns([{"a": {"x": 2.0}, "c": {"z": 1.0}}, {}], cands)
    assert X.tolist() == [[2.0, 0.0], [2.0, 0.0], [1.0, 0.0]]  # a missing doc takes the query's lowest score
    g = groups(cands, X, {"a": {"y": 3}})
    assert g.qids == ["a", "c"] and g.y.tolist() == [0, 3, 0] and g.sizes.tolist() == [2, 1]
    assert g.subset(["c"]).docs == ["z"] and g.to_run(np.array([1.0, 2.0, 3.0])) == {
        "a": {"x": 1.0, "y": 2.0},
        "c": {"z": 3.0},
    }
    with pytest.raises(ValueError, match="feature rows"):
        groups(cands, X[:2])
    P = pair_columns(["query_words", "doc_words", "query_coverage"], ["red door", ""], [["red wall x"], ["a"]])
    assert P.tolist() == [[2, 3, 0.5], [0, 1, 0.0]]
    with pytest.raises(ValueError, match="unknown pair features"):
        pair_columns(["length"], ["a"], [["b"]])


def test_informative_feature_ranks_first_and_beats_noise():
    g = _synthetic()
    train, dev = g.subset(g.qids[:40]), g.subset(g.qids[40:])
    ranker = LambdaMART(["noise_a", "signal", "noise_b"], **FAST)
    log = train_booster(ranker, train, dev)
    imp = ranker.importance()
    assert max(imp, key=lambda n: imp[n]["gain"]) == "signal" and imp["signal"]["gain"] > 0.5
    assert sum(v["gain"] for v in imp.values()) == pytest.approx(1.0)
    assert log["rounds_by"] == "dev early stopping" and 1 <= log["trees"] <= 40 and log["held-out ndcg@10"] > 0.8
    s = ranker.predict(dev)
    assert np.corrcoef(s, dev.X[:, 1])[0, 1] > 0.8
    cv_log = train_booster(LambdaMART(["noise_a", "signal", "noise_b"], **FAST), train, cv_folds=3)
    assert cv_log["rounds_by"] == "3-fold CV" and cv_log["held-out ndcg@10"] > 0.8


def test_lambdamart_save_load_and_errors(tmp_path):
    g = _synthetic(20)
    ranker = LambdaMART(["noise_a", "signal", "noise b/c"], **FAST)
    train_booster(ranker, g)
    ranker.save(tmp_path / "r")
    back = LambdaMART.load(tmp_path / "r")
    assert back.feature_names == ["noise_a", "signal", "noise b/c"]
    assert np.array_equal(back.predict(g), ranker.predict(g))
    with pytest.raises(ValueError, match="feature columns"):
        back.predict(groups({"q": ["a"]}, g.X[:1, :2]))
    with pytest.raises(ParamError, match="lambdamart has no parameter 'trees'"):
        LambdaMART(["a"], trees=3)
    with pytest.raises(ParamError, match=r"no parameter 'num_leafs' \(did you mean 'num_leaves'\?\)"):
        LambdaMART(["a"], num_leafs=3)
    with pytest.raises(ParamError, match="lambdamart parameter 'learning_rate' must be > 0, got 0"):
        LambdaMART(["a"], learning_rate=0)
    with pytest.raises(ParamError, match="lambdamart parameter 'num_boost_round' must be a whole number, got 'many'"):
        LambdaMART(["a"], num_boost_round="many")
    with pytest.raises(ValueError, match="unique"):
        LambdaMART(["a", "a"])
    (tmp_path / "r" / "lambdamart.txt").write_text("not a model")
    with pytest.raises(ModelDirError):
        LambdaMART.load(tmp_path / "r")


def test_query_zscore_columns():
    g = groups({"a": ["x", "y", "z"], "b": ["w"]}, np.array([[1.0, 5.0], [2.0, 5.0], [3.0, 5.0], [7.0, 1.0]]))
    r = LambdaMART(["f", "g"], query_norm="zscore")
    assert r.columns == ["f", "g", "f (query z-score)", "g (query z-score)"]
    Z = r.matrix(g)[:, 2:]
    assert np.allclose(Z[:3, 0], [-1.2247, 0.0, 1.2247], atol=1e-4) and np.all(Z[:, 1] == 0) and Z[3, 0] == 0
    with pytest.raises(ParamError, match="lambdamart parameter 'query_norm' must be one of 'none', 'zscore'"):
        LambdaMART(["f"], query_norm="rank")


def test_group_stats_columns(tmp_path):
    g = groups({"a": ["x", "y", "z"], "b": ["w"]}, np.array([[1.0, 5.0], [3.0, 5.0], [2.0, 4.0], [7.0, 1.0]]))
    r = LambdaMART(["f", "g"], group_stats=["rank", "min", "median", "max"])
    assert r.columns[2:4] == ["f (query rank)", "g (query rank)"] and r.columns[-1] == "g (query max)"
    M = r.matrix(g)
    assert M[:, 2].tolist() == [3, 1, 2, 1] and M[:, 3].tolist() == [1, 1, 3, 1]  # ties share the best rank
    assert M[:, 4].tolist() == [1, 1, 1, 7] and M[:, 6].tolist() == [2, 2, 2, 7] and M[:, 9].tolist() == [5, 5, 5, 1]
    assert r.base_feature("g (query median)") == "g"
    # saved and loaded with its columns; training uses them
    s = _synthetic(40)
    r = LambdaMART(["noise_a", "signal", "noise_b"], query_norm="zscore", group_stats=["rank", "max"], **FAST)
    train_booster(r, s.subset(s.qids[:30]), s.subset(s.qids[30:]))
    r.save(tmp_path / "r")
    back = LambdaMART.load(tmp_path / "r")
    assert back.columns == r.columns and len(r.columns) == 12 and np.array_equal(back.predict(s), r.predict(s))
    with pytest.raises(ParamError, match="group_stats.*unknown \\['mean'\\]"):
        LambdaMART(["f"], group_stats=["mean"])
    with pytest.raises(
        ParamError, match="group_stats.*unknown \\['mean'\\]"
    ):  # refused with the ranker's parameters (specs, CLI)
        LambdaMARTParams.from_mapping({"features": ["bm25"], "group_stats": ["mean"]})


def test_match_features():
    from semsearch.ranking import MATCH_FEATURES

    q = ["milwaukee 18 volt drills", "something to kill weeds", ""]
    docs = [["Milwaukee M18 18-Volt Cordless Drill", "DEWALT 20-Volt Drill"], ["Roundup 1 gal. Weed Killer"], ["x"]]
    P = pair_columns(list(MATCH_FEATURES), q, docs)
    f = {n: P[:, j].tolist() for j, n in enumerate(MATCH_FEATURES)}
    assert f["stem_coverage"][:2] == [1.0, 0.5]  # milwauke, 18, volt, drill (stemmed: drills = drill)
    assert f["bigram_overlap"][:2] == [1 / 3, 0.0]  # ("18", "volt") in the first; ("volt", "drills") in neither
    assert f["numbers_matched"][:3] == [1.0, 0.0, 0.0] and f["numbers_missing"][:3] == [0.0, 1.0, 0.0]
    assert f["brand_match"][:2] == [1.0, 0.0] and f["first_word_match"][:2] == [1.0, 0.0]
    assert f["stem_coverage"][2] == 1 / 3  # someth, kill, weed: only weed (killer stems to killer)
    assert f["edit_similarity"][0] > f["edit_similarity"][1] > 0 and P[3].tolist() == [0.0] * len(MATCH_FEATURES)
    # the ranker's parameters accept them
    LambdaMARTRanker.from_models({}, pair_features=["query_coverage", "numbers_missing"])


def test_prior_features_start_boosting_from_their_zscore_sum(tmp_path):
    g = _synthetic(40)
    names = ["noise_a", "signal", "noise_b"]
    r = LambdaMART(names, prior_features=["signal", "noise_b"], **FAST)
    Z = LambdaMART(names, query_norm="zscore").matrix(g)[:, 3:]
    assert np.allclose(r.prior(g), Z[:, 1] + Z[:, 2])
    train_booster(r, g.subset(g.qids[:30]), g.subset(g.qids[30:]))
    # the booster's trees are corrections added to the prior, also after a save and load
    assert np.allclose(r.predict(g), r.booster.predict(g.X, num_iteration=r.best_iteration) + r.prior(g))
    r.save(tmp_path / "r")
    back = LambdaMART.load(tmp_path / "r")
    assert back.params["prior_features"] == ["signal", "noise_b"] and np.array_equal(back.predict(g), r.predict(g))
    assert not LambdaMART(names).prior(g).any()
    for bad in (["length"], "signal", [1]):
        with pytest.raises(ValueError, match="prior_features"):
            LambdaMART(names, prior_features=bad)


def test_cross_validated_covers_every_query():
    g = _synthetic(30)
    run, logs = cross_validated(g, ["noise_a", "signal", "noise_b"], k=3, **FAST)
    assert sorted(run) == sorted(g.qids) and len(logs) == 3
    assert sum(log["test_queries"] for log in logs) == 30 and {log["rounds_by"] for log in logs} == {"fixed"}
    nested, inner = cross_validated(g, ["noise_a", "signal", "noise_b"], k=3, inner_folds=2, **FAST)
    assert sorted(nested) == sorted(g.qids) and {log["rounds_by"] for log in inner} == {"2-fold CV"}
    assert all(1 <= log["trees"] <= FAST["num_boost_round"] for log in inner)


def _ranker(tiny_data, **kw):
    ds = open_dataset("tiny")
    corpus = ds.corpus()
    r = create_model(
        "lambdamart",
        features=[{"name": "BM25", "model": "bm25"}, "tfidf"],
        pair_features=["query_coverage"],
        **{**FAST, "min_data_in_leaf": 2, **kw},
    )
    r.index(corpus.ids, corpus.joined("title"))
    train, dev = EvalSet.judged(ds, "train"), EvalSet.judged(ds, "dev")
    fit_ranker(r, train, dev)
    return r, ds, corpus


def test_ranker_is_a_model_and_round_trips(tiny_data, tmp_path):
    r, ds, corpus = _ranker(tiny_data, query_norm="zscore")
    assert r.feature_names == ["BM25", "tfidf", "query_coverage"]
    test = EvalSet.judged(ds, "test")
    run = rank(r, test.queries, test.candidates)
    assert set(run) == set(test.queries)
    r.save(tmp_path / "ltr")
    back = load_model(tmp_path / "ltr")
    back.index(corpus.ids, corpus.joined("title"))
    assert rank(back, test.queries, test.candidates) == run
    # given feature models must be exactly the trained ones, by name and order
    bm25, tfidf = create_model("bm25"), create_model("tfidf")
    ok = LambdaMARTRanker.load(tmp_path / "ltr", models={"BM25": bm25, "tfidf": tfidf})
    ok.index(corpus.ids, corpus.joined("title"))
    assert rank(ok, test.queries, test.candidates) == run
    with pytest.raises(ModelDirError, match="trained on features"):
        LambdaMARTRanker.load(tmp_path / "ltr", models={"tfidf": tfidf, "BM25": bm25})
    with pytest.raises(ModelDirError, match="trained on features"):
        LambdaMARTRanker.load(tmp_path / "ltr", models={"BM25": bm25})
    from typer.testing import CliRunner

    from semsearch.cli import app

    out = tmp_path / "ltr.trec"  # the command line runs a saved ranker like any saved model
    r = CliRunner().invoke(
        app,
        [
            "run",
            "--model",
            str(tmp_path / "ltr"),
            "--data",
            "tiny",
            "--fields",
            "title",
            "--candidates",
            "judged",
            "--split",
            "test",
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 0 and len(out.read_text().splitlines()) == sum(map(len, run.values()))
    cfg = json.loads((tmp_path / "ltr" / "config.json").read_text())
    cfg["features"] = ["BM25", "ULM"]
    (tmp_path / "ltr" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelDirError, match="differ"):
        load_model(tmp_path / "ltr")


LTR_SPEC = """
name = "tiny-ltr"
title = "LTR rows"
source = "test"
dataset = "tiny"
split = "test"
candidates = "{candidates}"
fields = "title"
metrics = ["ndcg@1", "ndcg@3"]
tune = "{tune}"
baselines = ["BM25"]

[[models]]
label = "BM25"
model = "bm25"

[[models]]
label = "TF-IDF"
model = "tfidf"

[[models]]
label = "LambdaMART"
model = "lambdamart"
combine = ["BM25", "TF-IDF"]
params = {{ num_boost_round = 20, min_data_in_leaf = 2, num_leaves = 4, early_stopping = 5, pair_features = [
    "query_coverage"] }}
train = {{ split = "{train}" }}
"""


@pytest.mark.parametrize(
    "tune,train,candidates",
    [
        ("split:dev", "train", "judged"),
        ("split:dev", "dev", "judged"),
        ("cv2", "train", "run:first:20"),
        ("cv2", "nested", "judged"),
    ],
)
def test_runner_ltr_row(tiny_data, tmp_path, tune, train, candidates):
    p = tmp_path / "t.toml"
    text = LTR_SPEC.format(tune=tune, train=train, candidates=candidates)
    p.write_text(text.replace('split = "nested"', "cv_folds = 2"))
    result = run_experiment(load_spec(p), progress=False)
    log = result.training["LambdaMART"]
    assert set(log["importance"]) == {"BM25", "TF-IDF", "query_coverage"}
    expected = {"split:dev": "dev early stopping" if train == "train" else "5-fold CV"}.get(
        tune, "mean of 2 CV folds, trees by inner 2-fold CV" if train == "nested" else "mean of 2 CV folds"
    )
    assert log["rounds_by"] == expected
    assert result.table.rows["LambdaMART"].result.n_queries == result.table.rows["BM25"].result.n_queries
    md = result.to_markdown()
    assert "Feature importance of LambdaMART" in md and "| query_coverage |" in md


def test_ltr_and_interpolated_rows_rank_each_split_once_per_component(tiny_data, tmp_path, monkeypatch):
    """Two LambdaMART rows and an interpolation over the same components, all tuned on dev: each
    component ranks the train and dev queries once (its row keeps the runs), not once per row."""
    from semsearch.experiments import runner

    text = LTR_SPEC.format(tune="split:dev", train="train", candidates="judged")
    second = text[text.index('[[models]]\nlabel = "LambdaMART"') :].replace('"LambdaMART"', '"LambdaMART 2"')
    mix = (
        '\n[[models]]\nlabel = "BM25 + TF-IDF"\nmodel = "interpolate"\ncombine = ["BM25", "TF-IDF"]\n'
        'norm = "zscore"\ngrid = { weight = [0.0, 0.5, 1.0] }\n'
    )
    p = tmp_path / "t.toml"
    p.write_text(text + "\n" + second + mix)
    ranked: list[tuple[str, frozenset[str]]] = []
    real = runner._Context.rank
    monkeypatch.setattr(
        runner._Context,
        "rank",
        lambda self, model, ms, qrels: (ranked.append((ms.label, frozenset(qrels))), real(self, model, ms, qrels))[1],
    )
    result = run_experiment(load_spec(p), progress=False)
    ctx = runner._Context(load_spec(p), False, None, False)
    for split in ("train", "dev"):
        queries = frozenset(ctx.qrels(split))
        for label in ("BM25", "TF-IDF"):
            assert [lb for lb, q in ranked if q == queries].count(label) == 1, (split, label)
    assert result.table.rows["LambdaMART 2"].result.mean == result.table.rows["LambdaMART"].result.mean


CROSS_FIT_SPEC = """
name = "tiny-cross-fit"
title = "cross-fitted LTR row"
source = "test"
dataset = "tiny"
split = "test"
candidates = "judged"
fields = "title"
metrics = ["ndcg@1", "ndcg@3"]
tune = "split:dev"

[[models]]
label = "BM25"
model = "bm25"

[[models]]
label = "WTM"
model = "wtm"
train = { split = "train", threshold = 1, fields = "title" }
grid = { alpha = [0.1, 0.3] }

[[models]]
label = "LambdaMART"
model = "lambdamart"
combine = ["BM25", "WTM"]
params = { num_boost_round = 20, min_data_in_leaf = 2, num_leaves = 4, early_stopping = 5 }
train = { split = "train", cross_fit = CROSS_FIT }
"""


def test_runner_cross_fits_trained_components(tiny_data, tmp_path):
    from semsearch.data import TrainingData

    ds = open_dataset("tiny")
    full = TrainingData.from_dataset(ds, "train", threshold=1)
    held = sorted(full.queries)[:2]
    part = full.without_queries(held)
    assert not set(held) & (set(part.queries) | set(part.qrels) | {q for q, _ in part.positives})
    assert len(part.positives) < len(full.positives) and part.doc_ids == full.doc_ids
    p = tmp_path / "t.toml"
    p.write_text(CROSS_FIT_SPEC.replace("CROSS_FIT", "2"))
    models = tmp_path / "models"
    result = run_experiment(load_spec(p), progress=False, model_dir=models)
    log = result.training["LambdaMART"]
    assert log["cross_fit"] == 2 and log["cross_fitted"] == ["WTM"] and log["rounds_by"] == "dev early stopping"
    assert {"WTM (cross-fit fold 1/2)", "WTM (cross-fit fold 2/2)"} <= set(result.training)
    recipes = [json.loads((d / "recipe.json").read_text()) for d in models.iterdir() if d.name.startswith("wtm-")]
    assert sorted(r.get("cross_fit", {}).get("fold", -1) for r in recipes) == [-1, 0, 1]  # the final model + 2 folds
    assert result.table.rows["LambdaMART"].result.n_queries == result.table.rows["BM25"].result.n_queries
    for bad in ("1", "true", '"2"'):
        p.write_text(CROSS_FIT_SPEC.replace("CROSS_FIT", bad))
        with pytest.raises(SpecError, match="cross_fit must be an integer >= 2"):
            load_spec(p)
    p.write_text(CROSS_FIT_SPEC.replace("CROSS_FIT", "2").replace('tune = "split:dev"', 'tune = "cv2"'))
    with pytest.raises(SpecError, match="unknown keys \\['cross_fit'\\]"):
        load_spec(p)


def test_ltr_rows_are_validated(tmp_path):
    p = tmp_path / "t.toml"
    p.write_text(
        LTR_SPEC.format(tune="cv2", train="train", candidates="judged").replace('"BM25", "TF-IDF"]', '"BM25", "Later"]')
    )
    with pytest.raises(SpecError, match="listed before it"):
        load_spec(p)
    p.write_text(
        LTR_SPEC.format(tune="cv2", train="train", candidates="judged").replace(
            'model = "tfidf"', 'model = "tfidf"\ntrain = { cv_folds = 2 }'
        )
    )
    with pytest.raises(SpecError, match=r"unknown keys \['cv_folds'\]"):  # only LambdaMART rows take cv_folds
        load_spec(p)
    p.write_text(
        LTR_SPEC.format(tune="split:dev", train="dev", candidates="judged").replace(
            'split = "dev" }', 'split = "dev", cv_folds = 3 }'
        )
    )
    with pytest.raises(SpecError, match=r"unknown keys \['cv_folds'\]"):  # ... and only under tune = "cvK"
        load_spec(p)


def test_train_bundle_search_and_serve_a_ranker(tiny_data, tmp_path):
    """`semsearch train lambdamart` -> `index build --ranker` -> `semsearch search` and the
    service's /search, both ordered by the ranker's scores."""
    from fastapi.testclient import TestClient
    from typer.testing import CliRunner

    from semsearch.cli import app
    from semsearch.index import Bundle
    from semsearch.serving import create_app

    cli = CliRunner()
    r = cli.invoke(
        app,
        [
            "train",
            "lambdamart",
            "--data",
            "tiny",
            "--out",
            str(tmp_path / "ltr"),
            "--fields",
            "title",
            "--threshold",
            "2",
            "--param",
            'features=["bm25","ulm","tfidf"]',
            "--param",
            'pair_features=["query_coverage"]',
            "--param",
            "num_boost_round=20",
            "--param",
            "min_data_in_leaf=2",
            "--param",
            "num_leaves=4",
            "--param",
            "cv_folds=2",
        ],
    )
    assert r.exit_code == 0, r.output
    log = json.loads((tmp_path / "ltr" / "training.json").read_text())
    assert log["rounds_by"] == "dev early stopping" and log["args"]["cv_folds"] == 2
    assert set(log["importance"]) == {"bm25", "ulm", "tfidf", "query_coverage"}
    ranker = load_model(tmp_path / "ltr")
    assert ranker.feature_names == ["bm25", "ulm", "tfidf", "query_coverage"] and ranker.params()["num_leaves"] == 4
    r = cli.invoke(
        app,
        [
            "index",
            "build",
            "--data",
            "tiny",
            "--models",
            "bm25",
            "--ranker",
            str(tmp_path / "ltr"),
            "--fields",
            "title",
            "--out",
            str(tmp_path / "B"),
        ],
    )
    assert r.exit_code == 0, r.output
    bundle = Bundle.load(tmp_path / "B")
    ranker.use_texts(bundle.corpus.ids, bundle.corpus.joined("title"))
    hits = bundle.search("red cat", 5).hits
    want = ranker.score(["red cat"], [[h.doc_id for h in hits]])[0]
    assert [h.score for h in hits] == sorted(want.tolist(), reverse=True)[:5]
    bundle.close()
    r = cli.invoke(app, ["search", "--index", str(tmp_path / "B"), "--json", "-k", "5", "red cat"])
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.output.splitlines() if x.startswith("{")]
    assert [x["doc_id"] for x in lines] == [h.doc_id for h in hits] and [x["score"] for x in lines] == [
        h.score for h in hits
    ]
    with TestClient(create_app(tmp_path / "B")) as c:
        body = c.get("/search", params={"q": "red cat", "k": 5}).json()
    assert [h["doc_id"] for h in body["hits"]] == [h.doc_id for h in hits]
    assert [h["score"] for h in body["hits"]] == pytest.approx([h.score for h in hits])
    assert "rank_ms" in body["timing_ms"]
    with TestClient(create_app(tmp_path / "B")) as c:  # a ranker without stage features explains too
        e = c.get("/explain", params={"q": "red cat", "doc_id": hits[0].doc_id, "top": 50}).json()
    assert e["explained_by"] == "ranker" and e["score"] == pytest.approx(hits[0].score)
    assert e["bias"] + sum(x["contribution"] for x in e["contributions"]) == pytest.approx(e["score"], abs=1e-6)


def test_ranker_features_must_be_trained_or_need_no_training(tiny_data):
    with pytest.raises(ValueError, match="'dssm'.*must be trained first"):
        create_model("lambdamart", features=["bm25", "dssm"])
    with pytest.raises(ParamError, match="lambdamart parameter 'pair_features': unknown"):
        create_model("lambdamart", features=["bm25"], pair_features=["length"])
    from semsearch.training import recipe

    kw, args = recipe("lambdamart", {"features": ["bm25"], "num_leaves": 4, "cv_folds": 3})
    assert kw == {"features": ["bm25"], "num_leaves": 4} and args.cv_folds == 3
    with pytest.raises(ParamError, match=r"no parameter 'cv_fold' \(did you mean 'cv_folds'\?\)"):
        recipe("lambdamart", {"cv_fold": 3})


def test_two_stage_bundle_trained_in_the_build(tmp_path, make_two_stage):
    """`index build --train-ranker`: stage 1 = BM25 ∪ an encoder's k-NN, stage 2 = LambdaMART
    trained on stage 1's train-query candidates with stage features, depths chosen on dev; the
    bundle serves it (scores are the ranker's), explains a hit (contributions + bias = score)
    and round-trips through save/load."""
    from semsearch.index import Bundle

    make_two_stage(tmp_path / "B", "[[3,2],[5,5]]")
    log = json.loads((tmp_path / "B" / "ranker" / "training.json").read_text())
    assert [(t["n_lexical"], t["n_semantic"]) for t in log["tried"]] == [(3, 2), (5, 5)]
    best = max(log["tried"], key=lambda t: t["dev selection"])
    assert log["chosen"] == best and log["labels"].startswith("judged grade")
    b = Bundle.load(tmp_path / "B")
    assert b.two_stage and (b.ranker.n_lexical, b.ranker.n_semantic) == (best["n_lexical"], best["n_semantic"])
    assert b.ranker.feature_names[:4] == ["lexical_score", "semantic_score", "lexical_rank", "semantic_rank"]
    res = b.search("red cat", 20)
    hits = res.hits
    assert hits and [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.lexical is not None and h.semantic is not None for h in hits)  # both stage scores filled in
    assert len(hits) <= best["n_lexical"] + best["n_semantic"] and "rank_ms" in res.timing
    e = b.explain_rank("red cat", hits[0].doc_id, top=100)
    assert e["score"] == pytest.approx(hits[0].score)
    assert e["bias"] + sum(c["contribution"] for c in e["contributions"]) == pytest.approx(e["score"], abs=1e-6)
    assert {c["feature"] for c in e["contributions"]} == set(b.ranker.feature_names)
    assert e["source"] == hits[0].sources.name and e["lexical_rank"] == hits[0].lexical_rank
    missing = next(d for d in b.corpus.ids if d not in {h.doc_id for h in hits})
    assert b.explain_rank("red cat", missing)["score"] is None
    with pytest.raises(KeyError):
        b.explain_rank("red cat", "no-such-doc")
    b.close()
    from fastapi.testclient import TestClient

    from semsearch.serving import create_app

    with TestClient(create_app(tmp_path / "B")) as c:  # the service: the ranker's scores, its explanation
        body = c.get("/search", params={"q": "red cat", "k": 5}).json()
        assert body["score_by"] == "ranker"
        assert [h["doc_id"] for h in body["hits"]] == [h.doc_id for h in hits[:5]]
        assert [h["score"] for h in body["hits"]] == pytest.approx([h.score for h in hits[:5]])
        e = c.get("/explain", params={"q": "red cat", "doc_id": hits[1].doc_id, "top": 3}).json()
        assert e["explained_by"] == "ranker" and len(e["contributions"]) == 3
        assert e["score"] == pytest.approx(hits[1].score)
        assert c.get("/explain", params={"q": "red cat", "doc_id": "no-such-doc"}).status_code == 404


def test_served_ef_search_chosen_on_dev(tmp_path, make_two_stage):
    """``search_efforts``: after the depths, the trained two-stage search runs over the dev queries
    at each efSearch; the smallest within ``effort_tolerance`` of the best dev selection is what
    the bundle's HNSW index (and its retriever's settings) keep and serve with."""
    from semsearch.index import Bundle

    make_two_stage(
        tmp_path / "B",
        "[[5,5]]",
        "--vector-index",
        "hnsw",
        "--ranker-param",
        "search_efforts=[32,2,8]",
        "--ranker-param",
        "effort_tolerance=0.5",
    )
    effort = json.loads((tmp_path / "B" / "ranker" / "training.json").read_text())["search_effort"]
    assert [t["efSearch"] for t in effort["tried"]] == [2, 8, 32] and effort["tolerance"] == 0.5
    assert all(set(t) >= {"dev ndcg@10", "dev recall@100", "dev selection"} for t in effort["tried"])
    best = max(t["dev selection"] for t in effort["tried"])
    level = [t["efSearch"] for t in effort["tried"] if t["dev selection"] >= best - 0.5]
    assert effort["chosen"] == min(level)
    b = Bundle.load(tmp_path / "B")  # (loading checks retriever.json's settings against the index's)
    ix = next(iter(b.semantic.values())).vectors
    assert ix.params["efSearch"] == effort["chosen"] == ix._faiss.hnsw.efSearch
    assert b.search("red cat", 5).hits
    b.close()

    make_two_stage(
        tmp_path / "C",
        "[[5,5]]",
        "--vector-index",
        "hnsw",
        "--ranker-param",
        "search_efforts=[2,32]",
        "--ranker-param",
        "effort_tolerance=0",
    )  # no tolerance: the best (ties: the smaller)
    effort = json.loads((tmp_path / "C" / "ranker" / "training.json").read_text())["search_effort"]
    best = max(t["dev selection"] for t in effort["tried"])
    assert effort["chosen"] == min(t["efSearch"] for t in effort["tried"] if t["dev selection"] == best)

    r = make_two_stage(tmp_path / "D", "[[5,5]]", "--ranker-param", "search_efforts=[8]", ok=False)  # flat index
    assert r.exit_code != 0 and "efSearch is an HNSW setting" in r.output and "'flat'" in r.output
    assert not (tmp_path / "D").exists()
    r = make_two_stage(tmp_path / "E", "[[5,5]]", "--ranker-param", "search_efforts=[0]", ok=False)
    assert r.exit_code != 0 and "search_efforts" in r.output and "integers >= 1" in r.output


def test_train_ranker_refuses_bad_input(tiny_data, tmp_path):
    from typer.testing import CliRunner

    from semsearch.cli import app

    cli = CliRunner()
    r = cli.invoke(
        app,
        [
            "index",
            "build",
            "--data",
            "tiny",
            "--models",
            "bm25",
            "--out",
            str(tmp_path / "B"),
            "--train-ranker",
            "--ranker-param",
            "stage_depth=[[3,2]]",
        ],
    )
    assert r.exit_code != 0 and "stage_depth" in r.output and "did you mean 'stage_depths'" in r.output
    r = cli.invoke(
        app,
        [
            "index",
            "build",
            "--data",
            "tiny",
            "--models",
            "bm25",
            "--out",
            str(tmp_path / "B"),
            "--ranker-param",
            "num_leaves=4",
        ],
    )
    assert r.exit_code != 0 and "--ranker-param needs --train-ranker" in r.output
    assert not (tmp_path / "B").exists()


def test_ranker_learns_from_the_fold_its_models_never_saw(tiny_data, tmp_path, make_two_stage):
    """``semsearch train --hold-out I/K`` trains without fold I of K of the split's queries (the
    log says which and how many); ``index build --ranker-param train_fold=I/K`` trains the stage-2
    ranker on exactly those queries, so it learns how far to trust the model on unseen queries."""
    from typer.testing import CliRunner

    from semsearch.cli import app
    from semsearch.data import TrainingData, open_dataset
    from semsearch.evaluation import QueryFold, kfold_queries

    ds = open_dataset("tiny")
    qids = list(ds.qrels("train"))
    fold = QueryFold.parse("2/2")
    held = fold.queries(qids)
    assert held == kfold_queries(qids, 2, seed=0)[1][1] and 0 < len(held) < len(qids)
    assert sorted(held + QueryFold(1, 2).queries(qids)) == sorted(qids)  # the folds split the queries
    assert str(fold) == "2/2" and QueryFold.parse(" 1/3 ") == QueryFold(1, 3)
    assert fold.index == 1 and fold.n == 2
    with pytest.raises(ValueError, match="fold 0/2: expected I/N"):
        QueryFold(0, 2)  # counted from 1, as every Part

    r = CliRunner().invoke(
        app,
        [
            "train",
            "dssm",
            "--data",
            "tiny",
            "--threshold",
            "2",
            "--out",
            str(tmp_path / "m"),
            "--hold-out",
            "2/2",
            "--param",
            "epochs=1",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "fold 2/2 held out" in " ".join(r.output.split())
    log = json.loads((tmp_path / "m" / "training.json").read_text())
    assert log["held_out"] == {"split": "train", "fold": "2/2", "queries": len(held)}
    full = TrainingData.from_dataset(ds, "train", threshold=2, fields="title")
    kept = full.without_queries(held)
    assert 0 < len(kept.positives) < len(full.positives)

    make_two_stage(tmp_path / "B", "[[5,5]]", "--ranker-param", "train_fold=2/2")
    log = json.loads((tmp_path / "B" / "ranker" / "training.json").read_text())
    texts = ds.queries()
    assert log["train_queries"] == sum(1 for q in held if texts.get(q, "").strip())
    assert log["learnt_from"] == f"fold 2/2 of the train queries ({len(held)} of {len(qids)})"
    make_two_stage(tmp_path / "C", "[[5,5]]")
    assert (
        json.loads((tmp_path / "C" / "ranker" / "training.json").read_text())["learnt_from"]
        == f"all {len(qids)} train queries"
    )

    # the stage-1 model's held-out fold is checked against train_fold before anything is built
    cli = CliRunner()
    base = [
        "index",
        "build",
        "--data",
        "tiny",
        "--models",
        f"bm25,{tmp_path / 'm'}",
        "--fields",
        "title",
        "--train-ranker",
        "--ranker-param",
        "stage_depths=[[5,5]]",
        "--ranker-param",
        "min_data_in_leaf=2",
    ]
    r = cli.invoke(app, [*base, "--out", str(tmp_path / "D"), "--ranker-param", "train_fold=1/2"])
    msg = " ".join(r.output.split())
    assert r.exit_code == 2 and "was trained without fold 2/2 of the train queries, not 1/2" in msg, msg
    assert "use train_fold=2/2" in msg and not (tmp_path / "D").exists()
    r = cli.invoke(app, [*base, "--out", str(tmp_path / "E")])  # no train_fold: built, with a note
    assert r.exit_code == 0, r.output
    assert "was trained without fold 2/2 of the train queries; the ranker learns from all" in " ".join(r.output.split())
