"""One read request from query to encoded body: parse cursors and filters, page the feed in a
worker thread (``FeedReader``, the one paging algorithm), long-poll on the feed's head notifier
when a page comes back empty, and encode the page as JSON or Arrow.

Log reads and decoding never run on the event loop; waiting does not hold a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypedDict

from starlette.concurrency import run_in_threadpool

from pgfeed_client._cursor import Cursor, CursorError, parse_cursor
from pgfeed_client._headers import qualified_table
from pgfeed.changelog.base import ChangeLogError
from pgfeed.decoding.model import Op
from pgfeed.encoding import JSON_MEDIA_TYPE
from pgfeed.feeds.notify import HeadNotifier, StopSignal
from pgfeed.feeds.reader import FeedReader, Page, parse_ops
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.feeds.tail import SharedTail
from pgfeed.http_api import encode
from pgfeed.http_api.encode import Encoded
from pgfeed.http_api.errors import ApiError, bad_parameter
from pgfeed.http_api.readahead import PageKey, ReadAhead

__all__ = ["MAX_CURSOR_LENGTH", "Answer", "PageRequest", "parse_cursor_param", "parse_names",
           "parse_ops_param", "parse_tables", "serve_page", "within_head"]

Format = Literal["json", "arrow", "debezium", "count"]
CursorParam = Cursor | Literal["latest"]


# -- query parameters ------------------------------------------------------------------------------

MAX_CURSOR_LENGTH = 64  # the longest valid cursor, LSN:seq, is 36 characters


def parse_cursor_param(name: str, text: str, *, where: str = "query parameter") -> CursorParam:
    if len(text) > MAX_CURSOR_LENGTH:
        raise ApiError(400, "invalid_cursor", f"{where} {name!r}: malformed cursor of {len(text)} "
                       f"characters (at most {MAX_CURSOR_LENGTH}): expected {CursorError.expected}")
    try:
        return parse_cursor(text)
    except CursorError as exc:
        raise ApiError(400, "invalid_cursor", f"{where} {name!r}: {exc}") from None


def within_head(cursor: CursorParam, head: int, *, why: str = "") -> Cursor:
    """A cursor a request asks the log to act on (``latest``: ``head``); one past the head is a
    400 ``cursor_ahead``, ``why`` saying what may be named instead."""
    resolved = Cursor(head) if cursor == "latest" else cursor
    if resolved.lsn > head:
        raise ApiError(400, "cursor_ahead",
                       f"cursor {resolved} is past the feed's head {Cursor(head)}{why}")
    return resolved


def parse_names(name: str, values: Sequence[str] | None) -> list[str] | None:
    """Comma-separated and/or repeated values -> a list (None when absent)."""
    if not values:
        return None
    out: list[str] = []
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if not item:
                raise bad_parameter(name, "empty name in the list; expected comma-separated names")
            if len(item) > 200:
                raise bad_parameter(name, "name longer than 200 characters")
            out.append(item)
    return out


def parse_tables(values: Sequence[str] | None) -> frozenset[str] | None:
    """``orders`` means ``public.orders``; names are matched as ``schema.table``, unquoted."""
    names = parse_names("tables", values)
    if names is None:
        return None
    return frozenset(qualified_table(n) for n in names)


def parse_ops_param(values: Sequence[str] | None) -> frozenset[Op] | None:
    names = parse_names("ops", values)
    try:
        return parse_ops(names)
    except ValueError as exc:
        raise bad_parameter("ops", str(exc)) from None


# -- one request -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PageRequest:
    after: CursorParam
    limit: int
    tables: frozenset[str] | None = None
    ops: frozenset[Op] | None = None
    to: CursorParam | None = None
    wait: float = 0.0
    fmt: Format = "json"
    # /transactions: at most this many transactions a page, only the first one ever sliced
    # (``limit`` is then the change budget of the page)
    transactions: int | None = None


@dataclass(slots=True)
class Answer:
    body: bytes | memoryview
    media_type: str
    headers: dict[str, str]
    change_count: int
    # Starts reading the next page; run once this answer is sent, so that the worker thread
    # decoding it does not compete with the event loop for the GIL while the body goes out.
    read_next: Callable[[], Awaitable[None]] | None = None


async def serve_page(supervisor: Supervisor, feed: str, request: PageRequest,
                     read_ahead: ReadAhead | None = None, stop: StopSignal | None = None) -> Answer:
    """Page the feed; when the page is empty and nothing more is there, wait up to
    ``request.wait`` seconds for a commit and page again (from the advanced cursor). With
    ``read_ahead``, the next page is read while the client handles this one. Once ``stop`` is
    set, a long-poll answers with what it has instead of waiting."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.wait
    stopped = None if stop is None else stop.future()
    tail = supervisor.tail(feed) if _shareable(request) else None
    if tail is not None and isinstance(request.after, Cursor):
        answer = await _from_tail(tail, supervisor.notifier(feed), request, deadline, stopped)
        if answer is not None:
            return answer
    reading = _Reading(supervisor, feed, request)
    after, head = await run_in_threadpool(reading.resolve)
    if read_ahead is not None:  # shared with readers asking for the same page
        out = await read_ahead.read(reading.key(after), lambda: reading.read(after))
    else:
        out = await run_in_threadpool(reading.read, after)
    while True:
        page = out.page
        head = max(head, page.head)
        remaining = deadline - loop.time()
        if out.change_count or page.next < reading.bound(head) or remaining <= 0 \
                or reading.done(page.next) or (stopped is not None and stopped.done()):
            break
        if tail is not None:  # caught up: go on from the shared tail
            answer = await _from_tail(tail, supervisor.notifier(feed), replace(request, after=page.next),
                                      deadline, stopped, caught_up=True)
            if answer is not None:
                return answer
        head = max(head, await supervisor.notifier(feed).wait_beyond(head, remaining, stopped))
        out = await run_in_threadpool(reading.read, page.next)
    body, headers = out.finish(head, reading.to)
    answer = Answer(body, out.media_type, headers, out.change_count)
    if read_ahead is not None and reading.worth_reading_ahead(out, head):
        nxt = out.page.next

        async def read_next() -> None:  # async: runs on the event loop, not in a worker
            read_ahead.start(reading.key(nxt), lambda: reading.read(nxt))

        answer.read_next = read_next
    return answer


def _shareable(request: PageRequest) -> bool:
    """Can the shared tail answer this request? Unfiltered JSON changes up to the head."""
    return (request.fmt == "json" and request.transactions is None and request.tables is None
            and request.ops is None and request.to is None)


async def _from_tail(tail: SharedTail, notifier: HeadNotifier, request: PageRequest,
                     deadline: float, stopped: asyncio.Future[None] | None, *,
                     caught_up: bool = False) -> Answer | None:
    """A page from the feed's shared tail, on the event loop (no worker thread, no decoder):
    None when the tail does not cover the cursor, or holds more than ``limit`` changes past it
    (the reader pages the log, slicing a transaction as usual). A reader known to be
    ``caught_up`` may (re)start the tail at its cursor."""
    loop = asyncio.get_running_loop()
    cursor = request.after
    assert isinstance(cursor, Cursor)
    if cursor.seq is not None or not (caught_up or tail.may_answer(cursor)):
        return None
    head = notifier.head
    while True:
        part = await tail.after(cursor, head, "json")
        if part is None or part.change_count > request.limit or (part.next <= cursor and head > cursor.lsn):
            return None
        remaining = deadline - loop.time()
        if part.change_count or remaining <= 0 or (stopped is not None and stopped.done()):
            break
        cursor = part.next
        head = max(head, await notifier.wait_beyond(max(head, cursor.lsn), remaining, stopped))
        if notifier.closed:
            return None
    events = b'{"changes":[' + b",".join(e.events for e in part.entries if e.events) + b"],"
    out = Encoded(events, JSON_MEDIA_TYPE, Page([], part.next, head, False), part.change_count)
    body, headers = out.finish(head, None)
    return Answer(body, out.media_type, headers, out.change_count)


class _Reading:
    """The blocking half of a request, run in worker threads."""

    def __init__(self, supervisor: Supervisor, feed: str, request: PageRequest) -> None:
        self.supervisor = supervisor
        self.feed = feed
        self.request = request
        self.to: Cursor | None = None
        self.reader: FeedReader | None = None
        self.trimmed = 0
        tables = request.tables
        self.typed_table = (next(iter(tables)) if request.fmt == "arrow" and tables is not None
                            and len(tables) == 1 and request.transactions is None else None)

    def resolve(self) -> tuple[Cursor, int]:
        """The start cursor (``latest`` resolved, retention checked), and the head."""
        reader = self.reader = self.supervisor.reader(self.feed)
        request = self.request
        head = reader.changelog.head()
        # A page below the head stays the same until retention trims under it: pages are shared
        # (``ReadAhead``) per trimmed position, the one the retention check uses too
        self.trimmed = reader.changelog.trimmed_lsn()
        after = reader.resolve(request.after, head=head, trimmed=self.trimmed, start=True)
        if request.to is not None:
            self.to = Cursor(head) if request.to == "latest" else request.to
        return after, head

    def done(self, after: Cursor) -> bool:
        """Has a reader at ``after`` read all of ``(after, to]``? Then no commit can add to it
        and a long-poll has nothing to wait for."""
        return self.to is not None and after >= self.to

    def bound(self, head: int) -> Cursor:
        return Cursor(head) if self.to is None else min(Cursor(head), self.to)

    def key(self, after: Cursor) -> PageKey:
        r = self.request
        return PageKey((self.reader, self.trimmed, after, r.tables, r.ops, self.to, r.fmt,
                        r.transactions), r.limit)

    def worth_reading_ahead(self, out: Encoded, head: int) -> bool:
        """A reader with more to read right now, and a bound that does not move (``to=latest``
        is the head of each request)."""
        return out.page.next < self.bound(head) and self.request.to != "latest"

    def read(self, after: Cursor) -> Encoded:
        reader = self.reader
        assert reader is not None
        try:
            out = self._read(reader, after)
        except ChangeLogError:  # closed: 404 if the feed was deleted meanwhile (a long-poll)
            self.supervisor.check_reader(self.feed, reader)
            raise
        # Retention may have trimmed past ``after`` during the read (``resolve`` checked before
        # it): checked again after it, so a page that is answered has missed nothing
        reader.resolve(after)
        return out

    def _read(self, reader: FeedReader, after: Cursor) -> Encoded:
        request = self.request
        window = _Window(tables=request.tables, ops=request.ops, to=self.to,
                         max_transactions=request.transactions,
                         whole_transactions=request.transactions is not None)
        page = reader.page(after, request.limit, **window)
        if request.fmt == "count":  # where the page ends and how many changes it holds: no values
            return encode.count_page(page)
        if request.fmt == "json":
            if request.transactions is not None:
                return encode.json_transactions(page)
            return encode.json_changes(page)
        if request.fmt == "debezium":
            from pgfeed.http_api.encode_debezium import debezium_changes, debezium_source
            source = debezium_source(self.feed, self.supervisor.spec(self.feed).dsn)
            return debezium_changes(page, source)
        typed = self.typed_table
        if typed is None:
            return encode.arrow_page(page, None, None)
        # the table's newest shape as of this page (read after it): rows of older versions of
        # it are the reference's
        catalog = self.supervisor.catalog(self.feed)
        sink = encode.arrow_sink(catalog, typed)
        if sink is not None:
            return encode.sunk_arrow_page(page, sink)
        return encode.arrow_page(page, typed, catalog)


class _Window(TypedDict):
    """What a request reads, beside its cursor and limit (``FeedReader.page``'s filters)."""

    tables: frozenset[str] | None
    ops: frozenset[Op] | None
    to: Cursor | None
    max_transactions: int | None
    whole_transactions: bool
