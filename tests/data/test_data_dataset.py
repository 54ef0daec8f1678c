"""BeirDataset, the catalog and positive pairs on a tiny BEIR folder written to tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from semsearch.data import (
    BeirDataset,
    DataFormatError,
    DataWarning,
    Document,
    data_root,
    dataset_info,
    list_datasets,
    open_dataset,
    pair_texts,
    positive_pairs,
    write_corpus,
    write_qrels,
    write_queries,
    write_run,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A data root holding a tiny BEIR set `tiny` and a query-domain folder."""
    ds = tmp_path / "tiny"
    docs = [Document("d1", "red drill", ""), Document("d2", "blue saw", "sharp"), Document("d3", "", "glue")]
    write_corpus(docs, ds / "corpus.jsonl")
    write_queries({"q1": "drill", "q2": "saw", "q3": "glue"}, ds / "queries.jsonl")
    write_qrels({"q1": {"d1": 4, "d2": 0}, "q2": {"d2": 3}}, ds / "qrels" / "train.tsv")
    write_qrels({"q3": {"d3": 1}}, ds / "qrels" / "test.tsv")
    write_qrels({"q1": {"d1": 2}}, ds / "qrels" / "dev.tsv")
    write_run({"q1": {"d1": 1.0, "d2": 0.5}}, ds / "runs" / "bm25.trec")
    (tmp_path / "domains").mkdir()
    (tmp_path / "domains" / "snips.tsv").write_text("split\tintent\ttext\ntrain\tA\thi\nvalidate\tB\tho\n")
    (tmp_path / "not-data").mkdir()
    return tmp_path


def test_dataset_parts(root):
    ds = BeirDataset(root / "tiny")
    assert ds.name == "tiny" and ds.root == root / "tiny"
    assert ds.splits == ["train", "dev", "test"]
    assert ds.runs == {"bm25": root / "tiny" / "runs" / "bm25.trec"}
    assert ds.corpus() is ds.corpus() and len(ds.corpus()) == 3
    assert ds.queries() == {"q1": "drill", "q2": "saw", "q3": "glue"}
    assert ds.qrels("train", check=True) == {"q1": {"d1": 4, "d2": 0}, "q2": {"d2": 3}}
    with pytest.raises(ValueError, match="no split 'valid'; splits: train, dev, test"):
        ds.qrels("valid")


def test_not_a_dataset_says_what_is_missing(root):
    with pytest.raises(DataFormatError, match="not a BEIR dataset: missing corpus.jsonl, queries.jsonl, qrels/\\*.tsv"):
        BeirDataset(root / "not-data")
    with pytest.raises(FileNotFoundError):
        BeirDataset(root / "nowhere")


def test_qrels_check_names_the_unresolved_line(root):
    path = root / "tiny" / "qrels" / "test.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq3\td3\t1\nq3\td9\t1\nq7\td1\t1\n")
    ds = BeirDataset(root / "tiny")
    assert ds.qrels("test") == {"q3": {"d3": 1, "d9": 1}, "q7": {"d1": 1}}  # no check: read as is
    with pytest.raises(DataFormatError, match="doc id 'd9' has no document") as info:
        ds.qrels("test", check=True)
    assert str(info.value).startswith(f"{path}:3: ")
    lenient = BeirDataset(root / "tiny", skip_bad_lines=True)
    with pytest.warns(DataWarning, match=r"skipped 2 bad lines \(lines 3, 4\); first: doc id 'd9'"):
        assert lenient.qrels("test", check=True) == {"q3": {"d3": 1}}


def test_positive_pairs_in_file_order(root):
    ds = BeirDataset(root / "tiny")
    assert positive_pairs(ds, "train") == [("q1", "d1"), ("q2", "d2")]
    assert positive_pairs(ds, "train", threshold=0) == [("q1", "d1"), ("q1", "d2"), ("q2", "d2")]
    assert pair_texts(ds, [("q1", "d1"), ("q2", "d2")]) == [("drill", "red drill"), ("saw", "blue saw")]
    assert pair_texts(ds, [("q2", "d2")], fields="title+text") == [("saw", "blue saw sharp")]
    with pytest.raises(KeyError, match="doc id 'd9'"):
        pair_texts(ds, [("q1", "d9")])


def test_catalog(root, monkeypatch):
    monkeypatch.setenv("SEMSEARCH_DATA", str(root))
    assert data_root() == root
    assert list_datasets() == ["domains", "tiny"]
    assert open_dataset("tiny").root == root / "tiny"
    assert open_dataset(root / "tiny").name == "tiny"
    with pytest.raises(FileNotFoundError, match="domains, tiny"):
        open_dataset("homedepot")
    info = dataset_info("tiny")
    assert info["documents"] == 3 and info["queries"] == 3 and info["runs"] == ["bm25"]
    assert info["splits"]["train"] == {"queries": 2, "judgments": 3, "grades": {0: 1, 3: 1, 4: 1}}
    assert (info["mean_title_words"], info["mean_text_words"]) == (1.33, 0.67)  # rounded to 2 places
    domains = dataset_info("domains")
    assert domains["files"]["snips"] == {"records": 2, "splits": {"train": 1, "dev": 1}, "labels": 2}


def test_data_root_fallbacks(tmp_path, monkeypatch):
    monkeypatch.delenv("SEMSEARCH_DATA", raising=False)
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert data_root() == (tmp_path / "shared" / "data").resolve()
    monkeypatch.chdir(tmp_path)  # no ../shared/data here: falls back to the one beside the repo
    repo = Path(__file__).resolve().parents[2]
    assert data_root() == (repo / ".." / "shared" / "data").resolve()
