"""Indexes for serving and merging: saved search indexes, run fusion (interpolation, RRF), the
faiss vector index, semantic and hybrid (lexical ∪ semantic) retrieval."""

from .bundle import Hit, Searcher, build_index
from .fusion import interpolate, rrf
from .hybrid import HybridHit, HybridRetriever, Source, merge, merge_runs
from .semantic import SemanticRetriever
from .vector import IndexMismatchError, VectorIndex, recall_at_k, set_threads

__all__ = ["Hit", "HybridHit", "HybridRetriever", "IndexMismatchError", "Searcher", "SemanticRetriever", "Source",
           "VectorIndex", "build_index", "interpolate", "merge", "merge_runs", "recall_at_k", "rrf", "set_threads"]
