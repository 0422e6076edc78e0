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

import psycopg

from service.assembler.model import StoredTransaction
from service.assembler.transactions import TransactionAssembler
from service.backfill.window import WindowTracker
from service.changelog.base import ChangeLog, LeaseLost, StoreUnavailable
from service.changelog.spill_files import FileSpillStore
from service.dsn import scrub
from service.errors import PgfeedError, SourceError
from service.feeds.model import FeedSpec
from service.feeds.notify import HeadNotifier
from service.pgoutput.messages import PG_EPOCH_UNIX
from service.replication import protocol, slots
from service.replication.commands import max_proto_version, streaming_mode
from service.replication.stream import ReplicationStream
from service.replication.writer import LogWriter

log = logging.getLogger("pgfeed.capture")

FEEDBACK_INTERVAL = 1.0  # seconds between unsolicited status updates (wal_sender_timeout is 60 s)
# A durable advance is reported at most this often: one status update per commit at thousands of
# commits a second cost both this loop and the walsender CPU, and moved the slot no sooner.
ADVANCE_INTERVAL = 0.01
BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
# In-memory buffers of open transactions before the largest spills to disk; a spilled transaction
# goes to the change log piece by piece, so this bounds capture's memory whatever the size of a
# transaction (a 1M-row one: bench/RESULTS.md, Capture).
ASSEMBLER_MEMORY = 16 << 20
# Batches up to this size are appended on the capture thread when the writer thread is idle (live
# commits: no hand-over on their way to subscribers); bigger ones overlap with receiving.
INLINE_APPEND_BYTES = 256 << 10


@dataclass
class CaptureStats:
    """Live counters of one feed's capture, written by its thread, read by status calls."""

    state: str = "starting"
    last_error: str | None = None
    changes: int = 0
    bytes: int = 0
    proto_version: int | None = None
    streaming_in_use: bool | None = None  # what the walsender was asked for (None: not yet)
    last_commit_ts: int = 0  # microseconds since 2000-01-01 of the newest stored commit
    reconnects: int = 0
    # (time, changes) samples at least 0.1 s apart (the newest one moves): ~100 for the 10 s rate,
    # where one per append kept ~10,000 at 1,000 appends/s and shifted them all on every append.
    _window: deque[tuple[float, int]] = field(default_factory=deque)

    def count(self, changes: int, nbytes: int) -> None:
        self.changes += changes
        self.bytes += nbytes
        now = time.monotonic()
        window = self._window
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
        return (c1 - c0) / (t1 - t0) if t1 > t0 else 0.0

    def last_commit_unix(self) -> float:
        return PG_EPOCH_UNIX + self.last_commit_ts / 1e6


class Capture:
    """Captures one feed until its stop event is set; reconnects with backoff on source errors.

    A decode or assembly error stops the feed in state ``failed`` with ``last_error`` set; the
    slot stays at the last durable position, so nothing is lost and an operator can resume.
    """

    def __init__(self, spec: FeedSpec, changelog: ChangeLog, notifier: HeadNotifier,
                 stats: CaptureStats, *, spill_dir: Path, batch_messages: int = 20_000,
                 before_start: Callable[[], None] | None = None,
                 tracker: WindowTracker | None = None) -> None:
        """``before_start`` runs before each START_REPLICATION (a shared store's leader checks
        its lease there and frees the slot from a previous leader's walsender)."""
        self.spec = spec
        # Backfill watermarks: their units become chunks' read transactions (or go), and while a
        # backfill runs the keys of every transaction are noted (service/backfill/window.py).
        self.tracker = tracker or WindowTracker()
        self.changelog = changelog
        self.notifier = notifier
        self.stats = stats
        self.spill_dir = spill_dir
        self.batch_messages = batch_messages
        self.before_start = before_start

    def run(self, stop: threading.Event) -> None:
        attempt = 0
        while not stop.is_set():
            try:
                self._session(stop)
                attempt = 0
            except LeaseLost as exc:  # another replica leads this feed now: stand by
                self.stats.state = "starting"
                self.stats.last_error = None
                log.warning("feed %s: %s; capture stops here", self.spec.name, exc)
                return
            except (SourceError, StoreUnavailable) as exc:
                self.stats.state = "starting"
                self.stats.last_error = scrub(str(exc), self.spec.dsn)
                self.stats.reconnects += 1
                delay = BACKOFF[min(attempt, len(BACKOFF) - 1)]
                attempt += 1
                log.warning("feed %s: %s; reconnecting in %.1f s", self.spec.name, self.stats.last_error, delay,
                            extra={"feed": self.spec.name, "event": "reconnect",
                                   "reason": self.stats.last_error, "delay": delay})
                stop.wait(delay)
            except PgfeedError as exc:  # undecodable or inconsistent stream: stop, keep the slot
                self.stats.state = "failed"
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                log.error("feed %s failed: %s", self.spec.name, self.stats.last_error)
                return
            except Exception as exc:  # a bug: fail loudly but keep the service up
                self.stats.state = "failed"
                self.stats.last_error = scrub(f"{type(exc).__name__}: {exc}", self.spec.dsn)
                log.exception("feed %s failed unexpectedly", self.spec.name)
                return
        if self.stats.state != "failed":
            self.stats.state = "paused"

    def _session(self, stop: threading.Event) -> None:
        spec, options = self.spec, self.spec.options
        stream = ReplicationStream(spec.dsn)
        try:
            proto = max_proto_version(stream.server_version)
            self.stats.proto_version = proto
            streaming = streaming_mode(options.streaming, messages=options.messages,
                                       proto_version=proto)
            self.stats.streaming_in_use = streaming != "off"
            if self.before_start is not None:
                self.before_start()
            start_lsn = self.changelog.confirmed_lsn()
            stream.start(spec.slot_name, start_lsn, proto_version=proto,
                         publications=[spec.publication_name], streaming=streaming,
                         messages=options.messages, two_phase=options.two_phase and proto >= 3)
            self.stats.state = "running"
            self.stats.last_error = None
            self._loop(stream, stop)
        finally:
            stream.close()

    def _loop(self, stream: ReplicationStream, stop: threading.Event) -> None:
        assembler = TransactionAssembler(spill=FileSpillStore(self.spill_dir),
                                         memory_limit=ASSEMBLER_MEMORY)
        feed_batch = assembler.feed_batch
        process = self.tracker.process
        writer = LogWriter(self.changelog, self._durable, name=f"pgfeed-writer-{self.spec.name}",
                           inline_bytes=INLINE_APPEND_BYTES)
        submitted = received = writer.durable_lsn  # highest position handed to the writer
        reported = -1  # flush position last sent to PostgreSQL
        last_feedback = 0.0
        heartbeat = _Heartbeat(self.spec)
        try:
            while not stop.is_set():
                frames, keepalives = stream.read_batch(self.batch_messages, timeout=0.2)
                stored = process(feed_batch(frames))
                if frames:
                    received = max(received, frames[-1][0])
                reply = False
                for wal_end, reply_requested in keepalives:
                    received = max(received, wal_end)
                    reply = reply or reply_requested
                target = assembler.confirmable_lsn
                if keepalives and protocol.keepalive_confirmable(
                        received, assembler.in_transaction, assembler.hold_lsn):
                    target = max(target, received)
                hold = assembler.hold_lsn
                if hold is not None:
                    target = min(target, hold - 1)
                if stored or target > submitted:
                    # The writer stores the batch (fsync'd) before it records `target`: only then
                    # does durable_lsn, the one position ever reported as flushed, move.
                    writer.submit(stored, target)
                    submitted = max(submitted, target)
                writer.raise_if_failed()
                durable = writer.durable_lsn
                now = time.monotonic()
                if reply or (durable > reported and protocol.feedback_due(
                        now, last_feedback, ADVANCE_INTERVAL)) or protocol.feedback_due(
                        now, last_feedback, FEEDBACK_INTERVAL):
                    stream.send_feedback(received, durable, durable, reply=False)
                    reported, last_feedback = durable, now
                heartbeat.maybe_emit()
            writer.close()  # stopping: what was received and committed becomes durable, then reported
            writer.raise_if_failed()
            if writer.durable_lsn > reported:
                stream.send_feedback(received, writer.durable_lsn, writer.durable_lsn, reply=False)
        finally:
            writer.close()
            heartbeat.close()

    def _durable(self, stored: Sequence[StoredTransaction]) -> None:
        """Once ``stored`` is durable (on the writer's or the capture thread): counters, and wake the
        readers. The new head is the batch's last commit (batches come in commit order; replays
        the log skipped do not move the notifier), so no read of the log is needed."""
        self.stats.last_commit_ts = stored[-1].commit_ts or self.stats.last_commit_ts
        self.stats.count(sum(t.change_count for t in stored), sum(len(t.payload) for t in stored))
        self.notifier.publish(stored[-1].commit_lsn)


class _Heartbeat:
    """Emits a non-transactional logical message every ``heartbeat_seconds`` on a normal connection,
    so an idle feed's slot keeps moving (its position is confirmed, the message never served)."""

    PREFIX = "pgfeed.heartbeat"

    def __init__(self, spec: FeedSpec) -> None:
        self.spec = spec
        self.interval = spec.options.heartbeat_seconds
        self.next_at = time.monotonic() + self.interval
        self.conn: psycopg.Connection | None = None

    def maybe_emit(self) -> None:
        if self.interval <= 0 or time.monotonic() < self.next_at:
            return
        self.next_at = time.monotonic() + self.interval
        try:
            if self.conn is None or self.conn.closed:
                self.conn = psycopg.connect(self.spec.dsn, autocommit=True, connect_timeout=5)
            slots.emit_heartbeat(self.conn, self.PREFIX)
        except psycopg.Error as exc:  # the stream will notice a dead source on its own
            log.info("feed %s: heartbeat failed: %s", self.spec.name, scrub(str(exc).strip(), self.spec.dsn))
            self.close()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
