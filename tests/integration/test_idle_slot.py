"""An idle feed's slot does not hold WAL back (issue 13, item 10).

The source writes many MB of WAL that the feed's publication does not cover (a table of the same
database outside the publication, and another database of the cluster), so the feed receives
nothing but keepalives and its own heartbeats. The slot's retained WAL
(``pg_current_wal_lsn() - restart_lsn``) must stay under a bound and ``confirmed_flush_lsn`` must
follow the server.

``restart_lsn`` moves only to a position where the slot's decoder has seen a running-transactions
record (``xl_running_xacts``: the oldest transaction still needed starts there). PostgreSQL logs
one at every checkpoint and from the background writer every 15 s while WAL is written; each round
runs ``CHECKPOINT`` so the record is there now rather than within 15 s, and the test waits (a few
seconds at most) for the feed's confirmation to carry the slot past it.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from pgfeed.localpg import LocalCluster
from tests.fixtures.fix_pg import create_database, drop_slots
from tests.fixtures.fix_service import FeedFactory, wait_until

pg = pytest.mark.pg

ROUNDS = 8
ROWS = 6000  # rows of ~1 kB per round: ~7 MB of WAL (more with full-page images after a checkpoint)
SEGMENT = 16 << 20
BOUND = SEGMENT  # retained WAL after each round: less than one segment, whatever was written


def _positions(dsn: str, slot: str) -> tuple[int, int, int]:
    """(server LSN, restart_lsn, confirmed_flush_lsn) as integers."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, restart_lsn - '0/0'::pg_lsn, "
                           "confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots "
                           "WHERE slot_name = %s", (slot,)).fetchone()
    assert row is not None, f"slot {slot} is gone"
    return int(row[0]), int(row[1]), int(row[2])


def _write_round(conn: psycopg.Connection[Any], table: str, start: int) -> None:
    conn.execute(f"INSERT INTO {table} SELECT g, repeat(md5(g::text), 32) "  # fixed names only
                 "FROM generate_series(%s::int, %s::int) g", (start, start + ROWS - 1))


@pg
def test_idle_slot_retains_bounded_wal(make_served_feed: FeedFactory, pg_cluster: LocalCluster,
                                       pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE captured (id int PRIMARY KEY)")
        conn.execute("CREATE TABLE outside (id int PRIMARY KEY, pad text)")
    other_dsn = create_database(pg_cluster, prefix="idle_other")
    with psycopg.connect(other_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE busy (id int PRIMARY KEY, pad text)")
    name = make_served_feed(pg_dsn, tables=("public.captured",), heartbeat_seconds=0.2)
    slot = f"pgfeed_{name}"
    supervisor = make_served_feed.service.supervisor
    make_served_feed.caught_up(name, pg_dsn)
    first_server, _, first_confirmed = _positions(pg_dsn, slot)

    retained: list[int] = []
    confirmed: list[int] = []
    started = time.monotonic()
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as same, \
                psycopg.connect(other_dsn, autocommit=True) as other:
            for i in range(ROUNDS):
                # Alternate: the feed's own database (a table outside its publication), then
                # another database of the cluster (its WAL is decoded by the slot all the same).
                _write_round(same if i % 2 == 0 else other, "outside" if i % 2 == 0 else "busy",
                             i * ROWS)
                written, _, _ = _positions(pg_dsn, slot)
                # restart_lsn moves when the walsender decodes a running-transactions record
                # after the confirmed position has passed it: a CHECKPOINT writes one. One that
                # is decoded before the feed confirmed this round's writes (a loaded machine)
                # moves nothing, so checkpoint again until it does.
                def moved(w: int = written) -> bool:
                    if _positions(pg_dsn, slot)[1] >= w:
                        return True
                    same.execute("CHECKPOINT")
                    time.sleep(0.2)
                    return False

                wait_until(moved, 30, f"restart_lsn of {slot} past round {i}'s writes")
                server, restart, flushed = _positions(pg_dsn, slot)
                retained.append(server - restart)
                confirmed.append(flushed)
    finally:
        drop_slots(pg_cluster, other_dsn)
    elapsed = time.monotonic() - started

    total = _positions(pg_dsn, slot)[0] - first_server
    assert total >= 3 * SEGMENT, f"only {total} bytes of WAL written"
    assert max(retained) < BOUND, f"retained WAL per round {retained} (total written {total})"
    # confirmed_flush_lsn follows the server round after round, from keepalives and heartbeats
    # alone: the feed stored nothing.
    assert confirmed == sorted(confirmed) and confirmed[0] > first_confirmed
    assert len(set(confirmed)) == ROUNDS
    status = supervisor.status(name)
    assert status.changes_captured == 0 and status.last_error is None
    assert status.slot_risk.retained_bytes is not None and status.slot_risk.retained_bytes < BOUND
    assert elapsed < 60
