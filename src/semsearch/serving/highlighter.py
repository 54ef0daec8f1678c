"""/search's highlight spans (``Highlighter``), shared by the routes and the compared answers."""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

from ..text.highlight import Span, query_terms, utf16_spans, word_terms
from ..text.normalize import Analyzer


class Highlighter:
    """/search's highlight spans with the bundle's lexical analyzer (``text.highlight``). It uses a
    copy of the analyzer, under its own lock: analyzers keep a stemming cache that is not
    thread-safe, and the search stages hold the original's. Without a lexical model: lower-case
    alphanumeric equality. The analysis of each title word is kept (``WORDS`` of them): a page of
    ten hits analyses a hundred words one by one, and that was most of a cached search's time."""

    WORDS = 1 << 16

    def __init__(self, lexical: Any) -> None:
        a = getattr(lexical, "analyzer", None)
        self.analyzer: Any = Analyzer.from_config(a.config()) if isinstance(a, Analyzer) else a if callable(a) else None
        analyze = self.analyzer or Analyzer()
        # tuples, not the analyzer's lists: a tuple of strings is untracked by the cyclic GC, so
        # the cache adds nothing to the full collections of a busy worker
        self._word = lru_cache(maxsize=self.WORDS)(lambda word: tuple(analyze(word)))
        # each title's words with their terms, kept per text: the same titles recur in pages, and
        # analysing their words one by one would be a large part of a cached search
        # (word_terms takes any callable giving a word's terms; this one gives tuples)
        self._words_of = lru_cache(maxsize=self.WORDS)(
            lambda text: word_terms(text, self._word)  # type: ignore[arg-type]  # tuples
        )
        self._lock = threading.Lock()

    def terms(self, query: str) -> frozenset[str]:
        with self._lock:
            return query_terms(query, self.analyzer)

    def spans(self, terms: frozenset[str], text: str) -> list[Span]:
        """Matching words of ``text`` as ``[start, end)`` in UTF-16 code units (JavaScript indices)."""
        if not terms or not text:
            return []
        with self._lock:
            words = self._words_of(text)
        return utf16_spans(text, [(a, b) for a, b, ts in words if not terms.isdisjoint(ts)])
