"""Which words of a text match a query after normalisation: the spans a search page highlights.

A word is marked when its analysis (the bundle's lexical analyzer: lower-casing, and for the
'english' analyzer Porter stemming and stop words) yields a term of the analysed query, so the
marks show what the lexical stage matched ("running" for the query "runs"; no "the" under the
english analyzer). Words are found by a regex over the original text, so the spans are exact
offsets into it; each word is analysed on its own with the same analyzer."""

from __future__ import annotations

from collections.abc import Callable, Collection

from .normalize import WORD, Analyzer

Span = tuple[int, int]
AnalyzerLike = Callable[[str], list[str]]

_PLAIN = Analyzer()  # no lexical model: lower-case alphanumeric equality (the papers' normalisation)


def query_terms(query: str, analyzer: AnalyzerLike | None = None) -> frozenset[str]:
    """The query's normalised terms under ``analyzer`` (None: lower-case alphanumeric words)."""
    return frozenset((analyzer or _PLAIN)(query))


def word_terms(text: str, analyzer: AnalyzerLike | None = None) -> tuple[tuple[int, int, tuple[str, ...]], ...]:
    """Each word of ``text`` as (start, end, the terms ``analyzer`` makes of it): what
    ``term_spans`` matches a query's terms against (a caller that meets the same texts again, the
    service's titles, can keep these)."""
    analyze = analyzer or _PLAIN
    return tuple((*m.span(), tuple(analyze(m.group()))) for m in WORD.finditer(text))


def term_spans(terms: Collection[str], text: str, analyzer: AnalyzerLike | None = None) -> list[Span]:
    """``match_spans`` with the query already analysed (a page of hits analyses its query once)."""
    if not terms or not text:
        return []
    return [(a, b) for a, b, ts in word_terms(text, analyzer) if any(t in terms for t in ts)]


def match_spans(query: str, text: str, analyzer: AnalyzerLike | None = None) -> list[Span]:
    """Spans ``[start, end)`` (Python string indices, i.e. code points; sorted, disjoint) of the
    words of ``text`` whose analysis yields a normalised term of ``query``. ``analyzer``: the
    bundle's lexical analyzer (``Analyzer``); None falls back to lower-case alphanumeric equality."""
    return term_spans(query_terms(query, analyzer), text, analyzer)


def utf16_spans(text: str, spans: list[Span]) -> list[Span]:
    """``spans`` (code-point indices into ``text``) as UTF-16 code-unit offsets, what JavaScript's
    ``String.prototype.slice`` takes: every character past U+FFFF (emoji, for one) counts twice."""
    if not spans or text.isascii() or max(text) <= "\uffff":
        return list(spans)
    out, pos, units = [], 0, 0
    for start, end in spans:  # sorted: one pass over the text
        units += sum(2 if ord(c) > 0xFFFF else 1 for c in text[pos:start])
        s = units
        units += sum(2 if ord(c) > 0xFFFF else 1 for c in text[start:end])
        out.append((s, units))
        pos = end
    return out


__all__ = ["match_spans", "query_terms", "term_spans", "utf16_spans", "word_terms"]
