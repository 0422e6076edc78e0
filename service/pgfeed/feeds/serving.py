"""One serving loop for HTTP pages and gRPC streams (issue 29.3).

A request asks the supervisor once for its feed's handle (``ServedFeed``: reader, shared tail,
head notifier, spec, relation catalogue); ``Serving`` then owns what both surfaces do with it:
take caught-up readers' transactions from the shared tail (``feeds/tail.py``) or page the log
(``FeedReader``), on the event loop once caught up (a thread round trip costs more than a few
live transactions) or in a worker thread, re-check retention after every read, wait on the
notifier (coalesced wake-ups, ``feeds/notify.py``), and keep reading through stretches the
filters leave out, reporting how far it got. The surfaces only encode what it hands them (HTTP
bodies, gRPC frames) and speak their transport.

``limit`` counts the changes a step keeps, not those it scans: a filtered reader gets full
pages. The work behind one step stays bounded: it scans at most ``SCAN_CHANGES`` changes (or
``limit``, when that is larger), then answers with what it kept and a ``next`` past everything
scanned, so a reader of a rare table still makes progress in few requests.

The reader's page calls live here only (``PageRead``): the encoders receive a ``PageRead`` and
take its one form of a read (``PageRead.page``: row changes in runs of wire-form frames).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, Literal, Protocol, TypeVar

from pgfeed.changelog.base import ChangeLogError
from pgfeed.decoding.model import Op, Transaction
from pgfeed.decoding.relations import RelationCatalog
from pgfeed.decoding.runs import Read, RowRun, change_total
from pgfeed.feeds.model import FeedSpec
from pgfeed.feeds.notify import HeadNotifier
from pgfeed.feeds.reader import FeedReader, Page, ReaderBusy
from pgfeed.feeds.tail import INLINE_WAL_BYTES, SharedTail, Surface, TailSlice
from pgfeed_client._cursor import Cursor

__all__ = [
    "INLINE_CHANGES",
    "PLAIN",
    "PROGRESS_SECONDS",
    "SCAN_CHANGES",
    "PageKey",
    "PageRead",
    "PageShare",
    "ServedFeed",
    "Serving",
    "Step",
    "Window",
]

SCAN_CHANGES = 100_000  # changes one step scans at most (``limit`` when larger): a step returns
INLINE_CHANGES = 200  # changes scanned by a read on the event loop once caught up
PROGRESS_SECONDS = 1.0  # a stream passing over filtered-out transactions reports at least this often

T = TypeVar("T")
CursorParam = Cursor | Literal["latest"]


class ServedFeed:
    """What serving one feed needs, looked up once a request (``Supervisor.served``)."""

    __slots__ = ("_catalog", "_check", "_spec", "_tail", "name", "notifier", "reader")

    def __init__(self, name: str, spec: Callable[[], FeedSpec], reader: FeedReader,
                 notifier: HeadNotifier, tail: Callable[[], SharedTail],
                 catalog: Callable[[], RelationCatalog], check: Callable[[FeedReader], None]) -> None:
        self.name = name
        self._spec = spec
        self.reader = reader
        self.notifier = notifier
        self._tail = tail
        self._catalog = catalog
        self._check = check

    def spec(self) -> FeedSpec:
        """The feed's spec as it is now (its tables and options may change while it is served)."""
        return self._spec()

    def tail(self) -> SharedTail:
        """The feed's shared live tail (made on first use)."""
        return self._tail()

    def catalog(self) -> RelationCatalog:
        """The feed's relation catalogue, up to date with the log."""
        return self._catalog()

    def check(self) -> None:
        """FeedNotFound when the feed was deleted (and perhaps created again) since this handle
        was handed out: its log is closed. Called when a read of the log fails."""
        self._check(self.reader)


@dataclass(frozen=True, slots=True)
class Window:
    """What a reader reads beside its cursor: ``FeedReader.page``'s filters. ``to`` may be
    ``latest`` (the head when the reader starts)."""

    tables: frozenset[str] | None = None
    ops: frozenset[Op] | None = None
    to: CursorParam | None = None
    max_transactions: int | None = None
    whole_transactions: bool = False

    @property
    def filtered(self) -> bool:
        return self.tables is not None or self.ops is not None


@dataclass(frozen=True, slots=True)
class PageKey:
    """A page's parameters: ``params``, everything but the limit (reader, position, filters,
    encoding), and ``limit``. Pages below the head never change (until retention trims)."""

    params: Hashable
    limit: int


class PageShare(Protocol[T]):
    """Pages read once for every reader asking with the same parameters (HTTP's read-ahead)."""

    async def read(self, key: PageKey, read: Callable[[], T]) -> T: ...

    def start(self, key: PageKey, read: Callable[[], T]) -> Any: ...


class PageRead:
    """One read of the log from ``after``, for an encoder to take (``page``). ``limit`` counts
    kept changes: a filtered read pages on until it kept ``limit`` or scanned its bound. What was
    read is kept as ``read_page`` (the loop's progress and cursors come from it)."""

    def __init__(self, reader: FeedReader, after: Cursor, limit: int, window: Window,
                 to: Cursor | None, *, scan: int, block: bool) -> None:
        self.reader = reader
        self.after = after
        self.limit = limit
        self.window = window
        self.to = to
        self.scan = scan
        self.block = block
        self.read_page: Page | None = None

    def page(self) -> Page:
        """The page: row changes in runs of wire-form frames the encoders write or load. Pages
        from ``after`` until ``limit`` changes are kept, the log (or ``to``) ends or ``scan``
        changes were scanned: reads grow geometrically and the result is cut at ``limit``."""
        w = self.window
        reader, block, to = self.reader, self.block, self.to

        def read(after: Cursor, limit: int) -> Page:
            return reader.page(after, limit, tables=w.tables, ops=w.ops, to=to,
                               max_transactions=w.max_transactions,
                               whole_transactions=w.whole_transactions, block=block)

        limit, left = self.limit, self.scan
        size = min(limit, left)
        page = read(self.after, size)
        left -= size
        if w.filtered and w.max_transactions is None:
            pages, kept, scanned = [page], page.change_count, size
            while kept < limit and page.has_more and left > 0:
                size = min(left, max(limit - kept, scanned))
                try:
                    page = read(page.next, size)
                except ReaderBusy:  # on the event loop, another reader holds the decoder
                    break
                pages.append(page)
                kept += page.change_count
                scanned += size
                left -= size
            page = _merge(pages)
            if kept > limit:
                page = _cut(page, limit)
        self.read_page = page
        return page


def _merge(pages: Sequence[Page]) -> Page:
    """Consecutive pages as one (a transaction sliced between two pages made whole again)."""
    if len(pages) == 1:
        return pages[0]
    out: list[Transaction[Read]] = []
    passed: Transaction[Read] | None = None
    for page in pages:
        for txn in page.transactions:
            if out and out[-1].commit_lsn == txn.commit_lsn:
                prev = out[-1]
                out[-1] = replace(prev, changes=[*prev.changes, *txn.changes], last_seq=txn.last_seq)
            else:
                out.append(txn)
        if page.passed is not None:
            passed = page.passed
        elif page.transactions:
            passed = None
    last = pages[-1]
    return Page(out, last.next, max(p.head for p in pages), last.has_more, passed)


def _cut(page: Page, limit: int) -> Page:
    """``page`` ending after its ``limit``-th change (its ``next`` there, mid-transaction if so;
    a run of rows cut after the frame of that change)."""
    out: list[Transaction[Read]] = []
    left = limit
    for txn in page.transactions:
        total = change_total(txn.changes)
        if total < left:
            out.append(txn)
            left -= total
            continue
        changes: list[Read] = []
        seq = -1
        for c in txn.changes:
            if type(c) is RowRun:
                if c.count > left:
                    c = c.first(left)
                left -= c.count
                seq = c.last_seq
            else:
                left -= 1
                seq = c.seq
            changes.append(c)
            if left == 0:
                break
        out.append(replace(txn, changes=changes, last_seq=seq))
        nxt = Cursor(txn.commit_lsn) if seq >= txn.change_count - 1 else Cursor(txn.commit_lsn, seq)
        return Page(out, nxt, page.head, True, None)
    return page


@dataclass(slots=True)
class Step(Generic[T]):
    """What one step of the loop serves: a part of the shared tail, or an encoded page of the log
    (``out``); where the reader continues (``next``), the head, whether the log already holds
    more, how many changes it carries, and (a stream passing over filtered-out transactions) the
    last one passed when it is time to report progress."""

    tail: TailSlice | None
    out: T | None
    next: Cursor
    head: int
    has_more: bool
    change_count: int
    progress: Transaction[Read] | None = None


PLAIN = Window()  # every change up to the head: what the shared tail can answer
_START = Cursor(0)


class Serving(Generic[T]):
    """One reader of a feed, from its cursor on: HTTP takes one step (a long-poll), gRPC steps on
    until the client leaves. ``encode`` turns a ``PageRead`` into the surface's page (run where
    the read runs); ``surface`` names the shared tail's encoding for unfiltered readers (None:
    never from the tail); ``inline``: a caught-up reader may read and encode on the event loop;
    ``progress``: report passed-over transactions every ``PROGRESS_SECONDS``. Only a reader of
    the ``PLAIN`` window is answered from the tail."""

    __slots__ = ("_passed", "_sent_at", "_tailing", "after", "caught_up", "encode", "feed", "head", "inline",
                 "limit", "position", "progress", "resolved", "share", "share_params", "stop",
                 "surface", "tail", "tail_limit", "to", "trimmed", "window")

    def __init__(self, feed: ServedFeed, after: CursorParam, limit: int, window: Window,
                 encode: Callable[[PageRead], T], *, surface: Surface | None = None,
                 inline: bool = False, progress: bool = False, tail_limit: int | None = None,
                 share: PageShare[T] | None = None, share_params: Hashable = None,
                 stop: asyncio.Future[None] | None = None) -> None:
        self.feed = feed
        self.after: CursorParam = after
        self.limit = limit
        self.window = window
        self.encode = encode
        self.inline = inline
        self.progress = progress
        self.tail_limit = tail_limit
        self.share = share
        self.share_params = share_params
        self.stop = stop
        self.resolved = False
        self.tail = feed.tail() if surface is not None and window is PLAIN else None
        self.surface: Surface = surface or "json"
        self.position = _START
        self.head = 0
        self.to: Cursor | None = None
        self.trimmed = 0
        self.caught_up = False
        self._passed: Transaction[Read] | None = None
        self._sent_at = time.monotonic() if progress else 0.0
        self._tailing = False  # the last step was served from the tail

    # -- the blocking half (worker threads, or the loop for a small caught-up read) ----------------
    def resolve(self) -> Cursor:
        """The start cursor (``latest`` resolved, retention checked, one past the head refused)
        and the head; the position the loop goes on from."""
        reader = self.feed.reader
        head = reader.changelog.head()
        # A page below the head stays the same until retention trims under it: pages are shared
        # per trimmed position, the one the retention check uses too
        self.trimmed = reader.changelog.trimmed_lsn()
        after = reader.resolve(self.after, head=head, trimmed=self.trimmed, start=True)
        to = self.window.to
        if to is not None:
            self.to = Cursor(head) if to == "latest" else to
        self.position, self.head = after, max(self.head, head)
        self.resolved = True
        return after

    def read(self, after: Cursor, *, inline: bool = False) -> tuple[T, Page]:
        """A page from ``after``, encoded. Retention may have trimmed past ``after`` during the
        read (``resolve`` checked before it): checked again after it, so a page that is served
        has missed nothing."""
        reader = self.feed.reader
        scan = min(self.limit, INLINE_CHANGES) if inline else max(self.limit, SCAN_CHANGES)
        limit = min(self.limit, INLINE_CHANGES) if inline else self.limit
        read = PageRead(reader, after, limit, self.window, self.to, scan=scan, block=not inline)
        try:
            out = self.encode(read)
        except ChangeLogError:  # closed: FeedNotFound if the feed was deleted meanwhile
            self.feed.check()
            raise
        reader.resolve(after)
        assert read.read_page is not None, "an encoder reads its page"
        return out, read.read_page

    def key(self, after: Cursor) -> PageKey:
        return PageKey((self.feed.reader, self.trimmed, after, self.window, self.to,
                        self.share_params), self.limit)

    # -- the loop ---------------------------------------------------------------------------------
    async def start(self) -> Cursor:
        """Resolve the start cursor in a worker thread (RetentionError, CursorAhead,
        FeedNotFound)."""
        return await asyncio.to_thread(self.resolve)

    @property
    def stopped(self) -> bool:
        return self.stop is not None and self.stop.done()

    def bound(self, head: int) -> Cursor:
        return Cursor(head) if self.to is None else min(Cursor(head), self.to)

    def done(self, after: Cursor) -> bool:
        """Has a reader at ``after`` read all of ``(after, to]``? Then no commit can add to it."""
        return self.to is not None and after >= self.to

    async def step(self, deadline: float) -> Step[T]:
        """The next changes past the position: at once when there are some (or more to scan),
        else once a commit brings some, ``deadline`` (event-loop time) passes, the stop signal is
        set or ``to`` is reached. The position moves to the step's ``next``. A reader the shared
        tail answers needs no worker thread: its cursor is resolved only when the log is read."""
        loop = asyncio.get_running_loop()
        notifier = self.feed.notifier
        if not self.resolved:
            after = self.after
            if self.tail is not None and isinstance(after, Cursor) and self.tail.may_answer(after):
                self.position = after  # resolved only if the log must be read
            else:
                await self.start()
        first = True
        while True:
            if self.tail is not None and not notifier.closed:
                if self._tailing and notifier.head <= self.position.lsn:
                    # a stream the tail just served: nothing new yet, wait before asking it again
                    # (the hot path of a live stream: one wait, no coroutine of its own)
                    remaining = deadline - loop.time()
                    if remaining <= 0 or self.stopped:
                        return self._nothing()
                    await notifier.wait_beyond(self.position.lsn, remaining, self.stop)
                    continue
                part = await self._from_tail()
                if part is not None:
                    self._move(part.next)
                    self.caught_up = True
                    if part.change_count:
                        self._tailing = True
                        self._served()
                        return Step(part, None, part.next, self.head, False, part.change_count)
                    if not await self._wait(deadline, self.position.lsn):
                        return self._nothing()
                    continue
            if not self.resolved:
                await self.start()
            out, page, inline = await self._read(self.position, first)
            first = self._tailing = False
            self.head = max(self.head, page.head)
            self._move(page.next)
            count = page.change_count
            if count:
                self._served()
            if page.passed is not None:
                self._passed = page.passed
            has_more = page.next < self.bound(self.head)
            self.caught_up = not has_more
            if inline and has_more and not count:
                continue  # a burst past a small inline read: read on in a worker thread
            progress = self._progress()
            if count or has_more or progress is not None or self.done(page.next) \
                    or self.stopped or loop.time() >= deadline:
                return Step(None, out, page.next, self.head, has_more, count, progress)
            if not await self._wait(deadline, self.head):
                return Step(None, out, page.next, self.head, has_more, count, self._progress())

    def _move(self, position: Cursor) -> None:
        self.position = position
        if not self.resolved:  # resolved later from where the tail left the reader
            self.after = position

    def prefetch(self, after: Cursor) -> None:
        """Start reading the page from ``after`` for the reader's next request (shared pages)."""
        if self.share is not None:
            self.share.start(self.key(after), lambda: self.read(after)[0])

    def worth_reading_ahead(self, after: Cursor) -> bool:
        """A reader with more to read right now, and a bound that does not move (``to=latest``
        is the head of each request)."""
        return self.share is not None and after < self.bound(self.head) and self.window.to != "latest"

    async def _read(self, after: Cursor, first: bool) -> tuple[T, Page, bool]:
        """Inline once caught up (a small read of what the last commits added), else in a worker
        thread; a first read through the shared pages when there are. Also: whether it was
        inline."""
        if self.inline and self.caught_up and self.head - after.lsn <= INLINE_WAL_BYTES:
            try:
                return (*self.read(after, inline=True), True)
            except ReaderBusy:
                pass
        if first and self.share is not None:
            share = self.share
            pages: list[Page] = []

            def read() -> T:
                out, page = self.read(after)
                pages.append(page)
                return out

            out = await share.read(self.key(after), read)
            page = pages[0] if pages else self._page_of(out)
            return out, page, False
        return (*await asyncio.to_thread(self.read, after), False)

    @staticmethod
    def _page_of(out: object) -> Page:
        page = getattr(out, "page", None)
        assert isinstance(page, Page), "a shared page carries the page it encodes"
        return page

    async def _from_tail(self) -> TailSlice | None:
        """The shared tail's part past the position, or None when it does not cover it (or holds
        more than ``tail_limit``): the reader pages the log. A reader known to be caught up may
        (re)start the tail at its cursor."""
        tail = self.tail
        assert tail is not None
        cursor = self.position
        if cursor.seq is not None or not (self.caught_up or tail.may_answer(cursor)):
            return None
        head = self.feed.notifier.head
        part = await tail.after(cursor, head, self.surface)
        self.head = max(self.head, head)
        if part is None or (self.tail_limit is not None and part.change_count > self.tail_limit) \
                or (part.next <= cursor and head > cursor.lsn):
            return None
        return part

    async def _wait(self, deadline: float, beyond: int) -> bool:
        """Wait for a commit past ``beyond`` until ``deadline`` (sooner when progress is due);
        False when the wait is over without one being worth reading for."""
        loop = asyncio.get_running_loop()
        remaining = deadline - loop.time()
        if self.progress and self._passed is not None:
            remaining = min(remaining, self._sent_at + PROGRESS_SECONDS - time.monotonic())
        if remaining <= 0 or self.stopped or self.done(self.position):
            return False
        self.head = max(self.head, await self.feed.notifier.wait_beyond(beyond, remaining, self.stop))
        return not self.stopped

    def _served(self) -> None:
        if self.progress:
            self._passed = None
            self._sent_at = time.monotonic()

    def _progress(self) -> Transaction[Read] | None:
        """The passed transaction to report, when the stream has sent nothing for a while."""
        if not self.progress or self._passed is None \
                or time.monotonic() - self._sent_at < PROGRESS_SECONDS:
            return None
        passed, self._passed = self._passed, None
        self._sent_at = time.monotonic()
        return passed

    def _nothing(self) -> Step[T]:
        return Step(TailSlice((), self.position, 0), None, self.position, self.head, False, 0,
                    self._progress())
