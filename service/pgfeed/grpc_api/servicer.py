"""ChangeFeedServicer: the pgfeed.v1.ChangeFeed RPCs (Subscribe, ListFeeds, GetFeed).

Subscribe steps the feed's serving loop (``feeds/serving.py``: the shared tail or the log, inline
or in a worker thread, waiting on the head notifier, progress over filtered-out stretches),
encodes each page into frames where it is read (``encoding.to_proto``) and writes them one by
one at the client's pace. The cursor always comes from the loop's ``next``, so the hand-over
from replay to live tail has no gap and no duplicate.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, NoReturn

import grpc

from pgfeed.decoding.model import Op
from pgfeed.decoding.runs import Read
from pgfeed.encoding.to_proto import Framer
from pgfeed.errors import CursorAhead, FeedNotFound, PgfeedError, RetentionError
from pgfeed.feeds.model import FeedStatus
from pgfeed.feeds.notify import StopSignal
from pgfeed.feeds.reader import parse_ops
from pgfeed.feeds.serving import PLAIN, PageRead, Serving, Window
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.metrics import Metrics
from pgfeed_client._cursor import Cursor, CursorError, parse_cursor
from pgfeed_client._headers import OLDEST_METADATA, qualified_table
from pgfeed_proto.v1 import feed_pb2, feed_pb2_grpc

__all__ = ["OLDEST_METADATA", "ChangeFeedServicer", "feed_message"]

log = logging.getLogger("pgfeed.grpc")

PAGE_CHANGES = 10_000  # changes a step of a stream keeps at most (a step scans a bounded amount)
TAIL_WAIT = 30.0  # seconds a caught-up stream waits on the notifier before looking again
_NO_CHANGES: list[Read] = []
_SHUTDOWN = "the server is shutting down: resume from the last cursor received"


@dataclass(frozen=True, slots=True)
class _Request:
    feed: str
    cursor: Cursor | Literal["latest"]
    tables: frozenset[str] | None
    ops: frozenset[Op] | None


class _Frames:
    """A page read as frames (``encoding.to_proto``), in the thread that reads it."""

    def __init__(self) -> None:
        self.framer = Framer()

    def __call__(self, read: PageRead) -> list[bytes]:
        page = read.page()
        return self.framer.frames(page.transactions, page.next)


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
        try:
            feed = self.supervisor.served(parsed.feed)
        except FeedNotFound as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        frames = _Frames()
        stop = self._stopping.future()
        serving: Serving[list[bytes]] = Serving(
            feed, parsed.cursor, PAGE_CHANGES,
            PLAIN if parsed.tables is None and parsed.ops is None
            else Window(tables=parsed.tables, ops=parsed.ops), frames,
            surface="grpc", inline=True, progress=True, stop=stop)
        try:
            await serving.start()
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
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    step = await serving.step(loop.time() + TAIL_WAIT)
                except RetentionError as exc:
                    await _expired(context, exc)
                except FeedNotFound as exc:
                    await context.abort(grpc.StatusCode.NOT_FOUND, f"{exc} (deleted while streaming)")
                except PgfeedError as exc:
                    log.error("feed %s: subscription failed at %s: %s", parsed.feed,
                              serving.position, exc)
                    await context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
                if step.tail is not None:
                    for entry in step.tail.entries:
                        for frame in entry.frames:
                            yield frame
                elif step.out:
                    for frame in step.out:
                        yield frame  # grpc awaits each write: the client's pace is respected
                if step.progress is not None:  # no changes, final: how far the stream got
                    passed = step.progress.with_changes(_NO_CHANGES)
                    for frame in frames.framer.frames([passed], step.next):
                        yield frame
                if served is not None and step.change_count:
                    served.inc(step.change_count)
                if serving.stopped:
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

