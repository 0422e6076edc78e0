"""Is a feed's slot lost? Dropped, or invalidated (``wal_status = 'lost'``: ``max_slot_wal_keep_size``;
PostgreSQL 17+'s ``invalidation_reason``: ``idle_timeout`` (18), ``rows_removed`` (a standby's
conflict), ``wal_level_insufficient``; PostgreSQL 16's ``conflicting``).

Asked of the source's catalogue, never read from an error message: messages are translated with
``lc_messages``, SQLSTATEs are shared with unrelated failures. Capture asks after a
START_REPLICATION that failed on a reachable source; the supervisor asks every few seconds for
every feed, paused ones included (issue 26).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from pgfeed.errors import SourceError

__all__ = ["LostSlot", "SlotLostError", "describe", "slot_loss"]

_REASONS = {
    "wal_removed": "the WAL it needed was removed (max_slot_wal_keep_size)",
    "idle_timeout": "it was idle longer than idle_replication_slot_timeout",
    "rows_removed": "a conflict on a standby: rows it needed were removed",
    "wal_level_insufficient": "wal_level on the primary fell below logical",
}


@dataclass(frozen=True, slots=True)
class LostSlot:
    """What the source says of a lost slot: ``dropped`` or ``invalidated: <why>``."""

    slot: str
    reason: str


class SlotLostError(SourceError):
    """The feed's slot is gone: capture stops for good (never retried, never re-created)."""

    code = "slot_lost"

    def __init__(self, lost: LostSlot, message: str) -> None:
        super().__init__(message)
        self.lost = lost


def slot_loss(conn: psycopg.Connection, slot: str) -> LostSlot | None:
    """None while the slot exists and is usable; else what happened to it."""
    version = conn.info.server_version
    extra = ("invalidation_reason" if version >= 170000
             else "CASE WHEN conflicting THEN 'rows_removed' END" if version >= 160000 else "NULL")
    row = conn.execute(f"SELECT wal_status, {extra} FROM pg_replication_slots "
                       "WHERE slot_name = %s", (slot,)).fetchone()
    if row is None:
        return LostSlot(slot, "dropped")
    wal_status, reason = row
    if reason is None and wal_status != "lost":
        return None
    why = _REASONS.get(reason or "wal_removed", str(reason))
    return LostSlot(slot, f"invalidated: {why}" + (f" ({reason})" if reason else ""))


def describe(lost: LostSlot, last_lsn: str, feed: str) -> str:
    """The one message an operator reads (status ``last_error``, the ERROR log line)."""
    how = "was dropped on the source" if lost.reason == "dropped" else f"was {lost.reason}"
    return (f"changes were lost: replication slot {lost.slot!r} {how}; the feed captured up to "
            f"{last_lsn} and nothing after it reached the feed. pgfeed does not create a new slot "
            f"by itself: run `pgfeed feeds resync {feed}` (POST /v1/feeds/{feed}/resync) to create "
            "one, mark the gap in the feed and backfill its tables")
