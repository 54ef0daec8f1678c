"""A served bundle that changes without a rebuild: upserts and deletes on top of the built bundle
(the base), made durable in a change log (``index.changes``) before they are acknowledged, and
seen by every process that serves the bundle within a poll of the log.

A ``LiveIndex`` holds an immutable ``LiveState``: the base ``Bundle``, the log's sequence number
it has applied, the base documents replaced or deleted (tombstones), and the upserted documents
with their vectors (the delta). The delta is searched as segments of its own (a stable one and a
fresh one of the documents since, ``LiveState``), built with the base's models: a lexical index
scored with the base's collection statistics plus the counts of every current delta document
(as Lucene scores across segments), an exact (flat) vector index over the vectors the bundle's
served encoder gave at upsert time, and the ranker's per-document feature models indexed the
same way. A two-stage search cuts each query's base candidates (tombstones left out) and delta
candidates together to one collection's stage 1 and ranks them in one group, so the stage
ranks and the ranker's per-query features span all of them. What differs from a rebuild until
a merge: the base's own statistics (its tombstoned documents still count, the delta's terms
are added to its postings' weights only in the delta). Without a two-stage ranker each segment
is searched alone and the hits merged by their stage scores.

Each process polls the log (``poll`` seconds) and applies what it has not seen, with the code
that replays the log over a freshly loaded bundle; it also polls the bundle's manifest and loads
a bundle rebuilt at the served path (or swaps in after a merge), replays the log records that
bundle does not hold (``changes_seq``), and swaps the state between searches: in-flight searches
finish on the state they started with. ``merge`` writes a bundle of the current documents over
the served one (``bundle.reindex``) and rotates the log."""

from __future__ import annotations

import copy
import fcntl
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ..data import Corpus, join_fields
from ..models.base import best_k
from ..models.lexical import CollectionStats, LexicalIndex, LexicalModel
from ..text.normalize import tokenize
from .bundle import MANIFEST, Bundle, LoadOptions
from .changes import LOG, ChangeLog, Position, pack_vectors, unpack_vectors
from .filters import Filter, FilterIndex, Tally
from .hybrid import Candidates, HybridHit, HybridRetriever
from .searcher import Capabilities, Hit, Result, SearchBase, SearchRequest
from .semantic import SemanticRetriever

CHANGES_SEQ = "changes_seq"
"""The manifest key of a merged bundle: the last change-log record it holds."""
POLL = 0.2
"""Seconds between a process's looks at the change log and the bundle's manifest."""
SPACING = 0.4
"""Seconds at least between two delta builds of a process under continuous writes."""
VISIBLE = 0.8
"""Seconds within which a process applies a change another wrote (with its poll: under 1 s)."""
FOLD_MIN = 256
"""Fresh documents a delta keeps in a segment of their own at least (``LiveState._segments``)."""
MERGE_AT = 5000
"""Changed documents (upserted + tombstoned) at which a served index merges them (``serve --merge-at``)."""


@dataclass(frozen=True)
class Document:
    """One upserted document: its id, title, text and stored fields."""

    id: str
    title: str
    text: str
    fields: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "text": self.text, "fields": self.fields}


def changes_dir(bundle: str | Path) -> Path:
    """Where a bundle's change log lives by default: ``<bundle>.changes`` beside it (outside the
    bundle, whose files the manifest lists and a rebuild replaces)."""
    p = Path(bundle)
    return p.with_name(p.name + ".changes")


@dataclass(frozen=True)
class DeltaCounts:
    """The current delta documents' counts under one analyzer: how many, their total length,
    and each term's document and collection frequency (what a segment's statistics add to the
    base's)."""

    n: int = 0
    length: float = 0.0
    df: dict[str, float] = field(default_factory=dict)
    cf: dict[str, float] = field(default_factory=dict)


def _check_lexical(model: Any) -> LexicalModel:
    if not isinstance(model, LexicalModel) or not model.positional:
        raise ValueError(f"changes without a rebuild need lexical models scoring by position, not {model.name}")
    return model


def _weighted(model: LexicalModel, ix: LexicalIndex, counts: DeltaCounts) -> LexicalModel:
    """``model`` (a lexical model over the base) over a delta segment's index ``ix``, weighting
    terms with the base's statistics plus the current delta documents' ``counts`` (document
    count, df, cf, mean length; as Lucene scores across segments). Every segment gets the same
    statistics, so a document's scores do not depend on how the delta is split into segments."""
    base_ix = model.lexical_index
    base = model.collection_stats
    seg = model.with_params()
    seg.use_index(ix)
    terms = ix.vocab.terms
    at = np.array([base_ix.vocab.ids.get(t, -1) for t in terms], dtype=np.int64)
    known = at >= 0
    df = np.array([counts.df.get(t, 0.0) for t in terms], dtype=np.float64)
    cf = np.array([counts.cf.get(t, 0.0) for t in terms], dtype=np.float64)
    df[known] += base.df[at[known]]
    cf[known] += base.cf[at[known]]
    # one entry past the vocabulary holds the rest of the collection's length, so that the total
    # (what a language model's collection probabilities divide by) is the whole collection's:
    # the base's and the current delta's (integer counts: exact in any order)
    cf = np.append(cf, float(base.cf.sum()) + counts.length - float(cf.sum()))
    df = np.append(df, 0.0)
    n = base.n_docs + counts.n
    avgdl = (base.avgdl * base.n_docs + counts.length) / max(n, 1)
    out = seg.with_stats(CollectionStats(n, df, cf, avgdl))
    out.prepare()  # (built here, not in the first search)
    return out


@dataclass(frozen=True)
class Delta:
    """Upserted documents as a searchable segment: per query, its candidates like the base's
    (``HybridRetriever.candidates``) and the ranker's feature rows for them. ``indexes``: its
    lexical index per analyzer (the analysed documents, built once); ``weighted`` gives it
    other statistics without analysing them again."""

    corpus: Corpus
    hybrid: dict[str | None, HybridRetriever]
    ranker: Any
    words: frozenset[str]
    documents: tuple[Document, ...]
    indexes: dict[Any, LexicalIndex]
    semantic: dict[str, SemanticRetriever]

    @classmethod
    def build(cls, base: Bundle, docs: Sequence[Document], vectors: Mapping[str, np.ndarray]) -> Delta:
        """The segment of ``docs``, weighted with its own counts (``weighted`` changes them)."""
        ids = [d.id for d in docs]
        stored = [d.fields for d in docs] if base.corpus.stored is not None else None
        corpus = Corpus(ids, [d.title for d in docs], [d.text for d in docs], stored, base.corpus.schema)
        texts = corpus.joined(base.manifest.get("fields", "title+text"))
        models = [_check_lexical(m) for m in [base.lexical, *getattr(base.ranker, "models", [])] if m is not None]
        indexes: dict[Any, LexicalIndex] = {}
        for m in models:  # models with one analyzer share one index, as a bundle's do
            if m.analyzer not in indexes:
                indexes[m.analyzer] = LexicalIndex.build(ids, texts, m.analyzer)
        semantic: dict[str, SemanticRetriever] = {}
        for name, r in base.semantic.items():
            semantic[name] = r.segment(ids, vectors[name])
        ranker = None
        if base.ranker is not None and base.two_stage:
            ranker = copy.copy(base.ranker)
            ranker.use_texts(ids, texts)  # type: ignore[attr-defined]  # lambdamart
        pair_words = getattr(ranker, "pair_words", None)  # (the pair features' words: the same tokenize)
        words = frozenset(pair_words.vocab if pair_words is not None else (w for t in texts for w in tokenize(t)))
        own = _counts([(ix, None) for ix in indexes.values()], indexes)
        return cls(corpus, {}, ranker, words, tuple(docs), indexes, semantic).weighted(base, own)

    @cached_property
    def filters(self) -> FilterIndex:
        """The segment's facet and numeric columns (the bundle's schema), as a bundle's ``filters``."""
        schema = self.corpus.schema or {}
        stored = self.corpus.stored if self.corpus.stored is not None else [{}] * len(self.corpus)
        return FilterIndex(stored, schema.get("facets", []), schema.get("numeric", []))

    def weighted(self, base: Bundle, counts: Mapping[Any, DeltaCounts]) -> Delta:
        """This segment with its models weighting terms by the base's statistics plus ``counts``
        (per analyzer): new models over the same indexes, vectors and pair features."""
        lexical = (
            _weighted(base.lexical, self.indexes[base.lexical.analyzer], counts[base.lexical.analyzer])  # type: ignore[arg-type, attr-defined]  # checked in build
            if base.lexical is not None
            else None
        )
        ranker = self.ranker
        if ranker is not None:
            ranker = copy.copy(ranker)
            ranker.models = [_weighted(m, self.indexes[m.analyzer], counts[m.analyzer]) for m in base.ranker.models]  # type: ignore[union-attr]  # lambdamart
        hybrid = {
            name: HybridRetriever(lexical, sem, scorer="union", complete=True)
            for name, sem in (self.semantic.items() if self.semantic else [(None, None)])
        }
        return Delta(self.corpus, hybrid, ranker, self.words, self.documents, self.indexes, self.semantic)


def _counts(
    parts: Sequence[tuple[LexicalIndex, np.ndarray | None]], indexes: Mapping[Any, LexicalIndex]
) -> dict[Any, DeltaCounts]:
    """Per analyzer, the counts of the rows ``mask`` keeps (None: all) of each segment index."""
    out: dict[Any, DeltaCounts] = {}
    for ix, mask in parts:
        c = ix.counts if mask is None else ix.counts[mask]
        dc = out.setdefault(ix.analyzer, DeltaCounts())
        df = np.bincount(c.indices, minlength=len(ix.vocab))
        cf = np.bincount(c.indices, weights=c.data, minlength=len(ix.vocab))
        terms = ix.vocab.terms
        for j in np.flatnonzero(df):
            t = terms[j]
            dc.df[t] = dc.df.get(t, 0.0) + float(df[j])
            dc.cf[t] = dc.cf.get(t, 0.0) + float(cf[j])
        out[ix.analyzer] = DeltaCounts(dc.n + c.shape[0], dc.length + float(c.data.sum()), dc.df, dc.cf)
    for a in indexes:
        out.setdefault(a, DeltaCounts())
    return out


@dataclass(frozen=True)
class LiveState:
    """What one search runs on: the base bundle, the log records applied (``seq``), the base
    documents left out (``dead``: replaced or deleted), the delta's documents and vectors."""

    base: Bundle
    seq: int = 0
    dead: frozenset[str] = frozenset()
    docs: Mapping[str, Document] = field(default_factory=dict)
    vectors: Mapping[str, Mapping[str, np.ndarray]] = field(default_factory=dict)
    segments: tuple[Delta, ...] = ()
    """The delta as segments: the stable one (rebuilt when the fresh one outgrows a quarter of it),
    then the fresh one (the documents upserted since); a document is served from the segment
    whose copy of it is the current one."""

    def __len__(self) -> int:
        return len(self.base.corpus) - len(self.dead) + len(self.docs)

    def has(self, doc_id: str) -> bool:
        return doc_id in self.docs or (doc_id in self.base.corpus.index and doc_id not in self.dead)

    def apply(self, records: Iterable[dict[str, Any]]) -> LiveState:
        """This state with ``records`` (change-log records) applied; those at or below ``seq``
        are skipped (already in the base or applied)."""
        seq, dead = self.seq, set(self.dead)
        docs = dict(self.docs)
        vectors = {name: dict(v) for name, v in self.vectors.items()}
        for name in self.base.semantic:
            vectors.setdefault(name, {})
        changed = False
        for r in records:
            if r["seq"] <= seq:
                continue
            seq = r["seq"]
            if r["op"] == "upsert":
                packed = {name: unpack_vectors(v) for name, v in r.get("vectors", {}).items()}
                for i, d in enumerate(r["docs"]):
                    doc = Document(d["id"], d.get("title", ""), d.get("text", ""), d.get("fields") or {})
                    if doc.id in self.base.corpus.index:
                        dead.add(doc.id)
                    docs.pop(doc.id, None)  # (a document upserted again moves to the end)
                    docs[doc.id] = doc
                    for name in self.base.semantic:
                        vectors[name][doc.id] = packed[name][i]
            elif r["op"] == "delete":
                for doc_id in r["ids"]:
                    docs.pop(doc_id, None)
                    for v in vectors.values():
                        v.pop(doc_id, None)
                    if doc_id in self.base.corpus.index:
                        dead.add(doc_id)
            else:
                continue
            changed = True
        if not changed:
            return LiveState(self.base, seq, self.dead, self.docs, self.vectors, self.segments)
        return LiveState(self.base, seq, frozenset(dead), docs, vectors, self._segments(docs, vectors))

    def _segments(
        self, docs: Mapping[str, Document], vectors: Mapping[str, Mapping[str, np.ndarray]]
    ) -> tuple[Delta, ...]:
        """The delta's segments after a change: the stable one kept and the documents since in a
        fresh one, built alone, while they are at most a quarter of the stable one's (or
        ``FOLD_MIN``) and the stable one is mostly current; else one stable segment of them all.
        A change then costs a build of the fresh documents, a fold of them all now and then."""

        def build(ds: list[Document]) -> Delta:
            return Delta.build(self.base, ds, {name: np.stack([v[d.id] for d in ds]) for name, v in vectors.items()})

        if not docs:
            return ()
        stable = self.segments[0] if self.segments else None
        segments = None
        if stable is not None:
            current = sum(1 for d in stable.documents if docs.get(d.id) is d)
            mine = {d.id for d in stable.documents if docs.get(d.id) is d}
            fresh = [d for d in docs.values() if d.id not in mine]
            if len(fresh) <= max(FOLD_MIN, current // 4) and 2 * current >= len(stable.documents):
                segments = (stable, build(fresh)) if fresh else (stable,)
        if segments is None:
            segments = (build(list(docs.values())),)
        # every segment weighted with the counts of all the current delta documents
        parts = []
        for seg in segments:
            mask = np.fromiter((docs.get(d.id) is d for d in seg.documents), dtype=bool, count=len(seg.documents))
            parts += [(ix, None if mask.all() else mask) for ix in seg.indexes.values()]
        counts = _counts(parts, segments[0].indexes)
        return tuple(seg.weighted(self.base, counts) for seg in segments)

    def documents(self) -> Corpus:
        """The documents served now, in merge order: the base's kept ones, then the delta's."""
        b = self.base.corpus
        keep = [i for i, d in enumerate(b.ids) if d not in self.dead]
        ds = list(self.docs.values())
        stored = None
        if b.stored is not None:
            stored = [b.stored[i] for i in keep] + [d.fields for d in ds]
        return Corpus(
            [b.ids[i] for i in keep] + [d.id for d in ds],
            [b.titles[i] for i in keep] + [d.title for d in ds],
            [b.texts[i] for i in keep] + [d.text for d in ds],
            stored,
            b.schema,
        )


class LiveIndex(SearchBase):
    """A bundle served with its change log (the module docstring): a ``Searcher`` whose searches
    and ``hits`` take the place of ``Bundle``'s; ``upsert`` and ``delete`` write; ``start`` runs the thread
    that follows the log and the bundle's manifest (``reload``), ``close`` stops it."""

    def __init__(
        self,
        bundle: Bundle,
        changes: str | Path | None = None,
        *,
        load: LoadOptions | None = None,
        writes: bool = False,
        poll: float = POLL,
        merge_at: int = 0,
    ):
        if writes and bundle.rescore:
            raise ValueError("changes without a rebuild do not re-score with a cross-encoder (serve without --rescore)")
        self.path, self.load_options, self.writes, self.poll = bundle.path, load, writes, poll
        folder = Path(changes if changes is not None else changes_dir(bundle.path))
        # a bundle's changes are served whether or not this process takes more: a read-only
        # service follows an existing log too (else it would serve the bundle without them)
        self.log = ChangeLog(folder) if writes or (folder / LOG).is_file() else None
        self._lock = threading.RLock()  # applying records and swapping bundles
        self._position: Position | None = None
        self._manifest = self._manifest_id()
        self._retired: list[Bundle] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reloads = 0
        self.merge_at = merge_at
        """Changed documents (delta + tombstones) at which a background merge starts (0: never)."""
        self._merging: threading.Thread | None = None
        self._build_s = 0.0  # how long the last delta build took
        self._applied_at = 0.0  # when the log was last read and applied (monotonic)
        self._state = self._replayed(bundle)

    # -- state ------------------------------------------------------------------------------------
    @property
    def state(self) -> LiveState:
        return self._state

    @property
    def base(self) -> Bundle:
        return self._state.base

    def _manifest_id(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(Path(self.path) / MANIFEST)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _replayed(self, bundle: Bundle) -> LiveState:
        """``bundle`` with the log's records it does not hold (``changes_seq``) applied."""
        state = LiveState(bundle, int(bundle.manifest.get(CHANGES_SEQ, 0)))
        if self.log is None:
            return state
        records, self._position = self.log.read()
        return state.apply(records)

    def catch_up(self, seq: int | None = None) -> int:
        """Apply the log's records this process has not seen (with ``seq``: unless the state has
        reached it already); the sequence number reached. Writers waiting together are served
        by one of them applying every record written meanwhile (one delta build for all)."""
        if self.log is None:
            return self._state.seq
        with self._lock:
            if seq is None or self._state.seq < seq:
                records, self._position = self.log.read(self._position)
                if records:
                    t = time.perf_counter()
                    self._state = self._state.apply(records)
                    self._build_s = time.perf_counter() - t
                self._applied_at = time.monotonic()
            reached = self._state.seq
        self._maybe_merge()
        return reached

    def _maybe_merge(self) -> None:
        """Start a background merge when the changes reach ``merge_at`` documents (one at a time)."""
        st = self._state
        if self.merge_at <= 0 or len(st.docs) + len(st.dead) < self.merge_at:
            return
        with self._lock:
            if self._merging is not None and self._merging.is_alive():
                return
            self._merging = threading.Thread(target=self._merge_quietly, name="live-merge", daemon=True)
            self._merging.start()

    def _merge_quietly(self) -> None:
        try:
            self.merge()
        except Exception as e:  # noqa: BLE001  # reported; the changes stay in the log and the delta
            import sys

            print(f"semsearch: merge failed: {e}", file=sys.stderr, flush=True)

    def reload(self, force: bool = False) -> bool:
        """Load the bundle at the served path if its manifest changed (or ``force``), replay the
        log over it and swap it in; the old bundle is closed at the next reload (a search may
        still be running on it). False when nothing changed."""
        now = self._manifest_id()
        if not force and (now is None or now == self._manifest):
            return False
        fresh = Bundle.load(self.path, self.load_options)
        with self._lock:
            self._manifest = now
            old = self._state.base
            self._state = self._replayed(fresh)
            for b in self._retired:
                b.close()
            self._retired = [old]
            self.reloads += 1
        return True

    def start(self) -> None:
        """Follow the log and the manifest in a thread of this process (after any fork)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._follow, name="live-index", daemon=True)
            self._thread.start()

    def _follow(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                self.reload()
                # under continuous writes, delta builds are spaced SPACING apart, or three times
                # their cost (at most VISIBLE), so that they take a bounded share of the worker
                # from its searches
                spacing = min(VISIBLE, max(SPACING, 3 * self._build_s))
                if time.monotonic() - self._applied_at >= spacing:
                    self.catch_up()
            except Exception as e:  # noqa: BLE001  # a bad rebuild or log is reported, the service keeps its state
                import sys

                print(f"semsearch: live index: {e}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self._stop.set()
        if self._merging is not None:
            self._merging.join()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        for b in [*self._retired, self._state.base]:
            b.close()
        self._retired = []

    # -- writes -----------------------------------------------------------------------------------
    def _require_writes(self) -> ChangeLog:
        if not self.writes or self.log is None:
            raise PermissionError("this index takes no changes (serve --allow-writes)")
        return self.log

    def upsert(self, docs: Sequence[Document], *, wait: bool = True) -> int:
        """Add or replace ``docs`` (encoded with the bundle's encoders now; an id given twice: the
        later document), durable when this returns their log sequence number; with ``wait``
        visible to this process's next search, else within a second (``start``'s thread)."""
        log = self._require_writes()
        if not docs:
            raise ValueError("no documents to upsert")
        docs = list({d.id: d for d in docs}.values())  # an id twice: the later one, as two upserts
        base = self._state.base
        vectors = _encoded(base, docs)
        # the batch indexed alone first: a document the segment cannot take fails here, before it
        # is logged (a logged change is replayed by every start)
        Delta.build(base, docs, {name: unpack_vectors(v) for name, v in vectors.items()})
        seq = log.append({"op": "upsert", "docs": [d.record() for d in docs], "vectors": vectors})
        if wait:
            self.catch_up(seq)
        return seq

    def delete(self, doc_id: str, *, wait: bool = True) -> int:
        """Delete ``doc_id`` (KeyError if no such document is served), durable when this returns;
        ``wait``: as ``upsert``'s."""
        log = self._require_writes()
        if not self._state.has(doc_id):
            self.catch_up()  # (it may have been upserted by another process)
            if not self._state.has(doc_id):
                raise KeyError(f"no document {doc_id!r}")
        seq = log.append({"op": "delete", "ids": [doc_id]})
        if wait:
            self.catch_up(seq)
        return seq

    def warm(self, requests: Sequence[SearchRequest]) -> int:
        """Run once what the first change and the searches after it would run first (the delta's
        compiled kernels, its encoders, its index build), so that they do not: the base's first
        document is upserted again into a scratch state (its base copy tombstoned, the new one
        in a delta segment), never logged nor served, and each of ``requests`` (checked) is
        searched on it. The searches run; none when no change can come (no change log)."""
        st = self._state
        base = st.base
        if self.log is None or not len(base.corpus):
            return 0
        c = base.corpus
        doc = Document(c.ids[0], c.titles[0], c.texts[0], dict(c.fields(0)))
        record = {"seq": st.seq + 1, "op": "upsert", "docs": [doc.record()], "vectors": _encoded(base, [doc])}
        scratch = st.apply([record])
        for r in requests:
            self.check(r)
            self._search_on(scratch, [r])
        return len(requests)

    # -- merge ------------------------------------------------------------------------------------
    def merge(self) -> Path:
        """Fold the changes into a new bundle at the served path (``bundle.reindex``: the current
        documents with the bundle's models, base vectors and upsert-time vectors reused), then
        rotate the log; this process swaps to the new bundle, the others at their next poll. One
        merge at a time across processes (a lock file beside the log)."""
        from .bundle.reindex import reindex

        log = self._require_writes()
        fd = os.open(log.folder / "merge.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.reload()
            self.catch_up()
            st = self._state
            if not st.docs and not st.dead:
                return Path(self.path)  # (another process merged them)
            vectors = {name: dict(v) for name, v in st.vectors.items()}
            reindex(st.base, st.documents(), self.path, vectors=vectors, manifest_extra={CHANGES_SEQ: st.seq})
            log.rotate(st.seq)
            self.reload(force=True)
        finally:
            os.close(fd)
        return Path(self.path)

    # -- search -----------------------------------------------------------------------------------
    def documents(self) -> Corpus:
        return self._state.documents()

    def __len__(self) -> int:
        return len(self._state)

    def _searched(self, st: LiveState, query: str, correct: bool | None) -> str:
        """The query as searched: spell-corrected as the bundle says, except when a word of it
        is a word of the delta (the corrector knows only the base's words)."""
        fixed = st.base.searched(query, correct)
        if fixed != query and any(w in seg.words for seg in st.segments for w in tokenize(query)):
            return query
        return fixed

    @property
    def capabilities(self) -> Capabilities:
        """It takes changes when started with ``writes``; it explains as its bundle does."""
        return Capabilities(writes=self.writes, explain=True, fallible=self._state.base.store == "postgres")

    def check(self, request: SearchRequest) -> None:
        """The bundle's checks; a mask of document positions is refused (the served documents
        are not the base's positions): ``filters`` select documents here."""
        if request.allowed is not None:
            raise ValueError("a live index takes filters, not a mask of document positions (allowed)")
        self._state.base.check(request)

    def search_group(self, requests: Sequence[SearchRequest]) -> list[Result]:
        """``Bundle.search_group`` over the served documents (the base without its tombstones,
        and the delta). ``filters`` go inside every segment's stages (each segment's mask: its
        documents the filter allows, less the ones not current); ``facets`` counts the candidates
        of all segments together. Each result remembers the state it was searched on (``hits``)."""
        return self._search_on(self._state, requests)

    def _search_on(self, st: LiveState, requests: Sequence[SearchRequest]) -> list[Result]:
        """``search_group`` on the state ``st``."""
        base = st.base
        o = requests[0]
        filters = o.filters
        flt = filters if isinstance(filters, Filter) or filters is None else base.filters.parse(filters)
        k, model, facets = o.depth, o.model, o.facets
        if not st.segments and not st.dead:
            out = base.search_requests([replace(r, filters=flt, offset=0, k=k) for r in requests])
        else:
            qs = [self._searched(st, r.query, o.correct) for r in requests]
            hybrid = base.hybrid(model)
            if base.two_stage and hybrid.positional and getattr(base.ranker, "positional", False):
                out = self._ranked(st, hybrid, model, qs, k, flt, facets)
            else:
                out = self._merged(st, qs, o, flt)
        for r in out:
            r.state = st  # type: ignore[attr-defined]  # read back by hits()
        return out

    def _merged(self, st: LiveState, qs: list[str], o: SearchRequest, flt: Filter | None) -> list[Result]:
        """Without a two-stage ranker, under ``o``'s options: each segment searched alone (the
        base's documents not tombstoned and a delta segment's current copies, that the filter
        allows), hits merged by score; the facets count every segment's stage-1 hits."""
        base = st.base
        t0 = time.perf_counter()
        k, model, merge_by, facets = o.depth, o.model, o.merge_by, o.facets
        allowed = self._allowed(st, flt)
        # the base's (the queries as searched: not corrected again), at the request's depth
        found = base.search_requests(
            [replace(o, query=q, k=k, offset=0, correct=False, allowed=allowed, filters=None) for q in qs]
        )
        tallies = [r.tally for r in found]
        delta_hits: list[list[HybridHit]] = [[] for _ in qs]
        for seg in st.segments:
            hybrid = seg.hybrid.get(model if model is not None else next(iter(seg.hybrid)))
            assert hybrid is not None
            found_seg, _ = hybrid.timed_search(
                qs,
                None,
                scorer=merge_by,
                n_lexical=max(o.n_lexical, k),
                n_semantic=max(o.n_semantic, 1),
                allowed=self._seg_allowed(st, seg, flt),
            )
            delta_hits = [a + b for a, b in zip(delta_hits, found_seg, strict=True)]
            if facets:
                index = seg.corpus.index
                tallies = [
                    t + seg.filters.tally(np.array([index[h.doc_id] for h in hits], dtype=np.int64))  # type: ignore[operator]  # counted
                    for t, hits in zip(tallies, found_seg, strict=True)
                ]
        out = []
        for r, extra, tally in zip(found, delta_hits, tallies, strict=True):
            hits = [h for h in r.hits if h.doc_id not in st.dead] + extra
            if merge_by == "union" and base.ranker is None:
                # the union across segments: every lexical hit by its score (both segments weight
                # terms with the same statistics), then the semantic-only ones by theirs
                hits.sort(key=_union_key)
                hits = [replace(h, score=1.0 / i) for i, h in enumerate(hits[:k], 1)]
            else:
                hits.sort(key=lambda h: (-h.score, h.doc_id))
            timing = dict(r.timing)
            timing["total_ms"] = 1000 * (time.perf_counter() - t0)
            out.append(Result(hits[:k], timing, r.query, None if tally is None else tally.counts(facets), tally))
        return out

    def _ranked(
        self,
        st: LiveState,
        hybrid: HybridRetriever,
        model: str | None,
        qs: list[str],
        k: int,
        flt: Filter | None = None,
        facets: int = 0,
    ) -> list[Result]:
        """A two-stage search over every segment: each query's base candidates (the stages search
        the documents that are not tombstoned and the filter allows: ``allowed``) and each delta
        segment's (its current copies the filter allows), cut together to one collection's stage 1
        and ranked in one group by the ranker; the facets count that cut stage 1."""
        rk = st.base.ranker
        t0 = time.perf_counter()
        cands, timing = hybrid.candidates(
            qs,
            n_lexical=rk.n_lexical,  # type: ignore[union-attr]  # two-stage
            n_semantic=rk.n_semantic,  # type: ignore[union-attr]  # two-stage
            allowed=self._allowed(st, flt),
        )
        # the segments: the base's candidates, then each delta segment's, cut together to one
        # collection's stage 1, featured by each segment's ranker, ranked per query in one group
        parts: list[list[Candidates]] = [cands]
        rankers: list[Any] = [rk]
        ids_of: list[Any] = [hybrid.doc_ids]
        if st.segments:
            t = time.perf_counter()
            for seg in st.segments:
                dh = seg.hybrid.get(model if model is not None else next(iter(seg.hybrid)))
                assert dh is not None
                found, _ = dh.candidates(
                    qs,
                    n_lexical=rk.n_lexical,  # type: ignore[union-attr]  # two-stage
                    n_semantic=rk.n_semantic,  # type: ignore[union-attr]  # two-stage
                    allowed=self._seg_allowed(st, seg, flt),
                )
                parts.append(list(found))
                rankers.append(seg.ranker)
                ids_of.append(_Ids(seg.corpus.ids))
            for i in range(len(qs)):
                cut = _global_cut([p[i] for p in parts], rk.n_lexical, rk.n_semantic)  # type: ignore[union-attr]  # two-stage
                for p, c in zip(parts, cut, strict=True):
                    p[i] = c
            timing["delta_ms"] = 1000 * (time.perf_counter() - t)
        t2 = time.perf_counter()
        features = []
        for p, ranker in zip(parts, rankers, strict=True):
            rows = [c for c in p if len(c)]
            X = ranker.candidate_features([q for q, c in zip(qs, p) if len(c)], rows) if rows else None
            features.append(X)
        blocks, sizes = [], []
        at = [0] * len(parts)
        for i in range(len(qs)):
            n = 0
            for j, p in enumerate(parts):
                m = len(p[i])
                if m:
                    blocks.append(features[j][at[j] : at[j] + m])  # type: ignore[index]  # rows exist
                    at[j] += m
                    n += m
            sizes.append(n)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        scores = (
            rk.predict_rows(np.vstack(blocks), offsets)  # type: ignore[union-attr]  # two-stage
            if blocks
            else np.zeros(0)
        )
        filter_indexes = [st.base.filters, *(seg.filters for seg in st.segments)]
        out = []
        for i, q in enumerate(qs):
            tally: Tally | None = None
            if facets:
                for part, fi in zip(parts, filter_indexes, strict=True):
                    counted = fi.tally(part[i].positions)
                    tally = counted if tally is None else tally + counted
            s = scores[offsets[i] : offsets[i + 1]]
            hits: list[HybridHit] = []
            for p, ids in zip(parts, ids_of, strict=True):
                c = p[i]
                if len(c):
                    hits += c.hits(ids, None, s[len(hits) : len(hits) + len(c)])
            order = (
                best_k(np.array([h.score for h in hits]), _id_rank([h.doc_id for h in hits]), k)
                if hits
                else np.zeros(0, dtype=np.int64)
            )
            out.append(
                Result(
                    [hits[j] for j in order], dict(timing), q, None if tally is None else tally.counts(facets), tally
                )
            )
        ms = 1000 * (time.perf_counter() - t0)
        for r in out:
            r.timing["rank_ms"] = 1000 * (time.perf_counter() - t2)
            r.timing["total_ms"] = ms
            r.timing["batch"] = float(len(qs))
        return out

    def _allowed(self, st: LiveState, flt: Filter | None = None) -> np.ndarray | None:
        """The base positions a search may return: all but the tombstoned, those ``flt`` allows
        (None: all; the tombstones' mask kept with the state, the filter's cached by the bundle)."""
        fmask = st.base.filters.mask(flt) if flt else None
        if not st.dead:
            return fmask
        cached = getattr(st, "_allowed", None)
        if cached is None:
            cached = np.ones(len(st.base.corpus), dtype=bool)
            index = st.base.corpus.index
            cached[[index[d] for d in st.dead]] = False
            object.__setattr__(st, "_allowed", cached)
        return cached if fmask is None else cached & fmask

    def _seg_allowed(self, st: LiveState, seg: Delta, flt: Filter | None = None) -> np.ndarray | None:
        """The positions of a delta segment whose copy is the current one and ``flt`` allows
        (None: all; the current copies' mask kept with the state)."""
        cache = st.__dict__.setdefault("_seg_allowed", {})
        if id(seg) not in cache:
            mask = np.fromiter((st.docs.get(d.id) is d for d in seg.documents), dtype=bool, count=len(seg.documents))
            cache[id(seg)] = None if mask.all() else mask
        current = cache[id(seg)]
        fmask = seg.filters.mask(flt) if flt else None
        if fmask is None:
            return current
        return fmask if current is None else current & fmask

    def hits(self, result: Result, hits: Sequence[HybridHit] | None = None) -> list[Hit]:
        """Plain rows of ``hits`` (default: the result's), read from the state it was searched on."""
        st: LiveState = getattr(result, "state", None) or self._state
        out = []
        for r, h in enumerate(result.hits if hits is None else hits, 1):
            d = st.docs.get(h.doc_id)
            if d is not None:
                out.append(Hit(r, h.doc_id, h.score, d.title, d.text, dict(d.fields)))
                continue
            i = st.base.corpus.index[h.doc_id]
            c = st.base.corpus
            out.append(Hit(r, h.doc_id, h.score, c.titles[i], c.texts[i], c.fields(i)))
        return out


def _encoded(base: Bundle, docs: Sequence[Document]) -> dict[str, Any]:
    """Per semantic model of ``base``, the vectors its served encoder gives ``docs`` (their
    fields joined as the bundle's are), packed for the change log."""
    texts = [join_fields(d.title, d.text, base.manifest.get("fields", "title+text")) for d in docs]
    vectors = {}
    for name, r in base.semantic.items():
        enc = r.encoder
        if getattr(enc, "document_encoder", None) is not None and enc.document_encoder is not enc:  # type: ignore[attr-defined]  # checked
            v = enc.encode_documents(texts)  # a separate document model: not the one searches use
        else:
            with base.lock(r):
                v = enc.encode_documents(texts)
        vectors[name] = pack_vectors(np.asarray(v, dtype=np.float32))
    return vectors


class _Ids:
    """A list of ids with ``take`` (what ``Candidates.hits`` reads ids through)."""

    def __init__(self, ids: Sequence[str]):
        self.ids = np.asarray(list(ids), dtype=object)

    def take(self, positions: np.ndarray) -> np.ndarray:
        return self.ids[positions]


def _global_cut(parts: Sequence[Candidates], n_lexical: int, n_semantic: int) -> list[Candidates]:
    """One query's candidates of every segment cut to what one collection's stage 1 returns: the
    ``n_lexical`` best lexical scores and the ``n_semantic`` best semantic scores over all (each
    segment returned its own best), with the stage ranks taken over all; a candidate in neither
    is dropped. (Ties at a cut: the earlier segment's first.)"""
    keep_rank = []
    for score, rank, n in (("lexical", "lexical_rank", n_lexical), ("semantic", "semantic_rank", n_semantic)):
        s = np.concatenate([np.where(np.isnan(getattr(p, rank)), -np.inf, getattr(p, score)) for p in parts])
        returned = np.flatnonzero(np.isfinite(s))
        order = returned[np.argsort(-s[returned], kind="stable")][:n]
        ranks = np.full(len(s), np.nan)
        ranks[order] = np.arange(1, len(order) + 1)
        keep_rank.append(ranks)
    lexical_rank, semantic_rank = keep_rank
    keep = ~(np.isnan(lexical_rank) & np.isnan(semantic_rank))
    out = []
    at = 0
    for p in parts:
        sl = slice(at, at + len(p))
        k = keep[sl]
        out.append(Candidates(p.positions[k], p.lexical[k], p.semantic[k], lexical_rank[sl][k], semantic_rank[sl][k]))
        at += len(p)
    return out


def _union_key(h: HybridHit) -> tuple[bool, float, str]:
    """A hit's place in a union across segments: lexical hits first by lexical score, then the
    others by semantic score (ties by id)."""
    lexical = h.lexical_rank is not None
    score = (h.lexical if lexical else h.semantic) or 0.0
    return (not lexical, -score, h.doc_id)


def _id_rank(ids: Sequence[str]) -> np.ndarray:
    """Each id's rank in sorted order (ties of score are broken by id, as ``Bundle`` does)."""
    order = sorted(range(len(ids)), key=ids.__getitem__)
    ranks = np.empty(len(ids), dtype=np.int64)
    ranks[order] = np.arange(len(ids))
    return ranks


__all__ = [
    "CHANGES_SEQ",
    "FOLD_MIN",
    "MERGE_AT",
    "POLL",
    "VISIBLE",
    "Document",
    "LiveIndex",
    "LiveState",
    "changes_dir",
]
