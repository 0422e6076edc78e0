"""A logical message PostgreSQL rolled back never reaches a reader (issue 13, item 3).

pgoutput labels a transactional message of a *streamed* transaction with the top-level xid, even
when it was emitted inside a subtransaction (pgoutput.c, pgoutput_message: ``xid = txn->xid``), so
the subtransaction's Stream Abort cannot take it back. A feed with ``messages`` therefore asks for
whole transactions (no ``streaming``); these tests run the savepoint dance inside a transaction far
past ``logical_decoding_work_mem`` (64kB here, so PostgreSQL would stream it) and read the feed over
HTTP, next to test_decoding's view of the same WAL.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql

from tests.fixtures.fix_service import FeedFactory, wait_until
from tests.fixtures.fix_testdecoding import group_units, peek_test_decoding

pg = pytest.mark.pg

REPO = Path(__file__).resolve().parents[2]
TD_SLOT = "msg_td"
PREFIX = "app.msg"
HEARTBEAT = "pgfeed.heartbeat"
ROWS = 2000  # ~200 kB of changes per insert: several times logical_decoding_work_mem


def _setup(dsn: str) -> None:
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, pad text)")
        # The walsender reads this when it connects: small enough that the transaction streams
        # (if streaming is asked for) on every version, without PostgreSQL 16's debug setting.
        conn.execute(sql.SQL("ALTER DATABASE {} SET logical_decoding_work_mem = '64kB'").format(
            sql.Identifier(dbname)))
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding', false, %s)",
                     (TD_SLOT, False))


def _emit(conn: psycopg.Connection[Any], content: str) -> None:
    conn.execute("SELECT pg_logical_emit_message(true, %s, %s)", (PREFIX, content))


def _savepoint_dance(conn: psycopg.Connection[Any], *, prepare: str | None) -> None:
    """One big transaction: a message kept, one rolled back (already streamed by the time of the
    ROLLBACK TO: the subtransaction goes on past the memory limit after emitting it), a nested
    savepoint released into the rolled-back one, and a message after the rollback."""
    conn.execute("BEGIN")
    conn.execute("INSERT INTO t SELECT g, repeat('k', 100) FROM generate_series(1, %s::int) g", (ROWS,))
    _emit(conn, "kept: top level, before")
    conn.execute("SAVEPOINT s")
    _emit(conn, "GONE: in the rolled-back subtransaction")
    conn.execute("SAVEPOINT inner_s")
    _emit(conn, "GONE: released into the rolled-back subtransaction")
    conn.execute("RELEASE SAVEPOINT inner_s")
    conn.execute("INSERT INTO t SELECT g, repeat('r', 100) FROM generate_series(%s::int, %s::int) g",
                 (ROWS + 1, 2 * ROWS))
    conn.execute("ROLLBACK TO SAVEPOINT s")
    conn.execute("SAVEPOINT s2")
    _emit(conn, "kept: in a released subtransaction")
    conn.execute("RELEASE SAVEPOINT s2")
    _emit(conn, "kept: top level, after")
    conn.execute("INSERT INTO t SELECT g, 'tail' FROM generate_series(%s::int, %s::int) g",
                 (2 * ROWS + 1, 2 * ROWS + 10))
    if prepare is None:
        conn.execute("COMMIT")
    else:
        conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(prepare)))
        conn.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(prepare)))


def _served(base: str, feed: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = "earliest"
    with httpx.Client(base_url=base, timeout=30) as client:
        while True:
            page = client.get(f"/v1/feeds/{feed}/changes",
                              params={"after": cursor, "limit": 5000}).json()
            out.extend(page["changes"])
            cursor = page["next"]
            if not page["has_more"]:
                return out


def _slot_stats(dsn: str, slot: str) -> tuple[int, int]:
    """(stream_txns, spill_txns) of a slot, once the walsender has reported them."""
    def read() -> tuple[int, int] | None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT stream_txns, spill_txns FROM pg_stat_replication_slots "
                               "WHERE slot_name = %s", (slot,)).fetchone()
        return (int(row[0]), int(row[1])) if row and (row[0] or row[1]) else None
    return wait_until(read, 10, f"statistics of slot {slot}")


def _message_text(event: dict[str, Any]) -> str:
    return base64.b64decode(event["content"]).decode()


@pg
@pytest.mark.parametrize("two_phase", [False, True], ids=["commit", "prepared"])
def test_rolled_back_message_is_never_served(make_served_feed: FeedFactory, pg_dsn: str,
                                              two_phase: bool) -> None:
    _setup(pg_dsn)
    # A feed that opts in to messages (off by default since issue 28.2), streaming asked for.
    name = make_served_feed(pg_dsn, tables=("public.t",), messages=True, streaming=True,
                            two_phase=two_phase)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _savepoint_dance(conn, prepare="dance" if two_phase else None)
        conn.execute("SELECT pg_logical_emit_message(true, %s, 'last')", (PREFIX,))
    make_served_feed.caught_up(name, pg_dsn)
    base = make_served_feed.service.http_url

    events = wait_until(lambda: (e := _served(base, name)) and any(
        x["op"] == "message" and _message_text(x) == "last" for x in e) and e, 30, "the last message")
    messages = [_message_text(e) for e in events
                if e["op"] == "message" and e["prefix"] == PREFIX]
    assert messages == ["kept: top level, before", "kept: in a released subtransaction",
                        "kept: top level, after", "last"]
    ids = [e["after"]["id"] for e in events if e["op"] == "insert"]
    assert ids == list(range(1, ROWS + 1)) + list(range(2 * ROWS + 1, 2 * ROWS + 11))

    # test_decoding on the same WAL agrees, message for message.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        units = group_units(peek_test_decoding(conn, TD_SLOT))
    reference = [c.content.decode() for u in units for c in u.changes
                 if c.op == "message" and c.prefix == PREFIX]
    assert reference == messages

    # Status says what the walsender was asked for: whole transactions, not streamed ones; the
    # source spilled this one to its disk instead.
    status = httpx.get(f"{base}/v1/feeds/{name}", timeout=30).json()
    assert status["last_error"] is None
    assert status["options"]["streaming"] is True and status["streaming_in_use"] is False
    stream_txns, spill_txns = _slot_stats(pg_dsn, f"pgfeed_{name}")
    assert stream_txns == 0 and spill_txns >= 1


@pg
def test_streaming_still_used_when_messages_are_off(make_served_feed: FeedFactory, pg_dsn: str) -> None:
    """Without messages nothing can be misattributed: big transactions keep streaming (the rows
    of a rolled-back subtransaction are covered by its Stream Abort)."""
    _setup(pg_dsn)
    name = make_served_feed(pg_dsn, tables=("public.t",), messages=False, streaming=True)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _savepoint_dance(conn, prepare=None)
    make_served_feed.caught_up(name, pg_dsn)
    events = _served(make_served_feed.service.http_url, name)
    assert [e["op"] for e in events if e["op"] == "message"] == []
    ids = [e["after"]["id"] for e in events if e["op"] == "insert"]
    assert ids == list(range(1, ROWS + 1)) + list(range(2 * ROWS + 1, 2 * ROWS + 11))
    assert _slot_stats(pg_dsn, f"pgfeed_{name}")[0] >= 1
    status = httpx.get(f"{make_served_feed.service.http_url}/v1/feeds/{name}", timeout=30).json()
    assert status["streaming_in_use"] is True


@pg
def test_peek_shows_no_rolled_back_message(pg_dsn: str) -> None:
    """``pgfeed peek`` decodes the slot the same way (it shows messages, so it does not stream)."""
    _setup(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE PUBLICATION peek_pub FOR TABLE t")
        conn.execute("SELECT pg_create_logical_replication_slot('peek_slot', 'pgoutput')")
        _savepoint_dance(conn, prepare=None)
    result = subprocess.run([sys.executable, "-m", "pgfeed", "peek", "--dsn", pg_dsn, "--slot",
                             "peek_slot", "--publication", "peek_pub", "--json"],
                            check=False, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [_message_text(e) for e in events if e["op"] == "message"] == [
        "kept: top level, before", "kept: in a released subtransaction", "kept: top level, after"]
    assert sum(e["op"] == "insert" for e in events) == ROWS + 10
