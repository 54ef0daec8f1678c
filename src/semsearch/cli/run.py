"""``semsearch run`` and ``semsearch evaluate``: rank queries into a TREC run, score runs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

if TYPE_CHECKING:
    from ..data import Fields

from .common import (
    app,
    err,
    guard,
    named_model,
    out,
)


@app.command("run")
@guard
def run_cmd(
    model: Annotated[
        str, typer.Option(help="Registered model name (bm25, ulm, tfidf, random, ...) or a saved model directory.")
    ],
    data: Annotated[str, typer.Option(help="BEIR-layout data set: a name under the data root or a folder.")],
    out_path: Annotated[Path, typer.Option("--out", help="TREC run file to write.")],
    queries: Annotated[
        Path | None,
        typer.Option(
            help="Queries file (BEIR queries.jsonl or id<TAB>text); default: the data set's queries of --split."
        ),
    ] = None,
    split: Annotated[str, typer.Option(help="Qrels split whose queries (and judged documents) to use.")] = "test",
    candidates: Annotated[
        str,
        typer.Option(
            help="'judged' (the split's judged documents), 'full' (whole collection), or a TREC run file to re-rank."
        ),
    ] = "full",
    k: Annotated[int, typer.Option(help="Documents per query: retrieved (full) or kept from the run file.")] = 1000,
    param: Annotated[
        list[str], typer.Option("--param", help="Model parameter NAME=VALUE (repeatable), e.g. k1=1.2.")
    ] = [],
    analyzer: Annotated[str | None, typer.Option(help="Lexical models: paper (default), english, cjk or auto.")] = None,
    fields: Annotated[str, typer.Option(help="Document fields: title+text, title or text.")] = "title+text",
    skip_bad_lines: Annotated[
        bool, typer.Option(help="Skip (and count) malformed input lines instead of stopping.")
    ] = False,
    correct_queries: Annotated[
        bool, typer.Option(help="Spell-correct the queries against the collection's words first (text.SpellCorrector).")
    ] = False,
) -> None:
    """Rank queries against a collection with any model and write a TREC run."""
    from ..data import load_queries, open_dataset, query_pools, ranked, read_run, write_run
    from ..models import LexicalModel, rank

    ds = open_dataset(data, skip_bad_lines=skip_bad_lines)
    if queries is not None:
        qs = load_queries(queries, skip_bad_lines=skip_bad_lines)
    else:
        all_q = ds.queries()
        qs = {q: all_q[q] for q in ds.qrels(split)} if split in ds.splits else all_q
    m = named_model(model, param, analyzer)
    corpus = ds.corpus()
    texts = corpus.joined(cast("Fields", fields))  # join_fields refuses other values
    if correct_queries:
        from ..text import SpellCorrector

        fixed = SpellCorrector.fit(texts).correct_all(qs)
        err.print(
            f"corrected the spelling of {sum(fixed[q] != qs[q] for q in qs):,} of {len(qs):,} queries", highlight=False
        )
        qs = fixed
    start = time.perf_counter()
    if not (isinstance(m, LexicalModel) and m.indexed and list(m.doc_ids) == corpus.ids):
        m.index(corpus.ids, texts)
    if isinstance(m, LexicalModel) and getattr(m.p, "stats", None) == "exclude-query-pool":
        m.use_pools(query_pools(ds, qs))
    if candidates == "full":
        run = rank(m, qs, k=k, progress="retrieving")
    elif candidates == "judged":
        qrels = ds.qrels(split, check=True)
        run = rank(m, qs, {q: list(d) for q, d in qrels.items()}, progress="re-ranking judged")
    else:
        given = read_run(candidates, skip_bad_lines=skip_bad_lines)
        cands = {q: [d for d, _ in ranked(given.get(q, {}))[:k]] for q in qs}
        run = rank(m, qs, cands, progress="re-ranking run")
    write_run(run, out_path, tag=m.name)
    err.print(
        f"wrote {out_path}: {len(run)} queries, {sum(map(len, run.values()))} lines, "
        f"{time.perf_counter() - start:.1f} s",
        highlight=False,
    )


@app.command("evaluate")
@guard
def evaluate_cmd(
    runs: Annotated[
        list[Path], typer.Argument(help="TREC run files; the first is the baseline unless --baseline is given.")
    ],
    qrels: Annotated[Path, typer.Option(help="Qrels file (BEIR TSV or TREC 4-column).")],
    metrics: Annotated[
        str, typer.Option(help="Comma-separated metrics: ndcg@k, recall@k, p@k, mrr, map, ...")
    ] = "ndcg@1,ndcg@3,ndcg@10",
    gain: Annotated[str, typer.Option(help="NDCG gain: 'exp' (2^g-1, the papers) or 'linear' (trec_eval).")] = "exp",
    query_set: Annotated[
        str,
        typer.Option(
            "--queries", help="'judged' (every query with a relevant doc) or 'run' (trec_eval: queries in the run)."
        ),
    ] = "judged",
    rel_threshold: Annotated[int, typer.Option(help="Lowest grade that counts as relevant for binary metrics.")] = 1,
    baseline: Annotated[
        list[str], typer.Option("--baseline", help="Run(s) to mark significant improvements over (file name stem).")
    ] = [],
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the table as JSON.")] = None,
) -> None:
    """Score runs against qrels; one table with paired t-test markers."""
    from ..data import load_qrels, read_run
    from ..evaluation import ResultTable, evaluate

    qr = load_qrels(qrels)
    labels = [r.stem for r in runs]
    if len(set(labels)) != len(labels):
        raise ValueError("run files must have distinct names")
    table = ResultTable(baselines=baseline or labels[:1])
    ms = [m.strip() for m in metrics.split(",") if m.strip()]
    for label, path in zip(labels, runs, strict=True):
        table.add(label, evaluate(read_run(path), qr, ms, gain=gain, queries=query_set, rel_threshold=rel_threshold))
    out.print(table.to_markdown(columns=ms), highlight=False)
    if json_out:
        from ..data.files import write_json

        write_json(json_out, table.to_json())
