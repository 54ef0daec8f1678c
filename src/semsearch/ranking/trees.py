"""A LightGBM model's trees compiled to flat arrays and walked by a numba kernel: the served
ranker's prediction without LightGBM's per-call overhead.

A served search scores a few hundred candidates with a few hundred small trees, where
LightGBM's ``predict`` pays per call for its row-wise C API, the parsing of its parameters and
its thread start-up (``benchmarks/load_test.py`` measures a served search). The same walk
over the same thresholds in numba sums the same leaf values in the same order (float64), so the
scores are LightGBM's to the last bit — ``tests/index/test_positional_search.py`` checks that on random
models and inputs with zeros and NaN.

Why not a library: lleaves (LLVM-compiled LightGBM) 1.3 needs llvmlite's legacy pass manager,
which the llvmlite that numba 0.6x requires no longer has; treelite/tl2cgen need a C compiler
when a bundle is loaded. Only numerical splits are compiled (this project's rankers have no
categorical features); a model with categorical splits or linear trees stays with LightGBM
(``compile_booster`` returns None)."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

_NONE, _ZERO, _NAN = 0, 1, 2
_MISSING = {"None": _NONE, "Zero": _ZERO, "NaN": _NAN}
_ZERO_THRESHOLD = 1e-35  # LightGBM's kZeroThreshold: |x| <= this counts as zero


class CompiledTrees:
    """The trees of a LightGBM dump as arrays: per internal node its feature, threshold, missing
    handling and children (a child < 0 is leaf ``~child``), per tree its root (< 0: a one-leaf
    tree) and each leaf's value."""

    def __init__(self, dump: dict[str, Any]):
        feature: list[int] = []
        threshold: list[float] = []
        default_left: list[bool] = []
        missing: list[int] = []
        left: list[int] = []
        right: list[int] = []
        values: list[float] = []
        roots: list[int] = []

        def walk(node: dict[str, Any]) -> int:
            if "leaf_value" in node or "split_index" not in node:
                values.append(float(node["leaf_value"]))
                return ~(len(values) - 1)
            if node.get("decision_type", "<=") != "<=":
                raise ValueError("categorical split")
            i = len(feature)
            feature.append(int(node["split_feature"]))
            threshold.append(float(node["threshold"]))
            default_left.append(bool(node.get("default_left", False)))
            missing.append(_MISSING[str(node.get("missing_type", "None"))])
            left.append(0)
            right.append(0)
            left[i] = walk(node["left_child"])
            right[i] = walk(node["right_child"])
            return i

        for tree in dump["tree_info"]:
            roots.append(walk(tree["tree_structure"]))
        self.n_features = int(dump["max_feature_idx"]) + 1
        self.feature = np.asarray(feature, dtype=np.int32)
        self.threshold = np.asarray(threshold, dtype=np.float64)
        self.default_left = np.asarray(default_left, dtype=np.bool_)
        self.missing = np.asarray(missing, dtype=np.int8)
        self.left = np.asarray(left, dtype=np.int32)
        self.right = np.asarray(right, dtype=np.int32)
        self.values = np.asarray(values, dtype=np.float64)
        self.roots = np.asarray(roots, dtype=np.int32)
        self.child = np.empty(2 * len(self.left), dtype=np.int32)  # node's children side by side: left, right
        self.child[0::2], self.child[1::2] = self.left, self.right
        self.plain = bool((self.missing == _NONE).all())
        """No split treats zero or NaN as missing: a NaN input is 0 and the walk needs no test."""

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The sum of the trees' outputs per row of ``X`` (rows, features): LightGBM's raw score."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(f"expected a (rows, {self.n_features}) matrix, got shape {X.shape}")
        out = np.zeros(len(X), dtype=np.float64)
        if self.plain:
            if np.isnan(X).any():
                X = np.nan_to_num(X, nan=0.0, posinf=np.inf, neginf=-np.inf)
            _predict_plain(X, self.feature, self.threshold, self.child, self.values, self.roots, out)
        else:
            _predict(
                X,
                self.feature,
                self.threshold,
                self.default_left,
                self.missing,
                self.left,
                self.right,
                self.values,
                self.roots,
                out,
            )
        return out


def compile_booster(booster: Any, num_iteration: int | None = None) -> CompiledTrees | None:
    """``CompiledTrees`` of a LightGBM booster's first ``num_iteration`` rounds (all: None), or
    None when it has splits or trees this walk does not do (categorical, linear, several classes)."""
    dump = booster.dump_model(num_iteration=num_iteration)
    if int(dump.get("num_tree_per_iteration", 1)) != 1 or dump.get("average_output"):
        return None
    if any(t.get("tree_structure", {}).get("leaf_coeff") for t in dump["tree_info"]):
        return None
    try:
        return CompiledTrees(dump)
    except (ValueError, KeyError):
        return None


@numba.njit(cache=True, nogil=True)
def _predict(X, feature, threshold, default_left, missing, left, right, values, roots, out):
    """LightGBM's ``Tree::NumericalDecision`` walk of every tree for every row, summed in tree order."""
    for i in range(X.shape[0]):
        acc = 0.0
        for t in range(roots.shape[0]):
            node = roots[t]
            while node >= 0:
                x = X[i, feature[node]]
                m = missing[node]
                if np.isnan(x) and m != _NAN:
                    x = 0.0
                if (m == _ZERO and -_ZERO_THRESHOLD <= x <= _ZERO_THRESHOLD) or (m == _NAN and np.isnan(x)):
                    node = left[node] if default_left[node] else right[node]
                elif x <= threshold[node]:
                    node = left[node]
                else:
                    node = right[node]
            acc += values[~node]
        out[i] = acc


@numba.njit(cache=True, nogil=True)
def _predict_plain(X, feature, threshold, child, values, roots, out):
    """``_predict`` for trees without missing-value splits, NaN already 0: the child is picked by
    index arithmetic instead of a branch the CPU mispredicts, and four rows walk each tree
    together, four independent chains of loads the CPU overlaps. Each row's sum is in tree order,
    as ``_predict``'s."""
    n = X.shape[0]
    i = 0
    while i + 4 <= n:
        a0 = a1 = a2 = a3 = 0.0
        for t in range(roots.shape[0]):
            n0 = n1 = n2 = n3 = roots[t]
            while n0 >= 0 or n1 >= 0 or n2 >= 0 or n3 >= 0:
                if n0 >= 0:
                    n0 = child[2 * n0 + (X[i, feature[n0]] > threshold[n0])]
                if n1 >= 0:
                    n1 = child[2 * n1 + (X[i + 1, feature[n1]] > threshold[n1])]
                if n2 >= 0:
                    n2 = child[2 * n2 + (X[i + 2, feature[n2]] > threshold[n2])]
                if n3 >= 0:
                    n3 = child[2 * n3 + (X[i + 3, feature[n3]] > threshold[n3])]
            a0 += values[~n0]
            a1 += values[~n1]
            a2 += values[~n2]
            a3 += values[~n3]
        out[i], out[i + 1], out[i + 2], out[i + 3] = a0, a1, a2, a3
        i += 4
    while i < n:
        acc = 0.0
        for t in range(roots.shape[0]):
            node = roots[t]
            while node >= 0:
                node = child[2 * node + (X[i, feature[node]] > threshold[node])]
            acc += values[~node]
        out[i] = acc
        i += 1
