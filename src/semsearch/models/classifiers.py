"""Linear SVM query classifiers, the baselines of MT-DNN's Table 2 and Figure 4 (Liu et al. 2015
§3.2): SVM-Word on word 1-3-gram features and SVM-Letter on letter-trigram counts (the network's
l1 input), liblinear via scikit-learn, C chosen by 5-fold cross-validation on the training data
(footnote 2). The same SVM over any dense features (MT-DNN's l2) is the SemanticRepresentation
classifier of the domain-adaptation study."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..text import TrigramHasher, tokenize

C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)


def word_ngram_features(train: Sequence[str], *others: Sequence[str]) -> list[sp.csr_matrix]:
    """Binary word 1-, 2- and 3-gram features (vocabulary from ``train``; the papers' tokeniser),
    for ``train`` and each of ``others``."""
    from sklearn.feature_extraction.text import CountVectorizer

    vec = CountVectorizer(tokenizer=tokenize, lowercase=False, token_pattern=None, ngram_range=(1, 3), binary=True)
    out = [vec.fit_transform(train)]
    return out + [vec.transform(t) for t in others]


def letter_trigram_features(hasher: TrigramHasher, *texts: Sequence[str]) -> list[sp.csr_matrix]:
    """Letter-trigram counts (l1 of Figure 1) over ``hasher``'s vocabulary."""
    return [hasher.transform(t) for t in texts]


@dataclass
class SVMResult:
    """A fitted SVM's test decision values, the C chosen, and the CV AUC per C tried."""

    scores: np.ndarray
    c: float
    cv_auc: dict[float, float]


def svm_scores(
    x_train: Any, y_train: np.ndarray, x_test: Any, *, grid: Sequence[float] = C_GRID, folds: int = 5, seed: int = 0
) -> SVMResult:
    """Fit a linear SVM (liblinear, L2-regularised hinge²) with C picked by ``folds``-fold CV AUC
    on the training data, and return its decision values on ``x_test``. With fewer examples of a
    class than folds, the folds shrink to that count (at least 2); with a single example of a class
    C = 1 is used without CV.

    Args:
        x_train: training features.
        y_train: 0/1 labels.
        x_test: test features.
        grid: the C values tried.
        folds: CV folds.
        seed: seed of the folds.

    Returns:
        The test decision values, the chosen C and the CV AUC per C."""
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.svm import LinearSVC

    y = np.asarray(y_train).astype(int)
    if y.min() == y.max():
        raise ValueError("an SVM needs positive and negative training examples")
    k = min(folds, int(np.bincount(y).min()))
    if k < 2:
        svm = LinearSVC(C=1.0, max_iter=5000).fit(x_train, y)
        return SVMResult(svm.decision_function(x_test), 1.0, {})
    search = GridSearchCV(
        LinearSVC(max_iter=5000),
        {"C": list(grid)},
        scoring="roc_auc",
        cv=StratifiedKFold(k, shuffle=True, random_state=seed),
        n_jobs=1,
    ).fit(x_train, y)
    cv = {float(c): float(s) for c, s in zip(search.cv_results_["param_C"], search.cv_results_["mean_test_score"])}
    return SVMResult(search.decision_function(x_test), float(search.best_params_["C"]), cv)
