"""Positive (query, document) pairs from graded judgments: the training pairs of the pair models."""

from __future__ import annotations

from collections.abc import Iterable

from .beir import BeirDataset, Fields


def positive_pairs(dataset: BeirDataset, split: str, threshold: int = 3) -> list[tuple[str, str]]:
    """(query id, doc id) of every judgment with grade >= threshold, in qrels file order.

    The default 3 is for homedepot (grade = round((mean rating - 1) * 2) on its 1..3 scale, so >= 3
    means a mean rating above 2.25; ~35.6k train pairs). Binary sets (scifact, cisi) need threshold=1.
    """
    return [(qid, doc_id) for qid, doc_id, grade in dataset.iter_qrels(split) if grade >= threshold]


def pair_texts(
    dataset: BeirDataset, pairs: Iterable[tuple[str, str]], fields: Fields = "title"
) -> list[tuple[str, str]]:
    """(query text, document text) for (query id, doc id) pairs; KeyError names an unknown id."""
    queries, corpus = dataset.queries(), dataset.corpus()
    texts = []
    for qid, doc_id in pairs:
        if qid not in queries:
            raise KeyError(f"query id {qid!r} not in {dataset.name} queries")
        if doc_id not in corpus.index:
            raise KeyError(f"doc id {doc_id!r} not in {dataset.name} corpus")
        texts.append((queries[qid], corpus.text(corpus.index[doc_id], fields)))
    return texts
