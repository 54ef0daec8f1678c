"""Training data for the pair models (DSSM, CLSM, topic, translation and projection models):
positive (query, document) pairs plus the document pool that random negatives come from and the
graded judgments that hard negatives come from. Built from a data set's qrels split, a pair file
(`query<TAB>title`) or a click log (`query<TAB>doc_id<TAB>clicks`) with a document corpus."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, overload

import numpy as np

from ..types import Qrels
from .beir import BeirDataset, Corpus, Fields
from .positives import positive_pairs


class PairList(Sequence[tuple[str, str]]):
    """(query id, doc id) pairs held as two int32 arrays of positions in name lists: 8 bytes a
    pair where a list of tuples takes around a hundred, so the positives of a click log with tens of millions
    of clicks fit in memory. Reads like the list of tuples it stands for."""

    def __init__(self, query_ids: Sequence[str], doc_ids: Sequence[str], q: np.ndarray, d: np.ndarray):
        if len(q) != len(d):
            raise ValueError(f"{len(q)} query positions but {len(d)} document positions")
        self.query_ids, self.doc_ids = query_ids, doc_ids
        self.q, self.d = np.asarray(q, dtype=np.int32), np.asarray(d, dtype=np.int32)

    def __len__(self) -> int:
        return len(self.q)

    @overload
    def __getitem__(self, i: int) -> tuple[str, str]: ...
    @overload
    def __getitem__(self, i: slice) -> list[tuple[str, str]]: ...
    def __getitem__(self, i: int | slice) -> tuple[str, str] | list[tuple[str, str]]:
        if isinstance(i, slice):
            return list(
                zip(
                    map(self.query_ids.__getitem__, self.q[i].tolist()),
                    map(self.doc_ids.__getitem__, self.d[i].tolist()),
                )
            )
        return self.query_ids[int(self.q[i])], self.doc_ids[int(self.d[i])]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for start in range(0, len(self), 65_536):  # a chunk at a time: no full list of tuples
            yield from self[start : start + 65_536]

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, Sequence) and len(other) == len(self) and all(a == tuple(b) for a, b in zip(self, other))
        )

    def __repr__(self) -> str:
        return f"PairList({len(self)} pairs)"


@dataclass
class TrainingData:
    """Queries and documents by id, judgments, and which (query, doc) pairs are positives."""

    queries: dict[str, str]
    doc_ids: list[str]
    doc_texts: list[str]
    positives: Sequence[tuple[str, str]]
    """(query id, doc id) positive pairs in input order; a pair can repeat (one per click). A list,
    or from a click log a ``PairList`` (the same pairs, compactly)."""
    qrels: Qrels = field(default_factory=dict)
    """Graded judgments, where known (hard negatives are judged documents below the threshold)."""
    threshold: int = 1

    def __post_init__(self) -> None:
        if len(self.doc_ids) != len(self.doc_texts):
            raise ValueError(f"{len(self.doc_ids)} doc ids but {len(self.doc_texts)} texts")
        if not self.positives:
            raise ValueError("no positive pairs to train on")
        if isinstance(self.positives, PairList):  # positions into these queries and documents, checked when made
            return
        index = self.doc_index
        for q, d in self.positives:
            if q not in self.queries:
                raise ValueError(f"positive pair names unknown query {q!r}")
            if d not in index:
                raise ValueError(f"positive pair names unknown document {d!r}")

    @cached_property
    def doc_index(self) -> dict[str, int]:
        return {d: i for i, d in enumerate(self.doc_ids)}

    def pair_texts(self) -> tuple[list[str], list[str]]:
        """(query texts, positive document texts), aligned, one entry per positive pair."""
        idx = self.doc_index
        return [self.queries[q] for q, _ in self.positives], [self.doc_texts[idx[d]] for _, d in self.positives]

    def hard_negatives(self, below: int | None = None) -> dict[str, list[str]]:
        """Per query, judged documents graded below ``below`` (default: the positive threshold)."""
        cut = self.threshold if below is None else below
        return {q: [d for d, g in docs.items() if g < cut and d in self.doc_index] for q, docs in self.qrels.items()}

    @classmethod
    def from_dataset(
        cls, dataset: BeirDataset, split: str = "train", *, threshold: int = 3, fields: Fields = "title"
    ) -> TrainingData:
        """Positives = judgments of ``split`` with grade >= ``threshold`` (3 suits homedepot's 0-4);
        the pool is the whole corpus."""
        corpus = dataset.corpus()
        qrels = dataset.qrels(split)
        queries = dataset.queries()
        return cls(
            queries={q: queries[q] for q in qrels if q in queries},
            doc_ids=corpus.ids,
            doc_texts=corpus.joined(fields),
            positives=positive_pairs(dataset, split, threshold),
            qrels=qrels,
            threshold=threshold,
        )

    def without_queries(self, qids: Iterable[str]) -> TrainingData:
        """The same data without the queries ``qids``: their texts, positive pairs and judgments
        (cross-fitting: a model trained on the other folds scores a fold's queries unseen)."""
        drop = set(qids)
        return TrainingData(
            {q: t for q, t in self.queries.items() if q not in drop},
            self.doc_ids,
            self.doc_texts,
            [(q, d) for q, d in self.positives if q not in drop],
            {q: j for q, j in self.qrels.items() if q not in drop},
            self.threshold,
        )

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, str]]) -> TrainingData:
        """From (query text, title text) pairs, e.g. ``iter_pairs(path)``: equal texts share an id;
        the pool is the set of distinct titles."""
        queries: dict[str, str] = {}
        docs: dict[str, str] = {}
        positives = []
        for q, t in pairs:
            qid = queries.setdefault(q, f"q{len(queries)}")
            did = docs.setdefault(t, f"d{len(docs)}")
            positives.append((qid, did))
        return cls({v: k for k, v in queries.items()}, list(docs.values()), list(docs.keys()), positives)

    @classmethod
    def from_clicks(
        cls, rows: Iterable[tuple[str, str, int]], corpus: Corpus, *, fields: Fields = "title", min_clicks: int = 1
    ) -> TrainingData:
        """From a click log (query text, doc id, clicks), e.g. ``iter_clicks(path)``: a pair with at
        least ``min_clicks`` clicks is a positive, repeated once per click (capped at 10) so heavily
        clicked pairs weigh more, as in click-trained models.

        Streams: the log is read once, row by row; what is kept is each distinct query's text and
        three small integers per row that makes positives (a ``PairList``), so memory grows with
        the distinct queries and the clicks, not with the log's lines of text
        (``benchmarks/click_log_memory.py`` measures a generated 10M-line log)."""
        qindex: dict[str, int] = {}
        docs = corpus.index
        q_pos, d_pos, reps = array("i"), array("i"), array("b")
        for q, d, clicks in rows:
            di = docs.get(d)
            if di is None:
                raise ValueError(f"click log names document {d!r} that is not in the corpus")
            qi = qindex.setdefault(q, len(qindex))
            if clicks >= min_clicks:
                q_pos.append(qi)
                d_pos.append(di)
                reps.append(min(clicks, 10))
        times = np.frombuffer(reps, dtype=np.int8) if len(reps) else np.zeros(0, dtype=np.int8)
        qids = [f"q{i}" for i in range(len(qindex))]
        positives = PairList(
            qids,
            corpus.ids,
            np.repeat(np.frombuffer(q_pos, dtype=np.int32) if len(q_pos) else np.zeros(0, np.int32), times),
            np.repeat(np.frombuffer(d_pos, dtype=np.int32) if len(d_pos) else np.zeros(0, np.int32), times),
        )
        return cls(dict(zip(qids, qindex)), corpus.ids, corpus.joined(fields), positives)


@dataclass
class EvalSet:
    """Queries with candidate documents and judgments: a dev split for early stopping and tuning."""

    queries: dict[str, str]
    candidates: dict[str, list[str]]
    qrels: Qrels

    @classmethod
    def judged(cls, dataset: BeirDataset, split: str = "dev") -> EvalSet:
        """Each query's judged documents are its candidates (the papers' re-ranking setting)."""
        qrels = dataset.qrels(split)
        queries = dataset.queries()
        return cls({q: queries[q] for q in qrels if q in queries}, {q: list(d) for q, d in qrels.items()}, qrels)

    def subset(self, qids: Sequence[str]) -> EvalSet:
        keep = set(qids)
        return EvalSet(
            {q: t for q, t in self.queries.items() if q in keep},
            {q: c for q, c in self.candidates.items() if q in keep},
            {q: j for q, j in self.qrels.items() if q in keep},
        )
