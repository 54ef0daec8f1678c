"""Typed options of a bundle: how one is built (``BuildOptions``) and how one is loaded for
searching (``LoadOptions``). Each is validated once, where its values come in (the command line,
a Python call); the build and the loader then read typed fields, never the environment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ...params import ParamError, Params, param
from ...ranking.rescore import check_weight
from .manifest import STORES

RESCORE_WEIGHT = 1.0
"""A new bundle's stage-3 blend weight (``index build --rescore-weight``)."""
QUERY_CACHE = 4096
"""Recent distinct query embeddings each semantic retriever keeps (``SemanticRetriever.query_cache``)."""
RESULT_CACHE = 2048
"""Recent distinct searches whose results a loaded bundle keeps: it never changes, so a repeated
search gets the same answer without running the stages again."""

Store = Literal["faiss", "postgres"]
Fields = Literal["title+text", "title", "text"]


def _weight(value: float, where: str) -> float:
    try:
        return check_weight(value, where)
    except ValueError as e:
        raise ParamError(str(e)) from None


@dataclass(frozen=True)
class BuildOptions(Params):
    """How ``build_bundle`` indexes a collection (the models themselves are arguments).

    ``dataset``: the name the manifest records; ``fields``: the document fields indexed; ``kind``:
    each encoder's vector index (``VectorIndex`` kinds) with ``index_params``; ``store``: postgres
    also loads the vectors into PostgreSQL/pgvector, on ``postgres_dsn`` / $SEMSEARCH_PG_DSN or an
    embedded server on ``pg_data``; ``vector_cache``: a folder keeping document vectors between
    builds; ``rescore_depth`` / ``rescore_weight``: the stage-3 cross-encoder's depth and blend
    weight (inf: its score alone); ``spelling``: keep a spelling corrector of the documents."""

    kind: ClassVar[str] = "index build"

    dataset: str = ""
    fields: Fields = "title+text"
    vector_index: str = "flat"
    index_params: dict[str, int] = param({})
    store: str = "faiss"
    pg_data: str | None = None
    postgres_dsn: str | None = None
    vector_cache: str | None = None
    rescore_depth: int = 10
    rescore_weight: float = RESCORE_WEIGHT
    spelling: bool = True

    def check(self) -> None:
        if self.store not in STORES:
            raise ParamError(f"store must be one of {', '.join(STORES)}, got {self.store!r}")
        if self.rescore_depth < 1:
            raise ParamError(f"rescore depth must be an integer >= 1, got {self.rescore_depth!r}")
        object.__setattr__(self, "rescore_weight", _weight(self.rescore_weight, "rescore weight"))
        for name, value in self.index_params.items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise ParamError(f"{self._label('index_params')}: {name} must be an integer, got {value!r}")


@dataclass(frozen=True)
class LoadOptions(Params):
    """How ``Bundle.load`` opens a bundle for searching.

    ``store``: where the vectors are searched (None: as built); ``verify``: check every file's
    checksum; ``query_cache`` / ``result_cache``: recent query embeddings and search results kept
    (0: none); ``rescore``: run the bundle's stage-3 cross-encoder on the first ``rescore_depth``
    hits (None: the depth it was built with), blended at ``rescore_weight`` (None: as built; inf:
    its score alone); ``correct_queries``: correct each query's spelling first, if the bundle has a
    corrector."""

    kind: ClassVar[str] = "bundle load"

    store: Store | None = None
    verify: bool = True
    query_cache: int = param(QUERY_CACHE, ge=0)
    result_cache: int = param(RESULT_CACHE, ge=0)
    rescore: bool = False
    rescore_depth: int | None = param(None, ge=1)
    rescore_weight: float | None = None
    correct_queries: bool = True

    def check(self) -> None:
        if self.rescore_weight is not None:
            object.__setattr__(self, "rescore_weight", _weight(self.rescore_weight, self._label("rescore_weight")))


__all__ = ["QUERY_CACHE", "RESCORE_WEIGHT", "RESULT_CACHE", "BuildOptions", "LoadOptions"]
