"""Term vocabularies and sparse bag-of-words count matrices."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp


class Vocabulary:
    """A fixed mapping term -> id (ids are positions in ``terms``)."""

    def __init__(self, terms: Sequence[str]):
        self.terms: list[str] = list(terms)
        self.ids: dict[str, int] = {t: i for i, t in enumerate(self.terms)}
        if len(self.ids) != len(self.terms):
            raise ValueError("vocabulary terms must be unique")

    def __len__(self) -> int:
        return len(self.terms)

    def __contains__(self, term: str) -> bool:
        return term in self.ids

    @classmethod
    def build(
        cls, token_lists: Iterable[Iterable[str]], *, min_count: int = 1, max_size: int | None = None
    ) -> Vocabulary:
        """Most frequent terms first (ties alphabetical), so ``max_size`` keeps the most frequent."""
        counts: Counter[str] = Counter()
        for tokens in token_lists:
            counts.update(tokens)
        items = sorted((t for t in counts.items() if t[1] >= min_count), key=lambda tc: (-tc[1], tc[0]))
        if max_size is not None:
            items = items[:max_size]
        return cls([t for t, _ in items])

    def save(self, path: str | Path) -> None:
        """Write the terms, in id order, as JSON."""
        Path(path).write_text(json.dumps({"terms": self.terms}, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Vocabulary:
        try:
            return cls(json.loads(Path(path).read_text(encoding="utf-8"))["terms"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: not a vocabulary ({e})") from e

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Ids of the known tokens, in order; unknown tokens are dropped."""
        get = self.ids.get
        return [i for t in tokens if (i := get(t)) is not None]


def count_matrix(id_lists: Sequence[Sequence[int]], n_cols: int, dtype=np.float32) -> sp.csr_matrix:
    """Rows of ids -> CSR count matrix (rows x n_cols), built in one COO pass (duplicates summed)."""
    lengths = np.fromiter((len(x) for x in id_lists), dtype=np.int64, count=len(id_lists))
    cols = np.fromiter((i for x in id_lists for i in x), dtype=np.int64, count=int(lengths.sum()))
    rows = np.repeat(np.arange(len(id_lists), dtype=np.int64), lengths)
    m = sp.csr_matrix((np.ones(len(cols), dtype=dtype), (rows, cols)), shape=(len(id_lists), n_cols), dtype=dtype)
    m.sum_duplicates()
    m.sort_indices()
    return m
