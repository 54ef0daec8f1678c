"""Letter-trigram word hashing (DSSM, Huang et al. 2013 §3.2; CLSM §3.1).

Each word is wrapped in boundary marks, ``#cat#``, and split into letter trigrams
(``#ca``, ``cat``, ``at#``). A text becomes the bag (sum) of its words' trigram ids. The result is
kept sparse — a scipy CSR matrix, or the ``(ids, weights, offsets)`` arrays that
``torch.nn.EmbeddingBag`` takes — so memory grows with the number of non-zeros, never with
vocabulary × texts (the dense-vector pitfall peers hit).

Chinese, Japanese and Korean are written without spaces, so a run of their characters is no word
to take trigrams of (``#手机壳#`` shares nothing with ``#手机#``). ``hash_words`` makes each CJK
character a word of its own, paired with the character after it (``手机壳`` -> ``手机``, ``机壳``,
``壳``), and ``word_features`` gives such a word its first character and the pair: the text's
bag then holds each CJK character (unigram) and each adjacent pair (bigram) once. Text without
CJK (or full-width) characters is hashed as before, feature for feature."""

from __future__ import annotations

import json
import threading
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain, repeat
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .normalize import CJK, map_cjk_runs

WORD_CACHE_SIZE = 1_000_000
"""Distinct words a hasher remembers with their trigram ids; past this the table starts afresh,
so memory stays bounded on open-vocabulary streams."""

TEXT_CACHE_CHARS = 20_000_000
"""Characters of texts a word table remembers with their word ids (``WordTable.encode``); past
this it starts afresh, so memory stays bounded."""

PARALLEL_TEXTS = 1024
"""Texts from which a word table with words in it looks them up on every torch thread at once
(``WordTable._lookup_split``); fewer (a query, a batch) stay on the calling thread."""

DEFAULT_MAX_WORDS = 64
"""Texts are truncated to their first 64 words before hashing (titles average ~8 words)."""


def _kernels():
    """The compiled kernels, imported on first use (numba's import takes a fraction of a second)."""
    from . import _kernels as k

    return k


def word_trigrams(word: str) -> list[str]:
    """``cat`` -> ``['#ca', 'cat', 'at#']``; a one-letter word gives ``['#a#']``."""
    w = f"#{word}#"
    return [w[i : i + 3] for i in range(len(w) - 2)]


def hash_words(text: str) -> list[str]:
    """The words of ``text`` that are hashed: ``tokenize``'s, except that in a text with CJK or
    full-width characters (then NFKC-normalised first) each run of CJK characters becomes one word
    per character, that character and the next in the run (the last alone): ``iphone手机壳`` ->
    ``['iphone', '手机', '机壳', '壳']``."""
    return map_cjk_runs(text, lambda run: [run[i : i + 2] for i in range(len(run))])


def word_features(word: str) -> list[str]:
    """The hashed features of one word: ``word_trigrams`` of a Latin (non-CJK) word; a CJK
    word of ``hash_words`` (one character, or it and the next) gives the character and, for a
    pair, the pair: ``手机`` -> ``['手', '手机']``. These are one or two characters long, so they
    never equal a letter trigram."""
    if word and not word.isascii() and CJK.match(word):
        return [word[0], word] if len(word) == 2 else [word]
    return word_trigrams(word)


def _has_cjk_word(words: Sequence[str]) -> bool:
    return any(w and not w.isascii() and CJK.match(w) for w in words)


@dataclass(frozen=True)
class Bags:
    """Ragged bags in the layout ``torch.nn.EmbeddingBag(mode="sum")`` takes: text ``i`` owns
    ``ids[offsets[i]:offsets[i+1]]`` with ``weights`` (counts) as ``per_sample_weights``."""

    ids: np.ndarray  # int64
    weights: np.ndarray  # float32
    offsets: np.ndarray  # int64, length n + 1 (drop the last for EmbeddingBag)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def csr(self, n_cols: int) -> sp.csr_matrix:
        """The bags as a (bags x ``n_cols``) sparse matrix, each bag a row (repeated ids kept as
        separate entries, as the first layer's sum reads them)."""
        return sp.csr_matrix((self.weights, self.ids, self.offsets), shape=(len(self), n_cols))

    def columns(self, n_cols: int, touched_only: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The transposed bags, one per column (``csr(n_cols).tocsc()`` in one compiled pass): the
        bags holding each column, ascending, with their weights (``rows``, ``weights``), where each
        column's entries start (``starts``), for every column or (``touched_only``) only for those
        some bag holds (``touched``, ascending; else empty). The weight gradient of a first layer
        over these bags is a bag-sum over its columns (``models.neural.bag_product``)."""
        from . import _kernels as k

        return k.bag_columns(self.ids, self.offsets, self.weights, n_cols, touched_only)


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
    ) -> TrigramHasher:
        """Vocabulary from training texts: most frequent trigrams first (ties alphabetical)."""
        words: Counter[str] = Counter()
        for text in texts:
            words.update(hash_words(text)[:max_words])
        counts: Counter[str] = Counter()
        for w, c in words.items():
            for t in word_features(w):
                counts[t] += c
        items = sorted((tc for tc in counts.items() if tc[1] >= min_count), key=lambda tc: (-tc[1], tc[0]))
        if max_size is not None:
            items = items[:max_size]
        if not items:
            raise ValueError("no trigrams in the training texts (all empty?)")
        return cls([t for t, _ in items], max_words=max_words)

    def word_ids(self, word: str) -> tuple[int, ...]:
        """Trigram ids of one normalised word (repeats kept: ``#aaa#`` has ``aaa`` once per
        position); a CJK word's character (and pair) ids (``word_features``)."""
        index = self.index
        return tuple(index[t] for t in word_features(word) if t in index)

    @cached_property
    def packed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The vocabulary as ``_kernels``' trigram hash table: (slots, packed keys lo, hi)."""
        data = [t.encode("utf-8", "surrogatepass") for t in self.trigrams]
        ptr = np.zeros(len(data) + 1, dtype=np.int64)
        np.cumsum([len(d) for d in data], out=ptr[1:])
        slots = np.full(1 << (2 * len(data) + 1).bit_length(), -1, dtype=np.int64)
        lo, hi = _kernels().trigram_table(np.frombuffer(b"".join(data), dtype=np.uint8), ptr, slots)
        return slots, lo, hi

    def words(self, text: str) -> list[str]:
        """The normalised words of ``text`` (``hash_words``), truncated to ``max_words``."""
        return hash_words(text)[: self.max_words]

    @property
    def table(self) -> WordTable:
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
    def load(cls, path: str | Path) -> TrigramHasher:
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
        self.ids: dict[str, int] = {}  # word -> id
        self._words: list[str] = []  # by id
        self._tri = array("q")
        self._ptr = array("q", [0])
        # the same words in an open-addressing hash table over their UTF-8 bytes, for the
        # compiled tokeniser (_kernels): slots hold word ids (-1 empty), the words' bytes are
        # keys[key_ptr[w]:key_ptr[w+1]]; the first _hashed words are in it (_sync adds the rest)
        self._slots = np.full(1024, -1, dtype=np.int64)
        self._keys = np.zeros(4096, dtype=np.uint8)
        self._key_ptr = np.zeros(513, dtype=np.int64)
        self._hashes = np.zeros(512, dtype=np.uint64)
        self._hashed = 0
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
            self._words.append(w)
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
            new = list(texts) if len(miss) == n else [texts[i] for i in miss]  # type: ignore[call-overload]  # numpy ints
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
        """``encode`` without the text cache, compiled (``_kernels``): a chunk of texts becomes
        one UTF-8 byte string, a space after each (ASCII texts as they are, others as their ``tokenize`` tokens),
        split, lower-cased and looked up in the word hash table by ``lookup_tokens``, which adds
        words met for the first time in order of appearance, as ``encode_each`` does (those past
        the room it was given by ``add_words``); the new words are hashed into trigrams in one
        more kernel call."""
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
        k = _kernels()
        n = len(texts)
        parts = list(texts)
        plain = np.fromiter(map(str.isascii, parts), dtype=bool, count=n)
        lengths = np.fromiter(map(len, parts), dtype=np.int64, count=n)
        for i in np.flatnonzero(~plain).tolist():  # others: tokenised by the regex, bytes counted
            parts[i] = " ".join(hash_words(parts[i]))
            lengths[i] = len(parts[i].encode())
        buf = np.frombuffer(bytearray(" ".join(parts).encode()), dtype=np.uint8)
        text_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths + 1, out=text_ptr[1:])  # each text and a space
        self._sync()
        first = self._hashed
        if n >= PARALLEL_TEXTS and first:  # words known: looked up by every torch thread at once
            counts, ids, unknown, unknown_bytes = self._lookup_split(buf, text_ptr)
        else:
            room = min(len(buf) // 2 + 1, max(4096, first // 2))  # new words added in the first pass
            self._reserve(room, 12 * room)
            counts, ids, unknown, unknown_bytes, self._hashed = k.lookup_tokens(
                buf, text_ptr, self.hasher.max_words, first, True, k.TOKEN_BYTE, k.LOWER, *self._hash_arrays()
            )
        if unknown:  # more new words than room (all new words, looked up in parallel): the rest, in order
            self._reserve(unknown, unknown_bytes)
            self._hashed = k.add_words(buf, ids, self._hashed, k.TOKEN_BYTE, *self._hash_arrays())
        if self._hashed > first:
            self._add_hashed(first)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return indptr, ids

    def _lookup_split(self, buf: np.ndarray, text_ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
        """``lookup_tokens`` without adding words, over slices of the texts in parallel
        (``device.run_split``: one per torch thread; the kernel releases the GIL), joined in
        order: (tokens per text, word ids with the new words left to ``add_words``, how many
        such tokens, their bytes). ``add_words`` then numbers the new words in order of
        appearance, as one pass adding them would."""
        # torch, loaded by then: only neural models featurise this many texts at once
        from ..device import run_split

        k, parts = _kernels(), {}

        def look(a: int, b: int) -> None:
            parts[a] = k.lookup_tokens(
                buf,
                text_ptr[a : b + 1],
                self.hasher.max_words,
                self._hashed,
                False,
                k.TOKEN_BYTE,
                k.LOWER,
                *self._hash_arrays(),
            )

        run_split(look, len(text_ptr) - 1)
        got = [parts[a] for a in sorted(parts)]
        return (
            np.concatenate([g[0] for g in got]),
            np.concatenate([g[1] for g in got]),
            sum(g[2] for g in got),
            sum(g[3] for g in got),
        )

    def _hash_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return self._slots, self._keys, self._key_ptr, self._hashes

    def _reserve(self, words: int, nbytes: int) -> None:
        """Room in the word hash table for ``words`` more words of ``nbytes`` bytes in all (the
        slots kept at most half full)."""
        need = self._hashed + words

        def grown(a: np.ndarray, size: int, used: int) -> np.ndarray:
            if len(a) >= size:
                return a
            b = np.zeros(max(size, 2 * len(a)), dtype=a.dtype)
            b[:used] = a[:used]
            return b

        self._hashes = grown(self._hashes, need, self._hashed)
        self._key_ptr = grown(self._key_ptr, need + 1, self._hashed + 1)
        used = int(self._key_ptr[self._hashed])
        self._keys = grown(self._keys, used + nbytes, used)
        if len(self._slots) < 2 * need:
            size = 1 << (2 * need - 1).bit_length()
            self._slots = np.full(size, -1, dtype=np.int64)
            _kernels().rehash(self._slots, self._hashes, self._hashed)

    def _add_hashed(self, first: int) -> None:
        """Words ``first..`` just added to the hash table: into ``ids`` and ``_words``, and their
        trigram ids into ``_tri``/``_ptr``."""
        last, ptr = self._hashed, self._key_ptr
        raw = self._keys[ptr[first] : ptr[last]].tobytes()
        offs = (ptr[first : last + 1] - ptr[first]).tolist()
        words = [raw[a:b].decode() for a, b in zip(offs, offs[1:])]
        assert len(self._words) == first == len(self), "word table out of step with its hash table"
        self.ids.update(zip(words, range(first, last)))
        self._words += words
        if _has_cjk_word(words):  # CJK words' features are not letter trigrams: hashed here
            per = [self.hasher.word_ids(w) for w in words]
            counts = np.fromiter(map(len, per), dtype=np.int64, count=len(per))
            tri = np.fromiter(chain.from_iterable(per), dtype=np.int64, count=int(counts.sum()))
        else:
            counts, tri = _kernels().word_trigram_ids(self._keys, ptr, first, last, *self.hasher.packed)
        self._tri.frombytes(tri.tobytes())
        self._ptr.frombytes((np.cumsum(counts) + self._ptr[-1]).tobytes())

    def _sync(self) -> None:
        """Words added text by text (``_word``) into the hash table too."""
        if self._hashed == len(self._words):
            return
        words = [w.encode() for w in self._words[self._hashed :]]
        buf = np.frombuffer(bytearray(b" ".join(words)), dtype=np.uint8)
        text_ptr = np.zeros(len(words) + 1, dtype=np.int64)
        np.cumsum([len(w) + 1 for w in words], out=text_ptr[1:])
        k = _kernels()
        first = self._hashed
        self._reserve(len(words), len(buf))
        _, ids, unknown, _, self._hashed = k.lookup_tokens(
            buf, text_ptr, 1, first, True, k.TOKEN_BYTE, k.LOWER, *self._hash_arrays()
        )
        assert unknown == 0 and np.array_equal(ids, np.arange(first, first + len(words))), "word hash table out of step"

    def encode_each(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``encode`` text by text (the reference the vectorised path must equal)."""
        ids = array("q")
        indptr = np.zeros(len(texts) + 1, dtype=np.int64)
        word, words = self._word, self.hasher.words
        for r, text in enumerate(texts):
            ids.extend([word(w) for w in words(text)])
            indptr[r + 1] = len(ids)
        return indptr, np.frombuffer(ids, dtype=np.int64).copy() if len(ids) else np.zeros(0, dtype=np.int64)

    def text_bags(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Per text its words' trigram ids laid end to end, repeats kept — DSSM's input —, as
        (indptr, ids): ``bags(encode(texts))`` regrouped by text, in one compiled pass."""
        with self._lock:  # the word arrays must not grow while numpy looks at them
            word_ptr, words = self._encode(texts, 50_000)
            ptr = np.frombuffer(self._ptr, dtype=np.int64)
            tri = np.frombuffer(self._tri, dtype=np.int64) if len(self._tri) else np.zeros(0, dtype=np.int64)
            out = _kernels().text_bags(np.diff(word_ptr), words, ptr, tri)
            del ptr, tri  # release the arrays' buffers
        return out

    def word_bags(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, Bags]:
        """The texts as positions among their distinct words, and those words' trigram bags:
        (indptr, positions, bags). Text ``i``'s words are ``positions[indptr[i]:indptr[i+1]]``
        into ``bags``, one bag per distinct word. A linear first layer (DSSM's) then runs once per
        distinct word and is summed per text: titles repeat their words, so this is several times
        less work than summing every text's trigrams (``text_bags``), the same sums in another
        order."""
        with self._lock:  # the word arrays must not grow while numpy looks at them
            word_ptr, words = self._encode(texts, 50_000)
            return (word_ptr, *self.id_bags(words))

    def id_bags(self, words: np.ndarray) -> tuple[np.ndarray, Bags]:
        """Word ids as positions among their distinct words (ascending), and those words' trigram
        bags: the input of a layer that runs once per distinct word (DSSM's first, CLSM's
        convolution slots)."""
        if len(words) * 8 < len(self):  # a few words (a query): no pass over the whole table
            distinct, positions = np.unique(words, return_inverse=True)
        else:  # no sort
            seen = np.zeros(len(self), dtype=bool)
            seen[words] = True
            distinct = np.flatnonzero(seen)
            positions = (np.cumsum(seen, dtype=np.int64) - 1)[words]
        return positions.astype(np.int64, copy=False), self.bags(distinct)

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
