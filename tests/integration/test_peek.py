"""``pgfeed peek`` end to end: the real CLI in a subprocess against a real pgoutput slot."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from tests.fixtures.fix_service import FeedFactory

pytestmark = pytest.mark.pg

REPO = Path(__file__).resolve().parents[2]
SLOT, PUB = "peek_slot", "peek_pub"
BODY = "b" * 9000


def pgfeed(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgfeed", *args], check=False, capture_output=True, text=True,
                          cwd=REPO, timeout=60)


def peek(dsn: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return pgfeed("peek", "--dsn", dsn, "--slot", SLOT, "--publication", PUB, *extra)


def confirmed_flush(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                           "WHERE slot_name = %s", (SLOT,)).fetchone()
    assert row is not None
    return str(row[0])


@pytest.fixture
def source(pg_dsn: str) -> str:
    """A slot with a few transactions pending: insert, key-changing update, TOAST, FULL delete,
    truncate, messages, and an aborted transaction."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("""
            CREATE TABLE orders (id int PRIMARY KEY, status text, total numeric, paid_at timestamptz,
                                 receipt bytea, body text);
            ALTER TABLE orders ALTER COLUMN body SET STORAGE EXTERNAL;
            CREATE TABLE audit (id int, note text);
            ALTER TABLE audit REPLICA IDENTITY FULL;
            CREATE PUBLICATION peek_pub FOR TABLE orders, audit;""")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (SLOT,))
        conn.execute("INSERT INTO orders VALUES (1, 'new', 12.50, '2026-11-22 10:00:00.5+00', "
                     "'\\x00ff10', %s)", (BODY,))
        conn.execute("UPDATE orders SET status = 'paid', id = 2 WHERE id = 1")
        conn.execute("UPDATE orders SET status = 'shipped' WHERE id = 2")
        conn.execute("INSERT INTO audit VALUES (1, 'a'), (2, NULL)")
        conn.execute("DELETE FROM audit WHERE id = 1")
        conn.execute("BEGIN; INSERT INTO audit VALUES (3, 'gone'); ROLLBACK")
        conn.execute("SELECT pg_logical_emit_message(true, 'app.event', 'hello')")
        conn.execute("TRUNCATE audit")
    return pg_dsn


def test_json_events_follow_the_contract(source: str) -> None:
    result = peek(source, "--json")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(e["op"], e["table"]) for e in events] == [
        ("insert", "orders"), ("update", "orders"), ("update", "orders"),
        ("insert", "audit"), ("insert", "audit"), ("delete", "audit"),
        ("message", None), ("truncate", None)]
    for e in events:
        assert {"lsn", "seq", "xid", "commit_lsn", "commit_ts", "op", "origin"} <= set(e)
        assert e["origin"] is None and isinstance(e["xid"], int)
        datetime.fromisoformat(e["commit_ts"])
    insert, key_change, toast, a1, a2, delete, message, truncate = events
    assert insert["schema"] == "public" and insert["key"] == {"id": 1}
    assert insert["after"]["total"] == "12.50"  # numeric as a string
    assert base64.b64decode(insert["after"]["receipt"]) == b"\x00\xff\x10"
    assert datetime.fromisoformat(insert["after"]["paid_at"]).isoformat() == "2026-11-22T10:00:00.500000+00:00"
    assert insert["after"]["body"] == BODY and insert["unchanged_toast"] == []
    assert "before" not in insert
    assert key_change["key"] == {"id": 1} and key_change["after"]["id"] == 2  # old key, new row
    assert key_change["unchanged_toast"] == ["body"] and "body" not in key_change["after"]
    assert toast["key"] == {"id": 2} and toast["unchanged_toast"] == ["body"]
    assert toast["after"] == {"id": 2, "status": "shipped", "total": "12.50",
                              "paid_at": insert["after"]["paid_at"], "receipt": insert["after"]["receipt"]}
    assert a2["after"] == {"id": 2, "note": None}
    assert delete["before"] == {"id": 1, "note": "a"} and delete["key"] == {"id": 1, "note": "a"}
    assert "after" not in delete
    assert message["prefix"] == "app.event" and message["transactional"] is True
    assert base64.b64decode(message["content"]) == b"hello"
    assert truncate["tables"] == ["public.audit"]
    assert truncate["options"] == {"cascade": False, "restart_identity": False}
    assert a1["xid"] == a2["xid"] == delete["xid"] - 1 and (a1["seq"], a2["seq"]) == (0, 1)
    assert all(e["after"].get("note") != "gone" for e in events if e.get("after"))


def test_human_lines(source: str) -> None:
    result = peek(source)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 8
    lsn, xid, op, table, *rest = lines[0].split(" ", 4)
    assert "/" in lsn and xid.startswith("xid=") and (op, table) == ("insert", "public.orders")
    assert rest[0].startswith('key={"id":1} after={"id":1,"status":"new","total":"12.50"')
    assert 'key={"id":1} after={"id":2,"status":"paid"' in lines[1]
    assert lines[1].endswith("unchanged_toast=body")
    assert 'before={"id":1,"note":"a"}' in lines[5]
    assert 'message transactional prefix="app.event" content="hello"' in lines[6]
    assert lines[7].endswith("truncate public.audit")
    assert "8 change(s) pending" in result.stderr


def test_limit(source: str) -> None:
    everything = peek(source, "--json").stdout.splitlines()
    result = peek(source, "--json", "--limit", "3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == everything[:3]
    assert peek(source, "--limit", "0").stdout == ""


def test_peek_consumes_nothing(source: str) -> None:
    before = confirmed_flush(source)
    first = peek(source, "--json")
    second = peek(source, "--json")
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout and first.stdout
    assert confirmed_flush(source) == before


def test_unknown_slot(pg_dsn: str) -> None:
    result = pgfeed("peek", "--dsn", pg_dsn, "--slot", "no_such_slot", "--publication", "p")
    assert result.returncode == 2
    assert 'replication slot "no_such_slot" does not exist' in result.stderr
    assert result.stdout == ""


def test_unknown_publication(source: str) -> None:
    result = pgfeed("peek", "--dsn", source, "--slot", SLOT, "--publication", f"{PUB},nope")
    assert result.returncode == 2 and "'nope'" in result.stderr


def test_connection_failure_hides_password() -> None:
    dsn = "host=127.0.0.1 port=1 dbname=x user=u password=s3cret-pw connect_timeout=2"
    result = pgfeed("peek", "--dsn", dsn, "--slot", SLOT, "--publication", PUB)
    assert result.returncode == 2
    assert "cannot connect" in result.stderr and "s3cret-pw" not in result.stderr


def test_proto_versions_agree(source: str) -> None:
    """Every protocol the server speaks decodes to the same events (v1 has no streaming, and
    no messages: the feed's stream sends ``messages`` from v2, as PostgreSQL 13 refuses it)."""
    with psycopg.connect(source) as conn:
        highest = 4 if conn.info.server_version >= 160000 else 3
    outputs = {p: peek(source, "--json", "--proto", str(p)) for p in range(1, highest + 1)}
    assert all(r.returncode == 0 for r in outputs.values())
    assert len({outputs[p].stdout for p in range(2, highest + 1)}) == 1
    assert outputs[1].stdout.splitlines() == [
        line for line in outputs[2].stdout.splitlines() if '"op":"message"' not in line]
    too_high = peek(source, "--proto", str(highest + 1)) if highest < 4 else None
    if too_high is not None:
        assert too_high.returncode == 2 and "protocol up to 3" in too_high.stderr


def test_peek_serves_what_the_http_feed_serves(make_served_feed: FeedFactory, pg_dsn: str) -> None:
    """Peek and the feed's stream share one session definition (``replication.session``): with
    settings a database may carry that change text forms (bytea as escape, sql_standard
    intervals, German dates, a time zone, fewer float digits), peek's events for the same
    changes equal the HTTP feed's, byte for byte; bytea and intervals inside a composite (served
    as its text) included."""
    dbname = conninfo_to_dict(pg_dsn)["dbname"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for setting, value in (("bytea_output", "escape"), ("intervalstyle", "sql_standard"),
                               ("datestyle", "German, DMY"), ("timezone", "Asia/Kolkata"),
                               ("extra_float_digits", "0")):
            conn.execute(sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                sql.Identifier(dbname), sql.Identifier(setting), sql.Literal(value)))
        conn.execute("""
            CREATE TYPE blob_pair AS (b bytea, span interval, at timestamptz, f float8);
            CREATE TABLE session_t (id int PRIMARY KEY, raw bytea, span interval, pair blob_pair,
                                    raws bytea[], spans interval[], f float8, at timestamptz);
            CREATE PUBLICATION session_pub FOR TABLE session_t;""")
        conn.execute("SELECT pg_create_logical_replication_slot('session_peek', 'pgoutput')")
    name = make_served_feed(pg_dsn, tables=("public.session_t",))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("""INSERT INTO session_t VALUES
            (1, '\\x00ff10', '1 year 2 mons 3 days 04:05:06.5', ROW('\\x00ff', '-1 day 02:00',
             '2026-11-22 10:00:00.5+00', 0.1)::blob_pair, '{"\\\\x00ff",NULL}',
             '{"1 day","-00:00:01"}', 0.30000000000000004, '2026-11-22 10:00:00.123456+00'),
            (2, '\\x', '-6 mons', NULL, '{}', NULL, -0.0, 'infinity')""")
        conn.execute("UPDATE session_t SET raw = '\\xdeadbeef', span = span * 2 WHERE id = 1")
        conn.execute("DELETE FROM session_t WHERE id = 2")
    make_served_feed.caught_up(name, pg_dsn)
    served = httpx.get(f"{make_served_feed.service.http_url}/v1/feeds/{name}/changes",
                       params={"after": "earliest", "limit": 100}, timeout=30).json()["changes"]
    result = pgfeed("peek", "--dsn", pg_dsn, "--slot", "session_peek", "--publication",
                    "session_pub", "--json")
    assert result.returncode == 0, result.stderr
    peeked = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(e["op"], e["key"]) for e in peeked] == [
        ("insert", {"id": 1}), ("insert", {"id": 2}), ("update", {"id": 1}), ("delete", {"id": 2})]
    assert peeked == served
    first = peeked[0]["after"]
    assert base64.b64decode(first["raw"]) == b"\x00\xff\x10" and first["span"] == "P1Y2M3DT4H5M6.5S"
    assert first["pair"] == '("\\\\x00ff","-1 days -02:00:00","2026-11-22 10:00:00.5+00",0.1)'
    assert first["spans"] == ["P1D", "PT-1S"] and first["f"] == 0.30000000000000004
