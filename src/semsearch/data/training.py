"""Training data for the pair models (DSSM, CLSM, topic, translation and projection models):
positive (query, document) pairs plus the document pool that random negatives come from and the
graded judgments that hard negatives come from. Built from a data set's qrels split, a pair file
(`query<TAB>title`) or a click log (`query<TAB>doc_id<TAB>clicks`) with a document corpus."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ..types import Qrels
from .beir import BeirDataset, Corpus, Fields
from .positives import positive_pairs


@dataclass
class TrainingData:
    """Queries and documents by id, judgments, and which (query, doc) pairs are positives."""

    queries: dict[str, str]
    doc_ids: list[str]
    doc_texts: list[str]
    positives: list[tuple[str, str]]
    """(query id, doc id) positive pairs in input order; a pair can repeat (one per click)."""
    qrels: Qrels = field(default_factory=dict)
    """Graded judgments, where known (hard negatives are judged documents below the threshold)."""
    threshold: int = 1

    def __post_init__(self) -> None:
        if len(self.doc_ids) != len(self.doc_texts):
            raise ValueError(f"{len(self.doc_ids)} doc ids but {len(self.doc_texts)} texts")
        if not self.positives:
            raise ValueError("no positive pairs to train on")
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
    ) -> "TrainingData":
        """Positives = judgments of ``split`` with grade >= ``threshold`` (3 suits homedepot's 0-4);
        the pool is the whole corpus."""
        corpus = dataset.corpus()
        qrels = dataset.qrels(split)
        queries = dataset.queries()
        return cls(
            queries={q: queries[q] for q in qrels if q in queries},
            doc_ids=corpus.ids, doc_texts=corpus.joined(fields),
            positives=positive_pairs(dataset, split, threshold), qrels=qrels, threshold=threshold,
        )

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, str]]) -> "TrainingData":
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
    ) -> "TrainingData":
        """From a click log (query text, doc id, clicks), e.g. ``iter_clicks(path)``: a pair with at
        least ``min_clicks`` clicks is a positive, repeated once per click (capped at 10) so heavily
        clicked pairs weigh more, as in click-trained models."""
        queries: dict[str, str] = {}
        positives = []
        for q, d, clicks in rows:
            if d not in corpus.index:
                raise ValueError(f"click log names document {d!r} that is not in the corpus")
            qid = queries.setdefault(q, f"q{len(queries)}")
            if clicks >= min_clicks:
                positives += [(qid, d)] * min(clicks, 10)
        return cls({v: k for k, v in queries.items()}, corpus.ids, corpus.joined(fields), positives)


@dataclass
class EvalSet:
    """Queries with candidate documents and judgments: a dev split for early stopping and tuning."""

    queries: dict[str, str]
    candidates: dict[str, list[str]]
    qrels: Qrels

    @classmethod
    def judged(cls, dataset: BeirDataset, split: str = "dev") -> "EvalSet":
        """Each query's judged documents are its candidates (the papers' re-ranking setting)."""
        qrels = dataset.qrels(split)
        queries = dataset.queries()
        return cls({q: queries[q] for q in qrels if q in queries}, {q: list(d) for q, d in qrels.items()}, qrels)

    def subset(self, qids: Sequence[str]) -> "EvalSet":
        keep = set(qids)
        return EvalSet({q: t for q, t in self.queries.items() if q in keep},
                       {q: c for q, c in self.candidates.items() if q in keep},
                       {q: j for q, j in self.qrels.items() if q in keep})

