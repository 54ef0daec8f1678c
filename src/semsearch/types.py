"""Shared plain types: runs and qrels in the nested-dict shape pytrec_eval and ranx use, and
``Part``, the one notation for a piece of a whole (a shard, a fold)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Self

Run = dict[str, dict[str, float]]
"""query id -> document id -> score (higher is better)."""

Qrels = dict[str, dict[str, int]]
"""query id -> document id -> graded relevance label."""


@dataclass(frozen=True)
class Part:
    """Part ``i`` of ``n``, counted from 1 and written ``"I/N"`` — the one notation for every
    piece of a whole that the CLI, specs and Python take: a shard of an encoding (``semsearch
    encode --shard 1/4`` .. ``4/4``) and a fold of a split's queries (``evaluation.QueryFold``:
    ``train --hold-out``, the ranker's ``train_fold``), so "1/2" names the same half everywhere.
    ``index`` is the same part counted from 0, for slicing."""

    i: int
    n: int
    noun: ClassVar[str] = "part"
    min_n: ClassVar[int] = 1

    def __post_init__(self) -> None:
        if not (isinstance(self.i, int) and isinstance(self.n, int) and self.n >= self.min_n and 1 <= self.i <= self.n):
            raise ValueError(f"{self.noun} {self.i}/{self.n}: {self._rule()}")

    @classmethod
    def _rule(cls) -> str:
        n = ", N >= 2" if cls.min_n >= 2 else ""
        return f"expected I/N, {cls.noun} I of N counted from 1 (1 <= I <= N{n}), e.g. 1/{max(cls.min_n, 4)}"

    @classmethod
    def parse(cls, text: str, where: str | None = None) -> Self:
        """``"I/N"`` (spaces allowed) -> the part; a ValueError naming ``where`` (the option or
        parameter it came from) otherwise."""
        parts = str(text).strip().split("/")
        try:
            i, n = (int(p) for p in parts) if len(parts) == 2 else (0, 0)
            return cls(i, n)  # which checks the bounds
        except ValueError:
            raise ValueError(f"{where or cls.noun} {text!r}: {cls._rule()}") from None

    @property
    def index(self) -> int:
        """The part counted from 0."""
        return self.i - 1

    def rows(self, total: int) -> tuple[int, int]:
        """The part's contiguous rows [lo, hi) of ``total`` (sizes differ by at most one)."""
        return self.index * total // self.n, self.i * total // self.n

    def __str__(self) -> str:
        return f"{self.i}/{self.n}"
