"""Indexes for serving: saved search indexes (and, later, vector indexes and hybrid merging)."""

from .bundle import Hit, Searcher, build_index

__all__ = ["Hit", "Searcher", "build_index"]
