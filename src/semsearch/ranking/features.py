"""Ranking features: one column per feature model's score of each (query, candidate) pair, plus
cheap per-pair text features.

Rows are laid out query by query in the order of the candidate lists — the "query groups" that a
listwise ranker trains on. Columns come either from models (``model_columns``: each model's
``score``) or from runs already computed (``run_columns``: a run's score of the candidate, the
query's lowest score where the run lacks it), so an experiment can reuse the runs of its rows."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..models.base import Model, positions
from ..text import Analyzer, tokenize
from ..types import Qrels, Run

PAIR_FEATURES = ("query_words", "doc_words", "query_coverage")
"""Per-pair text features of the two-stage search: query length and document length in words (the
papers' tokens), and the fraction of the query's distinct words that occur in the document."""

MATCH_FEATURES = (
    "stem_coverage",
    "bigram_overlap",
    "numbers_matched",
    "numbers_missing",
    "brand_match",
    "first_word_match",
    "edit_similarity",
)
"""Cheap query–title match features for re-ranking judged lists (product search, the fusion issue):
query-word coverage after Porter stemming and stop-word removal; the fraction of the query's word
bigrams found in the title; of the query's numbers (sizes, voltages, model numbers: tokens with a
digit), the fraction the title has and the count it lacks; whether the title's first word (the brand
in Home Depot titles) is a query word; whether the query's first word is in the title; and difflib's
similarity ratio of the two lower-cased strings. Each is 0 where it does not apply (a query without
numbers)."""

TEXT_FEATURES = PAIR_FEATURES + MATCH_FEATURES
"""Every per-pair text feature ``pair_columns`` computes."""

STAGE_FEATURES = ("lexical_score", "semantic_score", "lexical_rank", "semantic_rank")
"""Per-candidate stage-1 features of a two-stage search (BERT paper §3.3, §4.5): each stage's score
(filled in for candidates the stage did not return: ``HybridRetriever(complete=True)``) and its
1-based rank, ``depth + 1`` where the stage did not return the candidate."""


def stage_columns(
    names: Sequence[str], hits: Sequence[Sequence[object]], n_lexical: int, n_semantic: int
) -> np.ndarray:
    """(pairs, len(names)) ``STAGE_FEATURES`` of merged stage-1 hits (objects with ``lexical``,
    ``semantic``, ``lexical_rank``, ``semantic_rank``, like ``index.HybridHit``); a missing score is 0."""
    # one pass of attribute reads for all four; None becomes NaN
    raw = np.array(
        [(h.lexical, h.semantic, h.lexical_rank, h.semantic_rank) for hs in hits for h in hs],  # type: ignore[attr-defined]  # hybrid hits
        dtype=np.float64,
    ).reshape(-1, len(STAGE_FEATURES))
    return stage_matrix(names, raw, n_lexical, n_semantic)


def stage_matrix(names: Sequence[str], raw: np.ndarray, n_lexical: int, n_semantic: int) -> np.ndarray:
    """``stage_columns`` from the raw (pairs, 4) array of lexical score, semantic score, lexical
    rank and semantic rank (NaN: missing), e.g. ``index.Candidates``' arrays stacked (the served
    search's path, with no hit objects)."""
    unknown = [n for n in names if n not in STAGE_FEATURES]
    if unknown:
        raise ValueError(f"unknown stage features {unknown}; known: {', '.join(STAGE_FEATURES)}")
    cap = {"lexical_rank": n_lexical + 1, "semantic_rank": n_semantic + 1}
    out = np.zeros((len(raw), len(names)), dtype=np.float64)
    for j, n in enumerate(names):
        col = raw[:, STAGE_FEATURES.index(n)].copy()
        missing = np.isnan(col)
        if n in cap:
            col = np.minimum(col, cap[n])
        col[missing] = cap.get(n, 0.0)
        out[:, j] = col
    return out


@dataclass
class Groups:
    """A feature matrix over query groups: rows of query ``qids[i]`` are ``X[offsets[i]:offsets[i+1]]``
    with candidate ids ``docs`` and graded labels ``y`` (0 for unjudged); ``position``, when the
    labels come from clicks, the rank each row was shown at (LightGBM's position-debiased lambdarank)."""

    qids: list[str]
    docs: list[str]
    X: np.ndarray  # (pairs, features) float64
    y: np.ndarray  # (pairs,) int
    offsets: np.ndarray  # (queries + 1,)
    position: np.ndarray | None = None  # (pairs,) int32, 1-based

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def subset(self, qids: Sequence[str]) -> Groups:
        """The groups of ``qids`` (those present), in this object's order."""
        keep = set(qids)
        idx = [i for i, q in enumerate(self.qids) if q in keep]
        rows = (
            np.concatenate([np.arange(self.offsets[i], self.offsets[i + 1]) for i in idx])
            if idx
            else np.zeros(0, np.int64)
        )
        return Groups(
            [self.qids[i] for i in idx],
            [self.docs[r] for r in rows],
            self.X[rows],
            self.y[rows],
            np.concatenate([[0], np.cumsum(self.sizes[idx])]).astype(np.int64),
            None if self.position is None else self.position[rows],
        )

    def to_run(self, scores: np.ndarray) -> Run:
        """A run from one score per row."""
        return {
            q: {self.docs[r]: float(scores[r]) for r in range(self.offsets[i], self.offsets[i + 1])}
            for i, q in enumerate(self.qids)
        }


def groups(candidates: Mapping[str, Sequence[str]], columns: np.ndarray, qrels: Qrels | None = None) -> Groups:
    """Assemble ``Groups`` from per-query candidate lists and the (pairs, features) matrix built
    in the same order; queries without candidates are left out."""
    qids = [q for q, c in candidates.items() if len(c)]
    docs = [d for q in qids for d in candidates[q]]
    if columns.shape[0] != len(docs):
        raise ValueError(f"{columns.shape[0]} feature rows but {len(docs)} candidate pairs")
    y = (
        np.fromiter(
            (max(int(qrels.get(q, {}).get(d, 0)), 0) for q in qids for d in candidates[q]),
            dtype=np.int64,
            count=len(docs),
        )
        if qrels
        else np.zeros(len(docs), dtype=np.int64)
    )  # (serving: no labels)
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


def model_columns(
    models: Sequence[Model], queries: Sequence[str], candidates: Sequence[Sequence[str]], batch_size: int = 1024
) -> np.ndarray:
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
    """(pairs, len(names)) text features (``PAIR_FEATURES``, ``MATCH_FEATURES``) of each query
    with each of its candidate documents' texts."""
    unknown = [n for n in names if n not in TEXT_FEATURES]
    if unknown:
        raise ValueError(f"unknown pair features {unknown}; known: {', '.join(TEXT_FEATURES)}")
    match = [n for n in names if n in MATCH_FEATURES]
    blocks = [np.zeros((0, len(names)))]
    for q, docs in zip(queries, doc_texts):  # a column at a time per query (the serving hot path)
        q_tokens = tokenize(q)
        qt = set(q_tokens)
        words = [_doc_words(t) for t in docs]
        cols = {
            "query_words": [len(q_tokens)] * len(words),
            "doc_words": [n for n, _ in words],
            "query_coverage": [len(qt & dt) / len(qt) for _, dt in words] if qt else [0.0] * len(words),
        }
        if match:
            qm = _QueryMatch(q, q_tokens)
            per_doc = [qm.features(t, dt, match) for t, (_, dt) in zip(docs, words)]
            cols.update({n: [f[n] for f in per_doc] for n in match})
        blocks.append(np.array([cols[n] for n in names], dtype=np.float64).reshape(len(names), len(words)).T)
    return np.vstack(blocks)


class DocWords:
    """The collection's titles as sorted distinct word ids (CSR) and word counts, so that the
    ``PAIR_FEATURES`` of a query's candidates are one compiled merge per candidate
    (``models.postings.rows_dot`` with unit weights counts the query's words a title has) instead of
    Python set work per (query, title) pair: the same numbers as ``pair_columns``."""

    def __init__(self, doc_ids: Sequence[str], texts: Sequence[str]):
        vocab: dict[str, int] = {}
        indptr = np.zeros(len(texts) + 1, dtype=np.int64)
        cols: list[int] = []
        lengths = np.zeros(len(texts), dtype=np.float64)
        for i, t in enumerate(texts):
            words = tokenize(t)
            lengths[i] = len(words)
            cols += sorted({vocab.setdefault(w, len(vocab)) for w in words})
            indptr[i + 1] = len(cols)
        self.vocab, self.indptr, self.lengths = vocab, indptr, lengths
        self.indices = np.asarray(cols, dtype=np.int32)
        self.ones = np.ones(len(cols), dtype=np.float32)
        self.position = {d: i for i, d in enumerate(doc_ids)}

    def positions(self, docs: Sequence[str]) -> np.ndarray:
        return positions(self.position, docs)

    def columns(
        self,
        names: Sequence[str],
        queries: Sequence[str],
        candidates: Sequence[Sequence[str]],
        positions: Sequence[np.ndarray] | None = None,
    ) -> np.ndarray:
        """(pairs, len(names)) ``PAIR_FEATURES`` of each query with each of its candidates
        (``positions``: theirs in the collection, if already looked up)."""
        from ..models.postings import rows_dot

        blocks = [np.zeros((0, len(names)))]
        for i, (q, docs) in enumerate(zip(queries, candidates)):
            q_tokens = tokenize(q)
            qt = set(q_tokens)
            known = np.array(sorted(self.vocab[w] for w in qt if w in self.vocab), dtype=np.int64)
            pos = self.positions(docs) if positions is None else positions[i]
            cols = {
                "query_words": np.full(len(pos), float(len(q_tokens))),
                "doc_words": self.lengths[pos],
                "query_coverage": (
                    rows_dot(self.indptr, self.indices, self.ones, pos, known, np.ones(len(known))) / len(qt)
                )
                if qt
                else np.zeros(len(pos)),
            }
            blocks.append(np.column_stack([cols[n] for n in names]) if len(pos) else np.zeros((0, len(names))))
        return np.vstack(blocks)


_ENGLISH = Analyzer.named("english")


def _has_digit(word: str) -> bool:
    return any(c.isdigit() for c in word)


class _QueryMatch:
    """A query's words, stems, bigrams and numbers, computed once for all of its candidates
    (``MATCH_FEATURES``)."""

    def __init__(self, query: str, tokens: Sequence[str]):
        self.text = query.lower()
        self.tokens = list(tokens)
        self.words = set(tokens)
        self.stems = set(_ENGLISH(query))
        self.bigrams = set(zip(self.tokens, self.tokens[1:]))
        self.numbers = {w for w in self.words if _has_digit(w)}

    def features(self, doc: str, d_words: frozenset[str], names: Sequence[str]) -> dict[str, float]:
        """The requested match features of this query with one document text and its distinct
        words (``_doc_words``)."""
        d_tokens = _doc_tokens(doc)
        out: dict[str, float] = {}
        for n in names:
            if n == "stem_coverage":
                out[n] = len(self.stems & _doc_stems(doc)) / len(self.stems) if self.stems else 0.0
            elif n == "bigram_overlap":
                out[n] = (
                    len(self.bigrams & set(zip(d_tokens, d_tokens[1:]))) / len(self.bigrams) if self.bigrams else 0.0
                )
            elif n == "numbers_matched":
                out[n] = len(self.numbers & d_words) / len(self.numbers) if self.numbers else 0.0
            elif n == "numbers_missing":
                out[n] = float(len(self.numbers - d_words))
            elif n == "brand_match":
                out[n] = float(bool(d_tokens) and d_tokens[0] in self.words)
            elif n == "first_word_match":
                out[n] = float(bool(self.tokens) and self.tokens[0] in d_words)
            elif n == "edit_similarity":
                out[n] = difflib.SequenceMatcher(None, self.text, doc.lower(), autojunk=False).ratio()
        return out


@lru_cache(maxsize=1 << 16)
def _doc_tokens(text: str) -> tuple[str, ...]:
    """A document text's words in order (cached like ``_doc_words``)."""
    return tuple(tokenize(text))


@lru_cache(maxsize=1 << 16)
def _doc_stems(text: str) -> frozenset[str]:
    """A document text's distinct Porter stems without stop words (cached like ``_doc_words``)."""
    return frozenset(_ENGLISH(text))


@lru_cache(maxsize=1 << 18)
def _doc_words(text: str) -> tuple[int, frozenset[str]]:
    """A document text's word count and distinct words, cached: the same candidates recur across
    queries (training) and searches (serving), and tokenising them anew would be a large share
    of a search's feature time."""
    words = tokenize(text)
    return len(words), frozenset(words)
