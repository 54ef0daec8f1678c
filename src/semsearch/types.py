"""Shared plain types: runs and qrels in the nested-dict shape pytrec_eval and ranx use."""

from __future__ import annotations

Run = dict[str, dict[str, float]]
"""query id -> document id -> score (higher is better)."""

Qrels = dict[str, dict[str, int]]
"""query id -> document id -> graded relevance label."""
