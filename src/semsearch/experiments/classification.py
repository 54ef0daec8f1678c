"""MT-DNN's query-classification experiments (Liu et al. 2015 §3): Table 2 (AUC per domain of
SVM-Word, SVM-Letter, the single-task DNN and MT-DNN, plus the model's size and latency, §3.3)
and the domain-adaptation study of Figures 4 and 5 (per held-out domain: MT-DNN trained on the
other tasks, then classifiers on 0.1-100 % of that domain's labels)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..data import DomainTasks, EvalSet, TrainingData, open_dataset, open_domain_set
from ..data.files import atomic_write, write_json
from ..evaluation import auc
from ..models.classifiers import letter_trigram_features, svm_scores, word_ngram_features
from ..models.mtdnn import MTDNN
from ..plugins import create_model
from ..progress import track
from ..text import TrigramHasher
from ..training import recipe
from ..training.args import MTDNNArgs
from ..training.mtdnn import classification_auc, train_mtdnn
from .cache import cached_training
from .result import Check
from .spec import SYSTEMS, ClassificationSpec


@dataclass
class ClassificationResult:
    """AUC tables (system -> domain -> AUC), checks against the spec, and extra measurements."""

    spec: ClassificationSpec
    auc: dict[str, dict[str, float]]  # Table 2: system -> domain -> AUC; adaptation: series -> ...
    checks: list[Check]
    seconds: float
    details: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)  # adaptation: figure -> domain -> series -> [AUC]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_markdown(self) -> str:
        s = self.spec
        lines = [
            f"# {s.title}",
            "",
            f"Source: {s.source}. Data: `query-domains/{s.domain_set}.tsv`, "
            f"domains {', '.join(s.domains)}; AUC on the test split.",
            "",
        ]
        if s.notes:
            lines += [s.notes.strip(), ""]
        if s.kind == "classification":
            lines += self._table2()
        else:
            lines += self._adaptation()
        if self.checks:
            lines += ["", "Expected ranges:", ""]
            for c in self.checks:
                verdict = "ok" if c.ok else "OUT OF RANGE"
                lines.append(f"- {c.label} {c.metric} = {c.value:.4f}, expected [{c.low}, {c.high}]: {verdict}")
        lines += ["", f"Run time: {self.seconds:.1f} s.", ""]
        return "\n".join(lines)

    def _table2(self) -> list[str]:
        doms = self.spec.domains
        head = "| system | " + " | ".join(doms) + " | mean |"
        lines = [head, "|---|" + "---:|" * (len(doms) + 1)]
        for system, row in self.auc.items():
            paper = self.spec.paper.get(system, {})
            cells = [f"{row[d]:.4f}" + (f" ({paper[d] / 100:.4f})" if d in paper else "") for d in doms]
            lines.append(f"| {system} | " + " | ".join(cells) + f" | {row['mean']:.4f} |")
        lines += ["", "Paper's figures in parentheses (its AUC / 100)." if self.spec.paper else ""]
        order = self.details.get("ordering", {})
        if order:
            lines += ["", "The paper's ordering per domain (MT-DNN ≥ DNN > SVM-Word > SVM-Letter):", ""]
            for claim, held in order.items():
                failing = ", ".join(d for d, ok in held.items() if not ok) or "all hold"
                lines.append(
                    f"- {claim}: holds in {sum(held.values())} of {len(held)} domains "
                    f"({failing}{' fail' if not all(held.values()) else ''})"
                )
        size = self.details.get("compactness")
        if size:
            lines += [
                "",
                "Compactness (§3.3):",
                "",
                f"- MT-DNN saved size: {size['mtdnn_bytes'] / 1e6:.2f} MB ({size['mtdnn_params']:,} parameters, "
                f"{size['trigrams']:,} letter trigrams)",
                f"- SVM-Word: {size['svm_word_features']:,} word n-gram features per domain "
                f"({size['svm_word_bytes'] / 1e6:.2f} MB of float64 weights for {len(self.spec.domains)} domains)",
                f"- classification latency, one query at a time, every domain: p50 {size['latency_p50_ms']:.3f} ms, "
                f"p99 {size['latency_p99_ms']:.3f} ms ({size['latency_queries']} test queries, 1 thread)",
            ]
        return lines

    def _adaptation(self) -> list[str]:
        fr = self.spec.fractions
        lines = []
        for fig, title in (
            ("figure4", "Figure 4: SVM on each feature representation"),
            ("figure5", "Figure 5: DNN1 (all layers from scratch) vs DNN2 (MT-DNN's l2 fixed) vs SVM on l2"),
        ):
            lines += [
                f"## {title}",
                "",
                "| domain | series | " + " | ".join(f"{f * 100:g} %" for f in fr) + " |",
                "|---|---|" + "---:|" * len(fr),
            ]
            for dom, series in self.figures.get(fig, {}).items():
                for name, vals in series.items():
                    lines.append(f"| {dom} | {name} | " + " | ".join(f"{v:.4f}" for v in vals) + " |")
            lines += ["", f"![{title}]({self.spec.name}-{fig}.png)", ""]
        wins = self.details.get("wins", {})
        if wins:
            lines += ["Where the shared representation helps (per fraction, over the domains):", ""]
            for claim, per_fraction in wins.items():
                lines.append(f"- {claim}: " + ", ".join(f"{f} {n}" for f, n in per_fraction.items()))
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "title": self.spec.title,
            "kind": self.spec.kind,
            "auc": self.auc,
            "figures": self.figures,
            "details": self.details,
            "seconds": self.seconds,
            "checks": [dict(c.__dict__, ok=c.ok) for c in self.checks],
        }

    def write(self, out_dir: str | Path) -> Path:
        """``NAME.md``, ``NAME.json`` and, for the adaptation study, the two figures as PNG."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with atomic_write(out / f"{self.spec.name}.md") as f:
            f.write(self.to_markdown())
        write_json(out / f"{self.spec.name}.json", self.to_json())
        if self.figures:
            for fig in self.figures:
                plot_adaptation(self.figures[fig], self.spec.fractions, out / f"{self.spec.name}-{fig}.png", fig)
        return out / f"{self.spec.name}.md"


def plot_adaptation(series: dict[str, dict[str, list[float]]], fractions: list[float], path: Path, title: str) -> None:
    """One panel per domain: AUC against log10 of the label fraction (the papers' x-axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doms = list(series)
    fig, axes = plt.subplots(1, len(doms), figsize=(3.2 * len(doms), 3.0), squeeze=False)
    x = [math.log10(f) for f in fractions]
    for ax, dom in zip(axes[0], doms):
        for name, vals in series[dom].items():
            ax.plot(x, vals, marker="o", label=name)
        ax.set_title(dom)
        ax.set_xlabel("log10(fraction of labels)")
        ax.set_xticks(x)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("AUC")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


# ------------------------------------------------------------------------------------ running
class _Run:
    """Data and cached model training shared by both kinds of classification spec."""

    def __init__(self, spec: ClassificationSpec, progress: bool, model_dir: Path | None, retrain: bool):
        self.spec, self.progress, self.model_dir, self.retrain = spec, progress, model_dir, retrain
        self.records = open_domain_set(spec.domain_set)
        self._tasks: dict[tuple[tuple[str, ...], str], DomainTasks] = {}
        for split in ("train", "dev", "test"):  # every domain needs both classes in every split: fail early
            self.tasks(spec.domains, split)
        self._ranking: tuple[TrainingData, EvalSet] | None = None

    def tasks(self, domains: list[str], split: str) -> DomainTasks:
        """The classification tasks of ``domains`` on ``split`` (built once per run)."""
        key = (tuple(domains), split)
        if key not in self._tasks:
            self._tasks[key] = DomainTasks.from_records(self.records, domains, split)
        return self._tasks[key]

    def ranking(self) -> tuple[TrainingData, EvalSet] | tuple[None, None]:
        if not self.spec.ranking_dataset:
            return None, None
        if self._ranking is None:
            ds = open_dataset(self.spec.ranking_dataset)
            self._ranking = TrainingData.from_dataset(ds, "train", threshold=3), EvalSet.judged(ds, "dev")
        return self._ranking

    def mtdnn(self, domains: list[str], params: dict[str, Any], ranking: bool) -> MTDNN:
        """An MT-DNN over ``domains`` (+ ranking), trained on the train split, dev for stopping."""
        kwargs = {**params, "domain_set": self.spec.domain_set, "domains": domains, "ranking": ranking}
        recipe = {
            "experiment": "classification",
            "domain_set": self.spec.domain_set,
            "model": "mt-dnn",
            "params": kwargs,
            "ranking_dataset": self.spec.ranking_dataset if ranking else "",
        }

        def train() -> tuple[MTDNN, dict[str, Any]]:
            model, args = _mtdnn(kwargs)
            data, dev = self.ranking() if ranking else (None, None)
            tr = self.tasks(domains, "train") if domains else None
            dv = self.tasks(domains, "dev") if domains else None
            return model, train_mtdnn(model, data, dev, args=args, tasks=tr, dev_tasks=dv, progress=self.progress)

        model, _ = cached_training(self.model_dir, "mt-dnn", recipe, train, self.retrain)
        return model  # type: ignore[return-value]  # an MT-DNN


def _mtdnn(params: dict[str, Any]) -> tuple[MTDNN, MTDNNArgs]:
    """An untrained MT-DNN and its training arguments from one parameter mapping (``recipe``)."""
    model_kw, args = recipe("mt-dnn", params, where="mt-dnn")
    return create_model("mt-dnn", **model_kw), args  # type: ignore[return-value]  # an MT-DNN


def run_classification(
    spec: ClassificationSpec, *, progress: bool = True, model_dir: Path | None = None, retrain: bool = False
) -> ClassificationResult:
    start = time.perf_counter()
    run = _Run(spec, progress, model_dir, retrain)
    if spec.kind == "classification":
        table, details = _table2(run)
        figures: dict[str, Any] = {}
    else:
        table, figures, details = _adaptation(run)
    checks = [
        Check(system, f"auc {dom}", table[system][dom], lo, hi)
        for system, per in spec.expect.items()
        for dom, (lo, hi) in per.items()
        if system in table
    ]
    return ClassificationResult(spec, table, checks, time.perf_counter() - start, details, figures)


def _with_mean(row: dict[str, float]) -> dict[str, float]:
    return {**row, "mean": float(np.mean(list(row.values())))}


def _table2(run: _Run) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    spec, tr, te = run.spec, run.tasks(run.spec.domains, "train"), run.tasks(run.spec.domains, "test")
    table: dict[str, dict[str, float]] = {}
    xw_tr, xw_te = word_ngram_features(tr.texts, te.texts)
    hasher = TrigramHasher.fit(tr.texts)
    xl_tr, xl_te = letter_trigram_features(hasher, tr.texts, te.texts)
    chosen: dict[str, dict[str, float]] = {"SVM-Word": {}, "SVM-Letter": {}}
    for system, (x_tr, x_te) in (("SVM-Word", (xw_tr, xw_te)), ("SVM-Letter", (xl_tr, xl_te))):
        row = {}
        for d in track(spec.domains, f"{system} (C by 5-fold CV)") if run.progress else spec.domains:
            res = svm_scores(x_tr, tr.column(d), x_te, grid=spec.svm_c)
            row[d], chosen[system][d] = auc(te.column(d), res.scores), res.c
        table[system] = _with_mean(row)
    dnn_row = {}
    for d in spec.domains:  # the single-task DNN: one domain, no ranking task
        model = run.mtdnn([d], spec.dnn, ranking=False)
        dnn_row[d] = classification_auc(model, run.tasks([d], "test"))[d]
    table["DNN"] = _with_mean(dnn_row)
    mt = run.mtdnn(list(spec.domains), spec.mtdnn, ranking=bool(spec.ranking_dataset))
    table["MT-DNN"] = _with_mean(classification_auc(mt, te))
    ordering = {
        "MT-DNN ≥ DNN": {d: table["MT-DNN"][d] >= table["DNN"][d] for d in spec.domains},
        "DNN > SVM-Word": {d: table["DNN"][d] > table["SVM-Word"][d] for d in spec.domains},
        "SVM-Word > SVM-Letter": {d: table["SVM-Word"][d] > table["SVM-Letter"][d] for d in spec.domains},
    }
    return {s: table[s] for s in SYSTEMS}, {
        "svm_c": chosen,
        "ordering": ordering,
        "compactness": _compactness(mt, te, xw_tr.shape[1]),
    }


def _compactness(model: MTDNN, test: DomainTasks, word_features: int) -> dict[str, Any]:
    """Saved size of the model and per-query latency of classifying into every domain (§3.3)."""
    import tempfile

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        model.save(tmp)
        size = sum(f.stat().st_size for f in Path(tmp).iterdir())
    texts = test.texts[:300]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model.classify(texts[:10])  # warm-up
        times = []
        for t in texts:
            t0 = time.perf_counter()
            model.classify([t])
            times.append((time.perf_counter() - t0) * 1000)
    finally:
        torch.set_num_threads(threads)
    net = model.net
    assert net is not None  # saved above
    return {
        "mtdnn_bytes": size,
        "mtdnn_params": sum(p.numel() for p in net.parameters()),
        "trigrams": len(model.hasher or []),
        "svm_word_features": word_features,
        "svm_word_bytes": word_features * 8 * len(model.domains),
        "latency_p50_ms": float(np.percentile(times, 50)),
        "latency_p99_ms": float(np.percentile(times, 99)),
        "latency_queries": len(texts),
    }


def label_sample(y: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Rows of a ``fraction`` of the labels, drawn at random but with at least one positive and one
    negative (a binary classifier needs both), sorted."""
    n = max(2, int(round(fraction * len(y))))
    if n >= len(y):
        return np.arange(len(y))
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    if not len(pos) or not len(neg):
        raise ValueError("the labels need both classes")
    first = [rng.choice(pos), rng.choice(neg)]
    rest = np.setdiff1d(np.arange(len(y)), first)
    return np.sort(np.concatenate([first, rng.choice(rest, size=n - 2, replace=False)]))


def _adaptation(run: _Run) -> tuple[dict[str, dict[str, float]], dict[str, Any], dict[str, Any]]:
    spec = run.spec
    fig4: dict[str, dict[str, list[float]]] = {}
    fig5: dict[str, dict[str, list[float]]] = {}
    ranking = bool(spec.ranking_dataset)
    for target in spec.domains:
        others = [d for d in spec.domains if d != target]
        mt = run.mtdnn(others, spec.mtdnn, ranking=ranking)  # all tasks but the target's
        tr, te = run.tasks([target], "train"), run.tasks([target], "test")
        y, y_te = tr.column(target), te.column(target)
        feats = {
            "SemanticRepresentation": (mt.semantic(tr.texts), mt.semantic(te.texts)),
            "Word3gram": tuple(word_ngram_features(tr.texts, te.texts)),
            "Letter3gram": tuple(letter_trigram_features(mt.hasher, tr.texts, te.texts)),  # type: ignore[arg-type]  # trained model
        }
        s4: dict[str, list[float]] = {k: [] for k in feats}
        s5: dict[str, list[float]] = {"DNN1": [], "DNN2": [], "SVM": []}
        steps = [(f, seed) for f in spec.fractions for seed in range(spec.seeds if f < 0.1 else 1)]
        per: dict[tuple[str, float], list[float]] = {}
        for f, seed in track(steps, f"adaptation: {target}") if run.progress else steps:
            rows = label_sample(y, f, np.random.default_rng(seed))
            for name, (x, x_te) in feats.items():
                res = svm_scores(x[rows], y[rows], x_te, grid=spec.svm_c, seed=seed)
                per.setdefault((name, f), []).append(auc(y_te, res.scores))
            sub = tr.subset(rows)
            dnn = {**spec.dnn, "domain_set": spec.domain_set, "domains": [target], "ranking": False}
            for name, frozen in (("DNN1", False), ("DNN2", True)):
                model, args = _mtdnn(dnn)
                epochs = max(1, math.ceil(spec.dnn_steps / math.ceil(len(rows) / args.batch_size)))
                train_mtdnn(
                    model,
                    args=args.replace(epochs=epochs, seed=seed, freeze_l2=frozen),
                    tasks=sub,
                    hasher=mt.hasher,
                    init_l2=mt if frozen else None,
                    progress=False,
                )
                per.setdefault((name, f), []).append(classification_auc(model, te)[target])
        for f in spec.fractions:
            for name in feats:
                s4[name].append(float(np.mean(per[(name, f)])))
            for name in ("DNN1", "DNN2"):
                s5[name].append(float(np.mean(per[(name, f)])))
            s5["SVM"].append(float(np.mean(per[("SemanticRepresentation", f)])))
        fig4[target], fig5[target] = s4, s5
    table: dict[str, dict[str, float]] = {}  # the full-label (100 %) end of each curve, for the checks
    for fig in (fig4, fig5):
        for dom, series in fig.items():
            for name, vals in series.items():
                table.setdefault(name, {})[dom] = vals[-1]
    table = {name: _with_mean(row) for name, row in table.items()}
    wins = {
        "SemanticRepresentation > Word3gram": {
            f"{fr * 100:g} %": (
                f"{sum(fig4[d]['SemanticRepresentation'][i] > fig4[d]['Word3gram'][i] for d in fig4)}/{len(fig4)}"
            )
            for i, fr in enumerate(spec.fractions)
        },
        "DNN2 > DNN1": {
            f"{fr * 100:g} %": f"{sum(fig5[d]['DNN2'][i] > fig5[d]['DNN1'][i] for d in fig5)}/{len(fig5)}"
            for i, fr in enumerate(spec.fractions)
        },
    }
    return table, {"figure4": fig4, "figure5": fig5}, {"wins": wins}
