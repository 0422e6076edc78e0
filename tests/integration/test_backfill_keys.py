"""Backfills of tables keyed by something other than one integer (uuid; text and int together):
``parallel`` splits them at sampled key quantiles, and the feed, applied from the start while
writers change the table, still equals the table at its head."""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

from pgfeed_client import FeedClient
from tests.fixtures.fix_service import FeedFactory, Service
from tests.integration.test_backfill import backfill_beside, wait_done, wait_marker

pytestmark = [pytest.mark.pg]

ROWS = 24_000
Key = tuple[str, ...]


def _uuid_table(conn: psycopg.Connection) -> None:
    conn.execute("CREATE TABLE ukeyed (id uuid PRIMARY KEY, v text NOT NULL)")
    rng = random.Random(7)
    with conn.cursor().copy("COPY ukeyed (id, v) FROM STDIN") as copy:
        for i in range(ROWS):
            copy.write_row((uuid.UUID(int=rng.getrandbits(128)), f"v{i}"))


def _composite_table(conn: psycopg.Connection) -> None:
    # text first: its collation orders the key, so the cuts must come from the server's order
    conn.execute("CREATE TABLE ckeyed (region text, n int, v text NOT NULL, PRIMARY KEY (region, n))")
    conn.execute("INSERT INTO ckeyed SELECT (ARRAY['Nord', 'ost', 'Süd', 'west', 'Zentrum'])"
                 "[1 + g %% 5], g, 'v' || g FROM generate_series(1, %s) g", (ROWS,))


TABLES = {
    "ukeyed": (_uuid_table, "SELECT id::text, v FROM ukeyed", ("id",)),
    "ckeyed": (_composite_table, "SELECT region, n::text, v FROM ckeyed", ("region", "n")),
}


def _writer(dsn: str, table: str, stop: threading.Event, seed: int) -> threading.Thread:
    """Random updates, deletes, inserts and key changes of existing rows until stopped."""

    def run() -> None:
        rng = random.Random(seed)
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                action = rng.random()
                if table == "ukeyed":
                    if action < 0.4:
                        conn.execute("UPDATE ukeyed SET v = v || '+' WHERE id = (SELECT id FROM "
                                     "ukeyed TABLESAMPLE SYSTEM (1) LIMIT 1)")
                    elif action < 0.6:
                        conn.execute("UPDATE ukeyed SET id = gen_random_uuid() WHERE id = (SELECT "
                                     "id FROM ukeyed TABLESAMPLE SYSTEM (1) LIMIT 1)")
                    elif action < 0.8:
                        conn.execute("DELETE FROM ukeyed WHERE id = (SELECT id FROM ukeyed "
                                     "TABLESAMPLE SYSTEM (1) LIMIT 1)")
                    else:
                        conn.execute("INSERT INTO ukeyed VALUES (gen_random_uuid(), 'new')")
                else:
                    n = rng.randint(1, ROWS)
                    if action < 0.4:
                        conn.execute("UPDATE ckeyed SET v = v || '+' WHERE n = %s", (n,))
                    elif action < 0.6:
                        conn.execute("UPDATE ckeyed SET region = 'moved', n = n + %s WHERE n = %s",
                                     (ROWS * (1 + rng.randint(0, 1000)), n))
                    elif action < 0.8:
                        conn.execute("DELETE FROM ckeyed WHERE n = %s", (n,))
                    else:
                        conn.execute("INSERT INTO ckeyed VALUES ('Ärger', %s, 'new') "
                                     "ON CONFLICT DO NOTHING", (rng.randint(1, 10**9),))
                time.sleep(rng.uniform(0, 0.002))

    thread = threading.Thread(target=run, name=f"writer-{table}", daemon=True)
    thread.start()
    return thread


def _apply(changes: list[Any], table: str, key: tuple[str, ...]) -> tuple[dict[Key, tuple[str, ...]], int]:
    """The table a reader builds from the feed (read = upsert): key -> the other columns."""
    built: dict[Key, tuple[str, ...]] = {}
    reads = 0
    for c in changes:
        if c.table != table:
            continue
        if c.op in ("delete", "update") and c.key:
            built.pop(tuple(str(c.key[k]) for k in key), None)
        if c.op == "delete":
            continue
        reads += c.op == "read"
        a = c.after
        built[tuple(str(a[k]) for k in key)] = (a["v"],)
    return built, reads


@pytest.mark.parametrize("table", sorted(TABLES))
def test_non_integer_keys_split_for_parallel_reads_and_stay_exact(
        pg_dsn: str, pgfeed_service: Service, make_served_feed: FeedFactory, table: str) -> None:
    create, select, key = TABLES[table]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        create(conn)
        conn.execute(f"ANALYZE {table}")
    feed = make_served_feed(pg_dsn, tables=(f"public.{table}",))
    stop = threading.Event()
    done = backfill_beside(pgfeed_service, feed, table, _writer(pg_dsn, table, stop, seed=len(table)),
                           stop)
    assert done["state"] == "done", done
    (progress,) = done["tables"]
    assert progress["parts"] == 2  # split at a sampled key, not read as one range
    wait_marker(pgfeed_service, feed, pg_dsn)
    with psycopg.connect(pg_dsn) as conn:
        expected = {tuple(r[:len(key)]): tuple(r[len(key):]) for r in conn.execute(select)}
    with FeedClient(pgfeed_service.http_url) as client:
        changes = list(client.iter_changes(feed, "earliest", limit=5000))
    built, reads = _apply(changes, table, key)
    assert reads == done["rows"] > 0
    assert built == expected
    read_keys = [tuple(str(c.after[k]) for k in key) for c in changes if c.op == "read"]
    assert len(set(read_keys)) == len(read_keys)  # no row read twice, across both parts


def test_a_read_row_carries_what_pgoutput_sends_for_the_same_row(
        pg_dsn: str, pgfeed_service: Service, make_served_feed: FeedFactory) -> None:
    """Each value as its type's output function writes it, as pgoutput sends it: a ``::text``
    cast differs for some types (``true::text`` is ``true``, pgoutput sends ``t``; inet and
    char(n) differ too), and COPY's escapes are undone."""
    values = ("true, 'ab'::char(4), '10.0.0.1'::inet, E'tab\\there\\\\back\\nline', 1.50, "
              "ARRAY[1, NULL, 3], '{\"k\": [1, 2.50]}'::jsonb, '2026-01-01 12:00+02'::timestamptz, "
              "NULL, 'e9f1c0de-0000-4000-8000-000000000001'::uuid")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE typed (id int PRIMARY KEY, b bool, c char(4), i inet, t text, "
                     "n numeric, a int[], j jsonb, ts timestamptz, z text, u uuid)")
        conn.execute(f"INSERT INTO typed VALUES (1, {values})")
    feed = make_served_feed(pg_dsn, tables=("public.typed",))
    with FeedClient(pgfeed_service.http_url) as client:
        started = client.start_backfill(feed, ["public.typed"])
        assert wait_done(client, feed, started["id"])["rows"] == 1
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"INSERT INTO typed VALUES (2, {values})")
    wait_marker(pgfeed_service, feed, pg_dsn)
    with FeedClient(pgfeed_service.http_url) as client:
        changes = [c for c in client.iter_changes(feed, "earliest") if c.table == "typed"]
    (read,) = [c for c in changes if c.op == "read"]
    (insert,) = [c for c in changes if c.op == "insert"]
    assert read.after.pop("id") == 1 and insert.after.pop("id") == 2
    assert read.after == insert.after
    assert read.after["b"] is True and read.after["c"] == "ab  " and read.after["i"] == "10.0.0.1"
    assert read.after["t"] == "tab\there\\back\nline" and read.after["z"] is None


def test_copy_out_in_c_reads_what_psycopg_reads_and_raises_its_errors(pg_dsn: str) -> None:
    """``source.copy_out`` with libpq's calls in C (the GIL released) and in psycopg's Python loop:
    the same bytes, escapes and NULLs included, past the C loop's first buffer (1 MiB); an error
    in the middle of a COPY is psycopg's error, and the connection stays usable."""
    from psycopg import sql

    from pgfeed.backfill import source
    from pgfeed.replication import libpq

    assert libpq.functions() is not None  # the C loop is what the service runs here
    query = sql.SQL("COPY (SELECT g, repeat(E'a\\tb\\\\c\\n', g % 50), CASE WHEN g % 7 = 0 THEN NULL "
                    "ELSE g END FROM generate_series(1, 40000) g ORDER BY 1) TO STDOUT")
    with source.connect(pg_dsn) as conn:
        native, python = (source.copy_out(conn, query, native=n) for n in (True, False))
        assert native == python and native.count(b"\n") == 40_000 and len(native) > 2 << 20
        assert native.startswith(b"1\ta\\tb\\\\c\\n\t1\n")
        failing = sql.SQL("COPY (SELECT 1 / (20000 - g) FROM generate_series(1, 30000) g) TO STDOUT")
        for n in (True, False):
            with pytest.raises(psycopg.errors.DivisionByZero):
                source.copy_out(conn, failing, native=n)
            assert conn.execute("SELECT 1").fetchone() == (1,)
