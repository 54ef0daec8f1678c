"""Per-query pools: the documents a pooled corpus (e.g. TREC DL's texts, the union of the runs'
and the judges' documents) holds because of each query. Lexical models can leave a query's own
pool out of its background statistics (``stats = "exclude-query-pool"``)."""

from __future__ import annotations

from collections.abc import Mapping

from ..types import Run
from .beir import BeirDataset
from .trec import read_run


def query_pools(
    dataset: BeirDataset, queries: Mapping[str, str] | None = None, *, runs: Mapping[str, Run] | None = None
) -> dict[str, set[str]]:
    """Per query id, every document that one of the data set's runs retrieved or one of its
    splits judged for it; with ``queries`` (id -> text), keyed by query text instead (queries of
    equal text share one pool) and limited to those queries. ``runs``: already read runs by name."""
    pools: dict[str, set[str]] = {}
    for name, path in dataset.runs.items():
        run = runs[name] if runs is not None and name in runs else read_run(path)
        for q, docs in run.items():
            pools.setdefault(q, set()).update(docs)
    for split in dataset.splits:
        for q, judged in dataset.qrels(split).items():
            pools.setdefault(q, set()).update(judged)
    if queries is None:
        return pools
    by_text: dict[str, set[str]] = {}
    for q, text in queries.items():
        if q in pools:
            by_text.setdefault(text, set()).update(pools[q])
    return by_text
