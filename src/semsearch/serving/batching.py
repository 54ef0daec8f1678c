"""Dynamic micro-batching of a worker's searches: the searches that arrive together run as one
``Bundle.search_many`` pass."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..index.bundle import Bundle, Result
from ..index.live import LiveIndex

BATCH_CAP = 64
"""Most searches one pass of a worker runs together (``SearchBatcher``)."""
GATHER_TURNS = 4
"""Turns of the event loop a search pass waits for more searches (``SearchBatcher``): enough for
the requests read meanwhile to join the pass, few enough that a lone client hardly waits."""


class SearchBatcher:
    """Dynamic micro-batching of one worker's searches (``/search``): the searches that arrive while
    a pass runs wait for the next pass, which takes all of them (at most ``cap``, same settings)
    and searches them together (``Bundle.search_many``: one encoder call, one vector search, one
    ranker prediction). A pass starts ``turns`` turns of the event loop after its first search
    arrived (default ``GATHER_TURNS``), so that the requests read in the meantime join it: a
    request read in one turn reaches the batcher in a later one (uvicorn runs each request as a
    task), and a pass started at once would take only those already waiting: several small passes
    where one larger pass costs less a search. Passes run on the
    event loop, one at a time, and the loop reads, parses and answers requests between them."""

    def __init__(
        self,
        bundle: Bundle | LiveIndex,
        cap: int = BATCH_CAP,
        observe: Callable[[int], None] | None = None,
        turns: int = GATHER_TURNS,
    ) -> None:
        if turns < 1:
            raise ValueError(f"turns must be >= 1, got {turns}")
        self.bundle, self.cap, self.observe, self.turns = bundle, cap, observe, turns
        self._waiting: list[tuple[tuple[int, str | None, str], str, float, asyncio.Future[Result]]] = []
        self._scheduled = False

    def search(self, query: str, k: int, model: str | None, merge: str) -> asyncio.Future[Result]:
        """A future of ``Bundle.search(query, k, model=model, merge_by=merge)``'s result, with the
        ms it waited for its pass (``timing["queue_ms"]``)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        self._waiting.append(((k, model, merge), query, time.perf_counter(), future))
        if not self._scheduled:
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
        """One pass: the first waiting search's settings, with every other waiting search of the
        same settings up to ``cap``; what is left gets the next pass."""
        key = self._waiting[0][0]
        batch = [w for w in self._waiting if w[0] == key][: self.cap]
        taken = {id(w) for w in batch}
        self._waiting = [w for w in self._waiting if id(w) not in taken]
        self._scheduled = bool(self._waiting)
        if self._scheduled:
            asyncio.get_running_loop().call_soon(self._after, self.turns)
        start = time.perf_counter()
        try:
            results = self.bundle.search_many([w[1] for w in batch], key[0], model=key[1], merge_by=key[2])
        except Exception as e:  # noqa: BLE001 — each waiting handler answers it (e.g. the vector store is down)
            for w in batch:
                if not w[3].done():
                    w[3].set_exception(e)
            return
        if self.observe is not None:
            self.observe(len(batch))
        for (_, _, arrived, future), r in zip(batch, results, strict=True):
            r.timing["queue_ms"] = 1000 * (start - arrived)
            if not future.done():  # (cancelled: the client went away)
                future.set_result(r)
