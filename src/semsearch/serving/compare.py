"""Two bundles in one service, compared on its users (``semsearch serve A --compare B``).

**Interleave** (``--compare-mode interleave``, the default): every ``/search`` runs both bundles
for the query and shows a team-draft interleaving of their rankings (Radlinski, Kurup & Joachims
2008, "How does clickthrough data reflect retrieval quality?", CIKM; `clicks.interleaving.team_draft`).
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
sends (``X-Client-Id``; `clicks.abtest.bucket_of` with ``--compare-salt``), the 2020
semantic-retrieval paper's Table 7 layout: buckets control-1 and control-2 are served by A,
experiment-1 and experiment-2 by B. A search without a client id is bucketed by its search id's
nonce, so each such search is a user of its own (the log reproduces the bucket either way: the key
is the client id, else the search id's first 16 hex digits). The impression's ``arm`` is the
bucket's name, its ``hit_teams`` the serving team throughout, its ``bundle`` the serving bundle.

Both bundles must hold the same documents (the same ids): an interleaving merges two rankings of
one collection, and a click is credited by document; `check_same_documents` refuses others."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..clicks.abtest import DEFAULT_SALT, ABTable, BucketLayout, ab_table, bucket_of
from ..clicks.interleaving import TEAM_A, TEAM_B, InterleavingSummary, interleaving_summary, team_draft
from ..index.bundle import Bundle
from ..index.searcher import Capabilities, Hit, Result, SearchBase, SearchRequest
from .events import new_nonce, nonce_of

if TYPE_CHECKING:
    from .highlighter import Highlighter

Mode = Literal["interleave", "ab"]
MODES: tuple[Mode, Mode] = ("interleave", "ab")
TEAMS = ("A", "B")
"""Team names by team code (`clicks.interleaving.TEAM_A` = 0, ``TEAM_B`` = 1)."""
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
class ComparedResult(Result):
    """A compared search's answer: each hit's team code (``TEAM_A`` / ``TEAM_B``), the arm it was
    served under (``interleave`` or an ab bucket's name), the team that served an ab answer
    (None when interleaved: both did) and the text each team searched."""

    teams: list[int] = field(default_factory=list)
    arm: str = INTERLEAVE_ARM
    team: int | None = None
    searched: tuple[str, str] = ("", "")

    def cut(self, offset: int) -> None:
        super().cut(offset)
        if offset:
            self.teams = self.teams[offset:]


class ComparedPair(SearchBase):
    """Two bundles (A, B) over one collection answering as one ``Searcher`` (the module
    docstring): interleaved, a request's ``nonce`` seeds the draw; ab, its ``client`` (else its
    nonce) picks the bucket. Its results are ``ComparedResult``s; a request without a nonce gets
    one drawn (``events.new_nonce``)."""

    def __init__(self, a: Bundle, b: Bundle, mode: Mode = "interleave", salt: str = DEFAULT_SALT):
        if mode not in MODES:
            raise ValueError(f"compare mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.bundles = (a, b)
        self.mode, self.salt = mode, salt
        self.layout = BucketLayout(salt=salt)

    @property
    def capabilities(self) -> Capabilities:
        """A's explanations; a search fails when either bundle's store does."""
        return Capabilities(explain=True, fallible=any(x.capabilities.fallible for x in self.bundles))

    def assign(self, client_id: str | None, nonce: str) -> tuple[str, int]:
        """ab mode: the arm (bucket name) and team code of a user (by client id, else the search's
        nonce)."""
        bucket = int(bucket_of([client_id if client_id is not None else nonce], self.layout.n_buckets, self.salt)[0])
        return arm_name(self.layout, bucket), TEAM_A if bucket in self.layout.control else TEAM_B

    def check(self, request: SearchRequest) -> None:
        """Each bundle's checks: a model named must be one of both."""
        for x in self.bundles:
            x.check(request)

    def search_group(self, requests: Sequence[SearchRequest]) -> list[Result]:
        nonces = [r.nonce if r.nonce is not None else new_nonce() for r in requests]
        deep = [replace(r, offset=0, k=r.depth) for r in requests]
        n = requests[0].depth
        if self.mode == "interleave":
            a, b = (x.search_requests(deep) for x in self.bundles)
            out: list[Result] = []
            for ra, rb, nonce in zip(a, b, nonces, strict=True):
                found = [{h.doc_id: h for h in r.hits} for r in (ra, rb)]
                ids, codes = interleave([h.doc_id for h in ra.hits], [h.doc_id for h in rb.hits], 0, n, seed_of(nonce))
                timing = {**ra.timing, **{f"b_{name}": ms for name, ms in rb.timing.items()}}
                hits = [found[t][d] for d, t in zip(ids, codes, strict=True)]
                out.append(
                    ComparedResult(
                        hits, timing, ra.query, ra.facets, ra.tally, codes, INTERLEAVE_ARM, None, (ra.query, rb.query)
                    )
                )
            return out
        assigned = [self.assign(r.client, nonce) for r, nonce in zip(requests, nonces, strict=True)]
        results: list[Result | None] = [None] * len(requests)
        for team in (TEAM_A, TEAM_B):
            at = [i for i, (_, t) in enumerate(assigned) if t == team]
            if not at:
                continue
            for i, r in zip(at, self.bundles[team].search_requests([deep[i] for i in at]), strict=True):
                results[i] = ComparedResult(
                    r.hits,
                    r.timing,
                    r.query,
                    r.facets,
                    r.tally,
                    [team] * len(r.hits),
                    assigned[i][0],
                    team,
                    (r.query, r.query),
                )
        return results  # type: ignore[return-value]  # filled

    def hits(self, result: Result) -> list[Hit]:
        """Plain rows of a compared result's hits (this pair's answer), each from its team's bundle."""
        assert isinstance(result, ComparedResult)  # (a pair answers with these)
        out = []
        for rank, (t, h) in enumerate(zip(result.teams, result.hits, strict=True), 1):
            corpus = self.bundles[t].corpus
            i = corpus.index[h.doc_id]
            out.append(Hit(rank, h.doc_id, h.score, corpus.titles[i], corpus.texts[i], corpus.fields(i)))
        return out

    def close(self) -> None:
        for x in self.bundles:
            x.close()


@dataclass
class Comparison:
    """What a worker needs to compare its bundle (A) with ``other`` (B): the pair searched as one
    (``ComparedPair``) and B's highlighter."""

    pair: ComparedPair
    highlighter: Highlighter

    @property
    def other(self) -> Bundle:
        return self.pair.bundles[1]

    @property
    def mode(self) -> Mode:
        return self.pair.mode


def interleave(a: Sequence[str], b: Sequence[str], offset: int, k: int, seed: int) -> tuple[list[str], list[int]]:
    """The page ``[offset, offset + k)`` of the team-draft interleaving of ``a`` and ``b`` cut to
    ``offset + k`` (Radlinski et al. 2008), its coins from ``np.random.default_rng(seed)``: the
    page's document ids and each one's team code."""
    n = offset + k
    shown, teams = team_draft(a[:n], b[:n], n, np.random.default_rng(seed))
    return shown[offset:], teams[offset:]


@dataclass(frozen=True)
class ComparisonReport:
    """A comparison read back from a service's event log (`read_comparison`): the interleaving
    summary of the impressions with arm ``interleave`` and the A/B table of those in the ab
    buckets (None where the log has none), the bundles each compared, and how many impressions
    the log holds in all."""

    directory: str
    impressions: int
    interleaving: InterleavingSummary | None
    interleaved_bundles: list[tuple[str, str]]
    ab: ABTable | None
    ab_bundles: dict[str, tuple[str, str]]

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values; a number that is not finite (a lift over a zero rate) is null."""
        return _finite(
            {
                "log": self.directory,
                "impressions": self.impressions,
                "interleave": None
                if self.interleaving is None
                else {"bundles": [list(x) for x in self.interleaved_bundles], **self.interleaving.to_json()},
                "ab": None
                if self.ab is None
                else {"bundles": {arm: list(x) for arm, x in self.ab_bundles.items()}, **self.ab.to_json()},
            }
        )

    def to_markdown(self, queries: int = 20) -> str:
        """Both parts as Markdown; the per-query wins of the ``queries`` queries with the most
        impressions with clicks."""
        parts = [f"Event log {self.directory}: {self.impressions:,} impressions."]
        s = self.interleaving
        if s is not None:
            named = "; ".join(f"bundles {name}, versions {version}" for name, version in self.interleaved_bundles)
            parts.append(f"## Interleaving ({named})\n\n{s.to_markdown('A', 'B')}")
            top = sorted(s.per_query.items(), key=lambda kv: (-sum(kv[1]), kv[0]))[:queries]
            if top:
                rows = ["| Query | Impressions with clicks | A wins | B wins | Ties |", "|---|---:|---:|---:|---:|"]
                rows += [f"| {_cell(q)} | {sum(w):,} | {w[0]:,} | {w[1]:,} | {w[2]:,} |" for q, w in top]
                more = f" ({len(s.per_query) - len(top):,} more not shown)" if len(s.per_query) > len(top) else ""
                parts.append(f"Per query, most clicked first{more}:\n\n" + "\n".join(rows) + "\n")
        if self.ab is not None:
            named = ", ".join(f"{arm}: {name} ({version})" for arm, (name, version) in sorted(self.ab_bundles.items()))
            parts.append(f"## A/B buckets ({named})\n\n{self.ab.to_markdown()}")
        return "\n\n".join(parts)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _cell(text: str) -> str:
    """A query as a Markdown table cell (pipes escaped, newlines as spaces)."""
    return text.replace("|", "\\|").replace("\n", " ")


def read_comparison(directory: str | Path, *, salt: str = DEFAULT_SALT, head_share: float = 0.5) -> ComparisonReport:
    """What ``serve A --compare B --events DIR`` logged, read back (``clicks.sessions.read_clicked``,
    through DuckDB): for the interleaved impressions, the wins, ties, Δ_AB and sign tests of
    `clicks.interleaving.interleaving_summary` (Radlinski et al. 2008; Chapelle et al. 2012) over
    the clicks credited to each team; for the ab impressions, the clicked-search rate per bucket
    on all, head and tail queries with Wilson intervals and the tests (`clicks.abtest.ab_table`,
    the 2020 paper's Table 7 layout), each search's user the client id or else the search id's
    nonce, as the service bucketed them.

    Raises ``ValueError`` when the log holds no impression of a comparison, or when its ab
    impressions' arms are not the buckets ``salt`` gives their users (another ``--compare-salt``)."""
    from ..clicks.sessions import read_clicked

    table = read_clicked(directory)
    arms = table.column("arm").to_pylist()
    layout = BucketLayout(salt=salt)
    names = {arm_name(layout, x) for x in layout.control + layout.experiment}
    inter = [i for i, a in enumerate(arms) if a == INTERLEAVE_ARM]
    ab = [i for i, a in enumerate(arms) if a in names]
    if not inter and not ab:
        raise ValueError(
            f"{directory}: none of its {len(arms):,} impressions is of a comparison (arm {INTERLEAVE_ARM}, "
            f"or one of {', '.join(sorted(names))}): log one with `semsearch serve A --compare B --events DIR`"
        )
    col = {name: table.column(name).to_pylist() for name in ("query_id", "user_query", "client_id", "bundle")}
    col["bundle_version"] = table.column("bundle_version").to_pylist()
    summary, table_ab = None, None
    if inter:
        ca = table.column("clicks_a").to_numpy(zero_copy_only=False)[inter]
        cb = table.column("clicks_b").to_numpy(zero_copy_only=False)[inter]
        queries = np.array([col["user_query"][i] for i in inter], dtype=object).astype(str)
        summary = interleaving_summary(ca, cb, queries)
    ab_bundles: dict[str, tuple[str, str]] = {}
    if ab:
        keys = [col["client_id"][i] or nonce_of(col["query_id"][i]) for i in ab]
        expected = [arm_name(layout, int(x)) for x in bucket_of(keys, layout.n_buckets, salt)]
        wrong = sum(e != arms[i] for e, i in zip(expected, ab, strict=True))
        if wrong:
            raise ValueError(
                f"{directory}: {wrong:,} of its {len(ab):,} A/B impressions are not in the bucket salt {salt!r} "
                "gives their user: give --salt as the service's --compare-salt"
            )
        clicks = table.column("clicks").to_numpy(zero_copy_only=False)[ab]
        table_ab = ab_table(keys, [col["user_query"][i] for i in ab], clicks, layout, head_share=head_share)
        for i in ab:
            ab_bundles.setdefault(arms[i], (col["bundle"][i], col["bundle_version"][i]))
    interleaved = sorted({(col["bundle"][i] or "", col["bundle_version"][i] or "") for i in inter})
    return ComparisonReport(str(directory), len(arms), summary, interleaved, table_ab, ab_bundles)


__all__ = [
    "INTERLEAVE_ARM",
    "MODES",
    "TEAMS",
    "ComparedPair",
    "ComparedResult",
    "Comparison",
    "ComparisonReport",
    "arm_name",
    "check_same_documents",
    "interleave",
    "read_comparison",
    "seed_of",
]
