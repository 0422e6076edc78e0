"""One read request from query to encoded body: parse cursors and filters, take one step of
the feed's serving loop (``feeds/serving.py``: the shared tail or the log, waiting on the head
notifier when nothing is there yet), and encode the page as JSON, Arrow or Debezium envelopes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pgfeed.decoding.model import Op
from pgfeed.encoding import JSON_MEDIA_TYPE
from pgfeed.feeds.notify import StopSignal
from pgfeed.feeds.reader import Page, parse_ops
from pgfeed.feeds.serving import PLAIN, PageRead, ServedFeed, Serving, Window
from pgfeed.http_api import encode
from pgfeed.http_api.encode import Encoded
from pgfeed.http_api.errors import ApiError, bad_parameter
from pgfeed.http_api.readahead import ReadAhead
from pgfeed_client._cursor import Cursor, CursorError, parse_cursor
from pgfeed_client._headers import qualified_table

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


async def serve_page(feed: ServedFeed, request: PageRequest, read_ahead: ReadAhead | None = None,
                     stop: StopSignal | None = None) -> Answer:
    """One step of the feed's serving loop (``feeds/serving.py``): a page, waiting up to
    ``request.wait`` seconds for a commit when nothing is there yet. With ``read_ahead``, pages
    are shared with readers asking for the same one, and the next page is read while the client
    handles this one. Once ``stop`` is set, a long-poll answers with what it has."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.wait
    encoder = _Encoder(feed, request)
    if request.tables is None and request.ops is None and request.to is None \
            and request.transactions is None:
        window = PLAIN  # what the shared tail answers (JSON only)
    else:
        window = Window(tables=request.tables, ops=request.ops, to=request.to,
                        max_transactions=request.transactions,
                        whole_transactions=request.transactions is not None)
    serving: Serving[Encoded] = Serving(
        feed, request.after, request.limit, window, encoder,
        surface="json" if request.fmt == "json" else None, inline=request.fmt in ("json", "count"),
        tail_limit=request.limit, share=read_ahead,
        share_params=(request.fmt, request.transactions),
        stop=None if stop is None else stop.future())
    step = await serving.step(deadline)
    if step.tail is not None:
        part = step.tail
        events = b'{"changes":[' + b",".join(e.events for e in part.entries if e.events) + b"],"
        out = Encoded(events, JSON_MEDIA_TYPE, Page([], step.next, step.head, False),
                      part.change_count)
    else:
        assert step.out is not None
        out = step.out
    body, headers = out.finish(step.head, serving.to)
    answer = Answer(body, out.media_type, headers, out.change_count)
    if step.tail is None and read_ahead is not None and serving.worth_reading_ahead(step.next):
        nxt = step.next

        async def read_next() -> None:  # async: runs on the event loop, not in a worker
            serving.prefetch(nxt)

        answer.read_next = read_next
    return answer


class _Encoder:
    """A page read as its format takes it, encoded (in the thread that reads it)."""

    def __init__(self, feed: ServedFeed, request: PageRequest) -> None:
        self.feed = feed
        self.request = request
        tables = request.tables
        self.typed_table = (next(iter(tables)) if request.fmt == "arrow" and tables is not None
                            and len(tables) == 1 and request.transactions is None else None)

    def __call__(self, read: PageRead) -> Encoded:
        request = self.request
        page = read.page()
        if request.fmt == "count":  # where the page ends and how many changes it holds: no values
            return encode.count_page(page)
        if request.fmt == "json":
            if request.transactions is not None:
                return encode.json_transactions(page)
            return encode.json_changes(page)
        if request.fmt == "debezium":
            from pgfeed.http_api.encode_debezium import debezium_changes, debezium_source
            source = debezium_source(self.feed.name, self.feed.spec().dsn)
            return debezium_changes(page, source)
        typed = self.typed_table
        if typed is None:
            return encode.arrow_page(page, None, None)
        # the table's newest shape as of this page (read after it): rows of older versions of
        # it are the reference's
        catalog = self.feed.catalog()
        sink = encode.arrow_sink(catalog, typed)
        if sink is not None:
            return encode.sunk_arrow_page(page, sink)
        return encode.arrow_page(page, typed, catalog)
