"""Indexes for serving and merging: saved search indexes and run fusion (interpolation, RRF)."""

from .bundle import Hit, Searcher, build_index
from .fusion import interpolate, rrf

__all__ = ["Hit", "Searcher", "build_index", "interpolate", "rrf"]
