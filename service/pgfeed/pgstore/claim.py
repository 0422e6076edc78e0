"""One live process per replica id on a store: a session advisory lock, keyed by the schema and
the id, held on a connection the replica keeps open for its whole life.

Leases treat a holder with this replica's id as this replica (a restarted one takes its leases
back at once), so two live processes with one id would take each other's leases in turn. The lock
is what tells a second process the id is taken. It goes with the session: a replica that exits,
is SIGKILLed or loses its host frees its id as soon as the store notices (at once for a closed
socket; TCP keepalives below bound a vanished host), so a crash never leaves the id blocked.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time

import psycopg
from psycopg import sql

from pgfeed.changelog.base import ChangeLogError
from pgfeed.dsn import scrub
from pgfeed.errors import StartupError
from pgfeed.pgstore.connections import connect
from pgfeed.pgstore.schema import table

__all__ = ["CLAIM_WAIT", "ReplicaClaim", "claim_key"]

log = logging.getLogger("pgfeed.store")

# A replica restarted right after a SIGKILL may find its old session not yet gone: retry this long.
CLAIM_WAIT = 3.0
# The store ends the session of a replica whose host vanished after about idle + interval * count.
_KEEPALIVES = {"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3"}


def claim_key(schema: str, replica_id: str) -> int:
    """The advisory lock's bigint key (64 bits of a hash: distinct ids never share one in practice)."""
    digest = hashlib.blake2b(f"pgfeed replica\0{schema}\0{replica_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class ReplicaClaim:
    """The claim of ``replica_id`` on the store at ``dsn``: ``take`` once at startup, ``keep``
    with every heartbeat (re-takes it on a new connection after the old one broke), ``release``
    at the end."""

    def __init__(self, dsn: str, schema: str, replica_id: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self.replica_id = replica_id
        self.key = claim_key(schema, replica_id)
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()

    def take(self, wait: float = CLAIM_WAIT) -> None:
        """Hold the claim, or StartupError naming the replica id and who has it (after ``wait``
        seconds of retries: a SIGKILLed predecessor's session may take a moment to end)."""
        deadline = time.monotonic() + wait
        with self._lock:
            while not self._try_locked():
                if time.monotonic() >= deadline:
                    refusal = self._refusal()
                    self._close()
                    raise StartupError(refusal)
                time.sleep(0.2)

    def keep(self) -> None:
        """Check the claim's connection (a heartbeat); after it broke, take the claim again.
        Logged, not raised, when another process took the id meanwhile."""
        with self._lock:
            conn = self._conn
            if conn is not None:
                try:
                    conn.execute("SELECT 1")
                    return
                except psycopg.Error:
                    conn.close()
                    self._conn = None
            try:
                held = self._try_locked()
            except (StartupError, psycopg.Error) as exc:  # the store is away: the next heartbeat
                self._close()                             # tries again
                log.warning("replica id %s: cannot renew its claim: %s", self.replica_id,
                            scrub(str(exc).strip(), self.dsn))
                return
            if not held:
                log.error("replica id %s is now held by another process on the store (this "
                          "one's connection was lost meanwhile): two replicas run with one id; "
                          "stop one of them", self.replica_id)

    def release(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()  # the session's advisory lock goes with it
            self._conn = None

    def _try_locked(self) -> bool:
        if self._conn is None:
            try:
                self._conn = connect(self.dsn, f"pgfeed {self.replica_id} claim"[:63])
            except ChangeLogError as exc:  # StoreUnavailable: its message masks the password
                raise StartupError(f"{exc} (check --store / PGFEED_STORE)") from None
            for name, value in _KEEPALIVES.items():
                self._conn.execute("SELECT set_config(%s, %s, false)", (name, value))
        row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
        return bool(row and row[0])

    def _refusal(self) -> str:
        """The one-line refusal: the id, and what the store knows of the process holding it."""
        facts = []
        try:
            assert self._conn is not None
            holder = self._conn.execute(
                "SELECT a.client_addr::text, a.application_name FROM pg_locks l "
                "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
                "AND l.granted AND l.objsubid = 1 AND l.classid = %s::oid AND l.objid = %s::oid",
                (_high(self.key), _low(self.key))).fetchone()
            if holder is not None:
                facts.append(f"connected from {holder[0] or 'a local socket'}")
            beat = self._conn.execute(
                sql.SQL("SELECT extract(epoch FROM now() - heartbeat_at)::float8 FROM {} WHERE id = %s")
                .format(table(self.schema, "replica")), (self.replica_id,)).fetchone()
            if beat is not None:
                facts.append(f"last heartbeat {beat[0]:.1f} s ago")
        except psycopg.Error:
            pass
        known = f" ({', '.join(facts)})" if facts else ""
        return (f"replica id {self.replica_id!r} is in use by another live pgfeed serve on this "
                f"store{known}; stop that one, or give this one another --replica-id")


def _high(key: int) -> int:
    """pg_locks shows a bigint advisory key as classid (high 32 bits) and objid (low 32 bits)."""
    return (key & 0xFFFFFFFFFFFFFFFF) >> 32


def _low(key: int) -> int:
    return key & 0xFFFFFFFF
