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
from dataclasses import dataclass
from typing import Literal

from pgfeed.decoding.model import Transaction
from pgfeed.decoding.runs import Read, RowRun, change_total
from pgfeed.encoding.to_json import change_events
from pgfeed.encoding.to_proto import transaction_frames
from pgfeed.errors import PgfeedError
from pgfeed.feeds.reader import FeedReader, Page, ReaderBusy
from pgfeed_client._cursor import Cursor

__all__ = ["SharedTail", "TailEntry", "TailSlice"]

FILL_CHANGES = 2_000  # changes read a fill at most; a larger burst is read by the readers' paging
INLINE_WAL_BYTES = 256 << 10  # a fill spanning less WAL than this runs on the event loop
RESTART_WAL_BYTES = 16 << 20  # a reader this far past the tail's top starts it again
_LOADED = 256  # bytes counted for a change decoded already (not in wire form)

Surface = Literal["grpc", "json"]


class TailEntry:
    """One whole transaction as every caught-up reader gets it: its gRPC frames and its JSON
    change events, each encoded the first time a reader of that surface asks, then shared (a
    feed followed over gRPC alone never encodes JSON, and the other way round)."""

    __slots__ = ("_events", "_frames", "_txn", "change_count", "commit_lsn", "size")

    def __init__(self, txn: Transaction[Read]) -> None:
        self.commit_lsn = txn.commit_lsn
        self.change_count = change_total(txn.changes)
        self._txn: Transaction[Read] | None = txn
        self._frames: tuple[bytes, ...] | None = None
        self._events: bytes | None = None
        # what the tail counts against its byte budget: the wire bytes, about what each
        # encoding takes again
        self.size = sum(c.end - c.start if type(c) is RowRun else _LOADED
                        for c in txn.changes) * 3

    @property
    def frames(self) -> tuple[bytes, ...]:
        """Serialized pgfeed.v1.Transaction frames, the last one final."""
        if self._frames is None:
            assert self._txn is not None
            self._frames = tuple(transaction_frames(self._txn))
            self._release()
        return self._frames

    @property
    def events(self) -> bytes:
        """Its JSON change events joined by ","."""
        if self._events is None:
            assert self._txn is not None
            self._events = b",".join(change_events(self._txn))
            self._release()
        return self._events

    def encode(self, surfaces: frozenset[Surface]) -> None:
        """Encode now for ``surfaces`` (a fill read in a worker thread: not later on the loop)."""
        if "grpc" in surfaces:
            self.frames  # noqa: B018
        if "json" in surfaces:
            self.events  # noqa: B018

    def _release(self) -> None:
        if self._frames is not None and self._events is not None:
            self._txn = None  # both encoded: the decoded transaction is no longer needed


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
    never waits for them).
    """

    def __init__(self, reader: FeedReader, *,
                 max_entries: int = 4096, max_bytes: int = 64 << 20,
                 fill_changes: int = FILL_CHANGES) -> None:
        self.reader = reader
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._fill_changes = fill_changes
        self._entries: list[TailEntry] = []
        self._lsns: list[int] = []  # commit_lsn of each entry, for bisect
        self._bytes = 0
        self._base = self._top = -1  # nothing covered yet
        self._filling: asyncio.Future[None] | None = None
        self._surfaces: frozenset[Surface] = frozenset()
        self.slices_served = 0  # answers with transactions in them (metrics, tests)

    @property
    def covered(self) -> tuple[int, int]:
        """``(base, top)``: the tail holds every unit with base < commit_lsn <= top."""
        return self._base, self._top

    def may_answer(self, cursor: Cursor) -> bool:
        """Would ``after`` answer a reader at ``cursor`` without starting the tail again?"""
        return (cursor.seq is None and self._top >= 0
                and self._base <= cursor.lsn <= self._top + RESTART_WAL_BYTES)

    async def after(self, cursor: Cursor, head: int, surface: Surface) -> TailSlice | None:
        """Everything after ``cursor`` up to ``head`` (the feed's durable head), or None when the
        tail cannot answer for this cursor and the reader must page the log itself. ``surface``:
        the encoding the reader will take from the entries (fills read in a worker thread encode
        for every surface asked for so far)."""
        if cursor.seq is not None:
            return None
        if surface not in self._surfaces:
            self._surfaces = self._surfaces | {surface}
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
                read = await asyncio.to_thread(self._read, after, block=True,
                                               surfaces=self._surfaces)
        except PgfeedError:
            return False  # the reader's own paging meets the same error and answers it
        finally:
            self._filling = None
            done.set_result(None)
        if after.lsn != self._top:  # reset by a reader meanwhile: this fill is stale
            return True
        return self._add(*read)

    def _read(self, after: Cursor, *, block: bool, surfaces: frozenset[Surface] = frozenset(),
              ) -> tuple[Page, list[TailEntry]]:
        page = self.reader.page(after, self._fill_changes, whole_transactions=True, block=block)
        if page.next.seq is not None:  # the first transaction alone exceeds a fill
            return page, []
        entries = [TailEntry(txn) for txn in page.transactions]
        if surfaces:
            for entry in entries:
                entry.encode(surfaces)
        return page, entries

    def _add(self, page: Page, entries: list[TailEntry]) -> bool:
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

