"""Indexes for serving and merging: saved search indexes, run fusion (interpolation, RRF), the
faiss vector index, semantic and hybrid (lexical ∪ semantic) retrieval, and the one search
protocol every served index answers (``searcher``: ``SearchRequest`` → ``Result``)."""

from .bundle import Bundle, Hit, Result, build_bundle
from .bundle.coordinator import ShardedBundle, open_bundle
from .fusion import interpolate, rrf
from .hybrid import HybridHit, HybridRetriever, Source, merge, merge_runs
from .live import LiveIndex
from .searcher import BundleSearcher, Capabilities, Searcher, SearchRequest
from .semantic import SemanticRetriever
from .vector import IndexMismatchError, VectorIndex, recall_at_k, set_threads

__all__ = [
    "Bundle",
    "BundleSearcher",
    "Capabilities",
    "SearchRequest",
    "Searcher",
    "Hit",
    "Result",
    "HybridHit",
    "HybridRetriever",
    "IndexMismatchError",
    "LiveIndex",
    "ShardedBundle",
    "open_bundle",
    "SemanticRetriever",
    "Source",
    "VectorIndex",
    "build_bundle",
    "interpolate",
    "merge",
    "merge_runs",
    "recall_at_k",
    "rrf",
    "set_threads",
]
