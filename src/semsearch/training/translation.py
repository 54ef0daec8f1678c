"""Training the translation models of ``models/translation.py``: IBM Model 1 (Brown et al. 1993)
by EM on the clickthrough (query, title) pairs for the WTM's P(q|w) (Gao, He & Nie 2010), and for
the PTM also the reverse direction, Viterbi alignments symmetrised by grow-diag-final (Koehn et
al. 2003), and the relative frequencies of the consistent bi-phrases (Och & Ney 2004).

EM works on the flat list of (query word, title word) links of all pairs at once; its
iterations run on ``loop.em_loop``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..arrays import runs
from ..data import EvalSet, TrainingData
from ..models.translation import KEY_BASE, TINY, PhraseTranslationModel, WordTranslationModel, phrase_key
from ..progress import track
from ..text import Vocabulary, count_matrix
from .args import IBM1Args
from .loop import em_loop


def train_translation(
    model: WordTranslationModel | PhraseTranslationModel,
    data: TrainingData,
    dev: EvalSet | None = None,
    *,
    args: IBM1Args,
    progress: bool = True,
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Train on ``data.pair_texts()`` (``dev`` is unused: EM has no early stopping).

    Args:
        model: the WTM or PTM trained in place.
        data: the training split and collection.
        dev: unused.
        args: the EM settings.
        progress: show progress.
        checkpoint_dir: must be None: no checkpoints are written.
        resume: unused.

    Returns:
        The training log."""
    if checkpoint_dir:
        raise ValueError(f"{model.name} training does not write checkpoints; train without --checkpoint")
    start = time.perf_counter()
    queries, titles = data.pair_texts()
    q_tok, d_tok = [model.analyzer(q) for q in queries], [model.analyzer(t) for t in titles]
    model.vocab = Vocabulary.build(q_tok + d_tok)
    if len(model.vocab) >= KEY_BASE - 1:
        raise ValueError(f"vocabulary of {len(model.vocab)} terms is too large for n-gram keys")
    V = len(model.vocab)
    Q = count_matrix([model.vocab.encode(t) for t in q_tok], V, dtype=np.float64)
    D = count_matrix([model.vocab.encode(t) for t in d_tok], V, dtype=np.float64)
    res = ibm1(D, Q, iterations=args.iterations, tol=args.tol, null=args.null, progress=progress, name="IBM-1 P(q|w)")
    model.word_table = _prune(res.table, args.min_prob)
    log: dict[str, Any] = {"vocabulary": V, "word_table_entries": int(model.word_table.nnz), "em": res.log}
    if isinstance(model, PhraseTranslationModel):
        log.update(_train_phrases(model, q_tok, d_tok, res.null, args, progress))
    log["seconds"] = time.perf_counter() - start
    return log


def _train_phrases(
    model: PhraseTranslationModel,
    q_tok: list[list[str]],
    d_tok: list[list[str]],
    null: np.ndarray,
    args: IBM1Args,
    progress: bool,
) -> dict[str, Any]:
    """IBM-1 the other way, symmetrised Viterbi alignments, and the bi-phrase table P(q̃|w̃);
    ``null``: P(q|NULL) of the word model."""
    assert model.vocab is not None and model.word_table is not None
    log: dict[str, Any] = {}
    V = len(model.vocab)
    q_ids = [model.vocab.encode(t) for t in q_tok]
    d_ids = [model.vocab.encode(t) for t in d_tok]
    Q = count_matrix(q_ids, V, dtype=np.float64)
    D = count_matrix(d_ids, V, dtype=np.float64)
    rev = ibm1(Q, D, iterations=args.iterations, tol=args.tol, null=args.null, progress=progress, name="IBM-1 P(w|q)")
    log["em_reverse"] = rev.log
    t0 = time.perf_counter()
    # Viterbi links both ways: each query word -> its best title word (P(q|w)), and each
    # title word -> its best query word (P(w|q)); NULL wins when it is more likely.
    qd = _viterbi(q_ids, d_ids, model.word_table, null)
    dq = _viterbi(d_ids, q_ids, rev.table, rev.null)
    counts: dict[tuple[int, int], int] = {}
    pairs_iter = range(len(q_ids))
    for p in track(pairs_iter, "extracting bi-phrases", total=len(q_ids)) if progress else pairs_iter:
        A = _grow_diag_final(len(q_ids[p]), len(d_ids[p]), qd[p], {(i, j) for j, i in dq[p]})
        for kq in extract_phrases(q_ids[p], d_ids[p], A, model.p.max_len):
            counts[kq] = counts.get(kq, 0) + 1
    if counts:
        keys = np.array(list(counts.keys()), dtype=np.int64)
        vals = np.array(list(counts.values()), dtype=np.float64)
    else:
        keys, vals = np.zeros((0, 2), np.int64), np.zeros(0)
    model.tgt_keys, tgt = np.unique(keys[:, 0], return_inverse=True)
    model.src_keys, src = np.unique(keys[:, 1], return_inverse=True)
    table = sp.csr_matrix((vals, (src, tgt)), shape=(len(model.src_keys), len(model.tgt_keys)))
    sums = np.asarray(table.sum(axis=1)).ravel()
    model.phrase_table = (sp.diags(1.0 / np.maximum(sums, TINY)) @ table).tocsr()
    log["phrases"] = {
        "bi_phrase_types": int(len(vals)),
        "bi_phrase_tokens": float(vals.sum()),
        "title_phrases": int(len(model.src_keys)),
        "query_phrases": int(len(model.tgt_keys)),
        "max_len": model.p.max_len,
        "extract_seconds": time.perf_counter() - t0,
    }
    return log


# ------------------------------------------------------------------------------------------------
# IBM Model 1
# ------------------------------------------------------------------------------------------------
@dataclass
class IBM1Result:
    """P(target | source) as CSR (source vocabulary x target vocabulary), P(target | NULL), log."""

    table: sp.csr_matrix
    null: np.ndarray
    log: dict[str, Any] = field(default_factory=dict)


def ibm1(
    source: sp.csr_matrix,
    target: sp.csr_matrix,
    *,
    iterations: int = 10,
    tol: float = 1e-4,
    null: bool = True,
    progress: bool = False,
    name: str = "IBM-1",
) -> IBM1Result:
    """IBM Model 1 by EM (Brown et al. 1993, §4) on aligned rows of count matrices: row p of
    ``source`` (pairs x V) generates row p of ``target`` (pairs x V), each target token choosing
    a source token (or NULL) uniformly and translating it with t(target|source).

    Each EM iteration is one pass over the flat array of links (target type, source type) of all
    pairs: posteriors t·c_w / Σ t·c_w, expected counts by ``bincount``, then t renormalised per
    source word. The log-likelihood Σ c_q·log(Σ_w c_w·t(q|w) / (|D| + 1)) of the parameters
    before each update is recorded; EM cannot decrease it. EM runs on ``loop.em_loop``: it stops
    after ``iterations``, or once the relative change is at most ``tol`` (said in ``log["stopped"]``).
    Target tokens of a pair with an empty source and no NULL cannot be generated and are skipped.

    Args:
        source: (pairs, V) source counts.
        target: (pairs, V) target counts.
        iterations: the most EM iterations.
        tol: the relative log-likelihood change that stops EM.
        null: source sentences have a NULL word.
        progress: show progress.
        name: the progress bar's title.

    Returns:
        t(target|source), t(target|NULL) and the log."""
    if source.shape != target.shape:
        raise ValueError(f"source {source.shape} and target {target.shape} count matrices differ")
    n_pairs, V = source.shape
    source, target = source.tocsr(), target.tocsr()
    nq = np.diff(target.indptr)
    nd = np.diff(source.indptr)
    n_links_per_pair = nd + (1 if null else 0)
    e_pair = np.repeat(np.arange(n_pairs), nq)  # one entry per (pair, target type)
    e_term = target.indices.astype(np.int64)
    e_cnt = target.data.astype(np.float64)
    L = n_links_per_pair[e_pair]
    keep = L > 0
    e_pair, e_term, e_cnt, L = e_pair[keep], e_term[keep], e_cnt[keep], L[keep]
    skipped = float(target.data.sum() - e_cnt.sum())
    link_e, within = runs(L)
    is_null = within >= nd[e_pair[link_e]]
    src_pos = np.minimum(source.indptr[e_pair[link_e]] + within, max(len(source.indices) - 1, 0))
    w = np.where(is_null, V, source.indices[src_pos] if len(source.indices) else 0).astype(np.int64)
    cw = np.where(is_null, 1.0, source.data[src_pos] if len(source.data) else 0.0).astype(np.float64)
    keys = w * V + e_term[link_e]
    ukeys, pid = np.unique(keys, return_inverse=True)
    p_w, p_q = ukeys // V, ukeys % V
    # Uniform start: every target type seen with a source word is equally likely.
    fan = np.bincount(p_w, minlength=V + 1).astype(np.float64)
    state = {"t": 1.0 / fan[p_w]}
    denom_len = source.sum(axis=1).A1[e_pair] + (1.0 if null else 0.0)
    tokens = float(e_cnt.sum())
    chunks = _chunks(L, 8)

    def step(_: int) -> dict[str, float]:
        start = time.perf_counter()
        t, counts, ll = state["t"], np.zeros(len(ukeys)), 0.0
        for (e0, e1), (l0, l1) in chunks:
            num = t[pid[l0:l1]] * cw[l0:l1]
            den = np.bincount(link_e[l0:l1] - e0, weights=num, minlength=e1 - e0)
            safe = np.maximum(den, TINY)
            ll += float(np.sum(e_cnt[e0:e1] * (np.log(safe) - np.log(denom_len[e0:e1]))))
            post = num / safe[link_e[l0:l1] - e0]
            counts += np.bincount(pid[l0:l1], weights=post * e_cnt[link_e[l0:l1]], minlength=len(ukeys))
        total = np.bincount(p_w, weights=counts, minlength=V + 1)
        state["t"] = counts / np.maximum(total[p_w], TINY)
        secs = time.perf_counter() - start
        return {
            "log_likelihood": ll,
            "ll_per_token": ll / max(tokens, 1.0),
            "seconds": secs,
            "tokens_per_s": tokens / max(secs, 1e-9),
        }

    res = em_loop(step, iterations, tol=tol, title=f"{name} EM", progress=progress, key="log_likelihood")
    stopped = (
        res["stopped"]
        if res["stopped"].startswith("reached")
        else f"stopped after iteration {len(res['iterations'])}: {res['stopped']}"
    )
    t = state["t"]
    # The last recorded LL is of the parameters before the final update; t is the updated table.
    is_src = p_w < V
    table = sp.csr_matrix((t[is_src], (p_w[is_src], p_q[is_src])), shape=(V, V))
    table.eliminate_zeros()
    nullp = np.zeros(V)
    nullp[p_q[~is_src]] = t[~is_src]
    log = {
        "iterations": res["iterations"],
        "stopped": stopped,
        "pairs": int(n_pairs),
        "links": int(len(keys)),
        "parameters": int(len(ukeys)),
        "target_tokens": tokens,
        "skipped_target_tokens": skipped,
        "null": null,
    }
    return IBM1Result(table, nullp, log)


def _chunks(L: np.ndarray, n: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Split entries (with ``L[e]`` consecutive links each) into ~n ranges: ((e0, e1), (l0, l1))."""
    E = len(L)
    ends = np.concatenate([[0], np.cumsum(L)])
    cuts = np.unique(np.linspace(0, E, n + 1).astype(np.int64))
    if len(cuts) < 2:
        return []
    return [((int(a), int(b)), (int(ends[a]), int(ends[b]))) for a, b in zip(cuts[:-1], cuts[1:])]


def _prune(table: sp.csr_matrix, min_prob: float) -> sp.csr_matrix:
    """Drop translations below ``min_prob`` and renormalise rows (keeps the table small)."""
    t = table.tocsr(copy=True)
    t.data[t.data < min_prob] = 0.0
    t.eliminate_zeros()
    sums = np.asarray(t.sum(axis=1)).ravel()
    return (sp.diags(1.0 / np.where(sums > 0, sums, 1.0)) @ t).tocsr()


# ------------------------------------------------------------------------------------------------
# alignments and phrases
# ------------------------------------------------------------------------------------------------
def _grow_diag_final(nq: int, nd: int, qd: set[tuple[int, int]], dq: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Symmetrise two directional alignments (Koehn et al. 2003): start from the intersection,
    add union points next to the alignment whose query or title word is still unaligned, then
    any union point with an unaligned word."""
    union = qd | dq
    A = qd & dq
    aq = {i for i, _ in A}
    ad = {j for _, j in A}
    grown = True
    while grown:
        grown = False
        for i, j in sorted(A):
            for di in (-1, 0, 1):
                for dj in (-1, 0, 1):
                    p = (i + di, j + dj)
                    if (di or dj) and p in union and p not in A and (p[0] not in aq or p[1] not in ad):
                        A.add(p)
                        aq.add(p[0])
                        ad.add(p[1])
                        grown = True
    for i, j in sorted(union):
        if i not in aq or j not in ad:
            A.add((i, j))
            aq.add(i)
            ad.add(j)
    return A


def extract_phrases(q: Sequence[int], d: Sequence[int], A: set[tuple[int, int]], max_len: int) -> list[tuple[int, int]]:
    """Bi-phrases (query phrase key, title phrase key) consistent with alignment A (Och & Ney
    2004): the spans share at least one link and no link leaves them; title spans extend over
    unaligned title words. Both sides at most ``max_len`` words."""
    out = []
    aligned_d = {j for _, j in A}
    for i1 in range(len(q)):
        for i2 in range(i1, min(len(q), i1 + max_len)):
            js = [j for i, j in A if i1 <= i <= i2]
            if not js:
                continue
            j1, j2 = min(js), max(js)
            if j2 - j1 + 1 > max_len or any(j1 <= j <= j2 and not i1 <= i <= i2 for i, j in A):
                continue
            qk = phrase_key(q[i1 : i2 + 1])
            s = j1
            while s >= 0 and (s == j1 or s not in aligned_d):
                e = j2
                while e < len(d) and (e == j2 or e not in aligned_d) and e - s + 1 <= max_len:
                    out.append((qk, phrase_key(d[s : e + 1])))
                    e += 1
                s -= 1
    return out


def _viterbi(
    tgt: list[list[int]], src: list[list[int]], table: sp.csr_matrix, null: np.ndarray
) -> list[set[tuple[int, int]]]:
    """Per pair, the IBM-1 Viterbi links {(target position, source position)}: every target
    token links to its most probable source token (first on ties), unless NULL is more probable.
    Vectorised over all (target position, source position) pairs of all pairs at once."""
    nt = np.fromiter((len(x) for x in tgt), dtype=np.int64, count=len(tgt))
    ns = np.fromiter((len(x) for x in src), dtype=np.int64, count=len(src))
    out: list[set[tuple[int, int]]] = [set() for _ in tgt]
    if not len(tgt):
        return out
    t_flat = np.fromiter((i for x in tgt for i in x), dtype=np.int64, count=int(nt.sum()))
    s_flat = np.fromiter((i for x in src for i in x), dtype=np.int64, count=int(ns.sum()))
    t_off = np.concatenate([[0], np.cumsum(nt)])
    s_off = np.concatenate([[0], np.cumsum(ns)])
    pair_of_t = np.repeat(np.arange(len(tgt)), nt)
    reps = ns[pair_of_t]  # each target token meets every source token of its pair
    g, within = runs(reps)  # group = target token
    s_pos = s_off[pair_of_t[g]] + within
    V = table.shape[1]
    coo = table.tocoo()
    tkeys = coo.row.astype(np.int64) * V + coo.col
    order = np.argsort(tkeys)
    tkeys, tvals = tkeys[order], coo.data[order]
    look = s_flat[s_pos] * V + t_flat[g]
    i = np.minimum(np.searchsorted(tkeys, look), max(len(tkeys) - 1, 0))
    val = np.where((tkeys[i] == look) if len(tkeys) else False, tvals[i] if len(tvals) else 0.0, 0.0)
    best = np.lexsort((within, -val, g))  # per group: highest value, then first position
    first = best[np.concatenate([[True], g[best][1:] != g[best][:-1]])] if len(best) else best
    for k in first:
        tok = g[k]
        if val[k] > 0 and val[k] >= null[t_flat[tok]]:
            p = pair_of_t[tok]
            out[p].add((int(tok - t_off[p]), int(within[k])))
    return out
