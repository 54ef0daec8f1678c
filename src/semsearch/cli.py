"""The ``semsearch`` command: parses arguments and calls the layers; nothing else lives here.

Exit codes: 0 success; 1 a reproduced figure fell outside its expected range; 2 bad input
(unreadable data, unknown model, wrong option)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from .evaluation import QueryFold

app = typer.Typer(
    help="Learn, measure and serve semantic search models against lexical baselines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(
    help="Inspect the data sets under $SEMSEARCH_DATA (default ../shared/data).", no_args_is_help=True
)
index_app = typer.Typer(help="Build saved search indexes.", no_args_is_help=True)
app.add_typer(data_app, name="data")
app.add_typer(index_app, name="index")

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2


def _fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(EXIT_BAD_INPUT)


def _guard(fn):  # type: ignore[no-untyped-def]
    """Turn the layers' input errors into one clear line and exit code 2 (no traceback)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        from .experiments import SpecError
        from .index.pgstore import PgStoreError
        from .models import ModelDirError

        try:
            return fn(*args, **kwargs)
        except (
            ValueError,
            FileNotFoundError,
            NotADirectoryError,
            KeyError,
            ModelDirError,
            SpecError,
            PgStoreError,
        ) as e:
            msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            _fail(str(msg))

    return wrapper


def _parse_params(pairs: list[str]) -> dict[str, Any]:
    """NAME=VALUE pairs; VALUE is read as JSON (numbers, lists like [5,10,20], true) or else taken
    as a string (stats=exclude-query-pool): the parameter's type then decides whether it may be one."""
    params: dict[str, Any] = {}
    for p in pairs:
        k, eq, v = p.partition("=")
        if not eq or not k.strip():
            raise ValueError(f"--param {p!r}: expected NAME=VALUE (e.g. k1=1.2), got {p!r}")
        try:
            params[k.strip()] = json.loads(v)
        except json.JSONDecodeError as e:
            if v.strip()[:1] in ("[", "{", '"'):  # meant as JSON but unreadable
                raise ValueError(
                    f"--param {k.strip()}: cannot read {v!r} as JSON ({e.msg} at column {e.colno})"
                ) from None
            params[k.strip()] = v
    return params


def _vector_params(kind: str, pairs: list[str]) -> dict[str, int]:
    """``--vector-param`` pairs for a vector index of ``kind``, checked before anything is encoded:
    known names, integer values (``VectorIndex.check_params``; the rest, e.g. ivfpq's ``m``
    dividing the dimension, once the vectors exist)."""
    from .index import VectorIndex

    params = _parse_params(pairs)
    for k, v in params.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"--vector-param {k}: expected an integer, got {v!r}")
    VectorIndex.check_params(kind, {})  # (an unknown --vector-index is named as such)
    try:
        VectorIndex.check_params(kind, params)
    except ValueError as e:
        raise ValueError(f"--vector-param: {e}") from None
    return params


def _model(name_or_dir: str, param: list[str], analyzer: str | None):  # type: ignore[no-untyped-def]
    """The model named on the command line, with its --param and --analyzer options."""
    from .params import ParamError
    from .plugins import resolve_model

    params = _parse_params(param)
    if analyzer:
        params["analyzer"] = analyzer
    try:
        return resolve_model(name_or_dir, **params)
    except ParamError as e:
        raise ParamError(f"--param: {e}") from None


def _bundle_models(names: list[str], param: list[str], analyzer: str | None) -> list:  # type: ignore[type-arg]
    """``index build``'s models; ``--param`` and ``--analyzer`` go to the lexical one (the neural
    models are saved directories or off-the-shelf kinds)."""
    from .plugins import KINDS

    lexical = [n for n in names if n in KINDS and KINDS[n].family in ("lexical", "termdep")]
    if (param or analyzer) and not lexical:
        raise ValueError("--param and --analyzer set the lexical model's parameters; --models names none")
    return [_model(n, param, analyzer) if n in lexical else _model(n, [], None) for n in names]


ONNX_CHOICES = ("fp32", "int8", "off")


def _needs(owner: str, present: bool, given: dict[str, bool]) -> None:
    """Each option of ``given`` that was given (True) without ``owner`` is refused, naming both
    (checked before any work)."""
    for option, was_given in given.items():
        if was_given and not present:
            raise ValueError(f"{option} needs {owner}")


def _check_onnx(precision: str, option: str = "--onnx") -> None:
    """``--onnx`` (or ``option``): one of ONNX_CHOICES, and onnxruntime importable unless 'off'
    (checked before any work)."""
    from .models import onnxrt

    if precision not in ONNX_CHOICES:
        raise ValueError(f"{option} must be one of {', '.join(ONNX_CHOICES)}, got {precision!r}")
    if precision != "off" and not onnxrt.available():
        raise ValueError(
            f"{option} {precision}: onnxruntime (and onnx) are not installed; pip install onnxruntime onnx, "
            f"or {option} off"
        )


def _onnx_models(models: list, precision: str) -> None:  # type: ignore[type-arg]
    """Transformer models run inference (encoding the collection, and later the service's queries)
    through ONNX Runtime at ``precision``, or in torch with 'off'. A saved model whose folder holds
    an export of that precision keeps it; otherwise its current weights are exported now."""
    from .models.transformer import TransformerModel
    from .progress import note

    for m in models:
        m = getattr(m, "document_encoder", m)  # a static-query model: its teacher encodes the collection
        if not isinstance(m, TransformerModel):
            continue
        if precision == "off":
            m.runner = None
        elif m.runner is None or m.runner.precision != precision:
            start = time.perf_counter()
            meta = m.use_onnx(precision)
            note(
                f"{m.name}: exported to ONNX {precision} in {time.perf_counter() - start:.1f} s "
                f"(cosine to torch {meta['cosine_to_torch']:.6f})"
            )


def _stage_ranker(data: str, corpus: Any, fields: str, raw: list[str], model_dirs: Sequence[str] = ()) -> Any:
    """``index build --train-ranker``: the function that trains a two-stage ranker (``TWO_STAGE``
    with the ``--ranker-param`` changes) on the bundle's stage 1, over the data set's train split,
    choosing depths and trees on its dev split. Parameters are checked here, before any indexing,
    and against ``model_dirs``' held-out folds (``training.held_out``): a ranker meant to learn
    from a fold a model never saw (``train_fold``) must name that fold."""
    from .data import EvalSet, open_dataset
    from .params import ParamError
    from .plugins import create_model
    from .progress import note
    from .ranking.lambdamart import TWO_STAGE
    from .training import held_out, recipe
    from .training.lambdamart import fit_stage_ranker

    if Path(data).is_file():
        raise ValueError(
            "--train-ranker needs a data set with train and dev judgments (a BEIR-layout folder), not a TSV file"
        )
    try:
        kwargs, args = recipe("lambdamart", {**TWO_STAGE, **_parse_params(raw)}, where="--ranker-param")
    except ParamError as e:
        raise ParamError(f"--ranker-param: {e}") from None
    ds = open_dataset(data)
    missing = [s for s in ("train", "dev") if s not in ds.splits]
    if missing:
        raise ValueError(
            f"--train-ranker: data set {data} has no {' or '.join(missing)} judgments (splits: {', '.join(ds.splits) or 'none'})"
        )
    queries = ds.queries()
    train, dev = (EvalSet(queries, {}, ds.qrels(s)) for s in ("train", "dev"))
    fold = args.fold  # (checked by the recipe)
    for d in model_dirs:
        h = held_out(d)
        if h is None or h.get("split") != "train":
            continue
        if fold is None:
            note(
                f"{d} was trained without fold {h['fold']} of the train queries; the ranker learns from all of "
                f"them, the ones it saw too (--ranker-param train_fold={h['fold']}: only the fold it never saw)"
            )
        elif str(fold) != h["fold"]:
            raise ValueError(
                f"--ranker-param train_fold={fold}: {d} was trained without fold {h['fold']} "
                f"of the train queries, not {fold}, so the ranker would learn from queries "
                f"it saw; use train_fold={h['fold']}"
            )
    learn_from = f"all {len(train.qrels):,} train queries"
    if fold is not None:  # only the queries the stage-1 models were trained without
        keep = fold.queries(train.qrels)
        learn_from = f"fold {fold} of the train queries ({len(keep):,} of {len(train.qrels):,})"
        train = EvalSet(queries, {}, {q: train.qrels[q] for q in keep})

    def train_ranker(search: Any) -> tuple[Any, dict[str, Any]]:
        note(f"stage-2 ranker: learning from {learn_from}")
        ranker = create_model("lambdamart", **kwargs)
        ranker.index(corpus.ids, corpus.joined(fields))
        log = fit_stage_ranker(ranker, search, train, dev, args=args)
        return ranker, {**log, "learnt_from": learn_from}

    return train_ranker


# ---------------------------------------------------------------------------------------- data
@data_app.command("list")
@_guard
def data_list() -> None:
    """List the data sets found under the data root."""
    from .data import data_root, list_datasets

    root = data_root()
    names = list_datasets(root)
    if not names:
        _fail(f"no data sets under {root} (set SEMSEARCH_DATA)")
    out.print(f"data root: {root}")
    for n in names:
        out.print(f"  {n}")


@data_app.command("info")
@_guard
def data_info(
    name: Annotated[str, typer.Argument(help="Data set name under the data root, or a folder path.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a summary.")] = False,
) -> None:
    """Documents, queries, splits, grade histograms and runs of one data set."""
    from .data import dataset_info

    info = dataset_info(name)
    if as_json:
        out.print_json(json.dumps(info))
        return
    out.print(json.dumps(info, indent=2, ensure_ascii=False), highlight=False)


# ---------------------------------------------------------------------------------------- run
@app.command("run")
@_guard
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
    analyzer: Annotated[str | None, typer.Option(help="Lexical models: 'paper' (default) or 'english'.")] = None,
    fields: Annotated[str, typer.Option(help="Document fields: title+text, title or text.")] = "title+text",
    skip_bad_lines: Annotated[
        bool, typer.Option(help="Skip (and count) malformed input lines instead of stopping.")
    ] = False,
    correct_queries: Annotated[
        bool, typer.Option(help="Spell-correct the queries against the collection's words first (text.SpellCorrector).")
    ] = False,
) -> None:
    """Rank queries against a collection with any model and write a TREC run."""
    from .data import load_queries, open_dataset, query_pools, ranked, read_run, write_run
    from .models import LexicalModel, rank

    ds = open_dataset(data, skip_bad_lines=skip_bad_lines)
    if queries is not None:
        qs = load_queries(queries, skip_bad_lines=skip_bad_lines)
    else:
        all_q = ds.queries()
        qs = {q: all_q[q] for q in ds.qrels(split)} if split in ds.splits else all_q
    m = _model(model, param, analyzer)
    corpus = ds.corpus()
    texts = corpus.joined(fields)
    if correct_queries:
        from .text import SpellCorrector

        fixed = SpellCorrector.fit(texts).correct_all(qs)
        err.print(
            f"corrected the spelling of {sum(fixed[q] != qs[q] for q in qs):,} of {len(qs):,} queries", highlight=False
        )
        qs = fixed
    start = time.perf_counter()
    if not (isinstance(m, LexicalModel) and m.indexed and list(m.doc_ids) == corpus.ids):
        m.index(corpus.ids, texts)  # type: ignore[arg-type]
    if isinstance(m, LexicalModel) and m.p.stats == "exclude-query-pool":
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


# ---------------------------------------------------------------------------------------- evaluate
@app.command("evaluate")
@_guard
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
    from .data import load_qrels, read_run
    from .evaluation import ResultTable, evaluate

    qr = load_qrels(qrels)
    labels = [r.stem for r in runs]
    if len(set(labels)) != len(labels):
        raise ValueError("run files must have distinct names")
    table = ResultTable(baselines=baseline or labels[:1])
    ms = [m.strip() for m in metrics.split(",") if m.strip()]
    for label, path in zip(labels, runs):
        table.add(label, evaluate(read_run(path), qr, ms, gain=gain, queries=query_set, rel_threshold=rel_threshold))
    out.print(table.to_markdown(columns=ms), highlight=False)
    if json_out:
        from .data._io import write_json

        write_json(json_out, table.to_json())


# ---------------------------------------------------------------------------------------- index / search
@index_app.command("build")
@_guard
def index_build(
    data: Annotated[
        str,
        typer.Option(
            help="Documents: a BEIR-layout data set (a name under the data root or a folder), or a TSV file of id<TAB>title[<TAB>text] lines."
        ),
    ],
    out_dir: Annotated[Path, typer.Option("--out", help="Bundle directory to create (replaced atomically).")],
    models: Annotated[
        str,
        typer.Option(
            "--models",
            "--model",
            help="Comma-separated model names or saved model directories: at most one lexical model (bm25, ...) and any neural encoders (saved DSSM/CLSM/bi-encoder directories).",
        ),
    ] = "bm25",
    param: Annotated[list[str], typer.Option("--param", help="Lexical model parameter NAME=VALUE (repeatable).")] = [],
    analyzer: Annotated[str | None, typer.Option(help="Lexical models: 'paper' (default) or 'english'.")] = None,
    fields: Annotated[str, typer.Option(help="Document fields: title+text, title or text.")] = "title+text",
    ranker: Annotated[Path | None, typer.Option(help="Saved ranker directory to include (optional).")] = None,
    train_ranker: Annotated[
        bool,
        typer.Option(
            "--train-ranker",
            help="Two-stage search: train a LambdaMART ranker on what this bundle's stage 1 (lexical ∪ first neural model) returns for the data set's train queries, stage depths and trees chosen on its dev queries.",
        ),
    ] = False,
    ranker_param: Annotated[
        list[str],
        typer.Option(
            "--ranker-param",
            help="--train-ranker: ranker parameter NAME=VALUE (repeatable), e.g. stage_depths=[[100,100]].",
        ),
    ] = [],
    vector_index: Annotated[
        str,
        typer.Option(
            "--vector-index",
            help="Vector index kind: flat, hnsw, hnswsq (HNSW over 8-bit codes, hits re-scored exactly) or ivfpq.",
        ),
    ] = "flat",
    vector_param: Annotated[
        list[str],
        typer.Option(
            "--vector-param",
            help="Vector index parameter NAME=VALUE (repeatable), an integer, e.g. efSearch=64 (hnsw, hnswsq: M, efConstruction, efSearch; ivfpq: nlist, m, nbits, nprobe, rerank).",
        ),
    ] = [],
    store: Annotated[
        str,
        typer.Option(
            help="Vector store: faiss or postgres (PostgreSQL + pgvector, HNSW; the faiss index is kept too)."
        ),
    ] = "faiss",
    pg_data: Annotated[
        Path | None,
        typer.Option(
            help="postgres store: data directory of the embedded server (default BUNDLE/../.semsearch-pg); $SEMSEARCH_PG_DSN names an existing server instead."
        ),
    ] = None,
    skip_bad_lines: Annotated[
        bool, typer.Option(help="Skip (and count) malformed input lines instead of stopping.")
    ] = False,
    vector_cache: Annotated[
        Path | None,
        typer.Option(
            "--vector-cache",
            help="Directory keeping each neural model's document vectors of this collection between builds (keyed by the document encoder, its weights and the texts): a rebuild, or a static-query model over the same teacher, does not encode the collection again.",
        ),
    ] = None,
    onnx: Annotated[
        str,
        typer.Option(
            "--onnx",
            help="Transformer encoders: inference through ONNX Runtime, 'fp32' (torch's vectors, about 2x faster on a CPU), 'int8' (faster; its quality cost is measured by benchmarks/encode_speed.py), or 'off' (torch). The bundle keeps the export, so the service encodes queries with it.",
        ),
    ] = "fp32",
    rescorer: Annotated[
        Path | None,
        typer.Option(
            "--rescorer",
            help="Stage 3 (optional): a trained cross-encoder directory (semsearch train bert-rel) kept in the bundle to re-score the first --rescore-depth hits; it runs only under `serve --rescore`.",
        ),
    ] = None,
    rescore_depth: Annotated[
        int, typer.Option("--rescore-depth", help="--rescorer: how many of the ranked hits it re-scores.")
    ] = 10,
    rescore_weight: Annotated[
        float | None,
        typer.Option(
            "--rescore-weight",
            help="--rescorer: each re-scored hit's new score is z(ranker's score) + W * z(cross-encoder's score), both standardised over the query's re-scored hits (default 1); inf: the cross-encoder's order alone.",
        ),
    ] = None,
    rescorer_onnx: Annotated[
        str | None,
        typer.Option(
            "--rescorer-onnx",
            help="--rescorer: its inference, fp32, int8 or off as --onnx (default: --onnx's). int8 made stage 3 2.3x as fast on Home Depot at a dev nDCG@10 cost of 0.0035 (README: 'Stage 3').",
        ),
    ] = None,
    correct_queries: Annotated[
        bool,
        typer.Option(
            help="Keep a spelling corrector of the documents' words in the bundle; the service corrects each query with it unless served with --no-correct-queries."
        ),
    ] = True,
) -> None:
    """Build a search bundle (documents, lexical index, one vector index per neural model, manifest with checksums)."""
    from .data import load_corpus, open_dataset
    from .index import build_bundle
    from .index.bundle import RESCORE_WEIGHT
    from .plugins import load_model
    from .ranking.rescore import check_weight

    start = time.perf_counter()
    names = [m.strip() for m in models.split(",") if m.strip()]
    if not names:
        raise ValueError("--models is empty")
    if ranker is not None and train_ranker:
        raise ValueError("give --ranker (a saved ranker) or --train-ranker, not both")
    _needs("--train-ranker", train_ranker, {"--ranker-param": bool(ranker_param)})
    _check_onnx(onnx)
    _needs(
        "--rescorer",
        rescorer is not None,
        {
            "--rescore-depth": rescore_depth != 10,
            "--rescore-weight": rescore_weight is not None,
            "--rescorer-onnx": rescorer_onnx is not None,
        },
    )
    if rescorer_onnx is not None:
        _check_onnx(rescorer_onnx, "--rescorer-onnx")
    weight = check_weight(RESCORE_WEIGHT if rescore_weight is None else rescore_weight, "--rescore-weight")
    index_params = _vector_params(vector_index, vector_param)
    corpus = (
        load_corpus(data, skip_bad_lines=skip_bad_lines)
        if Path(data).is_file()
        else open_dataset(data, skip_bad_lines=skip_bad_lines).corpus()
    )
    # the ranker's parameters and the models' held-out folds are checked before any model is loaded
    trainer = (
        _stage_ranker(data, corpus, fields, ranker_param, [n for n in names if Path(n).is_dir()])
        if train_ranker
        else None
    )
    built = _bundle_models(names, param, analyzer)
    _onnx_models(built, onnx)
    rk = load_model(ranker) if ranker is not None else None
    rs = None
    if rescorer is not None:
        rs = load_model(rescorer)
        _onnx_models([rs], onnx if rescorer_onnx is None else rescorer_onnx)
    path = build_bundle(
        corpus,
        built,
        out_dir,
        ranker=rk,
        train_ranker=trainer,
        dataset=data,
        fields=fields,
        kind=vector_index,
        store=store,
        pg_data=pg_data,
        vector_cache=vector_cache,
        rescorer=rs,
        rescore_depth=rescore_depth,
        rescore_weight=weight,
        index_params=index_params,
        spelling=correct_queries,
    )
    err.print(f"bundle written to {path} in {time.perf_counter() - start:.1f} s", highlight=False)


@index_app.command("from-shards")
@_guard
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
            help="Build one index of all the shards (for one machine: faster to search than N sub-indexes) instead of one sub-index per shard.",
        ),
    ] = False,
) -> None:
    """Build one sharded vector index from encoded shards: IVF-PQ's quantizers trained once and
    shared, one sub-index per shard, searched together with the unsharded index's answers
    (``--one-index``: all shards in one index)."""
    from .index.sharded import ShardedVectorIndex, one_index_from_encoded

    params = _parse_params(param)
    if one_index:
        one = one_index_from_encoded(shards, kind=kind, metric=metric, train_sample=train_sample, **params)
        one.save(out)
        err.print(f"wrote {out}: {len(one):,} vectors in one index ({kind}, {metric})", highlight=False)
        return
    ix = ShardedVectorIndex.from_encoded(shards, kind=kind, metric=metric, train_sample=train_sample, **params)
    ix.save(out)
    err.print(f"wrote {out}: {len(ix):,} vectors in {len(ix.shards)} shards ({kind}, {metric})", highlight=False)


@app.command("search")
@_guard
def search_cmd(
    query: Annotated[str, typer.Argument(help="The query text.")],
    index: Annotated[Path, typer.Option(help="Bundle directory from `semsearch index build`.")],
    k: Annotated[int, typer.Option("-k", "--k", help="Number of results.")] = 10,
    merge_by: Annotated[
        str, typer.Option("--merge", help="union (lexical order, semantic-only after), rrf or interpolate.")
    ] = "union",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines instead of a table.")] = False,
) -> None:
    """Search a bundle; prints the top-k documents with their source (LEXICAL, SEMANTIC, BOTH)."""
    from .index import Bundle

    if not query.strip():
        raise ValueError("empty query")
    start = time.perf_counter()
    bundle = Bundle.load(index)
    loaded = time.perf_counter()
    result = bundle.search(query, k, merge_by=merge_by)
    bundle.close()
    rows = bundle.hits(result)
    if as_json:
        for h, hh in zip(rows, result.hits):
            print(json.dumps({**h.__dict__, "source": hh.sources.name}, ensure_ascii=False))
        return
    table = Table("rank", "doc id", "score", "source", "title / text", title=f"{query!r}: {len(rows)} hits")
    for h, hh in zip(rows, result.hits):
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


@app.command("serve")
@_guard
def serve_cmd(
    bundle: Annotated[Path, typer.Argument(help="Bundle directory from `semsearch index build`.")],
    host: Annotated[
        str,
        typer.Option(
            help="Address to listen on (loopback by default; any other address needs --expose and an API key)."
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8000,
    store: Annotated[
        str | None, typer.Option(help="Vector store: faiss or postgres (default: the bundle's).")
    ] = None,
    workers: Annotated[int, typer.Option(help="Worker processes, each with its own copy of the bundle in memory.")] = 1,
    loop: Annotated[
        str,
        typer.Option(
            help="Event loop: asyncio (default) or uvloop. On make serve's bundle (2 workers, 50 clients, every query new) they are level: uvloop 1,816 req/s, p99 40.6 ms; asyncio 1,828-1,834 req/s, p99 39.5-40.7 ms."
        ),
    ] = "asyncio",
    result_cache: Annotated[
        int | None,
        typer.Option(
            "--result-cache",
            help="Recent distinct searches whose answers each worker keeps (default 2,048; 0: every search runs both stages and the ranker).",
        ),
    ] = None,
    expose: Annotated[
        bool,
        typer.Option(
            "--expose",
            help="Allow a --host other than loopback (needs an API key: $SEMSEARCH_API_KEY or --api-key-file).",
        ),
    ] = False,
    api_key_file: Annotated[
        Path | None,
        typer.Option(
            "--api-key-file",
            help="File holding the API key that /search, /explain and /metrics require in the X-API-Key header (or set $SEMSEARCH_API_KEY; never on the command line).",
        ),
    ] = None,
    rate_limit: Annotated[
        float | None,
        typer.Option(
            "--rate-limit",
            help="Requests a second each client address may send to each worker, with bursts of twice that (429 beyond; default: 20 with --expose, none on loopback; 0: none).",
        ),
    ] = None,
    rescore: Annotated[
        bool,
        typer.Option(
            "--rescore",
            help="Run the bundle's stage-3 cross-encoder (index build --rescorer) on the first hits of every search: off by default, it costs a transformer pass per re-scored hit (README: 'Stage 3').",
        ),
    ] = False,
    rescore_depth: Annotated[
        int | None,
        typer.Option(
            "--rescore-depth",
            help="--rescore: how many hits it re-scores (default: the depth the bundle was built with).",
        ),
    ] = None,
    rescore_weight: Annotated[
        float | None,
        typer.Option(
            "--rescore-weight",
            help="--rescore: the cross-encoder's weight W in each re-scored hit's score, z(ranker) + W * z(cross-encoder) (default: the bundle's, set by index build --rescore-weight); inf: its order alone.",
        ),
    ] = None,
    correct_queries: Annotated[
        bool,
        typer.Option(
            help="Correct each query's spelling against the documents' words before searching (bundles built with a corrector; the answer's corrected_query says what was searched)."
        ),
    ] = True,
) -> None:
    """Serve a bundle over HTTP: /search, /explain, /health, /ready, /metrics, /docs and a search page at /."""
    import os
    import shutil
    import tempfile

    from .index.bundle import CORRECT_ENV, RESCORE_ENV, RESCORE_WEIGHT_ENV, RESULT_CACHE_ENV
    from .ranking.rescore import check_weight
    from .serving.exposure import API_KEY_ENV, RATE_ENV, Exposure, check_key, check_rate, is_loopback, read_key_file

    key = read_key_file(str(api_key_file)) if api_key_file is not None else None
    if key is None and os.environ.get(API_KEY_ENV):
        key = check_key(os.environ[API_KEY_ENV], f"${API_KEY_ENV}")
    if not is_loopback(host):
        if not expose:
            raise ValueError(
                f"--host {host} is not a loopback address: serving beyond this machine needs --expose "
                f"and an API key (${API_KEY_ENV} or --api-key-file)"
            )
        if key is None:
            raise ValueError(f"--expose needs an API key: set ${API_KEY_ENV} or give --api-key-file")
    rate = check_rate(rate_limit if rate_limit is not None else 20.0 if expose else 0.0)
    exposure = Exposure(key, rate)
    if key is not None:
        os.environ[API_KEY_ENV] = key  # for the worker processes (Exposure.from_env)
    os.environ[RATE_ENV] = str(rate)
    if result_cache is not None:
        if result_cache < 0:
            raise ValueError(f"--result-cache must be >= 0, got {result_cache}")
        os.environ[RESULT_CACHE_ENV] = str(result_cache)  # read by each worker's Bundle.load

    _needs(
        "--rescore",
        rescore,
        {"--rescore-depth": rescore_depth is not None, "--rescore-weight": rescore_weight is not None},
    )
    if rescore_depth is not None and rescore_depth < 1:
        raise ValueError(f"--rescore-depth must be >= 1, got {rescore_depth}")
    weight = "" if rescore_weight is None else str(check_weight(rescore_weight, "--rescore-weight"))
    os.environ[RESCORE_ENV] = (
        (str(rescore_depth) if rescore_depth else "on") if rescore else "off"
    )  # each worker's Bundle.load
    os.environ[RESCORE_WEIGHT_ENV] = weight
    os.environ[CORRECT_ENV] = "on" if correct_queries else "off"

    from .serving import create_app
    from .serving.app import BUNDLE_ENV, MULTIPROC_ENV, STORE_ENV
    from .serving.server import listen, reserve, run

    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    if loop not in ("asyncio", "uvloop"):
        raise ValueError(f"--loop must be asyncio or uvloop, got {loop!r}")
    app_ = create_app(bundle, store=store, exposure=exposure)  # loads and verifies the bundle before listening
    sock = (listen if workers == 1 else reserve)(host, port)  # before announcing: a busy port fails here, naming it
    guards = ", ".join(
        [f"API key required ({'file' if api_key_file else '$' + API_KEY_ENV})"] * (key is not None)
        + [f"at most {rate:g} requests/s per client and worker"] * (rate > 0)
    )
    err.print(
        f"serving {bundle} on http://{host}:{port}/ ({workers} worker{'s' * (workers > 1)}"
        f"{'; ' + guards if guards else ''})",
        highlight=False,
    )
    if workers == 1:
        run(app_, sock, loop=loop)
        return
    del app_
    os.environ[BUNDLE_ENV], os.environ[STORE_ENV] = str(bundle.resolve()), store or ""
    # /metrics of any worker adds up all workers: prometheus_client's multiprocess mode, in a
    # fresh directory (old numbers never leak in) removed at exit
    os.environ[MULTIPROC_ENV] = metrics_dir = tempfile.mkdtemp(prefix="semsearch-metrics-")
    # each worker's threads (torch, ONNX Runtime, faiss, LightGBM through OpenMP; the lexical
    # kernel's numba threads) share the cores with the other workers, not each take them all
    per_worker = str(max(1, (os.cpu_count() or 1) // workers))
    os.environ.setdefault("OMP_NUM_THREADS", per_worker)
    os.environ.setdefault("NUMBA_NUM_THREADS", per_worker)
    try:
        run("semsearch.serving.app:app_from_env", sock, workers=workers, loop=loop, factory=True)
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------- train / encode / explain
@app.command("train")
@_guard
def train_cmd(
    model: Annotated[
        str, typer.Argument(help="Model to train: dssm, clsm, mt-dnn (or any trainable registered model).")
    ],
    data: Annotated[str, typer.Option(help="BEIR-layout data set with a training split.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Directory to save the trained model in.")],
    split: Annotated[str, typer.Option(help="Qrels split to train on.")] = "train",
    dev: Annotated[
        str | None, typer.Option(help="Qrels split for early stopping (default: 'dev' if the data set has one).")
    ] = None,
    threshold: Annotated[int, typer.Option(help="Lowest grade that makes a (query, document) pair a positive.")] = 3,
    fields: Annotated[str, typer.Option(help="Document fields: title, text or title+text.")] = "title",
    param: Annotated[
        list[str],
        typer.Option(
            "--param", help="Model/training parameter NAME=VALUE (JSON values), e.g. negatives=50, gamma=[5,10,20]."
        ),
    ] = [],
    checkpoint: Annotated[Path | None, typer.Option(help="Checkpoint directory (written every epoch).")] = None,
    resume: Annotated[bool, typer.Option(help="Resume from the checkpoint directory.")] = False,
    hold_out: Annotated[
        str | None,
        typer.Option(
            "--hold-out",
            help="Leave fold I/N of the split's queries out of training (counted from 1; e.g. 1/2: train on the other half), so that a stage-2 ranker can learn from queries this model never saw: index build --ranker-param train_fold=I/N.",
        ),
    ] = None,
) -> None:
    """Train a model on a data set's judged pairs; progress shows pairs/s, loss and the dev metric.
    Under ``torchrun --nproc-per-node N -m semsearch train ...`` the N processes train one model
    together (data-parallel; training/distributed.py); rank 0 prints and writes ``--out``."""
    from .evaluation import QueryFold
    from .plugins import family, model_names
    from .training import distributed, recipe, trainable

    if model in model_names() and not trainable(model):
        raise ValueError(
            f"{model} ({family(model)} family) is not trainable: it needs no training; use it directly "
            f"(semsearch run --model {model} ...)"
        )
    model_kw, args = recipe(model, _parse_params(param), where="--param")  # validated before any data is read
    fold = QueryFold.parse(hold_out, "--hold-out") if hold_out is not None else None
    if not distributed.launched():
        return _train(model, model_kw, args, data, out_dir, split, dev, threshold, fields, checkpoint, resume, fold)
    from .training.args import TrainArgs

    if not isinstance(args, TrainArgs):
        raise ValueError(
            f"{model} does not train on the epoch loop; distributed training (torchrun) covers dssm, "
            "clsm, mt-dnn, knrm, matchpyramid, bert-rep, bert-rel and s2net: train it without torchrun"
        )
    distributed.check_batch(args.batch_size)  # before any data is read
    distributed.init(args.device)
    try:
        _train(model, model_kw, args, data, out_dir, split, dev, threshold, fields, checkpoint, resume, fold)
        distributed.barrier()  # the other ranks wait while rank 0 writes the model
    finally:
        distributed.teardown()
    distributed.exit_process(0)  # done and written: skip the runtime teardown that can abort (see there)


def _train(
    model: str,
    model_kw: dict[str, Any],
    args: Any,
    data: str,
    out_dir: Path,
    split: str,
    dev: str | None,
    threshold: int,
    fields: str,
    checkpoint: Path | None,
    resume: bool,
    hold_out: QueryFold | None = None,
) -> None:
    """``train``'s work: read the data (less the ``hold_out`` fold's queries), fit, and (on rank 0
    only, under torchrun) save the model; the log names the fold held out."""
    import shutil

    from .data import EvalSet, TrainingData, open_dataset
    from .data._io import fsync_tree, replace_dir, tmp_dir, write_json
    from .models.base import TRAINING_LOG
    from .plugins import create_model
    from .training import distributed, fit

    main = distributed.is_main()
    m = create_model(model, **model_kw)
    ds = open_dataset(data)
    dev_split = dev if dev is not None else ("dev" if "dev" in ds.splits else None)
    train_data = TrainingData.from_dataset(ds, split, threshold=threshold, fields=fields)  # type: ignore[arg-type]
    held: list[str] = []
    if hold_out is not None:
        held = hold_out.queries(ds.qrels(split))
        train_data = train_data.without_queries(held)
    dev_set = EvalSet.judged(ds, dev_split) if dev_split else None
    if main:
        err.print(
            f"training {model} on {len(train_data.positives)} positive pairs of {ds.name}/{split}"
            + (f" (fold {hold_out} held out: {len(held):,} queries)" if hold_out is not None else "")
            + (f", early stopping on {dev_split}" if dev_split else "")
            + (f", {distributed.world()} processes" if distributed.active() else ""),
            highlight=False,
        )
    options = {"checkpoint_dir": checkpoint, "resume": resume} if checkpoint else {}
    log = fit(m, train_data, dev_set, args=args, **options)
    if hold_out is not None:
        log["held_out"] = {"split": split, "fold": str(hold_out), "queries": len(held)}
    if not main:
        return
    # written beside --out and swapped in whole: a run killed at any point leaves the previous
    # model there intact (its leftover folder is removed by the next run)
    tmp = tmp_dir(out_dir)
    try:
        m.save(tmp)
        write_json(tmp / TRAINING_LOG, log)
        fsync_tree(tmp)
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if "stopped" in log:
        kept = f"; kept epoch {log['best_epoch']}" if "best_epoch" in log else ""
        err.print(f"{log['stopped']}{kept}", highlight=False)
    err.print(f"model saved to {out_dir}", highlight=False)


@app.command("classify")
@_guard
def classify_cmd(
    queries: Annotated[list[str], typer.Argument(help="Query texts to classify.")],
    model: Annotated[Path, typer.Option(help="Saved MT-DNN directory (semsearch train mt-dnn ...).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """P(domain | query) for every classification domain of a trained MT-DNN."""
    from .models.mtdnn import MTDNN
    from .plugins import load_model

    m = load_model(model)
    if not isinstance(m, MTDNN):
        raise ValueError(f"{model}: a {m.name} model; classify needs an mt-dnn model")
    probs = m.classify(queries)
    if as_json:
        out.print_json(
            json.dumps(
                [{"query": q, **{d: float(p) for d, p in zip(m.domains, row)}} for q, row in zip(queries, probs)]
            )
        )
        return
    table = Table("query", *m.domains)
    for q, row in zip(queries, probs):
        table.add_row(q, *(f"{p:.3f}" for p in row))
    out.print(table)


@app.command("encode")
@_guard
def encode_cmd(
    model: Annotated[Path, typer.Option(help="Saved encoder directory (dssm, clsm, ...).")],
    texts: Annotated[Path, typer.Option(help="Texts: one per line, or BEIR queries.jsonl / corpus.jsonl.")],
    out_path: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Output .npy file (float32, one row per text; unit length for DSSM, CLSM and MT-DNN, raw dot-product vectors for bert-rep).",
        ),
    ],
    side: Annotated[str, typer.Option(help="'query' or 'document' tower.")] = "document",
    shard: Annotated[
        str | None,
        typer.Option(
            help="I/N: encode only part I of N equal contiguous parts of the texts (1/4 .. 4/4, counted from 1 as --hold-out's folds), for many machines; a shard already written is skipped (resumable). Writes the .npy and a .json beside it (ids, rows, model): `semsearch index from-shards` builds one index from them."
        ),
    ] = None,
    ray: Annotated[
        int,
        typer.Option(
            "--ray",
            help="N > 0: encode all N shards as Ray Data tasks (needs `pip install 'semsearch[ray]'`); --out is then a folder every worker reaches, getting shard-IIIII-of-NNNNN.npy files.",
        ),
    ] = 0,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="With --ray: the Ray cluster's address (default: a running local Ray, else one started here)."
        ),
    ] = None,
) -> None:
    """Encode texts with a trained encoder into a .npy matrix (rows in input order)."""
    from .index.sharded import encode_file, parse_shard

    part = parse_shard(shard) if shard is not None else None  # validated before the model is read
    if side not in ("query", "document"):
        raise ValueError("--side must be 'query' or 'document'")
    if ray < 0 or (ray and part is not None):
        raise ValueError("--ray N: N shards (N > 0), not together with --shard")
    if ray:
        from .index.sharded import encode_with_ray

        start = time.perf_counter()
        shards = encode_with_ray(model, texts, out_path, ray, side=side, address=ray_address)
        err.print(
            f"wrote {len(shards)} shards into {out_path} with Ray ({sum(s.skipped for s in shards)} already complete, "
            f"{sum(s.rows for s in shards):,} texts) in {time.perf_counter() - start:.1f} s",
            highlight=False,
        )
        return
    done = encode_file(model, texts, out_path, side=side, shard=part)
    if done.skipped:
        err.print(f"{done.path}: shard {part} already written, skipped", highlight=False)
    else:
        err.print(
            f"wrote {done.path}: {done.rows} x {done.dim} in {done.seconds:.2f} s "
            f"({done.rows / max(done.seconds, 1e-9):,.0f} texts/s)",
            highlight=False,
        )


@app.command("export-onnx")
@_guard
def export_onnx_cmd(
    model: Annotated[Path, typer.Argument(help="Saved transformer model directory (bert-rep or bert-rel).")],
    precision: Annotated[
        str,
        typer.Option(
            help="'fp32' (torch's outputs, cosine >= 0.9999 checked) or 'int8' (dynamic quantisation; measure its quality first: benchmarks/encode_speed.py)."
        ),
    ] = "fp32",
) -> None:
    """Write model.onnx + onnx.json into a saved transformer's folder: its inference (encoding,
    scoring, the service's query encoder) then runs through ONNX Runtime on the CPU."""
    from .models.base import seal
    from .models.transformer import TransformerModel
    from .plugins import load_model

    _check_onnx(precision)
    if precision == "off":
        raise ValueError("--precision must be fp32 or int8")
    m = load_model(model)
    if not isinstance(m, TransformerModel):
        raise ValueError(f"{model}: a {m.name} model is not a transformer (bert-rep or bert-rel)")
    _onnx_models([m], precision)
    m.save_onnx(model)
    seal(model)  # the folder's checksums now cover the export
    err.print(f"wrote {model / 'model.onnx'} ({precision})", highlight=False)


@app.command("explain")
@_guard
def explain_cmd(
    query: Annotated[str, typer.Argument(help="Query text.")],
    document: Annotated[str, typer.Argument(help="Document (title) text.")],
    model: Annotated[Path, typer.Option(help="Saved DSSM or CLSM directory.")],
    top: Annotated[int, typer.Option(help="Neurons / words to show.")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Why the model matches a query and a document: winning words and shared neurons (CLSM), word contributions (any encoder)."""
    from .models.explain import explain
    from .models.neural import NeuralEncoder
    from .plugins import load_model

    m = load_model(model)
    if not isinstance(m, NeuralEncoder):
        raise ValueError(f"{model}: explain needs a neural encoder, got {m.name}")
    if not query.strip() or not document.strip():
        raise ValueError("query and document must not be empty")
    e = explain(m, query, document, top=top)
    if as_json:
        print(json.dumps(e, ensure_ascii=False, indent=2))
        return
    out.print(f"[bold]{m.name}[/] cosine = {e['cosine']:.4f}", highlight=False)
    for side in ("query", "document"):
        if f"{side}_neurons" in e:
            t = Table("neuron", "activation", "winning word", "window", title=f"most active max-pool neurons: {side}")
            for n in e[f"{side}_neurons"]:
                t.add_row(str(n["neuron"]), f"{n['activation']:.3f}", n["word"], n["window"])
            out.print(t)
    if e.get("matching_neurons"):
        t = Table("neuron", "query word", "act.", "document word", "act.", title="neurons active on both sides")
        for n in e["matching_neurons"]:
            t.add_row(
                str(n["neuron"]),
                n["query_word"],
                f"{n['query_activation']:.3f}",
                n["document_word"],
                f"{n['document_activation']:.3f}",
            )
        out.print(t)
    for side in ("query", "document"):
        words = ", ".join(f"{w['word']} ({w['contribution']:+.3f})" for w in e[f"{side}_words"][:top])
        out.print(f"{side} words by contribution to the cosine: {words}", highlight=False)


# ---------------------------------------------------------------------------------------- reproduce
@app.command("reproduce")
@_guard
def reproduce_cmd(
    names: Annotated[list[str] | None, typer.Argument(help="Experiment names (see --list) or spec files.")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the registered experiments.")] = False,
    all_: Annotated[bool, typer.Option("--all", help="Run every registered experiment.")] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="Where to write NAME.md, NAME.json and runs.")] = Path(
        "results"
    ),
    check: Annotated[bool, typer.Option(help="Exit 1 when a figure falls outside the spec's expected range.")] = True,
    models_dir: Annotated[
        Path | None, typer.Option(help="Where trained models are saved and reused (default OUT/models).")
    ] = None,
    retrain: Annotated[
        bool, typer.Option(help="Train every model again instead of reusing a saved one with the same recipe.")
    ] = False,
) -> None:
    """Reproduce paper tables: our figures beside the paper's, as markdown and JSON."""
    from .experiments import get_spec, spec_paths

    if list_:
        for name in spec_paths():
            spec = get_spec(name)
            out.print(f"[bold]{name}[/]  {spec.title}", highlight=False)
        return
    todo = list(spec_paths()) if all_ else (names or [])
    if not todo:
        raise ValueError("name an experiment, or use --all / --list")
    specs = [get_spec(n) for n in todo]  # validate every spec before running any (or loading torch)
    from .experiments import run_experiment

    failed = []
    for spec in specs:
        result = run_experiment(spec, model_dir=models_dir or out_dir / "models", retrain=retrain)
        path = result.write(out_dir)
        out.print(result.to_markdown(), highlight=False)
        err.print(f"wrote {path} and {path.with_suffix('.json')}", highlight=False)
        failed += [c for c in result.checks if not c.ok]
    if failed and check:
        for c in failed:
            err.print(
                f"[red]out of range:[/] {c.label} {c.metric} = {c.value:.4f} not in [{c.low}, {c.high}]",
                highlight=False,
            )
        raise typer.Exit(EXIT_CHECK_FAILED)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
