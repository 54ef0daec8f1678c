"""Where the data lives and what is in it: find, open and summarise data sets by name."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from .beir import BeirDataset
from .domains import HEADERS, domain_names, load_query_domains
from .files import PathLike, data_root, first_line


def _is_beir(folder: Path) -> bool:
    return (folder / "corpus.jsonl").is_file()


def _is_domains(folder: Path) -> bool:
    """A folder of query-domain TSVs (at least one .tsv with a known header)."""
    for tsv in folder.glob("*.tsv"):
        first = first_line(tsv)
        if first is not None and tuple(first[1].split("\t")) in HEADERS:
            return True
    return False


def list_datasets(root: PathLike | None = None) -> list[str]:
    """Names of the data sets under the root: BEIR folders and query-domain folders, sorted."""
    root = Path(root) if root is not None else data_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and (_is_beir(p) or _is_domains(p)))


def _folder(name_or_path: PathLike) -> Path:
    """A bare name under data_root(), else a folder path."""
    name = os.fspath(name_or_path)
    under_root = data_root() / name
    if Path(name).name == name and under_root.is_dir():
        return under_root
    if Path(name).is_dir():
        return Path(name)
    raise FileNotFoundError(
        f"no data set {name!r} (not a folder, nor a name under {data_root()}: {', '.join(list_datasets()) or 'none'})"
    )


def open_dataset(name_or_path: PathLike, *, skip_bad_lines: bool = False) -> BeirDataset:
    """Open a BEIR data set by name (under data_root()) or by folder path."""
    return BeirDataset(_folder(name_or_path), skip_bad_lines=skip_bad_lines)


def _mean_words(texts: list[str]) -> float:
    return round(sum(len(t.split()) for t in texts) / len(texts), 2) if texts else 0.0


def dataset_info(name_or_path: PathLike) -> dict:
    """A JSON-ready summary of a data set.

    BEIR: documents, queries, per split (queries judged, judgments, grade histogram), run names,
    mean title/text length in words. Query-domain folder: per file, records per split and labels.
    """
    folder = _folder(name_or_path)
    info: dict = {"name": folder.resolve().name, "root": str(folder)}
    if not _is_beir(folder) and _is_domains(folder):
        files = {}
        for tsv in sorted(folder.glob("*.tsv")):
            records = load_query_domains(tsv)
            per_split = Counter(r.split for r in records)
            files[tsv.stem] = {"records": len(records), "splits": dict(per_split), "labels": len(domain_names(records))}
        return info | {"kind": "query-domains", "files": files}
    ds = BeirDataset(folder)
    corpus = ds.corpus()
    splits: dict[str, dict[str, Any]] = {}
    for split in ds.splits:
        qrels = ds.qrels(split)
        grades = Counter(grade for docs in qrels.values() for grade in docs.values())
        splits[split] = {
            "queries": len(qrels),
            "judgments": sum(grades.values()),
            "grades": dict(sorted(grades.items())),
        }
    return info | {
        "kind": "beir",
        "documents": len(corpus),
        "queries": len(ds.queries()),
        "splits": splits,
        "runs": list(ds.runs),
        "mean_title_words": _mean_words(corpus.titles),
        "mean_text_words": _mean_words(corpus.texts),
    }
