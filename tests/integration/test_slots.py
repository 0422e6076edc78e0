"""Slot and publication administration against real PostgreSQL 15 and 18, with hostile names."""

from __future__ import annotations

import time

import psycopg
import pytest
from psycopg import sql

from pgfeed.errors import SourceError
from pgfeed.replication import slots
from pgfeed.replication.commands import max_proto_version
from pgfeed.replication.stream import ReplicationStream, create_slot

pytestmark = pytest.mark.pg

SCHEMA = 'My "Schema".x'  # a dot, quotes and a space: split at the first dot -> 'My "Schema"', 'x'
HOSTILE_PUB = 'pub "1", ; DROP TABLE t; --'
TABLE_A = 'Tab"le A'
TABLE_B = "b'\\c"


@pytest.fixture
def conn(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


def make_tables(conn: psycopg.Connection) -> tuple[str, str]:
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier('My "Schema"')))
    for name in (TABLE_A, TABLE_B):
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY)").format(
            sql.Identifier('My "Schema"', name)))
    return f'My "Schema".{TABLE_A}', f'My "Schema".{TABLE_B}'


def published(conn: psycopg.Connection, name: str) -> list[tuple[str, str]]:
    return [tuple(r) for r in conn.execute(
        "SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = %s "
        "ORDER BY 1, 2", (name,)).fetchall()]


def via_root(conn: psycopg.Connection, name: str) -> bool:
    return conn.execute("SELECT pubviaroot FROM pg_publication WHERE pubname = %s", (name,)).fetchone()[0]


def test_split_table_name() -> None:
    assert slots.split_table_name("public.orders") == ("public", "orders")
    assert slots.split_table_name("orders") == ("public", "orders")
    assert slots.split_table_name('My "S".t.x') == ('My "S"', "t.x")
    for bad in (".t", "s.", ""):
        with pytest.raises(ValueError):
            slots.split_table_name(bad)


def test_publication_created_synced_and_dropped_with_hostile_names(conn):
    a, b = make_tables(conn)
    assert not slots.publication_exists(conn, HOSTILE_PUB)
    assert slots.ensure_publication(conn, HOSTILE_PUB, tables=[a], all_tables=False) is True
    assert slots.publication_exists(conn, HOSTILE_PUB)
    assert published(conn, HOSTILE_PUB) == [('My "Schema"', TABLE_A)]
    assert via_root(conn, HOSTILE_PUB) is True
    # Present: the table list and the option follow what is asked.
    assert slots.ensure_publication(conn, HOSTILE_PUB, tables=[b, a, b], all_tables=False,
                                    partition_root=False) is False
    assert published(conn, HOSTILE_PUB) == [('My "Schema"', TABLE_A), ('My "Schema"', TABLE_B)]
    assert via_root(conn, HOSTILE_PUB) is False
    slots.set_publication_tables(conn, HOSTILE_PUB, [b])
    assert published(conn, HOSTILE_PUB) == [('My "Schema"', TABLE_B)]
    # No table list given: an existing publication keeps its tables.
    slots.ensure_publication(conn, HOSTILE_PUB, tables=[], all_tables=False)
    assert published(conn, HOSTILE_PUB) == [('My "Schema"', TABLE_B)]
    assert conn.execute("SELECT count(*) FROM pg_tables WHERE tablename = 't'").fetchone()[0] == 0
    slots.drop_publication(conn, HOSTILE_PUB)
    assert not slots.publication_exists(conn, HOSTILE_PUB)
    slots.drop_publication(conn, HOSTILE_PUB)  # idempotent


def test_unknown_table_is_a_clear_error_and_creates_nothing(conn):
    a, _ = make_tables(conn)
    with pytest.raises(SourceError, match=r"unknown tables on the source: public\.nope, x\.y"):
        slots.ensure_publication(conn, "p", tables=[a, "public.nope", "x.y"], all_tables=False)
    assert not slots.publication_exists(conn, "p")
    conn.execute("CREATE VIEW v AS SELECT 1 AS one")
    with pytest.raises(SourceError, match="not a table"):
        slots.ensure_publication(conn, "p", tables=["public.v"], all_tables=False)
    slots.ensure_publication(conn, "p", tables=[a], all_tables=False)
    with pytest.raises(SourceError, match="unknown table on the source: public.gone"):
        slots.set_publication_tables(conn, "p", ["public.gone"])
    assert published(conn, "p") == [('My "Schema"', TABLE_A)]  # unchanged
    with pytest.raises(SourceError, match="does not exist"):
        slots.set_publication_tables(conn, "absent", [a])


def test_all_tables_publication(conn):
    conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    slots.ensure_publication(conn, "everything", tables=[], all_tables=True)
    assert conn.execute("SELECT puballtables FROM pg_publication WHERE pubname = 'everything'").fetchone()[0]
    assert ("public", "t") in published(conn, "everything")
    with pytest.raises(SourceError, match="FOR ALL TABLES"):
        slots.ensure_publication(conn, "everything", tables=["public.t"], all_tables=False)
    with pytest.raises(ValueError, match="either"):
        slots.ensure_publication(conn, "x", tables=["public.t"], all_tables=True)


def test_partitioned_table_published_via_root(conn):
    conn.execute("CREATE TABLE parent (id int PRIMARY KEY) PARTITION BY RANGE (id)")
    conn.execute("CREATE TABLE leaf PARTITION OF parent FOR VALUES FROM (0) TO (100)")
    slots.ensure_publication(conn, "parts", tables=["public.parent"], all_tables=False)
    assert published(conn, "parts") == [("public", "parent")]


def test_works_on_a_connection_without_autocommit(pg_dsn):
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.commit()
        slots.ensure_publication(conn, "p", tables=["public.t"], all_tables=False)
        assert slots.emit_heartbeat(conn, "pgfeed.heartbeat") > 0
    with psycopg.connect(pg_dsn) as other:
        assert slots.publication_exists(other, "p")


def test_slot_info_keys_and_values(pg_dsn, conn):
    assert slots.slot_info(conn, "s") is None
    assert not slots.slot_exists(conn, "s")
    lsn, _ = create_slot(pg_dsn, "s")
    assert slots.slot_exists(conn, "s")
    conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    conn.execute("CREATE PUBLICATION p FOR TABLE t")
    conn.execute("INSERT INTO t SELECT generate_series(1, 1000)")
    info = slots.slot_info(conn, "s")
    assert info is not None
    assert {"server_lsn", "wal_status", "safe_wal_size", "retained_bytes", "restart_lsn",
            "confirmed_flush_lsn", "active"} <= set(info)
    assert info["confirmed_flush_lsn"] == lsn and info["restart_lsn"] <= lsn
    assert info["server_lsn"] > lsn
    assert info["retained_bytes"] == info["server_lsn"] - info["restart_lsn"] > 0
    assert info["wal_status"] == "reserved"
    assert info["safe_wal_size"] is None  # max_slot_wal_keep_size is -1 (unlimited) here
    assert info["active"] is False and info["active_pid"] is None
    with ReplicationStream(pg_dsn) as stream:
        stream.start("s", 0, proto_version=max_proto_version(stream.server_version), publications=["p"])
        deadline = time.monotonic() + 10
        while not slots.slot_info(conn, "s")["active"]:  # type: ignore[index]
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_drop_slot_terminates_its_walsender(pg_dsn, conn):
    conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    slots.ensure_publication(conn, "p", tables=["public.t"], all_tables=False)
    create_slot(pg_dsn, "busy")
    stream = ReplicationStream(pg_dsn)
    try:
        stream.start("busy", 0, proto_version=max_proto_version(stream.server_version), publications=["p"])
        deadline = time.monotonic() + 10
        while not slots.slot_info(conn, "busy")["active"]:  # type: ignore[index]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert slots.drop_slot(conn, "busy") is True
        assert not slots.slot_exists(conn, "busy")
        assert slots.drop_slot(conn, "busy") is False  # idempotent
        with pytest.raises(SourceError):
            for _ in range(100):
                stream.read_batch(10, timeout=0.1)
    finally:
        stream.close()


def test_emit_heartbeat_is_non_transactional(pg_dsn, conn):
    conn.execute("CREATE PUBLICATION nothing")
    lsn, _ = create_slot(pg_dsn, "hb")
    with conn.transaction():
        at = slots.emit_heartbeat(conn, "pgfeed.heartbeat")
        raise psycopg.Rollback()
    assert at > lsn
    conn.execute("CREATE TABLE flush_wal ()")  # a commit flushes WAL; the message alone does not
    rows = conn.execute(
        "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('hb', NULL, NULL, "
        "'proto_version', '1', 'publication_names', 'nothing', 'messages', 'true')").fetchone()
    assert rows[0] >= 1  # survived the rollback
