"""Text processing: the papers' normalisation, vocabularies, letter-trigram word hashing."""

from .normalize import LUCENE_STOPWORDS, Analyzer, normalize, tokenize
from .spelling import SpellCorrector, SpellingParams
from .trigram import DEFAULT_MAX_WORDS, Bags, TrigramHasher, WordTable, word_trigrams
from .vocab import Vocabulary, count_matrix

__all__ = [
    "Analyzer",
    "Bags",
    "DEFAULT_MAX_WORDS",
    "LUCENE_STOPWORDS",
    "SpellCorrector",
    "SpellingParams",
    "TrigramHasher",
    "Vocabulary",
    "WordTable",
    "count_matrix",
    "normalize",
    "tokenize",
    "word_trigrams",
]
