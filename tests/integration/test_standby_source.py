"""A feed whose DSN names a standby (PostgreSQL 16+ decodes on a standby; run on 18, slow).

Capture works there: the publication is made on the primary (a standby cannot create one) and
the feed adopts it; its slot is created on the standby once the primary logs a running-xacts
record (``pg_log_standby_snapshot()``), and live changes committed on the primary are served
exactly. A backfill cannot read from a standby yet, and says why at once (422, every table of
an initial snapshot ``failed`` with that reason, the feed kept): a standby's
``pg_current_snapshot()`` lists no in-progress transactions, which a chunk is judged by (shown
here on the cluster itself), so a chunk would be judged wrongly. docs/design.md, issue 28.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from pgfeed.localpg import LocalCluster, find_bindir
from tests.fixtures.fix_pg import create_database
from tests.fixtures.fix_service import run_service, wait_until
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
def test_a_feed_on_a_standby_captures_exactly_and_a_backfill_there_says_why_it_cannot(
        tmp_path: Path) -> None:
    with primary_and_standby() as (primary, standby, source):
        dbname = psycopg.conninfo.conninfo_to_dict(source)["dbname"]
        on_standby = standby.dsn(dbname)
        # what stands in the way of backfills: an open transaction on the primary is in progress
        # in the primary's snapshot, and in none the standby reports
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
            assert xid in primary_xip and xmin <= xid < xmax and standby_xip == [], \
                (xid, primary_xip, xmin, xmax, standby_xip)
            open_txn.rollback()
        with running_xacts_logged(primary, dbname), run_service(tmp_path / "svc") as svc, \
                httpx.Client(base_url=svc.http_url, timeout=120) as client:
            created = client.post("/v1/feeds", json={
                "name": "sb", "dsn": on_standby, "publication": "pub",
                "options": {"heartbeat_seconds": 1, "snapshot": "backfill"}})
            assert created.status_code == 201, created.text
            with psycopg.connect(source, autocommit=True) as conn:
                for i in range(1, 51):
                    conn.execute("UPDATE t SET v = %s WHERE id = %s", (f"live{i}", i))
                conn.execute("DELETE FROM t WHERE id = 2000")

            def served() -> list[tuple[str, int, str | None]]:
                page = client.get("/v1/feeds/sb/changes",
                                  params={"after": "earliest", "limit": 1000}).json()
                return [(c["op"], (c.get("after") or c["key"])["id"], (c.get("after") or {}).get("v"))
                        for c in page["changes"] if c["op"] in ("insert", "update", "delete")]
            changes = wait_until(lambda: (got := served()) and len(got) >= 51 and got, 60,
                                 "the primary's commits served from the standby")
            assert changes == [("update", i, f"live{i}") for i in range(1, 51)] + \
                [("delete", 2000, None)], changes

            # the initial snapshot: failed for its table with the reason, the feed kept
            status = client.get("/v1/feeds/sb").json()
            assert status["state"] == "running" and status["last_error"] is None, status
            (initial,) = client.get("/v1/feeds/sb/backfills").json()["backfills"]
            assert initial["initial"] and initial["state"] == "failed", initial
            assert "standby" in initial["tables"][0]["error"] and initial["rows"] == 0, initial
            # asked for: refused at once, nothing started
            refused = client.post("/v1/feeds/sb/backfills", json={"tables": ["public.t"]})
            assert refused.status_code == 422, refused.text
            error = refused.json()["error"]
            assert error["code"] == "source_is_standby"
            assert "pg_current_snapshot()" in error["message"], error
            assert len(client.get("/v1/feeds/sb/backfills").json()["backfills"]) == 1
            retried = client.post(f"/v1/feeds/sb/backfills/{initial['id']}/tables/public.t/retry")
            assert retried.status_code == 422 and retried.json()["error"]["code"] == "source_is_standby"
            assert client.delete("/v1/feeds/sb").status_code in (200, 204)
