"""Chinese, Japanese and Korean: the ``cjk`` analyzer (Lucene CJKAnalyzer's bigrams), ``auto``'s
choice, DSSM/CLSM word hashing of CJK characters, and the two-stage build on a small Chinese
collection (``write_zh_beir``)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from semsearch.models.lexical import BM25
from semsearch.params import ParamError
from semsearch.plugins import create_model
from semsearch.text import (
    Analyzer,
    TrigramHasher,
    cjk_tokenize,
    detect_analyzer,
    hash_words,
    tokenize,
    word_features,
    word_trigrams,
)

# -- a small Chinese collection -------------------------------------------------------------------

_PRODUCTS = ["充电宝", "蓝牙耳机", "笔记本电脑", "电饭煲", "保温杯", "运动鞋", "双肩包", "台灯", "机械键盘", "手机壳"]
_BRANDS = ["Apple", "小米", "华为", "Sony", "Nike"]
_COLOURS = ["黑色", "白色", "红色", "蓝色"]
_EXTRAS = ["新款", "大容量", "轻薄便携", "2024款"]


def write_zh_beir(root: Path, name: str = "zh") -> Path:
    """A small Chinese BEIR data set (train/dev/test qrels): 40 product titles, each a brand (some
    English: Apple, Sony, Nike), a colour, a product and an extra written together without spaces
    as Chinese shops write them (``小米黑色充电宝大容量``), and 30 queries: each product alone (its
    titles graded 2) and a colour with a product (that colour's title 3, the product's others 2).
    The text was written for this test (generated from the word lists above, seed 11); it
    comes from no corpus."""
    rnd = random.Random(11)
    d = root / name
    (d / "qrels").mkdir(parents=True)
    docs = []
    for p, product in enumerate(_PRODUCTS):
        for c, colour in enumerate(_COLOURS):
            brand, extra = rnd.choice(_BRANDS), _EXTRAS[(p + c) % len(_EXTRAS)]
            docs.append({"_id": f"z{p:02d}{c}", "title": f"{brand} {colour}{product}{extra}", "text": ""})
    queries: dict[str, str] = {}
    qrels: dict[str, list[tuple[str, str, int]]] = {"train": [], "dev": [], "test": []}
    for p, product in enumerate(_PRODUCTS):
        wanted = [(product, None), *((_COLOURS[c] + product, c) for c in rnd.sample(range(len(_COLOURS)), 2))]
        for text, colour in wanted:
            q = f"q{len(queries)}"
            queries[q] = text
            split = ["train", "train", "dev", "test"][len(queries) % 4]
            for c in range(len(_COLOURS)):
                qrels[split].append((q, f"z{p:02d}{c}", 3 if c == colour else 2))
            other = (p + 1) % len(_PRODUCTS)
            qrels[split].append((q, f"z{other:02d}0", 0))
    with open(d / "corpus.jsonl", "w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
    with open(d / "queries.jsonl", "w", encoding="utf-8") as f:
        for q, t in queries.items():
            f.write(json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n")
    for split, rows in qrels.items():
        with open(d / "qrels" / f"{split}.tsv", "w") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            for q, doc, g in rows:
                f.write(f"{q}\t{doc}\t{g}\n")
    return d


@pytest.fixture()
def zh_data(tmp_path, monkeypatch) -> Path:
    """SEMSEARCH_DATA pointing at a generated root holding the ``zh`` data set."""
    root = tmp_path / "data"
    write_zh_beir(root)
    monkeypatch.setenv("SEMSEARCH_DATA", str(root))
    return root


def _titles(root: Path) -> tuple[list[str], list[str]]:
    rows = [json.loads(line) for line in (root / "zh" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    return [r["_id"] for r in rows], [r["title"] for r in rows]


# -- the analyzer ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("我爱北京天安门", ["我爱", "爱北", "北京", "京天", "天安", "安门"]),  # Chinese: overlapping bigrams
        ("中", ["中"]),  # a lone character: itself
        ("中 国", ["中", "国"]),  # runs end at spaces
        ("手机，电脑", ["手机", "电脑"]),  # and at punctuation (full-width comma)
        ("すしとラーメン", ["すし", "しと", "とラ", "ラー", "ーメ", "メン"]),  # Hiragana and Katakana together
        ("한국어 사전", ["한국", "국어", "사전"]),  # Korean Hangul
        ("Apple iPhone15手机壳 黑色", ["apple", "iphone15", "手机", "机壳", "黑色"]),  # Latin and digits whole
        ("ＡＢＣ１２３ 东京タワー", ["abc123", "东京", "京タ", "タワ", "ワー"]),  # full-width: NFKC
        ("ｶﾀｶﾅ", ["カタ", "タカ", "カナ"]),  # half-width Katakana: full-width
        ("Hello World, café ΟΔΟΣ", ["hello", "world", "café", "οδος"]),  # no CJK: tokenize's tokens
    ],
)
def test_cjk_analyzer_tokens(text, tokens):
    assert Analyzer.named("cjk")(text) == tokens == cjk_tokenize(text)


def test_cjk_analyzer_config_round_trips_and_others_are_unchanged():
    cjk = Analyzer.named("cjk")
    assert cjk.config() == {"stem": None, "stopwords": False, "cjk": True}
    assert Analyzer.from_config(cjk.config()) == cjk
    # the other analyzers' saved configs (and the cache keys made of them) are as before
    assert Analyzer.named("paper").config() == {"stem": None, "stopwords": False}
    assert Analyzer.named("english").config() == {"stem": "porter", "stopwords": True}
    with pytest.raises(ValueError, match="'cjk' must be true or false"):
        Analyzer.from_config({"cjk": "yes"})
    with pytest.raises(ValueError, match="'paper', 'english' or 'cjk'"):
        Analyzer.named("auto")  # a choice per collection, not an analyzer


def test_cjk_equals_paper_without_cjk_characters():
    texts = ["Simpson Strong-Tie 12-Gauge", "über Straße", "ΟΔΟΣ σοφός", "٣٤ x_y", "", "ﬁne"]
    for t in texts:
        assert Analyzer.named("cjk")(t) == Analyzer.named("paper")(t) == tokenize(t)


def test_auto_rule():
    assert detect_analyzer(["小米黑色充电宝", "Apple 手机壳"]) == "cjk"
    assert detect_analyzer(["red lamp"] * 9 + ["台灯"]) == "cjk"  # a tenth of the texts
    assert detect_analyzer(["red lamp"] * 10 + ["台灯"]) == "paper"  # less
    assert detect_analyzer(["red lamp", "blue door"]) == "paper"
    assert detect_analyzer([]) == "paper"


def test_analyzer_param_lists_cjk_and_auto():
    assert create_model("bm25", analyzer="cjk").analyzer == Analyzer.named("cjk")
    with pytest.raises(ParamError, match="'paper', 'english', 'cjk', 'auto'"):
        create_model("bm25", analyzer="chinese")


def test_bm25_cjk_finds_chinese_titles_the_english_analyzer_cannot(tmp_path):
    write_zh_beir(tmp_path)
    ids, titles = _titles(tmp_path)
    cjk, english = BM25(analyzer="cjk"), BM25(analyzer="english")
    cjk.index(ids, titles)
    english.index(ids, titles)
    for query, product in [("充电宝", 0), ("蓝牙耳机", 1), ("白色电饭煲", 3), ("台灯", 7)]:
        top = [d for d, _ in cjk.retrieve([query], 4)[0]]
        assert {d[:3] for d in top} == {f"z{product:02d}"}, (query, top)
        assert not english.retrieve([query], 4)[0] or all(s == 0 for _, s in english.retrieve([query], 4)[0])
    # a colour with the product: that colour's title first
    assert cjk.retrieve(["白色电饭煲"], 1)[0][0][0] == "z031"
    # the brand in Latin letters still matches as a word
    assert all(titles[ids.index(d)].startswith("Sony") for d, _ in cjk.retrieve(["sony"], 3)[0])


def test_auto_picks_cjk_for_the_chinese_collection_and_saves_it(tmp_path):
    write_zh_beir(tmp_path)
    ids, titles = _titles(tmp_path)
    m = create_model("bm25", analyzer="auto")
    m.index(ids, titles)
    assert m.analyzer == Analyzer.named("cjk")
    assert m.retrieve(["充电宝"], 1)[0][0][0].startswith("z00")
    m.save(tmp_path / "m")
    loaded = BM25.load(tmp_path / "m")
    assert loaded.analyzer == Analyzer.named("cjk") and loaded.params()["analyzer"] == "cjk"
    en = create_model("bm25", analyzer="auto")
    en.index(["a", "b"], ["red lamp", "blue door"])
    assert en.analyzer == Analyzer.named("paper")


def test_spelling_leaves_cjk_words_alone(tmp_path):
    """A title's unspaced CJK run is a phrase: one edit away is another colour or product, not a
    misspelling (红色充电宝新款 was corrected to 黑色充电宝新款)."""
    from semsearch.text import SpellCorrector

    write_zh_beir(tmp_path)
    s = SpellCorrector.fit(_titles(tmp_path)[1])
    for q in ["红色充电宝新款", "白色充电宝新款", "黑色充电宝大容"]:
        assert s.correct(q) == q
    assert s.correct("Appel 充电宝") == "apple 充电宝"  # the Latin words are still corrected


# -- DSSM/CLSM word hashing -----------------------------------------------------------------------


def test_hash_words_and_features_of_cjk():
    assert hash_words("Apple手机壳") == ["apple", "手机", "机壳", "壳"]
    assert hash_words("한국어") == ["한국", "국어", "어"]
    assert word_features("手机") == ["手", "手机"] and word_features("壳") == ["壳"]
    assert word_features("cat") == word_trigrams("cat")
    # the bag of a run: each character once and each adjacent pair once
    bag = sorted(f for w in hash_words("苹果手机壳") for f in word_features(w))
    assert bag == sorted(["苹", "果", "手", "机", "壳", "苹果", "果手", "手机", "机壳"])


def test_chinese_query_and_title_share_features():
    h = TrigramHasher.fit(["小米黑色充电宝大容量", "Apple 白色手机壳", "华为蓝牙耳机"])
    q, t, other = h.transform(["充电宝", "小米黑色充电宝大容量", "蓝牙耳机"]).toarray()
    assert (q > 0).sum() == 5  # 充 电 宝 充电 电宝
    assert np.all(t[q > 0] > 0)  # all in the title
    assert not np.any(other[q > 0])
    # the compiled path (encode) equals the text-by-text one on CJK text
    fast, slow = type(h.table)(h), type(h.table)(h)
    texts = ["充电宝", "小米黑色充电宝大容量", "Apple 白色手机壳 ｉＰｈｏｎｅ", "すし 한국어", "brick wall"]
    a, b = fast.encode(texts), slow.encode_each(texts)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert np.array_equal(fast.bags(a[1]).ids, slow.bags(b[1]).ids)


def test_latin_features_are_unchanged():
    """Latin (and other non-CJK) text is hashed exactly as before CJK support: the words are
    ``tokenize``'s and their features the ``#word#`` letter trigrams, so saved models keep
    their features bit for bit."""
    texts = ["Simpson Strong-Tie 12-Gauge Angle", "über Straße ΟΔΟΣ", "ﬁne e\u0301 ǅemal", "2x4 a_b", "brick"]
    h = TrigramHasher.fit(texts)
    old = {}
    for t in texts:
        for w in tokenize(t):
            for tri in word_trigrams(w):
                old[tri] = old.get(tri, 0) + 1
    assert sorted(h.trigrams) == sorted(old)
    m = h.transform(texts).toarray()
    for r, t in enumerate(texts):
        want = np.zeros(len(h), dtype=np.float32)
        for w in tokenize(t):
            for tri in word_trigrams(w):
                want[h.index[tri]] += 1
        assert np.array_equal(m[r], want)


# -- the two-stage build, end to end --------------------------------------------------------------


def test_two_stage_build_on_the_chinese_collection(zh_data, tmp_path, one_torch_thread):
    """``index build`` of BM25 (cjk analyzer) and a DSSM trained for one epoch on the Chinese
    collection, with a LambdaMART ranker trained in the build; a search returns Chinese hits."""
    from typer.testing import CliRunner

    from semsearch.cli import app
    from semsearch.data import EvalSet, TrainingData, open_dataset
    from semsearch.index import Bundle
    from semsearch.training import fit, recipe

    ds = open_dataset("zh")
    kw, args = recipe(
        "dssm",
        {"hidden": [32], "out": 8, "batch_size": 8, "neg_pool": 16, "epochs": 1, "lr": 0.5, "seed": 0},
    )
    dssm = create_model("dssm", **kw)
    fit(dssm, TrainingData.from_dataset(ds, "train", threshold=2), EvalSet.judged(ds, "dev"), progress=False, args=args)
    assert any(not t.isascii() for t in dssm.hasher.trigrams)  # CJK features learned
    dssm.save(tmp_path / "dssm")
    out = tmp_path / "B"
    r = CliRunner().invoke(
        app,
        [
            "index",
            "build",
            "--data",
            "zh",
            "--models",
            f"bm25,{tmp_path / 'dssm'}",
            "--analyzer",
            "cjk",
            "--fields",
            "title",
            "--out",
            str(out),
            "--train-ranker",
            "--ranker-param",
            "stage_depths=[[5,5]]",
            "--ranker-param",
            "min_data_in_leaf=2",
            "--ranker-param",
            "num_boost_round=30",
        ],
    )
    assert r.exit_code == 0, r.output
    b = Bundle.load(out, result_cache=0)
    title = dict(zip(*_titles(zh_data)))
    hits = [title[h.doc_id] for h in b.search("充电宝", k=4).hits]
    assert len(hits) == 4 and all("充电宝" in t for t in hits), hits
    hits = [title[h.doc_id] for h in b.search("蓝色运动鞋", k=3).hits]
    assert "蓝色运动鞋" in hits[0] and all("运动鞋" in t for t in hits), hits


def test_run_with_auto_analyzer_on_the_chinese_collection(zh_data, tmp_path):
    """``semsearch run --analyzer auto`` retrieves each test query's product titles first."""
    from typer.testing import CliRunner

    from semsearch.cli import app
    from semsearch.data import read_run

    out = tmp_path / "run.trec"
    args = ["run", "--model", "bm25", "--analyzer", "auto", "--data", "zh", "--candidates", "full", "--k", "4"]
    r = CliRunner().invoke(app, [*args, "--fields", "title", "--out", str(out)])
    assert r.exit_code == 0, r.output
    run = read_run(out)
    queries = {json.loads(x)["_id"]: json.loads(x)["text"] for x in (zh_data / "zh" / "queries.jsonl").open()}
    assert run
    for q, docs in run.items():
        product = next(p for p, name in enumerate(_PRODUCTS) if name in queries[q])
        assert {d[:3] for d in docs} == {f"z{product:02d}"}, (queries[q], docs)


def test_experiment_rows_with_auto_and_cjk_agree(zh_data, tmp_path):
    """An experiment row with ``analyzer = "auto"`` indexes the Chinese collection with ``cjk``
    (the runner shares one index per analyzer): its run is the ``cjk`` row's, well above ``paper``'s."""
    from semsearch.experiments import load_spec, run_experiment

    rows = "".join(f'\n[[models]]\nlabel = "{a}"\nmodel = "bm25"\nanalyzer = "{a}"\n' for a in ("auto", "cjk", "paper"))
    p = tmp_path / "zh.toml"
    p.write_text(
        'name = "zh"\ntitle = "zh"\nsource = "test"\ndataset = "zh"\nsplit = "test"\nfields = "title"\n'
        'candidates = "full:10"\nmetrics = ["ndcg@3"]\n' + rows,
        encoding="utf-8",
    )
    result = run_experiment(load_spec(p), progress=False)
    assert result.runs["auto"] == result.runs["cjk"]
    score = {label: row.result.mean["ndcg@3"] for label, row in result.table.rows.items()}
    assert score["cjk"] > 0.9 > score["paper"], score
