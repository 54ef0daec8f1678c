"""The BEIR layout (the field's convention): corpus.jsonl, queries.jsonl, qrels/<split>.tsv, runs/.

Readers stream line by line and report malformed input as `path:line: message`; writers are
atomic. `BeirDataset` ties one folder together. Format: https://github.com/beir-cellar/beir.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..types import Qrels
from .errors import DataFormatError
from .files import PathLike, atomic_write, first_line, parse_lines, tsv_field

Fields = Literal["title+text", "title", "text"]
"""Which document fields make the text used for ranking."""

_QRELS_HEADER = ["query-id", "corpus-id", "score"]
_SPLIT_ORDER = {"train": 0, "dev": 1, "test": 2}


@dataclass(frozen=True, slots=True)
class Document:
    """One corpus entry."""

    id: str
    title: str
    text: str
    fields: dict[str, Any] | None = None  # stored fields (facets, numeric, other columns) of a table's record


def join_fields(title: str, text: str, fields: Fields = "title+text") -> str:
    """The ranking text of a document: the chosen fields joined by a space, empty parts skipped."""
    if fields == "title+text":
        return f"{title} {text}" if title and text else title or text
    if fields == "title":
        return title
    if fields == "text":
        return text
    raise ValueError(f"fields must be 'title+text', 'title' or 'text', got {fields!r}")


@dataclass
class Corpus:
    """A loaded corpus as parallel lists (row i = one document) plus an id -> row index.

    ``stored``: per document, the fields kept beside the searched text (a table's facets, numeric
    and other columns; see ``data.table``), returned with hits; None: none. ``schema``: how a
    table's columns were read (id, fields, facets, numeric, stored), recorded in a bundle's manifest."""

    ids: list[str]
    titles: list[str]
    texts: list[str]
    stored: list[dict[str, Any]] | None = None
    schema: dict[str, Any] | None = None
    index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.index = {doc_id: i for i, doc_id in enumerate(self.ids)}

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> Document:
        return Document(self.ids[i], self.titles[i], self.texts[i], None if self.stored is None else self.stored[i])

    def __iter__(self) -> Iterator[Document]:
        if self.stored is None:
            return map(Document, self.ids, self.titles, self.texts)
        return map(Document, self.ids, self.titles, self.texts, self.stored)

    def fields(self, i: int) -> dict[str, Any]:
        """The stored fields of row i ({} when the corpus has none)."""
        return self.stored[i] if self.stored is not None else {}

    def text(self, i: int, fields: Fields = "title+text") -> str:
        """Ranking text of row i (see `join_fields`)."""
        return join_fields(self.titles[i], self.texts[i], fields)

    def joined(self, fields: Fields = "title+text") -> list[str]:
        """Ranking text of every document, in row order."""
        return [join_fields(t, x, fields) for t, x in zip(self.titles, self.texts)]


# ---------------------------------------------------------------------------------------- reading


def _json_object(line: str) -> dict:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _string(obj: dict, key: str, default: str | None = None) -> str:
    """obj[key] as a string; a missing/null key gives `default`, or is an error without one."""
    value = obj.get(key)
    if value is None:
        if default is None:
            raise ValueError(f"missing {key!r}")
        return default
    if not isinstance(value, str):
        raise ValueError(f"{key!r} must be a string, got {type(value).__name__} {value!r}")
    return value


def _unique(seen: set[str], key: str, what: str) -> str:
    """A new, non-empty id without a line break (what write_corpus / write_queries can write back)."""
    if not key:
        raise ValueError(f"empty {what}")
    if "\r" in key or "\n" in key:
        raise ValueError(f"{what} {key!r} contains a line break")
    if key in seen:
        raise ValueError(f"duplicate {what} {key!r}")
    seen.add(key)
    return key


def _is_tsv(path: PathLike) -> bool:
    """TSV or JSON lines, by the suffix (.jsonl/.json or .tsv/.txt); for any other name, a first
    non-blank line that does not start with `{` means TSV."""
    path = Path(path)
    if path.suffix in (".jsonl", ".json", ".tsv", ".txt"):
        return path.suffix in (".tsv", ".txt")
    first = first_line(path)
    return first is not None and not first[1].lstrip().startswith("{")


TSV_ID_NAMES = {"id", "_id", "doc_id", "docid", "doc-id", "docno", "document_id", "corpus-id", "corpus_id"}
TSV_FIELD_NAMES = {"title", "text", "body", "content", "contents", "name", "description", "abstract"}


def _is_corpus_header(line: str) -> bool:
    """A TSV corpus's header line: an id column name then title/text-like names (any case)."""
    names = [c.strip().lower() for c in line.split("	")]
    return len(names) in (2, 3) and names[0] in TSV_ID_NAMES and all(n in TSV_FIELD_NAMES for n in names[1:])


def iter_corpus(
    path: PathLike, *, skip_bad_lines: bool = False, stored_fields: bool = False, max_line_bytes: int | None = None
) -> Iterator[Document]:
    """Stream the documents of a corpus.jsonl (`_id` required; `title`/`text` default to ""), or
    of a TSV file (see `_is_tsv`): `id<TAB>title` or `id<TAB>title<TAB>text` per line, the
    quickest way to bring one's own collection. A TSV's first line naming its columns (`id<TAB>title<TAB>text`,
    `doc_id<TAB>title`, ...: see `TSV_ID_NAMES`, `TSV_FIELD_NAMES`; any case) is a header, not a document.
    ``stored_fields``: a JSON line's ``fields`` object is read as its stored fields (a bundle's
    documents.jsonl, as `write_corpus` writes them). ``max_line_bytes``: a longer line is a bad line
    (None: no bound). Tables with other columns: `data.table`."""
    seen: set[str] = set()
    tsv = _is_tsv(path)

    def parse(line: str) -> Document:
        if tsv:
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) not in (2, 3):
                raise ValueError(
                    f"expected 2 or 3 tab-separated columns (id, title[, text]), got {len(parts)} "
                    "(a table with a header: index build --id COLUMN --fields COLUMNS)"
                )
            doc = Document(parts[0].strip(), parts[1], parts[2] if len(parts) == 3 else "")
            if not (doc.title.strip() or doc.text.strip()):
                raise ValueError(f"document {doc.id!r} has neither title nor text")
        else:
            obj = _json_object(line)
            if obj.get("_id") is None:
                keys = ", ".join(map(str, obj)) or "nothing"
                raise ValueError(f"missing '_id' (the record has: {keys}; another id column: index build --id COLUMN)")
            stored = obj.get("fields") if stored_fields else None
            if stored is not None and not isinstance(stored, dict):
                raise ValueError(f"'fields' must be a JSON object, got {type(stored).__name__}")
            doc = Document(_string(obj, "_id"), _string(obj, "title", ""), _string(obj, "text", ""), stored)
        _unique(seen, doc.id, "_id")
        return doc

    header = _is_corpus_header if tsv else None
    return parse_lines(path, parse, skip_bad_lines=skip_bad_lines, header=header, max_line_bytes=max_line_bytes)


def load_corpus(
    path: PathLike, *, skip_bad_lines: bool = False, stored_fields: bool = False, max_line_bytes: int | None = None
) -> Corpus:
    """Read a whole corpus (corpus.jsonl, or TSV: see `iter_corpus`) into a `Corpus`."""
    ids: list[str] = []
    titles: list[str] = []
    texts: list[str] = []
    stored: dict[int, dict[str, Any]] = {}  # by row, only the documents with stored fields
    docs = iter_corpus(path, skip_bad_lines=skip_bad_lines, stored_fields=stored_fields, max_line_bytes=max_line_bytes)
    for doc in docs:
        if doc.fields:
            stored[len(ids)] = doc.fields
        ids.append(doc.id)
        titles.append(doc.title)
        texts.append(doc.text)
    rows = [stored.get(i, {}) for i in range(len(ids))] if stored else None
    return Corpus(ids, titles, texts, rows)


def iter_queries(path: PathLike, *, skip_bad_lines: bool = False) -> Iterator[tuple[str, str]]:
    """Stream (query id, text) from BEIR queries.jsonl or a TSV `id<TAB>text` file (the format:
    see `_is_tsv`)."""
    tsv = _is_tsv(path)
    seen: set[str] = set()

    def parse(line: str) -> tuple[str, str]:
        if tsv:
            parts = line.split("\t")
            if len(parts) != 2:
                raise ValueError(f"expected 2 tab-separated columns (id, text), got {len(parts)}")
            qid, text = parts
        else:
            obj = _json_object(line)
            qid, text = _string(obj, "_id"), _string(obj, "text")
        _unique(seen, qid, "query id")
        if not text.strip():
            raise ValueError(f"empty text for query {qid!r}")
        return qid, text

    return parse_lines(path, parse, skip_bad_lines=skip_bad_lines)


def load_queries(path: PathLike, *, skip_bad_lines: bool = False) -> dict[str, str]:
    """Read queries (jsonl or TSV) into {query id: text}, in file order."""
    return dict(iter_queries(path, skip_bad_lines=skip_bad_lines))


def _integer(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{what} {value!r} is not an integer") from None


def iter_qrels(
    path: PathLike,
    *,
    skip_bad_lines: bool = False,
    doc_ids: Container[str] | None = None,
    query_ids: Container[str] | None = None,
) -> Iterator[tuple[str, str, int]]:
    """Stream (query id, doc id, grade) judgments in file order.

    Reads BEIR qrels (`query-id<TAB>corpus-id<TAB>score`, header optional) and TREC qrels
    (`qid iter docid rel`, white-space separated), told apart by the first data line. When
    `doc_ids` / `query_ids` are given, a judgment naming an unknown id is a bad line.
    """
    trec: bool | None = None
    seen: set[tuple[str, str]] = set()

    def parse(line: str) -> tuple[str, str, int]:
        nonlocal trec
        if trec is None:
            if len(line.split("\t")) != 3 and len(line.split()) != 4:
                raise ValueError(
                    "expected 3 tab-separated columns (BEIR: query-id, corpus-id, score) "
                    "or 4 white-space separated ones (TREC: qid, iter, docid, rel)"
                )
            trec = len(line.split("\t")) != 3
        parts = line.split() if trec else line.split("\t")
        if len(parts) != (4 if trec else 3):
            raise ValueError(f"expected {4 if trec else 3} columns, got {len(parts)}")
        qid, doc_id, grade = (parts[0], parts[2], parts[3]) if trec else parts
        if not qid or not doc_id:
            raise ValueError("empty query id or doc id")
        row = qid, doc_id, _integer(grade, "score")
        if (qid, doc_id) in seen:
            raise ValueError(f"duplicate judgment for query {qid!r}, doc {doc_id!r}")
        if query_ids is not None and qid not in query_ids:
            raise ValueError(f"query id {qid!r} has no query")
        if doc_ids is not None and doc_id not in doc_ids:
            raise ValueError(f"doc id {doc_id!r} has no document")
        seen.add((qid, doc_id))
        return row

    header = lambda line: line.split() == _QRELS_HEADER  # noqa: E731
    return parse_lines(path, parse, skip_bad_lines=skip_bad_lines, header=header)


def load_qrels(
    path: PathLike,
    *,
    skip_bad_lines: bool = False,
    doc_ids: Container[str] | None = None,
    query_ids: Container[str] | None = None,
) -> Qrels:
    """Read BEIR or TREC qrels into {query id: {doc id: grade}} (see `iter_qrels`)."""
    qrels: Qrels = {}
    for qid, doc_id, grade in iter_qrels(path, skip_bad_lines=skip_bad_lines, doc_ids=doc_ids, query_ids=query_ids):
        qrels.setdefault(qid, {})[doc_id] = grade
    return qrels


# ---------------------------------------------------------------------------------------- writing


def _json_line(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False) + "\n"


def write_corpus(docs: Iterable[Document] | Corpus, path: PathLike) -> None:
    """Write documents as corpus.jsonl (atomically); a document's stored fields, if any, as its
    ``fields`` object (read back by ``load_corpus(..., stored_fields=True)``)."""
    with atomic_write(path) as f:
        for doc in docs:
            tsv_field(doc.id, "document id", "\r\n")
            obj: dict[str, Any] = {"_id": doc.id, "title": doc.title, "text": doc.text}
            if doc.fields:
                obj["fields"] = doc.fields
            f.write(_json_line(obj))


def write_queries(queries: Mapping[str, str], path: PathLike) -> None:
    """Write {query id: text} as queries.jsonl (atomically)."""
    with atomic_write(path) as f:
        for qid, text in queries.items():
            tsv_field(qid, "query id", "\r\n")
            f.write(_json_line({"_id": qid, "text": text}))


def write_qrels(qrels: Qrels, path: PathLike) -> None:
    """Write qrels as a BEIR TSV with its `query-id corpus-id score` header (atomically)."""
    with atomic_write(path) as f:
        f.write("\t".join(_QRELS_HEADER) + "\n")
        for qid, docs in qrels.items():
            for doc_id, grade in docs.items():
                f.write(f"{tsv_field(qid, 'query id')}\t{tsv_field(doc_id, 'doc id')}\t{operator.index(grade)}\n")


# ---------------------------------------------------------------------------------------- dataset


class BeirDataset:
    """One BEIR folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv and optional runs/*.trec.

    `skip_bad_lines` applies to every file read through this object.
    """

    def __init__(self, root: PathLike, *, skip_bad_lines: bool = False) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"{self.root}: no such dataset folder")
        missing = [name for name in ("corpus.jsonl", "queries.jsonl") if not (self.root / name).is_file()]
        if not any((self.root / "qrels").glob("*.tsv")):
            missing.append("qrels/*.tsv")
        if missing:
            raise DataFormatError(self.root, None, f"not a BEIR dataset: missing {', '.join(missing)}")
        self.name = self.root.resolve().name
        self.skip_bad_lines = skip_bad_lines
        self._corpus: Corpus | None = None
        self._queries: dict[str, str] | None = None

    def __repr__(self) -> str:
        return f"BeirDataset({str(self.root)!r})"

    @property
    def splits(self) -> list[str]:
        """Split names from qrels/*.tsv, train/dev/test first (e.g. train, dev, test, train.graded)."""
        names = [p.name[: -len(".tsv")] for p in (self.root / "qrels").glob("*.tsv")]
        return sorted(names, key=lambda s: (_SPLIT_ORDER.get(s.split(".")[0], len(_SPLIT_ORDER)), s))

    @property
    def runs(self) -> dict[str, Path]:
        """Run name -> path, for runs/*.trec."""
        return {p.stem: p for p in sorted((self.root / "runs").glob("*.trec"), key=lambda p: p.stem)}

    def corpus(self) -> Corpus:
        """The corpus, read once and cached."""
        if self._corpus is None:
            self._corpus = load_corpus(self.root / "corpus.jsonl", skip_bad_lines=self.skip_bad_lines)
        return self._corpus

    def queries(self) -> dict[str, str]:
        """All queries {id: text}, read once and cached."""
        if self._queries is None:
            self._queries = load_queries(self.root / "queries.jsonl", skip_bad_lines=self.skip_bad_lines)
        return self._queries

    def qrels_path(self, split: str) -> Path:
        """Path of qrels/<split>.tsv; ValueError naming the splits when it does not exist."""
        if split not in self.splits:
            raise ValueError(f"{self.name} has no split {split!r}; splits: {', '.join(self.splits)}")
        return self.root / "qrels" / f"{split}.tsv"

    def _id_checks(self, check: bool) -> dict:
        return {"doc_ids": self.corpus().index, "query_ids": self.queries()} if check else {}

    def iter_qrels(self, split: str, *, check: bool = False) -> Iterator[tuple[str, str, int]]:
        """Stream (query id, doc id, grade) of a split in file order (`check` as in `qrels`)."""
        return iter_qrels(self.qrels_path(split), skip_bad_lines=self.skip_bad_lines, **self._id_checks(check))

    def qrels(self, split: str, *, check: bool = False) -> Qrels:
        """Judgments of a split. With `check`, a query or doc id that does not resolve is a bad line
        (DataFormatError naming file and line; with skip_bad_lines the row is dropped and counted)."""
        return load_qrels(self.qrels_path(split), skip_bad_lines=self.skip_bad_lines, **self._id_checks(check))
