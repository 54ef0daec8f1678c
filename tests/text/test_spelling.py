"""Query spelling correction (text.SpellCorrector) and where it applies: spec rows
(correct_queries), `semsearch run --correct-queries`, bundles and the service."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from semsearch.cli import app
from semsearch.text import SpellCorrector, SpellingParams

TITLES = (
    ["Kohler Cimarron bathroom sink in white"] * 30
    + ["Glacier Bay kitchen faucet"] * 25
    + [
        "Ryobi 18V cordless drill",
        "Deck paint 1 gal.",
        "Air conditioner 12000 BTU window",
        "Kitchen cabinet knobs",
        "Bathtubs and showers",
        "Pressure treated 6x8 post",
        "ACME bolt",
    ]
    + ["deck stain", "air filter", "paint roller"] * 25
)


@pytest.fixture(scope="module")
def corrector() -> SpellCorrector:
    return SpellCorrector.fit(TITLES)


def test_misspelt_words_become_collection_words(corrector):
    assert corrector.correct("koehler bathroom sink") == "kohler bathroom sink"  # 1 edit (a letter too many)
    assert corrector.correct("glacie bay faucet") == "glacier bay faucet"  # 1 edit (a letter missing)
    assert corrector.correct("kithcen cabinet") == "kitchen cabinet"  # a transposition is one edit
    assert corrector.correct("cimmarrn sink") == "cimarron sink"  # 7+ letters: two edits allowed
    assert corrector.correct("deckpaint") == "deck paint"  # two frequent words run together
    assert corrector.corrections("KOEHLER Sink") == [("KOEHLER", "kohler")]
    assert corrector.correct("KOEHLER Sink, 2 pack") == "kohler Sink, 2 pack"  # the rest as typed


def test_words_left_alone(corrector):
    # known words, a shared stem (bathtub ~ bathtubs), short words, digits (sizes, model numbers),
    # words nothing is near
    for q in ["kohler sink", "bathtub", "acm bolt", "6x9 post", "rb18v drill", "zzzzqqq", "18v"]:
        assert corrector.correct(q) == q and corrector.corrections(q) == []
    assert corrector.correct("acmepaint") == "acmepaint"  # a split needs two words seen >= 20 times (acme: once)


def test_a_collection_without_words_corrects_nothing():
    for texts in ([], ["", "12 34", "a"]):
        c = SpellCorrector.fit(texts)
        assert c.correct("koehler sink 12") == "koehler sink 12" and c.corrections("koehler") == []


def test_params_are_validated_and_change_the_rules():
    with pytest.raises(ValueError, match="min_length"):
        SpellingParams(min_length=0)
    strict = SpellCorrector.fit(TITLES, SpellingParams(long_word=20))  # two edits never allowed
    assert strict.correct("cimmarrn sink") == "cimmarrn sink"


def test_save_load_round_trip_and_bad_files(corrector, tmp_path):
    p = tmp_path / "spelling.json"
    corrector.save(p)
    again = SpellCorrector.load(p)
    assert again.counts == corrector.counts and again.params == corrector.params
    assert again.correct("koehler glacie") == "kohler glacier"
    assert not list(tmp_path.glob("*.tmp"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"params": {}, "counts": {"a": "x"}}))
    with pytest.raises(ValueError, match="bad.json"):
        SpellCorrector.load(bad)
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        SpellCorrector.load(bad)


def _misspell_tiny(root: Path) -> None:
    """Misspell the tiny data set's test queries' first word ("red" -> "rred", ...)."""
    qf = root / "tiny" / "queries.jsonl"
    rows = [json.loads(x) for x in qf.read_text().splitlines()]
    tests = {x.split("\t")[0] for x in (root / "tiny" / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    for r in rows:
        if r["_id"] in tests:
            w = r["text"].split()
            w[0] = w[0][0] + w[0]  # one letter doubled: one edit
            r["text"] = " ".join(w)
    qf.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_run_cli_corrects_queries(tiny_data, tmp_path):
    _misspell_tiny(tiny_data)
    runs = {}
    for flag in ([], ["--correct-queries"]):
        out = tmp_path / f"run{len(flag)}.trec"
        r = CliRunner().invoke(
            app,
            [
                "run",
                "--model",
                "bm25",
                "--data",
                "tiny",
                "--split",
                "test",
                "--candidates",
                "judged",
                "--fields",
                "title",
                "--out",
                str(out),
                *flag,
            ],
        )
        assert r.exit_code == 0, r.output
        runs[bool(flag)] = out.read_text()
        if flag:
            assert "corrected the spelling of" in r.output
    from semsearch.data import open_dataset, read_run
    from semsearch.evaluation import evaluate

    qrels = open_dataset("tiny").qrels("test")
    for name, text in runs.items():
        (tmp_path / f"{name}.trec").write_text(text)
    raw = evaluate(read_run(tmp_path / "False.trec"), qrels, ["ndcg@3"]).mean["ndcg@3"]
    fixed = evaluate(read_run(tmp_path / "True.trec"), qrels, ["ndcg@3"]).mean["ndcg@3"]
    assert fixed > raw + 0.05  # the misspelt words matched nothing; corrected, they match


def test_spec_rows_rank_with_corrected_queries(tiny_data, tmp_path):
    from semsearch.experiments import run_experiment
    from semsearch.experiments.spec import load_spec

    _misspell_tiny(tiny_data)
    spec = tmp_path / "s.toml"
    spec.write_text("""name = "s"
title = "t"
source = "test"
dataset = "tiny"
split = "test"
candidates = "judged"
fields = "title"
metrics = ["ndcg@3"]
tune = "none"
[[models]]
label = "BM25"
model = "bm25"
[[models]]
label = "BM25, corrected queries"
model = "bm25"
correct_queries = true
[[models]]
label = "both"
model = "interpolate"
combine = ["BM25", "BM25, corrected queries"]
""")
    res = run_experiment(load_spec(spec), progress=False)
    score = {r: res.table.rows[r].result.mean["ndcg@3"] for r in ("BM25", "BM25, corrected queries")}
    assert score["BM25, corrected queries"] > score["BM25"] + 0.05
    text = spec.read_text()
    spec.write_text(text.replace("correct_queries = true", 'correct_queries = "yes"'))
    with pytest.raises(ValueError, match="correct_queries"):
        load_spec(spec)
    spec.write_text(text + "correct_queries = true\n")  # on the interpolation row: it ranks nothing itself
    with pytest.raises(ValueError, match="'both': correct_queries applies to rows that rank"):
        load_spec(spec)


def test_bundle_corrects_queries_and_says_so(make_bundle, tmp_path):
    from semsearch.index import Bundle

    p = make_bundle(tmp_path / "b")
    man = json.loads((p / "manifest.json").read_text())
    assert man["spelling"]["path"] == "spelling.json" and "spelling.json" in man["files"]
    b = Bundle.load(p)
    r = b.search("rred cat", 5)
    assert r.query == "red cat" and r.hits
    as_typed = b.search("rred cat", 5, correct=False)
    assert as_typed.query == "rred cat"
    assert [h.doc_id for h in r.hits] == [h.doc_id for h in b.search("red cat", 5).hits]
    assert b.search("red cat", 5).query == "red cat"
    b.close()
    off = Bundle.load(p, correct_queries=False)  # serve --no-correct-queries: each worker's LoadOptions
    assert not off.correct_queries and off.search("rred cat", 5).query == "rred cat"
    assert off.search("rred cat", 5, correct=True).query == "red cat"
    off.close()
    (p / "spelling.json").write_text("{}")
    from semsearch.models import ModelDirError

    with pytest.raises(ModelDirError):
        Bundle.load(p)  # the checksum no longer matches


def test_bundle_without_corrector(tiny_data, tmp_path):
    from semsearch.data import open_dataset
    from semsearch.index import Bundle, build_bundle
    from semsearch.plugins import create_model

    p = build_bundle(open_dataset("tiny").corpus(), [create_model("bm25")], tmp_path / "b", spelling=False)
    b = Bundle.load(p)
    assert b.corrector is None and b.search("rred cat", 5).query == "rred cat"
    with pytest.raises(ValueError, match="no spelling corrector"):
        b.search("rred cat", 5, correct=True)
    b.close()


def test_service_answers_with_the_corrected_query(make_bundle, tmp_path):
    from fastapi.testclient import TestClient

    from semsearch.serving import create_app

    p = make_bundle(tmp_path / "b")
    with TestClient(create_app(p)) as client:
        body = client.get("/search", params={"q": "rred cat", "k": 3}).json()
        assert body["query"] == "rred cat" and body["corrected_query"] == "red cat" and body["hits"]
        assert any(body["hits"][0]["highlights"])  # highlights follow the searched (corrected) words
        body = client.get("/search", params={"q": "red cat", "k": 3}).json()
        assert body["corrected_query"] is None


def test_explanations_follow_the_searched_query(two_stage, make_bundle, tmp_path):
    from semsearch.index import Bundle

    b = Bundle.load(two_stage)
    top = b.search("rred cat", 1).hits[0].doc_id
    typo, fixed = b.explain_rank("rred cat", top), b.explain_rank("red cat", top)
    assert typo == fixed and typo["score"] is not None and typo["source"] is not None
    b.close()
    b = Bundle.load(make_bundle(tmp_path / "clsm"))
    doc = b.search("red cat", 1).hits[0].doc_id
    assert b.explain("rred cat", doc) == b.explain("red cat", doc)
    b.close()
