"""Query-domain TSVs (query classification tasks of MT-DNN), format told apart by the header.

Known headers (tab-separated):

- `split dialogue_id domains text` (SGD): `domains` is a comma-separated list (every service
  domain of the dialogue), so a query can carry several labels;
- `split domain intent text` (CLINC150): one domain label (`out_of_scope` included), plus the intent;
- `split intent text` (SNIPS): the intent is the only label.

Split names are normalised so every file uses train/dev/test (`val`/`validate`/`validation` -> `dev`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import DataFormatError
from .files import PathLike, data_root, first_line, parse_lines

HEADERS = (
    ("split", "dialogue_id", "domains", "text"),
    ("split", "domain", "intent", "text"),
    ("split", "intent", "text"),
)
_SPLIT_ALIASES = {"val": "dev", "validate": "dev", "validation": "dev"}


@dataclass(frozen=True, slots=True)
class LabelledQuery:
    """One labelled query: its split, text, domain labels (one or more) and intent if known."""

    split: str
    text: str
    labels: tuple[str, ...]
    intent: str | None = None


def normalise_split(split: str) -> str:
    """Common split name: val/validate/validation -> dev, others unchanged."""
    return _SPLIT_ALIASES.get(split, split)


def load_query_domains(path: PathLike, *, skip_bad_lines: bool = False) -> list[LabelledQuery]:
    """Read a query-domain TSV (SGD, CLINC150 or SNIPS layout, see module docs) in file order."""
    first = first_line(path)
    if first is None:
        raise DataFormatError(path, None, "no records (empty file)")
    number, line = first
    header = tuple(line.split("\t"))
    if header not in HEADERS:
        known = " | ".join(" ".join(h) for h in HEADERS)
        raise DataFormatError(path, number, f"unknown header {' '.join(header)!r}; expected one of: {known}")

    def parse(line: str) -> LabelledQuery:
        parts = line.split("\t")
        if len(parts) != len(header):
            raise ValueError(f"expected {len(header)} tab-separated columns ({', '.join(header)}), got {len(parts)}")
        row = dict(zip(header, parts))
        if not row["split"]:
            raise ValueError("empty split")
        if not row["text"].strip():
            raise ValueError("empty text")
        if "domains" in row:
            labels = tuple(d.strip() for d in row["domains"].split(","))
        else:
            labels = (row["domain"] if "domain" in row else row["intent"],)
        if not all(labels):
            raise ValueError("empty label")
        return LabelledQuery(normalise_split(row["split"]), row["text"], labels, row.get("intent"))

    return list(parse_lines(path, parse, skip_bad_lines=skip_bad_lines, header=lambda _: True))


def domain_names(records: Sequence[LabelledQuery]) -> list[str]:
    """All labels that occur in the records, sorted."""
    return sorted({label for r in records for label in r.labels})


def binary_labels(records: Sequence[LabelledQuery], domain: str, split: str) -> tuple[list[str], np.ndarray]:
    """Texts of one split and y (int8: 1 when `domain` is among a query's labels) for a per-domain
    binary classifier, as MT-DNN trains one logistic head per domain."""
    if domain not in domain_names(records):
        raise ValueError(f"unknown domain {domain!r}; domains: {', '.join(domain_names(records))}")
    split = normalise_split(split)
    rows = [r for r in records if r.split == split]
    if not rows:
        raise ValueError(f"no records in split {split!r}; splits: {', '.join(sorted({r.split for r in records}))}")
    return [r.text for r in rows], np.array([domain in r.labels for r in rows], dtype=np.int8)


@dataclass(frozen=True)
class DomainTasks:
    """One split of a query-domain set as MT-DNN's binary classification tasks: the texts and a
    (texts × domains) 0/1 label matrix, one column per domain (a query can be in several)."""

    texts: list[str]
    labels: np.ndarray  # (n, len(domains)) int8
    domains: list[str]

    @classmethod
    def from_records(cls, records: Sequence[LabelledQuery], domains: Sequence[str], split: str) -> DomainTasks:
        """The ``split`` rows; every domain must be known and have positives and negatives there
        (a binary task without both classes can neither be trained nor measured by AUC)."""
        if not domains:
            raise ValueError("no domains given")
        columns = [binary_labels(records, d, split) for d in domains]
        texts = columns[0][0]
        labels = np.stack([y for _, y in columns], axis=1).astype(np.int8)
        split = normalise_split(split)
        for d, y in zip(domains, labels.T):
            if not y.any():
                raise ValueError(f"domain {d!r} has no positive examples in split {split!r}")
            if y.all():
                raise ValueError(f"domain {d!r} has no negative examples in split {split!r}")
        return cls(texts, labels, list(domains))

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, rows: np.ndarray) -> DomainTasks:
        """The given rows (e.g. a fraction of the labels for the domain-adaptation study)."""
        return DomainTasks([self.texts[i] for i in rows], self.labels[rows], self.domains)

    def column(self, domain: str) -> np.ndarray:
        """0/1 labels of one domain."""
        if domain not in self.domains:
            raise ValueError(f"unknown domain {domain!r}; these tasks have: {', '.join(self.domains)}")
        return self.labels[:, self.domains.index(domain)]


def open_domain_set(name_or_path: str, *, skip_bad_lines: bool = False) -> list[LabelledQuery]:
    """A query-domain set by name (``query-domains/NAME.tsv`` under the data root) or file path."""
    p = Path(name_or_path)
    if not p.is_file():
        p = data_root() / "query-domains" / f"{name_or_path}.tsv"
        if not p.is_file():
            raise FileNotFoundError(f"no query-domain set {name_or_path!r} (looked for {p})")
    return load_query_domains(p, skip_bad_lines=skip_bad_lines)
