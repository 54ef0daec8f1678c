"""Letter-trigram word hashing (DSSM, Huang et al. 2013 §3.2; CLSM §3.1).

Each word is wrapped in boundary marks, ``#cat#``, and split into letter trigrams
(``#ca``, ``cat``, ``at#``). A text becomes the bag (sum) of its words' trigram ids. The result is
kept sparse — a scipy CSR matrix, or the ``(ids, weights, offsets)`` arrays that
``torch.nn.EmbeddingBag`` takes — so memory grows with the number of non-zeros, never with
vocabulary × texts (the dense-vector pitfall peers hit)."""

from __future__ import annotations

import json
import threading
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .normalize import tokenize

WORD_CACHE_SIZE = 1_000_000
"""Distinct words a hasher remembers with their trigram ids; past this the table starts afresh,
so memory stays bounded on open-vocabulary streams."""

_SEP, _OTHER = "\x00", "\x01"
_JOIN = f" {_SEP} "
"""Texts joined into one string for tokenising, separated by ``_SEP`` (a token of its own);
a non-ASCII text stands there as the placeholder ``_OTHER``."""
_ASCII_TOKENS = str.maketrans({c: chr(c).lower() if chr(c).isalnum() else " " for c in range(128)} | {0: _SEP, 1: _OTHER})
"""ASCII characters -> ``normalize.tokenize``'s view: letters lower-cased, digits kept, the rest
(punctuation, ``_``) a space; the two markers kept."""

TEXT_CACHE_CHARS = 20_000_000
"""Characters of texts a word table remembers with their word ids (``WordTable.encode``); past
this it starts afresh, so memory stays bounded."""

DEFAULT_MAX_WORDS = 64
"""Texts are truncated to their first 64 words before hashing (titles average ~8 words)."""


def word_trigrams(word: str) -> list[str]:
    """``cat`` -> ``['#ca', 'cat', 'at#']``; a one-letter word gives ``['#a#']``."""
    w = f"#{word}#"
    return [w[i : i + 3] for i in range(len(w) - 2)]


@dataclass(frozen=True)
class Bags:
    """Ragged bags in the layout ``torch.nn.EmbeddingBag(mode="sum")`` takes: text ``i`` owns
    ``ids[offsets[i]:offsets[i+1]]`` with ``weights`` (counts) as ``per_sample_weights``."""

    ids: np.ndarray  # int64
    weights: np.ndarray  # float32
    offsets: np.ndarray  # int64, length n + 1 (drop the last for EmbeddingBag)

    def __len__(self) -> int:
        return len(self.offsets) - 1


class TrigramHasher:
    """A fixed letter-trigram vocabulary and the hashing of texts onto it.

    Trigrams not in the vocabulary are dropped: a model can only weight what it saw in training.
    Each distinct word is hashed once (``table``); texts then become word ids and their bags are
    gathered with numpy."""

    def __init__(self, trigrams: Sequence[str], max_words: int = DEFAULT_MAX_WORDS):
        self.trigrams = list(trigrams)
        if not all(isinstance(t, str) for t in self.trigrams):
            raise ValueError("trigram vocabulary must be a list of strings")
        self.index = {t: i for i, t in enumerate(self.trigrams)}
        if len(self.index) != len(self.trigrams):
            raise ValueError("trigram vocabulary has duplicates")
        if not isinstance(max_words, int) or isinstance(max_words, bool) or max_words < 1:
            raise ValueError(f"max_words must be a positive integer, got {max_words!r}")
        self.max_words = max_words
        self._table: WordTable | None = None

    def __len__(self) -> int:
        return len(self.trigrams)

    @classmethod
    def fit(
        cls,
        texts: Iterable[str],
        *,
        max_size: int | None = None,
        min_count: int = 1,
        max_words: int = DEFAULT_MAX_WORDS,
    ) -> "TrigramHasher":
        """Vocabulary from training texts: most frequent trigrams first (ties alphabetical)."""
        words: Counter[str] = Counter()
        for text in texts:
            words.update(tokenize(text)[:max_words])
        counts: Counter[str] = Counter()
        for w, c in words.items():
            for t in word_trigrams(w):
                counts[t] += c
        items = sorted((tc for tc in counts.items() if tc[1] >= min_count), key=lambda tc: (-tc[1], tc[0]))
        if max_size is not None:
            items = items[:max_size]
        if not items:
            raise ValueError("no trigrams in the training texts (all empty?)")
        return cls([t for t, _ in items], max_words=max_words)

    def word_ids(self, word: str) -> tuple[int, ...]:
        """Trigram ids of one normalised word (repeats kept: ``#aaa#`` has ``aaa`` once per position)."""
        index = self.index
        return tuple(index[t] for t in word_trigrams(word) if t in index)

    def words(self, text: str) -> list[str]:
        """The normalised words of ``text``, truncated to ``max_words``."""
        return tokenize(text)[: self.max_words]

    @property
    def table(self) -> "WordTable":
        """The words met so far with their trigram ids (emptied past ``WORD_CACHE_SIZE`` words)."""
        if self._table is None or len(self._table) > WORD_CACHE_SIZE:
            self._table = WordTable(self)
        return self._table

    def transform(self, texts: Sequence[str], *, chunk: int = 100_000) -> sp.csr_matrix:
        """Texts -> CSR (n x V) float32 trigram counts. Works in chunks to bound temporary memory."""
        parts = [self._transform_chunk(texts[i : i + chunk]) for i in range(0, len(texts), chunk)]
        if not parts:
            return sp.csr_matrix((0, len(self)), dtype=np.float32)
        return parts[0] if len(parts) == 1 else sp.vstack(parts, format="csr")

    def _transform_chunk(self, texts: Sequence[str]) -> sp.csr_matrix:
        table = self.table
        indptr, words = table.encode(texts)
        bags = table.bags(words)
        token_text = np.repeat(np.arange(len(texts), dtype=np.int32), np.diff(indptr))
        row = np.repeat(token_text, np.diff(bags.offsets))
        return sp.coo_matrix(
            (np.ones(len(row), dtype=np.float32), (row, bags.ids.astype(np.int32))), shape=(len(texts), len(self))
        ).tocsr()  # sums duplicates, sorts indices

    def bags(self, texts: Sequence[str]) -> Bags:
        """Texts -> ``Bags`` for ``EmbeddingBag``: the CSR arrays, unique ids with counts per text."""
        m = self.transform(texts)
        return Bags(m.indices.astype(np.int64), m.data.astype(np.float32), m.indptr.astype(np.int64))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(
            json.dumps({"max_words": self.max_words, "trigrams": self.trigrams}, ensure_ascii=False),
            encoding="utf-8",
        )

    @classmethod
    def load(cls, path: str | Path) -> "TrigramHasher":
        try:
            cfg = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls(cfg["trigrams"], max_words=int(cfg["max_words"]))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: not a trigram vocabulary ({e})") from e


class WordTable:
    """Distinct words, each with its letter-trigram bag: the input of CLSM's word-n-gram layer
    (CLSM §3.2), which hashes every word separately so the convolution can look at word windows.

    ``encode`` turns texts into word-id sequences (CSR-like ``indptr``/``ids``); ``bags`` gives
    the ``EmbeddingBag`` arrays for any set of word ids. Words are added as they are met, so the
    table also serves texts seen only at inference (their unseen trigrams are simply absent)."""

    def __init__(self, hasher: TrigramHasher):
        self.hasher = hasher
        self.ids: dict[str, int] = {_SEP: -2, _OTHER: -3}  # word -> id; the two markers negative
        self._tri = array("q")
        self._ptr = array("q", [0])
        self._texts: dict[str, int] = {}  # text -> its row of word ids in _rows / _row_ptr
        self.forget_texts()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._ptr) - 1

    def forget_texts(self) -> None:
        """Empty the text cache (the words stay): the next ``encode`` tokenises every text."""
        self._texts, self._rows, self._row_ptr, self._chars = {}, array("q"), array("q", [0]), 0

    def _word(self, w: str) -> int:
        i = self.ids.get(w)
        if i is None:
            i = self.ids[w] = len(self._ptr) - 1
            self._tri.extend(self.hasher.word_ids(w))
            self._ptr.append(len(self._tri))
        return i

    def encode(self, texts: Sequence[str], *, chunk: int = 50_000) -> tuple[np.ndarray, np.ndarray]:
        """Per text its word ids (first ``hasher.max_words`` words): (indptr, ids), both int64.

        Texts met before (up to ``TEXT_CACHE_CHARS`` characters of them) are looked up whole: a
        collection encoded again — the dev documents re-ranked after every epoch, an index rebuilt
        — skips tokenising. The others are ``tokenize``d in chunks (``_tokenize``). One call at a
        time (a lock): the table grows as texts come, and a server encodes from many threads."""
        with self._lock:
            return self._encode(texts, chunk)

    def _encode(self, texts: Sequence[str], chunk: int) -> tuple[np.ndarray, np.ndarray]:
        n = len(texts)
        rows = np.fromiter(map(self._texts.get, texts, repeat(-1)), dtype=np.int64, count=n)
        miss = np.flatnonzero(rows < 0)
        if len(miss):
            new = list(texts) if len(miss) == n else [texts[i] for i in miss]
            chars = sum(map(len, new))
            if self._chars + chars > TEXT_CACHE_CHARS:  # start afresh: every text is new again
                self.forget_texts()
                if len(miss) < n:
                    miss, new, chars = np.arange(n), list(texts), sum(map(len, texts))
            indptr, ids = self._tokenize(new, chunk)
            if chars > TEXT_CACHE_CHARS:  # too big to keep
                return indptr, ids
            base = len(self._row_ptr) - 1
            self._texts.update(zip(new, range(base, base + len(new))))
            self._rows.frombytes(ids.tobytes())
            self._row_ptr.frombytes((indptr[1:] + self._row_ptr[-1]).tobytes())
            self._chars += chars
            if len(miss) == n:
                return indptr, ids
            rows[miss] = np.arange(base, base + len(new))
        ptr = np.frombuffer(self._row_ptr, dtype=np.int64)
        starts, lengths = ptr[rows], ptr[rows + 1] - ptr[rows]
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        pos = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1], dtype=np.int64)
        store = np.frombuffer(self._rows, dtype=np.int64) if len(self._rows) else np.zeros(0, dtype=np.int64)
        return indptr, store[pos]

    def _tokenize(self, texts: Sequence[str], chunk: int) -> tuple[np.ndarray, np.ndarray]:
        """``encode`` without the text cache, vectorised: a chunk of texts is lower-cased and
        tokenised as one string (texts joined by a separator no token contains; ASCII by
        ``str.translate``, other texts by the regex), its tokens looked up with one ``map`` over
        the dictionary, and rows, truncation and new words found with numpy; only words met for
        the first time cost Python work (their trigrams), in order of appearance, as
        ``encode_each`` does."""
        parts = [self._encode_chunk(texts[i : i + chunk]) for i in range(0, len(texts), chunk)]
        if len(parts) == 1:
            return parts[0]
        indptr = np.zeros(len(texts) + 1, dtype=np.int64)
        ids = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
        at = 0
        for ptr, _ in parts:
            indptr[at + 1 : at + len(ptr)] = ptr[1:] + indptr[at]
            at += len(ptr) - 1
        return indptr, ids

    def _encode_chunk(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        n = len(texts)
        plain = [t.isascii() for t in texts]
        others = [i for i, a in enumerate(plain) if not a]  # tokenised by the regex, one by one
        joined = _JOIN.join(t if a else _OTHER for t, a in zip(texts, plain))
        if joined.count(_SEP) != n - 1 or joined.count(_OTHER) != len(others):
            return self.encode_each(texts)  # a text holds a marker character itself
        # ASCII: lower-casing and dropping non-token characters is one str.translate (C, a
        # byte table), the same tokens as normalize.tokenize's regex
        tokens = joined.translate(_ASCII_TOKENS).split()
        get = self.ids.get
        ids = np.fromiter(map(get, tokens, repeat(-1)), dtype=np.int64, count=len(tokens))
        if others:  # splice the other texts' tokens in place of their placeholders
            words = [tokenize(texts[i]) for i in others]
            at = np.flatnonzero(ids == -3)
            flat = [w for ws in words for w in ws]
            where = np.repeat(at - np.arange(len(at)), [len(ws) for ws in words])
            ids = np.insert(np.delete(ids, at), where, np.fromiter(map(get, flat, repeat(-1)), dtype=np.int64, count=len(flat)))
            pieces, prev = [], 0
            for a, ws in zip(at.tolist(), words):
                pieces += (tokens[prev:a], ws)
                prev = a + 1
            tokens = list(chain(*pieces, tokens[prev:]))
        sep = ids == -2
        word = ~sep
        text = np.cumsum(sep)[word]  # the text of each word
        counts = np.bincount(text, minlength=n)
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        keep = np.arange(len(text), dtype=np.int64) - starts[text] < self.hasher.max_words
        ids = ids[word][keep]
        new = np.flatnonzero(ids < 0)
        if len(new):  # words met for the first time: each hashed once, in order of appearance
            kept = np.flatnonzero(word)[keep]
            met = list(map(tokens.__getitem__, kept[new].tolist()))
            for w in dict.fromkeys(met):
                self._word(w)
            ids[new] = np.fromiter(map(self.ids.__getitem__, met), dtype=np.int64, count=len(met))
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.minimum(counts, self.hasher.max_words), out=indptr[1:])
        return indptr, ids

    def encode_each(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``encode`` text by text (the reference the vectorised path must equal)."""
        ids = array("q")
        indptr = np.zeros(len(texts) + 1, dtype=np.int64)
        word, words = self._word, self.hasher.words
        for r, text in enumerate(texts):
            ids.extend([word(w) for w in words(text)])
            indptr[r + 1] = len(ids)
        return indptr, np.frombuffer(ids, dtype=np.int64).copy() if len(ids) else np.zeros(0, dtype=np.int64)

    def bags(self, word_ids: np.ndarray) -> Bags:
        """Trigram bags of the given words (repeated trigrams of one word stay separate entries,
        each with weight 1, which ``EmbeddingBag(mode="sum")`` adds up)."""
        ptr = np.frombuffer(self._ptr, dtype=np.int64)
        tri = np.frombuffer(self._tri, dtype=np.int64) if len(self._tri) else np.zeros(0, dtype=np.int64)
        starts, ends = ptr[word_ids], ptr[word_ids + 1]
        lengths = ends - starts
        offsets = np.zeros(len(word_ids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        gather = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
        return Bags(tri[gather], np.ones(offsets[-1], dtype=np.float32), offsets)
