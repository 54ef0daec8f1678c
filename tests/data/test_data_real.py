"""The data layer on the real sets in ../shared/data (counts from its README)."""

from __future__ import annotations

import time

import pytest

from semsearch.data import (
    BeirDataset,
    binary_labels,
    dataset_info,
    domain_names,
    list_datasets,
    load_query_domains,
    pair_texts,
    positive_pairs,
    read_run,
)

pytestmark = pytest.mark.integration

# name -> documents, {split: judged queries}, grades seen
BEIR_SETS = {
    "homedepot": (54_667, {"train": 8_295, "dev": 1_187, "test": 1_160}, {0, 1, 2, 3, 4}),
    "scifact": (5_183, {"train": 809, "test": 300, "train.graded": 809, "test.graded": 300}, None),
    "trec-dl-2019": (10_857, {"test": 43}, {0, 1, 2, 3}),
    "cranfield": (1_400, {"test": 225}, {1, 2, 3, 4}),
    "cisi": (1_460, {"test": 76}, {1}),
}


@pytest.fixture(scope="module")
def homedepot(shared_data) -> BeirDataset:
    return BeirDataset(shared_data / "homedepot")


def test_catalog_lists_every_set(shared_data):
    assert list_datasets(shared_data) == sorted([*BEIR_SETS, "query-domains"])


@pytest.mark.parametrize("name", BEIR_SETS)
def test_beir_set_counts_and_ids_resolve(shared_data, name):
    documents, judged, grades = BEIR_SETS[name]
    ds = BeirDataset(shared_data / name)
    assert len(ds.corpus()) == documents
    assert sorted(ds.splits) == sorted(judged)
    for split, n_queries in judged.items():
        qrels = ds.qrels(split, check=True)  # every query and doc id resolves
        assert len(qrels) == n_queries
        if grades is not None:
            assert {g for docs in qrels.values() for g in docs.values()} == grades


def test_scifact_grades(shared_data):
    ds = BeirDataset(shared_data / "scifact")
    assert {g for d in ds.qrels("test").values() for g in d.values()} == {1}
    assert {g for d in ds.qrels("test.graded").values() for g in d.values()} == {1, 2}


def test_trec_dl_runs(shared_data):
    ds = BeirDataset(shared_data / "trec-dl-2019")
    assert sorted(ds.runs) == ["bm25", "bm25-rm3", "openai-ada2", "splade-pp-ed", "tasb"]
    test_queries = set(ds.qrels("test"))
    for path in ds.runs.values():
        run = read_run(path)
        assert set(run) == test_queries
        assert all(len(docs) == 100 for docs in run.values())
        assert all(doc in ds.corpus().index for docs in run.values() for doc in docs)  # texts exist


def test_homedepot_positive_pairs(homedepot):
    pairs = positive_pairs(homedepot, "train")
    assert 35_000 <= len(pairs) <= 36_500  # README: ≈35.6k
    assert len(set(pairs)) == len(pairs)
    query, title = pair_texts(homedepot, pairs[:1])[0]
    assert query and title


def test_homedepot_info_is_quick(shared_data):
    start = time.perf_counter()
    info = dataset_info(shared_data / "homedepot")
    assert time.perf_counter() - start < 3.0
    assert info["documents"] == 54_667 and info["queries"] == 10_642
    assert {s: v["queries"] for s, v in info["splits"].items()} == BEIR_SETS["homedepot"][1]
    assert info["mean_text_words"] == 0 and 5 < info["mean_title_words"] < 20  # titles only


def test_query_domains(shared_data):
    folder = shared_data / "query-domains"
    sgd = load_query_domains(folder / "sgd.tsv")
    assert {r.split for r in sgd} == {"train", "dev", "test"}
    assert {"Restaurants", "Hotels", "Flights", "Events"} <= set(domain_names(sgd))
    assert any(len(r.labels) > 1 for r in sgd)
    texts, y = binary_labels(sgd, "Restaurants", "train")
    assert len(texts) == len(y) and 0 < y.sum() < len(y)
    clinc = load_query_domains(folder / "clinc150.tsv")
    assert len(domain_names(clinc)) == 11  # 10 domains + out_of_scope
    assert len({r.intent for r in clinc}) == 151  # 150 intents + oos
    assert {r.split for r in clinc} == {"train", "dev", "test"}
    snips = load_query_domains(folder / "snips.tsv")
    assert len(domain_names(snips)) == 7 and {r.split for r in snips} == {"train", "dev"}
