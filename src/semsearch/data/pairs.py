"""Query-title pair files and click logs: the training input of the papers' models.

- pairs: `query<TAB>title`, one clicked (or judged relevant) pair per line;
- clicks: `query<TAB>doc_id<TAB>clicks`, a click count >= 0 per (query, document).

Both are streamed; an optional header line (exactly `query<TAB>title` / `query<TAB>doc_id<TAB>clicks`)
is tolerated. Writers are atomic and write no header.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator

from .files import PathLike, atomic_write, parse_lines, tsv_field

PAIRS_HEADER = ("query", "title")
CLICKS_HEADER = ("query", "doc_id", "clicks")


def _columns(line: str, names: tuple[str, ...]) -> list[str]:
    """Split a TSV line into exactly len(names) non-empty columns."""
    parts = line.split("\t")
    if len(parts) != len(names):
        raise ValueError(f"expected {len(names)} tab-separated columns ({', '.join(names)}), got {len(parts)}")
    for name, value in zip(names, parts):
        if not value.strip():
            raise ValueError(f"empty {name}")
    return parts


def _is_header(names: tuple[str, ...]):
    return lambda line: tuple(line.split("\t")) == names


def iter_pairs(path: PathLike, *, skip_bad_lines: bool = False) -> Iterator[tuple[str, str]]:
    """Stream (query, title) pairs from a `query<TAB>title` file."""

    def parse(line: str) -> tuple[str, str]:
        query, title = _columns(line, PAIRS_HEADER)
        return query, title

    return parse_lines(path, parse, skip_bad_lines=skip_bad_lines, header=_is_header(PAIRS_HEADER))


def write_pairs(pairs: Iterable[tuple[str, str]], path: PathLike) -> None:
    """Write (query, title) pairs as TSV (atomically)."""
    with atomic_write(path) as f:
        for query, title in pairs:
            f.write(f"{tsv_field(query, 'query')}\t{tsv_field(title, 'title')}\n")


def iter_clicks(path: PathLike, *, skip_bad_lines: bool = False) -> Iterator[tuple[str, str, int]]:
    """Stream (query, doc id, clicks) from a click log; clicks must be an integer >= 0."""

    def parse(line: str) -> tuple[str, str, int]:
        query, doc_id, clicks = _columns(line, CLICKS_HEADER)
        if not (clicks.isascii() and clicks.isdigit()):  # rejects "-1", "2.5", "+3"
            raise ValueError(f"clicks {clicks!r} is not an integer >= 0")
        return query, doc_id, int(clicks)

    return parse_lines(path, parse, skip_bad_lines=skip_bad_lines, header=_is_header(CLICKS_HEADER))


def write_clicks(clicks: Iterable[tuple[str, str, int]], path: PathLike) -> None:
    """Write (query, doc id, clicks) rows as TSV (atomically); clicks must be an int >= 0."""
    with atomic_write(path) as f:
        for query, doc_id, count in clicks:
            count = operator.index(count)
            if count < 0:
                raise ValueError(f"clicks must be >= 0, got {count!r}")
            f.write(f"{tsv_field(query, 'query')}\t{tsv_field(doc_id, 'doc id')}\t{count}\n")
