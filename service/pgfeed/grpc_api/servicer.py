"""ChangeFeedServicer: the pgfeed.v1.ChangeFeed RPCs (Subscribe, ListFeeds, GetFeed).

Subscribe pages the feed with ``FeedReader`` (the one paging algorithm) in a worker thread,
encodes each page into frames there too (``encoding.to_proto``), writes them one by one at the
client's pace, and when caught up awaits the feed's head notifier. The cursor always comes from
the reader's ``next``, so the hand-over from replay to live tail has no gap and no duplicate.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn

import grpc
from pgfeed_client._cursor import Cursor, CursorError, parse_cursor
from pgfeed_client._headers import OLDEST_METADATA, qualified_table
from pgfeed_proto.v1 import feed_pb2, feed_pb2_grpc

from pgfeed.changelog.base import ChangeLogError
from pgfeed.decoding.model import Op
from pgfeed.encoding.to_proto import Framer
from pgfeed.errors import CursorAhead, FeedNotFound, PgfeedError, RetentionError
from pgfeed.feeds.model import FeedStatus
from pgfeed.feeds.notify import StopSignal
from pgfeed.feeds.reader import FeedReader, Page, ReaderBusy, parse_ops
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.metrics import Metrics

__all__ = ["OLDEST_METADATA", "ChangeFeedServicer", "feed_message"]

log = logging.getLogger("pgfeed.grpc")

PAGE_CHANGES = 10_000  # changes scanned per log read while replaying
TAIL_PAGE = 200  # changes scanned per read on the event loop once caught up (see ``_read``)
TAIL_WAIT = 30.0  # seconds a caught-up stream waits on the notifier before looking again
PROGRESS_SECONDS = 1.0  # at most this long without a frame while transactions are passed over
_SHUTDOWN = "the server is shutting down: resume from the last cursor received"


@dataclass(frozen=True, slots=True)
class _Request:
    feed: str
    cursor: Cursor | str
    tables: frozenset[str] | None
    ops: frozenset[Op] | None


class _Stream:
    """The blocking half of one subscription (runs in worker threads): read a page, encode it."""

    def __init__(self, supervisor: Supervisor, request: _Request) -> None:
        self.supervisor = supervisor
        self.request = request
        self.reader: FeedReader | None = None
        self.framer = Framer()

    def start(self) -> Cursor:
        """The feed's reader and the resolved start cursor (FeedNotFound, RetentionError)."""
        self.reader = self.supervisor.reader(self.request.feed)
        return self.reader.resolve(self.request.cursor, start=True)  # type: ignore[arg-type]

    def read(self, after: Cursor, limit: int = PAGE_CHANGES, block: bool = True,
             ) -> tuple[Page, list[bytes]]:
        assert self.reader is not None
        request = self.request
        try:
            page = self.reader.page(after, limit, tables=request.tables, ops=request.ops,
                                    block=block)
        except ChangeLogError:  # closed: NOT_FOUND if the feed was deleted while streaming
            self.supervisor.check_reader(request.feed, self.reader)
            raise
        # Retention may have trimmed past ``after`` while the stream ran: checked after the read,
        # so a read that returned is known to have missed nothing.
        self.reader.resolve(after)
        frames = self.framer.frames(page.transactions, page.next)
        return page, frames


class ChangeFeedServicer(feed_pb2_grpc.ChangeFeedServicer):
    """Answers the ChangeFeed RPCs. ``Subscribe`` yields serialized ``Transaction`` frames (the
    server registers it without a serializer; see ``server.py``)."""

    def __init__(self, supervisor: Supervisor, metrics: Metrics | None = None) -> None:
        self.supervisor = supervisor
        self.metrics = metrics
        self._stopping = StopSignal()  # one future for every stream (a wait hooks it once)

    def shut_down(self) -> None:
        """End every stream (UNAVAILABLE, so clients resume elsewhere); called on graceful stop."""
        self._stopping.set()

    # -- Subscribe -------------------------------------------------------------------------------
    async def Subscribe(self, request: feed_pb2.SubscribeRequest,
                        context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        parsed = await _parse(request, context)
        stream = _Stream(self.supervisor, parsed)
        try:
            position = await asyncio.to_thread(stream.start)
        except FeedNotFound as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        except RetentionError as exc:
            await _expired(context, exc)
        except CursorAhead as exc:
            await context.abort(grpc.StatusCode.OUT_OF_RANGE, str(exc))
        subscribers = served = None
        if self.metrics is not None:
            subscribers = self.metrics.subscribers.labels(feed=parsed.feed)
            served = self.metrics.served_changes.labels(feed=parsed.feed, surface="grpc")
            subscribers.inc()
        stop = self._stopping.future()
        try:
            notifier = self.supervisor.notifier(parsed.feed)
            tailing = False
            # The newest transaction the filters left out entirely since the last frame sent, and
            # when that frame went: a stream that only passes over transactions reports how far
            # it got every PROGRESS_SECONDS, so the cursor its client keeps stays near the head
            # (resuming does not rescan, and retention does not overtake a caught-up subscriber).
            passed = None
            sent_at = time.monotonic()
            shared = self.supervisor.tail(parsed.feed) \
                if parsed.tables is None and parsed.ops is None else None
            while True:
                if tailing and shared is not None and not notifier.closed:  # the shared tail
                    part = await shared.after(position, notifier.head, "grpc")
                    if part is not None and part.next > position:
                        for entry in part.entries:
                            for frame in entry.frames:
                                yield frame
                        if part.entries:
                            sent_at = time.monotonic()
                        if served is not None:
                            served.inc(part.change_count)
                        position = part.next
                        if stop.done():
                            await context.abort(grpc.StatusCode.UNAVAILABLE, _SHUTDOWN)
                        await notifier.wait_beyond(position.lsn, TAIL_WAIT, stop)
                        if stop.done():
                            await context.abort(grpc.StatusCode.UNAVAILABLE, _SHUTDOWN)
                        continue
                try:
                    page, frames = await _read(stream, position, tailing)
                except RetentionError as exc:
                    await _expired(context, exc)
                except FeedNotFound as exc:
                    await context.abort(grpc.StatusCode.NOT_FOUND, f"{exc} (deleted while streaming)")
                except PgfeedError as exc:
                    log.error("feed %s: subscription failed at %s: %s", parsed.feed, position, exc)
                    await context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
                if page.passed is not None:
                    passed = page.passed
                elif frames:
                    passed = None
                if passed is not None and time.monotonic() - sent_at >= PROGRESS_SECONDS:
                    frames = [*frames, *stream.framer.frames([passed], page.next)]  # no changes, final
                    passed = None
                for frame in frames:
                    yield frame  # grpc awaits each write: the client's pace is respected
                if frames:
                    sent_at = time.monotonic()
                if served is not None and page.transactions:
                    served.inc(page.change_count)
                position = page.next
                if stop.done():
                    await context.abort(grpc.StatusCode.UNAVAILABLE, _SHUTDOWN)
                tailing = not page.has_more
                if tailing:
                    wait = TAIL_WAIT if passed is None else sent_at + PROGRESS_SECONDS - time.monotonic()
                    await notifier.wait_beyond(page.head, wait, stop)
                    if stop.done():
                        await context.abort(grpc.StatusCode.UNAVAILABLE, _SHUTDOWN)
        finally:
            if subscribers is not None:
                subscribers.dec()

    # -- discovery -------------------------------------------------------------------------------
    async def ListFeeds(self, request: feed_pb2.ListFeedsRequest,
                        context: grpc.aio.ServicerContext) -> feed_pb2.ListFeedsResponse:
        with self._timed("ListFeeds"):
            statuses = await asyncio.to_thread(self.supervisor.statuses)
            return feed_pb2.ListFeedsResponse(feeds=[feed_message(s) for s in statuses])

    async def GetFeed(self, request: feed_pb2.GetFeedRequest,
                      context: grpc.aio.ServicerContext) -> feed_pb2.Feed:
        with self._timed("GetFeed"):
            if not request.name:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "'name' is required")
            try:
                status = await asyncio.to_thread(self.supervisor.status, request.name)
            except FeedNotFound as exc:
                await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
            return feed_message(status)

    def _timed(self, endpoint: str) -> Any:
        if self.metrics is None:
            return _NullTimer()
        return self.metrics.request_latency.labels(surface="grpc", endpoint=endpoint).time()


class _NullTimer:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


async def _parse(request: feed_pb2.SubscribeRequest, context: grpc.aio.ServicerContext) -> _Request:
    """Validate a SubscribeRequest (INVALID_ARGUMENT naming the expected form)."""
    if not request.feed:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "'feed' is required")
    try:
        cursor = parse_cursor(request.cursor or "earliest")
    except CursorError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"cursor: {exc}")
    try:
        ops = parse_ops(list(request.ops))
    except ValueError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"ops: {exc}")
    tables = None
    if request.tables:
        names = [t.strip() for t in request.tables]
        if not all(names):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "tables: empty table name; expected names like public.orders")
        tables = frozenset(qualified_table(n) for n in names)  # as on HTTP
    return _Request(request.feed, cursor, tables, ops)


async def _expired(context: grpc.aio.ServicerContext, exc: RetentionError) -> NoReturn:
    context.set_trailing_metadata(((OLDEST_METADATA, exc.oldest),))
    await context.abort(grpc.StatusCode.OUT_OF_RANGE, str(exc))
    raise AssertionError("unreachable")  # abort raises


async def _read(stream: _Stream, position: Cursor,
                tailing: bool) -> tuple[Page, list[bytes]]:
    """The next page. A stream that has caught up reads its next (small) page on the event loop:
    handing a read to a worker thread and back costs ~0.2 ms of CPU here, more than a few live
    transactions take to read, and a live subscriber's latency is made of such steps. At most
    TAIL_PAGE changes are read inline; a burst beyond that, or a page another thread is reading,
    goes to a worker thread."""
    if tailing:
        try:
            return stream.read(position, TAIL_PAGE, block=False)
        except ReaderBusy:
            pass
    return await asyncio.to_thread(stream.read, position)


def feed_message(status: FeedStatus) -> feed_pb2.Feed:
    """A FeedStatus (DSN already masked in ``source``) -> ``pgfeed.v1.Feed``."""
    msg = feed_pb2.Feed(
        name=status.name, state=status.state, slot=status.slot, publication=status.publication,
        tables=status.tables, all_tables=status.all_tables, source=status.source,
        confirmed_lsn=status.confirmed_lsn, head_lsn=status.head_lsn,
        changes_per_second=status.changes_per_second, changes_captured=status.changes_captured,
        bytes_captured=status.bytes_captured)
    for name in ("server_lsn", "lag_bytes", "lag_seconds", "last_error", "proto_version"):
        value = getattr(status, name)
        if value is not None:
            setattr(msg, name, value)
    risk = status.slot_risk
    msg.slot_risk.SetInParent()
    for name in ("wal_status", "safe_wal_size", "retained_bytes"):
        value = getattr(risk, name)
        if value is not None:
            setattr(msg.slot_risk, name, value)
    if status.leader is not None:
        msg.leader.replica, msg.leader.epoch = status.leader.replica, status.leader.epoch
        msg.leader.since = datetime.fromtimestamp(status.leader.since, UTC).isoformat()
    if status.counters_from is not None:
        msg.counters_from = status.counters_from
    failover = status.failover
    if failover is not None:
        msg.failover.enabled, msg.failover.synced = failover.enabled, failover.synced
        msg.failover.ready = failover.ready
        msg.failover.standby_slots.extend(s.name for s in failover.standby_slots)
        if failover.note is not None:
            msg.failover.note = failover.note
    msg.unprotected_tables.extend(status.unprotected_tables or ())
    lost = status.slot_lost
    if lost is not None:
        msg.slot_lost.at = datetime.fromtimestamp(lost.at, UTC).isoformat()
        msg.slot_lost.slot, msg.slot_lost.reason = lost.slot, lost.reason
        msg.slot_lost.last_lsn = lost.last_lsn
    for gap in status.gaps:
        msg.gaps.add(lost_after=gap.lost_after, resumed_at=gap.resumed_at, marker_lsn=gap.marker_lsn,
                     reason=gap.reason, at=datetime.fromtimestamp(gap.at, UTC).isoformat())
    if status.next_attempt_at is not None:
        msg.next_attempt_at = datetime.fromtimestamp(status.next_attempt_at, UTC).isoformat()
    return msg

