"""TREC runs (`qid Q0 docid rank score tag`) and TREC qrels, as read by trec_eval, ranx and Pyserini.

`ranked` holds the project's ordering convention: score descending, ties by doc id ascending, so
every run written by semsearch is deterministic. TREC qrels are read by `beir.load_qrels`, which
accepts both the BEIR and the TREC layout.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator, Mapping

from ..types import Qrels, Run
from .files import PathLike, atomic_write, parse_lines, token


def ranked(docs: Mapping[str, float]) -> list[tuple[str, float]]:
    """(doc id, score) pairs best first: score descending, ties broken by doc id ascending."""
    return sorted(docs.items(), key=lambda item: (-item[1], item[0]))


def _finite(value: str) -> float:
    try:
        score = float(value)
    except ValueError:
        raise ValueError(f"score {value!r} is not a number") from None
    if not math.isfinite(score):
        raise ValueError(f"score {value!r} is not finite")
    return score


def iter_run(path: PathLike, *, skip_bad_lines: bool = False) -> Iterator[tuple[str, str, float]]:
    """Stream (query id, doc id, score) from a TREC run; rank and tag are checked, then dropped."""
    seen: set[tuple[str, str]] = set()

    def parse(line: str) -> tuple[str, str, float]:
        parts = line.split()
        if len(parts) != 6:
            raise ValueError(f"expected 6 columns (qid Q0 docid rank score tag), got {len(parts)}")
        qid, _, doc_id, rank, score, _ = parts
        if not rank.isdigit():
            raise ValueError(f"rank {rank!r} is not a non-negative integer")
        if (qid, doc_id) in seen:
            raise ValueError(f"duplicate doc {doc_id!r} for query {qid!r}")
        row = qid, doc_id, _finite(score)
        seen.add((qid, doc_id))
        return row

    return parse_lines(path, parse, skip_bad_lines=skip_bad_lines)


def read_run(path: PathLike, *, skip_bad_lines: bool = False) -> Run:
    """Read a TREC run into {query id: {doc id: score}}."""
    run: Run = {}
    for qid, doc_id, score in iter_run(path, skip_bad_lines=skip_bad_lines):
        run.setdefault(qid, {})[doc_id] = score
    return run


def write_run(run: Run, path: PathLike, tag: str = "semsearch", k: int | None = None) -> None:
    """Write a TREC run atomically: queries in the run's order, each ranked by `ranked`, top k kept.

    Scores are written with full float precision; a non-finite score or an id with white space
    raises ValueError and leaves any existing file untouched.
    """
    token(tag, "tag")
    if k is not None and k < 1:
        raise ValueError(f"k must be positive, got {k}")
    with atomic_write(path) as f:
        for qid, docs in run.items():
            token(qid, "query id")
            for rank, (doc_id, score) in enumerate(ranked(docs)[:k], 1):
                score = float(score)
                if not math.isfinite(score):
                    raise ValueError(f"score {score} of query {qid!r}, doc {doc_id!r} is not finite")
                f.write(f"{qid} Q0 {token(doc_id, 'doc id')} {rank} {score!r} {tag}\n")


def write_trec_qrels(qrels: Qrels, path: PathLike) -> None:
    """Write qrels in TREC's 4-column layout `qid 0 docid rel` (atomically)."""
    with atomic_write(path) as f:
        for qid, docs in qrels.items():
            for doc_id, grade in docs.items():
                f.write(f"{token(qid, 'query id')} 0 {token(doc_id, 'doc id')} {operator.index(grade)}\n")
