"""Every connection pgfeed opens to a source, under one policy.

The replication stream, the feed's DDL and status probes, heartbeats, backfill reads and
``pgfeed peek`` all connect here, so that each gets the same things: the replication session's
pinned settings (``session.SETTINGS``, after the DSN's own ``options``), a connect timeout (the
DSN's ``connect_timeout`` when it has one, else CONNECT_TIMEOUT), an ``application_name`` that
says which part of pgfeed it is (what an operator reads in ``pg_stat_activity``), and errors
that never quote the DSN's password.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgfeed.dsn import scrub
from pgfeed.errors import SourceError
from pgfeed.replication import session

__all__ = ["CONNECT_TIMEOUT", "admin_connection", "connect", "conninfo", "one_line"]

CONNECT_TIMEOUT = 5  # seconds, unless the DSN says otherwise: status probes (and /metrics) wait on it


def one_line(text: str) -> str:
    """libpq messages span lines (``\\n\\tThis probably means...``): one line for logs and status."""
    return " ".join(text.split())


def conninfo(dsn: str, role: str = "pgfeed", *, replication: bool = False,
             options: str = "") -> str:
    """``dsn`` with the session settings (then ``options``), and the defaults for timeout and
    ``application_name`` (``role``) where the DSN has none. SourceError for a DSN libpq rejects."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        raise SourceError(f"invalid source DSN: {one_line(scrub(str(exc), dsn))}") from None
    pinned = session.connection_options(str(params["options"]) if params.get("options") else None)
    extra: dict[str, Any] = {"options": f"{pinned} {options}" if options else pinned}
    if replication:
        extra["replication"] = "database"
    if "connect_timeout" not in params:
        extra["connect_timeout"] = CONNECT_TIMEOUT
    if "application_name" not in params:
        extra["application_name"] = role
    return make_conninfo(dsn, **extra)


def connect(dsn: str, role: str = "pgfeed", *, replication: bool = False, options: str = "",
            autocommit: bool = True) -> psycopg.Connection[Any]:
    """A connection to the source (see ``conninfo``); SourceError, password scrubbed, when it
    cannot be opened."""
    try:
        return psycopg.connect(conninfo(dsn, role, replication=replication, options=options),
                               autocommit=autocommit)
    except psycopg.Error as exc:
        what = "a replication connection" if replication else "a connection"
        raise SourceError(f"cannot open {what} to the source: {one_line(scrub(str(exc), dsn))}") from None


@contextmanager
def admin_connection(dsn: str, what: str, role: str = "pgfeed") -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection for admin work on the source (DDL, catalogue queries), closed
    after the block. A psycopg error, opening it or inside the block, becomes
    ``SourceError(f"{what}: {reason}")`` with the password scrubbed."""
    try:
        with psycopg.connect(conninfo(dsn, role), autocommit=True) as conn:
            yield conn
    except psycopg.Error as exc:
        raise SourceError(f"{what}: {one_line(scrub(str(exc), dsn))}") from None
