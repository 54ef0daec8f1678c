"""A static query encoder distilled from a bi-encoder (issue 17, item 4: served latency).

Documents keep the teacher's vectors (``encode_documents`` is the teacher's, so a bundle's vector
index is the teacher's index); queries are encoded by a student that needs no transformer pass:
the sum of learnt 384-d rows for the query's words, word bigrams and the words' letter trigrams
(``text.trigram.TrigramHasher``; trigrams give unseen words a vector), plus a bias row,
L2-normalised. The rows are trained (``training.distill``) so that the student's vector of a text
points where the teacher's does (cosine loss), on the training split's queries, the collection's
titles as pseudo-queries, and short word spans of the titles (queries are
short). Words and bigrams outside the training texts contribute nothing (trigrams still do)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from ..params import Params, param
from ..text.normalize import tokenize
from ..text.trigram import TrigramHasher
from .base import (
    SAVED_DATA_ERRORS,
    ModelDirError,
    TrainedModel,
    dense_top_k,
    id_ranks,
    read_config,
    same_length,
    seal,
    write_config,
)

WEIGHTS = "rows.npy"
VOCAB = "vocabulary.json"
TRIGRAMS = "trigrams.json"
TEACHER = "teacher"
MAX_WORDS = 32
"""Words of a query the student reads (queries are short; a long text is cut here)."""
WORD_CACHE = 100_000
"""Distinct words whose row ids are remembered (the table starts afresh past this)."""


@dataclass(frozen=True)
class StaticQueryParams(Params):
    """What the student is: its teacher and which texts make its vocabulary."""

    kind = "static-query"
    teacher: str = ""  # a saved bi-encoder directory; "" = off-the-shelf bert-rep (all-MiniLM-L6-v2)
    word_min_count: int = param(1, ge=1)  # words seen fewer times in the training texts get no row
    bigram_min_count: int = param(2, ge=1)  # likewise word bigrams
    trigram_min_count: int = param(1, ge=1)


def load_teacher(path: str | Path | None) -> Any:
    """The teacher bi-encoder saved at ``path`` (None: off-the-shelf all-MiniLM-L6-v2). Loaded here,
    not through the registry (``plugins``), which sits above the models."""
    from .transformer import BiEncoder  # (torch and transformers: imported when needed)

    return BiEncoder() if path is None else BiEncoder.load(path)


class StaticQueryEncoder(TrainedModel):
    """Teacher's document vectors, student's query vectors (module docstring). ``rows`` is the
    (1 + words + bigrams + trigrams, dim) float32 table; row 0 is the bias every query gets."""

    name = "static-query"
    Params = StaticQueryParams
    p: StaticQueryParams

    def __init__(self, teacher_model: Any = None, **params: Any):
        super().__init__(**params)
        self._teacher = teacher_model  # (``teacher``, a parameter, is where to load it from)
        self.words: dict[str, int] = {}
        self.bigrams: dict[str, int] = {}
        self.hasher: TrigramHasher | None = None
        self.rows: np.ndarray | None = None
        self._word_rows: dict[str, tuple[int, ...]] = {}

    # -- the teacher ----------------------------------------------------------------------------
    @property
    def teacher(self) -> Any:
        """The bi-encoder whose vectors the student imitates (loaded when first needed)."""
        if self._teacher is None:
            self._teacher = load_teacher(self.p.teacher or None)
        return self._teacher

    @property
    def document_encoder(self) -> Any:
        """What encodes the collection: the teacher (a bundle's vector cache and ONNX export follow it)."""
        return self.teacher

    @property
    def net(self) -> Any:  # TrainedModel's "trained" test: the rows play the network's part
        return self.rows

    # -- vocabulary -----------------------------------------------------------------------------
    def build_vocabulary(self, texts: Iterable[str]) -> int:
        """Rows for the words, bigrams and trigrams of ``texts`` (at their minimum counts); returns
        the number of rows. Any trained rows are dropped."""
        texts = list(texts)
        words: Counter[str] = Counter()
        bigrams: Counter[str] = Counter()
        for t in texts:
            ws = tokenize(t)[:MAX_WORDS]
            words.update(ws)
            bigrams.update(f"{a} {b}" for a, b in pairwise(ws))
        keep_w = sorted(w for w, c in words.items() if c >= self.p.word_min_count)
        keep_b = sorted(b for b, c in bigrams.items() if c >= self.p.bigram_min_count)
        self.words = {w: 1 + i for i, w in enumerate(keep_w)}
        self.bigrams = {b: 1 + len(keep_w) + i for i, b in enumerate(keep_b)}
        self.hasher = TrigramHasher.fit(texts, min_count=self.p.trigram_min_count, max_words=MAX_WORDS)
        self.rows = None
        self._word_rows = {}
        return self.n_rows

    @property
    def n_rows(self) -> int:
        return 1 + len(self.words) + len(self.bigrams) + (len(self.hasher) if self.hasher else 0)

    def _rows_of_word(self, w: str) -> tuple[int, ...]:
        """A word's own row (if it has one) and its trigrams' rows, cached per word."""
        r = self._word_rows.get(w)
        if r is None:
            assert self.hasher is not None
            base = 1 + len(self.words) + len(self.bigrams)
            own = self.words.get(w)
            r = ((own,) if own is not None else ()) + tuple(base + i for i in self.hasher.word_ids(w))
            if len(self._word_rows) >= WORD_CACHE:
                self._word_rows = {}
            self._word_rows[w] = r
        return r

    def text_rows(self, text: str) -> list[int]:
        """The rows a text's vector sums: the bias, each word's rows, each known bigram's."""
        ws = tokenize(text)[:MAX_WORDS]
        out = [0]
        for w in ws:
            out += self._rows_of_word(w)
        for a, b in pairwise(ws):
            i = self.bigrams.get(f"{a} {b}")
            if i is not None:
                out.append(i)
        return out

    def bags(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, offsets of length n + 1): text ``i`` sums ``ids[offsets[i]:offsets[i+1]]``
        (the layout of ``torch.nn.EmbeddingBag``)."""
        parts = [self.text_rows(t) for t in texts]
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        ids = np.fromiter((i for p in parts for i in p), dtype=np.int64, count=int(offsets[-1]))
        return ids, offsets

    # -- encoding -------------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        return int(self._require().shape[1])

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """(N, dim) float32 unit query vectors from the student; an empty query is a ValueError."""
        for i, q in enumerate(texts):
            if not isinstance(q, str) or not q.strip():
                raise ValueError(f"query {i} is empty")
        rows = self._require()
        ids, offsets = self.bags(texts)
        v = np.add.reduceat(rows[ids], offsets[:-1], axis=0) if len(texts) else np.zeros((0, rows.shape[1]), np.float32)
        n = np.linalg.norm(v, axis=1, keepdims=True)
        return (v / np.where(n > 0, n, 1.0)).astype(np.float32, copy=False)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        """The teacher's document vectors (a bundle indexes the collection with them)."""
        return self.teacher.encode_documents(texts)

    # -- Model ----------------------------------------------------------------------------------
    def index(self, doc_ids: Sequence[str], texts: Sequence[str]) -> None:
        self.teacher.index(doc_ids, texts)

    @property
    def doc_ids(self) -> Sequence[str]:
        return self.teacher.doc_ids

    def score(self, queries: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Cosine of the student's query vector with the teacher's vector of each candidate."""
        same_length(queries, candidates, "queries", "candidate lists")
        q = self.encode_queries(queries)
        d = self.teacher.document_vectors([doc for docs in candidates for doc in docs])
        d = d / np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-12)
        out, s = [], 0
        for i, docs in enumerate(candidates):
            out.append((d[s : s + len(docs)] @ q[i]).astype(np.float64))
            s += len(docs)
        return out

    def retrieve(self, queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        """Exact top-k over the whole collection by the same cosine as ``score`` (ties by doc id):
        one matrix product per block of queries with the teacher's unit document vectors, not
        ``Model.retrieve``'s every-document candidate lists (which gathered a copy of the
        collection's vectors per query)."""
        if k < 1:
            raise ValueError("k must be at least 1")
        ids = list(self.doc_ids)
        d = self.teacher.document_vectors(ids)
        d = d / np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-12)
        return dense_top_k(self.encode_queries(queries), d.astype(np.float32, copy=False), ids, id_ranks(ids), k)

    # -- persistence ----------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """``rows.npy`` (the student), ``vocabulary.json`` (words, bigrams), ``trigrams.json`` and
        the teacher under ``teacher/``."""
        rows = self._require()
        assert self.hasher is not None
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        self.teacher.save(d / TEACHER)
        np.save(d / WEIGHTS, rows, allow_pickle=False)
        (d / VOCAB).write_text(
            json.dumps({"words": list(self.words), "bigrams": list(self.bigrams)}, ensure_ascii=False), encoding="utf-8"
        )
        self.hasher.save(d / TRIGRAMS)
        write_config(d, {"model": self.name, "params": {**self.params(), "teacher": ""}, "dim": int(rows.shape[1])})
        seal(d)

    @classmethod
    def load(cls, path: str | Path) -> StaticQueryEncoder:
        d = Path(path)
        cfg = read_config(d, expect=cls.name)
        teacher = load_teacher(d / TEACHER)
        self = cls(teacher, **cls.saved_params(cfg.get("params", {})))
        try:
            vocab = json.loads((d / VOCAB).read_text(encoding="utf-8"))
            self.words = {w: 1 + i for i, w in enumerate(vocab["words"])}
            self.bigrams = {b: 1 + len(self.words) + i for i, b in enumerate(vocab["bigrams"])}
            self.hasher = TrigramHasher.load(d / TRIGRAMS)
            rows = np.load(d / WEIGHTS, allow_pickle=False)
        except SAVED_DATA_ERRORS as e:
            raise ModelDirError(f"{d}: corrupt static-query model ({e})") from None
        if rows.ndim != 2 or rows.shape[0] != self.n_rows:
            raise ModelDirError(f"{d}: {WEIGHTS} has shape {rows.shape}, the vocabulary needs {self.n_rows} rows")
        self.rows = np.ascontiguousarray(rows, dtype=np.float32)
        return self
