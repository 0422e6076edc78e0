"""Connections to the store: session settings that keep a stalled replica from blocking the others,
and a small pool of idle connections.

A replica paused (SIGSTOP) or cut off inside a transaction would hold its locks until the server
noticed: ``idle_in_transaction_session_timeout`` ends such a session, ``lock_timeout`` bounds how
long anyone waits for a lock, ``statement_timeout`` how long one statement (a COPY whose client
stopped sending) may run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from pgfeed.changelog.base import ChangeLogError, StoreUnavailable
from pgfeed.dsn import mask_dsn, scrub

__all__ = ["SESSION_SETTINGS", "ConnectionPool", "connect"]

SESSION_SETTINGS = {
    "idle_in_transaction_session_timeout": "5s",
    "lock_timeout": "3s",
    "statement_timeout": "120s",
    "timezone": "UTC",
}
CONNECT_TIMEOUT = 5
_MAX_IDLE = 8


def connect(dsn: str, application_name: str = "pgfeed") -> psycopg.Connection:
    """An autocommit connection to the store with ``SESSION_SETTINGS``; ChangeLogError (the
    password scrubbed) when the store cannot be reached."""
    options = " ".join(f"-c {k}={v}" for k, v in SESSION_SETTINGS.items())
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                               options=options, application_name=application_name)
    except psycopg.Error as exc:
        raise StoreUnavailable(f"cannot reach the pgfeed store {mask_dsn(dsn)}: "
                             f"{scrub(str(exc).strip(), dsn)}") from None


class ConnectionPool:
    """Connections handed out one caller at a time and kept while healthy (at most _MAX_IDLE idle)."""

    def __init__(self, dsn: str, application_name: str = "pgfeed") -> None:
        self.dsn = dsn
        self.application_name = application_name
        self._lock = threading.Lock()
        self._idle: list[psycopg.Connection] = []
        self._closed = False

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A connection outside any transaction; one that broke (or was left in a transaction) is
        closed rather than handed out again. psycopg errors become ChangeLogError (StoreUnavailable
        for the ones worth retrying: connection lost, lock or statement timeout)."""
        with self._lock:
            if self._closed:
                raise ChangeLogError("the pgfeed store is closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = connect(self.dsn, self.application_name)
        try:
            yield conn
        except psycopg.Error as exc:
            conn.close()
            kind = StoreUnavailable if isinstance(exc, psycopg.OperationalError) else ChangeLogError
            raise kind(f"pgfeed store: {scrub(str(exc).strip(), self.dsn)}") from None
        except BaseException:
            conn.close()
            raise
        if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.close()
            return
        with self._lock:
            if not self._closed and len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
