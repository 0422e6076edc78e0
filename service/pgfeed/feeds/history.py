"""What the console draws as history (issue 30.1): a bounded ring of samples per feed, and per-table
change counters, both kept in this process's memory (a restart starts them afresh).

A sample is taken every ``interval`` seconds by a task of the runtime, on a worker thread, never
on a capture thread. Per-table counts are computed from the feed's log, after the capture wrote
it: each sample reads the transactions stored since the last one (at most ``count_cap`` changes a
sample, so a burst is counted over the following samples) and counts the row changes per relation
from their wire form (no row is decoded). The capture hot path pays nothing for them.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pgfeed.assembler.model import backfill_id_of
from pgfeed.decoding.changes import TransactionDecoder
from pgfeed.errors import PgfeedError
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.pgoutput.messages import PG_EPOCH_UNIX, TAG_DELETE, TAG_INSERT, TAG_UPDATE
from pgfeed_client._cursor import Cursor

log = logging.getLogger("pgfeed.history")

_ROW_TAGS = {TAG_INSERT: "insert", TAG_UPDATE: "update", TAG_DELETE: "delete"}
READ_BATCH = 5_000  # changes a log read asks for while counting


@dataclass(frozen=True, slots=True)
class Sample:
    """One point of a feed's history; rates are over the time since the previous sample."""

    at: float  # Unix seconds
    state: str
    lag_bytes: int | None
    lag_seconds: float | None
    changes_per_second: float  # live changes captured
    backfill_rows_per_second: float
    served_per_second: float  # changes served to readers (HTTP and gRPC)
    retained_bytes: int | None  # WAL the slot holds on the source
    safe_wal_size: int | None  # None: unlimited, or not known
    consumers: dict[str, int] = field(default_factory=dict)  # name -> bytes behind the head


@dataclass
class TableCount:
    changes: int = 0  # live row changes (insert, update, delete)
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    backfill_rows: int = 0
    last_change_at: float | None = None  # commit time (Unix s) of the newest live change


@dataclass
class _Counter:
    after: Cursor | None = None  # the last transaction counted
    tables: dict[str, TableCount] = field(default_factory=dict)
    counted_changes: int = 0
    seconds: float = 0.0  # time spent counting (the cost, in status for the curious)


@dataclass
class _Previous:
    at: float
    changes: int
    backfill_rows: int
    served: float


class History:
    """Rings of samples and table counters of every feed (thread-safe: sampled on a worker
    thread, read by the API)."""

    def __init__(self, interval: float = 10.0, hours: float = 6.0, count_cap: int = 100_000) -> None:
        self.interval = interval
        self.hours = hours
        self.count_cap = count_cap
        self.size = max(2, math.ceil(hours * 3600 / interval))
        self._rings: dict[str, deque[Sample]] = {}
        self._previous: dict[str, _Previous] = {}
        self._counters: dict[str, _Counter] = {}
        self._lock = threading.Lock()

    def samples(self, feed: str, since: float | None = None) -> list[Sample]:
        with self._lock:
            ring = list(self._rings.get(feed, ()))
        return ring if since is None else [s for s in ring if s.at > since]

    def tables(self, feed: str) -> tuple[dict[str, TableCount], Cursor | None, int, float]:
        """(table -> counts, the last transaction counted, changes counted, seconds spent)."""
        with self._lock:
            counter = self._counters.get(feed) or _Counter()
            return ({k: TableCount(**vars(v)) for k, v in counter.tables.items()}, counter.after,
                    counter.counted_changes, counter.seconds)

    def sample(self, supervisor: Supervisor, served: Callable[[str], float]) -> None:
        """One sample of every feed (probing its source for lag and slot risk), then count its
        tables; forget feeds that are gone."""
        names = set(supervisor.names())
        with self._lock:
            for gone in set(self._rings) - names:
                self._rings.pop(gone, None)
                self._previous.pop(gone, None)
                self._counters.pop(gone, None)
        for name in sorted(names):
            try:
                self._sample(supervisor, name, served(name))
                self._count(supervisor, name)
            except PgfeedError:  # deleted meanwhile, or its log is closing
                continue
            except Exception:
                log.exception("history of feed %s: sample failed", name)

    def _sample(self, supervisor: Supervisor, name: str, served_total: float) -> None:
        status = supervisor.status(name)
        now = time.time()
        backfill = status.backfill_rows_captured
        before = self._previous.get(name)
        rates = (0.0, 0.0, 0.0)
        if before is not None and now > before.at:
            span = now - before.at
            rates = tuple(max(0.0, (a - b) / span) for a, b in (  # type: ignore[assignment]
                (status.changes_captured, before.changes), (backfill, before.backfill_rows),
                (served_total, before.served)))
        self._previous[name] = _Previous(now, status.changes_captured, backfill, served_total)
        changelog = supervisor.changelog(name)
        consumers = {c: max(0, status.head_lsn - s.cursor.lsn)
                     for c, s in changelog.consumer_states().items()}
        risk = status.slot_risk
        sample = Sample(at=now, state=status.state, lag_bytes=status.lag_bytes,
                        lag_seconds=status.lag_seconds, changes_per_second=round(rates[0], 2),
                        backfill_rows_per_second=round(rates[1], 2),
                        served_per_second=round(rates[2], 2), retained_bytes=risk.retained_bytes,
                        safe_wal_size=risk.safe_wal_size, consumers=consumers)
        with self._lock:
            ring = self._rings.get(name)
            if ring is None:
                ring = self._rings[name] = deque(maxlen=self.size)
            ring.append(sample)

    def _count(self, supervisor: Supervisor, name: str) -> None:
        """Count the row changes stored since the last sample, per table (at most count_cap)."""
        started = time.perf_counter()
        changelog = supervisor.changelog(name)
        with self._lock:
            counter = self._counters.setdefault(name, _Counter())
        after = counter.after or Cursor(changelog.trimmed_lsn())
        if after.lsn < changelog.trimmed_lsn():  # trimmed past what was counted
            after = Cursor(changelog.trimmed_lsn())
        decoder = TransactionDecoder(supervisor.catalog(name))
        counted = 0
        tables: dict[str, TableCount] = {}
        while counted < self.count_cap:
            batch = changelog.read(after, READ_BATCH)
            batch = [t for t in batch if t.commit_lsn > after.lsn]
            if not batch:
                break
            for txn in batch:
                backfill = backfill_id_of(txn.origin) is not None
                at = PG_EPOCH_UNIX + txn.commit_ts / 1e6 if txn.commit_ts else None
                for seq, tag, _buf, schema, _prev in decoder.wire_changes(txn):
                    op = _ROW_TAGS.get(tag)
                    if seq < 0 or op is None or schema is None:
                        continue
                    key = f"{schema.schema}.{schema.table}"
                    count = tables.get(key)
                    if count is None:
                        count = tables[key] = TableCount()
                    if backfill:
                        count.backfill_rows += 1
                        continue
                    count.changes += 1
                    setattr(count, op + "s", getattr(count, op + "s") + 1)
                    if at is not None and (count.last_change_at is None or at > count.last_change_at):
                        count.last_change_at = at
                counted += txn.change_count
                after = Cursor(txn.commit_lsn)
        spent = time.perf_counter() - started
        with self._lock:
            counter.after = after if counted or counter.after else counter.after
            counter.counted_changes += counted
            counter.seconds += spent
            for key, add in tables.items():
                total = counter.tables.setdefault(key, TableCount())
                total.changes += add.changes
                total.inserts += add.inserts
                total.updates += add.updates
                total.deletes += add.deletes
                total.backfill_rows += add.backfill_rows
                if add.last_change_at is not None and (total.last_change_at is None
                                                       or add.last_change_at > total.last_change_at):
                    total.last_change_at = add.last_change_at
