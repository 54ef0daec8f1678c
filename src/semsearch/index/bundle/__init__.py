"""Search bundles: one self-contained directory with everything the search service needs — the
documents, a lexical index, one vector index per neural encoder, an optional ranker, and a
manifest with versions and per-file sha256 checksums (the serving side of the BERT paper,
Sec. 2.2 and 4.4: inverted index ∪ semantic k-NN index, results tagged LEXICAL / SEMANTIC).

A bundle is built in ``BUNDLE.tmp-<pid>`` beside the target, fsynced, then swapped in by renames
(old → ``.BUNDLE.old``, new → ``BUNDLE``, old removed). A build killed at any point leaves a
loadable bundle: before the swap the old one is untouched; between the two renames ``load``
falls back to ``.BUNDLE.old``. The next build of the same target removes the ``.tmp-<pid>``
folders of builds whose process is gone; ``load`` never takes such a folder for a bundle.
Loading verifies every checksum and that each vector index was built by the encoder stored
beside it (``SemanticRetriever``'s probe check).

Modules: ``build`` (the atomic build), ``manifest`` (format, checksums, shape checks), ``store``
(the PostgreSQL server and clean-up), ``search`` (``Bundle``: loading and stages 1-3),
``options`` (``BuildOptions``, ``LoadOptions``)."""

from ..hybrid import Source
from ..searcher import N_LEXICAL, N_SEMANTIC, Hit, Result
from .build import StageSearch, build_bundle, is_encoder
from .manifest import FORMAT, MANIFEST, SPELLING, STORES, read_manifest
from .options import QUERY_CACHE, RESCORE_WEIGHT, RESULT_CACHE, BuildOptions, LoadOptions
from .search import Bundle, top_positions
from .store import PG_DSN_ENV, SERVERS, pg_dsn

__all__ = [
    "FORMAT",
    "MANIFEST",
    "N_LEXICAL",
    "N_SEMANTIC",
    "PG_DSN_ENV",
    "QUERY_CACHE",
    "RESCORE_WEIGHT",
    "RESULT_CACHE",
    "SPELLING",
    "STORES",
    "BuildOptions",
    "Bundle",
    "Hit",
    "LoadOptions",
    "Result",
    "Source",
    "StageSearch",
    "SERVERS",
    "top_positions",
    "build_bundle",
    "is_encoder",
    "pg_dsn",
    "read_manifest",
]
