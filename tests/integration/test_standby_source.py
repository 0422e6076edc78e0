"""A feed whose DSN names a standby (PostgreSQL 16+ decodes on a standby; run on 18, slow).

Capture works there: the publication is made on the primary (a standby cannot create one) and
the feed adopts it; its slot is created on the standby once the primary logs a running-xacts
record (``pg_log_standby_snapshot()``), and live changes committed on the primary are served
exactly. Backfills read from the standby too: a standby's ``pg_current_snapshot()`` lists no
in-progress transactions (shown here on the cluster itself), so a chunk there is judged by the
transactions running just before its snapshot (``source.running``) and positioned by the
standby's replay position; an initial snapshot and a backfill beside concurrent writes on the
primary give the table exactly. docs/design.md, issue 28.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from pgfeed.backfill import source as source_module
from pgfeed.localpg import LocalCluster, find_bindir
from pgfeed_client import FeedClient
from tests.fixtures.fix_pg import create_database
from tests.fixtures.fix_service import run_service, wait_until
from tests.integration.test_backfill import (
    TABLE,
    apply,
    create_table,
    http_changes,
    source_rows,
    wait_done,
    writers,
)
from tests.integration.test_source_failover import STANDBY_SLOT, _standby_of

pytestmark = [pytest.mark.pg]


@contextlib.contextmanager
def primary_and_standby() -> Iterator[tuple[LocalCluster, LocalCluster, str]]:
    """(primary, standby, source DSN on the primary), a table ``t`` of 2000 rows published by
    ``pub`` (made on the primary, replayed on the standby)."""
    find_bindir("18")
    with contextlib.ExitStack() as stack:
        primary = stack.enter_context(LocalCluster.start("18"))
        primary.psql(f"SELECT pg_create_physical_replication_slot('{STANDBY_SLOT}', true)")
        source = create_database(primary, prefix="standby")
        with psycopg.connect(source, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
            conn.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 2000) g")
            conn.execute("CREATE PUBLICATION pub FOR TABLE t")
        standby = _standby_of(primary, {"hot_standby_feedback": "on"})
        stack.callback(standby.destroy)
        standby.boot()
        yield primary, standby, source


@contextlib.contextmanager
def running_xacts_logged(primary: LocalCluster, dbname: str) -> Iterator[None]:
    """The primary logs a running-xacts record twice a second: a slot being created on the
    standby waits for one (else up to 15 s, and only when the primary is busy)."""
    stop = threading.Event()

    def nudge() -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):
                primary.psql("SELECT pg_log_standby_snapshot()", dbname)
            stop.wait(0.5)

    thread = threading.Thread(target=nudge, name="standby-snapshot", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


@pytest.mark.slow
def test_a_feed_on_a_standby_captures_and_backfills_exactly(tmp_path: Path) -> None:
    with primary_and_standby() as (primary, standby, source):
        dbname = psycopg.conninfo.conninfo_to_dict(source)["dbname"]
        on_standby = standby.dsn(dbname)
        # why a standby's chunks are judged by the running transactions: an open transaction on
        # the primary is in progress in the primary's snapshot, and in none the standby reports
        with psycopg.connect(source) as open_txn, psycopg.connect(source, autocommit=True) as conn:
            open_txn.execute("INSERT INTO t VALUES (0, 'open')")
            xid = int(open_txn.execute("SELECT pg_current_xact_id()::text").fetchone()[0])  # type: ignore[index]
            conn.execute("INSERT INTO t VALUES (-1, 'committed after it')")
            target = int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'").fetchone()[0])  # type: ignore[index]
            primary_xip = [int(x) for (x,) in conn.execute(
                "SELECT pg_snapshot_xip(pg_current_snapshot())::text")]
            with psycopg.connect(on_standby, autocommit=True) as s:
                wait_until(lambda: int(s.execute("SELECT pg_last_wal_replay_lsn() - '0/0'")
                                       .fetchone()[0]) >= target, 30, "the standby to replay")  # type: ignore[index]
                xmin, xmax, standby_xip = s.execute(
                    "SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint, "
                    "ARRAY(SELECT pg_snapshot_xip(s)::text::bigint) "
                    "FROM pg_current_snapshot() s").fetchone()  # type: ignore[misc]
                assert source_module.in_recovery(s)
                judged = source_module.running(s, standby=True).judge_by
                # a chunk read there is judged by that, at the standby's replay position
                chunk = source_module.read_chunk(s, "pub", "public.t", None, None, 10, judge_by=judged)
                assert len(chunk.rows) == 10 and chunk.lsn >= target
            assert xid in primary_xip and xmin <= xid < xmax and standby_xip == [], \
                (xid, primary_xip, xmin, xmax, standby_xip)
            assert judged is not None and xid in judged[1] and judged[0] > xid
            assert chunk.xip == set(judged[1]) and chunk.xmax == judged[0]
            open_txn.rollback()
        create_table(source, 3000)
        with psycopg.connect(source, autocommit=True) as conn:
            conn.execute(f"ALTER PUBLICATION pub ADD TABLE {TABLE}")
            conn.execute(f"ANALYZE {TABLE}")
        with running_xacts_logged(primary, dbname), run_service(tmp_path / "svc") as svc, \
                FeedClient(svc.http_url) as feeds, \
                httpx.Client(base_url=svc.http_url, timeout=120) as client:
            created = client.post("/v1/feeds", json={
                "name": "sb", "dsn": on_standby, "publication": "pub",
                "options": {"heartbeat_seconds": 1, "snapshot": "backfill"}})
            assert created.status_code == 201, created.text
            with psycopg.connect(source, autocommit=True) as conn:
                for i in range(1, 51):
                    conn.execute("UPDATE t SET v = %s WHERE id = %s", (f"live{i}", i))
                conn.execute("DELETE FROM t WHERE id = 2000")
            status = client.get("/v1/feeds/sb").json()
            assert status["state"] in ("snapshotting", "running") and status["last_error"] is None, status

            # the initial snapshot, read from the standby: done, every row of both tables
            (initial,) = client.get("/v1/feeds/sb/backfills").json()["backfills"]
            assert initial["initial"]
            initial = wait_done(feeds, "sb", initial["id"])
            assert initial["state"] == "done" and initial["rows"] >= 2000 + 3000 - 1, initial

            def t_rows() -> dict[int, str]:
                rows: dict[int, str] = {}
                for c in feeds.iter_changes("sb", "earliest", limit=5000):
                    if c.table != "t":
                        continue
                    if c.op == "delete":
                        rows.pop(c.key["id"], None)
                    elif c.op in ("read", "insert", "update"):
                        rows[c.after["id"]] = c.after["v"]
                return rows
            with psycopg.connect(source) as conn:
                expected_t = dict(conn.execute("SELECT id, v FROM t").fetchall())  # type: ignore[arg-type]
            wait_until(lambda: t_rows() == expected_t, 60, "the initial snapshot and the live changes")

            # a backfill from the standby while the primary changes the table
            stop = threading.Event()
            writer = writers(source, stop, 7, 3001)
            try:
                time.sleep(0.3)
                started = feeds.start_backfill("sb", [f"public.{TABLE}"], chunk_rows=200, parallel=2)
                done = wait_done(feeds, "sb", started["id"])
                time.sleep(0.3)
            finally:
                stop.set()
                writer.join()
            assert done["state"] == "done" and done["chunks"] >= 10, done
            expected = source_rows(source)
            wait_until(lambda: apply(http_changes(svc, "sb"))[0] == expected, 60,
                       "the backfilled table to equal the primary's")
            changes = http_changes(svc, "sb")
            reads = [c for c in changes if c.op == "read" and c.table == TABLE]
            initial_reads = next(t["rows"] for t in initial["tables"] if t["table"] == f"public.{TABLE}")
            assert len(reads) == initial_reads + done["rows"] and done["rows"] > 0
            second = reads[initial_reads:]  # the backfills ran one after the other
            assert len({c.key["id"] for c in second}) == len(second)  # no row read twice
            assert client.delete("/v1/feeds/sb").status_code in (200, 204)
