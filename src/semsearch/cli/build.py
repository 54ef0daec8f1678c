"""``semsearch index build``'s work: ``BuildRequest`` holds its flags, typed and checked together
before anything is read, and ``build`` makes the bundle from it (the command in cli/index.py
only parses the flags)."""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..params import needs
from .common import bundle_models, check_onnx, err, onnx_models, parse_params, vector_params

if TYPE_CHECKING:
    from ..data import Corpus
    from ..index.bundle import BuildOptions
    from ..models import Model
    from ..training.ranker import StageTrainer

LITERAL_FIELDS = ("title+text", "title", "text")
"""``--fields`` values that name the id/title/text layout's fields (anything else: table columns)."""


@dataclasses.dataclass(frozen=True)
class BuildRequest:
    """``index build``'s flags as given (None: not given). Made, they have been checked together,
    each message naming its flag: one lexical model's ``--param`` / ``--analyzer``, ``--ranker`` or
    ``--train-ranker`` and what needs the latter, ``--onnx`` / ``--rescorer-onnx``, what needs
    ``--rescorer``, ``--shards`` with the rest, the vector index's parameters, and the table
    options against ``--data``; ``options`` is then the ``BuildOptions`` the build reads and
    ``table`` whether ``--data`` is read as a table."""

    data: str
    out_dir: Path
    models: str = "bm25"
    param: list[str] = dataclasses.field(default_factory=list)
    analyzer: str | None = None
    fields: str = "title+text"
    id_column: str | None = None
    facets: str | None = None
    numeric: str | None = None
    max_record_bytes: int | None = None
    ranker: Path | None = None
    train_ranker: bool = False
    ranker_param: list[str] = dataclasses.field(default_factory=list)
    clicks: Path | None = None
    vector_index: str = "flat"
    vector_param: list[str] = dataclasses.field(default_factory=list)
    encoded: list[Path] = dataclasses.field(default_factory=list)
    shards: int = 1
    store: str = "faiss"
    pg_data: Path | None = None
    skip_bad_lines: bool = False
    vector_cache: Path | None = None
    onnx: str = "fp32"
    rescorer: Path | None = None
    rescore_depth: int = 10
    rescore_weight: float | None = None
    rescorer_onnx: str | None = None
    correct_queries: bool = True
    options: BuildOptions = dataclasses.field(init=False)
    table: bool = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        from ..index.bundle import RESCORE_WEIGHT, BuildOptions
        from ..ranking.rescore import check_weight

        if not self.names:
            raise ValueError("--models is empty")
        if self.ranker is not None and self.train_ranker:
            raise ValueError("give --ranker (a saved ranker) or --train-ranker, not both")
        needs(
            "--train-ranker",
            self.train_ranker,
            {"--ranker-param": bool(self.ranker_param), "--clicks": self.clicks is not None},
        )
        check_onnx(self.onnx)
        needs(
            "--rescorer",
            self.rescorer is not None,
            {
                "--rescore-depth": self.rescore_depth != 10,
                "--rescore-weight": self.rescore_weight is not None,
                "--rescorer-onnx": self.rescorer_onnx is not None,
            },
        )
        if self.rescorer_onnx is not None:
            check_onnx(self.rescorer_onnx, "--rescorer-onnx")
        if self.shards > 1 and self.rescorer is not None:  # (split_bundle refuses them too, but only after the build)
            raise ValueError("--shards: a bundle with a --rescorer (a stage-3 cross-encoder) cannot be sharded")
        if self.shards > 1 and self.store != "faiss":
            raise ValueError(f"--shards: a sharded bundle is built with the faiss store, not --store {self.store}")
        weight = RESCORE_WEIGHT if self.rescore_weight is None else self.rescore_weight
        options = BuildOptions.from_mapping(
            {
                "dataset": self.data,
                "fields": self.fields if self.fields in LITERAL_FIELDS else "title+text",
                "vector_index": self.vector_index,
                "index_params": vector_params(self.vector_index, self.vector_param),
                "store": self.store,
                "pg_data": None if self.pg_data is None else str(self.pg_data),
                "vector_cache": None if self.vector_cache is None else str(self.vector_cache),
                "rescore_depth": self.rescore_depth,
                "rescore_weight": check_weight(weight, "--rescore-weight"),
                "spelling": self.correct_queries,
            },
            where="index build",
        )
        object.__setattr__(self, "options", options)
        object.__setattr__(self, "table", self._is_table())
        if not self.table:
            is_file = Path(self.data).is_file()
            needs("a file as --data", is_file, {"--max-record-bytes": self.max_record_bytes is not None})

    @property
    def names(self) -> list[str]:
        """``--models``' entries: registered kinds and saved model directories."""
        return [m.strip() for m in self.models.split(",") if m.strip()]

    def _is_table(self) -> bool:
        """Whether ``--data`` is read as a table (``data.load_table``): a CSV or Parquet file, or any
        file with --id, --facets, --numeric or a --fields column list. A TSV or JSON lines file without
        them stays the id/title/text layout it always was (BEIR's corpus.jsonl, id<TAB>title[<TAB>text])."""
        from ..data.table import TABLE_SUFFIXES

        path = Path(self.data)
        columns = bool(self.id_column or self.facets or self.numeric or self.fields not in LITERAL_FIELDS)
        if not path.is_file():
            if columns:
                raise ValueError(
                    f"--id, --facets, --numeric and --fields COLUMNS read a table file; {self.data} is not a file"
                )
            return False
        return TABLE_SUFFIXES.get(path.suffix.lower()) in ("csv", "parquet") or columns


def build(r: BuildRequest) -> None:
    """Build the bundle ``r`` asks for into ``r.out_dir`` (replaced atomically), sharded with
    ``--shards`` > 1: the documents read, the stage-2 ranker's training checked before any model is
    loaded, the models loaded (transformers through ONNX Runtime per ``--onnx``), then indexed."""
    from ..index import build_bundle
    from ..index.bundle.build import included_ranker
    from ..plugins import load_model

    start = time.perf_counter()
    corpus = _corpus(r)
    if r.shards > len(corpus):
        raise ValueError(f"--shards {r.shards}: more shards than the {len(corpus)} documents")
    trainer = _ranker_trainer(r, corpus) if r.train_ranker else None
    built = bundle_models(r.names, r.param, r.analyzer)
    onnx_models(built, r.onnx)
    ranker = included_ranker(r.ranker, corpus, r.options.fields) if r.ranker is not None else None
    rescorer = None
    if r.rescorer is not None:
        rescorer = load_model(r.rescorer)
        onnx_models([rescorer], r.onnx if r.rescorer_onnx is None else r.rescorer_onnx)
    known = _encoded_vectors(r.encoded, r.names, built) if r.encoded else None

    def build_into(out: Path) -> Path:
        return build_bundle(
            corpus, built, out, r.options, ranker=ranker, train_ranker=trainer, rescorer=rescorer, known_vectors=known
        )

    if r.shards == 1:
        path = build_into(r.out_dir)
        err.print(f"bundle written to {path} in {time.perf_counter() - start:.1f} s", highlight=False)
        return
    from ..data.files import tmp_dir
    from ..index.bundle.shard import split_bundle

    whole = tmp_dir(r.out_dir.with_name(f".{r.out_dir.name}.whole"))
    try:
        build_into(whole / "bundle")
        path = split_bundle(whole / "bundle", r.out_dir, r.shards)
    finally:
        shutil.rmtree(whole, ignore_errors=True)
    err.print(
        f"sharded bundle ({r.shards} shards) written to {path} in {time.perf_counter() - start:.1f} s",
        highlight=False,
    )


def _corpus(r: BuildRequest) -> Corpus:
    """``--data``'s documents: a table (its ``--fields`` columns the title and text, ``--facets`` and
    ``--numeric`` typed), a documents file, or a data set's corpus."""
    from ..data import MAX_RECORD_BYTES, load_corpus, load_table, open_dataset

    bound = MAX_RECORD_BYTES if r.max_record_bytes is None else r.max_record_bytes
    if r.table:
        return load_table(
            r.data,
            id=r.id_column,
            fields=None if r.fields == "title+text" else r.fields,  # None: the columns title and text, those present
            facets=r.facets,
            numeric=r.numeric,
            max_record_bytes=bound,
            skip_bad_lines=r.skip_bad_lines,
        )
    if Path(r.data).is_file():
        return load_corpus(r.data, skip_bad_lines=r.skip_bad_lines, max_line_bytes=bound)
    return open_dataset(r.data, skip_bad_lines=r.skip_bad_lines).corpus()


def _ranker_trainer(r: BuildRequest, corpus: Corpus) -> StageTrainer:
    """``--train-ranker``: its parameters and the saved models' held-out folds checked now, before
    any model is loaded (a table's ``--fields`` columns are its documents' title and text)."""
    from ..training.ranker import stage_ranker_trainer

    fields = "title+text" if r.table else r.fields
    model_dirs = [n for n in r.names if Path(n).is_dir()]
    return stage_ranker_trainer(r.data, corpus, fields, parse_params(r.ranker_param), model_dirs, clicks=r.clicks)


def _encoded_vectors(paths: list[Path], names: list[str], models: list[Model]) -> dict[str, dict[str, Any]]:
    """``--encoded``: the parts of one documents' encoding (``encode --shard``), as the vectors of
    the bundle's encoder that made them (the ``--models`` entry naming the model folder they were
    encoded with), doc id -> vector; ValueError when the parts are incomplete, of queries, or of a
    model not in ``--models``."""
    import numpy as np

    from ..index.semantic import encoder_id
    from ..index.sharded import complete_encoding

    parts = complete_encoding(paths)
    first = parts[0]
    if first.side != "document":
        raise ValueError(f"--encoded {first.path}: vectors of the {first.side} side, not of documents")
    made_by = [m for n, m in zip(names, models, strict=True) if Path(n).resolve() == Path(first.model).resolve()]
    if not made_by:
        raise ValueError(f"--encoded {first.path}: vectors of the model {first.model}, which --models does not name")
    vectors: dict[str, np.ndarray] = {}
    for e in parts:
        rows = np.load(e.path, mmap_mode="r")
        vectors.update(zip(e.ids, rows))
    return {encoder_id(made_by[0]): vectors}
