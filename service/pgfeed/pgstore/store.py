"""PgStore: the feed catalogue, change logs, leases and replica heartbeats of several ``pgfeed
serve`` processes in one PostgreSQL schema, and the listener that tells a replica what the
others did.

Every write another replica must react to notifies the store's channel: ``h <feed> <head>`` (an
append moved a feed's head: wake live readers), ``c <feed>`` (the catalogue changed: a feed was
created, deleted, paused, resumed or altered), ``l <feed>`` (a lease changed hands). The listener
also polls the heads every POLL_SECONDS, so a lost notification (or a listener reconnecting)
delays readers by at most that, and never loses anything.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgfeed.changelog.base import ChangeLogError
from pgfeed.dsn import mask_dsn, scrub
from pgfeed.errors import FeedExists
from pgfeed.feeds.model import FeedSpec
from pgfeed.feeds.toastindex import INDEX_FILE
from pgfeed.pgstore import leases
from pgfeed.pgstore.changelog import PgChangeLog
from pgfeed.pgstore.claim import ReplicaClaim
from pgfeed.pgstore.connections import ConnectionPool, connect
from pgfeed.pgstore.leases import Lease, ReplicaBeat
from pgfeed.pgstore.schema import channel, ensure_schema, table

__all__ = ["DEFAULT_SCHEMA", "PgStore", "StoreEvents"]

log = logging.getLogger("pgfeed.store")

DEFAULT_SCHEMA = "pgfeed"
POLL_SECONDS = 1.0
_LISTEN_WAIT = 0.25  # seconds the listener waits for notifications between checks of its stop flag
_FEED_TABLES = ("txn", "chunk", "schema_frame", "consumer", "log_state", "lease", "backfill",
                "backfill_part")


class StoreEvents:
    """What a replica does when the store says something happened (overridden by the supervisor)."""

    def head(self, feed: str, head: int) -> None: ...

    def catalogue(self, feed: str) -> None: ...

    def lease(self, feed: str) -> None: ...

    def backfill(self, feed: str) -> None: ...


class PgStore:
    """FeedStore on a PostgreSQL database (``dsn``), tables in ``schema``; ``replica_id`` names this
    process in leases and heartbeats. Spill files go to ``spill_root`` (a fresh temporary
    directory, removed at close, by default: replicas need no data dir)."""

    shared = True

    def __init__(self, dsn: str, *, replica_id: str, schema: str = DEFAULT_SCHEMA,
                 spill_root: Path | None = None) -> None:
        self.dsn = dsn
        self.schema = schema
        self.replica_id = replica_id
        with connect(dsn) as conn:
            try:
                ensure_schema(conn, schema)
            except psycopg.Error as exc:
                raise ChangeLogError(f"cannot set up the pgfeed store in schema {schema!r} of "
                                     f"{mask_dsn(dsn)}: {scrub(str(exc).strip(), dsn)}") from None
        self._pool = ConnectionPool(dsn, application_name=f"pgfeed {replica_id}"[:63])
        self._owns_spill = spill_root is None
        self._spill_root = Path(tempfile.mkdtemp(prefix="pgfeed-spill-")) if spill_root is None else spill_root
        self._channel = channel(schema)
        self._feed_t = table(schema, "feed")
        self._stop = threading.Event()
        self._listener: threading.Thread | None = None
        self._claim: ReplicaClaim | None = None

    def __repr__(self) -> str:
        return f"PgStore({mask_dsn(self.dsn)!r}, schema={self.schema!r})"

    # -- catalogue ---------------------------------------------------------------------------------

    def feeds(self) -> list[tuple[FeedSpec, bool]]:
        with self._pool.connection() as conn:
            rows = conn.execute(sql.SQL("SELECT spec, paused FROM {} ORDER BY name").format(self._feed_t)).fetchall()
        return [(FeedSpec.from_dict(spec), paused) for spec, paused in rows]

    def add(self, spec: FeedSpec) -> None:
        with self._pool.connection() as conn, conn.transaction():
            added = conn.execute(sql.SQL("INSERT INTO {} (name, spec) VALUES (%s, %s) ON CONFLICT DO NOTHING "
                                         "RETURNING name").format(self._feed_t),
                                 (spec.name, Jsonb(spec.to_dict()))).fetchone()
            if added is None:
                raise FeedExists(f"feed {spec.name!r} already exists")
            # A log row a replica re-created while an earlier feed of this name was being deleted
            # would make the new feed skip transactions below its head: start from nothing.
            for t in _FEED_TABLES:
                conn.execute(sql.SQL("DELETE FROM {} WHERE feed = %s").format(table(self.schema, t)), (spec.name,))
            self._notify(conn, f"c {spec.name}")

    def put(self, spec: FeedSpec, paused: bool) -> None:
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(sql.SQL("INSERT INTO {} (name, spec, paused) VALUES (%s, %s, %s) ON CONFLICT (name) "
                                 "DO UPDATE SET spec = excluded.spec, paused = excluded.paused, "
                                 "updated_at = now()").format(self._feed_t),
                         (spec.name, Jsonb(spec.to_dict()), paused))
            self._notify(conn, f"c {spec.name}")

    def remove(self, name: str) -> None:
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(sql.SQL("DELETE FROM {} WHERE name = %s").format(self._feed_t), (name,))
            self._notify(conn, f"c {name}")

    def _notify(self, conn: psycopg.Connection, payload: str) -> None:
        conn.execute("SELECT pg_notify(%s, %s)", (self._channel, payload))

    # -- logs and files ----------------------------------------------------------------------------

    def open_log(self, name: str) -> PgChangeLog:
        return PgChangeLog(self._pool, self.schema, name, holder=self.replica_id)

    def discard_log(self, name: str, changelog: object = None) -> None:
        """Delete a feed's log, consumers and lease from the store, and its spill files here."""
        with self._pool.connection() as conn, conn.transaction():
            for t in _FEED_TABLES:
                conn.execute(sql.SQL("DELETE FROM {} WHERE feed = %s").format(table(self.schema, t)), (name,))
        shutil.rmtree(self.spill_dir(name), ignore_errors=True)

    def spill_dir(self, name: str) -> Path:
        return self._spill_root / name

    def toast_index_path(self, name: str) -> Path:
        """Each replica builds a ``toast=reselect`` index of its own from the shared log, in its
        temporary directory (rebuilt after a restart; see docs/design.md)."""
        self.spill_dir(name).mkdir(parents=True, exist_ok=True)
        return self.spill_dir(name) / INDEX_FILE

    # -- leases and replicas -----------------------------------------------------------------------

    def acquire(self, feed: str, ttl: float) -> Lease | None:
        with self._pool.connection() as conn:
            return leases.acquire(conn, self.schema, feed, self.replica_id, ttl)

    def renew(self, feed: str, epoch: int, ttl: float,
              stats: dict[str, Any] | None = None) -> Lease | None:
        with self._pool.connection() as conn:
            return leases.renew(conn, self.schema, feed, self.replica_id, epoch, ttl, stats)

    def release(self, feed: str, epoch: int) -> None:
        with self._pool.connection() as conn:
            leases.release(conn, self.schema, feed, self.replica_id, epoch)

    def leases(self) -> dict[str, Lease]:
        with self._pool.connection() as conn:
            return leases.leases(conn, self.schema)

    def claim_replica(self) -> None:
        """Hold this replica id for the process's life (``claim.ReplicaClaim``): StartupError
        when another live process has it. ``pgfeed serve`` claims; tools opening the store
        (tests, an admin supervisor) need not."""
        if self._claim is None:
            claim = ReplicaClaim(self.dsn, self.schema, self.replica_id)
            claim.take()
            self._claim = claim

    def heartbeat(self) -> None:
        if self._claim is not None:
            self._claim.keep()
        with self._pool.connection() as conn:
            leases.heartbeat(conn, self.schema, self.replica_id)

    def replicas(self) -> list[ReplicaBeat]:
        with self._pool.connection() as conn:
            return leases.replicas(conn, self.schema)

    # -- listening ---------------------------------------------------------------------------------

    def listen(self, events: StoreEvents) -> None:
        """Start the listener thread (once): ``events`` hears of notifications and of the polled heads."""
        if self._listener is None:
            self._listener = threading.Thread(target=self._listen, args=(events,), name="pgfeed-store-listen",
                                              daemon=True)
            self._listener.start()

    def _listen(self, events: StoreEvents) -> None:
        while not self._stop.is_set():
            conn = None
            try:
                conn = connect(self.dsn, f"pgfeed {self.replica_id} listen"[:63])
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                last_poll = 0.0
                while not self._stop.is_set():
                    if time.monotonic() - last_poll >= POLL_SECONDS:
                        self._poll(conn, events)  # first: what was missed before LISTEN
                        last_poll = time.monotonic()
                    for note in conn.notifies(timeout=_LISTEN_WAIT):
                        _dispatch(note.payload, events)
            except (psycopg.Error, ChangeLogError) as exc:
                log.warning("store listener: %s; reconnecting", scrub(str(exc).strip(), self.dsn))
                self._stop.wait(1.0)
            except Exception:  # a bug in a handler: keep listening
                log.exception("store listener failed; restarting it")
                self._stop.wait(1.0)
            finally:
                if conn is not None:
                    conn.close()

    def _poll(self, conn: psycopg.Connection, events: StoreEvents) -> None:
        for feed, head in conn.execute(sql.SQL("SELECT feed, head FROM {}").format(table(self.schema, "log_state"))):
            events.head(feed, head)

    def close(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.join(timeout=5)
            self._listener = None
        self._pool.close()
        if self._claim is not None:
            self._claim.release()
            self._claim = None
        if self._owns_spill:
            shutil.rmtree(self._spill_root, ignore_errors=True)


def _dispatch(payload: str, events: StoreEvents) -> None:
    kind, _, rest = payload.partition(" ")
    if kind == "h":
        feed, _, head = rest.rpartition(" ")
        events.head(feed, int(head))
    elif kind == "c":
        events.catalogue(rest)
    elif kind == "l":
        events.lease(rest)
    elif kind == "b":
        events.backfill(rest)
