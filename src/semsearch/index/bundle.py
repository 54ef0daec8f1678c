"""A saved search index: a directory holding a model with its indexed collection and the
documents to show. Built in a temporary directory and renamed into place, so a failed build
never leaves a half-written index where a good one was."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..data import Corpus, load_corpus, write_corpus
from ..models import Model, load_model
from ..models.base import ModelDirError

MANIFEST = "manifest.json"
FORMAT = 1


@dataclass(frozen=True)
class Hit:
    rank: int
    doc_id: str
    score: float
    title: str
    text: str


def build_index(model: Model, corpus: Corpus, out: str | Path, *, fields: str = "title+text") -> Path:
    """Index ``corpus`` with ``model`` and save both under ``out`` (replacing it atomically)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    model.index(corpus.ids, corpus.joined(fields))  # type: ignore[arg-type]
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save(tmp / "model")
        write_corpus(corpus, tmp / "documents.jsonl")
        manifest = {"format": FORMAT, "model": model.name, "fields": fields, "documents": len(corpus)}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            old = out.with_name(f".{out.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


class Searcher:
    """Loads a saved index and answers queries with documents."""

    def __init__(self, model: Model, corpus: Corpus):
        if list(model.doc_ids) != corpus.ids:
            raise ModelDirError("index and documents do not match (different document ids)")
        self.model, self.corpus = model, corpus

    @classmethod
    def load(cls, path: str | Path) -> "Searcher":
        p = Path(path)
        if not (p / MANIFEST).is_file():
            raise ModelDirError(f"{p}: not a semsearch index (no {MANIFEST}); build one with 'semsearch index build'")
        manifest = json.loads((p / MANIFEST).read_text(encoding="utf-8"))
        if manifest.get("format") != FORMAT:
            raise ModelDirError(f"{p}: index format {manifest.get('format')} is not {FORMAT}")
        return cls(load_model(p / "model"), load_corpus(p / "documents.jsonl"))

    def search(self, queries: Sequence[str], k: int = 10) -> list[list[Hit]]:
        out = []
        for hits in self.model.retrieve(list(queries), k):
            rows = []
            for r, (d, s) in enumerate(hits, 1):
                i = self.corpus.index[d]
                rows.append(Hit(r, d, s, self.corpus.titles[i], self.corpus.texts[i]))
            out.append(rows)
        return out
