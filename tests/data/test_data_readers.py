"""Readers and writers of semsearch.data on tiny files: round trips, bad input, atomic writes."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from semsearch.data import (
    BadLinePolicy,
    DataFormatError,
    DataWarning,
    Document,
    binary_labels,
    domain_names,
    iter_clicks,
    iter_pairs,
    load_corpus,
    load_qrels,
    load_queries,
    load_query_domains,
    ranked,
    read_run,
    write_clicks,
    write_corpus,
    write_pairs,
    write_qrels,
    write_queries,
    write_run,
    write_trec_qrels,
)

BAD_UTF8 = b"\xff\xfe bad"


def put(path: Path, lines: list[str | bytes]) -> Path:
    """Write lines (text or raw bytes) to a file, one per line."""
    path.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines))
    return path


# ------------------------------------------------------------------------------------ round trips


def test_corpus_round_trip(tmp_path):
    docs = [Document("d1", "Title é", "body"), Document("d2", "", "only text"), Document("d3", "only title", "")]
    write_corpus(docs, tmp_path / "corpus.jsonl")
    corpus = load_corpus(tmp_path / "corpus.jsonl")
    assert list(corpus) == docs and corpus[1] == docs[1]
    write_corpus(corpus, tmp_path / "again.jsonl")  # a Corpus is an iterable of documents
    assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "corpus.jsonl").read_bytes()
    assert corpus.index == {"d1": 0, "d2": 1, "d3": 2}
    assert corpus.joined() == ["Title é body", "only text", "only title"]
    assert corpus.text(0, "title") == "Title é" and corpus.text(0, "text") == "body"
    with pytest.raises(ValueError, match="fields"):
        corpus.text(0, "body")  # type: ignore[arg-type]


def test_corpus_missing_title_and_extra_fields(tmp_path):
    put(tmp_path / "c.jsonl", ['{"_id": "a", "text": "x", "metadata": {}}', '{"_id": "b", "title": null}'])
    corpus = load_corpus(tmp_path / "c.jsonl")
    assert corpus.titles == ["", ""] and corpus.texts == ["x", ""]


def test_queries_round_trip_and_tsv(tmp_path):
    queries = {"q1": "l bracket", "q2": "deck över"}
    write_queries(queries, tmp_path / "queries.jsonl")
    assert load_queries(tmp_path / "queries.jsonl") == queries
    put(tmp_path / "queries.tsv", ["q1\tl bracket", "q2\tdeck över"])
    assert load_queries(tmp_path / "queries.tsv") == queries
    put(tmp_path / "queries.dat", ["q1\tl bracket", "q2\tdeck över"])  # no telling suffix: sniffed
    assert load_queries(tmp_path / "queries.dat") == queries


QRELS = {"q1": {"d1": 3, "d2": 0}, "q2": {"d1": 1}}


def test_qrels_round_trip_beir_and_trec(tmp_path):
    write_qrels(QRELS, tmp_path / "test.tsv")
    assert (tmp_path / "test.tsv").read_text().splitlines()[0] == "query-id\tcorpus-id\tscore"
    assert load_qrels(tmp_path / "test.tsv") == QRELS
    write_trec_qrels(QRELS, tmp_path / "qrels.txt")
    assert (tmp_path / "qrels.txt").read_text().splitlines()[0] == "q1 0 d1 3"
    assert load_qrels(tmp_path / "qrels.txt") == QRELS
    put(tmp_path / "noheader.tsv", ["q1\td1\t3", "q1\td2\t0", "q2\td1\t1"])
    assert load_qrels(tmp_path / "noheader.tsv") == QRELS


def test_ranked_breaks_ties_by_doc_id():
    assert ranked({"b": 1.0, "c": 2.0, "a": 1.0}) == [("c", 2.0), ("a", 1.0), ("b", 1.0)]


def test_run_round_trip(tmp_path):
    run = {"q2": {"b": 0.5, "a": 0.5, "c": 1 / 3}, "q1": {"x": np.float32(0.1), "y": -2.0}}
    write_run(run, tmp_path / "r.trec", tag="bm25")
    lines = (tmp_path / "r.trec").read_text().splitlines()
    assert lines[:3] == ["q2 Q0 a 1 0.5 bm25", "q2 Q0 b 2 0.5 bm25", f"q2 Q0 c 3 {1 / 3!r} bm25"]
    back = read_run(tmp_path / "r.trec")
    assert back == {q: {d: float(s) for d, s in docs.items()} for q, docs in run.items()}  # exact floats
    write_run(run, tmp_path / "top1.trec", k=1)
    assert read_run(tmp_path / "top1.trec") == {"q2": {"a": 0.5}, "q1": {"x": float(np.float32(0.1))}}


def test_pairs_and_clicks_round_trip(tmp_path):
    pairs = [("l bracket", "Simpson Strong-Tie Angle"), ("deck over", "BEHR DeckOver")]
    write_pairs(pairs, tmp_path / "pairs.tsv")
    assert list(iter_pairs(tmp_path / "pairs.tsv")) == pairs
    clicks = [("l bracket", "100001", 3), ("deck over", "100002", 0)]
    write_clicks(clicks, tmp_path / "clicks.tsv")
    assert list(iter_clicks(tmp_path / "clicks.tsv")) == clicks


def test_pair_and_click_headers_tolerated(tmp_path):
    put(tmp_path / "p.tsv", ["query\ttitle", "a\tb"])
    assert list(iter_pairs(tmp_path / "p.tsv")) == [("a", "b")]
    put(tmp_path / "c.tsv", ["query\tdoc_id\tclicks", "a\td\t2"])
    assert list(iter_clicks(tmp_path / "c.tsv")) == [("a", "d", 2)]


DOMAIN_FILES = {
    "sgd": [
        "split\tdialogue_id\tdomains\ttext",
        "train\t1_0\tRestaurants\tfind food",
        "dev\t1_1\tHotels,Flights\tbook a trip",
    ],
    "clinc": ["split\tdomain\tintent\ttext", "train\tbanking\tbalance\tmy balance", "val\tout_of_scope\toos\thello"],
    "snips": ["split\tintent\ttext", "train\tGetWeather\train today?", "validate\tPlayMusic\tplay jazz"],
}


def test_query_domains_formats(tmp_path):
    sgd = load_query_domains(put(tmp_path / "sgd.tsv", DOMAIN_FILES["sgd"]))
    assert [(r.split, r.labels, r.intent) for r in sgd] == [
        ("train", ("Restaurants",), None),
        ("dev", ("Hotels", "Flights"), None),
    ]
    clinc = load_query_domains(put(tmp_path / "clinc.tsv", DOMAIN_FILES["clinc"]))
    assert [(r.split, r.labels, r.intent) for r in clinc] == [
        ("train", ("banking",), "balance"),
        ("dev", ("out_of_scope",), "oos"),
    ]
    snips = load_query_domains(put(tmp_path / "snips.tsv", DOMAIN_FILES["snips"]))
    assert [(r.split, r.labels, r.text) for r in snips] == [
        ("train", ("GetWeather",), "rain today?"),
        ("dev", ("PlayMusic",), "play jazz"),
    ]
    assert domain_names(sgd) == ["Flights", "Hotels", "Restaurants"]
    texts, y = binary_labels(sgd, "Flights", "dev")
    assert texts == ["book a trip"] and y.tolist() == [1] and y.dtype == np.int8
    assert binary_labels(clinc, "banking", "val")[1].tolist() == [0]  # split aliases accepted
    with pytest.raises(ValueError, match="unknown domain"):
        binary_labels(sgd, "Restaurant", "train")
    with pytest.raises(ValueError, match="no records in split 'test'"):
        binary_labels(sgd, "Hotels", "test")


# ------------------------------------------------------------------------------------- bad input

# reader -> (call, file name, header line or None, two good lines that give two records)
READERS = {
    "corpus": (load_corpus, "corpus.jsonl", None, ['{"_id": "d1", "title": "t"}', '{"_id": "d2", "text": "y"}']),
    "corpus_tsv": (load_corpus, "docs.tsv", "ID\tTitle\tText", ["d1\tt\tx", "d2\tu"]),
    "queries": (load_queries, "queries.jsonl", None, ['{"_id": "q1", "text": "a"}', '{"_id": "q2", "text": "b"}']),
    "queries_tsv": (load_queries, "queries.tsv", None, ["q1\ta", "q2\tb"]),
    "qrels": (load_qrels, "test.tsv", "query-id\tcorpus-id\tscore", ["q1\td1\t1", "q2\td2\t0"]),
    "trec_qrels": (load_qrels, "qrels.txt", None, ["q1 0 d1 1", "q2 0 d2 0"]),
    "run": (read_run, "run.trec", None, ["q1 Q0 d1 1 2.5 t", "q2 Q0 d1 1 1.0 t"]),
    "pairs": (lambda p, **kw: list(iter_pairs(p, **kw)), "pairs.tsv", None, ["a\tA", "b\tB"]),
    "clicks": (lambda p, **kw: list(iter_clicks(p, **kw)), "clicks.tsv", None, ["a\td1\t1", "b\td2\t0"]),
    "domains": (load_query_domains, "snips.tsv", "split\tintent\ttext", ["train\tX\ta", "test\tY\tb"]),
}

# (reader, bad line placed between the two good ones, expected message fragment)
BAD_LINES = [
    ("corpus", '{"_id": "d3", "title": "t"', "invalid JSON"),
    ("corpus", '{"title": "t", "text": "x"}', "missing '_id'"),
    ("corpus", '{"_id": "d3", "title": 7}', "'title' must be a string"),
    ("corpus", '{"_id": 3, "title": "t"}', "'_id' must be a string"),
    ("corpus", '["d3", "t"]', "expected a JSON object"),
    ("corpus", '{"_id": "d1", "title": "again"}', "duplicate _id 'd1'"),
    ("corpus", BAD_UTF8, "not valid UTF-8"),
    ("corpus_tsv", "d3", "expected 2 or 3 tab-separated columns"),
    ("corpus_tsv", "d3\ta\tb\tc", "expected 2 or 3 tab-separated columns"),
    ("corpus_tsv", "d3\t \t ", "neither title nor text"),
    ("corpus_tsv", "d1\tagain", "duplicate _id 'd1'"),
    ("corpus_tsv", BAD_UTF8, "not valid UTF-8"),
    ("queries", '{"_id": "q3", "text": "a"', "invalid JSON"),
    ("queries", '{"_id": "q3"}', "missing 'text'"),
    ("queries", '{"_id": "q1", "text": "x"}', "duplicate query id 'q1'"),
    ("queries", BAD_UTF8, "not valid UTF-8"),
    ("queries_tsv", "q3", "expected 2 tab-separated columns"),
    ("queries_tsv", "q3\ta\tb", "expected 2 tab-separated columns"),
    ("queries_tsv", "q3\t ", "empty text"),
    ("queries_tsv", BAD_UTF8, "not valid UTF-8"),
    ("qrels", "q3\td1\t1.5", "score '1.5' is not an integer"),
    ("qrels", "q3\td1", "expected 3 columns, got 2"),
    ("qrels", "q3\td1\t1\textra", "expected 3 columns, got 4"),
    ("qrels", "q1\td1\t2", "duplicate judgment"),
    ("qrels", BAD_UTF8, "not valid UTF-8"),
    ("trec_qrels", "q3 0 d1 x", "score 'x' is not an integer"),
    ("trec_qrels", "q3 0 d1", "expected 4 columns, got 3"),
    ("trec_qrels", BAD_UTF8, "not valid UTF-8"),
    ("run", "q3 Q0 d1 1 2.5", "expected 6 columns"),
    ("run", "q3 Q0 d1 1 high t", "score 'high' is not a number"),
    ("run", "q3 Q0 d1 1 nan t", "not finite"),
    ("run", "q3 Q0 d1 one 2.5 t", "rank 'one'"),
    ("run", "q1 Q0 d1 2 0.5 t", "duplicate doc 'd1'"),
    ("run", BAD_UTF8, "not valid UTF-8"),
    ("pairs", "only a query", "expected 2 tab-separated columns"),
    ("pairs", "a\tb\tc", "expected 2 tab-separated columns"),
    ("pairs", " \ttitle", "empty query"),
    ("pairs", BAD_UTF8, "not valid UTF-8"),
    ("clicks", "a\td1", "expected 3 tab-separated columns"),
    ("clicks", "a\td1\t-1", "clicks '-1' is not an integer >= 0"),
    ("clicks", "a\td1\t2.5", "clicks '2.5' is not an integer >= 0"),
    ("clicks", "\td1\t2", "empty query"),
    ("clicks", BAD_UTF8, "not valid UTF-8"),
    ("domains", "train\tX", "expected 3 tab-separated columns"),
    ("domains", "train\tX\t ", "empty text"),
    ("domains", BAD_UTF8, "not valid UTF-8"),
]


def _bad_file(tmp_path: Path, reader: str, bad: str | bytes) -> tuple[Path, int]:
    """A file of the reader's format with `bad` between two good lines; returns it and bad's line."""
    _, name, header, good = READERS[reader]
    lines = ([header] if header else []) + [good[0], bad, good[1]]
    return put(tmp_path / name, lines), lines.index(bad) + 1


@pytest.mark.parametrize(
    "reader,bad,message", BAD_LINES, ids=lambda x: x if isinstance(x, str) and len(x) < 12 else None
)
def test_bad_line_names_file_and_line(tmp_path, reader, bad, message):
    path, line = _bad_file(tmp_path, reader, bad)
    with pytest.raises(DataFormatError) as info:
        READERS[reader][0](path)
    assert (info.value.path, info.value.line) == (str(path), line)
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert message in str(info.value)


@pytest.mark.parametrize(
    "reader,bad,message", BAD_LINES, ids=lambda x: x if isinstance(x, str) and len(x) < 12 else None
)
def test_skip_bad_lines_warns_with_count_and_keeps_good_rows(tmp_path, reader, bad, message):
    path, line = _bad_file(tmp_path, reader, bad)
    with pytest.warns(DataWarning) as record:
        result = READERS[reader][0](path, skip_bad_lines=True)
    assert len(record) == 1
    text = str(record[0].message)
    assert f"{path}: skipped 1 bad line (lines {line})" in text and message in text
    assert len(result) == 2


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("content", [b"", b"\n  \n"], ids=["empty", "blank"])
def test_empty_file_is_an_error(tmp_path, reader, content):
    call, name, header, _ = READERS[reader]
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataFormatError, match="empty file") as info:
        call(path, skip_bad_lines=True)
    assert info.value.line is None and str(info.value).startswith(f"{path}: ")


@pytest.mark.parametrize("reader", ["qrels", "domains", "corpus_tsv"])
def test_header_only_is_an_error(tmp_path, reader):
    call, name, header, _ = READERS[reader]
    with pytest.raises(DataFormatError, match="no records"):
        call(put(tmp_path / name, [header]))


def test_unknown_domain_header(tmp_path):
    path = put(tmp_path / "x.tsv", ["", "split\tlabel\ttext", "train\tA\thi"])
    with pytest.raises(DataFormatError, match="unknown header") as info:
        load_query_domains(path)
    assert info.value.line == 2


def test_qrels_columns_must_match_either_format(tmp_path):
    with pytest.raises(DataFormatError, match="BEIR.*TREC") as info:
        load_qrels(put(tmp_path / "q.tsv", ["q1 d1"]))
    assert info.value.line == 1


def test_qrels_id_resolution(tmp_path):
    path = put(tmp_path / "test.tsv", ["query-id\tcorpus-id\tscore", "q1\td1\t1", "q1\tmissing\t1", "q9\td1\t2"])
    with pytest.raises(DataFormatError, match="doc id 'missing' has no document") as info:
        load_qrels(path, doc_ids={"d1"}, query_ids={"q1"})
    assert str(info.value).startswith(f"{path}:3: ")
    with pytest.warns(DataWarning, match=r"skipped 2 bad lines \(lines 3, 4\)"):
        assert load_qrels(path, doc_ids={"d1"}, query_ids={"q1"}, skip_bad_lines=True) == {"q1": {"d1": 1}}


def test_warning_lists_first_few_lines(tmp_path):
    path = put(tmp_path / "p.tsv", ["a\tb"] + ["bad"] * 7 + ["c\td"])
    with pytest.warns(DataWarning, match=r"skipped 7 bad lines \(lines 2, 3, 4, 5, 6, \.\.\.\)"):
        assert len(list(iter_pairs(path, skip_bad_lines=True))) == 2


def test_no_warning_without_bad_lines(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(iter_pairs(put(tmp_path / "p.tsv", ["a\tb"]), skip_bad_lines=True)) == [("a", "b")]


def test_error_str_and_policy():
    assert str(DataFormatError("f.tsv", 3, "boom")) == "f.tsv:3: boom"
    assert str(DataFormatError("f.tsv", None, "boom")) == "f.tsv: boom"
    assert isinstance(DataFormatError("f", 1, "m"), ValueError)
    policy = BadLinePolicy("f.tsv", skip_bad_lines=True)
    policy.bad(4, "x")
    with pytest.warns(DataWarning, match="f.tsv: skipped 1 bad line"):
        policy.finish()


def test_crlf_and_bom_are_accepted(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"_id": "q1", "text": "a"}\r\n{"_id": "q2", "text": "b"}\r\n')
    assert load_queries(path) == {"q1": "a", "q2": "b"}


# --------------------------------------------------------------------------------- atomic writes

# writer -> (call, rows whose second row makes it fail midway)
FAILING_WRITES = {
    "run": lambda p: write_run({"q1": {"d1": 1.0}, "q2": {"d1": "not a float"}}, p),
    "run_nan": lambda p: write_run({"q1": {"d1": 1.0}, "q2": {"d1": float("nan")}}, p),
    "corpus": lambda p: write_corpus([Document("d1", "t", "x"), Document("", "t", "x")], p),
    "queries": lambda p: write_queries({"q1": "a", "": "b"}, p),
    "qrels": lambda p: write_qrels({"q1": {"d1": 1, "d2": 1.5}}, p),
    "trec_qrels": lambda p: write_trec_qrels({"q1": {"d1": 1, "d 2": 1}}, p),
    "pairs": lambda p: write_pairs([("a", "b"), ("a\tb", "c")], p),
    "clicks": lambda p: write_clicks([("a", "d", 1), ("a", "d", -1)], p),
}


@pytest.mark.parametrize("writer", FAILING_WRITES)
def test_failed_write_leaves_old_file_and_no_temp(tmp_path, writer):
    path = tmp_path / "out.txt"
    path.write_text("old content\n")
    with pytest.raises((ValueError, TypeError)):
        FAILING_WRITES[writer](path)
    assert path.read_text() == "old content\n"
    assert list(tmp_path.iterdir()) == [path]


def test_failed_write_midway_from_a_generator(tmp_path):
    def pairs():
        yield "a", "b"
        raise RuntimeError("disk full")

    path = tmp_path / "pairs.tsv"
    with pytest.raises(RuntimeError):
        write_pairs(pairs(), path)
    assert list(tmp_path.iterdir()) == []


def test_write_creates_parent_folders(tmp_path):
    write_run({"q": {"d": 1.0}}, tmp_path / "a" / "b" / "r.trec")
    assert read_run(tmp_path / "a" / "b" / "r.trec") == {"q": {"d": 1.0}}


def test_queries_format_follows_suffix_before_sniffing(tmp_path):
    path = put(tmp_path / "queries.jsonl", ['"_id": "q1", "text": "a"}'])
    with pytest.raises(DataFormatError, match="invalid JSON"):
        load_queries(path)


def test_empty_domain_label(tmp_path):
    path = put(tmp_path / "clinc.tsv", [DOMAIN_FILES["clinc"][0], "train\t\tbalance\tmy balance"])
    with pytest.raises(DataFormatError, match=r":2: empty label"):
        load_query_domains(path)


@pytest.mark.parametrize(
    "header",
    ["id\ttitle\ttext", "doc_id\ttitle", "DocID\tTITLE\tBody", "_id\ttext", "docno\tcontents", " id \t title "],
)
def test_tsv_corpus_header_is_not_a_document(tmp_path, header):
    c = load_corpus(put(tmp_path / "docs.tsv", [header, "d1\tRed drill\tcordless", "d2\tBlue paint"]))
    assert c.ids == ["d1", "d2"] and c.titles == ["Red drill", "Blue paint"]


def test_tsv_corpus_first_line_that_is_data_is_kept(tmp_path):
    """Only names of columns make a header: a document whose id is 'id' with a real title stays."""
    c = load_corpus(put(tmp_path / "docs.txt", ["id\tIdentity card holder", "d2\ttitle"]))
    assert c.ids == ["id", "d2"]


def test_cached_array_computes_once_and_checks_rows(tmp_path):
    """``cached_array``: computed and saved at the first call, read (without pickle) at the next;
    a file of another row count is computed again; no path, no file; nothing half-written."""
    import numpy as np

    from semsearch.data.files import cached_array

    calls = []

    def compute(n: int = 3):
        calls.append(n)
        return np.arange(n * 2, dtype=np.float32).reshape(n, 2)

    f = tmp_path / "c" / "v.npy"
    a = cached_array(f, compute, rows=3)
    b = cached_array(f, lambda: compute(99), rows=3)
    assert calls == [3] and np.array_equal(a, b) and b.dtype == np.float32
    c = cached_array(f, lambda: compute(4), rows=4)  # another collection size: computed again
    assert calls == [3, 4] and c.shape == (4, 2) and cached_array(f, compute, rows=4).shape == (4, 2)
    assert cached_array(None, compute).shape == (3, 2) and calls == [3, 4, 3]
    assert sorted(p.name for p in f.parent.iterdir()) == ["v.npy"]  # no temporary file left


def test_write_json_is_the_one_json_format_and_never_half_written(tmp_path):
    """``write_json``: indented by two with one final newline (non-ASCII escaped unless
    ``ensure_ascii=False``); an object that cannot be written leaves the old file whole and no
    temporary file behind."""
    import json

    from semsearch.data.files import write_json

    f = tmp_path / "sub" / "x.json"
    write_json(f, {"name": "café", "n": [1, 2]})
    assert f.read_text(encoding="utf-8") == json.dumps({"name": "café", "n": [1, 2]}, indent=2) + "\n"
    assert "\\u00e9" in f.read_text(encoding="utf-8")
    write_json(f, {"name": "café"}, ensure_ascii=False)
    assert f.read_text(encoding="utf-8") == '{\n  "name": "café"\n}\n'
    with pytest.raises(TypeError):
        write_json(f, {"bad": object()})
    assert json.loads(f.read_text(encoding="utf-8")) == {"name": "café"}
    assert [p.name for p in f.parent.iterdir()] == ["x.json"]
