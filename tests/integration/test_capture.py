"""Capture end to end on real PostgreSQL 15 and 18: slot -> assembler -> durable log, read back decoded."""

from __future__ import annotations

import math
from decimal import Decimal

import psycopg
import pytest

from pgfeed.assembler.framing import walk
from pgfeed.types.json import JsonText
from tests.integration.capture_helpers import (
    data_changes,
    make_feed,
    read_all,
    wait_for_marker,
    wait_until,
)

pytestmark = pytest.mark.pg


def slot_confirmed(dsn: str, slot: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots WHERE slot_name = %s",
                           (slot,)).fetchone()
    return int(row[0])


@pytest.fixture
def feed_dir(tmp_path):
    return tmp_path / "data"


def test_values_survive_exactly(any_pg_dsn, feed_dir):
    with psycopg.connect(any_pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE v (id int PRIMARY KEY, f8 float8, f4 float4, n numeric, t text, b bytea, "
                     "ts timestamptz, arr int[], j jsonb)")
    sup = make_feed(feed_dir, any_pg_dsn, ("public.v",))
    try:
        with psycopg.connect(any_pg_dsn, autocommit=True) as conn:
            conn.execute("""INSERT INTO v VALUES
              (1, 'NaN', 'Infinity', 'NaN', 'a', '\\x00ff', 'infinity', '{1,NULL,3}', '{"k": [1, 2]}'),
              (2, '-Infinity', '-0', '123456789012345678901234567890.123456789012345678901', 'b', '', '-infinity', '{}', 'null'),
              (3, '-0', '1.5', '-Infinity', NULL, NULL, '2026-11-22 10:00:00.123456+00', NULL, NULL),
              (4, 1.0000000000000002, 3.4028235e38, 'Infinity', 'é', '\\x', '0044-03-15 12:00:00+00 BC', '{{1,2},{3,4}}', '"s"')""")
        txns = wait_for_marker(sup, "f", any_pg_dsn)
        rows = {c.after["id"]: c.after for _, c in data_changes(txns)}
    finally:
        sup.stop()
    assert math.isnan(rows[1]["f8"]) and rows[1]["f4"] == math.inf
    assert rows[2]["f8"] == -math.inf and math.copysign(1, rows[2]["f4"]) == -1
    assert math.copysign(1, rows[3]["f8"]) == -1 and rows[3]["f8"] == 0
    assert rows[4]["f8"] == 1.0000000000000002
    assert rows[1]["n"].is_nan() and rows[3]["n"] == Decimal("-Infinity") and rows[4]["n"] == Decimal("Infinity")
    assert rows[2]["n"] == Decimal("123456789012345678901234567890.123456789012345678901")
    assert rows[1]["b"] == b"\x00\xff" and rows[2]["b"] == b""
    assert rows[1]["arr"] == [1, None, 3] and rows[4]["arr"] == [[1, 2], [3, 4]] and rows[2]["arr"] == []
    assert rows[1]["j"] == JsonText('{"k": [1, 2]}') and rows[4]["j"] == JsonText('"s"')
    assert rows[2]["j"] == JsonText("null")  # the document null, not SQL NULL (issue 27.4)
    assert rows[1]["ts"] == "infinity" and rows[2]["ts"] == "-infinity"  # text form kept
    assert rows[3]["ts"].isoformat() == "2026-11-22T10:00:00.123456+00:00"
    assert rows[3]["t"] is None and rows[4]["t"] == "é"


def test_truncate_options_and_schema_changes(any_pg_dsn, feed_dir):
    with psycopg.connect(any_pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE parent (id serial PRIMARY KEY, a text)")
        conn.execute("CREATE TABLE child (id int PRIMARY KEY, parent_id int REFERENCES parent)")
    sup = make_feed(feed_dir, any_pg_dsn, ("public.parent", "public.child"))
    try:
        with psycopg.connect(any_pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO parent (a) VALUES ('x')")
            conn.execute("ALTER TABLE parent ADD COLUMN b int DEFAULT 7")
            conn.execute("INSERT INTO parent (a, b) VALUES ('y', 8)")
            conn.execute("ALTER TABLE parent DROP COLUMN a")
            conn.execute("INSERT INTO parent (b) VALUES (9)")
            conn.execute("INSERT INTO child VALUES (1, 1)")
            conn.execute("TRUNCATE parent, child RESTART IDENTITY CASCADE")
            conn.execute("TRUNCATE child")
        changes = [c for _, c in data_changes(wait_for_marker(sup, "f", any_pg_dsn))]
    finally:
        sup.stop()
    inserts = [c.after for c in changes if c.op == "insert" and c.table == "parent"]
    assert inserts == [{"id": 1, "a": "x"}, {"id": 2, "a": "y", "b": 8}, {"id": 3, "b": 9}]
    truncates = [c for c in changes if c.op == "truncate"]
    assert sorted(truncates[0].tables) == ["public.child", "public.parent"]
    assert truncates[0].options == {"cascade": True, "restart_identity": True}
    assert truncates[1].tables == ["public.child"]
    assert truncates[1].options == {"cascade": False, "restart_identity": False}


def test_aborted_streamed_transaction_leaves_no_trace(any_pg_cluster, any_pg_dsn, feed_dir):
    dbname = psycopg.conninfo.conninfo_to_dict(any_pg_dsn)["dbname"]
    with psycopg.connect(any_pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE s (id int PRIMARY KEY, pad text)")
        # The walsender reads this when it connects: small enough that these transactions stream.
        conn.execute(psycopg.sql.SQL("ALTER DATABASE {} SET logical_decoding_work_mem = '64kB'").format(
            psycopg.sql.Identifier(dbname)))
    # Without messages, so that the walsender streams (docs/design.md, "Logical messages turn
    # streaming off"); the end of the workload is then found by position, not by a marker.
    sup = make_feed(feed_dir, any_pg_dsn, ("public.s",), messages=False)
    try:
        with psycopg.connect(any_pg_dsn) as conn:
            conn.execute("INSERT INTO s SELECT g, repeat('x', 100) FROM generate_series(1, 5000) g")
            conn.rollback()
            conn.execute("INSERT INTO s SELECT g, 'kept' FROM generate_series(1, 3000) g")
            conn.execute("SAVEPOINT sp")
            conn.execute("INSERT INTO s SELECT g, 'dropped' FROM generate_series(3001, 6000) g")
            conn.execute("ROLLBACK TO SAVEPOINT sp")
            conn.execute("INSERT INTO s SELECT g, 'kept' FROM generate_series(6001, 7000) g")
            conn.commit()
            end = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]
        wait_until(lambda: sup.changelog("f").confirmed_lsn() >= end, 60, "the workload confirmed")
        txns = read_all(sup, "f")
        status = sup.status("f")
        with psycopg.connect(any_pg_dsn) as conn:
            streamed = conn.execute("SELECT stream_txns FROM pg_stat_replication_slots "
                                    "WHERE slot_name = 'pgfeed_f'").fetchone()[0]
    finally:
        sup.stop()
    rows = [c.after for _, c in data_changes(txns)]
    assert len(rows) == 4000
    assert {r["pad"] for r in rows} == {"kept"}
    assert [r["id"] for r in rows] == list(range(1, 3001)) + list(range(6001, 7001))
    assert status.proto_version >= 2 and status.last_error is None
    assert status.streaming_in_use and streamed >= 1


def test_prepared_transactions_served_at_commit_prepared(pg_dsn, feed_dir):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE p (id int PRIMARY KEY)")
    sup = make_feed(feed_dir, pg_dsn, ("public.p",), two_phase=True)
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for gid, ids in (("g1", (1, 2)), ("g2", (3,))):
                with conn.transaction():
                    conn.execute("INSERT INTO p SELECT unnest(%s::int[])", (list(ids),))
                    conn.execute(psycopg.sql.SQL("PREPARE TRANSACTION {}").format(psycopg.sql.Literal(gid)))
            conn.execute("INSERT INTO p VALUES (10)")
            conn.execute("COMMIT PREPARED 'g1'")
            conn.execute("ROLLBACK PREPARED 'g2'")
        txns = wait_for_marker(sup, "f", pg_dsn)
    finally:
        sup.stop()
    ids = [c.after["id"] for _, c in data_changes(txns)]
    assert ids == [10, 1, 2]  # commit order: the prepared one lands at its COMMIT PREPARED


def test_decode_error_fails_feed_without_moving_slot(pg_dsn, feed_dir, monkeypatch):
    from pgfeed.replication import stream as stream_module

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE d (id int PRIMARY KEY)")
    sup = make_feed(feed_dir, pg_dsn, ("public.d",))
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO d VALUES (1)")
        wait_for_marker(sup, "f", pg_dsn)
        sup.pause("f")
        # Stopping sends a final feedback: the slot is exactly at what the log made durable.
        before = slot_confirmed(pg_dsn, "pgfeed_f")
        assert before == sup.changelog("f").confirmed_lsn() > 0
        # A hostile byte stream: every Commit arrives with a corrupted tag.
        original = stream_module.ReplicationStream.receive

        def corrupt(self, *args, **kwargs):
            got = original(self, *args, **kwargs)
            data = bytearray(got.data)
            for _at, _lsn, start, _stop in walk(data):
                if data[start] == ord("C"):
                    data[start] = ord("Z")
            return stream_module.Received(bytes(data), got.runs, got.keepalives, got.last_lsn)

        monkeypatch.setattr(stream_module.ReplicationStream, "receive", corrupt)
        sup.resume("f")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO d VALUES (2)")
        status = wait_until(lambda: (s := sup.status("f")).state == "failed" and s, 30, "feed failed")
        assert "Z" in status.last_error or "tag" in status.last_error
        assert slot_confirmed(pg_dsn, "pgfeed_f") == before
        stored = [c.after["id"] for t in read_all(sup, "f") for c in t.changes if c.op == "insert"]
        assert stored == [1]
        monkeypatch.undo()
        sup.resume("f")  # the operator fixed the cause: nothing was lost
        txns = wait_for_marker(sup, "f", pg_dsn)
        assert [c.after["id"] for _, c in data_changes(txns)] == [1, 2]
    finally:
        sup.stop()


def test_source_restart_resumes_by_itself(pg_cluster, pg_dsn, feed_dir):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE r (id int PRIMARY KEY)")
    sup = make_feed(feed_dir, pg_dsn, ("public.r",))
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO r SELECT generate_series(1, 100)")
        wait_for_marker(sup, "f", pg_dsn)
        pg_cluster.restart("fast")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO r SELECT generate_series(101, 200)")
        txns = wait_for_marker(sup, "f", pg_dsn, timeout=90)
        status = sup.status("f")
    finally:
        sup.stop()
    ids = [c.after["id"] for _, c in data_changes(txns)]
    assert ids == list(range(1, 201))  # no gap, no duplicate across the restart
    assert status.state == "running"
