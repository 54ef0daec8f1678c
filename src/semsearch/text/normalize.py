"""Text normalisation as in the papers (CLSM §5.1): lower-case, punctuation removed,
white-space tokens, numbers kept, no stemming. An optional English analyzer (Porter stemming and
Lucene's stop words) exists for BEIR-comparable lexical baselines."""

from __future__ import annotations

import re
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
    ``stopwords``: drop Lucene's English stop words. The default is the papers' normalisation."""

    stem: str | None = None
    stopwords: bool = False
    _cache: dict[str, str] = field(default_factory=dict, compare=False, repr=False, hash=False)

    @classmethod
    def named(cls, name: str) -> Analyzer:
        """``paper`` (default normalisation) or ``english`` (Porter stemming + stop words, as Anserini)."""
        if name == "paper":
            return cls()
        if name == "english":
            return cls(stem="porter", stopwords=True)
        raise ValueError(f"unknown analyzer {name!r}; use 'paper' or 'english'")

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Analyzer:
        """An analyzer from its ``config()`` (a saved model's); ValueError names a bad key."""
        import Stemmer

        if not isinstance(config, dict):
            raise ValueError(f"analyzer config must be a table, got {config!r}")
        stem, stopwords = config.get("stem"), config.get("stopwords", False)
        if stem is not None and (not isinstance(stem, str) or stem not in Stemmer.algorithms()):
            raise ValueError(
                f"analyzer 'stem' must be null or a Snowball algorithm "
                f"({', '.join(Stemmer.algorithms())}), got {stem!r}"
            )
        if not isinstance(stopwords, bool):
            raise ValueError(f"analyzer 'stopwords' must be true or false, got {stopwords!r}")
        return cls(stem=stem, stopwords=stopwords)

    def config(self) -> dict[str, Any]:
        return {"stem": self.stem, "stopwords": self.stopwords}

    @cached_property
    def _stemmer(self):
        import Stemmer  # PyStemmer: Snowball stemmers in C

        return Stemmer.Stemmer(self.stem, 0)

    def __call__(self, text: str) -> list[str]:
        tokens = tokenize(text)
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
