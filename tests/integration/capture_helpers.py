"""Helpers for capture tests: run a feed on a real source, wait for it, read back what it stored."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg

from pgfeed.decoding.changes import TransactionDecoder
from pgfeed.decoding.model import Change, Transaction
from pgfeed.feeds.model import FeedOptions, FeedSpec
from pgfeed.feeds.supervisor import Supervisor
from tests.fixtures.fix_service import wait_until

__all__ = ["MARKER_PREFIX", "data_changes", "emit_marker", "make_feed", "read_all", "wait_for_marker",
           "wait_until"]

MARKER_PREFIX = "test.marker"


def read_all(supervisor: Supervisor, feed: str, toast: str = "placeholder") -> list[Transaction]:
    """Every stored transaction of a feed, decoded, in commit order."""
    from pgfeed_client import EARLIEST

    log = supervisor.changelog(feed)
    decoder = TransactionDecoder(supervisor.catalog(feed), toast=toast)
    out = []
    for stored in log.read(EARLIEST, max_changes=10**12):
        out.append(decoder.load(stored))
    return out


def data_changes(txns: list[Transaction]) -> list[tuple[Transaction, Change]]:
    """(transaction, change) pairs, leaving out test markers."""
    return [(t, c) for t in txns for c in t.changes if not (c.op == "message" and c.prefix == MARKER_PREFIX)]


def emit_marker(dsn: str) -> str:
    """Commit a transactional marker message; once it is in the log, everything before it is too."""
    token = uuid.uuid4().hex
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_logical_emit_message(true, %s, %s)", (MARKER_PREFIX, token))
    return token


def wait_for_marker(supervisor: Supervisor, feed: str, dsn: str, timeout: float = 60) -> list[Transaction]:
    token = emit_marker(dsn)

    def arrived() -> list[Transaction] | None:
        txns = read_all(supervisor, feed)
        for t in txns:
            for c in t.changes:
                if c.op == "message" and c.prefix == MARKER_PREFIX and c.content == token.encode():
                    return txns
        return None

    return wait_until(arrived, timeout, f"the marker message in feed {feed!r}")


def make_feed(data_dir: Path, dsn: str, tables: tuple[str, ...], name: str = "f", **options: Any) -> Supervisor:
    supervisor = Supervisor(data_dir)
    supervisor.start()
    opts = {"heartbeat_seconds": 1.0, "messages": True, **options}  # markers are messages
    supervisor.create(FeedSpec(name=name, dsn=dsn, tables=tables, options=FeedOptions(**opts)))
    wait_until(lambda: supervisor.status(name, probe_source=False).state == "running", 30, "feed running")
    return supervisor
