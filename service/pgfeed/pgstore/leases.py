"""Leases and replica heartbeats in the store: which replica captures each feed, and who is alive.

A lease row per feed names its holder, an epoch and an expiry, all in the store's clock (``now()``),
so replicas' clocks never matter. A replica acquires a lease that expired (or that it held in a
previous life: the same replica id), which bumps the epoch; it renews it every few seconds; every
append checks the epoch under the same transaction (``changelog.PgChangeLog``), so once another
replica has taken over, the old holder can no longer write, however late it wakes up.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgfeed.pgstore.schema import channel, table

__all__ = ["Lease", "ReplicaBeat", "acquire", "heartbeat", "leases", "release", "renew",
           "replicas"]


@dataclass(frozen=True, slots=True)
class Lease:
    feed: str
    holder: str
    epoch: int
    since: datetime
    expires_at: datetime
    live: bool  # not expired when read
    stats: dict[str, Any] | None = None  # the capture counters its holder (or the last) reported


@dataclass(frozen=True, slots=True)
class ReplicaBeat:
    id: str
    started_at: datetime
    heartbeat_at: datetime
    age_seconds: float  # since its last heartbeat, in the store's clock


_RETURNING = sql.SQL(" RETURNING feed, holder, epoch, since, expires_at, expires_at > now(), stats")


def _lease(row: tuple[Any, ...] | None) -> Lease | None:
    return None if row is None else Lease(*row)


def acquire(conn: psycopg.Connection, schema: str, feed: str, holder: str, ttl: float) -> Lease | None:
    """Take the feed's lease if it is free, expired, or recorded as ``holder``'s own (a restarted
    replica): the epoch goes up by one. None when another replica holds it."""
    lease_t = table(schema, "lease")
    query = sql.SQL(
        "INSERT INTO {t} AS l (feed, holder, epoch, since, expires_at) "
        "VALUES (%(feed)s, %(holder)s, 1, now(), now() + make_interval(secs => %(ttl)s)) "
        "ON CONFLICT (feed) DO UPDATE SET holder = excluded.holder, epoch = l.epoch + 1, "
        "since = now(), expires_at = excluded.expires_at "
        "WHERE l.expires_at < now() OR l.holder = excluded.holder").format(t=lease_t) + _RETURNING
    with conn.transaction():
        got = _lease(conn.execute(query, {"feed": feed, "holder": holder, "ttl": ttl}).fetchone())
        if got is not None:
            conn.execute("SELECT pg_notify(%s, %s)", (channel(schema), f"l {feed}"))
    return got


def renew(conn: psycopg.Connection, schema: str, feed: str, holder: str, epoch: int,
          ttl: float, stats: dict[str, Any] | None = None) -> Lease | None:
    """Extend the lease ``holder`` holds at ``epoch`` (and record its capture counters, when
    given); None if it was taken over meanwhile."""
    query = sql.SQL("UPDATE {} SET expires_at = now() + make_interval(secs => %s), "
                    "stats = coalesce(%s, stats) WHERE feed = %s AND holder = %s AND epoch = %s"
                    ).format(table(schema, "lease"))
    values = (ttl, None if stats is None else Jsonb(stats), feed, holder, epoch)
    return _lease(conn.execute(query + _RETURNING, values).fetchone())


def release(conn: psycopg.Connection, schema: str, feed: str, holder: str, epoch: int) -> None:
    """Give the lease up now (it expires), keeping its epoch so the next holder's is higher."""
    with conn.transaction():
        conn.execute(sql.SQL("UPDATE {} SET expires_at = now() WHERE feed = %s AND holder = %s "
                             "AND epoch = %s").format(table(schema, "lease")), (feed, holder, epoch))
        conn.execute("SELECT pg_notify(%s, %s)", (channel(schema), f"l {feed}"))  # others take it now


def leases(conn: psycopg.Connection, schema: str) -> dict[str, Lease]:
    rows = conn.execute(sql.SQL("SELECT feed, holder, epoch, since, expires_at, expires_at > now(), "
                                "stats FROM {}").format(table(schema, "lease"))).fetchall()
    return {row[0]: Lease(*row) for row in rows}


def heartbeat(conn: psycopg.Connection, schema: str, replica: str) -> None:
    conn.execute(sql.SQL("INSERT INTO {} AS r VALUES (%s, now(), now()) ON CONFLICT (id) DO UPDATE "
                         "SET heartbeat_at = now()").format(table(schema, "replica")), (replica,))


def replicas(conn: psycopg.Connection, schema: str) -> list[ReplicaBeat]:
    rows = conn.execute(sql.SQL("SELECT id, started_at, heartbeat_at, "
                                "extract(epoch FROM now() - heartbeat_at)::float8 FROM {} ORDER BY id")
                        .format(table(schema, "replica"))).fetchall()
    return [ReplicaBeat(*row) for row in rows]

