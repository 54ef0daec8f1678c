"""The click loop end to end on a judged collection (``semsearch clicks loop``, ``make click-loop``):
simulated users click on what a logging ranker shows; click models are fitted from the log; a
two-stage bundle's ranker is learnt from the clicks alone; every bundle is scored through HTTP;
and two bundles are compared online by simulated interleaving, A/B buckets and counterfactual
estimates. The goals it reports are issue 49's 4 and 5 (docs/clicks.md).

The setting, as the unbiased learning-to-rank literature simulates it (Joachims, Swaminathan &
Schnabel 2017; Oosterhuis & de Rijke 2020): the judged train queries arrive Zipf-like; each
impression shows the logger's top 10 to a position-based user (examination ρ_r^η, P(click | grade
g) = ε + (1 − ε)(2^g − 1)/(2^gmax − 1)); unjudged documents count as grade 0. The logger is the
served search in process (its spelling correction included). A share ``shuffle_rate`` of the
impressions shows the top 10 in a random order, the randomisation that lets a position-based
model be fitted from the log (Wang et al. 2018). The click-learnt bundle keeps the grade-trained
bundle's stage 1 (lexical ∪ vector retrieval, no judgments in it) and learns its stage-2 ranker
from the log (``index retrain --clicks``), so the comparison is of the rankers' training signal.
"""

from __future__ import annotations

import dataclasses
import json
import math
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from ..params import ParamError, Params, param
from ..progress import note

K = 10
"""The page size the simulated users see (and nDCG's cut-off)."""
DEBIAS_ROWS = ("lightgbm", "ipw", "none")


@dataclasses.dataclass(frozen=True)
class LoopOptions(Params):
    """What ``semsearch clicks loop`` runs.

    ``data``: the judged data set (train queries are simulated, test queries scored); ``bundle``:
    the grade-trained two-stage bundle (``make serve``'s), whose stage 1 the click-learnt bundles
    share and which is the second logger; ``out``: the results folder (logs, bundles, tables);
    ``impressions``: the simulated impressions per logger; ``curve``: the log prefixes a ranker is
    learnt from (the learning curve; the last is ``impressions``); ``loggers``: ``bm25`` (a BM25
    bundle with the bundle's analyzer and spelling) and/or ``two-stage`` (``bundle`` itself);
    ``debias``: the corrections trained on the whole log beside the first one of the curve
    (``none``: raw clicks); ``eta``/``epsilon``: the position-based users; ``shuffle_rate``: the
    logger's randomised share; ``unshown``: what stage-1 candidates the log never showed teach
    (``negative``: grade 0; ``drop``: nothing); ``runs``: simulated online comparisons per pair;
    ``horizon``: impressions in each interleaving run (A/B runs get ``ab_factor`` times more);
    ``stage_depths``: the stage-1 depths the click-learnt rankers re-rank (chosen on the log's
    held-out queries when several); ``ranker_params``: other lambdamart parameters of those rankers;
    ``seed``: every draw."""

    kind: ClassVar[str] = "clicks loop"

    data: str = "homedepot"
    bundle: str = "bundles/homedepot"
    out: str = "results/click-loop"
    impressions: int = param(10_000_000, ge=1)
    curve: list[int] = param([10_000, 100_000, 1_000_000, 10_000_000])
    loggers: list[str] = param(["bm25", "two-stage"])
    debias: list[str] = param(["lightgbm", "none"])
    eta: float = param(1.0, gt=0)
    epsilon: float = param(0.1, ge=0, lt=1)
    shuffle_rate: float = param(0.1, ge=0, le=1)
    unshown: Literal["negative", "drop"] = "negative"
    stage_depths: list[list[int]] = param([[100, 50]])
    ranker_params: dict[str, Any] = param({})
    runs: int = param(20, ge=1)
    horizon: int = param(20_000, ge=100)
    ab_factor: int = param(50, ge=1)
    fit_impressions: int = param(1_000_000, ge=1000)
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.curve or sorted(set(self.curve)) != list(self.curve) or self.curve[0] < 1:
            raise ParamError(f"{self._label('curve')} must be increasing positive impression counts, got {self.curve}")
        if self.curve[-1] != self.impressions:
            raise ParamError(
                f"{self._label('curve')} must end at {self._label('impressions')} ({self.impressions:,}), "
                f"got {self.curve}"
            )
        bad = [x for x in self.loggers if x not in ("bm25", "two-stage")]
        if bad or not self.loggers:
            raise ParamError(f"{self._label('loggers')}: each must be 'bm25' or 'two-stage', got {self.loggers}")
        bad = [x for x in self.debias if x not in DEBIAS_ROWS]
        if bad or not self.debias:
            raise ParamError(
                f"{self._label('debias')}: each must be one of {', '.join(DEBIAS_ROWS)}, got {self.debias}"
            )


# ---------------------------------------------------------------- the served search, in process and through HTTP


def top_k(bundle: str | Path, queries: Mapping[str, str], k: int = K) -> dict[str, list[str]]:
    """Each query's top ``k`` document ids from ``bundle`` searched in process, as served (spelling
    corrected when the bundle corrects)."""
    from ..index import Bundle

    b = Bundle.load(bundle, result_cache=0)
    try:
        qids = list(queries)
        out: dict[str, list[str]] = {}
        for s in range(0, len(qids), 512):
            part = qids[s : s + 512]
            for q, r in zip(part, b.search_many([queries[q] for q in part], k=k), strict=True):
                out[q] = [h.doc_id for h in r.hits]
        return out
    finally:
        b.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def served(bundle: str | Path, log: Path, extra: Sequence[str] = (), timeout: float = 600.0) -> Iterator[str]:
    """``semsearch serve BUNDLE`` (one worker, no event log unless ``extra`` says so) on a free
    loopback port until the block ends; yields its base URL once ``/ready`` answers 200. Its
    output goes to ``log``."""
    import httpx

    port = _free_port()
    cmd = [sys.executable, "-m", "semsearch.cli", "serve", str(bundle), "--port", str(port), "--workers", "1"]
    if "--events" not in extra:
        cmd += ["--events", "off"]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as err:
        proc = subprocess.Popen([*cmd, *extra], stdout=err, stderr=err)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.time() + timeout
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"semsearch serve {bundle} exited with {proc.returncode}; see {log}")
                try:
                    if httpx.get(base + "/ready", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.time() > deadline:
                    raise RuntimeError(f"semsearch serve {bundle} was not ready in {timeout:.0f} s; see {log}")
                time.sleep(0.2)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def http_top_k(
    base: str, queries: Mapping[str, str], k: int = K, threads: int = 4, merge: str | None = None
) -> dict[str, list[str]]:
    """Each query's top ``k`` from a running service's ``/search`` (over the whole collection);
    ``merge``: the search's merge setting (None: the service's own)."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    with httpx.Client(base_url=base, timeout=60) as client:

        def one(item: tuple[str, str]) -> tuple[str, list[str]]:
            qid, text = item
            r = client.get("/search", params={"q": text, "k": k, **({"merge": merge} if merge else {})})
            if r.status_code != 200:
                raise RuntimeError(f"/search for query {qid} ({text!r}): HTTP {r.status_code}: {r.text[:300]}")
            return qid, [h["doc_id"] for h in r.json()["hits"]]

        with ThreadPoolExecutor(threads) as pool:
            return dict(pool.map(one, queries.items()))


def ndcg_per_query(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """nDCG@10 per judged query (gain 2^g − 1; unjudged = not relevant; a query without hits scores 0)."""
    from ..evaluation import evaluate

    scored = {q: {d: float(len(ids) - i) for i, d in enumerate(ids)} for q, ids in run.items()}
    return dict(evaluate(scored, {q: dict(j) for q, j in qrels.items()}, ["ndcg@10"]).per_query["ndcg@10"])


# ---------------------------------------------------------------- learning from the log


def click_bundle(
    grade_bundle: Path,
    log: Path,
    out: Path,
    *,
    debias: str,
    unshown: str,
    stage_depths: list[list[int]],
    data: str,
    ranker_params: Mapping[str, Any] | None = None,
) -> Path:
    """``grade_bundle`` with its stage-2 ranker learnt from ``log``'s clicks alone (``index
    retrain --clicks``); reused when ``out`` is already a bundle learnt from that log."""
    from ..index.bundle import read_manifest
    from ..index.bundle.retrain import retrain_ranker
    from ..index.bundle.search import Bundle
    from ..training.ranker import stage_ranker_trainer

    params = {**(ranker_params or {}), "debias": debias, "unshown": unshown, "stage_depths": stage_depths}
    learnt = f"clicks of {log} ({json.dumps(params, sort_keys=True)})"
    if (out / "manifest.json").is_file() and read_manifest(out).get("retrained", {}).get("learnt_from") == learnt:
        return out
    b = Bundle.load(grade_bundle, result_cache=0, verify=False)
    corpus, fields = b.corpus, b.manifest.get("fields", "title+text")
    b.close()
    trainer = stage_ranker_trainer(data, corpus, fields, params, clicks=log)
    return retrain_ranker(grade_bundle, out, trainer, note={"learnt_from": learnt})


def bm25_bundle(grade_bundle: Path, out: Path) -> Path:
    """A BM25-only bundle of ``grade_bundle``'s documents with its lexical model's analyzer and
    parameters and its spelling corrector: the logger the literature calls the weak production
    ranker, in its strongest configuration here (the bundle's own analyzer)."""
    from ..index import build_bundle
    from ..index.bundle import BuildOptions
    from ..index.bundle.search import Bundle
    from ..plugins import load_model

    if (out / "manifest.json").is_file():
        return out
    b = Bundle.load(grade_bundle, result_cache=0)
    m = b.manifest
    corpus = b.corpus
    b.close()
    if not m.get("lexical"):
        raise ValueError(f"{grade_bundle} has no lexical model to log with")
    lexical = load_model(grade_bundle / m["lexical"]["path"])
    options = BuildOptions.from_mapping(
        {
            "dataset": m.get("dataset") or "",
            "fields": m.get("fields", "title+text"),
            "spelling": bool(m.get("spelling")),
        }
    )
    return build_bundle(corpus, [lexical], out, options)


# ---------------------------------------------------------------- the loop


def _ttest(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    from ..evaluation import paired_ttest

    t = paired_ttest(a, b)
    return {"delta": t.mean_diff, "p": t.p}


def run_loop(o: LoopOptions) -> dict[str, Any]:
    """Every step of the loop (module docstring) with ``o``; writes ``results.json`` and
    ``tables.md`` under ``o.out`` and returns the results. Logs, bundles and served runs already
    under ``o.out`` from an identical earlier step are reused."""
    from ..clicks import PositionBasedUser, Rankings
    from ..clicks.comparison import online_comparison
    from ..clicks.models import fit_click_models
    from ..clicks.simulate import simulate_log
    from ..data import open_dataset
    from ..index.bundle import MANIFEST
    from ..models.base import sha256_file
    from .result import json_default

    start = time.perf_counter()
    out, grade = Path(o.out), Path(o.bundle)
    if not (grade / "manifest.json").is_file():
        raise ValueError(f"--bundle {grade}: not a bundle (build it first: make bundle)")
    out.mkdir(parents=True, exist_ok=True)
    ds = open_dataset(o.data)
    queries = ds.queries()
    train, test = ds.qrels("train"), ds.qrels("test")
    train_q = {q: queries[q] for q in train if q in queries and queries[q].strip()}
    test_q = {q: queries[q] for q in test if q in queries and queries[q].strip()}
    max_grade = max([1, *(int(g) for judged in train.values() for g in judged.values())])
    user = PositionBasedUser(max_grade, eta=o.eta, epsilon=o.epsilon)
    results: dict[str, Any] = {"options": o.as_dict(), "train_queries": len(train_q), "test_queries": len(test_q)}
    loggers = {"bm25": bm25_bundle(grade, out / "bundles" / "bm25")} if "bm25" in o.loggers else {}
    if "two-stage" in o.loggers:
        loggers["two-stage"] = grade
    bundles: dict[str, Path] = {"grade-trained two-stage bundle": grade}
    if "bm25" in loggers:
        bundles["BM25 bundle"] = loggers["bm25"]
    rows: list[dict[str, Any]] = []
    results["click_models"] = {}
    for name, path in loggers.items():
        t = time.perf_counter()
        run = top_k(path, train_q)
        rankings = Rankings.from_run(run, train, queries, k=K, max_grade=max_grade)
        prefixes = simulate_log(
            rankings, user, o.curve, out / "logs" / name, seed=o.seed, shuffle_rate=o.shuffle_rate, bundle=name
        )
        note(f"logger {name}: {o.impressions:,} impressions logged in {time.perf_counter() - t:.0f} s")
        fit_at = max([n for n in o.curve if n <= o.fit_impressions] or [o.curve[0]])
        results["click_models"][name] = {
            "impressions": fit_at,
            "models": fit_click_models(
                prefixes[o.curve.index(fit_at)],
                seed=o.seed,
                true_examination=user.examination_probabilities(K),
                top_n=K,
            ),
        }
        for i, (n, prefix) in enumerate(zip(o.curve, prefixes, strict=True)):
            for d in o.debias if i == len(o.curve) - 1 else o.debias[:1]:
                key = f"{name} logger, {n:,} impressions, {d}"
                bundles[key] = click_bundle(
                    grade,
                    prefix,
                    out / "bundles" / f"{name}-{n}-{d}",
                    debias=d,
                    unshown=o.unshown,
                    stage_depths=o.stage_depths,
                    data=o.data,
                    ranker_params=o.ranker_params,
                )
                rows.append({"key": key, "logger": name, "impressions": n, "debias": d})
    # every bundle scored as users meet it: through HTTP, test queries, the whole collection
    runs: dict[str, dict[str, list[str]]] = {}
    for key, path in bundles.items():
        cache = out / "runs" / f"{path.name}.json"
        if cache.is_file() and json.loads(cache.read_text())["manifest"] == sha256_file(path / MANIFEST):
            runs[key] = json.loads(cache.read_text())["run"]
            continue
        with served(path, out / "serve.log") as base:
            runs[key] = http_top_k(base, test_q)
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"manifest": sha256_file(path / MANIFEST), "run": runs[key]}))
        note(f"served {key}: {len(runs[key]):,} test queries through HTTP")
    per = {key: ndcg_per_query(run, test) for key, run in runs.items()}
    served_ndcg = {key: float(np.mean(list(p.values()))) for key, p in per.items()}
    results["served_ndcg@10"] = served_ndcg
    grade_score = served_ndcg["grade-trained two-stage bundle"]
    logger_key = {"bm25": "BM25 bundle", "two-stage": "grade-trained two-stage bundle"}
    for row in rows:
        key = row["key"]
        row["ndcg@10"] = served_ndcg[key]
        row["of_grade"] = served_ndcg[key] / grade_score if grade_score else math.nan
        row["vs_logger"] = _ttest(per[key], per[logger_key[row["logger"]]])
        raw = f"{row['logger']} logger, {o.impressions:,} impressions, none"
        if raw in per and raw != key:
            row["vs_raw"] = _ttest(per[key], per[raw])
    results["goal4"] = rows
    # goal 5: pairs of bundles compared online by simulated users on the test queries
    keys = list(per)
    pairs = sorted(
        ((served_ndcg[a] - served_ndcg[b], a, b) for a in keys for b in keys if served_ndcg[a] > served_ndcg[b]),
    )
    chosen = [p for p in pairs if p[0] >= 0.02][:1] + [p for p in pairs if p[0] >= 0.01][:1] + pairs[-1:]
    seen: set[tuple[str, str]] = set()
    results["goal5"] = []
    for delta, a, b in chosen:
        if (a, b) in seen:
            continue
        seen.add((a, b))
        t = time.perf_counter()
        comparison = online_comparison(
            runs[a],
            runs[b],
            test,
            user=user,
            runs=o.runs,
            horizon=o.horizon,
            ab_factor=o.ab_factor,
            seed=o.seed,
            k=K,
        )
        results["goal5"].append({"a": a, "b": b, "delta_ndcg@10": delta, **comparison})
        note(f"online comparison {a} vs {b}: {time.perf_counter() - t:.0f} s")
    results["seconds"] = round(time.perf_counter() - start)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=json_default) + "\n")
    (out / "tables.md").write_text(tables(results) + "\n")
    return results


def _p(x: float) -> str:
    return "< 0.001" if x < 0.001 else f"{x:.3f}"


def _n(x: float | None) -> str:
    return "not within the horizon" if x is None or not math.isfinite(x) else f"{int(x):,}"


def tables(results: Mapping[str, Any]) -> str:
    """Goals 4 and 5 (and the click models) as Markdown tables."""
    served = results["served_ndcg@10"]
    lines = [
        "### Goal 4: bundles learnt from clicks alone (served nDCG@10, test queries through HTTP, whole collection)",
        "",
        f"Grade-trained two-stage bundle: **{served['grade-trained two-stage bundle']:.4f}**"
        + (f"; BM25 bundle: {served['BM25 bundle']:.4f}" if "BM25 bundle" in served else ""),
        "",
        "| logger | impressions | clicks corrected by | served nDCG@10 | of grade-trained "
        "| vs logger (Δ, p) | vs raw clicks (Δ, p) |",
        "|---|---:|---|---:|---:|---|---|",
    ]
    for r in results["goal4"]:
        vs_raw = f"{r['vs_raw']['delta']:+.4f}, {_p(r['vs_raw']['p'])}" if "vs_raw" in r else ""
        lines.append(
            f"| {r['logger']} | {r['impressions']:,} | {r['debias']} | {r['ndcg@10']:.4f} | {r['of_grade']:.1%} | "
            f"{r['vs_logger']['delta']:+.4f}, {_p(r['vs_logger']['p'])} | {vs_raw} |"
        )
    lines += [
        "",
        "### Goal 5: comparing two bundles online (simulated users, test queries)",
        "",
        "| A | B | Δ served nDCG@10 | interleaving: median impressions to p < 0.05 (detected) "
        "| A/B: median impressions (detected) | A/B impressions for interleaving's power "
        "| counterfactual A − B from the A/B log (IPS, p; sign agrees) |",
        "|---|---|---:|---|---|---|---|",
    ]
    for c in results["goal5"]:
        i, ab = c["interleaving"], c["ab"]
        cf = c.get("counterfactual")
        cf_text = ""
        if cf:
            agrees = "yes" if (cf["ips"]["value"] > 0) == (c["delta_ndcg@10"] > 0) else "no"
            cf_text = f"{cf['ips']['value']:+.4f}, {_p(cf['p_ips'])}; {agrees}"
        lines.append(
            f"| {c['a']} | {c['b']} | {c['delta_ndcg@10']:+.4f} | {_n(i['median_impressions'])} "
            f"({i['detected']}/{c['runs']} runs of {c['horizon']:,}) | {_n(ab['median_impressions'])} "
            f"({ab['detected']}/{c['runs']} runs of {ab['horizon']:,}) "
            f"| {_n(ab['impressions_for_interleaving_power'])} "
            f"| {cf_text} |"
        )
    lines += ["", "### Click models fitted from the log (held out: 25 % of the sessions)", ""]
    lines += [
        "| logger | impressions | model | log-likelihood | perplexity | fit (s) |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for name, fit in results["click_models"].items():
        for m in fit["models"]:
            lines.append(
                f"| {name} | {fit['impressions']:,} | {m['model']} | {m['log_likelihood']:.4f} | "
                f"{m['perplexity']:.4f} | {m['fit_s']} |"
            )
    return "\n".join(lines)
