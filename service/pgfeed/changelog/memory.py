"""MemoryChangeLog: the in-memory twin of the SQLite log, for tests and the demo.

Same invariants as ``base.ChangeLog`` (one lock serialises every call); nothing survives the process.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from pgfeed.assembler.model import StoredTransaction
from pgfeed.changelog.backfills import BackfillPart, BackfillRecord
from pgfeed.changelog.base import (
    ChangeLogError,
    ConsumerState,
    LogStats,
    age_cutoff,
    apply_progress,
    check_batch,
    check_consumer,
    check_lsn,
    check_new_consumer,
    log_expired,
    overtaken,
    read_selection,
    release_bound,
    slowest,
    split_bounds,
    stored_position,
)
from pgfeed.pgoutput.messages import pg_now_us
from pgfeed_client._cursor import Cursor

log = logging.getLogger("pgfeed.changelog")


@dataclass(slots=True)
class _Entry:
    txn: StoredTransaction
    cum_changes: int  # changes in this and every earlier transaction ever appended
    cum_bytes: int


class MemoryChangeLog:
    """A ChangeLog in a list ordered by commit_lsn; payloads are copied to ``bytes`` on append so a
    caller reusing its buffer cannot change what was stored."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[_Entry] = []
        self._lsns: list[int] = []  # commit_lsn of each entry, for bisect
        self._schema: list[tuple[int, bytes]] = []
        self._consumers: dict[str, ConsumerState] = {}
        self._head = 0
        self._confirmed = 0
        self._trimmed = 0
        self._forced_trims = 0
        self._change_total = 0
        self._byte_total = 0
        self._closed = False
        self._backfills: dict[str, BackfillRecord] = {}
        self._parts: dict[tuple[str, int], BackfillPart] = {}

    @contextmanager
    def _open(self) -> Iterator[None]:
        """The lock, once the log is known to be open."""
        with self._lock:
            if self._closed:
                raise ChangeLogError("the in-memory change log is closed")
            yield

    # -- backfills ------------------------------------------------------------------------------

    def save_backfill(self, record: BackfillRecord) -> None:
        with self._open():
            self._backfills[record.id] = record
            for part in record.parts:
                self._parts.setdefault((record.id, part.part), part)

    def backfills(self) -> list[BackfillRecord]:
        with self._open():
            return [BackfillRecord.from_header(r.header(), tuple(
                self._parts[(r.id, p.part)] for p in r.parts)) for r in self._backfills.values()]

    # -- writing -------------------------------------------------------------------------------

    def append(self, transactions: Sequence[StoredTransaction], confirmed_lsn: int | None = None, *,
               sync: bool = True) -> None:
        check_batch(transactions, confirmed_lsn)
        with self._open():
            for t in transactions:
                if t.commit_lsn <= self._head:
                    continue  # a replay: already stored
                stored = StoredTransaction(t.xid, t.commit_lsn, t.end_lsn, t.commit_ts, t.origin,
                                           t.change_count, bytes(t.payload),
                                           tuple(bytes(f) for f in t.schema_frames))
                if t.progress is not None:
                    key = (t.progress.backfill_id, t.progress.part)
                    if key in self._parts:
                        self._parts[key] = apply_progress(self._parts[key], t.progress)
                self._change_total += t.change_count
                self._byte_total += len(stored.payload)
                self._entries.append(_Entry(stored, self._change_total, self._byte_total))
                self._lsns.append(t.commit_lsn)
                self._schema.extend((t.commit_lsn, f) for f in stored.schema_frames)
                self._head = t.commit_lsn
            if confirmed_lsn is not None:
                self._confirmed = max(self._confirmed, confirmed_lsn)

    def set_confirmed_lsn(self, lsn: int) -> None:
        check_lsn(lsn, "confirmed lsn")
        with self._open():
            self._confirmed = max(self._confirmed, lsn)

    def set_consumer(self, name: str, cursor: Cursor, acked_us: int | None = None) -> None:
        check_consumer(name, cursor)
        now = pg_now_us() if acked_us is None else acked_us
        with self._open():
            current = self._consumers.get(name)
            if current is None:
                check_new_consumer(name, cursor, self._trimmed)
                self._consumers[name] = ConsumerState(cursor, now)
            else:
                self._consumers[name] = ConsumerState(max(current.cursor, cursor),
                                                      max(now, current.acked_us))

    def delete_consumer(self, name: str) -> bool:
        with self._open():
            return self._consumers.pop(name, None) is not None

    def expire_consumers(self, acked_before_us: int) -> list[str]:
        with self._open():
            names = sorted(n for n, s in self._consumers.items() if s.acked_us < acked_before_us)
            for name in names:
                del self._consumers[name]
        log_expired("in-memory change log", names, acked_before_us)
        return names

    def trim(self, before_lsn: int, *, force: bool = False) -> int:
        with self._open():
            return self._trim(before_lsn, force)

    def retain(self, hours: float | None, max_bytes: int | None, now_us: int) -> int:
        if max_bytes is not None and max_bytes < 0:
            raise ValueError(f"retention bytes must be >= 0, got {max_bytes}")
        cutoff = age_cutoff(hours, now_us)
        with self._open():
            drop = 0  # entries to drop from the front
            if cutoff is not None:
                while drop < len(self._entries) and self._entries[drop].txn.commit_ts < cutoff:
                    drop += 1
            entries = self._entries
            if max_bytes is not None and entries:
                floor = entries[-1].cum_bytes - max_bytes  # keep what lies above this cumulative mark
                if floor > entries[0].cum_bytes - len(entries[0].txn.payload):
                    i = 0
                    while entries[i].cum_bytes < floor:
                        i += 1
                    drop = max(drop, i + 1)
            if drop == 0:
                return 0
            before = self._lsns[drop - 1] + 1
            return self._trim(before, force=False)

    def _trim(self, before_lsn: int, force: bool) -> int:
        bound = self._release_bound()
        if not force:
            before_lsn = min(before_lsn, bound)
        cut = bisect.bisect_left(self._lsns, before_lsn)
        if cut == 0:
            return 0
        self._trimmed = max(self._trimmed, self._lsns[cut - 1])
        if force and self._lsns[cut - 1] >= bound:
            self._forced_trims += 1
            gone = overtaken(self._consumers, self._trimmed)
            for name in gone:
                del self._consumers[name]
            log.warning("forced trim dropped transactions up to %X that consumer(s) %s had not "
                        "acknowledged; they were removed", self._lsns[cut - 1], ", ".join(gone))
        del self._entries[:cut]
        del self._lsns[:cut]
        return cut

    def _release_bound(self) -> int:
        consumer = slowest(s.cursor for s in self._consumers.values())
        if consumer is None:
            return release_bound(None, None)
        i = bisect.bisect_left(self._lsns, consumer.lsn)
        at = self._entries[i].txn.change_count if i < len(self._lsns) and self._lsns[i] == consumer.lsn else None
        return release_bound(consumer, at)

    # -- reading -------------------------------------------------------------------------------

    def head(self) -> int:
        with self._open():
            return self._head

    def confirmed_lsn(self) -> int:
        with self._open():
            return self._confirmed

    def trimmed_lsn(self) -> int:
        with self._open():
            return self._trimmed

    def oldest(self) -> int:
        with self._open():
            return self._lsns[0] if self._lsns else 0

    def read(self, after: Cursor, max_changes: int, upto_lsn: int | None = None, *,
             lazy_chunks: int | None = None) -> list[StoredTransaction]:
        # Payloads are held in memory already: ``lazy_chunks`` would save nothing.
        if max_changes <= 0:
            return []
        with self._open():
            start = bisect.bisect_left(self._lsns, after.lsn) if after.seq is not None \
                else bisect.bisect_right(self._lsns, after.lsn)
            candidates = (e.txn for e in self._entries[start:]
                          if upto_lsn is None or e.txn.commit_lsn <= upto_lsn)
            return read_selection(candidates, after, max_changes, stored_position)

    def split_points(self, from_lsn: int, to_lsn: int, parts: int) -> list[int]:
        with self._open():
            lo = bisect.bisect_right(self._lsns, from_lsn)
            hi = bisect.bisect_right(self._lsns, to_lsn)
            entries = self._entries[lo:hi]
        if not entries:
            return split_bounds(from_lsn, to_lsn, parts, 0, 0, lambda n: 0)
        cums = [e.cum_changes for e in entries]

        def first_reaching(n: int) -> int:
            return entries[bisect.bisect_left(cums, n)].txn.commit_lsn

        base = entries[0].cum_changes - entries[0].txn.change_count
        return split_bounds(from_lsn, to_lsn, parts, base, cums[-1], first_reaching)

    def schema_history(self, after_lsn: int = 0) -> list[tuple[int, bytes]]:
        with self._open():
            return [(lsn, f) for lsn, f in self._schema if lsn > after_lsn]

    def get_consumer(self, name: str) -> Cursor | None:
        with self._open():
            state = self._consumers.get(name)
        return None if state is None else state.cursor

    def consumers(self) -> dict[str, Cursor]:
        with self._open():
            return {n: s.cursor for n, s in self._consumers.items()}

    def consumer_states(self) -> dict[str, ConsumerState]:
        with self._open():
            return dict(sorted(self._consumers.items()))

    def stats(self) -> LogStats:
        with self._open():
            entries = self._entries
            changes = sum(e.txn.change_count for e in entries)
            size = sum(len(e.txn.payload) for e in entries)
            return LogStats(len(entries), changes, size, self._lsns[0] if entries else 0, self._head,
                            self._trimmed, self._forced_trims)

    def close(self) -> None:
        with self._lock:
            self._closed = True
