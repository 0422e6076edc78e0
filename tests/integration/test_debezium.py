"""``format=debezium`` end to end: a workload of every op (insert, update, a key change, an
unchanged TOAST column, delete with DEFAULT and FULL identity, a truncate of two tables,
transactional and non-transactional messages) read from a real server both natively and as
Debezium envelopes, each envelope checked field by field against its native event."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

import httpx
import psycopg
import pytest

import pgfeed
from pgfeed.encoding.to_debezium import UNAVAILABLE
from pgfeed_client import FeedClient, parse_lsn
from tests.fixtures.fix_service import FeedFactory, Service

pytestmark = pytest.mark.pg

SCHEMA = """
CREATE TABLE acct (id int PRIMARY KEY, name text, doc text);
CREATE TABLE audit (id int PRIMARY KEY, note text);
ALTER TABLE audit REPLICA IDENTITY FULL;
"""
BIG = "x" * 20_000  # stored out of line (TOAST), so an update not touching it leaves it unchanged


def _workload(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE acct ALTER COLUMN doc SET STORAGE EXTERNAL")
        with conn.transaction():
            conn.execute("INSERT INTO acct VALUES (1, 'ann', %s), (2, 'bob', 'short')", (BIG,))
            conn.execute("INSERT INTO audit VALUES (1, 'first'), (2, 'second')")
        conn.execute("UPDATE acct SET name = 'anne' WHERE id = 1")  # doc unchanged TOAST
        conn.execute("UPDATE acct SET id = 20 WHERE id = 2")  # a key change
        conn.execute("UPDATE audit SET note = 'changed' WHERE id = 1")  # FULL: whole old row
        conn.execute("DELETE FROM acct WHERE id = 20")
        conn.execute("DELETE FROM audit WHERE id = 2")
        with conn.transaction():
            conn.execute("SELECT pg_logical_emit_message(true, 'app.tx', 'in a transaction')")
            conn.execute("INSERT INTO audit VALUES (3, 'third')")
        conn.execute("SELECT pg_logical_emit_message(false, 'app.now', '\\x00ff'::bytea)")
        conn.execute("TRUNCATE acct, audit")


def _exact_micros(iso: str) -> int:
    delta = datetime.fromisoformat(iso) - datetime.fromisoformat("1970-01-01T00:00:00+00:00")
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _check_source(env: dict[str, Any], native: dict[str, Any], feed: str, db: str) -> None:
    src = env["source"]
    assert src["connector"] == "pgfeed" and src["name"] == feed and src["db"] == db
    assert src["version"] == pgfeed.__version__
    assert src["txId"] == native["xid"] and src["lsn"] == parse_lsn(native["lsn"])
    assert src["ts_us"] == _exact_micros(native["commit_ts"]) == env["ts_us"]
    assert src["ts_ms"] == src["ts_us"] // 1000 == env["ts_ms"]
    assert src["snapshot"] == ("true" if native["op"] == "read" else "false")
    assert src["commit_lsn"] == native["commit_lsn"] and src["seq"] == native["seq"]
    assert env["transaction"] is None


def test_debezium_envelopes_match_native_events(pgfeed_service: Service, pg_dsn: str,
                                                make_served_feed: FeedFactory) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    feed = make_served_feed(pg_dsn, tables=("public.acct", "public.audit"), toast="placeholder")
    _workload(pg_dsn)
    make_served_feed.caught_up(feed, pg_dsn)
    db = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    base = pgfeed_service.http_url
    head = httpx.get(f"{base}/v1/feeds/{feed}/changes", params={"after": "latest"}).json()["head"]
    query = {"after": "earliest", "to": head, "limit": 10_000}
    native_page = httpx.get(f"{base}/v1/feeds/{feed}/changes", params=query).json()
    dbz_page = httpx.get(f"{base}/v1/feeds/{feed}/changes",
                         params={**query, "format": "debezium"}).json()
    assert dbz_page["next"] == native_page["next"] and dbz_page["head"] == native_page["head"]
    natives = [e for e in native_page["changes"] if e.get("prefix") != "pgfeed.heartbeat"]
    envelopes = [e for e in dbz_page["changes"]
                 if (e.get("message") or {}).get("prefix") != "pgfeed.heartbeat"]

    # Walk both lists: each native event gives one envelope, a key change and a two-table
    # truncate give two.
    seen_ops: list[str] = []
    i = 0
    for native in natives:
        op = native["op"]
        if op == "truncate":
            group = envelopes[i:i + len(native["tables"])]
            assert [f'{e["source"]["schema"]}.{e["source"]["table"]}' for e in group] \
                == native["tables"] == ["public.acct", "public.audit"]
            for env in group:
                assert env["op"] == "t" and env["before"] is None and env["after"] is None
                _check_source(env, native, feed, db)
        elif op == "update" and native["key"]["id"] != native["after"]["id"]:
            group = envelopes[i:i + 2]
            old, new = group
            assert (old["op"], new["op"]) == ("d", "c")
            assert old["before"] == native["key"] == {"id": 2} and old["after"] is None
            assert new["before"] is None and new["after"] == native["after"]
            assert new["after"] == {"id": 20, "name": "bob", "doc": "short"}
            for env in group:
                _check_source(env, native, feed, db)
                assert env["source"]["table"] == "acct"
        else:
            group = envelopes[i:i + 1]
            env = group[0]
            _check_source(env, native, feed, db)
            assert env["op"] == {"insert": "c", "update": "u", "delete": "d", "message": "m",
                                 "read": "r"}[op]
            if op == "message":
                assert env["before"] is None and env["after"] is None
                assert env["message"] == {"prefix": native["prefix"], "content": native["content"]}
                assert env["source"]["table"] is None
            else:
                assert env["source"]["schema"] == native["schema"]
                assert env["source"]["table"] == native["table"]
            if op in ("insert", "read"):
                assert env["before"] is None and env["after"] == native["after"]
            if op == "update":
                assert env["before"] == native.get("before")  # FULL: the old row; else null
                expected = dict(native["after"])
                for column in native["unchanged_toast"]:
                    expected[column] = UNAVAILABLE
                assert env["after"] == expected
            if op == "delete":
                assert env["after"] is None
                assert env["before"] == (native["before"] if "before" in native else native["key"])
        seen_ops += [e["op"] for e in group]
        i += len(group)
    assert i == len(envelopes)

    # What the workload did, as Debezium names it.
    assert seen_ops == ["c", "c", "c", "c",  # two rows each of acct and audit
                        "u",  # name changed, doc an unchanged TOAST column
                        "d", "c",  # the key change
                        "u", "d", "d",  # FULL update; deletes (DEFAULT, FULL)
                        "m", "c",  # the transactional message and its insert
                        "m",  # the non-transactional one
                        "t", "t"]
    toast_update = next(e for e in envelopes if e["op"] == "u" and e["source"]["table"] == "acct")
    assert toast_update["after"] == {"id": 1, "name": "anne", "doc": UNAVAILABLE}
    full_update = next(e for e in envelopes if e["op"] == "u" and e["source"]["table"] == "audit")
    assert full_update["before"] == {"id": 1, "note": "first"}
    assert full_update["after"] == {"id": 1, "note": "changed"}
    full_delete = [e for e in envelopes if e["op"] == "d"][-1]
    assert full_delete["before"] == {"id": 2, "note": "second"}
    messages = [e for e in envelopes if e["op"] == "m"]
    assert base64.b64decode(messages[0]["message"]["content"]) == b"in a transaction"
    assert base64.b64decode(messages[1]["message"]["content"]) == b"\x00\xff"
    assert messages[0]["source"]["txId"] == next(
        e for e in envelopes if e["source"]["table"] == "audit" and e["after"]
        and e["after"]["id"] == 3)["source"]["txId"]

    # The client library reads the same envelopes, page by page, resuming by cursor.
    with FeedClient(base) as client:
        read = list(client.iter_debezium(feed, "earliest", to=head, limit=3))
    assert [e for e in read if (e.get("message") or {}).get("prefix") != "pgfeed.heartbeat"] \
        == envelopes
