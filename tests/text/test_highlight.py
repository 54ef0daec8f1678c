"""Highlight spans: the words of a text whose normalised form is a query term, as exact offsets
(code points from match_spans, UTF-16 code units from utf16_spans for the page)."""

from __future__ import annotations

import pytest

from semsearch.text import Analyzer
from semsearch.text.highlight import match_spans, query_terms, term_spans, utf16_spans


def words(text: str, spans: list[tuple[int, int]]) -> list[str]:
    return [text[a:b] for a, b in spans]


def test_paper_analyzer_matches_case_and_punctuation_insensitively():
    text = "Red-Cat (RED) cats, red_cat!"
    spans = match_spans("red CAT", text, Analyzer.named("paper"))
    assert words(text, spans) == ["Red", "Cat", "RED", "red", "cat"]  # '_' splits, as the tokenizer does
    assert spans == [(0, 3), (4, 7), (9, 12), (20, 23), (24, 27)]
    assert match_spans("the", "The end of the line", Analyzer.named("paper")) == [(0, 3), (11, 14)]


def test_english_analyzer_stems_and_drops_stop_words():
    en = Analyzer.named("english")
    text = "The Running dogs ran to the parks"
    assert words(text, match_spans("the runs of a dog in a park", text, en)) == ["Running", "dogs", "parks"]
    assert match_spans("the of and", text, en) == []  # a query of stop words matches nothing
    assert query_terms("Running Dogs", en) == {"run", "dog"}


def test_without_an_analyzer_lowercase_alphanumeric_equality():
    text = "Cordless DRILL, drills & Drill-bits 18V"
    assert words(text, match_spans("drill 18v", text, None)) == ["DRILL", "Drill", "18V"]  # no stemming
    assert match_spans("", text) == [] and match_spans("drill", "") == [] and match_spans("!!", text) == []


def test_spans_are_exact_offsets_in_any_script():
    text = "Über café — ÜBER Café naïve"
    spans = match_spans("über CAFÉ", text, Analyzer())
    assert words(text, spans) == ["Über", "café", "ÜBER", "Café"]
    assert all(text[a:b].lower() in {"über", "café"} for a, b in spans)


def test_a_word_analysed_into_several_terms_is_marked_whole():
    # 'İ' lower-cases to 'i' + U+0307 (not alphanumeric): the word 'İstanbul' analyses as ['i', 'stanbul']
    assert match_spans("stanbul", "in İstanbul today", Analyzer()) == [(3, 11)]


def test_term_spans_take_a_preanalysed_query():
    en = Analyzer.named("english")
    terms = query_terms("drilling", en)
    assert term_spans(terms, "a drill", en) == [(2, 7)] and term_spans(frozenset(), "a drill", en) == []


@pytest.mark.parametrize(
    "text,query,expected",
    [
        ("red cat", "cat", [(4, 7)]),  # all BMP: unchanged
        ("🐈 red cat", "cat", [(7, 10)]),  # the emoji is 2 UTF-16 units
        ("🐈🐈cat 🐕 cat", "cat", [(4, 7), (11, 14)]),
        ("cat🐈cat", "cat", [(0, 3), (5, 8)]),
        ("𝐀 é 🐈 cat", "cat", [(8, 11)]),  # a non-BMP letter is a word of its own, 2 units
    ],
)
def test_utf16_spans_count_non_bmp_characters_twice(text, query, expected):
    spans = match_spans(query, text)
    utf16 = utf16_spans(text, spans)
    assert utf16 == expected
    units = text.encode("utf-16-le")
    assert [units[2 * a : 2 * b].decode("utf-16-le") for a, b in utf16] == words(text, spans)
