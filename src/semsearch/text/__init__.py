"""Text processing: the papers' normalisation, vocabularies, letter-trigram word hashing."""

from .normalize import LUCENE_STOPWORDS, Analyzer, cjk_tokenize, detect_analyzer, is_cjk, normalize, tokenize
from .spelling import SpellCorrector, SpellingParams
from .trigram import DEFAULT_MAX_WORDS, Bags, TrigramHasher, WordTable, hash_words, word_features, word_trigrams
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
    "cjk_tokenize",
    "count_matrix",
    "detect_analyzer",
    "hash_words",
    "is_cjk",
    "normalize",
    "tokenize",
    "word_features",
    "word_trigrams",
]
