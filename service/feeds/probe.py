"""A feed's source, asked for its status: the slot's position and WAL risk, an adopted
publication's tables, and (PostgreSQL 17+) the slot's failover state."""

from __future__ import annotations

import psycopg

from service.dsn import scrub
from service.feeds.model import FeedSpec, FeedStatus, SlotRisk
from service.replication import slots

__all__ = ["SOURCE_TIMEOUT", "probe_source"]

SOURCE_TIMEOUT = 5  # seconds for admin queries against the source


def probe_source(spec: FeedSpec, status: FeedStatus, *, timeout: int = SOURCE_TIMEOUT) -> None:
    """Fill ``status`` with what the source says; an unreachable source sets ``last_error``
    (unless one is set) and leaves the rest as it was."""
    try:
        with psycopg.connect(spec.dsn, autocommit=True, connect_timeout=timeout) as conn:
            info = slots.slot_info(conn, spec.slot_name)
            held = None if spec.owns_publication else slots.publication_tables(
                conn, spec.publication_name)
            failover = slots.failover_info(conn, spec.slot_name)
    except psycopg.Error as exc:
        status.last_error = status.last_error or f"source unreachable: {scrub(str(exc).strip(), spec.dsn)}"
        return
    if held is not None:  # an adopted publication changes on the source, not through pgfeed
        status.all_tables, status.tables = held[0], list(held[1])
    status.failover = failover
    if info:
        status.server_lsn = info.get("server_lsn")
        status.slot_risk = SlotRisk(info.get("wal_status"), info.get("safe_wal_size"),
                                    info.get("retained_bytes"))
        if status.server_lsn is not None:
            status.lag_bytes = max(0, status.server_lsn - status.confirmed_lsn)
