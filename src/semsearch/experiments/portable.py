"""A two-stage search without judgments (``make portable``): the portable stage-2 ranker
(``ranking.lambdamart.PORTABLE``) is trained once on Home Depot's judgments, then re-ranks
collections it never saw, measured as users meet them: every test query through HTTP ``/search``
over the whole collection, beside BM25 with the same analyzer served the same way.

Each collection gets, from one encoding of its documents (the vector cache): a BM25 bundle, a
semantic-only bundle (the encoder alone), a stage-1 bundle (BM25 and the encoder, no ranker) searched
with ``merge=rrf``, and the two-stage bundle (that stage 1 and the portable ranker). No collection's
judgments are read before its bundles are built; the test judgments only score the served runs."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..index.bundle import MANIFEST
from ..models.base import sha256_file
from ..params import Params, param
from ..progress import note
from .click_loop import http_top_k, ndcg_per_query, served
from .result import json_default

SYSTEMS = ("BM25", "semantic only", "RRF (BM25, semantic)", "portable two-stage")


@dataclasses.dataclass(frozen=True)
class PortableOptions(Params):
    """What ``make portable`` runs: ``collections`` (data sets with a test split) and their
    ``fields``; ``source``: the data set the ranker learns on (its train and dev judgments) and
    ``source_fields``; ``encoder``: a saved bi-encoder folder (all-MiniLM-L6-v2 untrained, scored
    by cosine) used by every bundle; ``analyzer``: BM25's, the same in every bundle; ``ranker``: a
    trained portable ranker to use (empty: train one under ``out``, ``PORTABLE`` changed by
    ``ranker_params``); ``out``: bundles, runs and
    results; ``split``: the queries scored."""

    kind: ClassVar[str] = "portable"

    collections: list[str] = param(["scifact", "trec-dl-2019", "cranfield", "cisi"])
    fields: str = "title+text"
    source: str = "homedepot"
    source_fields: str = "title"
    encoder: str = ""
    analyzer: str = "english"
    ranker: str = ""
    ranker_params: dict[str, Any] = param({})
    out: str = "results/portable"
    split: str = "test"


def _build(data: str, models: list[str], out: Path, o: PortableOptions, ranker: Path | None = None) -> Path:
    """The bundle ``semsearch index build --data DATA --models ... [--ranker RANKER]`` builds (BM25
    with ``o.analyzer``, the fields ``o`` names, the vectors cached under ``o.out``, no spelling
    corrector); an existing bundle is kept."""
    from ..data import open_dataset
    from ..index import build_bundle
    from ..index.bundle import BuildOptions
    from ..index.bundle.build import included_ranker
    from ..plugins import resolve_model

    if (out / "manifest.json").is_file():
        return out
    fields = o.fields if data != o.source else o.source_fields
    corpus = open_dataset(data).corpus()
    built = [resolve_model(m, analyzer=o.analyzer) if m == "bm25" else resolve_model(m) for m in models]
    options = BuildOptions.from_mapping(
        {"dataset": data, "fields": fields, "vector_cache": str(Path(o.out) / "vectors"), "spelling": False},
        where="portable",
    )
    rk = included_ranker(ranker, corpus, options.fields) if ranker is not None else None
    return build_bundle(corpus, built, out, options, ranker=rk)


def train_ranker(o: PortableOptions) -> Path:
    """The portable ranker learnt on ``o.source``'s stage 1 (BM25 ∪ the encoder), depths fixed;
    its directory (``OUT/source/ranker``)."""
    from ..index.bundle.retrain import retrain_ranker
    from ..index.bundle.search import Bundle
    from ..ranking.lambdamart import PORTABLE
    from ..training.ranker import stage_ranker_trainer

    out = Path(o.out) / o.source
    two = out / "two-stage"
    if not (two / "manifest.json").is_file():
        stage1 = _build(o.source, ["bm25", o.encoder], out / "stage1", o)
        b = Bundle.load(stage1, result_cache=0)
        corpus = b.corpus
        b.close()
        params = {**PORTABLE, **o.ranker_params}
        trainer = stage_ranker_trainer(o.source, corpus, o.source_fields, params, where="portable ranker")
        retrain_ranker(stage1, two, trainer, note={"learnt_from": f"{o.source} judgments (portable features)"})
    return two / "ranker"


def _served_text(query: str) -> str:
    """The query as the service accepts it: at most ``MAX_QUERY_CHARS`` characters, cut at a space
    (a few CISI queries are whole abstracts), the same text for every system compared."""
    from ..serving.state import MAX_QUERY_CHARS

    if len(query) <= MAX_QUERY_CHARS:
        return query
    return query[: MAX_QUERY_CHARS + 1].rsplit(None, 1)[0]


def _sign_p(a: dict[str, float], b: dict[str, float]) -> float:
    """Two-sided sign test over the queries where ``a`` and ``b`` differ."""
    from scipy.stats import binomtest

    d = [a[q] - b[q] for q in a if q in b and a[q] != b[q]]
    return float(binomtest(sum(x > 0 for x in d), len(d)).pvalue) if d else 1.0


def run(o: PortableOptions) -> dict[str, Any]:
    """Every collection's four bundles built and served, the test queries scored; writes
    ``results.json`` and ``tables.md`` under ``o.out`` and returns the results. Bundles and served
    runs already under ``o.out`` are reused (a run only while its bundle is unchanged)."""
    from ..data import open_dataset
    from ..evaluation import paired_ttest

    start = time.perf_counter()
    out = Path(o.out)
    if not o.encoder or not Path(o.encoder).is_dir():
        raise ValueError(f"portable: encoder must be a saved bi-encoder folder, got {o.encoder!r}")
    ranker = Path(o.ranker) if o.ranker else train_ranker(o)
    results: dict[str, Any] = {
        "options": o.as_dict(),
        "ranker": json.loads((ranker / "config.json").read_text(encoding="utf-8")),
        "collections": {},
    }
    for name in o.collections:
        ds = open_dataset(name)
        queries = ds.queries()
        d = out / name
        bundles = {
            "BM25": (_build(name, ["bm25"], d / "bm25", o), None),
            "semantic only": (_build(name, [o.encoder], d / "semantic", o), None),
            "RRF (BM25, semantic)": (_build(name, ["bm25", o.encoder], d / "stage1", o), "rrf"),
            "portable two-stage": (
                _build(name, ["bm25", o.encoder], d / "two-stage", o, ranker),
                None,
            ),
        }
        # the judgments are read only now, to score what was served
        test = ds.qrels(o.split)
        test_q = {q: _served_text(queries[q]) for q in test if q in queries and queries[q].strip()}
        per: dict[str, dict[str, float]] = {}
        for system, (path, merge) in bundles.items():
            cache = d / "runs" / f"{path.name}-{merge or 'default'}-{o.split}.json"
            if cache.is_file() and json.loads(cache.read_text())["manifest"] == sha256_file(path / MANIFEST):
                served_run = json.loads(cache.read_text())["run"]
            else:
                with served(path, out / "serve.log") as base:
                    served_run = http_top_k(base, test_q, merge=merge)
                cache.parent.mkdir(parents=True, exist_ok=True)
                cache.write_text(json.dumps({"manifest": sha256_file(path / MANIFEST), "run": served_run}))
            per[system] = ndcg_per_query(served_run, test)
            note(f"{name}, {system}: nDCG@10 {np.mean(list(per[system].values())):.3f} over {len(per[system])} queries")
        rows = {}
        for system in SYSTEMS:
            t = paired_ttest(per[system], per["BM25"])
            rows[system] = {
                "ndcg@10": float(np.mean(list(per[system].values()))),
                "delta": float(t.mean_diff),
                "p_ttest": float(t.p),
                "p_sign": _sign_p(per[system], per["BM25"]),
            }
        results["collections"][name] = {
            "documents": len(ds.corpus().ids),
            "queries": len(per["BM25"]),
            "queries_cut": sum(test_q[q] != queries[q] for q in test_q),
            "rows": rows,
        }
    results["seconds"] = round(time.perf_counter() - start)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=json_default) + "\n")
    (out / "tables.md").write_text(tables(results) + "\n")
    return results


def _p(x: float) -> str:
    return "< 0.001" if x < 0.001 else f"{x:.3f}"


def tables(results: dict[str, Any]) -> str:
    """The results as markdown: one row per collection and system, nDCG@10 and the difference from
    BM25 with its paired t-test and sign-test p-values."""
    out = [
        "| collection | documents | queries | system | nDCG@10 | vs BM25 | p (t-test) | p (sign) |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for name, c in results["collections"].items():
        for i, (system, r) in enumerate(c["rows"].items()):
            first = i == 0
            cells = [name if first else "", f"{c['documents']:,}" if first else "", str(c["queries"]) if first else ""]
            if system == "BM25":
                cells += [system, f"{r['ndcg@10']:.3f}", "", "", ""]
            else:
                cells += [system, f"{r['ndcg@10']:.3f}", f"{r['delta']:+.3f}", _p(r["p_ttest"]), _p(r["p_sign"])]
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def headline(results: dict[str, Any]) -> str:
    """One line: the portable two-stage search's nDCG@10 difference from BM25 per collection."""
    parts = [
        f"{name} {c['rows']['portable two-stage']['delta']:+.3f}"
        f" ({c['rows']['portable two-stage']['ndcg@10']:.3f} vs {c['rows']['BM25']['ndcg@10']:.3f})"
        for name, c in results["collections"].items()
    ]
    return "; ".join(parts)


def install_ranker(ranker: Path, target: Path) -> None:
    """Copy a trained portable ranker to ``target`` (the package's ``ranking/portable``), replacing it."""
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(ranker, tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def main(argv: list[str] | None = None) -> None:
    """``python -m semsearch.experiments.portable [NAME=VALUE ...] [--install]``: ``PortableOptions``
    settings; ``--install`` copies the trained ranker into the package (``--ranker portable``)."""
    import sys

    from ..ranking.lambdamart import PORTABLE_DIR

    args = list(sys.argv[1:] if argv is None else argv)
    install = "--install" in args
    settings = {}
    for a in args:
        if a == "--install":
            continue
        k, sep, v = a.partition("=")
        if not sep:
            raise SystemExit(f"expected NAME=VALUE, got {a!r}")
        try:
            settings[k] = json.loads(v)
        except json.JSONDecodeError:
            settings[k] = v
    o = PortableOptions.from_mapping(settings, where="portable")
    results = run(o)
    print(tables(results))
    if install:
        install_ranker(Path(o.ranker) if o.ranker else Path(o.out) / o.source / "two-stage" / "ranker", PORTABLE_DIR)


if __name__ == "__main__":
    main()
