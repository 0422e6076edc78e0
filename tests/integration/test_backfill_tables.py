"""Per-table isolation of backfills (issue 28.3), through the served API on real PostgreSQL: a
table that fails mid-way is ``failed`` with its reason while the other table completes; one
table is cancelled alone and retried alone (over the CLI); a retried table goes on from its
last stored key (no row read twice); an initial snapshot of an all-tables feed with a table it
cannot read by key creates the feed, reads the others and says which table and why.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgfeed_client import FeedClient
from pgfeed_client.errors import ClientError
from tests.checkout import PYTHONPATH
from tests.fixtures.fix_service import FeedFactory, Service, current_lsn, wait_until

pytestmark = [pytest.mark.pg]

ROOT = Path(__file__).resolve().parents[2]


def make_tables(dsn: str, rows: dict[str, int]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table, n in rows.items():
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text)")
            conn.execute(f"INSERT INTO {table} SELECT g, 'v' || g FROM generate_series(1, %s) g", (n,))


def source_table(dsn: str, table: str) -> dict[int, str]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute(f"SELECT id, v FROM {table}").fetchall())  # type: ignore[arg-type]


def applied(client: FeedClient, feed: str, dsn: str, table: str) -> tuple[dict[int, str], int]:
    """The table a reader builds from the whole feed (``read`` an upsert), once the feed has
    confirmed the source's position now; also how many ``read`` rows of it the feed holds."""
    target = current_lsn(dsn)  # the default feed has messages off: no marker, its position

    def confirmed() -> bool:
        high, low = client.get_feed(feed)["confirmed_lsn"].split("/")
        return (int(high, 16) << 32 | int(low, 16)) >= target
    wait_until(confirmed, 60, "the feed to catch up")
    rows: dict[int, str] = {}
    reads = 0
    for c in client.iter_changes(feed, "earliest", limit=5000):
        if c.op == "message" or c.table != table:
            continue
        if c.op == "delete":
            rows.pop(c.key["id"], None)
            continue
        reads += c.op == "read"
        rows[c.after["id"]] = c.after["v"]
    return rows, reads


def table_of(backfill: dict[str, Any], table: str) -> dict[str, Any]:
    return next(t for t in backfill["tables"] if t["table"] == table)


def ended(client: FeedClient, feed: str, backfill_id: str, timeout: float = 120) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        b = client.backfill(feed, backfill_id)
        return b if b["state"] != "running" else None
    return wait_until(check, timeout, f"backfill {backfill_id} to end")


def test_a_table_that_fails_mid_way_fails_alone_and_a_retry_finishes_it_without_duplicates(
        pg_dsn: str, pgfeed_service: Service, make_served_feed: FeedFactory) -> None:
    make_tables(pg_dsn, {"fa": 30_000, "fb": 30_000, "fc": 3_000})
    feed = make_served_feed(pg_dsn, tables=("public.fa", "public.fb", "public.fc"))
    with FeedClient(pgfeed_service.http_url) as client:
        started = client.start_backfill(feed, ["public.fa", "public.fb", "public.fc"],
                                        chunk_rows=150, parallel=2)
        bid = started["id"]
        assert {t["state"] for t in started["tables"]} == {"running"}
        wait_until(lambda: table_of(client.backfill(feed, bid), "public.fa")["rows"] > 0, 60,
                   "fa's first chunks")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # mid-way: fa loses its key
            conn.execute("ALTER TABLE fa DROP CONSTRAINT fa_pkey")
            conn.execute("DROP TABLE fc")  # read after fa and fb: gone by then
        failed = wait_until(lambda: (b := client.backfill(feed, bid)) and
                            table_of(b, "public.fa")["state"] == "failed" and b, 60, "fa to fail")
        fa = table_of(failed, "public.fa")
        assert "no primary key" in fa["error"] and 0 < fa["rows"] < 30_000, fa
        assert failed["state"] == "running" or table_of(failed, "public.fb")["state"] == "done"
        # fb goes on to the end; then the backfill is failed, saying which table and why
        done = ended(client, feed, bid)
        fb = table_of(done, "public.fb")
        assert done["state"] == "failed" and fb["state"] == "done" and fb["done"], done
        assert fb["rows"] == 30_000 and not fb["error"]
        assert "public.fa" in done["last_error"] and "no primary key" in done["last_error"]
        fc = table_of(done, "public.fc")
        assert fc["state"] == "failed" and "does not exist" in fc["error"], fc
        assert done["last_error"].startswith("2 of 3 tables failed")
        assert applied(client, feed, pg_dsn, "fb") == (source_table(pg_dsn, "fb"), 30_000)

        # still no key: the retry is refused with why, and nothing changes
        with pytest.raises(ClientError) as err:
            client.retry_backfill_table(feed, bid, "public.fa")
        assert err.value.status == 400 and "no primary key" in str(err.value)
        assert client.backfill(feed, bid)["state"] == "failed"
        for path, status in ((f"{bid}/tables/public.fb/retry", 409),  # done
                             (f"{bid}/tables/public.nope/retry", 404),
                             ("bf_nope/tables/public.fa/retry", 404)):
            response = client._http.post(f"/v1/feeds/{feed}/backfills/{path}")
            assert response.status_code == status, response.text
            assert response.json()["error"]["code"]

        # fixed: the retry goes on from fa's last stored key, and the feed then holds fa once
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE fa ADD PRIMARY KEY (id)")
            conn.execute("UPDATE fa SET v = 'changed' WHERE id % 1000 = 0")
        retried = client.retry_backfill_table(feed, bid, "public.fa")
        assert retried["state"] == "running" and table_of(retried, "public.fa")["state"] == "running"
        assert table_of(retried, "public.fb")["state"] == "done"
        assert table_of(retried, "public.fc")["state"] == "failed"
        done = ended(client, feed, bid)
        assert [t["state"] for t in done["tables"]] == ["done", "done", "failed"], done
        assert done["state"] == "failed" and "public.fa" not in done["last_error"]  # fc still
        assert table_of(done, "public.fa")["rows"] == 30_000
        assert applied(client, feed, pg_dsn, "fa") == (source_table(pg_dsn, "fa"), 30_000)


def test_one_table_cancelled_alone_while_the_other_completes_then_retried_over_the_cli(
        pg_dsn: str, pgfeed_service: Service, make_served_feed: FeedFactory) -> None:
    make_tables(pg_dsn, {"ca": 30_000, "cb": 6_000})
    feed = make_served_feed(pg_dsn, tables=("public.ca", "public.cb"))
    with FeedClient(pgfeed_service.http_url) as client:
        bid = client.start_backfill(feed, ["public.ca", "public.cb"], chunk_rows=150, parallel=2)["id"]
        wait_until(lambda: table_of(client.backfill(feed, bid), "public.ca")["rows"] > 0, 60,
                   "ca's first chunks")
        cancelled = client.cancel_backfill_table(feed, bid, "public.ca")
        ca = table_of(cancelled, "public.ca")
        assert ca["state"] == "cancelled" and ca["rows"] < 30_000, cancelled
        done = ended(client, feed, bid)
        assert done["state"] == "cancelled", done  # nothing failed, one table was cancelled
        assert table_of(done, "public.cb")["state"] == "done"
        assert table_of(done, "public.cb")["rows"] == 6_000
        assert table_of(done, "public.ca")["rows"] == ca["rows"]  # nothing read after the cancel
        assert applied(client, feed, pg_dsn, "cb") == (source_table(pg_dsn, "cb"), 6_000)
        # cancelling it again, or a finished table, leaves things as they are; unknown: 404
        assert client.cancel_backfill_table(feed, bid, "public.ca")["state"] == "cancelled"
        response = client._http.delete(f"/v1/feeds/{feed}/backfills/{bid}/tables/public.zz")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "table_not_in_backfill"

    run = subprocess.run(
        [sys.executable, "-m", "pgfeed", "backfill", feed, "--retry-table", bid, "public.ca",
         "--follow", "--url", pgfeed_service.http_url],
        capture_output=True, text=True, timeout=120, check=False,
        env={"PYTHONPATH": PYTHONPATH, "PATH": "/usr/bin"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert "public.ca retried" in run.stderr
    assert f"{bid} done public.ca: rows 30000 " in run.stdout, run.stdout
    with FeedClient(pgfeed_service.http_url) as client:
        assert applied(client, feed, pg_dsn, "ca") == (source_table(pg_dsn, "ca"), 30_000)


def test_initial_snapshot_creates_the_feed_and_reports_a_table_it_cannot_backfill(
        pg_dsn: str, pgfeed_service: Service) -> None:
    make_tables(pg_dsn, {"keyed": 5_000})
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE nokey (id int NOT NULL, v text)")
        conn.execute("ALTER TABLE nokey REPLICA IDENTITY FULL")  # streams; no key to read it by
        conn.execute("INSERT INTO nokey SELECT g, 'n' || g FROM generate_series(1, 700) g")
    name = "snap_isolated"
    with FeedClient(pgfeed_service.http_url) as client:
        created = client.create_feed(name, pg_dsn, all_tables=True, options={
            "snapshot": "backfill", "keyless": "identity_full", "heartbeat_seconds": 1})
        try:
            (initial,) = created["backfills"]
            assert initial["initial"] and initial["state"] == "running"
            nokey = table_of(initial, "public.nokey")
            assert nokey["state"] == "failed" and "no primary key" in nokey["error"], initial
            assert table_of(initial, "public.keyed")["state"] in ("running", "done")
            done = ended(client, name, initial["id"])
            assert done["state"] == "failed" and "public.nokey" in done["last_error"], done
            assert table_of(done, "public.keyed")["rows"] == 5_000
            status = client.get_feed(name)
            assert status["state"] == "running"
            (reported,) = status["backfills"]  # the status keeps saying which table and why
            assert reported["id"] == initial["id"]
            assert table_of(reported, "public.nokey")["state"] == "failed"
            assert applied(client, name, pg_dsn, "keyed") == (source_table(pg_dsn, "keyed"), 5_000)

            # given a key, the table is planned and read by a retry
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("ALTER TABLE nokey ADD PRIMARY KEY (id)")
            client.retry_backfill_table(name, initial["id"], "public.nokey")
            done = ended(client, name, initial["id"])
            assert done["state"] == "done" and table_of(done, "public.nokey")["rows"] == 700
            assert client.get_feed(name)["backfills"] == []
            assert applied(client, name, pg_dsn, "nokey") == (source_table(pg_dsn, "nokey"), 700)
        finally:
            client.delete_feed(name)
