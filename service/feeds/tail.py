"""The live tail of one feed, decoded and encoded once for every caught-up reader.

A subscriber that has caught up wants the transactions committed since its cursor, whole and
unfiltered, as gRPC frames or JSON change events. Decoding and encoding them once per
transaction instead of once per subscriber is what lets one feed serve many subscribers: the
tail keeps the newest transactions it encoded, contiguous in log order, and hands the same bytes
to every reader whose cursor lies inside what it covers. Anything else (a cursor below the tail
or inside a transaction, filters, a transaction larger than a fill) is answered by the reader's
own paging (``FeedReader``), as before.

Every method runs on the event loop; only a large fill is read and encoded in a worker thread.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from dataclasses import dataclass

from pgfeed_client._cursor import Cursor
from pgfeed.assembler.model import Transaction
from pgfeed.decoding.changes import LazyChange
from pgfeed.encoding.to_json import change_events
from pgfeed.encoding.to_proto import ColumnKinds, JsonColumnCache, transaction_frames
from pgfeed.errors import PgfeedError
from pgfeed.feeds.reader import FeedReader, Page, ReaderBusy

__all__ = ["SharedTail", "TailEntry", "TailSlice"]

FILL_CHANGES = 2_000  # changes read a fill at most; a larger burst is read by the readers' paging
INLINE_WAL_BYTES = 256 << 10  # a fill spanning less WAL than this runs on the event loop
RESTART_WAL_BYTES = 16 << 20  # a reader this far past the tail's top starts it again


@dataclass(frozen=True, slots=True)
class TailEntry:
    """One whole transaction as every caught-up reader gets it."""

    commit_lsn: int
    change_count: int
    frames: tuple[bytes, ...]  # serialized pgfeed.v1.Transaction frames, the last one final
    events: bytes  # its JSON change events joined by ","
    size: int


@dataclass(frozen=True, slots=True)
class TailSlice:
    """What a reader at some cursor has not read yet, up to ``next`` (past the last entry when
    units without changes follow it: a reader continues from ``next`` either way)."""

    entries: tuple[TailEntry, ...]
    next: Cursor
    change_count: int


class SharedTail:
    """The newest transactions of one feed, covering the positions ``(base, top]`` without a gap.

    ``reader`` is the tail's own (its decoder is not shared with replaying readers, so a fill
    never waits for them); ``column_kinds`` serves json columns of changes that were loaded.
    """

    def __init__(self, reader: FeedReader, column_kinds: JsonColumnCache, *,
                 max_entries: int = 4096, max_bytes: int = 64 << 20,
                 fill_changes: int = FILL_CHANGES) -> None:
        self.reader = reader
        self._kinds = column_kinds
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._fill_changes = fill_changes
        self._entries: list[TailEntry] = []
        self._lsns: list[int] = []  # commit_lsn of each entry, for bisect
        self._bytes = 0
        self._base = self._top = -1  # nothing covered yet
        self._filling: asyncio.Future[None] | None = None
        self.slices_served = 0  # answers with transactions in them (metrics, tests)

    @property
    def covered(self) -> tuple[int, int]:
        """``(base, top)``: the tail holds every unit with base < commit_lsn <= top."""
        return self._base, self._top

    def may_answer(self, cursor: Cursor) -> bool:
        """Would ``after`` answer a reader at ``cursor`` without starting the tail again?"""
        return (cursor.seq is None and self._top >= 0
                and self._base <= cursor.lsn <= self._top + RESTART_WAL_BYTES)

    async def after(self, cursor: Cursor, head: int) -> TailSlice | None:
        """Everything after ``cursor`` up to ``head`` (the feed's durable head), or None when the
        tail cannot answer for this cursor and the reader must page the log itself."""
        if cursor.seq is not None:
            return None
        if self._top < 0 or cursor.lsn - self._top > RESTART_WAL_BYTES:
            # The first reader to catch up starts the tail at its cursor; so does one far past a
            # tail nobody used for a while. A reader a little past ``top`` (it paged the log to
            # the head first) is covered by filling forward, so the others keep their coverage.
            self._reset(cursor.lsn)
        if cursor.lsn < self._base:
            return None
        while self._top < head:
            if self._filling is not None:
                await asyncio.shield(self._filling)
                continue
            if not await self._fill(head):
                break
        if not self._base <= cursor.lsn <= self._top:  # a fill moved the tail past this reader
            return None
        start = bisect.bisect_right(self._lsns, cursor.lsn)
        entries = tuple(self._entries[start:])
        if entries:
            self.slices_served += 1
        return TailSlice(entries, Cursor(self._top), sum(e.change_count for e in entries))

    def _reset(self, position: int) -> None:
        self._entries, self._lsns, self._bytes = [], [], 0
        self._base = self._top = position

    async def _fill(self, head: int) -> bool:
        """Read and encode what follows ``top`` (once, whoever asks); False when nothing was
        added (a transaction too large for a fill moves the tail past it instead)."""
        loop = asyncio.get_running_loop()
        done = self._filling = loop.create_future()
        after = Cursor(self._top)
        try:
            read = None
            if head - self._top <= INLINE_WAL_BYTES:
                try:
                    read = self._read(after, block=False)
                except ReaderBusy:
                    pass
            if read is None:
                read = await asyncio.to_thread(self._read, after, block=True)
        except PgfeedError:
            return False  # the reader's own paging meets the same error and answers it
        finally:
            self._filling = None
            done.set_result(None)
        if after.lsn != self._top:  # reset by a reader meanwhile: this fill is stale
            return True
        return self._add(*read)

    def _read(self, after: Cursor, *, block: bool) -> tuple[Page[LazyChange], list[TailEntry]]:
        page = self.reader.page(after, self._fill_changes, whole_transactions=True, lazy=True,
                                block=block)
        if page.next.seq is not None:  # the first transaction alone exceeds a fill
            return page, []
        kinds = self._kinds.kinds(page.transactions, time.monotonic())
        return page, [_entry(txn, kinds) for txn in page.transactions]

    def _add(self, page: Page[LazyChange], entries: list[TailEntry]) -> bool:
        if page.next.seq is not None:
            # Readers page through that transaction themselves; the tail starts again after it.
            self._reset(page.next.lsn)
            return False
        if page.next.lsn <= self._top:
            return False
        for entry in entries:
            self._entries.append(entry)
            self._lsns.append(entry.commit_lsn)
            self._bytes += entry.size
        self._top = page.next.lsn
        self._evict()
        return True

    def _evict(self) -> None:
        drop = 0
        while (len(self._entries) - drop > self._max_entries
               or (self._bytes > self._max_bytes and drop < len(self._entries))):
            self._bytes -= self._entries[drop].size
            drop += 1
        if drop:
            self._base = self._lsns[drop - 1]
            del self._entries[:drop], self._lsns[:drop]


def _entry(txn: Transaction[LazyChange], kinds: ColumnKinds) -> TailEntry:
    frames = tuple(transaction_frames(txn, kinds=kinds))
    events = b",".join(change_events(txn))
    return TailEntry(txn.commit_lsn, len(txn.changes), frames, events,
                     sum(map(len, frames)) + len(events))

