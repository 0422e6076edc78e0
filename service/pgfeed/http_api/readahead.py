"""Read-ahead and shared pages: while a client handles a page, the next one (same parameters,
from its ``next`` cursor) is read and encoded in a worker thread, so paging overlaps the server's
decoding with the client's parsing instead of adding them up; and every page read is kept for a
while, so that replaying readers with the same parameters (a dozen consumers catching up from the
same cursor) share one read and one encoding of each page, reading it once even when they ask
at the same moment.

Pages are immutable once written (the log only grows and loses its oldest part); an entry is keyed
by the feed's reader object (a re-created feed has a new one) and the full page parameters. A
request also takes a page kept for the same parameters with a smaller limit, at least half its
own (``limit`` is a most): a reader that doubles its limit page by page (the Spark connector's
first pages, small so that Spark has rows while the server reads on) is answered by the page read
ahead at its previous limit instead of having it read twice; half, so that a reader never follows
one with much smaller pages.
Retention is still checked per request before an entry is used, and the head and ``has_more`` are
recomputed when the answer leaves. Entries expire after ``ttl`` seconds; at most ``max_entries``
pages and ``max_bytes`` of encoded bodies are kept.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool

from pgfeed.feeds.serving import PageKey
from pgfeed.http_api.encode import Encoded

__all__ = ["PageKey", "ReadAhead"]

log = logging.getLogger("pgfeed.http")


@dataclass(slots=True)
class _Entry:
    task: asyncio.Task[Encoded]
    created: float


class ReadAhead:
    def __init__(self, *, max_entries: int = 32, max_bytes: int = 256 << 20, ttl: float = 30.0) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.ttl = ttl
        self._entries: OrderedDict[PageKey, _Entry] = OrderedDict()
        self._running: set[asyncio.Task[Encoded]] = set()
        self.hits = 0
        self.misses = 0

    def _expire(self, now: float) -> None:
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if now - entry.created < self.ttl and len(self._entries) <= self.max_entries:
                break
            del self._entries[key]
        held = 0
        for key, entry in reversed(self._entries.items()):  # newest first
            if entry.task.done() and not entry.task.cancelled() and entry.task.exception() is None:
                held += len(entry.task.result().body)
        while held > self.max_bytes and self._entries:
            key, entry = self._entries.popitem(last=False)
            if entry.task.done() and not entry.task.cancelled() and entry.task.exception() is None:
                held -= len(entry.task.result().body)

    def _kept(self, key: PageKey) -> tuple[PageKey, _Entry] | None:
        """``key``'s entry, or that of the same page with the largest smaller limit of at least
        half ``key``'s."""
        entry = self._entries.get(key)
        if entry is not None:
            return key, entry
        smaller = [k for k in self._entries
                   if k.params == key.params and key.limit <= 2 * k.limit < 2 * key.limit]
        if not smaller:
            return None
        best = max(smaller, key=lambda k: k.limit)
        return best, self._entries[best]

    async def take(self, key: PageKey) -> Encoded | None:
        """The page read ahead for ``key`` (waiting for it if still being read), or None."""
        self._expire(time.monotonic())
        kept = self._kept(key)
        if kept is None:
            self.misses += 1
            return None
        found, entry = kept
        try:
            out = await asyncio.shield(entry.task)
        except Exception:  # the request reads it itself and answers its own error
            self._entries.pop(found, None)
            self.misses += 1
            return None
        self.hits += 1
        return out

    async def read(self, key: PageKey, read: Callable[[], Encoded]) -> Encoded:
        """``key``'s page: the one kept or being read, or read now in a worker thread and kept
        (empty pages are not kept: the next request at that cursor may find commits)."""
        out = await self.take(key)
        if out is None:
            out = await asyncio.shield(self.start(key, read))
        return out

    def start(self, key: PageKey, read: Callable[[], Encoded]) -> asyncio.Task[Encoded]:
        """Read ``key``'s page in a worker thread, unless it is already there or being read."""
        if key in self._entries:
            return self._entries[key].task
        task = asyncio.get_running_loop().create_task(run_in_threadpool(read))
        self._running.add(task)
        task.add_done_callback(self._finished)
        self._entries[key] = _Entry(task, time.monotonic())
        self._expire(time.monotonic())
        return task

    def _finished(self, task: asyncio.Task[Encoded]) -> None:
        self._running.discard(task)
        failed = task.cancelled() or task.exception() is not None
        if not task.cancelled() and task.exception() is not None:
            log.debug("read-ahead failed: %r", task.exception())
        if failed or not task.result().change_count:
            for key, entry in list(self._entries.items()):
                if entry.task is task:
                    del self._entries[key]
