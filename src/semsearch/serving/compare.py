"""Two bundles in one service, compared on its users (``semsearch serve A --compare B``).

**Interleave** (``--compare-mode interleave``, the default): every ``/search`` runs both bundles
for the query and shows a team-draft interleaving of their rankings (Radlinski, Kurup & Joachims
2008, "How does clickthrough data reflect retrieval quality?", CIKM; `evaluation.online.team_draft`).
A page at ``offset`` with ``k`` hits is the slice ``[offset, offset + k)`` of the interleaving of
the first ``offset + k`` hits of each ranking. The interleaving's coins come from a generator
seeded with the answer's search id (its nonce, `seed_of`), so the log alone reproduces every page
shown: ``team_draft(A's top offset + k, B's top offset + k, offset + k,
np.random.default_rng(seed_of(search_id)))`` sliced at ``offset``. Each page is its own draw: a
next page is not the continuation of the previous one's interleaving (its hits may repeat or skip
some), but the credit of its clicks is exact. Each hit shown records the team that contributed it
(``hit_teams``, "A" or "B"); the impression's ``arm`` is ``interleave``. A click credits the team
of the clicked document; an impression with clicks is won by the team with more credited clicks
(Chapelle, Joachims, Radlinski & Yue 2012, TOIS: Δ_AB and the sign test, read back by
``semsearch clicks compare``).

**A/B** (``--compare-mode ab``): each user is hashed to one of four buckets by the client id it
sends (``X-Client-Id``; `evaluation.online.bucket_of` with ``--compare-salt``), the 2020
semantic-retrieval paper's Table 7 layout: buckets control-1 and control-2 are served by A,
experiment-1 and experiment-2 by B. A search without a client id is bucketed by its search id's
nonce, so each such search is a user of its own (the log reproduces the bucket either way: the key
is the client id, else the search id's first 16 hex digits). The impression's ``arm`` is the
bucket's name, its ``hit_teams`` the serving team throughout, its ``bundle`` the serving bundle.

Both bundles must hold the same documents (the same ids): an interleaving merges two rankings of
one collection, and a click is credited by document; `check_same_documents` refuses others."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from ..evaluation.online import DEFAULT_SALT, TEAM_A, TEAM_B, BucketLayout, bucket_of, team_draft
from ..index.bundle import Bundle
from .batching import SearchBatcher
from .events import nonce_of

if TYPE_CHECKING:
    from .routes import Highlighter

Mode = Literal["interleave", "ab"]
MODES: tuple[Mode, Mode] = ("interleave", "ab")
TEAMS = ("A", "B")
"""Team names by team code (`evaluation.online.TEAM_A` = 0, ``TEAM_B`` = 1)."""
INTERLEAVE_ARM = "interleave"


def seed_of(search_id: str) -> int:
    """The seed of a search's interleaving: its search id's nonce (16 hex digits) as an integer."""
    return int(nonce_of(search_id), 16)


def arm_name(layout: BucketLayout, bucket: int) -> str:
    """A bucket's arm as logged: ``control-1``, ``control-2``, ``experiment-1``, ``experiment-2``."""
    return layout.name(bucket).replace(" ", "-")


def check_same_documents(a: Bundle, b: Bundle) -> None:
    """Refuse (``ValueError``) to compare bundles over different document ids; warn on stderr
    when the ids agree but the documents' file differs (each hit is then shown as the bundle of
    the ranker that contributed it holds it)."""
    ids_a, ids_b = set(a.corpus.ids), set(b.corpus.ids)
    if ids_a != ids_b:
        only_a, only_b = sorted(ids_a - ids_b), sorted(ids_b - ids_a)
        example = (only_a or only_b)[0]
        raise ValueError(
            f"--compare {b.path}: it holds other documents than {a.path} ({len(only_a):,} ids only in A, "
            f"{len(only_b):,} only in B, e.g. {example!r}): comparing rankers on users needs one collection "
            "(an interleaving merges two rankings of it, and clicks are credited by document)"
        )
    files_a, files_b = a.manifest.get("files", {}), b.manifest.get("files", {})
    if files_a.get("documents.jsonl") != files_b.get("documents.jsonl"):
        print(
            f"semsearch: warning: --compare {b.path}: the same document ids as {a.path} but other "
            "document texts; each hit is shown as its ranker's bundle holds it",
            file=sys.stderr,
            flush=True,
        )


@dataclass
class Comparison:
    """What a worker needs to compare its bundle (A) with ``other`` (B): B's batcher and
    highlighter, the mode and, for ab, the bucket layout (Table 7's: buckets 0 and 1 control,
    2 and 3 experiment)."""

    other: Bundle
    batcher: SearchBatcher
    highlighter: Highlighter
    mode: Mode = "interleave"
    salt: str = DEFAULT_SALT

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"compare mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        self.layout = BucketLayout(salt=self.salt)

    def assign(self, client_id: str | None, nonce: str) -> tuple[str, int]:
        """ab mode: the arm (bucket name) and team code of a user (by client id, else the search's
        nonce)."""
        bucket = int(bucket_of([client_id if client_id is not None else nonce], self.layout.n_buckets, self.salt)[0])
        return arm_name(self.layout, bucket), TEAM_A if bucket in self.layout.control else TEAM_B


def interleave(a: Sequence[str], b: Sequence[str], offset: int, k: int, seed: int) -> tuple[list[str], list[int]]:
    """The page ``[offset, offset + k)`` of the team-draft interleaving of ``a`` and ``b`` cut to
    ``offset + k`` (Radlinski et al. 2008), its coins from ``np.random.default_rng(seed)``: the
    page's document ids and each one's team code."""
    n = offset + k
    shown, teams = team_draft(a[:n], b[:n], n, np.random.default_rng(seed))
    return shown[offset:], teams[offset:]


__all__ = [
    "INTERLEAVE_ARM",
    "MODES",
    "TEAMS",
    "Comparison",
    "arm_name",
    "check_same_documents",
    "interleave",
    "seed_of",
]
