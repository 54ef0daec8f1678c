"""``semsearch index build`` / ``index retrain`` / ``index reindex`` / ``index merge`` / ``index
from-shards`` and ``semsearch search``: build, retrain, reindex, merge and query bundles."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ..params import needs
from .common import (
    PLAIN_HELP,
    app,
    err,
    guard,
    out,
    parse_params,
    vector_params,
)

index_app = typer.Typer(help="Build saved search indexes.", no_args_is_help=True, **PLAIN_HELP)
app.add_typer(index_app, name="index")


# index build's flags, in --help order (BuildRequest, cli/build.py, checks them together)
BuildDataOpt = Annotated[
    str,
    typer.Option(
        help="Documents: a BEIR-layout data set (name or folder), a TSV file of id<TAB>title[<TAB>text] lines, "
        "or a table: CSV/TSV with a header, JSON lines or Parquet (see --id, --fields, --facets, --numeric)."
    ),
]
BuildOutDirOpt = Annotated[Path, typer.Option("--out", help="Bundle directory to create (replaced atomically).")]
BuildModelsOpt = Annotated[
    str,
    typer.Option(
        "--models",
        "--model",
        help="Comma-separated models: at most one lexical (bm25, ...) and any saved neural encoders.",
    ),
]
BuildParamOpt = Annotated[list[str], typer.Option("--param", help="Lexical model parameter NAME=VALUE (repeatable).")]
BuildAnalyzerOpt = Annotated[str | None, typer.Option(help="Lexical models: paper (default), english, cjk or auto.")]
BuildFieldsOpt = Annotated[
    str,
    typer.Option(
        help="Document fields searched: title+text, title or text; for a table, its columns, comma-separated "
        "(the first is the hit's title, the others joined its text)."
    ),
]
BuildIdColumnOpt = Annotated[
    str | None,
    typer.Option("--id", help="Table: the id column (default: one named id, _id, doc_id, ...)."),
]
BuildFacetsOpt = Annotated[
    str | None, typer.Option(help="Table: keyword columns, comma-separated, stored with each document.")
]
BuildNumericOpt = Annotated[
    str | None, typer.Option(help="Table: number columns (range fields), comma-separated, stored typed.")
]
BuildMaxRecordBytesOpt = Annotated[
    int | None,
    typer.Option(
        help="A file as --data: the longest line (record) read, in bytes (default 1 MiB); a longer one is refused."
    ),
]
BuildRankerOpt = Annotated[
    Path | None,
    typer.Option(
        help="Saved ranker directory to include (optional); 'portable': the packaged ranker learnt on Home "
        "Depot that re-ranks any collection without judgments (needs bm25 and all-MiniLM-L6-v2; docs/serving.md)."
    ),
]
BuildTrainRankerOpt = Annotated[
    bool,
    typer.Option(
        "--train-ranker",
        help="Train a stage-2 LambdaMART ranker on stage 1's hits for the train queries (see docs/serving.md).",
    ),
]
BuildRankerParamOpt = Annotated[
    list[str],
    typer.Option(
        "--ranker-param",
        help="--train-ranker: ranker parameter NAME=VALUE (repeatable), e.g. stage_depths=[[100,100]].",
    ),
]
BuildClicksOpt = Annotated[
    Path | None,
    typer.Option(
        "--clicks",
        help="--train-ranker: learn from this event log directory's clicks instead of judgments, position-"
        "debiased (--ranker-param debias=lightgbm, the default, ipw or none; see docs/training.md).",
    ),
]
BuildVectorIndexOpt = Annotated[
    str,
    typer.Option(
        "--vector-index",
        help="Vector index kind: flat, hnsw, hnswsq (HNSW over 8-bit codes, hits re-scored exactly) or ivfpq.",
    ),
]
BuildVectorParamOpt = Annotated[
    list[str],
    typer.Option(
        "--vector-param",
        help="Vector index parameter NAME=VALUE (repeatable, integers), e.g. efSearch=64 (see docs/serving.md).",
    ),
]
BuildEncodedOpt = Annotated[
    list[Path],
    typer.Option(
        "--encoded",
        help="The documents' vectors from 'semsearch encode --shard I/N' or '--ray N' (each part's .npy, all N "
        "parts of one encoding; repeatable): that encoder is not run again on the documents they hold.",
    ),
]
BuildShardsOpt = Annotated[
    int,
    typer.Option(
        "--shards",
        min=1,
        help="Write a sharded bundle of this many shards (served over several processes or machines: "
        "docs/scaling.md); 1: a plain bundle.",
    ),
]
BuildStoreOpt = Annotated[
    str,
    typer.Option(help="Vector store: faiss or postgres (PostgreSQL + pgvector, HNSW; the faiss index is kept too)."),
]
BuildPgDataOpt = Annotated[
    Path | None,
    typer.Option(
        help="postgres store: the embedded server's data (default BUNDLE/../.semsearch-pg; or $SEMSEARCH_PG_DSN)."
    ),
]
BuildSkipBadLinesOpt = Annotated[bool, typer.Option(help="Skip (and count) malformed input lines instead of stopping.")]
BuildVectorCacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--vector-cache",
        help="Directory keeping document vectors between builds, so a rebuild does not encode again.",
    ),
]
BuildOnnxOpt = Annotated[
    str,
    typer.Option(
        "--onnx",
        help="Transformer encoders' inference: fp32 or int8 through ONNX Runtime, or off (torch).",
    ),
]
BuildRescorerOpt = Annotated[
    Path | None,
    typer.Option(
        "--rescorer",
        help="Stage 3: a trained cross-encoder directory kept to re-score the first hits under serve --rescore.",
    ),
]
BuildRescoreDepthOpt = Annotated[
    int, typer.Option("--rescore-depth", help="--rescorer: how many of the ranked hits it re-scores.")
]
BuildRescoreWeightOpt = Annotated[
    float | None,
    typer.Option(
        "--rescore-weight",
        help="--rescorer: weight W in z(ranker) + W * z(cross-encoder) (default 1; inf: its order alone).",
    ),
]
BuildRescorerOnnxOpt = Annotated[
    str | None,
    typer.Option(
        "--rescorer-onnx",
        help="--rescorer: its inference, fp32, int8 or off as --onnx (default: --onnx's; see docs/serving.md).",
    ),
]
BuildCorrectQueriesOpt = Annotated[
    bool,
    typer.Option(help="Keep a spelling corrector of the documents' words; the service corrects queries with it."),
]


@index_app.command("build")
@guard
def index_build(
    data: BuildDataOpt,
    out_dir: BuildOutDirOpt,
    models: BuildModelsOpt = "bm25",
    param: BuildParamOpt = [],
    analyzer: BuildAnalyzerOpt = None,
    fields: BuildFieldsOpt = "title+text",
    id_column: BuildIdColumnOpt = None,
    facets: BuildFacetsOpt = None,
    numeric: BuildNumericOpt = None,
    max_record_bytes: BuildMaxRecordBytesOpt = None,
    ranker: BuildRankerOpt = None,
    train_ranker: BuildTrainRankerOpt = False,
    ranker_param: BuildRankerParamOpt = [],
    clicks: BuildClicksOpt = None,
    vector_index: BuildVectorIndexOpt = "flat",
    vector_param: BuildVectorParamOpt = [],
    encoded: BuildEncodedOpt = [],
    shards: BuildShardsOpt = 1,
    store: BuildStoreOpt = "faiss",
    pg_data: BuildPgDataOpt = None,
    skip_bad_lines: BuildSkipBadLinesOpt = False,
    vector_cache: BuildVectorCacheOpt = None,
    onnx: BuildOnnxOpt = "fp32",
    rescorer: BuildRescorerOpt = None,
    rescore_depth: BuildRescoreDepthOpt = 10,
    rescore_weight: BuildRescoreWeightOpt = None,
    rescorer_onnx: BuildRescorerOnnxOpt = None,
    correct_queries: BuildCorrectQueriesOpt = True,
) -> None:
    """Build a search bundle (documents, lexical index, one vector index per neural model, manifest with checksums)."""
    from .build import BuildRequest, build

    request = BuildRequest(
        data=data,
        out_dir=out_dir,
        models=models,
        param=param,
        analyzer=analyzer,
        fields=fields,
        id_column=id_column,
        facets=facets,
        numeric=numeric,
        max_record_bytes=max_record_bytes,
        ranker=ranker,
        train_ranker=train_ranker,
        ranker_param=ranker_param,
        clicks=clicks,
        vector_index=vector_index,
        vector_param=vector_param,
        encoded=encoded,
        shards=shards,
        store=store,
        pg_data=pg_data,
        skip_bad_lines=skip_bad_lines,
        vector_cache=vector_cache,
        onnx=onnx,
        rescorer=rescorer,
        rescore_depth=rescore_depth,
        rescore_weight=rescore_weight,
        rescorer_onnx=rescorer_onnx,
        correct_queries=correct_queries,
    )
    build(request)


@index_app.command("shard")
@guard
def index_shard(
    bundle: Annotated[Path, typer.Argument(help="A built bundle (faiss store).")],
    out_dir: Annotated[Path, typer.Option("--out", help="The sharded bundle's directory (replaced atomically).")],
    shards: Annotated[int, typer.Option("--shards", min=1, help="How many shards (contiguous ranges of documents).")],
) -> None:
    """Split a built bundle into a sharded bundle: N shard folders (documents, lexical postings with the
    collection's statistics, vectors with the shared quantizers, ranker features) and a coordinator
    folder (encoders, ranker booster, spelling); searched through them it answers as the bundle does."""
    from ..index.bundle.shard import split_bundle

    start = time.perf_counter()
    path = split_bundle(bundle, out_dir, shards)
    err.print(
        f"sharded bundle ({shards} shards) written to {path} in {time.perf_counter() - start:.1f} s", highlight=False
    )


@index_app.command("retrain")
@guard
def index_retrain(
    bundle: Annotated[
        Path, typer.Argument(help="A built bundle (faiss store) whose stage 1 the new ranker learns from.")
    ],
    out_dir: Annotated[
        Path, typer.Option("--out", help="The new bundle's directory (replaced atomically; may be BUNDLE itself).")
    ],
    data: Annotated[
        str | None,
        typer.Option(help="Learn from this data set's train judgments (default: the data set BUNDLE was built from)."),
    ] = None,
    clicks: Annotated[
        Path | None,
        typer.Option(
            "--clicks",
            help="Learn from this event log directory's clicks instead of judgments, position-debiased "
            "(--ranker-param debias=lightgbm, the default, ipw or none; see docs/clicks.md).",
        ),
    ] = None,
    ranker_param: Annotated[
        list[str],
        typer.Option("--ranker-param", help="Ranker parameter NAME=VALUE (repeatable), as index build's."),
    ] = [],
) -> None:
    """Train a new stage-2 ranker on a built bundle's stage 1 and write the bundle with it: nothing is
    indexed or encoded again, every other file is shared with BUNDLE (hard links)."""
    from ..index.bundle import Bundle
    from ..index.bundle.retrain import retrain_ranker
    from ..training.ranker import stage_ranker_trainer

    start = time.perf_counter()
    if clicks is not None and data is not None:
        raise ValueError("give --data (judgments) or --clicks (an event log), not both")
    b = Bundle.load(bundle, result_cache=0)
    corpus, manifest = b.corpus, b.manifest
    b.close()
    source = data if data is not None else manifest.get("dataset")
    if clicks is None and not source:
        raise ValueError(f"{bundle} does not name the data set it was built from: give --data or --clicks")
    trainer = stage_ranker_trainer(
        source or "", corpus, manifest.get("fields", "title+text"), parse_params(ranker_param), clicks=clicks
    )
    learnt = f"clicks of {clicks}" if clicks is not None else f"judgments of {source}"
    path = retrain_ranker(bundle, out_dir, trainer, note={"learnt_from": learnt})
    err.print(
        f"bundle written to {path} in {time.perf_counter() - start:.1f} s (ranker from {learnt})", highlight=False
    )


@index_app.command("reindex")
@guard
def index_reindex(
    bundle: Annotated[Path, typer.Argument(help="A built bundle (faiss store) whose models index the documents.")],
    data: Annotated[Path, typer.Option("--data", help="The documents: a corpus.jsonl (_id, title, text).")],
    out_dir: Annotated[
        Path, typer.Option("--out", help="The new bundle's directory (replaced atomically; may be BUNDLE itself).")
    ],
    reuse: Annotated[
        bool,
        typer.Option(help="Take the vectors of documents whose text is unchanged from BUNDLE (else encode all)."),
    ] = True,
    vector_index: Annotated[
        str | None,
        typer.Option(
            "--vector-index", help="Another vector index kind (flat, hnsw, hnswsq, ivfpq; default: BUNDLE's)."
        ),
    ] = None,
    vector_param: Annotated[
        list[str], typer.Option("--vector-param", help="Its parameter NAME=VALUE (repeatable, integers).")
    ] = [],
) -> None:
    """Index other documents with a bundle's models (the full rebuild a served bundle's changes
    are merged into): lexical index, ranker features and spelling refitted, vector index rebuilt;
    the ranker, depths and index settings kept."""
    from ..data import load_corpus
    from ..index.bundle.reindex import reindex

    start = time.perf_counter()
    corpus = load_corpus(data, stored_fields=True)
    needs("--vector-index", vector_index is not None, {"--vector-param": bool(vector_param)})
    params = vector_params(vector_index, vector_param) if vector_index is not None else None
    path = reindex(bundle, corpus, out_dir, reuse=reuse, vector_index=vector_index, index_params=params)
    err.print(
        f"bundle written to {path} in {time.perf_counter() - start:.1f} s ({len(corpus):,} documents)", highlight=False
    )


@index_app.command("merge")
@guard
def index_merge(
    bundle: Annotated[Path, typer.Argument(help="A bundle served with --allow-writes.")],
    changes: Annotated[
        Path | None,
        typer.Option("--changes", metavar="DIR", help="Its change log's folder (default: BUNDLE.changes)."),
    ] = None,
) -> None:
    """Merge a bundle's change log into it (what `serve --merge-at` does in the background): the
    bundle rewritten over its current documents, the log rotated; a running service picks it up."""
    from ..index.bundle import Bundle
    from ..index.live import LiveIndex

    start = time.perf_counter()
    live = LiveIndex(Bundle.load(bundle, result_cache=0), changes, writes=True)
    try:
        st = live.state
        n, seq = len(st.docs) + len(st.dead), st.seq
        live.merge()
    finally:
        live.close()
    err.print(
        f"merged {n:,} changed documents (log up to {seq}) into {bundle} in {time.perf_counter() - start:.1f} s",
        highlight=False,
    )


@index_app.command("from-shards")
@guard
def index_from_shards_cmd(
    shards: Annotated[
        list[Path],
        typer.Argument(
            help="Encoded shards: the .npy files `semsearch encode --shard I/N` wrote (their .json beside them)."
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", help="Directory of the sharded vector index (one sub-index per shard).")
    ],
    kind: Annotated[str, typer.Option(help="flat, hnsw, hnswsq or ivfpq.")] = "ivfpq",
    metric: Annotated[str, typer.Option(help="ip, cosine or l2.")] = "cosine",
    train_sample: Annotated[
        int, typer.Option(help="IVF-PQ: vectors (from the first shards) the shared quantizers are trained on.")
    ] = 100_000,
    param: Annotated[
        list[str],
        typer.Option("--param", help="Index parameter NAME=VALUE (repeatable), e.g. nlist=1024, m=48, nprobe=64."),
    ] = [],
    one_index: Annotated[
        bool,
        typer.Option(
            "--one-index",
            help="Build one index of all the shards (one machine) instead of one sub-index per shard.",
        ),
    ] = False,
) -> None:
    """Build one sharded vector index from encoded shards: IVF-PQ's quantizers trained once and
    shared, one sub-index per shard, searched together with the unsharded index's answers
    (``--one-index``: all shards in one index)."""
    from ..index.sharded import ShardedVectorIndex, one_index_from_encoded

    params = parse_params(param)
    if one_index:
        one = one_index_from_encoded(shards, kind=kind, metric=metric, train_sample=train_sample, **params)
        one.save(out)
        err.print(f"wrote {out}: {len(one):,} vectors in one index ({kind}, {metric})", highlight=False)
        return
    ix = ShardedVectorIndex.from_encoded(shards, kind=kind, metric=metric, train_sample=train_sample, **params)
    ix.save(out)
    err.print(f"wrote {out}: {len(ix):,} vectors in {len(ix.shards)} shards ({kind}, {metric})", highlight=False)


@app.command("search")
@guard
def search_cmd(
    query: Annotated[str, typer.Argument(help="The query text.")],
    index: Annotated[Path, typer.Option(help="Bundle directory from `semsearch index build`.")],
    k: Annotated[int, typer.Option("-k", "--k", help="Number of results.")] = 10,
    merge_by: Annotated[
        str, typer.Option("--merge", help="union (lexical order, semantic-only after), rrf or interpolate.")
    ] = "union",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines instead of a table.")] = False,
    filters: Annotated[
        list[str],
        typer.Option(
            "--filter",
            help="Filter on a facet or numeric field (repeatable): field:value, field:[lo,hi] (* for an open "
            "end) or field:number; one field's expressions OR'ed, different fields AND'ed (docs/filters.md).",
        ),
    ] = [],
) -> None:
    """Search a bundle; prints the top-k documents with their source (LEXICAL, SEMANTIC, BOTH)."""
    from ..index import Bundle

    if not query.strip():
        raise ValueError("empty query")
    start = time.perf_counter()
    bundle = Bundle.load(index)
    loaded = time.perf_counter()
    flt = bundle.filters.parse(filters)  # (a FilterError names the bad expression)
    result = bundle.search(query, k, merge_by=merge_by, filters=flt)
    bundle.close()
    rows = bundle.hits(result)
    if as_json:
        for h, hh in zip(rows, result.hits, strict=True):
            print(json.dumps({**h.__dict__, "source": hh.sources.name}, ensure_ascii=False))
        return
    table = Table("rank", "doc id", "score", "source", "title / text", title=f"{query!r}: {len(rows)} hits")
    for h, hh in zip(rows, result.hits, strict=True):
        shown = h.title or h.text
        table.add_row(
            str(h.rank),
            h.doc_id,
            f"{h.score:.4f}",
            str(hh.sources.name),
            shown[:100] + ("…" if len(shown) > 100 else ""),
        )
    out.print(table)
    err.print(f"load {loaded - start:.2f} s, search {result.timing['total_ms']:.1f} ms", highlight=False)
