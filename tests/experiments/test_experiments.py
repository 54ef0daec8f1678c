"""Experiment specs and the runner, on a generated data set."""

from __future__ import annotations

import json

import pytest

from semsearch.experiments import SpecError, get_spec, load_spec, run_experiment, spec_paths

SPEC = """
name = "tiny-table"
title = "Tiny table"
source = "test"
dataset = "tiny"
split = "test"
candidates = "{candidates}"
metrics = ["ndcg@1", "ndcg@3", "recall@10"]
tune = "{tune}"
baselines = ["Random"]

[[models]]
label = "Random"
model = "random"
expect = {{ "ndcg@3" = [0.0, 1.0] }}

[[models]]
label = "BM25"
model = "bm25"
grid = {{ k1 = [0.5, 1.2], b = [0.0, 0.75] }}
paper = {{ "ndcg@1" = 0.305 }}
expect = {{ "ndcg@3" = [0.3, 1.0] }}

[[models]]
label = "ULM"
model = "ulm"
params = {{ mu = 10, stats = "{stats}" }}
"""


def _spec(tmp_path, candidates="judged", tune="split:dev", stats="collection"):
    p = tmp_path / "tiny.toml"
    p.write_text(SPEC.format(candidates=candidates, tune=tune, stats=stats))
    return load_spec(p)


@pytest.mark.parametrize("candidates,tune", [("judged", "split:dev"), ("run:first:10", "cv2"), ("full:5", "cv2")])
def test_runner_tables_tunes_and_checks(tiny_data, tmp_path, candidates, tune):
    result = run_experiment(_spec(tmp_path, candidates, tune), progress=False)
    assert list(result.table.rows) == ["Random", "BM25", "ULM"]
    means = {label: row.result.mean for label, row in result.table.rows.items()}
    assert means["BM25"]["ndcg@3"] > means["Random"]["ndcg@3"]
    assert len(result.chosen["BM25"]) == (1 if tune.startswith("split") else 2)
    assert len(result.tuning["BM25"]) == (4 if tune.startswith("split") else 8)
    assert [c.ok for c in result.checks] == [True, True]
    md = result.to_markdown()
    assert "| BM25 |" in md and "0.305" in md and "Expected ranges" in md
    out = result.write(tmp_path / "out")
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["name"] == "tiny-table" and data["checks"][1]["ok"] is True
    assert (tmp_path / "out" / "tiny-table" / "bm25.trec").is_file()


def test_out_of_range_is_reported(tiny_data, tmp_path):
    spec = _spec(tmp_path)
    spec.models[0].expect["ndcg@3"] = (0.999, 1.0)
    result = run_experiment(spec, progress=False)
    assert not result.ok and "OUT OF RANGE" in result.to_markdown()


def test_pool_excluded_statistics(tiny_data, tmp_path):
    from semsearch.data import open_dataset, query_pools
    from semsearch.models import rank
    from semsearch.plugins import create_model

    result = run_experiment(_spec(tmp_path, "run:first:10", "cv2", stats="exclude-query-pool"), progress=False)
    assert result.table.rows["ULM"].result.n_queries > 0
    # the runner's row is the model with the data set's pools: what `semsearch run` computes too
    ds = open_dataset("tiny")
    queries = {q: ds.queries()[q] for q in ds.qrels("test")}
    corpus = ds.corpus()
    m = create_model("ulm", mu=10, stats="exclude-query-pool")
    m.index(corpus.ids, corpus.joined("title+text"))
    m.use_pools(query_pools(ds, queries))
    first = {q: [f"d{i:02d}" for i in range(10)] for q in queries}
    assert result.runs["ULM"] == rank(m, queries, first)
    plain = run_experiment(_spec(tmp_path, "run:first:10", "cv2"), progress=False)
    assert plain.runs["ULM"] != result.runs["ULM"]


def test_stats_field_moved_into_params(tmp_path):
    p = tmp_path / "old.toml"
    p.write_text(
        SPEC.format(candidates="judged", tune="cv2", stats="collection").replace(
            'params = { mu = 10, stats = "collection" }', 'params = { mu = 10 }\nstats = "exclude-query-pool"'
        )
    )
    with pytest.raises(
        SpecError,
        match=r"old.toml.*'ULM'.*'stats' moved into the model's params.*"
        r"params = \{ stats = 'exclude-query-pool' \}",
    ):
        load_spec(p)


@pytest.mark.parametrize(
    "change,message",
    [
        (("judged", "nonsense"), "tune must be"),
        (("everything", "cv2"), "candidates must be"),
        (("judged", "none"), "has a grid"),
    ],
)
def test_spec_validation(tmp_path, change, message):
    with pytest.raises(SpecError, match=message):
        _spec(tmp_path, *change)


def test_spec_with_unknown_field_or_bad_baseline(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text(SPEC.format(candidates="judged", tune="cv2", stats="collection") + "\ncolour = 'red'\n")
    with pytest.raises(SpecError, match="unknown field"):
        load_spec(p)
    p.write_text(SPEC.format(candidates="judged", tune="cv2", stats="collection").replace('["Random"]', '["Nope"]'))
    with pytest.raises(SpecError, match="not model labels"):
        load_spec(p)
    with pytest.raises(SpecError, match="unknown experiment"):
        get_spec("no-such-table")


def test_registered_specs_all_parse():
    names = spec_paths()
    assert {
        "clsm-table5-lexical",
        "scifact-lexical",
        "trec-dl-2019-rerank",
        "cranfield-lexical",
        "cisi-lexical",
    } <= set(names)
    for name in names:
        spec = get_spec(name)
        if getattr(spec, "kind", None) in ("classification", "adaptation"):
            assert spec.domains and spec.domain_set
        elif getattr(spec, "kind", None) == "ab":  # a simulated A/B test of two rows of a ranking spec
            assert spec.rankers in names and spec.control and spec.experiment
        else:
            assert spec.models and spec.metrics


# -- trained rows and interpolation rows -----------------------------------------------------------
import numpy as np  # noqa: E402

from semsearch.models import Model  # noqa: E402
from semsearch.models.base import read_config, write_config  # noqa: E402
from semsearch.plugins import register  # noqa: E402


@register("test-cooccurrence")
class Cooccurrence(Model):
    """Toy trainable model: scores a document by how many (query word, doc word) pairs were seen
    together in the positive training pairs."""

    def __init__(self, min_count: int = 1):
        self.min_count = int(min_count)
        self.pairs: dict[str, int] = {}
        self._ids: list[str] = []
        self._texts: dict[str, str] = {}
        self.fitted_with_dev = False

    def fit(self, data, dev=None, progress=False):
        qs, ds = data.pair_texts()
        for q, d in zip(qs, ds):
            for a in q.lower().split():
                for b in d.lower().split():
                    self.pairs[f"{a} {b}"] = self.pairs.get(f"{a} {b}", 0) + 1
        self.fitted_with_dev = dev is not None
        return {"pairs": len(self.pairs), "dev_queries": len(dev.queries) if dev else 0}

    def index(self, doc_ids, texts):
        self._ids, self._texts = list(doc_ids), dict(zip(doc_ids, texts))

    @property
    def doc_ids(self):
        return self._ids

    def score(self, queries, candidates):
        return [
            np.array(
                [
                    sum(
                        self.pairs.get(f"{a} {b}", 0) >= self.min_count
                        for a in q.lower().split()
                        for b in self._texts[d].lower().split()
                    )
                    for d in docs
                ],
                dtype=float,
            )
            for q, docs in zip(queries, candidates)
        ]

    def save(self, path):
        write_config(path, {"model": self.name, "min_count": self.min_count, "pairs": self.pairs})

    @classmethod
    def load(cls, path):
        cfg = read_config(path, expect=cls.name)
        m = cls(cfg["min_count"])
        m.pairs = cfg["pairs"]
        return m


TRAINED = """
name = "tiny-trained"
title = "Trained rows"
source = "test"
dataset = "tiny"
split = "test"
candidates = "judged"
metrics = ["ndcg@3"]
tune = "{tune}"

[[models]]
label = "BM25"
model = "bm25"

[[models]]
label = "Cooc"
model = "test-cooccurrence"
params = {{ min_count = 1 }}
train = {{ split = "train", threshold = 2 }}

[[models]]
label = "Cooc + BM25"
model = "interpolate"
combine = ["Cooc", "BM25"]
grid = {{ weight = [0.0, 0.5, 1.0] }}
"""


@pytest.mark.parametrize("tune", ["split:dev", "cv2"])
def test_trained_and_interpolated_rows(tiny_data, tmp_path, tune):
    p = tmp_path / "t.toml"
    p.write_text(TRAINED.format(tune=tune))
    spec = load_spec(p)
    result = run_experiment(spec, progress=False, model_dir=tmp_path / "models")
    assert result.training["Cooc"]["pairs"] > 0
    assert (result.training["Cooc"]["dev_queries"] > 0) == (tune == "split:dev")
    (saved,) = (tmp_path / "models").iterdir()
    assert (saved / "config.json").is_file() and (saved / "recipe.json").is_file()
    means = {k: r.result.mean["ndcg@3"] for k, r in result.table.rows.items()}
    chosen = result.chosen["Cooc + BM25"]
    assert all(c["weight"] in (0.0, 0.5, 1.0) for c in chosen)
    if tune == "split:dev" and chosen[0]["weight"] in (0.0, 1.0):  # an end point equals a component
        assert means["Cooc + BM25"] == pytest.approx(means["BM25" if chosen[0]["weight"] == 0 else "Cooc"])
    # a second run reuses the saved model (same recipe) instead of training again
    (saved / "training.json").write_text('{"pairs": -1, "dev_queries": 0}')
    again = run_experiment(spec, progress=False, model_dir=tmp_path / "models")
    assert again.training["Cooc"]["pairs"] == -1
    assert again.table.rows["Cooc"].result.mean == result.table.rows["Cooc"].result.mean


def test_interpolation_rows_are_validated(tmp_path):
    p = tmp_path / "t.toml"
    p.write_text(TRAINED.format(tune="cv2").replace('combine = ["Cooc", "BM25"]', 'combine = ["Cooc", "Later"]'))
    with pytest.raises(SpecError, match="listed before it"):
        load_spec(p)


def test_fusion():
    from semsearch.index import interpolate, rrf

    a = {"q": {"x": 1.0, "y": 3.0}}
    b = {"q": {"x": 10.0, "z": 0.0}}
    f = interpolate([a, b], [0.5, 0.5])["q"]
    assert f == pytest.approx({"x": 0.5, "y": 0.5, "z": 0.0})  # missing -> that run's lowest
    assert interpolate([a, b], [1.0, 0.0], norm="none")["q"]["y"] == 3.0
    r = rrf([a, b], k=1)["q"]
    assert r["x"] == pytest.approx(1 / 3 + 1 / 2) and max(r, key=r.get) == "x"
    with pytest.raises(ValueError):
        interpolate([a], [0.5, 0.5])


def test_top1_crosstab():
    from semsearch.evaluation import top1_crosstab

    qrels = {"a": {"x": 0, "y": 3}, "b": {"x": 1, "y": 2}, "c": {"x": 4}}
    left = {"a": {"y": 2.0, "x": 1.0}, "b": {"x": 5.0, "y": 1.0}, "c": {"z": 1.0}}
    right = {"a": {"x": 2.0, "y": 1.0}, "b": {"y": 5.0}, "c": {"x": 1.0}}
    t = top1_crosstab(left, right, qrels)
    assert t["good+"]["bad"] == 1  # a: left's top-1 y (3), right's x (0)
    assert t["fair"]["good+"] == 1  # b
    assert t["bad"]["good+"] == 1  # c: left's top-1 z is unjudged -> bad
    assert sum(sum(r.values()) for r in t.values()) == 3


def test_crosstab_in_a_spec(tiny_data, tmp_path):
    p = tmp_path / "t.toml"
    p.write_text(
        TRAINED.format(tune="split:dev").replace(
            'tune = "split:dev"', 'tune = "split:dev"\ncrosstab = { rows = "Cooc", columns = "BM25" }'
        )
    )
    result = run_experiment(load_spec(p), progress=False)
    n = sum(sum(r.values()) for r in result.crosstab.values())
    assert n == result.table.rows["BM25"].result.n_queries
    assert "Top-1 label" in result.to_markdown() and "good+" in result.to_markdown()


def test_retrain_and_trainer_version(tiny_data, tmp_path, monkeypatch):
    import shutil

    from semsearch.experiments.cache import cache_key
    from semsearch.training.versions import TRAINER_VERSIONS

    p = tmp_path / "t.toml"
    p.write_text(TRAINED.format(tune="split:dev"))
    spec = load_spec(p)
    run_experiment(spec, progress=False, model_dir=tmp_path / "models")
    (saved,) = (tmp_path / "models").iterdir()
    recipe = json.loads((saved / "recipe.json").read_text())
    assert recipe["kind"] == "test-cooccurrence" and recipe["trainer_version"] == 0  # not in the table
    assert "code" not in recipe
    bare = {k: v for k, v in recipe.items() if k not in ("kind", "trainer_version")}
    assert saved.name == f"test-cooccurrence-{cache_key('test-cooccurrence', bare)}"
    # a bumped trainer version is another key: trained anew beside the old model
    with monkeypatch.context() as m:
        m.setitem(TRAINER_VERSIONS, "test-cooccurrence", 1)
        run_experiment(spec, progress=False, model_dir=tmp_path / "models")
        bumped = [d for d in (tmp_path / "models").iterdir() if d != saved]
        assert len(bumped) == 1 and json.loads((bumped[0] / "recipe.json").read_text())["trainer_version"] == 1
        shutil.rmtree(bumped[0])
    (saved / "training.json").write_text('{"pairs": -1, "dev_queries": 0}')
    again = run_experiment(spec, progress=False, model_dir=tmp_path / "models", retrain=True)
    assert again.training["Cooc"]["pairs"] > 0  # trained anew, not read back
    assert recipe["train"]["dev"] == "dev"  # the spec's tuning split early-stops: part of the recipe
    # the same row under cv2 trains without a dev split: another recipe, not the model saved above
    p.write_text(TRAINED.format(tune="cv2"))
    run_experiment(load_spec(p), progress=False, model_dir=tmp_path / "models")
    recipes = [json.loads((d / "recipe.json").read_text()) for d in (tmp_path / "models").iterdir()]
    assert sorted(r["train"].get("dev") or "" for r in recipes) == ["", "dev"]


def test_trained_on_another_dataset(tiny_data, tmp_path):
    """train = {dataset, dev}: a row trains on another data set (here a copy named 'other') and
    early-stops on that set's dev split; the recipe names the training data set."""
    import shutil

    shutil.copytree(tiny_data / "tiny", tiny_data / "other")
    p = tmp_path / "t.toml"
    p.write_text(
        TRAINED.format(tune="cv2").replace(
            'train = { split = "train", threshold = 2 }',
            'train = { dataset = "other", split = "train", threshold = 2, dev = "dev" }',
        )
    )
    result = run_experiment(load_spec(p), progress=False, model_dir=tmp_path / "models")
    assert result.training["Cooc"]["pairs"] > 0 and result.training["Cooc"]["dev_queries"] > 0
    (saved,) = (tmp_path / "models").iterdir()
    assert json.loads((saved / "recipe.json").read_text())["dataset"] == "other"


@pytest.mark.parametrize(
    "row,message",
    [
        ("params = { k1x = 1.2 }", r"bm25 has no parameter 'k1x' \(did you mean 'k1'\?\)"),
        ('params = { k1 = "high" }', r"bm25 parameter 'k1' must be a number, got 'high'"),
        ("grid = { b = [0.5, 2.0] }", r"bm25 parameter 'b' must be <= 1, got 2.0"),
        ("grid = { k1s = [0.5] }", r"bm25 has no parameter 'k1s' \(did you mean 'k1'\?\)"),
        ('params = { stats = "pooled" }', r"bm25 parameter 'stats' must be one of 'collection', 'exclude-query-pool'"),
        ('train = { split = "train" }', r"bm25 is not trainable"),
    ],
)
def test_row_params_are_validated_at_load(tmp_path, row, message):
    p = tmp_path / "bad.toml"
    text = (
        SPEC.format(candidates="judged", tune="cv2", stats="collection")
        + f"""
[[models]]
label = "BM25 again"
model = "bm25"
{row}
"""
    )
    p.write_text(text)
    line = text.splitlines().index('label = "BM25 again"') + 1
    with pytest.raises(SpecError, match=rf"bad.toml:{line}: row 'BM25 again': {message}"):
        load_spec(p)


def test_reproduce_refuses_a_bad_row_before_running_any(tiny_data, tmp_path):
    from typer.testing import CliRunner

    from semsearch.cli import app

    p = tmp_path / "bad.toml"
    text = SPEC.format(candidates="judged", tune="cv2", stats="collection") + (
        '\n[[models]]\nlabel = "Last"\nmodel = "bm25"\nparams = { k1x = 1.2 }\n'
    )
    p.write_text(text)
    r = CliRunner().invoke(app, ["reproduce", str(p), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2
    msg = " ".join(r.output.split())
    assert f"bad.toml:{len(text.splitlines()) - 2}: row 'Last'" in msg and "'k1x'" in msg and "did you mean 'k1'" in msg
    assert not (tmp_path / "out").exists()  # nothing ran: no results, no model directory


def test_checking_a_spec_loads_no_torch(tmp_path):
    """A misspelt parameter of a torch family's row fails at load without importing torch (that
    import alone takes a second or more), so `semsearch reproduce` answers at once."""
    import subprocess
    import sys

    spec = tmp_path / "bad.toml"
    spec.write_text(
        'name = "bad"\ntitle = "t"\nsource = "s"\ndataset = "tiny"\nsplit = "test"\n'
        'candidates = "judged"\nmetrics = ["ndcg@1"]\n\n'
        '[[models]]\nlabel = "DSSM"\nmodel = "dssm"\n'
        'params = { negatives = 4, gama = 5 }\ntrain = { split = "train" }\n'
    )
    code = (
        "import sys\nfrom semsearch.experiments import SpecError, get_spec\n"
        f"try:\n    get_spec({str(spec)!r})\nexcept SpecError as e:\n    print(e)\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.splitlines()
    assert "'gama'" in out[0] and "did you mean 'gamma'" in out[0] and "bad.toml:10" in out[0], out  # the row's line
    assert out[-1] == "False"


SEEDED = """
name = "tiny-seeds"
title = "Seed spread"
source = "test"
dataset = "tiny"
split = "test"
candidates = "judged"
metrics = ["ndcg@1", "ndcg@3"]
tune = "split:dev"
baselines = ["BM25"]

[[models]]
label = "BM25"
model = "bm25"

[[models]]
label = "DSSM"
model = "dssm"
params = {{ hidden = [16], out = 8, epochs = 2, batch_size = 4, negatives = 2 }}
train = {{ split = "train", threshold = 2 }}
seeds = {seeds}
"""


def test_seeded_rows_report_their_spread(tiny_data, tmp_path):
    """seeds = 3: three trained rows (seed 0 keeps the row's own recipe, so its cached model is
    reused), and the spread of their means with per-seed significance against the baselines."""
    import json
    import statistics

    p = tmp_path / "s.toml"
    p.write_text(SEEDED.format(seeds=3))
    result = run_experiment(load_spec(p), progress=False, model_dir=tmp_path / "models")
    assert list(result.table.rows) == ["BM25", "DSSM", "DSSM (seed 1)", "DSSM (seed 2)"]
    assert len(list((tmp_path / "models").iterdir())) == 3  # three recipes, three models
    assert [result.training[lb]["args"]["seed"] for lb in ("DSSM", "DSSM (seed 1)", "DSSM (seed 2)")] == [0, 1, 2]
    sp = result.seed_spread["DSSM"]
    assert sp["seeds"] == 3 and sp["rows"] == ["DSSM", "DSSM (seed 1)", "DSSM (seed 2)"]
    for m in ("ndcg@1", "ndcg@3"):
        values = [result.table.rows[lb].result.mean[m] for lb in sp["rows"]]
        d = sp["metrics"][m]
        assert d["values"] == values and d["mean"] == pytest.approx(statistics.mean(values))
        assert d["sd"] == pytest.approx(statistics.stdev(values)) and (d["min"], d["max"]) == (min(values), max(values))
        better = sum(
            result.table.p_values(lb, m)["BM25"] is not None
            and result.table.p_values(lb, m)["BM25"] < 0.05
            and result.table.rows[lb].result.mean[m] > result.table.rows["BM25"].result.mean[m]
            for lb in sp["rows"]
        )
        assert d["significantly_better"] == {"BM25": better}
    assert "Spread over training seeds" in result.to_markdown() and "±" in result.to_markdown()
    assert json.loads(json.dumps(result.to_json()))["seed_spread"]["DSSM"]["seeds"] == 3
    # a single seed: no spread, the same row (its model reused from the directory)
    p.write_text(SEEDED.format(seeds=1))
    one = run_experiment(load_spec(p), progress=False, model_dir=tmp_path / "models")
    assert list(one.table.rows) == ["BM25", "DSSM"] and not one.seed_spread
    assert one.table.rows["DSSM"].result.mean == result.table.rows["DSSM"].result.mean


ENSEMBLE = """
[[models]]
label = "DSSM ensemble"
model = "interpolate"
combine = ["DSSM", "DSSM (seed 1)", "DSSM (seed 2)"]
norm = "zscore"
"""


def test_interpolation_without_a_grid_averages_rows_seed_rows_included(tiny_data, tmp_path):
    """No grid: the mean of the named rows' per-query normalised scores, nothing tuned; a seed
    row may be named (a seed ensemble). A grid still takes exactly two rows."""
    from semsearch.index import interpolate

    p = tmp_path / "s.toml"
    p.write_text(SEEDED.format(seeds=3) + ENSEMBLE)
    result = run_experiment(load_spec(p), progress=False, model_dir=tmp_path / "models")
    parts = [result.runs[lb] for lb in ("DSSM", "DSSM (seed 1)", "DSSM (seed 2)")]
    assert result.runs["DSSM ensemble"] == interpolate(parts, [1 / 3] * 3, norm="zscore")
    assert result.chosen["DSSM ensemble"] == [{"weights": "equal"}] and not result.tuning["DSSM ensemble"]
    assert "DSSM ensemble" in result.to_markdown()
    p.write_text(SEEDED.format(seeds=3) + ENSEMBLE + "grid = { weight = [0.0, 1.0] }\n")
    with pytest.raises(SpecError, match="interpolates two rows with grid"):
        load_spec(p)
    p.write_text(SEEDED.format(seeds=2) + ENSEMBLE)  # no seed 2 row
    with pytest.raises(SpecError, match="listed before it"):
        load_spec(p)


def test_an_ensemble_row_is_interpolated_in_turn_with_its_weight_tuned_on_dev(tiny_data, tmp_path):
    """A seed ensemble (an interpolated row) feeds a later interpolation: under dev tuning it ranks
    the dev queries by fusing its seeds' dev runs, so the weight is chosen on the same fused scores
    that the rows give when a spec evaluates dev itself."""
    from semsearch.data import open_dataset
    from semsearch.evaluation import evaluate
    from semsearch.index import interpolate

    mix = (
        '\n[[models]]\nlabel = "Ensemble + BM25"\nmodel = "interpolate"\n'
        'combine = ["DSSM ensemble", "BM25"]\nnorm = "zscore"\ngrid = { weight = [0.0, 0.5, 1.0] }\n'
    )
    p = tmp_path / "s.toml"
    p.write_text(SEEDED.format(seeds=3) + ENSEMBLE + mix)
    result = run_experiment(load_spec(p), progress=False, model_dir=tmp_path / "models")
    (w,) = [c["weight"] for c in result.chosen["Ensemble + BM25"]]
    assert result.runs["Ensemble + BM25"] == interpolate(
        [result.runs["DSSM ensemble"], result.runs["BM25"]], [w, 1 - w], norm="zscore"
    )
    # the same rows evaluated on dev, the seeds' models reused from the directory
    p.write_text((SEEDED.format(seeds=3) + ENSEMBLE).replace('split = "test"', 'split = "dev"', 1))
    on_dev = run_experiment(load_spec(p), progress=False, model_dir=tmp_path / "models")
    assert on_dev.runs["DSSM ensemble"] != result.runs["DSSM ensemble"]
    dev_qrels = open_dataset("tiny").qrels("dev")
    for weight in (0.0, 0.5, 1.0):
        fused = interpolate([on_dev.runs["DSSM ensemble"], on_dev.runs["BM25"]], [weight, 1 - weight], norm="zscore")
        expected = evaluate(fused, dev_qrels, ["ndcg@10"]).mean["ndcg@10"]
        assert result.tuning["Ensemble + BM25"][json.dumps({"weight": weight})] == pytest.approx(expected)


def test_a_row_ranks_the_dev_split_once_for_every_row_that_tunes_on_it(tiny_data, tmp_path, monkeypatch):
    """Two interpolations of the same seed ensemble tune their weights on dev: each seed's model
    ranks the dev queries once (the row keeps its dev run), and both rows choose as before."""
    from semsearch.experiments import runner

    mix = (
        '\n[[models]]\nlabel = "Ensemble + BM25 {i}"\nmodel = "interpolate"\n'
        'combine = ["DSSM ensemble", "BM25"]\nnorm = "zscore"\ngrid = {{ weight = [0.0, 0.5, 1.0] }}\n'
    )
    p = tmp_path / "s.toml"
    p.write_text(SEEDED.format(seeds=3) + ENSEMBLE + mix.format(i=1) + mix.format(i=2))
    ranked: list[tuple[str, frozenset[str]]] = []
    real = runner._Context.rank
    monkeypatch.setattr(
        runner._Context,
        "rank",
        lambda self, model, ms, qrels: (ranked.append((ms.label, frozenset(qrels))), real(self, model, ms, qrels))[1],
    )
    result = run_experiment(load_spec(p), progress=False, model_dir=tmp_path / "models")
    dev = frozenset(runner._Context(load_spec(p), False, None, False).qrels("dev"))
    on_dev = [label for label, queries in ranked if queries == dev]
    for label in ("DSSM", "DSSM (seed 1)", "DSSM (seed 2)"):
        assert on_dev.count(label) == 1
    assert result.chosen["Ensemble + BM25 1"] == result.chosen["Ensemble + BM25 2"]
    assert result.tuning["Ensemble + BM25 1"] == result.tuning["Ensemble + BM25 2"]
    assert result.runs["Ensemble + BM25 1"] == result.runs["Ensemble + BM25 2"]


def test_seeds_are_validated(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(SEEDED.format(seeds=0))
    with pytest.raises(SpecError, match="seeds must be at least 1"):
        load_spec(p)
    p.write_text(
        SEEDED.format(seeds=2).replace('label = "BM25"\nmodel = "bm25"', 'label = "BM25"\nmodel = "bm25"\nseeds = 2')
    )
    with pytest.raises(SpecError, match="'BM25': seeds = 2 needs a trained model row"):
        load_spec(p)
    p.write_text(SEEDED.format(seeds=2).replace('label = "BM25"', 'label = "DSSM (seed 1)"').replace('["BM25"]', "[]"))
    with pytest.raises(SpecError, match=r"would add rows \['DSSM \(seed 1\)'\]"):
        load_spec(p)


DISTILLED = """
name = "tiny-distil"
title = "Margin-MSE from a teacher row"
source = "test"
dataset = "tiny"
split = "test"
candidates = "judged"
metrics = ["ndcg@3"]
tune = "split:dev"

[[models]]
label = "Teacher"
model = "bert-rel"
params = {{ base = "{base}", neg_global = 0, neg_cluster = 0, lr = 1e-3, batch_size = 4 }}
train = {{ split = "train", threshold = 2 }}

[[models]]
label = "Student"
model = "bert-rep"
params = {{ base = "{base}", neg_global = 1, neg_cluster = 0, neg_hard = 1, hard_depth = 5, lr = 1e-3, batch_size = 4, loss = "margin_mse", teacher = {teacher} }}
train = {{ split = "train", threshold = 2 }}
"""  # noqa: E501 - the student's params: a TOML 1.0 inline table cannot span lines, and the spec's form is kept


def test_a_teacher_row_distils_into_a_student_row(tiny_data, tmp_path, tiny_bert, monkeypatch):
    from semsearch.experiments.cache import cache_key

    p = tmp_path / "d.toml"
    p.write_text(DISTILLED.format(base=tiny_bert, teacher='"Teacher"'))
    spec = load_spec(p)
    result = run_experiment(spec, progress=False, model_dir=tmp_path / "models")
    log = result.training["Student"]
    assert log["teacher_factors"][0] > 0 and log["pairs"] > log["judged_pairs"]
    saved = {d.name.split("-")[1]: d for d in (tmp_path / "models").iterdir()}
    teacher_recipe = json.loads((saved["rel"] / "recipe.json").read_text())
    student_recipe = json.loads((saved["rep"] / "recipe.json").read_text())
    # the student's recipe holds the teacher's recipe, not a path: its key follows the teacher's
    assert student_recipe["params"]["teacher"] == teacher_recipe
    bare = {k: v for k, v in teacher_recipe.items() if k not in ("kind", "trainer_version")}
    assert saved["rel"].name == f"bert-rel-{cache_key('bert-rel', bare)}"
    # a second run reuses both
    (saved["rep"] / "training.json").write_text('{"pairs": -1}')
    again = run_experiment(spec, progress=False, model_dir=tmp_path / "models")
    assert again.training["Student"]["pairs"] == -1
    assert len(list((tmp_path / "models").iterdir())) == 2
    # without a model directory the teacher is handed over in a temporary one, trained once for
    # every seed of its student (and once for its own row), and the directory goes with the run
    import tempfile

    from semsearch.experiments import runner

    calls = []
    real_fit = runner.fit
    monkeypatch.setattr(runner, "fit", lambda model, *a, **kw: calls.append(model.name) or real_fit(model, *a, **kw))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    p.write_text(DISTILLED.format(base=tiny_bert, teacher='"Teacher"') + "seeds = 2\n")
    seeded = run_experiment(load_spec(p), progress=False)
    assert seeded.training["Student (seed 1)"]["teacher_factors"][0] > 0
    assert sorted(calls) == ["bert-rel", "bert-rel", "bert-rep", "bert-rep"]
    assert list((tmp_path / "scratch").iterdir()) == []


def test_an_ensemble_of_teacher_rows_distils_into_a_student_row(tiny_data, tmp_path, tiny_bert):
    """``teacher`` may list rows, seed rows among them: each is trained once and the student's
    recipe holds each one's recipe, in order."""
    p = tmp_path / "d.toml"
    text = DISTILLED.format(base=tiny_bert, teacher='["Teacher", "Teacher (seed 1)"]')
    p.write_text(
        text.replace(
            'train = { split = "train", threshold = 2 }\n\n[[models]]\nlabel = "Student"',
            'train = { split = "train", threshold = 2 }\nseeds = 2\n\n[[models]]\nlabel = "Student"',
        )
    )
    result = run_experiment(load_spec(p), progress=False, model_dir=tmp_path / "models")
    log = result.training["Student"]
    assert len(log["teacher_factors"]) == 2 and all(f > 0 for f in log["teacher_factors"])
    saved = sorted((tmp_path / "models").iterdir())
    assert [d.name.split("-")[1] for d in saved] == ["rel", "rel", "rep"]
    student = json.loads((saved[2] / "recipe.json").read_text())
    teachers = student["params"]["teacher"]
    assert [t["params"].get("seed", 0) for t in teachers] == [0, 1]
    assert all(json.loads((d / "recipe.json").read_text()) in teachers for d in saved[:2])


def test_a_teacher_row_is_validated(tiny_data, tmp_path, tiny_bert):
    p = tmp_path / "d.toml"
    text = DISTILLED.format(base=tiny_bert, teacher='"Teacher"')
    p.write_text(text.replace('label = "Teacher"', 'label = "T"').replace('teacher = "Teacher"', 'teacher = "Student"'))
    with pytest.raises(
        SpecError, match=r"row 'Student': teacher 'Student' must be a trained bert-rel row listed before it"
    ):
        load_spec(p)
    p.write_text(text.replace('loss = "margin_mse", ', ""))
    with pytest.raises(SpecError, match=r"'teacher' .* needed by, and only by"):
        load_spec(p)
    # every row an ensemble names is checked; a seed row counts as its row
    p.write_text(text.replace('teacher = "Teacher"', 'teacher = ["Teacher", "Student (seed 1)"]') + "seeds = 2\n")
    with pytest.raises(
        SpecError, match=r"teacher 'Student \(seed 1\)' must be a trained bert-rel row listed before it"
    ):
        load_spec(p)
    p.write_text(text.replace('teacher = "Teacher"', 'teacher = ["Teacher", ""]'))
    with pytest.raises(SpecError, match=r"'teacher' lists saved cross-encoders' directories; got an empty name"):
        load_spec(p)
