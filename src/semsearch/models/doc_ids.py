"""Compact document ids: one UTF-8 buffer and offsets behind a ``Sequence[str]``.

A Python list of short ids costs tens of bytes per id (the str objects and the list's pointers),
and the ``{id: position}`` dict that candidate re-ranking needs more again; at millions of
documents that outweighs the inverted index. ``DocIds`` keeps the ids' UTF-8 bytes in one buffer
with int64 offsets (8 bytes + the id's length per document) and the positions in sorted-id order
(int32): the id ranks that break score ties come from that order, and id -> position is a binary
search in it (``positions``, ``position``), so no dict is needed. Ids are encoded with
``surrogatepass``, under which byte order is code point order: the sorted order is Python's
``sorted(ids)``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, overload

import numba
import numpy as np

_ENC = "utf-8"
_ERRORS = "surrogatepass"  # ids are any str (JSON allows lone surrogates); code point order kept


@numba.njit(cache=True, nogil=True)
def _less(buf: np.ndarray, off: np.ndarray, a: int, b: int) -> bool:
    """Bytes of id ``a`` before those of id ``b`` (lexicographic; a proper prefix first)."""
    i, j = off[a], off[b]
    ea, eb = off[a + 1], off[b + 1]
    while i < ea and j < eb:
        if buf[i] != buf[j]:
            return buf[i] < buf[j]
        i += 1
        j += 1
    return (ea - off[a]) < (eb - off[b])


@numba.njit(cache=True, nogil=True)
def _merge_sort(buf: np.ndarray, off: np.ndarray, a: np.ndarray, tmp: np.ndarray) -> None:
    """Sorts the positions ``a`` in place by their ids' bytes (stable bottom-up merge sort)."""
    n = len(a)
    src, dst = a, tmp
    run = 1
    while run < n:
        for lo in range(0, n, 2 * run):
            mid = min(lo + run, n)
            hi = min(lo + 2 * run, n)
            i, j, o = lo, mid, lo
            while i < mid and j < hi:
                if _less(buf, off, src[j], src[i]):
                    dst[o] = src[j]
                    j += 1
                else:
                    dst[o] = src[i]
                    i += 1
                o += 1
            while i < mid:
                dst[o] = src[i]
                i += 1
                o += 1
            while j < hi:
                dst[o] = src[j]
                j += 1
                o += 1
        src, dst = dst, src
        run *= 2
    if src is not a:
        a[:] = src


@numba.njit(cache=True, nogil=True)
def _prefix_keys(buf: np.ndarray, off: np.ndarray, skip: int) -> np.ndarray:
    """Each id's 8 bytes after the first ``skip`` as a big-endian uint64, zero-padded: ordering
    by these keys orders the ids, except among equal keys."""
    n = len(off) - 1
    keys = np.zeros(n, dtype=np.uint64)
    for i in range(n):
        k = np.uint64(0)
        for j in range(8):
            p = off[i] + skip + j
            k = k << np.uint64(8)
            if p < off[i + 1]:
                k |= np.uint64(buf[p])
        keys[i] = k
    return keys


@numba.njit(cache=True, nogil=True)
def _sort_ties(buf: np.ndarray, off: np.ndarray, order: np.ndarray, keys: np.ndarray) -> None:
    """Orders every run of equal keys in ``order`` (positions sorted by key) by the full ids."""
    n = len(order)
    i = 0
    while i < n:
        j = i + 1
        while j < n and keys[order[j]] == keys[order[i]]:
            j += 1
        if j - i > 1:
            _merge_sort(buf, off, order[i:j], np.empty(j - i, dtype=order.dtype))
        i = j


def _argsort_ids(buf: np.ndarray, off: np.ndarray) -> np.ndarray:
    """Positions in sorted-id order: numpy's sort of 8-byte keys taken after the ids' common
    prefix, then the runs of equal keys sorted by their whole bytes."""
    n = len(off) - 1
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    lengths = np.diff(off)
    skip = 0
    m = int(lengths.min())
    if m:  # the common prefix of every id (bytes equal to the first id's)
        starts = off[:-1]
        while skip < m and (buf[starts + skip] == buf[skip]).all():
            skip += 1
    keys = _prefix_keys(buf, off, skip)
    order = np.argsort(keys, kind="stable")
    _sort_ties(buf, off, order, keys)
    return order


@numba.njit(cache=True, nogil=True)
def _first_duplicate(buf: np.ndarray, off: np.ndarray, order: np.ndarray) -> int:
    """Position of an id equal to its predecessor in sorted order, or -1."""
    for r in range(1, len(order)):
        if not _less(buf, off, order[r - 1], order[r]):
            return order[r]
    return -1


@numba.njit(cache=True, nogil=True)
def _cmp(buf: np.ndarray, off: np.ndarray, a: int, kbuf: np.ndarray, ka: int, kb: int) -> int:
    """Sign of (id ``a``) minus (the key ``kbuf[ka:kb]``), bytewise."""
    i, e = off[a], off[a + 1]
    j = ka
    while i < e and j < kb:
        if buf[i] != kbuf[j]:
            return -1 if buf[i] < kbuf[j] else 1
        i += 1
        j += 1
    if i < e:
        return 1
    return -1 if j < kb else 0


@numba.njit(cache=True, nogil=True)
def _lookup(buf: np.ndarray, off: np.ndarray, order: np.ndarray, kbuf: np.ndarray, koff: np.ndarray) -> np.ndarray:
    """Position of each key (``kbuf`` / ``koff``, as the ids) among the ids, -1 if absent."""
    out = np.full(len(koff) - 1, -1, dtype=np.int64)
    for q in range(len(koff) - 1):
        lo, hi = 0, len(order)
        while lo < hi:
            mid = (lo + hi) // 2
            c = _cmp(buf, off, order[mid], kbuf, koff[q], koff[q + 1])
            if c < 0:
                lo = mid + 1
            elif c > 0:
                hi = mid
            else:
                out[q] = order[mid]
                break
    return out


@numba.njit(cache=True, nogil=True)
def _gather(buf: np.ndarray, off: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The bytes of the ids at ``pos``, NUL-separated."""
    starts = np.empty(len(pos), dtype=np.int64)
    lengths = np.empty(len(pos), dtype=np.int64)
    total = len(pos) - 1 if len(pos) else 0
    for j in range(len(pos)):
        starts[j] = off[pos[j]]
        lengths[j] = off[pos[j] + 1] - starts[j]
        total += lengths[j]
    out = np.zeros(total, dtype=np.uint8)
    o = 0
    for j in range(len(pos)):
        out[o : o + lengths[j]] = buf[starts[j] : starts[j] + lengths[j]]
        o += lengths[j] + 1
    return out


def _encode(ids: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes as uint8, int64 offsets) of ``ids``; ASCII-only ids without per-id bytes objects."""
    ids = ids if isinstance(ids, (list, tuple)) else list(ids)
    try:
        joined = "".join(ids)
    except TypeError:
        raise TypeError("document ids must be str") from None
    if joined.isascii():
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        data = joined.encode("ascii")
    else:
        enc = [x.encode(_ENC, _ERRORS) for x in ids]
        lengths = np.fromiter(map(len, enc), dtype=np.int64, count=len(enc))
        data = b"".join(enc)
    off = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=off[1:])
    return np.frombuffer(data, dtype=np.uint8), off


class DocIds(Sequence[str]):
    """Document ids in index order, stored compactly (module docstring). Behaves as a read-only
    list of str (len, index, slice, iteration, ``in``, ``index``, equality with a list) and adds
    ``take`` (ids at many positions), ``positions`` (positions of many ids), ``ranks`` (each id's
    rank in sorted order) and ``position`` (an id -> position mapping)."""

    #: up to this many ids, ``take`` and ``positions`` also keep them as str objects and a dict
    #: once asked: bulk runs over small collections then index an object array instead of
    #: decoding every hit and look ids up in a dict; beyond it only the compact buffer is held
    STR_CACHE_MAX = 200_000

    _buf: np.ndarray  # the ids' UTF-8 bytes, one after another
    _off: np.ndarray  # int64 offsets: id i is _buf[_off[i]:_off[i + 1]]
    _order: np.ndarray  # positions in sorted-id order

    def __init__(self, ids: Iterable[str] | DocIds = ()):
        if isinstance(ids, DocIds):
            self._buf, self._off, self._order = ids._buf, ids._off, ids._order  # noqa: SLF001  # same class
            return
        self._buf, self._off = _encode(ids)
        self._order = self._sorted_order()

    @property
    def _nul_free(self) -> bool:
        """No id holds a NUL character, so NUL can separate ids in one decoded string (``take``)."""
        p = self.__dict__.get("_nul_free_")
        if p is None:
            p = self.__dict__["_nul_free_"] = bool(len(self._buf) == 0 or int(self._buf.min()) > 0)
        return p

    @classmethod
    def from_buffer(cls, buf: np.ndarray, offsets: np.ndarray) -> DocIds:
        """Ids from their UTF-8 bytes and offsets (``buffer()``); ValueError if inconsistent."""
        buf = np.ascontiguousarray(buf, dtype=np.uint8)
        off = np.ascontiguousarray(offsets, dtype=np.int64)
        if off.ndim != 1 or len(off) < 1 or off[0] != 0 or off[-1] != len(buf) or (np.diff(off) < 0).any():
            raise ValueError("document id offsets do not match their buffer")
        try:
            buf.tobytes().decode(_ENC, _ERRORS)
        except UnicodeDecodeError as e:
            raise ValueError(f"document ids are not UTF-8 ({e})") from None
        self = cls.__new__(cls)
        self._buf, self._off = buf, off
        self._order = self._sorted_order()
        return self

    def _sorted_order(self) -> np.ndarray:
        order = _argsort_ids(self._buf, self._off)
        return order.astype(np.int32) if len(order) < 2**31 else order

    def buffer(self) -> tuple[np.ndarray, np.ndarray]:
        """(UTF-8 bytes, offsets): what ``from_buffer`` takes."""
        return self._buf, self._off

    @property
    def nbytes(self) -> int:
        strs = self.__dict__.get("_strs_")  # (the str objects and the dict not counted)
        return int(self._buf.nbytes + self._off.nbytes + self._order.nbytes + (0 if strs is None else strs.nbytes))

    # -- the list interface ----------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._off) - 1

    def _one(self, i: int) -> str:
        return self._buf[self._off[i] : self._off[i + 1]].tobytes().decode(_ENC, _ERRORS)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._one(j) for j in range(*i.indices(len(self)))]
        i = int(i)  # (numpy integers too)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("document id index out of range")
        return self._one(i)

    def __iter__(self) -> Iterator[str]:
        data = self._buf.tobytes()
        off = self._off.tolist()
        for a, b in zip(off, off[1:]):
            yield data[a:b].decode(_ENC, _ERRORS)

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and self.positions([doc_id])[0] >= 0

    def index(self, doc_id: Any, start: int = 0, stop: int | None = None) -> int:
        p = int(self.positions([doc_id])[0]) if isinstance(doc_id, str) else -1
        if p < 0 or p < start or (stop is not None and p >= stop):
            raise ValueError(f"{doc_id!r} is not in the document ids")
        return p

    def count(self, doc_id: Any) -> int:
        return int(doc_id in self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DocIds):
            return np.array_equal(self._off, other._off) and np.array_equal(self._buf, other._buf)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # unhashable

    def __repr__(self) -> str:
        head = ", ".join(repr(x) for x in self[:3])
        return f"DocIds([{head}{', ...' if len(self) > 3 else ''}], n={len(self)})"

    # -- bulk access -----------------------------------------------------------------------
    def _strs(self) -> np.ndarray | None:
        """For at most ``STR_CACHE_MAX`` ids: the ids as an object array, built on first use;
        None for larger collections."""
        if len(self) > self.STR_CACHE_MAX:
            return None
        strs = self.__dict__.get("_strs_")
        if strs is None:
            strs = np.empty(len(self), dtype=object)
            strs[:] = list(self)
            self.__dict__["_strs_"] = strs
        return strs

    def _dict(self) -> dict[str, int] | None:
        """For at most ``STR_CACHE_MAX`` ids: {id: position}, built on first use; else None."""
        if len(self) > self.STR_CACHE_MAX:
            return None
        d = self.__dict__.get("_dict_")
        if d is None:
            strs = self._strs()
            d = self.__dict__["_dict_"] = {x: i for i, x in enumerate(strs.tolist())}  # type: ignore[union-attr]  # small collection
        return d

    def take(self, positions: np.ndarray) -> np.ndarray:
        """The ids at ``positions`` (any shape, int; negative ones count from the end), as an
        object array of str."""
        strs = self._strs()
        if strs is not None:
            return strs[positions]
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (pos.min() < -len(self) or pos.max() >= len(self)):
            raise IndexError("document id index out of range")
        pos = np.where(pos < 0, pos + len(self), pos).reshape(-1)
        out = np.empty(len(pos), dtype=object)
        if self._nul_free and len(pos):
            # one NUL-separated buffer, decoded and split in C, not a Python slice per id
            out[:] = _gather(self._buf, self._off, pos).tobytes().decode(_ENC, _ERRORS).split("\x00")
        else:
            mv = memoryview(self._buf)  # type: ignore[arg-type]  # numpy stub: an ndarray is a buffer
            for j, (a, b) in enumerate(zip(self._off[pos].tolist(), self._off[pos + 1].tolist())):
                out[j] = str(mv[a:b], _ENC, _ERRORS)
        return out.reshape(np.shape(positions))

    def positions(self, doc_ids: Sequence[str]) -> np.ndarray:
        """Position of each of ``doc_ids`` (int64), -1 for an id that is not here."""
        if len(doc_ids) == 0:
            return np.zeros(0, dtype=np.int64)
        known = self._dict()
        if known is not None:
            get = known.get
            try:  # in C, no per-id Python frame (the served ranker looks its candidates up per search)
                return np.fromiter(map(get, doc_ids, repeat(-1, len(doc_ids))), dtype=np.int64, count=len(doc_ids))
            except TypeError:  # an unhashable "id"
                return np.fromiter(
                    (get(d, -1) if isinstance(d, str) else -1 for d in doc_ids), dtype=np.int64, count=len(doc_ids)
                )
        kbuf, koff = _encode(doc_ids)
        return _lookup(self._buf, self._off, self._order, kbuf, koff)

    @property
    def ranks(self) -> np.ndarray:
        """Rank of each id in sorted order (``base.id_ranks``): the tie-breaker, doc id ascending."""
        r = np.empty(len(self), dtype=self._order.dtype)
        r[self._order] = np.arange(len(self), dtype=self._order.dtype)
        return r

    def first_duplicate(self) -> str | None:
        """An id that occurs more than once, or None."""
        p = _first_duplicate(self._buf, self._off, self._order)
        return None if p < 0 else self._one(int(p))

    @property
    def position(self) -> IdPositions:
        """id -> position, as a read-only mapping (binary search; no dict is built)."""
        return IdPositions(self)


class IdPositions(Mapping[str, int]):
    """``DocIds`` as a mapping id -> position, for code written against ``{id: position}``;
    ``positions_of`` looks many up at once (``base.positions`` uses it)."""

    def __init__(self, ids: DocIds):
        self.ids = ids

    def __getitem__(self, doc_id: str) -> int:
        p = int(self.ids.positions([doc_id])[0]) if isinstance(doc_id, str) else -1
        if p < 0:
            raise KeyError(doc_id)
        return p

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.ids

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def positions_of(self, doc_ids: Sequence[str]) -> np.ndarray:
        return self.ids.positions(doc_ids)
