"""Query spelling correction against the collection's own words ("did you mean").

Shopper queries are often misspelt: 27-28 % of Home Depot's dev and test queries hold a word
that no title has ("koehler", "kkitchen cabines", "btuair"). Such a word matches nothing
lexically and breaks into unrelated word pieces for a transformer. ``SpellCorrector`` replaces it
by the most frequent collection word within a small edit distance, or splits it into two frequent
collection words, and leaves alone the words it should not touch: words the collection has, words
sharing a Porter stem with one of them ("bathtubs"), short words, and words holding a digit (sizes,
model numbers: "6x8", "pem31sf").

The look-up is symspellpy's symmetric-delete index (Damerau-Levenshtein distance; its
``word_segmentation`` for the splits), a maintained library, rather than our own edit-distance
search. The corrector is a function of the collection's word counts only, which is what it saves
(JSON)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .normalize import WORD, is_cjk, tokenize

CACHE_WORDS = 100_000  # corrections a corrector remembers (a service meets endless new words)


@dataclass(frozen=True)
class SpellingParams:
    """When a word is corrected, and to what. Chosen on Home Depot dev (BM25 and cross-encoder
    NDCG; test never read)."""

    min_length: int = 4  # shorter words are left alone (abbreviations: "ac", "pvc", "vdk")
    long_word: int = 7  # words this long may be 2 edits from their correction, shorter ones 1
    split_min_count: int = 20  # a split's two words must each occur this often in the collection
    split_min_length: int = 3  # ... and have at least this many letters

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"spelling parameter {name!r} must be a positive integer, got {value!r}")


class SpellCorrector:
    """Corrects the misspelt words of queries against a collection's word counts (``fit``)."""

    def __init__(self, counts: Mapping[str, int], params: SpellingParams | None = None):
        import Stemmer  # PyStemmer, as the English analyzer
        from symspellpy import SymSpell

        self.params = params or SpellingParams()
        self.counts = {w: int(c) for w, c in counts.items() if c > 0}
        self._stemmer = Stemmer.Stemmer("porter")
        self._stems = set(self._stemmer.stemWords(list(self.counts)))
        self._index = SymSpell(max_dictionary_edit_distance=2, prefix_length=7)
        for w, c in self.counts.items():
            if len(w) > 1 and not w.isdigit():
                self._index.create_dictionary_entry(w, c)
        self._cache: dict[str, str] = {}

    @classmethod
    def fit(cls, texts: Iterable[str], params: SpellingParams | None = None) -> SpellCorrector:
        """From a collection's texts (titles): the counts of their tokens (``text.tokenize``)."""
        counts: Counter[str] = Counter()
        for t in texts:
            counts.update(tokenize(t))
        return cls(counts, params)

    def word(self, w: str) -> str:
        """The correction of one lower-case token (itself when it is left alone)."""
        out = self._cache.get(w)
        if out is None:
            if len(self._cache) > CACHE_WORDS:
                self._cache.clear()
            out = self._cache[w] = self._correct(w)
        return out

    def _correct(self, w: str) -> str:
        from symspellpy import Verbosity

        p = self.params
        # (an empty dictionary: nothing to correct to, and symspellpy's segmentation would fail)
        if (
            not self._index.words
            or w in self.counts
            or len(w) < p.min_length
            or any(ch.isdigit() for ch in w)
            or is_cjk(w)  # an unspaced CJK run is a phrase: one edit swaps a word (红色 -> 黑色)
            or self._stemmer.stemWord(w) in self._stems
        ):
            return w
        found = self._index.lookup(w, Verbosity.TOP, max_edit_distance=2 if len(w) >= p.long_word else 1)
        if found:  # the closest, the most frequent of equally close ones
            return str(found[0].term)
        parts = self._index.word_segmentation(w, max_edit_distance=0).corrected_string.split()
        if len(parts) == 2 and all(
            len(x) >= p.split_min_length and self.counts.get(x, 0) >= p.split_min_count for x in parts
        ):
            return " ".join(parts)
        return w

    def correct(self, query: str) -> str:
        """``query`` with each misspelt word replaced (lower-case); everything else as it was."""
        return WORD.sub(lambda m: self._token(m.group(0)), query)

    def _token(self, token: str) -> str:
        """One word of a query as ``correct`` writes it: as typed, or its (lower-case) correction."""
        low = token.lower()
        fixed = self.word(low)
        return token if fixed == low else fixed

    def corrections(self, query: str) -> list[tuple[str, str]]:
        """The (word, correction) pairs ``correct`` applies to ``query``, in order."""
        return [(m.group(0), fixed) for m in WORD.finditer(query) if (fixed := self._token(m.group(0))) != m.group(0)]

    def correct_all(self, queries: Mapping[str, str]) -> dict[str, str]:
        """``correct`` over a query id -> text mapping."""
        return {q: self.correct(t) for q, t in queries.items()}

    # ---------------------------------------------------------------------------- persistence
    def config(self) -> dict[str, Any]:
        return {"params": asdict(self.params), "counts": self.counts}

    def save(self, path: str | Path) -> None:
        """Write the corrector (its parameters and word counts) as JSON, atomically."""
        p = Path(path)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps(self.config(), ensure_ascii=False), encoding="utf-8")
        tmp.replace(p)

    @classmethod
    def load(cls, path: str | Path) -> SpellCorrector:
        """Read ``save``'s JSON; ValueError names the file and what is wrong."""
        p = Path(path)
        try:
            raw = json.loads(p.read_text(encoding="utf-8"))
            params, counts = raw["params"], raw["counts"]
            if not isinstance(counts, dict) or not all(isinstance(c, int) for c in counts.values()):
                raise ValueError("'counts' must map words to integers")
            return cls(counts, SpellingParams(**params))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{p}: not a spelling corrector ({e})") from None
