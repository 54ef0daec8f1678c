"""A click log at cluster scale (issue 51): the click models' fitting and the click labels' extraction
over a log partitioned into many event logs, as Ray Data tasks.

A **partitioned log** is a folder of partitions, each an event log of its own (``impressions/`` and
``events/`` segments as the service writes them; ``partitions`` finds them), every click in the
partition of its impression: each service worker or machine writing its own log, or a log
bucketed by search id. A partition is read as sessions (``clicks.sessions.read_sessions``, a DuckDB
join) and reduced to the counts of its distinct **cells**: (query, document, rank, rank of the
click above, clicked) -> how many (``cell_counts``). Those counts add up over partitions (Ray
Data's group-by sum), and they are all that the examination models' EM and the click labels need:

- PBM and UBM's EM runs on the counts of identical (pair, examination, click) cells anyway
  (``clicks.models``), so ``fit`` on the added-up counts is the fit of one process over the whole
  log (the same pairs in the same order, the same sums: tested equal). DBN and the cascade model
  condition on each session's whole click sequence; they are not fitted here.
- ``labels``: per shown (query, document) pair its impressions, clicks, inverse-propensity
  weighted credit, click-through rate, grade and most frequent rank: what ``clicks.labels``'
  ``click_judgments`` (the stage-2 ranker) and ``click_pairs`` (the pair models: a positive per
  click) take, written as one Parquet file (atomically).

Per partition, memory is one partition's sessions; the driver holds the added-up counts (one row a
distinct cell, far fewer than the log's impressions for a head-heavy query stream)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..data.files import atomic_write
from .models import PBM, UBM, previous_click_rank, shown_mask
from .sessions import Sessions, read_sessions

CELL_COLUMNS = ("query", "doc", "rank", "prev", "clicked")
"""A cell's key: query text, document id, 1-based rank, 1-based rank of the last click above it (0:
none), clicked; ``n`` counts the cells."""
MODELS = {"pbm": PBM, "ubm": UBM}


def partitions(log: str | Path) -> list[Path]:
    """The partitions of a partitioned log: its sub-folders holding an ``impressions`` folder, in
    name order (a plain event log is one partition, itself)."""
    root = Path(log)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such log folder")
    if (root / "impressions").is_dir():
        return [root]
    found = sorted(p for p in root.iterdir() if (p / "impressions").is_dir())
    if not found:
        raise FileNotFoundError(f"{root}: neither an event log (impressions/) nor a folder of them")
    return found


def cell_counts(sessions: Sessions) -> pa.Table:
    """The counts of ``sessions``' distinct shown cells (``CELL_COLUMNS`` and ``n``)."""
    k = sessions.positions
    mask = shown_mask(sessions)
    prev = previous_click_rank(sessions.clicks)
    n_docs = max(len(sessions.doc_ids), 1)
    rows, cols = np.nonzero(mask)
    code = ((sessions.query[rows].astype(np.int64) * n_docs + sessions.docs[rows, cols]) * k + cols) * (k + 1) + prev[
        rows, cols
    ]
    code = code * 2 + sessions.clicks[rows, cols]
    uniq, n = np.unique(code, return_counts=True)
    clicked, rest = uniq % 2, uniq // 2
    prev_of, rest = rest % (k + 1), rest // (k + 1)
    rank, pair = rest % k, rest // k
    return pa.table(
        {
            "query": pa.array(sessions.queries, pa.string()).take(pa.array(pair // n_docs)),
            "doc": pa.array(sessions.doc_ids, pa.string()).take(pa.array(pair % n_docs)),
            "rank": pa.array((rank + 1).astype(np.int16)),
            "prev": pa.array(prev_of.astype(np.int16)),
            "clicked": pa.array(clicked.astype(bool)),
            "n": pa.array(n.astype(np.int64)),
        }
    )


def _add_up(table: pa.Table) -> pa.Table:
    return table.group_by(list(CELL_COLUMNS)).aggregate([("n", "sum")]).rename_columns([*CELL_COLUMNS, "n"])


@dataclass
class LogCounts:
    """A partitioned log's cell counts, added up, and how they were had."""

    cells: pa.Table
    partitions: int
    impressions: int
    seconds: float


def log_counts(
    log: str | Path,
    *,
    top_n: int = 10,
    ray: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> LogCounts:
    """The cell counts of every partition of ``log`` added up: one partition after another in this
    process (``ray`` None), or each partition a task of a Ray Data job on the cluster ``ray``
    ("local": a new one here; "auto", ``HOST:PORT``, ``ray://HOST:10001``: an existing one;
    ``ray_cluster.connect``), the sums by Ray Data's group-by."""
    t0 = time.perf_counter()
    parts = partitions(log)
    say = progress or (lambda _: None)
    if ray is None:
        tables = []
        for i, p in enumerate(parts, 1):
            tables.append(cell_counts(read_sessions(p, top_n=top_n)))
            say(f"partition {i}/{len(parts)} counted ({p.name})")
        cells = _add_up(pa.concat_tables(tables)) if tables else _empty()
    else:
        cells = _ray_counts(parts, top_n, ray, say)
    cells = cells.sort_by([(c, "ascending") for c in CELL_COLUMNS])
    impressions = int(pc.sum(pc.filter(cells["n"], pc.equal(cells["rank"], 1))).as_py() or 0)
    return LogCounts(cells, len(parts), impressions, time.perf_counter() - t0)


def _empty() -> pa.Table:
    return pa.table(
        {
            "query": pa.array([], pa.string()),
            "doc": pa.array([], pa.string()),
            "rank": pa.array([], pa.int16()),
            "prev": pa.array([], pa.int16()),
            "clicked": pa.array([], pa.bool_()),
            "n": pa.array([], pa.int64()),
        }
    )


def _ray_counts(parts: Sequence[Path], top_n: int, address: str, say: Callable[[str], None]) -> pa.Table:
    import ray
    import ray.data

    from ..ray_cluster import connect

    started = connect(address)
    try:
        ds = ray.data.from_items([{"path": str(p.resolve())} for p in parts], override_num_blocks=len(parts))

        def count(batch: dict[str, Any]) -> pa.Table:
            return pa.concat_tables([cell_counts(read_sessions(p, top_n=top_n)) for p in batch["path"]])

        counted = ds.map_batches(count, batch_size=1, batch_format="numpy")
        # as many hash partitions as the cluster has CPUs: Ray Data's default (200) costs more in
        # shuffle tasks than a small cluster sums in them
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        summed = counted.groupby(list(CELL_COLUMNS), num_partitions=cpus).sum("n")
        say(f"{len(parts)} partitions: counting and adding up on Ray Data")
        table = pa.concat_tables([ray.get(r) for r in summed.to_arrow_refs()])
        return table.rename_columns([*CELL_COLUMNS, "n"]) if len(table.column_names) == 6 else _empty()
    finally:
        if started:
            ray.shutdown()


@dataclass
class ClickFit:
    """A click model fitted to a partitioned log: ``examination`` (PBM: θ per rank; UBM: θ[rank - 1,
    rank of the click above]), ``attractiveness`` per (query, document) pair, the pooled value for
    pairs not seen, the EM's iterations and whether it converged before its cap (and its last gain)."""

    model: str
    positions: int
    examination: np.ndarray
    pairs: pa.Table  # query, doc, attractiveness
    pooled: float
    iterations: int
    converged: bool = True
    last_change: float = float("nan")

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "positions": self.positions,
            "examination": np.round(self.examination, 9).tolist(),
            "pairs": self.pairs.num_rows,
            "pooled_attractiveness": round(self.pooled, 9),
            "iterations": self.iterations,
            "converged": self.converged,
            "last_change": self.last_change if np.isfinite(self.last_change) else None,
        }


def fit(cells: pa.Table, model: str = "pbm", *, positions: int = 10, **params: Any) -> ClickFit:
    """``model`` ("pbm" or "ubm", ``clicks.models``' with ``params``: ``prior``, ``max_iter``, ...)
    fitted by EM to a log's added-up cell counts: the fit ``model.fit(read_sessions(whole log))``
    gives (the same pairs, in the order of their query and document, and the same EM)."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    if not cells.num_rows:
        raise ValueError("the click log has no impressions")
    m = MODELS[model](**params)
    m.positions = positions
    pairs = (
        cells.select(["query", "doc"])
        .group_by(["query", "doc"])
        .aggregate([])
        .sort_by([("query", "ascending"), ("doc", "ascending")])
    )
    key = pc.binary_join_element_wise(cells["query"], cells["doc"], "\x00")
    pair = pc.index_in(key, value_set=pc.binary_join_element_wise(pairs["query"], pairs["doc"], "\x00"))
    pair_np = pair.to_numpy(zero_copy_only=False).astype(np.int64)
    rank = cells["rank"].to_numpy().astype(np.int64) - 1
    prev = cells["prev"].to_numpy().astype(np.int64)
    exam = rank if model == "pbm" else rank * (positions + 1) + prev
    code = (pair_np * m.n_exam(positions) + exam) * 2 + cells["clicked"].to_numpy(zero_copy_only=False)
    uniq, inverse = np.unique(code, return_inverse=True)
    count = np.bincount(inverse, cells["n"].to_numpy().astype(np.float64), minlength=len(uniq))
    m.fit_cells(uniq, count, pairs.num_rows)
    theta = m.theta.reshape(positions, positions + 1) if model == "ubm" else m.theta
    return ClickFit(
        model,
        positions,
        theta,
        pairs.append_column("attractiveness", pa.array(m.alpha[:-1])),
        float(m.alpha[-1]),
        m.iterations,
        m.converged,
        m.last_change,
    )


def labels(
    cells: pa.Table,
    *,
    propensities: Sequence[float] | np.ndarray | None = None,
    levels: int = 5,
    max_weight: float = 10.0,
    min_impressions: int = 1,
) -> pa.Table:
    """Per shown (query, document) pair of the log: ``impressions``, ``clicks``, ``credit`` (the
    clicks, each weighted min(θ_1 / θ_r, ``max_weight``) with relative ``propensities``; None: 1),
    ``rate`` (credit / impressions, at most 1), ``grade`` (0..``levels`` − 1, equal bins of the rate)
    and ``rank`` (the rank it was shown at most often, the lowest of ties): ``click_judgments``'
    labels and ``click_pairs``' clicks. Pairs shown fewer than ``min_impressions`` times are left out."""
    if not 2 <= levels <= 31:
        raise ValueError(f"levels must be in 2..31 (LightGBM's lambdarank labels), got {levels}")
    if max_weight < 1:
        raise ValueError(f"max_weight must be >= 1, got {max_weight}")
    rank = cells["rank"].to_numpy().astype(np.int64)
    n = cells["n"].to_numpy().astype(np.float64)
    clicked = cells["clicked"].to_numpy(zero_copy_only=False)
    weight = np.ones(len(rank))
    if propensities is not None:
        p = np.asarray(list(propensities), dtype=np.float64)
        if len(p) < int(rank.max(initial=0)) or not np.all(p > 0):
            raise ValueError(f"propensities: one value > 0 per rank 1..{int(rank.max(initial=0))} is needed")
        weight = np.minimum(1.0 / (p[rank - 1] / p[0]), max_weight)
    t = cells.select(["query", "doc", "rank"]).append_column("n", pa.array(n))
    t = t.append_column("c", pa.array(np.where(clicked, n, 0.0)))
    t = t.append_column("w", pa.array(np.where(clicked, n * weight, 0.0)))
    per_rank = t.group_by(["query", "doc", "rank"]).aggregate([("n", "sum")])
    per_pair = t.group_by(["query", "doc"]).aggregate([("n", "sum"), ("c", "sum"), ("w", "sum")])
    # each pair's most frequent rank (ties: the lowest)
    best = per_rank.sort_by(
        [("query", "ascending"), ("doc", "ascending"), ("n_sum", "descending"), ("rank", "ascending")]
    )
    key = pc.binary_join_element_wise(best["query"], best["doc"], "\x00").to_numpy(zero_copy_only=False)
    first = np.r_[True, key[1:] != key[:-1]]
    modal = best.filter(pa.array(first)).select(["query", "doc", "rank"])
    out = per_pair.join(modal, ["query", "doc"]).sort_by([("query", "ascending"), ("doc", "ascending")])
    shown = out["n_sum"].to_numpy()
    credit = out["w_sum"].to_numpy()
    rate = np.minimum(credit / shown, 1.0)
    grade = np.minimum(np.floor(rate * levels), levels - 1).astype(np.int16)
    table = pa.table(
        {
            "query": out["query"],
            "doc": out["doc"],
            "impressions": pa.array(shown.astype(np.int64)),
            "clicks": pa.array(out["c_sum"].to_numpy().astype(np.int64)),
            "credit": pa.array(credit),
            "rate": pa.array(rate),
            "grade": pa.array(grade),
            "rank": out["rank"].cast(pa.int16()),
        }
    )
    return table.filter(pc.greater_equal(table["impressions"], min_impressions))


def write_labels(table: pa.Table, out: str | Path) -> Path:
    """``labels``' table as one Parquet file at ``out``, written whole or not at all."""
    with atomic_write(out, binary=True) as f:
        pq.write_table(table, f)
    return Path(out)


__all__ = [
    "CELL_COLUMNS",
    "ClickFit",
    "LogCounts",
    "cell_counts",
    "fit",
    "labels",
    "log_counts",
    "partitions",
    "write_labels",
]
