"""Consumers and retention of a feed's log in the PostgreSQL store (``changelog.PgChangeLog``).

Any replica may acknowledge, delete or expire consumers and trim (no lease needed): trims and new
consumers are ordered by the feed's ``log_state`` row lock, taken by appends too.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager

import psycopg
from psycopg import sql

from pgfeed.changelog.base import (
    MAX_LSN,
    ConsumerState,
    age_cutoff,
    check_consumer,
    check_new_consumer,
    log_expired,
    overtaken,
    release_bound,
    slowest,
)
from pgfeed.pgoutput.messages import pg_now_us
from pgfeed_client._cursor import Cursor

__all__ = ["ConsumersAndRetention"]

log = logging.getLogger("pgfeed.changelog")


def _lsn(value: int) -> int:
    """Clamp a position to what a bigint holds (cursors may name LSNs up to 2**64-1)."""
    return max(-1, min(value, MAX_LSN))


class ConsumersAndRetention:
    """The consumer and trim half of PgChangeLog (which provides ``feed``, ``_t`` and
    ``_connection``)."""

    feed: str
    _t: dict[str, sql.Identifier]

    def _connection(self) -> AbstractContextManager[psycopg.Connection]:
        raise NotImplementedError

    def set_consumer(self, name: str, cursor: Cursor, acked_us: int | None = None) -> None:
        """Any replica records acknowledgements (no lease needed): never backward."""
        check_consumer(name, cursor)
        now = pg_now_us() if acked_us is None else acked_us
        t = self._t["consumer"]
        with self._connection() as conn, conn.transaction():
            # The log_state lock orders this with trims (a new consumer is checked against them).
            (trimmed,) = conn.execute(sql.SQL("SELECT trimmed_lsn FROM {} WHERE feed = %s FOR SHARE")
                                      .format(self._t["log_state"]), (self.feed,)).fetchone() or (0,)
            row = conn.execute(sql.SQL("SELECT lsn, seq, acked_at FROM {} WHERE feed = %s AND name = %s "
                                       "FOR UPDATE").format(t), (self.feed, name)).fetchone()
            if row is None:
                check_new_consumer(name, cursor, trimmed)
            else:
                cursor, now = max(Cursor(row[0], row[1]), cursor), max(now, row[2])  # kept when equal
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s) ON CONFLICT (feed, name) "
                                 "DO UPDATE SET lsn = excluded.lsn, seq = excluded.seq, "
                                 "acked_at = excluded.acked_at").format(t),
                         (self.feed, name, _lsn(cursor.lsn), cursor.seq, now))

    def delete_consumer(self, name: str) -> bool:
        with self._connection() as conn:
            return conn.execute(sql.SQL("DELETE FROM {} WHERE feed = %s AND name = %s")
                                .format(self._t["consumer"]), (self.feed, name)).rowcount > 0

    def expire_consumers(self, acked_before_us: int) -> list[str]:
        with self._connection() as conn:
            names = sorted(n for (n,) in conn.execute(
                sql.SQL("DELETE FROM {} WHERE feed = %s AND acked_at < %s RETURNING name")
                .format(self._t["consumer"]), (self.feed, acked_before_us)))
        log_expired(f"change log of feed {self.feed}", names, acked_before_us)
        return names

    def trim(self, before_lsn: int, *, force: bool = False) -> int:
        with self._connection() as conn, conn.transaction():
            return self._trim(conn, before_lsn, force)

    def retain(self, hours: float | None, max_bytes: int | None, now_us: int) -> int:
        if max_bytes is not None and max_bytes < 0:
            raise ValueError(f"retention bytes must be >= 0, got {max_bytes}")
        cutoff = age_cutoff(hours, now_us)
        txn = self._t["txn"]
        with self._connection() as conn, conn.transaction():
            self._lock_state(conn)
            before = 0  # drop commit_lsn < before
            if cutoff is not None:  # the oldest run of transactions committed before the cutoff
                row = conn.execute(sql.SQL("SELECT commit_lsn FROM {} WHERE feed = %s AND commit_ts >= %s "
                                           "ORDER BY commit_lsn LIMIT 1").format(txn),
                                   (self.feed, cutoff)).fetchone()
                before = MAX_LSN if row is None else row[0]
            if max_bytes is not None:
                last = conn.execute(sql.SQL("SELECT cum_bytes FROM {} WHERE feed = %s ORDER BY commit_lsn "
                                            "DESC LIMIT 1").format(txn), (self.feed,)).fetchone()
                if last is not None:  # keep from the first transaction with <= max_bytes from it on
                    row = conn.execute(sql.SQL(
                        "SELECT commit_lsn FROM {} WHERE feed = %s AND cum_bytes - payload_bytes >= %s "
                        "ORDER BY commit_lsn LIMIT 1").format(txn), (self.feed, last[0] - max_bytes)).fetchone()
                    before = max(before, MAX_LSN if row is None else row[0])
            return self._trim(conn, before, force=False) if before else 0

    def _lock_state(self, conn: psycopg.Connection) -> None:
        """Serialise trims with appends and each other (any replica may trim)."""
        conn.execute(sql.SQL("SELECT 1 FROM {} WHERE feed = %s FOR UPDATE").format(self._t["log_state"]),
                     (self.feed,))

    def _trim(self, conn: psycopg.Connection, before_lsn: int, force: bool) -> int:
        self._lock_state(conn)
        t = self._t
        bound = self._release_bound(conn)
        before_lsn = _lsn(before_lsn if force else min(before_lsn, bound))
        last = conn.execute(sql.SQL("SELECT commit_lsn, ordinal FROM {} WHERE feed = %s AND commit_lsn < %s "
                                    "ORDER BY commit_lsn DESC LIMIT 1").format(t["txn"]),
                            (self.feed, before_lsn)).fetchone()
        if last is None:
            return 0
        last_lsn, last_ordinal = last
        first = conn.execute(sql.SQL("SELECT ordinal FROM {} WHERE feed = %s ORDER BY commit_lsn LIMIT 1")
                             .format(t["txn"]), (self.feed,)).fetchone()
        first_ordinal = last_ordinal if first is None else first[0]
        conn.execute(sql.SQL("DELETE FROM {} WHERE feed = %s AND commit_lsn <= %s").format(t["txn"]),
                     (self.feed, last_lsn))
        conn.execute(sql.SQL("DELETE FROM {} WHERE feed = %s AND commit_lsn <= %s").format(t["chunk"]),
                     (self.feed, last_lsn))
        forced = force and last_lsn >= bound
        conn.execute(sql.SQL("UPDATE {} SET trimmed_lsn = greatest(trimmed_lsn, %s), "
                             "forced_trims = forced_trims + %s WHERE feed = %s").format(t["log_state"]),
                     (last_lsn, int(forced), self.feed))
        if forced:
            gone = overtaken(self._states(conn), last_lsn)  # trimmed_lsn is at least last_lsn now
            conn.execute(sql.SQL("DELETE FROM {} WHERE feed = %s AND name = ANY(%s)").format(t["consumer"]),
                         (self.feed, gone))
            log.warning("change log of feed %s: forced trim dropped transactions up to %X that "
                        "consumer(s) %s had not acknowledged; they were removed", self.feed, last_lsn,
                        ", ".join(gone))
        return int(last_ordinal - first_ordinal + 1)

    def _release_bound(self, conn: psycopg.Connection) -> int:
        consumer = slowest(Cursor(lsn, seq) for lsn, seq in conn.execute(
            sql.SQL("SELECT lsn, seq FROM {} WHERE feed = %s").format(self._t["consumer"]), (self.feed,)))
        if consumer is None:
            return release_bound(None, None)
        row = conn.execute(sql.SQL("SELECT change_count FROM {} WHERE feed = %s AND commit_lsn = %s")
                           .format(self._t["txn"]), (self.feed, _lsn(consumer.lsn))).fetchone()
        return release_bound(consumer, None if row is None else row[0])

    def get_consumer(self, name: str) -> Cursor | None:
        with self._connection() as conn:
            row = conn.execute(sql.SQL("SELECT lsn, seq FROM {} WHERE feed = %s AND name = %s")
                               .format(self._t["consumer"]), (self.feed, name)).fetchone()
        return None if row is None else Cursor(row[0], row[1])

    def consumers(self) -> dict[str, Cursor]:
        return {name: state.cursor for name, state in self.consumer_states().items()}

    def consumer_states(self) -> dict[str, ConsumerState]:
        with self._connection() as conn:
            return self._states(conn)

    def _states(self, conn: psycopg.Connection) -> dict[str, ConsumerState]:
        rows = conn.execute(sql.SQL("SELECT name, lsn, seq, acked_at FROM {} WHERE feed = %s ORDER BY name")
                            .format(self._t["consumer"]), (self.feed,)).fetchall()
        return {name: ConsumerState(Cursor(lsn, seq), acked) for name, lsn, seq, acked in rows}

