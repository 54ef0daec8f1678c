"""Text normalisation as in the papers (CLSM §5.1): lower-case, punctuation removed,
white-space tokens, numbers kept, no stemming. An optional English analyzer (Porter stemming and
Lucene's stop words) exists for BEIR-comparable lexical baselines, and a CJK analyzer (Lucene
CJKAnalyzer's overlapping character bigrams) for Chinese, Japanese and Korean."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

WORD = re.compile(r"[^\W_]+")
"""A word of the tokenizer: a maximal run of letters/digits of any script ('_' splits). The one
pattern: ``tokenize`` finds them, highlighting and spelling correction find them in place."""

# Lucene's EnglishAnalyzer default stop set (what Anserini/Pyserini use).
LUCENE_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)


_CJK_CHARS = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3005\u3007"  # 々 (iteration mark), 〇
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK unified ideographs extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua960-\ua97f"  # Hangul Jamo extended-A
    "\uac00-\ud7ff"  # Hangul syllables, Jamo extended-B
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0003134f"  # CJK unified ideographs extensions B-G, compatibility supplement
)
CJK = re.compile(f"[{_CJK_CHARS}]")
"""A Han, Hiragana, Katakana or Hangul character: what the ``cjk`` analyzer bigrams (Lucene
CJKBigramFilter's default scripts)."""
_CJK_SPLIT = re.compile(f"([{_CJK_CHARS}]+)")
WIDE = re.compile("[\uff00-\uffef]")  # half-width and full-width forms: NFKC makes them plain

AUTO_SAMPLE = 10_000
"""Texts ``detect_analyzer`` looks at (spread evenly over the collection)."""
AUTO_CJK_SHARE = 0.1
"""``auto`` picks ``cjk`` when at least this share of the sampled texts has a CJK character."""


def is_cjk(text: str) -> bool:
    """Whether ``text`` has a Han, Hiragana, Katakana or Hangul character."""
    return not text.isascii() and CJK.search(text) is not None


def cjk_runs(token: str) -> list[tuple[str, bool]]:
    """A token cut into its runs of CJK characters and of other letters/digits, in order, each
    with whether it is CJK: ``iphone15手机`` -> ``[('iphone15', False), ('手机', True)]``."""
    return [(p, i % 2 == 1) for i, p in enumerate(_CJK_SPLIT.split(token)) if p]


def map_cjk_runs(text: str, run_words: Callable[[str], Iterable[str]]) -> list[str]:
    """``tokenize``'s words, except that in a text with CJK or width-form characters (then
    NFKC-normalised first) each run of CJK characters inside a word is replaced by
    ``run_words(run)``; other runs stay whole. The one walk `cjk_tokenize` and the letter-n-gram
    hashing (``text.trigram.hash_words``) share, each with its own words for a run."""
    if text.isascii() or (CJK.search(text) is None and WIDE.search(text) is None):
        return tokenize(text)
    out: list[str] = []
    for word in tokenize(unicodedata.normalize("NFKC", text)):
        if CJK.search(word) is None:
            out.append(word)
            continue
        for run, cjk in cjk_runs(word):
            if cjk:
                out.extend(run_words(run))
            else:
                out.append(run)
    return out


def _bigrams(run: str) -> list[str]:
    return [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]


def cjk_tokenize(text: str) -> list[str]:
    """Lucene CJKAnalyzer's tokens (without its stop words): the NFKC form of the text (full-width
    letters and digits become ASCII, half-width Katakana full-width), lower-cased, cut into words
    as ``tokenize`` does; within a word each run of Han/Hiragana/Katakana/Hangul characters
    becomes its overlapping character bigrams (a lone character itself), the other runs stay
    whole. Text without CJK or width-form characters gives ``tokenize``'s tokens."""
    return map_cjk_runs(text, _bigrams)


def detect_analyzer(texts: Iterable[str]) -> str:
    """``auto``'s choice for a collection: ``cjk`` when at least ``AUTO_CJK_SHARE`` (a tenth) of
    its texts (up to ``AUTO_SAMPLE`` of them, spread evenly) have a Han, Hiragana, Katakana or
    Hangul character, else ``paper``. The share is low on purpose: ``cjk`` analyses text without
    such characters exactly as ``paper`` does, while ``paper`` keeps a whole unbroken CJK run as
    one term (a Chinese sentence cannot match a query of two of its words)."""
    seq = texts if isinstance(texts, Sequence) else list(texts)
    n = len(seq)
    if n == 0:
        return "paper"
    step = max(1, n // AUTO_SAMPLE)
    sample = [seq[i] for i in range(0, n, step)][:AUTO_SAMPLE]
    hits = sum(1 for t in sample if isinstance(t, str) and is_cjk(t))
    return "cjk" if hits >= AUTO_CJK_SHARE * len(sample) else "paper"


def normalize(text: str) -> str:
    """Lower-case and replace punctuation with spaces, keeping letters and digits (any script)."""
    return " ".join(tokenize(text))


def tokenize(text: str) -> list[str]:
    """The papers' tokens: maximal runs of letters/digits of the lower-cased text."""
    return WORD.findall(text.lower())


STEM_CACHE_WORDS = 200_000  # stems an analyzer keeps (a collection's vocabulary fits, the memory stays bounded)


@dataclass(frozen=True)
class Analyzer:
    """Text -> terms. ``stem``: a Snowball algorithm name ("porter", "english") or None;
    ``stopwords``: drop Lucene's English stop words; ``cjk``: runs of CJK characters become
    overlapping character bigrams (``cjk_tokenize``). The default is the papers' normalisation."""

    stem: str | None = None
    stopwords: bool = False
    cjk: bool = False
    _cache: dict[str, str] = field(default_factory=dict, compare=False, repr=False, hash=False)

    @classmethod
    def named(cls, name: str) -> Analyzer:
        """``paper`` (default normalisation), ``english`` (Porter stemming + stop words, as
        Anserini) or ``cjk`` (the papers' normalisation with CJK character bigrams, as Lucene's
        CJKAnalyzer). ``auto`` is resolved per collection by ``detect_analyzer``, not here."""
        if name == "paper":
            return cls()
        if name == "english":
            return cls(stem="porter", stopwords=True)
        if name == "cjk":
            return cls(cjk=True)
        raise ValueError(f"unknown analyzer {name!r}; use 'paper', 'english' or 'cjk'")

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Analyzer:
        """An analyzer from its ``config()`` (a saved model's); ValueError names a bad key."""
        import Stemmer

        if not isinstance(config, dict):
            raise ValueError(f"analyzer config must be a table, got {config!r}")
        stem, stopwords, cjk = config.get("stem"), config.get("stopwords", False), config.get("cjk", False)
        if stem is not None and (not isinstance(stem, str) or stem not in Stemmer.algorithms()):
            raise ValueError(
                f"analyzer 'stem' must be null or a Snowball algorithm "
                f"({', '.join(Stemmer.algorithms())}), got {stem!r}"
            )
        if not isinstance(stopwords, bool):
            raise ValueError(f"analyzer 'stopwords' must be true or false, got {stopwords!r}")
        if not isinstance(cjk, bool):
            raise ValueError(f"analyzer 'cjk' must be true or false, got {cjk!r}")
        return cls(stem=stem, stopwords=stopwords, cjk=cjk)

    def config(self) -> dict[str, Any]:
        """The saved form; ``cjk`` only when set, so the other analyzers' configs (and the cache
        keys made of them) stay as they were."""
        c: dict[str, Any] = {"stem": self.stem, "stopwords": self.stopwords}
        if self.cjk:
            c["cjk"] = True
        return c

    @cached_property
    def _stemmer(self):
        import Stemmer  # PyStemmer: Snowball stemmers in C

        return Stemmer.Stemmer(self.stem, 0)

    def __call__(self, text: str) -> list[str]:
        tokens = cjk_tokenize(text) if self.cjk else tokenize(text)
        if self.stopwords:
            tokens = [t for t in tokens if t not in LUCENE_STOPWORDS]
        if self.stem:
            cache = self._cache
            if len(cache) > STEM_CACHE_WORDS:  # a service meets endless new words: start afresh
                cache.clear()
            out = []
            for t in tokens:
                s = cache.get(t)
                if s is None:
                    s = cache[t] = self._stemmer.stemWord(t)
                out.append(s)
            tokens = out
        return tokens
