"""Dynamic micro-batching of a worker's searches: the searches that arrive together run as one
``Searcher.search_requests`` pass."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..index.searcher import Result, Searcher, SearchRequest

BATCH_CAP = 64
"""Most searches one pass of a worker runs together (``SearchBatcher``)."""
OFFLOADED_PASSES = 4
"""Offloaded passes (a sharded bundle's) that run at once: each mostly waits for its shards."""
GATHER_TURNS = 4
"""Turns of the event loop a search pass waits for more searches (``SearchBatcher``): enough for
the requests read meanwhile to join the pass, few enough that a lone client hardly waits."""


class SearchBatcher:
    """Dynamic micro-batching of one worker's searches (``/search``): the searches that arrive while
    a pass runs wait for the next pass, which takes all of them (at most ``cap``) and searches
    those of the same options together (``Searcher.search_requests`` of each run of equal
    ``SearchRequest.options``: one encoder call, one vector search, one ranker prediction), one
    call per distinct options (filter included: one mask a call) in the order they arrived. A
    pass starts ``turns`` turns of the event loop after its first search
    arrived (default ``GATHER_TURNS``), so that the requests read in the meantime join it: a
    request read in one turn reaches the batcher in a later one (uvicorn runs each request as a
    task), and a pass started at once would take only those already waiting: several small passes
    where one larger pass costs less a search. Passes run on the
    event loop, one at a time, and the loop reads, parses and answers requests between them."""

    def __init__(
        self,
        searcher: Searcher,
        cap: int = BATCH_CAP,
        observe: Callable[[int], None] | None = None,
        turns: int = GATHER_TURNS,
    ) -> None:
        """A searcher whose searches wait on other processes (``Capabilities.remote``: a sharded
        bundle's on its shards) has its passes run in threads, up to ``OFFLOADED_PASSES`` at
        once, instead of on the event loop (such a wait must not block the loop: Ray Serve's
        handles refuse to be waited on there; while one pass waits for its shards, the next runs)."""
        if turns < 1:
            raise ValueError(f"turns must be >= 1, got {turns}")
        self.searcher, self.cap, self.observe, self.turns = searcher, cap, observe, turns
        offload = searcher.capabilities.remote
        self._pool = ThreadPoolExecutor(OFFLOADED_PASSES, thread_name_prefix="search-pass") if offload else None
        self._busy = 0  # offloaded passes running
        self._waiting: list[tuple[tuple[Any, ...], SearchRequest, float, asyncio.Future[Result]]] = []
        self._scheduled = False

    def search(self, request: SearchRequest) -> asyncio.Future[Result]:
        """A future of ``searcher.search_request(request)``'s result, with the ms it waited for its
        pass (``timing["queue_ms"]``). Only searches of equal options, filter included (a parsed
        ``Filter`` is canonical), share a ``search_requests`` call: it takes one filter."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        self._waiting.append((request.options, request, time.perf_counter(), future))
        if not self._scheduled and self._busy < OFFLOADED_PASSES:
            self._scheduled = True
            loop.call_soon(self._after, self.turns)
        return future

    def _after(self, turns: int) -> None:
        """The pass, ``turns`` turns of the loop from the one that scheduled it."""
        if turns > 1:
            asyncio.get_running_loop().call_soon(self._after, turns - 1)
        else:
            self._run()

    def _run(self) -> None:
        """One pass: the first ``cap`` waiting searches, grouped by settings (filter included), each
        group one ``search_many`` call, in the order their first search arrived; what is left gets
        the next pass. Searches of different filters cannot share a call (one mask a call), but
        they share the pass: a search does not wait a pass per other filter waiting before it."""
        taken, self._waiting = self._waiting[: self.cap], self._waiting[self.cap :]
        groups: dict[tuple[Any, ...], list] = {}
        for w in taken:
            groups.setdefault(w[0], []).append(w)
        if self._pool is not None:  # the next pass is scheduled when this one ends (_pass_done)
            self._scheduled = False
            self._busy += 1
            self._pool.submit(self._pass_in_thread, asyncio.get_running_loop(), list(groups.items()))
            if self._waiting and self._busy < OFFLOADED_PASSES:
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._after, self.turns)
            return
        self._scheduled = bool(self._waiting)
        if self._scheduled:
            asyncio.get_running_loop().call_soon(self._after, self.turns)
        for key, batch in groups.items():
            self._search(key, batch)

    def _pass_in_thread(self, loop: asyncio.AbstractEventLoop, groups: list) -> None:
        """An offloaded pass: each group searched here, its futures settled on the loop."""
        try:
            self._groups_in_thread(loop, groups)
        finally:
            loop.call_soon_threadsafe(self._pass_done)

    def _groups_in_thread(self, loop: asyncio.AbstractEventLoop, groups: list) -> None:
        for _, batch in groups:
            start = time.perf_counter()
            try:
                results = self.searcher.search_requests([w[1] for w in batch])
            except Exception as e:  # noqa: BLE001  # each waiting handler answers it (e.g. a shard is down)
                loop.call_soon_threadsafe(self._settle, batch, None, e, start)
                continue
            loop.call_soon_threadsafe(self._settle, batch, results, None, start)

    def _pass_done(self) -> None:
        self._busy -= 1
        if self._waiting and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._after, self.turns)

    def _settle(self, batch: list, results: list[Result] | None, error: Exception | None, start: float) -> None:
        if error is not None or results is None:
            for w in batch:
                if not w[3].done():
                    w[3].set_exception(error or RuntimeError("no results"))
            return
        if self.observe is not None:
            self.observe(len(batch))
        for (_, _, arrived, future), r in zip(batch, results, strict=True):
            r.timing["queue_ms"] = 1000 * (start - arrived)
            if not future.done():
                future.set_result(r)

    def close(self) -> None:
        """Stop the pass thread (offloaded passes), after the pass it runs."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _search(self, key: tuple[Any, ...], batch: list) -> None:
        """One ``search_requests`` call for ``batch`` (searches of options ``key``); each future
        gets its result or the call's exception."""
        start = time.perf_counter()
        try:
            results = self.searcher.search_requests([w[1] for w in batch])
        except Exception as e:  # noqa: BLE001  # each waiting handler answers it (e.g. the vector store is down)
            self._settle(batch, None, e, start)
            return
        self._settle(batch, results, None, start)
