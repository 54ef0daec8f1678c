"""Ranking features: one column per feature model's score of each (query, candidate) pair, plus
cheap per-pair text features.

Rows are laid out query by query in the order of the candidate lists — the "query groups" that a
listwise ranker trains on. Columns come either from models (``model_columns``: each model's
``score``) or from runs already computed (``run_columns``: a run's score of the candidate, the
query's lowest score where the run lacks it), so an experiment can reuse the runs of its rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..models.base import Model
from ..text import tokenize
from ..types import Qrels, Run

PAIR_FEATURES = ("query_words", "doc_words", "query_coverage")
"""Per-pair text features: query length and document length in words (the papers' tokens), and
the fraction of the query's distinct words that occur in the document."""

STAGE_FEATURES = ("lexical_score", "semantic_score", "lexical_rank", "semantic_rank")
"""Per-candidate stage-1 features of a two-stage search (BERT paper §3.3, §4.5): each stage's score
(filled in for candidates the stage did not return: ``HybridRetriever(complete=True)``) and its
1-based rank, ``depth + 1`` where the stage did not return the candidate."""


def stage_columns(names: Sequence[str], hits: Sequence[Sequence[object]], n_lexical: int, n_semantic: int) -> np.ndarray:
    """(pairs, len(names)) ``STAGE_FEATURES`` of merged stage-1 hits (objects with ``lexical``,
    ``semantic``, ``lexical_rank``, ``semantic_rank``, like ``index.HybridHit``); a missing score is 0."""
    unknown = [n for n in names if n not in STAGE_FEATURES]
    if unknown:
        raise ValueError(f"unknown stage features {unknown}; known: {', '.join(STAGE_FEATURES)}")
    cap = {"lexical_rank": n_lexical + 1, "semantic_rank": n_semantic + 1}
    attr = {"lexical_score": "lexical", "semantic_score": "semantic", "lexical_rank": "lexical_rank",
            "semantic_rank": "semantic_rank"}
    flat = [h for hs in hits for h in hs]
    out = np.zeros((len(flat), len(names)), dtype=np.float64)
    for j, n in enumerate(names):  # column by column: one pass of attribute reads each (the serving hot path)
        a = attr[n]
        col = np.array([np.nan if v is None else v for v in (getattr(h, a) for h in flat)], dtype=np.float64)
        missing = np.isnan(col)
        if n in cap:
            col = np.minimum(col, cap[n])
        col[missing] = cap.get(n, 0.0)
        out[:, j] = col
    return out


@dataclass
class Groups:
    """A feature matrix over query groups: rows of query ``qids[i]`` are ``X[offsets[i]:offsets[i+1]]``
    with candidate ids ``docs`` and graded labels ``y`` (0 for unjudged)."""

    qids: list[str]
    docs: list[str]
    X: np.ndarray  # (pairs, features) float64
    y: np.ndarray  # (pairs,) int
    offsets: np.ndarray  # (queries + 1,)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def subset(self, qids: Sequence[str]) -> "Groups":
        """The groups of ``qids`` (those present), in this object's order."""
        keep = set(qids)
        idx = [i for i, q in enumerate(self.qids) if q in keep]
        rows = np.concatenate([np.arange(self.offsets[i], self.offsets[i + 1]) for i in idx]) if idx else np.zeros(0, np.int64)
        return Groups([self.qids[i] for i in idx], [self.docs[r] for r in rows], self.X[rows], self.y[rows],
                      np.concatenate([[0], np.cumsum(self.sizes[idx])]).astype(np.int64))

    def to_run(self, scores: np.ndarray) -> Run:
        """A run from one score per row."""
        return {q: {self.docs[r]: float(scores[r]) for r in range(self.offsets[i], self.offsets[i + 1])}
                for i, q in enumerate(self.qids)}


def groups(candidates: Mapping[str, Sequence[str]], columns: np.ndarray, qrels: Qrels | None = None) -> Groups:
    """Assemble ``Groups`` from per-query candidate lists and the (pairs, features) matrix built
    in the same order; queries without candidates are left out."""
    qids = [q for q, c in candidates.items() if len(c)]
    docs = [d for q in qids for d in candidates[q]]
    if columns.shape[0] != len(docs):
        raise ValueError(f"{columns.shape[0]} feature rows but {len(docs)} candidate pairs")
    qrels = qrels or {}
    y = np.fromiter((max(int(qrels.get(q, {}).get(d, 0)), 0) for q in qids for d in candidates[q]), dtype=np.int64, count=len(docs))
    offsets = np.concatenate([[0], np.cumsum([len(candidates[q]) for q in qids])]).astype(np.int64)
    return Groups(qids, docs, columns.astype(np.float64), y, offsets)


def run_columns(runs: Sequence[Run], candidates: Mapping[str, Sequence[str]]) -> np.ndarray:
    """(pairs, len(runs)): each run's score of each (query, candidate), candidates with any in
    ``candidates`` order; a pair a run lacks gets that run's lowest score for the query (0 if none)."""
    qids = [q for q, c in candidates.items() if len(c)]
    n = sum(len(candidates[q]) for q in qids)
    out = np.zeros((n, len(runs)), dtype=np.float64)
    for j, run in enumerate(runs):
        r = 0
        for q in qids:
            scores = run.get(q, {})
            floor = min(scores.values()) if scores else 0.0
            for d in candidates[q]:
                out[r, j] = scores.get(d, floor)
                r += 1
    return out


def model_columns(models: Sequence[Model], queries: Sequence[str], candidates: Sequence[Sequence[str]],
                  batch_size: int = 1024) -> np.ndarray:
    """(pairs, len(models)): each model's ``score`` of the candidates of each query text."""
    n = sum(len(c) for c in candidates)
    out = np.zeros((n, len(models)), dtype=np.float64)
    for j, m in enumerate(models):
        parts = []
        for s in range(0, len(queries), batch_size):
            parts += m.score(list(queries[s : s + batch_size]), list(candidates[s : s + batch_size]))
        out[:, j] = np.concatenate(parts) if parts else np.zeros(0)
    return out


def pair_columns(names: Sequence[str], queries: Sequence[str], doc_texts: Sequence[Sequence[str]]) -> np.ndarray:
    """(pairs, len(names)) text features (``PAIR_FEATURES``) of each query with each of its
    candidate documents' texts."""
    unknown = [n for n in names if n not in PAIR_FEATURES]
    if unknown:
        raise ValueError(f"unknown pair features {unknown}; known: {', '.join(PAIR_FEATURES)}")
    blocks = [np.zeros((0, len(names)))]
    for q, docs in zip(queries, doc_texts):  # a column at a time per query (the serving hot path)
        q_tokens = tokenize(q)
        qt = set(q_tokens)
        words = [_doc_words(t) for t in docs]
        cols = {"query_words": [len(q_tokens)] * len(words), "doc_words": [n for n, _ in words],
                "query_coverage": [len(qt & dt) / len(qt) for _, dt in words] if qt else [0.0] * len(words)}
        blocks.append(np.array([cols[n] for n in names], dtype=np.float64).reshape(len(names), len(words)).T)
    return np.vstack(blocks)


@lru_cache(maxsize=1 << 18)
def _doc_words(text: str) -> tuple[int, frozenset[str]]:
    """A document text's word count and distinct words, cached: the same candidates recur across
    queries (training) and searches (serving), and tokenising them was a third of a search's
    feature time."""
    words = tokenize(text)
    return len(words), frozenset(words)
