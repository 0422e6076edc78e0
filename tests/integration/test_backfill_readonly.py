"""Backfills that write nothing to the source (issue 28.1), on the default feed (28.2: messages
off, so big transactions stream).

A role with only SELECT on the table and REPLICATION creates the feed (adopting a publication an
admin made) and backfills it while an admin updates and deletes rows and commits a big transaction
with rolled-back savepoints; the feed, applied in order over HTTP, equals the table, and the big
transaction is served as test_decoding shows it. Again with ``messages`` on explicitly: its
messages are served as test_decoding shows them (the one rolled back with its savepoint never).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgfeed_client import FeedClient
from tests.fixtures.fix_service import Service, wait_until
from tests.fixtures.fix_testdecoding import group_units, peek_test_decoding
from tests.integration.test_backfill import wait_caught_up, wait_done
from tests.integration.test_rolled_back_messages import PREFIX, ROWS, _savepoint_dance, _slot_stats

pytestmark = pytest.mark.pg


def read_only_role(dsn: str, tables: tuple[str, ...]) -> str:
    """A login role with REPLICATION and SELECT on ``tables``, nothing else; its DSN."""
    role = f"bf_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN REPLICATION").format(sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(sql.Identifier(role)))
        for table in tables:
            conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(
                sql.Identifier(table), sql.Identifier(role)))
        writable = conn.execute(
            "SELECT count(*) FROM information_schema.role_table_grants WHERE grantee = %s "
            "AND privilege_type <> 'SELECT'", (role,)).fetchone()
        assert writable == (0,)
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["user"] = role
    params.pop("password", None)
    return psycopg.conninfo.make_conninfo(**params)  # type: ignore[arg-type]


def churn(dsn: str, stop: threading.Event, rows: int) -> threading.Thread:
    """Updates and deletes of random rows (and inserts past the end) until ``stop``."""
    def run() -> None:
        import random
        rng = random.Random(5)
        next_id = rows + 1
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                pick = rng.randint(1, rows)
                kind = rng.random()
                if kind < 0.5:
                    conn.execute("UPDATE ro SET v = %s WHERE id = %s", (f"u{rng.random()}", pick))
                elif kind < 0.8:
                    conn.execute("DELETE FROM ro WHERE id = %s", (pick,))
                else:
                    conn.execute("INSERT INTO ro VALUES (%s, 'new')", (next_id,))
                    next_id += 1
                time.sleep(0.001)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def applied(changes: list[Any], table: str) -> tuple[dict[int, str], int]:
    rows: dict[int, str] = {}
    reads = 0
    for c in changes:
        if c.table != table:
            continue
        if c.op == "delete":
            rows.pop(c.key["id"], None)
        elif c.op in ("insert", "update", "read"):
            reads += c.op == "read"
            rows[c.after["id"]] = c.after["v"]
    return rows, reads


@pytest.mark.parametrize("messages", [False, True], ids=["default", "messages"])
def test_a_role_that_cannot_write_backfills_the_default_feed_exactly(
        pg_dsn: str, pgfeed_service: Service, messages: bool) -> None:
    """Also with ``messages`` on explicitly: the big transaction then arrives whole (spilled on
    the source, not streamed) and its messages are served as test_decoding shows them, the one
    rolled back with its savepoint never."""
    rows = 20_000
    dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE ro (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO ro SELECT g, 'v' || g FROM generate_series(1, %s) g", (rows,))
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, pad text)")
        conn.execute("ANALYZE ro")
        conn.execute("CREATE PUBLICATION ro_pub FOR TABLE ro, t")
        # small enough that the big transaction streams (the walsender reads it at connect)
        conn.execute(sql.SQL("ALTER DATABASE {} SET logical_decoding_work_mem = '64kB'").format(
            sql.Identifier(dbname)))
        conn.execute("SELECT pg_create_logical_replication_slot('ro_td', 'test_decoding')")
    dsn = read_only_role(pg_dsn, ("ro",))
    name = f"ro{uuid.uuid4().hex[:6]}"
    stop = threading.Event()
    with FeedClient(pgfeed_service.http_url) as client:
        options: dict[str, Any] = {"heartbeat_seconds": 1}
        if messages:
            options["messages"] = True
        created = client.create_feed(name, dsn, publication="ro_pub", options=options)
        try:
            assert created["options"]["messages"] is messages  # off by default
            wait_until(lambda: client.get_feed(name)["state"] == "running", 30, "the feed running")
            thread = churn(pg_dsn, stop, rows)
            try:
                started = client.start_backfill(name, ["public.ro"], chunk_rows=500, parallel=2)
                time.sleep(0.3)
                with psycopg.connect(pg_dsn, autocommit=True) as conn:
                    _savepoint_dance(conn, prepare=None)
                done = wait_done(client, name, started["id"])
            finally:
                stop.set()
                thread.join()
            assert done["state"] == "done", done
            wait_caught_up(pgfeed_service, name, pg_dsn)
            changes = list(client.iter_changes(name, "earliest", limit=5000))
            with psycopg.connect(pg_dsn) as conn:
                expected = dict(conn.execute("SELECT id, v FROM ro").fetchall())
            built, reads = applied(changes, "ro")
            assert reads == done["rows"] > 0
            assert built == expected

            # the big transaction streamed, rolled-back savepoints' rows left out: as test_decoding
            served = [c.after["id"] for c in changes if c.table == "t" and c.op == "insert"]
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                units = group_units(peek_test_decoding(conn, "ro_td"))
            reference = [int(next(col.literal for col in c.new or [] if col.name == "id"))
                         for u in units for c in u.changes if c.op == "insert"
                         and c.table == "public.t"]
            assert served == reference == list(range(1, ROWS + 1)) + list(range(2 * ROWS + 1, 2 * ROWS + 11))
            served_messages = [c.content.decode() for c in changes
                               if c.op == "message" and c.prefix == PREFIX]
            reference_messages = [c.content.decode() for u in units for c in u.changes
                                  if c.op == "message" and c.prefix == PREFIX]
            assert reference_messages == ["kept: top level, before",
                                          "kept: in a released subtransaction",
                                          "kept: top level, after"]
            assert served_messages == (reference_messages if messages else [])
            status = client.get_feed(name)
            assert status["streaming_in_use"] is not messages and status["last_error"] is None
            stream_txns, spill_txns = _slot_stats(pg_dsn, f"pgfeed_{name}")
            if messages:  # whole at its commit: the source spilled it
                assert stream_txns == 0 and spill_txns >= 1
            else:  # streamed, not spilled at the source
                assert stream_txns >= 1
        finally:
            client.delete_feed(name)
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_drop_replication_slot('ro_td')")
