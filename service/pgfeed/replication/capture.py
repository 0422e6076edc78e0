"""One feed's capture loop: walsender -> assembler -> durable change log -> confirmed flush position.

The invariant this module exists for: the flush position reported to PostgreSQL is never ahead of
what the change log has made durable. Everything else (decisions about keepalives, feedback
timing, protocol versions) is delegated to pure functions in ``protocol``/``commands``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import psycopg

from pgfeed.assembler.model import StoredTransaction
from pgfeed.assembler.transactions import HEARTBEAT_PREFIX, TransactionAssembler
from pgfeed.changelog.base import ChangeLog, LeaseLost, StoreUnavailable
from pgfeed.changelog.spill_files import FileSpillStore
from pgfeed.dsn import scrub
from pgfeed.errors import PgfeedError, SourceError
from pgfeed.pgoutput.messages import PG_EPOCH_UNIX
from pgfeed.replication import protocol, slots
from pgfeed.replication.commands import max_proto_version, streaming_mode
from pgfeed.replication.connect import admin_connection, connect
from pgfeed.replication.lost import LostSlot, SlotLostError, slot_loss
from pgfeed.replication.schemanotes import SchemaAnnotator
from pgfeed.replication.stream import ReplicationStream
from pgfeed.replication.writer import LogWriter

log = logging.getLogger("pgfeed.capture")

FEEDBACK_INTERVAL = 1.0  # seconds between unsolicited status updates (wal_sender_timeout is 60 s)
# A durable advance is reported at most this often: one status update per commit at thousands of
# commits a second cost both this loop and the walsender CPU, and moved the slot no sooner.
ADVANCE_INTERVAL = 0.01
# Seconds between reconnection attempts (issue 26: capture resumes within 2 s of a source that
# answers again, so the delay stops growing at 1 s). A failed attempt costs the source one
# refused or short-lived connection a second, which is nothing next to a walsender.
BACKOFF = (0.25, 0.5, 1.0)
# A source that keeps refusing the same way is logged once, then every this many seconds.
RELOG_SECONDS = 60.0
# In-memory buffers of open transactions before the largest spills to disk; a spilled transaction
# goes to the change log piece by piece, so this bounds capture's memory whatever the size of a
# transaction (bench/RESULTS.md, "One big transaction beside a backfill": a bigger limit costs
# peak memory through buffer growth, at no gain in pace).
ASSEMBLER_MEMORY = 4 << 20
# Batches up to this size are appended on the capture thread when the writer thread is idle (live
# commits: no hand-over on their way to subscribers); bigger ones overlap with receiving.
INLINE_APPEND_BYTES = 256 << 10
HOLDING_POLL = 0.002  # seconds a read waits while backfill chunks wait for the writer to be idle
# Held chunks with no free position (each takes a WAL position the stream passed, and an idle
# source writes none): the heartbeat goes this often instead, its record giving the next ones.
STARVED_HEARTBEAT = 0.05


@dataclass(frozen=True, slots=True)
class CaptureConfig:
    """What capture needs to know of a feed: its source, slot and publication, and how to stream.
    (The feed layer builds it from its ``FeedSpec``: capture knows nothing of feeds.)"""

    name: str
    dsn: str
    slot: str
    publication: str
    streaming: bool = True
    messages: bool = True
    two_phase: bool = False
    heartbeat_seconds: float = 10.0
    failover: bool = False  # a failover slot (resumes on a promoted standby)
    # option ddl "capture": the feed's DDL table in schema pgfeed (``replication.schemanotes``)
    ddl_table: str | None = None
    extra_publications: tuple[str, ...] = ()  # streamed beside ``publication`` (the DDL table's)


Batch = list[StoredTransaction]


class BatchHook(Protocol):
    """What capture asks of the feed's batch hook (the feed's backfill ``WindowTracker``,
    service/pgfeed/backfill/window.py): ``process`` sees every assembled batch, in commit order, before
    it is written, with the position the stream has passed (chunks whose snapshot it passed are
    judged and held for later); while ``holding``, capture reads
    its stream often and, whenever the log's writer is idle, appends what ``release`` hands back
    (positioned after everything passed on so far); ``restart`` begins a session (after the
    log's head); ``durable``
    hears of each batch once it is durable in the log (the backfill paces itself by how long
    live commits take to get there)."""

    @property
    def holding(self) -> bool: ...

    @property
    def starved(self) -> bool:
        """Held chunks wait for a free position: the source wrote no WAL since the stream's
        position (capture then sends its heartbeat early, STARVED_HEARTBEAT)."""
        ...

    def process(self, batch: Batch, received: int) -> Batch: ...

    def release(self, head: int) -> Batch: ...

    def restart(self, head: int) -> None: ...

    def durable(self, batch: Sequence[StoredTransaction]) -> None: ...


# a subset of feeds' FeedState
CaptureState = Literal["starting", "running", "reconnecting", "paused", "failed"]


@dataclass
class CaptureStats:
    """Live counters of one feed's capture, written by its thread, read by status calls."""

    state: CaptureState = "starting"
    last_error: str | None = None
    changes: int = 0  # live changes only (issue 30.1): a backfill's rows count in backfill_rows
    bytes: int = 0
    backfill_rows: int = 0  # rows backfill chunks stored through this capture's writer
    proto_version: int | None = None
    streaming_in_use: bool | None = None  # what the walsender was asked for (None: not yet)
    last_commit_ts: int = 0  # microseconds since 2000-01-01 of the newest stored commit
    reconnects: int = 0
    next_attempt: float | None = None  # reconnecting: Unix time of the next attempt
    # (time, changes) samples at least 0.1 s apart (the newest one moves): ~100 for the 10 s rate,
    # where one per append kept ~10,000 at 1,000 appends/s and shifted them all on every append.
    _window: deque[tuple[float, int]] = field(default_factory=deque)

    def count(self, changes: int, nbytes: int) -> None:
        before = self.changes
        self.changes += changes
        self.bytes += nbytes
        now = time.monotonic()
        window = self._window
        if window and now - window[-1][0] > 10:  # after a pause: a new window, not one diluted by it
            window.clear()
        if not window:  # where this batch started from: a first batch alone is a rate too
            window.append((now, before))
        if len(window) > 1 and now - window[-2][0] < 0.1:
            window[-1] = (now, self.changes)
        else:
            window.append((now, self.changes))
        while len(window) > 2 and now - window[0][0] > 10:
            window.popleft()

    def rate(self) -> float:
        """Changes per second over the last ~10 s (0 when idle)."""
        if len(self._window) < 2 or time.monotonic() - self._window[-1][0] > 10:
            return 0.0
        (t0, c0), (t1, c1) = self._window[0], self._window[-1]
        # Over at least a second: two appends milliseconds apart are not a rate (the console
        # showed thousands of changes/s for a few dozen changes just after a start).
        return (c1 - c0) / max(t1 - t0, 1.0)

    def last_commit_unix(self) -> float:
        return PG_EPOCH_UNIX + self.last_commit_ts / 1e6

    def report(self, replica: str) -> dict[str, Any]:
        """These counters as JSON for a shared store, where replicas that do not capture the
        feed read them (``feeds.leadership.merge_report``)."""
        return {"replica": replica, "at": time.time(), "state": self.state,
                "changes_per_second": round(self.rate(), 1), "changes_captured": self.changes,
                "bytes_captured": self.bytes, "backfill_rows": self.backfill_rows,
                "last_error": self.last_error,
                "proto_version": self.proto_version, "streaming_in_use": self.streaming_in_use,
                "last_commit_unix": self.last_commit_unix() if self.last_commit_ts else None,
                "next_attempt": self.next_attempt}


class Capture:
    """Captures one feed until its stop event is set; reconnects on source errors (state
    ``reconnecting``, about every second).

    A decode or assembly error stops the feed in state ``failed`` with ``last_error`` set; the
    slot stays at the last durable position, so nothing is lost and an operator can resume.
    A slot that is gone (dropped, invalidated) stops it in ``failed`` too, never retried:
    ``on_lost`` hears of it (the feed layer records and reports the loss; False: the feed is
    being stopped or resynced, capture just ends).
    """

    def __init__(self, config: CaptureConfig, changelog: ChangeLog, stats: CaptureStats, *,
                 spill_dir: Path, on_durable: Callable[[int], None] | None = None,
                 batch_messages: int = 20_000, before_start: Callable[[], None] | None = None,
                 hook: BatchHook | None = None,
                 on_lost: Callable[[LostSlot], bool] | None = None) -> None:
        """``on_durable(head)`` runs once the change log holds every commit up to ``head`` (on the
        writer's or the capture thread; the feed layer wakes its readers there).
        ``before_start`` runs before each START_REPLICATION (a shared store's leader checks its
        lease there and frees the slot from a previous leader's walsender). ``hook`` sees every
        assembled batch, in commit order, before it is written, and hands back units it held
        when the writer is idle (``BatchHook``)."""
        self.config = config
        self.hook = hook
        self.changelog = changelog
        self.on_durable = on_durable
        self.stats = stats
        self.spill_dir = spill_dir
        self.batch_messages = batch_messages
        self.before_start = before_start
        self.on_lost = on_lost
        self._attempt = 0  # failed attempts since the last session that started
        self._failing: tuple[str, float, float] | None = None  # reason, since, last logged

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self._session(stop)
            except LeaseLost as exc:  # another replica leads this feed now: stand by
                self.stats.state = "starting"
                self.stats.last_error = None
                log.warning("feed %s: %s; capture stops here", self.config.name, exc)
                return
            except SlotLostError as exc:  # never retried: the operator decides (resync)
                if self.on_lost is not None and not self.on_lost(exc.lost):
                    return  # a resync or a delete is taking over the feed
                self.stats.next_attempt = None
                if self.on_lost is None:
                    self.stats.last_error = scrub(str(exc), self.config.dsn)
                self.stats.state = "failed"
                return
            except (SourceError, StoreUnavailable) as exc:
                reason = scrub(str(exc), self.config.dsn)
                delay = BACKOFF[min(self._attempt, len(BACKOFF) - 1)]
                self._attempt += 1
                self.stats.reconnects += 1
                self.stats.last_error = reason
                self.stats.next_attempt = time.time() + delay
                self.stats.state = "reconnecting"
                self._log_failure(reason, delay)
                stop.wait(delay)
            except PgfeedError as exc:  # undecodable or inconsistent stream: stop, keep the slot
                self.stats.state = "failed"
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                log.error("feed %s failed: %s", self.config.name, self.stats.last_error)
                return
            except Exception as exc:  # a bug: fail loudly but keep the service up
                self.stats.state = "failed"
                self.stats.last_error = scrub(f"{type(exc).__name__}: {exc}", self.config.dsn)
                log.exception("feed %s failed unexpectedly", self.config.name)
                return
        if self.stats.state != "failed":
            self.stats.state = "paused"

    def _log_failure(self, reason: str, delay: float) -> None:
        """The first failure, a new reason, then the same one every RELOG_SECONDS: a source down
        for an hour writes a few lines, not 3,600."""
        now = time.monotonic()
        failing = self._failing
        extra = {"feed": self.config.name, "event": "reconnect", "reason": reason, "delay": delay,
                 "attempts": self._attempt}
        if failing is None or failing[0] != reason:
            self._failing = (reason, now if failing is None else failing[1], now)
            log.warning("feed %s: %s; reconnecting every %.2g s at most", self.config.name, reason,
                        BACKOFF[-1], extra=extra)
        elif now - failing[2] >= RELOG_SECONDS:
            self._failing = (reason, failing[1], now)
            log.warning("feed %s: still reconnecting after %d attempts (%.0f s): %s", self.config.name,
                        self._attempt, now - failing[1], reason, extra=extra)

    def _lost(self) -> LostSlot | None:
        """After START_REPLICATION failed on a source that answered: is the slot gone?"""
        try:
            with admin_connection(self.config.dsn, "cannot check the slot") as conn:
                return slot_loss(conn, self.config.slot)
        except SourceError:
            return None

    def _session(self, stop: threading.Event) -> None:
        config = self.config
        stream = ReplicationStream(config.dsn)
        try:
            proto = max_proto_version(stream.server_version)
            self.stats.proto_version = proto
            streaming = streaming_mode(config.streaming, messages=config.messages,
                                       proto_version=proto)
            self.stats.streaming_in_use = streaming != "off"
            if self.before_start is not None:
                self.before_start()
            start_lsn = self.changelog.confirmed_lsn()
            try:
                stream.start(config.slot, start_lsn, proto_version=proto,
                             publications=[config.publication, *config.extra_publications],
                             streaming=streaming,
                             messages=config.messages, two_phase=config.two_phase and proto >= 3)
            except SourceError as exc:
                lost = self._lost()
                if lost is not None:
                    raise SlotLostError(lost, str(exc)) from None
                raise
            if self._failing is not None:
                log.info("feed %s: reconnected after %d attempts (%.1f s)", config.name,
                         self._attempt, time.monotonic() - self._failing[1],
                         extra={"feed": config.name, "event": "reconnected"})
            self._attempt, self._failing = 0, None
            self.stats.next_attempt = None
            self.stats.state = "running"
            self.stats.last_error = None
            self._loop(stream, stop)
        finally:
            stream.close()

    def _loop(self, stream: ReplicationStream, stop: threading.Event) -> None:
        assembler = TransactionAssembler(spill=FileSpillStore(self.spill_dir),
                                         memory_limit=ASSEMBLER_MEMORY)
        feed = assembler.feed_framed
        hook = self.hook or _NO_HOOK
        process = hook.process
        writer = LogWriter(self.changelog, self._durable, name=f"pgfeed-writer-{self.config.name}",
                           inline_bytes=INLINE_APPEND_BYTES)
        submitted = received = writer.durable_lsn  # highest position handed to the writer
        # held chunks go after everything stored (and not below where the stream restarts)
        hook.restart(max(self.changelog.head(), received - 1))
        reported = -1  # flush position last sent to PostgreSQL
        last_feedback = 0.0
        heartbeat = _Heartbeat(self.config)
        # Schema history annotations (missing values, captured DDL) with the frames they describe
        annotate = SchemaAnnotator(self.config.dsn, self.config.ddl_table)
        try:
            while not stop.is_set():
                # held backfill chunks go to the writer as soon as it is idle: look often
                got = stream.receive(self.batch_messages,
                                     timeout=HOLDING_POLL if hook.holding else 0.2)
                keepalives = got.keepalives
                if got.runs:
                    received = max(received, got.last_lsn)
                reply = False
                for wal_end, reply_requested in keepalives:
                    received = max(received, wal_end)
                    reply = reply or reply_requested
                assembled = feed(got.data, got.runs)
                stored = process(annotate.annotate(assembled) if assembled else assembled,
                                 received)
                target = assembler.confirmable_lsn
                if keepalives and protocol.keepalive_confirmable(
                        received, assembler.in_transaction, assembler.hold_lsn):
                    target = max(target, received)
                hold = assembler.hold_lsn
                if hold is not None:
                    target = min(target, hold - 1)
                # Backfill chunks judged and held: positioned after `stored`, appended in the gap
                # a live commit does not need the writer (service/pgfeed/backfill/window.py).
                # (above the log's head: the feed layer may have written a unit of its own)
                pieces = hook.release(self.changelog.head()) if hook.holding and writer.idle else []
                if stored or target > submitted:
                    # The writer stores the batch (fsync'd) before it records `target`: only then
                    # does durable_lsn, the one position ever reported as flushed, move.
                    writer.submit(stored, target)
                    submitted = max(submitted, target)
                if pieces:
                    # not flushed by itself: lost on a power failure, a piece is read again
                    # (its progress goes with it), and the next live commit's flush covers it
                    writer.submit(pieces, submitted, background=True, sync=False)
                writer.raise_if_failed()
                durable = writer.durable_lsn
                now = time.monotonic()
                if reply or (durable > reported and protocol.feedback_due(
                        now, last_feedback, ADVANCE_INTERVAL)) or protocol.feedback_due(
                        now, last_feedback, FEEDBACK_INTERVAL):
                    stream.send_feedback(received, durable, durable, reply=False)
                    reported, last_feedback = durable, now
                heartbeat.maybe_emit(soon=hook.starved)
            writer.close()  # stopping: what was received and committed becomes durable, then reported
            writer.raise_if_failed()
            if writer.durable_lsn > reported:
                stream.send_feedback(received, writer.durable_lsn, writer.durable_lsn, reply=False)
        finally:
            writer.close()
            heartbeat.close()
            annotate.close()

    def _durable(self, stored: Sequence[StoredTransaction]) -> None:
        """Once ``stored`` is durable (on the writer's or the capture thread): counters, and wake the
        readers (``on_durable``). The new head is the batch's last commit (batches come in commit
        order; replays the log skipped do not move it), so no read of the log is needed."""
        # Backfill pieces (``progress`` set) go through the same writer: their rows are counted
        # apart, so throughput and changes_captured stay live changes (issue 30.1).
        live = [t for t in stored if t.progress is None]
        if len(live) < len(stored):
            self.stats.backfill_rows += sum(t.change_count for t in stored if t.progress is not None)
        if live:
            self.stats.last_commit_ts = live[-1].commit_ts or self.stats.last_commit_ts
            self.stats.count(sum(t.change_count for t in live), sum(len(t.payload) for t in live))
        if self.hook is not None:
            self.hook.durable(stored)
        if self.on_durable is not None:
            self.on_durable(stored[-1].commit_lsn)


class _NoHook:
    holding = False
    starved = False

    def process(self, batch: Batch, received: int) -> Batch:
        return batch

    def release(self, head: int) -> Batch:
        return []

    def restart(self, head: int) -> None:
        return None

    def durable(self, batch: Sequence[StoredTransaction]) -> None:
        return None


_NO_HOOK = _NoHook()


class _Heartbeat:
    """Emits a non-transactional logical message every ``heartbeat_seconds`` on a normal connection,
    so an idle feed's slot keeps moving (its position is confirmed, the message never served)."""

    PREFIX = HEARTBEAT_PREFIX

    def __init__(self, config: CaptureConfig) -> None:
        self.config = config
        self.interval = config.heartbeat_seconds
        self.next_at = time.monotonic() + self.interval
        self.last_at = float("-inf")
        self.conn: psycopg.Connection | None = None

    def maybe_emit(self, *, soon: bool = False) -> None:
        """Emit when due; with ``soon`` (held backfill chunks starved of positions) due every
        STARVED_HEARTBEAT."""
        now = time.monotonic()
        if self.interval <= 0 or now < (min(self.next_at, self.last_at + STARVED_HEARTBEAT)
                                        if soon else self.next_at):
            return
        self.last_at = now
        self.next_at = now + self.interval
        try:
            if self.conn is None or self.conn.closed:
                self.conn = connect(self.config.dsn, "pgfeed-heartbeat")
            slots.emit_heartbeat(self.conn, self.PREFIX)
        except (psycopg.Error, SourceError) as exc:  # the stream will notice a dead source on its own
            log.info("feed %s: heartbeat failed: %s", self.config.name, scrub(str(exc).strip(), self.config.dsn))
            self.close()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
