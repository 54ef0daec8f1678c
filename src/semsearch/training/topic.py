"""Training the topic models of ``models/topic.py`` (Gao, Toutanova & Yih 2011): PLSA and BLTM by
MAP-EM with Dirichlet priors α on θ and β on φ (§3.1, Eq. 4-8; §5.2: α = 1.1, β = 1.01), BLTM-PR
by posterior regularisation (§3.2, Eq. 9-13), LDA by gensim's online variational Bayes.

MAP-EM starts from random (flat-Dirichlet) θ and φ (``seed``) and runs at most ``iterations``,
stopping by ``loop.em_loop``'s rule (relative change of the log-likelihood at most ``tol``) but
not before ``min_iterations`` (from random starts EM first lingers near the symmetric saddle).
The E-step is vectorised over the sparse counts in bounded chunks spread over the model's
threads (``models.topic_em``). The log (JSON) has per iteration the log-likelihood, MAP
objective, seconds and tokens/s (and for BLTM-PR the constraint's residuals), and why EM stopped.
``topics`` above what the data support is a ValueError. An identical training run (same kind,
parameters, arguments and texts) within one process is reused from a small memo, so a table's
"μ = 0" row and its mixture row train once."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..data import EvalSet, TrainingData
from ..models.topic import TopicModel
from ..models.topic_em import TINY, Chunk, chunk_bounds, make_chunks, max_nnz, normalize_rows, run_groups, side
from ..params import Params
from ..text import Vocabulary, count_matrix
from .args import BLTMArgs, EMArgs, LDAArgs
from .loop import em_loop

_ARGS: dict[str, type[Params]] = {"plsa": EMArgs, "lda": LDAArgs, "bltm": BLTMArgs}


def train_topic(
    model: TopicModel,
    data: TrainingData,
    dev: EvalSet | None = None,
    *,
    args: Params,
    progress: bool = True,
    checkpoint_dir: str | Path | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Train on ``data``: PLSA and LDA on the distinct titles of its positive pairs, BLTM on the
    pairs. ``dev`` is not used: EM stops on its own objective.

    Args:
        model: the topic model trained in place.
        data: the training split and collection.
        dev: unused.
        args: the kind's EM settings.
        progress: show progress.
        checkpoint_dir: must be None: no checkpoints are written.
        resume: unused.

    Returns:
        The training log."""
    if checkpoint_dir:
        raise ValueError(f"{model.name} training does not write checkpoints; train without --checkpoint")
    if model.name == "bltm":
        return fit_pairs(model, *data.pair_texts(), args=args, progress=progress)
    return fit_texts(model, distinct_titles(data), args=args, progress=progress)


def fit_texts(
    model: TopicModel, texts: Sequence[str], *, args: Params | None = None, progress: bool = False
) -> dict[str, Any]:
    """Train PLSA or LDA on documents ``texts`` (default arguments: the kind's)."""
    if model.name not in ("plsa", "lda"):
        raise ValueError(f"{model.name} trains on query-title pairs (fit_pairs)")
    args = args if args is not None else _ARGS[model.name]()
    train = _lda if model.name == "lda" else _plsa
    return _memoized(model, args, texts, lambda: train(model, texts, args, progress))  # type: ignore[arg-type]  # the kind's args


def fit_pairs(
    model: TopicModel,
    queries: Sequence[str],
    titles: Sequence[str],
    *,
    args: Params | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Train BLTM on aligned query and title texts (default arguments: the kind's).

    Args:
        model: the BLTM trained in place.
        queries: the query texts.
        titles: their titles, aligned.
        args: the EM settings (None: the kind's defaults).
        progress: show progress.

    Returns:
        The training log."""
    if model.name != "bltm":
        raise ValueError(f"{model.name} trains on documents (fit_texts)")
    if len(queries) != len(titles):
        raise ValueError(f"{len(queries)} queries but {len(titles)} titles")
    args = args if args is not None else BLTMArgs()
    return _memoized(model, args, [*queries, "\x01", *titles], lambda: _bltm(model, queries, titles, args, progress))  # type: ignore[arg-type]  # the kind's args


# ------------------------------------------------------------------------------------ trainers
def _plsa(model: TopicModel, texts: Sequence[str], args: EMArgs, progress: bool) -> dict[str, Any]:
    start = time.perf_counter()
    vocab, counts = _document_counts(model, texts, args.min_count)
    T = model.p.topics
    rng = np.random.default_rng(args.seed)
    theta = _random_rows(rng, counts.shape[0], T)  # updated in place by each EM step
    state = {"phiT": np.ascontiguousarray(_random_rows(rng, T, len(vocab)).T)}  # words x topics
    chunks = make_chunks(counts, chunk_bounds(counts.indptr, max_nnz(T)))
    n_tokens = int(counts.sum())

    def step() -> tuple[float, float, dict[str, Any]]:
        state["phiT"], ll, obj = plsa_step(chunks, theta, state["phiT"], model.p.alpha, args.beta, model.threads)
        return ll, obj, {}

    loop = _em(model, step, args.iterations, args.tol, n_tokens, progress, args.min_iterations)
    model.set_trained(vocab, vocab, state["phiT"].T, {})
    return {
        "model": model.name,
        "topics": T,
        "documents": counts.shape[0],
        "dropped_empty": len(texts) - counts.shape[0],
        "vocabulary": len(vocab),
        "tokens": n_tokens,
        "trained_on": "distinct titles of the training pairs",
        "threads": model.threads,
        **loop,
        "seconds": round(time.perf_counter() - start, 2),
    }


def _lda(model: TopicModel, texts: Sequence[str], args: LDAArgs, progress: bool) -> dict[str, Any]:
    try:
        from gensim.models import LdaModel
    except ImportError:
        raise ImportError("the lda model trains with gensim: pip install gensim") from None
    start = time.perf_counter()
    vocab, counts = _document_counts(model, texts, args.min_count)
    T = model.p.topics
    alpha = model.p.alpha if model.p.alpha is not None else 50.0 / T
    corpus = to_gensim_corpus(counts)
    n_tokens = int(counts.sum())
    logging.getLogger("gensim").setLevel(logging.WARNING)
    sample = corpus[: min(len(corpus), 2000)]
    holder: dict[str, Any] = {}

    def step() -> tuple[float, float, dict[str, Any]]:
        if "lda" not in holder:
            holder["lda"] = LdaModel(
                corpus,
                num_topics=T,
                id2word=dict(enumerate(vocab.terms)),
                alpha=np.full(T, alpha),
                eta=args.eta,
                passes=1,
                iterations=args.iterations,
                chunksize=args.chunksize,
                random_state=args.seed,
                eval_every=None,
            )
        else:
            holder["lda"].update(corpus, passes=1)
        bound = float(holder["lda"].bound(sample))
        return bound, bound, {}

    loop = _em(model, step, args.passes, 0.0, n_tokens, progress)
    lda = holder["lda"]
    lam = lda.state.get_lambda()
    model.set_trained(
        vocab,
        vocab,
        lam / lam.sum(axis=1, keepdims=True),
        {"lambda": lam, "alpha": np.asarray(lda.alpha, dtype=np.float64)},
    )
    return {
        "model": model.name,
        "topics": T,
        "documents": counts.shape[0],
        "vocabulary": len(vocab),
        "tokens": n_tokens,
        "alpha": alpha,
        "eta": args.eta,
        "trainer": "gensim LdaModel (online VB)",
        "note": (
            "one 'iteration' is one pass of online VB; its loglik/objective is gensim's variational "
            "bound on the first 2,000 titles (with the topic-side terms, so not monotone in passes)"
        ),
        **loop,
        "seconds": round(time.perf_counter() - start, 2),
    }


def _bltm(
    model: TopicModel, queries: Sequence[str], titles: Sequence[str], args: BLTMArgs, progress: bool
) -> dict[str, Any]:
    start = time.perf_counter()
    one, pr = model.p.one_vocab, args.pr  # type: ignore[attr-defined]  # BLTM's params
    tq = [model.analyzer(t) for t in queries]
    td = [model.analyzer(t) for t in titles]
    mc = args.min_count
    if one:
        vq = vd = Vocabulary.build([*tq, *td], min_count=mc)
    else:
        vq, vd = Vocabulary.build(tq, min_count=mc), Vocabulary.build(td, min_count=mc)
    nq, nd = counts_matrix(tq, vq), counts_matrix(td, vd)
    keep = (np.diff(nq.indptr) > 0) | (np.diff(nd.indptr) > 0)
    nq, nd = nq[keep], nd[keep]
    _check_topics(model, int(keep.sum()), min(len(vq), len(vd)), "pairs")
    T, alpha, beta = model.p.topics, model.p.alpha, args.beta
    rng = np.random.default_rng(args.seed)
    theta = _random_rows(rng, nq.shape[0], T)  # updated in place by each EM step
    state: dict[str, Any] = {"q": np.ascontiguousarray(_random_rows(rng, T, len(vq)).T)}  # words x topics
    state["d"] = state["q"] if one else np.ascontiguousarray(_random_rows(rng, T, len(vd)).T)
    lam = np.zeros((nq.shape[0], T)) if pr else None
    bounds = chunk_bounds(nq.indptr + nd.indptr, max_nnz(T, arrays=6))
    qc, dc = make_chunks(nq, bounds), make_chunks(nd, bounds)
    n_tokens = int(nq.sum() + nd.sum())

    def step() -> tuple[float, float, dict[str, Any]]:
        state["q"], state["d"], ll, obj, st = bltm_step(
            qc,
            dc,
            theta,
            state["q"],
            state["d"],
            alpha,
            beta,
            model.threads,
            one_vocab=one,
            lam=lam,
            pr_steps=args.pr_steps,
            pr_tol=args.pr_tol,
            pr_method=args.pr_method,
        )
        extra = {}
        if pr:
            extra = {
                "pr_residual_max": st.max_residual,
                "pr_residual_mean": st.mean_residual,
                "pr_mean_steps": st.mean_steps,
            }
        return ll, obj, extra

    loop = _em(model, step, args.iterations, args.tol, n_tokens, progress, args.min_iterations)
    model.set_trained(vq, vd, state["q"].T, {} if one else {"phi_doc": state["d"].T})
    variant = "BLTM" + ("-PR" if pr else "") + ("-1V" if one else "")
    log = {
        "model": model.name,
        "variant": variant,
        "topics": T,
        "pairs": int(keep.sum()),
        "dropped_empty": int((~keep).sum()),
        "query_vocabulary": len(vq),
        "title_vocabulary": len(vd),
        "tokens": n_tokens,
        "threads": model.threads,
        **loop,
        "seconds": round(time.perf_counter() - start, 2),
    }
    if pr:
        log["note"] = (
            "with PR the EM maximises the posterior-regularised objective; the logged objective "
            "is the plain MAP objective, which need not increase monotonically"
        )
    return log


def _em(
    model: TopicModel,
    step: Callable[[], tuple[float, float, dict[str, Any]]],
    iterations: int,
    tol: float,
    tokens: int,
    progress: bool,
    min_iterations: int = 0,
) -> dict[str, Any]:
    """Run ``step`` (one EM iteration: log-likelihood, objective, extras) up to ``iterations`` times
    on ``loop.em_loop``: from iteration ``min_iterations`` on, stop by its rule on the
    log-likelihood (not the MAP objective: with many topics the prior terms dwarf it)."""

    def timed(_: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        ll, obj, extra = step()
        dt = max(time.perf_counter() - t0, 1e-9)
        if not np.isfinite(obj):
            raise FloatingPointError(f"{model.name}: EM objective became {obj} at iteration {_ + 1}")
        return {"loglik": ll, "objective": obj, "seconds": round(dt, 4), "tokens_per_s": round(tokens / dt, 1), **extra}

    res = em_loop(
        timed,
        iterations,
        tol=tol,
        min_iterations=min_iterations,
        progress=progress,
        unit="tokens",
        title=f"{model.name} EM ({model.p.topics} topics)",
        items=tokens,
        shown=("objective",),
    )
    history = res["iterations"]
    if res["stopped"].startswith("reached"):
        stopped = f"reached the iteration limit ({iterations}) without the relative change falling below tol {tol:g}"
    else:
        ll, prev = history[-1]["loglik"], history[-2]["loglik"]
        stopped = (
            f"converged at iteration {len(history)}: relative change of the log-likelihood "
            f"{(ll - prev) / abs(prev):.3g} below tol {tol:g}"
        )
    return {"iterations": history, "stopped": stopped}


# ------------------------------------------------------------------------------------ data
def distinct_titles(data: TrainingData) -> list[str]:
    """The title side of the training pairs, each distinct document once, in first-seen order."""
    idx = data.doc_index
    return [data.doc_texts[idx[d]] for d in dict.fromkeys(d for _, d in data.positives)]


def counts_matrix(token_lists: Sequence[Sequence[str]], vocab: Vocabulary) -> sp.csr_matrix:
    """Token lists -> (texts x vocabulary) float64 counts."""
    return count_matrix([vocab.encode(t) for t in token_lists], len(vocab), dtype=np.float64)


def _document_counts(model: TopicModel, texts: Sequence[str], min_count: int) -> tuple[Vocabulary, sp.csr_matrix]:
    """Training vocabulary and document-word counts, empty documents dropped (they carry no
    information about φ); checks the topic count against what the data supports."""
    tokens = [model.analyzer(t) for t in texts]
    vocab = Vocabulary.build(tokens, min_count=min_count)
    counts = counts_matrix(tokens, vocab)
    counts = counts[np.diff(counts.indptr) > 0]
    _check_topics(model, counts.shape[0], len(vocab), "documents")
    return vocab, counts


def _check_topics(model: TopicModel, n_docs: int, n_words: int, what: str) -> None:
    """A clear error when the data cannot support the topic count."""
    limit = min(n_docs, n_words)
    if model.p.topics > limit:
        raise ValueError(
            f"{model.name}: {model.p.topics} topics but the training data has only {n_docs} non-empty "
            f"{what} and {n_words} distinct words; use at most {limit} topics or more data"
        )


def _random_rows(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random distributions (rows x cols) drawn from the flat Dirichlet, to start EM from: from
    uniform θ and φ, EM never breaks the topics' symmetry, and from nearly uniform ones it lingers
    for many iterations near that saddle (worse with more topics)."""
    return normalize_rows(rng.standard_exponential((rows, cols)) + 1e-3)


def to_gensim_corpus(counts: sp.csr_matrix) -> list[list[tuple[int, float]]]:
    """CSR counts -> gensim's bag-of-words corpus (a list of (word id, count) lists)."""
    p, words, n = counts.indptr, counts.indices.tolist(), counts.data.tolist()
    return [list(zip(words[p[i] : p[i + 1]], n[p[i] : p[i + 1]])) for i in range(counts.shape[0])]


# ------------------------------------------------------------------------------------ memo
_FIT_MEMO: OrderedDict[str, tuple[tuple[Any, ...], dict[str, Any]]] = OrderedDict()
_FIT_MEMO_SIZE = 2
"""Trained models kept by (kind, parameters, arguments, training texts): a table's "μ = 0" row and
its mixture row train the same model; the second reuses the first instead of repeating EM."""


def clear_fit_memo() -> None:
    """Forget the in-process memo of trained topic models."""
    _FIT_MEMO.clear()


def _memoized(
    model: TopicModel, args: Params, texts: Sequence[str], train: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """``train()``'s log, or the trained state and log of an identical earlier run (kind, parameters
    but the mixture and threads, arguments, analyzer, texts)."""
    what = {k: v for k, v in model.p.as_dict().items() if k not in ("mu", "lam", "threads", "analyzer")}
    h = hashlib.sha1(
        json.dumps([model.name, what, args.as_dict(), model.analyzer.config()], sort_keys=True, default=str).encode()
    )
    for t in texts:
        h.update(t.encode("utf-8", "replace"))
        h.update(b"\x00")
    key = h.hexdigest()
    hit = _FIT_MEMO.get(key)
    if hit is not None:
        _FIT_MEMO.move_to_end(key)
        model.set_trained(*hit[0])
        return {**hit[1], "reused": "identical training run earlier in this process (in-memory memo)"}
    log = train()
    assert model.query_vocab is not None and model.doc_vocab is not None and model.phi_query is not None
    _FIT_MEMO[key] = ((model.query_vocab, model.doc_vocab, model.phi_query, model.arrays), log)
    while len(_FIT_MEMO) > _FIT_MEMO_SIZE:
        _FIT_MEMO.popitem(last=False)
    return log


# ------------------------------------------------------------------------------------ kernels
def normalize_cols(m: np.ndarray) -> np.ndarray:
    """Columns scaled to sum to 1, in place (an all-zero column becomes uniform)."""
    normalize_rows(m.T)
    return m


def _m_step(accs: list[np.ndarray], phiT: np.ndarray, beta: float) -> np.ndarray:
    """The new φᵀ from the threads' accumulators (summed into the first, no new allocation):
    Σ acc ⊙ φᵀ + β − 1, columns normalised."""
    out = accs[0]
    for a in accs[1:]:
        out += a
    out *= phiT
    out += beta - 1.0
    return normalize_cols(out)


def plsa_step(
    chunks: Sequence[Chunk], theta: np.ndarray, phiT: np.ndarray, alpha: float, beta: float, threads: int
) -> tuple[np.ndarray, float, float]:
    """One MAP-EM iteration of PLSA (Hofmann 1999 with Dirichlet priors, Gao 2011 §5.2).

    ``theta`` (docs x topics) is updated in place, chunk by chunk, once that chunk's E-step is
    done (each row is read by its own chunk only); ``phiT`` is φ transposed (words x topics, so
    gathering a word's topic vector reads contiguous memory). Returns the new φᵀ (a new array),
    and the log-likelihood Σ n·log s and MAP objective (log-likelihood + (α−1)Σlog θ +
    (β−1)Σlog φ) of the parameters given. Memory: θ and φᵀ, one words x topics accumulator per
    thread, and the chunks' gathered arrays.

    Args:
        chunks: the documents' word counts in chunks.
        theta: (docs, topics) θ, updated in place.
        phiT: (words, topics) φᵀ.
        alpha: the Dirichlet prior on θ.
        beta: the Dirichlet prior on φ.
        threads: worker threads.

    Returns:
        The new φᵀ, the log-likelihood and the MAP objective."""

    def work(group: list[int]) -> tuple[np.ndarray, float, float]:
        word_acc = np.zeros_like(phiT)
        ll = prior = 0.0
        for i in group:
            ch = chunks[i]
            th = theta[ch.r0 : ch.r1]
            phiT_w = phiT[ch.words]
            s, r, d = side(ch, th, phiT_w[ch.local], phiT_w)
            ll += float(ch.data @ np.log(s))
            prior += _log_prior(th, alpha)
            word_acc[ch.words] += r.T @ th
            d *= th
            d += alpha - 1.0
            theta[ch.r0 : ch.r1] = normalize_rows(d)
        return word_acc, ll, prior

    parts = run_groups(work, len(chunks), threads)
    ll = sum(p[1] for p in parts)
    objective = ll + sum(p[2] for p in parts) + _log_prior(phiT, beta)
    return _m_step([p[0] for p in parts], phiT, beta), ll, objective


def _log_prior(m: np.ndarray, a: float) -> float:
    """(a − 1)·Σ log m: the Dirichlet log density up to a constant (0 when a = 1)."""
    return 0.0 if a == 1.0 else float((a - 1.0) * np.log(np.maximum(m, TINY)).sum())


@dataclass
class PRStats:
    """How well the PR projection met its constraints: per pair the largest |fraction of query
    tokens on z − fraction of title tokens on z| after the last dual step."""

    max_residual: float = 0.0
    mean_residual: float = 0.0
    mean_steps: float = 0.0
    pairs: int = 0


def _pr_setup(cq: Chunk, cd: Chunk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per pair of a chunk: 1/|Q| and 1/|D| as columns (0 where either side is empty: such a pair
    is not constrained) and whether the pair is constrained."""
    active = (cq.length > 0) & (cd.length > 0)
    inv_q = np.where(active, 1.0 / np.maximum(cq.length, 1.0), 0.0)[:, None]
    inv_d = np.where(active, 1.0 / np.maximum(cd.length, 1.0), 0.0)[:, None]
    return inv_q, inv_d, active


def bltm_step(
    q_chunks: Sequence[Chunk],
    d_chunks: Sequence[Chunk],
    theta: np.ndarray,
    phiQT: np.ndarray,
    phiDT: np.ndarray,
    alpha: float,
    beta: float,
    threads: int,
    *,
    one_vocab: bool = False,
    lam: np.ndarray | None = None,
    pr_steps: int = 20,
    pr_tol: float = 1e-3,
    pr_method: str = "diag",
) -> tuple[np.ndarray, np.ndarray, float, float, PRStats]:
    """One MAP-EM iteration of the bilingual topic model (Gao 2011 §3.1): pair i's query tokens and
    title tokens share θ_i; query words come from φᵠ, title words from φᴰ, given transposed
    (``phiQT``: query words x topics, ``phiDT``: title words x topics; the same array under
    ``one_vocab``). ``theta`` (pairs x topics) is updated in place. Returns the new φᵠᵀ and φᴰᵀ
    (the same array under ``one_vocab``), the log-likelihood and MAP objective of the parameters
    given (unprojected posteriors), and PR statistics.

    With ``lam`` (pairs x topics dual variables, updated in place and so warm-started across EM
    iterations) each pair's posteriors are first projected by posterior regularisation (§3.2,
    Eq. 9-13) onto the set where the expected fraction of query tokens on each topic equals that
    of title tokens: q(z|w∈Q) ∝ p(z|w)·exp(−λ_z/|Q|), q(z|w∈D) ∝ p(z|w)·exp(λ_z/|D|). Because
    p(z|w) ∝ θ_z·φ_z,w, this is the ordinary E-step with θ tilted per side, so each dual step costs
    one E-step over the chunk. λ maximises the concave dual, whose gradient is
    fraction_Q(z) − fraction_D(z): ``pr_method = "gradient"`` is plain gradient ascent (the paper's)
    with the safe step 1/L, L = (1/|Q| + 1/|D|)/2 bounding the dual's curvature; ``"diag"`` (the
    default) scales each coordinate by the diagonal of the curvature, fraction_Q(z)/|Q| +
    fraction_D(z)/|D| (an upper bound of the Hessian at the current λ), with the step clipped to
    twice the safe step: it meets the constraint in far fewer steps than plain gradient ascent.
    At most ``pr_steps`` steps per chunk, fewer once every pair's largest
    violation is below ``pr_tol``. Pairs with an empty query or title are not constrained.

    Args:
        q_chunks: the pairs' query word counts in chunks.
        d_chunks: their title word counts, chunked alike.
        theta: (pairs, topics) θ, updated in place.
        phiQT: (query words, topics) φᵠᵀ.
        phiDT: (title words, topics) φᴰᵀ.
        alpha: the Dirichlet prior on θ.
        beta: the Dirichlet prior on φ.
        threads: worker threads.
        one_vocab: queries and titles share one vocabulary (and φ).
        lam: (pairs, topics) PR dual variables, updated in place (None: no PR).
        pr_steps: the most dual steps per chunk.
        pr_tol: the constraint violation that stops them.
        pr_method: "diag" or "gradient".

    Returns:
        The new φᵠᵀ and φᴰᵀ, the log-likelihood, the MAP objective and PR statistics."""

    def work(group: list[int]):
        acc_q = np.zeros_like(phiQT)
        acc_d = acc_q if one_vocab else np.zeros_like(phiDT)
        ll, prior, res_max, res_sum, steps_sum, n_pr = 0.0, 0.0, 0.0, 0.0, 0.0, 0
        for i in group:
            cq, cd = q_chunks[i], d_chunks[i]
            th = theta[cq.r0 : cq.r1]
            pq_w, pd_w = phiQT[cq.words], phiDT[cd.words]
            gq, gd = pq_w[cq.local], pd_w[cd.local]
            sq, rq, dq = side(cq, th, gq, pq_w)
            sd, rd, dd = side(cd, th, gd, pd_w)
            ll += float(cq.data @ np.log(sq)) + float(cd.data @ np.log(sd))
            prior += _log_prior(th, alpha)
            aq = ad = th
            if lam is not None:
                lm = lam[cq.r0 : cq.r1]
                inv_q, inv_d, active = _pr_setup(cq, cd)
                if active.any():
                    eta = np.where(active, 2.0 / np.maximum(inv_q[:, 0] + inv_d[:, 0], 1e-12), 0.0)[:, None]
                    cap = 2.0 * eta
                    inactive = (~active)[:, None].astype(np.float64)  # keeps 0/0 out of unconstrained rows
                    for step in range(pr_steps + 1):
                        aq, ad = _tilt(th, -lm * inv_q), _tilt(th, lm * inv_d)
                        sq, rq, dq = side(cq, aq, gq, pq_w)
                        sd, rd, dd = side(cd, ad, gd, pd_w)
                        grad = aq * dq * inv_q - ad * dd * inv_d
                        worst = np.abs(grad).max(axis=1)
                        if step == pr_steps or worst.max() < pr_tol:
                            break
                        if pr_method == "diag":
                            h = aq * dq * inv_q * inv_q + ad * dd * inv_d * inv_d
                            lm += np.clip(grad / (h + 1e-3 * (inv_q + inv_d) + inactive), -cap, cap)
                        else:
                            lm += eta * grad
                    res_max = max(res_max, float(worst[active].max()))
                    res_sum += float(worst[active].sum())
                    steps_sum += step * int(active.sum())
                    n_pr += int(active.sum())
            acc_q[cq.words] += rq.T @ aq
            acc_d[cd.words] += rd.T @ ad
            new = aq * dq
            new += ad * dd
            new += alpha - 1.0
            theta[cq.r0 : cq.r1] = normalize_rows(new)  # after every use of this chunk's θ rows
        return acc_q, (None if one_vocab else acc_d), ll, prior, res_max, res_sum, steps_sum, n_pr

    parts = run_groups(work, len(q_chunks), threads)
    ll = sum(p[2] for p in parts)
    n_pr = sum(p[7] for p in parts)
    stats = PRStats(
        max((p[4] for p in parts), default=0.0),
        sum(p[5] for p in parts) / max(n_pr, 1),
        sum(p[6] for p in parts) / max(n_pr, 1),
        n_pr,
    )
    objective = ll + sum(p[3] for p in parts) + _log_prior(phiQT, beta)
    new_q = _m_step([p[0] for p in parts], phiQT, beta)
    if one_vocab:
        return new_q, new_q, ll, objective, stats
    objective += _log_prior(phiDT, beta)
    return new_q, _m_step([p[1] for p in parts], phiDT, beta), ll, objective, stats


def _tilt(theta: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """θ ⊙ exp(exponent), each row rescaled by its largest factor (no overflow; posteriors are
    invariant to a per-row scale)."""
    return theta * np.exp(exponent - exponent.max(axis=1, keepdims=True))


def pr_fractions(
    q_chunks: Sequence[Chunk],
    d_chunks: Sequence[Chunk],
    theta: np.ndarray,
    phiQT: np.ndarray,
    phiDT: np.ndarray,
    lam: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Expected fraction of each pair's query tokens and of its title tokens on each topic under
    the (projected, when ``lam`` is given) posteriors: what the PR constraint equates.

    Args:
        q_chunks: the pairs' query word counts in chunks.
        d_chunks: their title word counts, chunked alike.
        theta: (pairs, topics) θ.
        phiQT: (query words, topics) φᵠᵀ.
        phiDT: (title words, topics) φᴰᵀ.
        lam: PR dual variables (None: unprojected).

    Returns:
        (pairs, topics) fractions of the query tokens and of the title tokens."""
    fq, fd = np.zeros_like(theta), np.zeros_like(theta)
    for cq, cd in zip(q_chunks, d_chunks):
        th = theta[cq.r0 : cq.r1]
        aq = ad = th
        if lam is not None:
            lm = lam[cq.r0 : cq.r1]
            inv_q, inv_d, _ = _pr_setup(cq, cd)
            aq, ad = _tilt(th, -lm * inv_q), _tilt(th, lm * inv_d)
        pq_w, pd_w = phiQT[cq.words], phiDT[cd.words]
        _, _, dq = side(cq, aq, pq_w[cq.local], pq_w)
        _, _, dd = side(cd, ad, pd_w[cd.local], pd_w)
        fq[cq.r0 : cq.r1] = aq * dq / np.maximum(cq.length, 1e-12)[:, None]
        fd[cd.r0 : cd.r1] = ad * dd / np.maximum(cd.length, 1e-12)[:, None]
    return fq, fd
