"""Sequences for a cutover, through the HTTP API on real PostgreSQL: an application switching from
the source to a mirror built from the feed sets the mirror's sequences from
``GET /v1/feeds/{feed}/sequences`` and inserts without a key conflict."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql

from pgfeed.localpg import LocalCluster
from pgfeed_client import FeedClient
from tests.fixtures.fix_pg import create_database
from tests.fixtures.fix_service import Service, wait_until

pytestmark = pytest.mark.pg

TABLES = {
    "cut_orders": "id bigserial PRIMARY KEY, item text",
    "cut_events": "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, note text",
    "cut_plain": "k int PRIMARY KEY, v text",
}


def _lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def _changes(client: httpx.Client, feed: str) -> list[dict[str, Any]]:
    out, cursor = [], "earliest"
    while True:
        page = client.get(f"/v1/feeds/{feed}/changes", params={"after": cursor, "limit": 500}).json()
        out += page["changes"]
        cursor = page["next"]
        if not page["has_more"]:
            return out


def _apply(conn: psycopg.Connection, changes: list[dict[str, Any]]) -> None:
    """A mirror: each change applied to the target database in feed order (key = first column)."""
    for change in changes:
        if change["op"] not in ("insert", "update", "read", "delete"):
            continue
        table = sql.Identifier(change["table"])
        if change["op"] == "delete":
            (col, val), = change["key"].items()
            conn.execute(sql.SQL("DELETE FROM {} WHERE {} = %s").format(table, sql.Identifier(col)), (val,))
            continue
        row = change["after"]
        cols = [sql.Identifier(c) for c in row]
        conn.execute(sql.SQL("INSERT INTO {} ({}) OVERRIDING SYSTEM VALUE VALUES ({}) ON CONFLICT ({}) "
                             "DO UPDATE SET ({}) = ROW({})").format(
            table, sql.SQL(", ").join(cols), sql.SQL(", ").join(sql.Placeholder() * len(row)),
            cols[0], sql.SQL(", ").join(cols[1:]),
            sql.SQL(", ").join(sql.SQL("EXCLUDED.") + c for c in cols[1:])), list(row.values()))


def _table(conn: psycopg.Connection, table: str) -> list[tuple[Any, ...]]:
    return conn.execute(sql.SQL("SELECT * FROM {} ORDER BY 1").format(sql.Identifier(table))).fetchall()


def test_a_cutover_sets_the_mirrors_sequences_and_inserts_without_a_key_conflict(
        pgfeed_service: Service, pg_cluster: LocalCluster, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for table, columns in TABLES.items():
            conn.execute(sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(table), sql.SQL(columns)))
    name = "cutover"
    with httpx.Client(base_url=pgfeed_service.http_url, timeout=30) as client:
        created = client.post("/v1/feeds", json={
            "name": name, "dsn": pg_dsn, "tables": [f"public.{t}" for t in TABLES],
            "options": {"heartbeat_seconds": 1, "messages": True}})
        assert created.status_code == 201, created.text
        try:
            wait_until(lambda: client.get(f"/v1/feeds/{name}").json()["state"] == "running", 30, "running")
            # The application: rows, updates, deletes of the newest rows (max(id) + 1 would reuse
            # their ids), and a rolled-back insert that used sequence values and left no row.
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                for i in range(40):
                    conn.execute("INSERT INTO cut_orders (item) VALUES (%s)", (f"item {i}",))
                    conn.execute("INSERT INTO cut_events (note) VALUES (%s)", (f"note {i}",))
                conn.execute("INSERT INTO cut_plain VALUES (1, 'one')")
                conn.execute("UPDATE cut_orders SET item = item || ' paid' WHERE id % 3 = 0")
                conn.execute("DELETE FROM cut_orders WHERE id > 35")
                conn.execute("DELETE FROM cut_events WHERE id > 38")
                with conn.transaction(force_rollback=True):
                    conn.execute("INSERT INTO cut_orders (item) SELECT 'gone' FROM generate_series(1, 5)")
                source_last = {seq: conn.execute(sql.SQL("SELECT last_value FROM {}").format(
                    sql.Identifier(seq))).fetchone()[0]  # type: ignore[index]
                    for seq in ("cut_orders_id_seq", "cut_events_id_seq")}

            # The application has stopped writing: read the sequences, then let the mirror catch up.
            answer = client.get(f"/v1/feeds/{name}/sequences")
            assert answer.status_code == 200, answer.text
            body = answer.json()
            by_table = {s["table"]: s for s in body["sequences"]}
            assert set(by_table) == {"public.cut_orders", "public.cut_events"}  # cut_plain has none
            orders, events = by_table["public.cut_orders"], by_table["public.cut_events"]
            assert (orders["sequence"], orders["column"], orders["kind"]) == (
                "public.cut_orders_id_seq", "id", "serial")
            assert (events["sequence"], events["kind"]) == ("public.cut_events_id_seq", "identity")
            assert orders["last_value"] == source_last["cut_orders_id_seq"] == 45  # 40 + 5 rolled back
            assert events["last_value"] == source_last["cut_events_id_seq"] == 40
            assert (orders["next_value"], events["next_value"]) == (46, 41)
            assert all(s["readable"] and s["increment_by"] == 1 for s in body["sequences"])
            # The same through the client library and the CLI.
            with FeedClient(pgfeed_service.http_url) as feed_client:
                assert feed_client.sequences(name)["sequences"] == body["sequences"]
            cli = subprocess.run([sys.executable, "-m", "pgfeed", "feeds", "sequences", name,
                                  "--url", pgfeed_service.http_url, "--json"], capture_output=True, text=True,
                                 timeout=60, check=False)
            assert cli.returncode == 0, cli.stderr
            assert json.loads(cli.stdout)["sequences"] == body["sequences"]
            read_at = _lsn(body["read_at"])
            wait_until(lambda: _lsn(client.get(f"/v1/feeds/{name}").json()["confirmed_lsn"]) >= read_at,
                       30, "the feed past read_at")

            target_dsn = create_database(pg_cluster, prefix="target")
            with psycopg.connect(target_dsn, autocommit=True) as target, \
                    psycopg.connect(pg_dsn, autocommit=True) as source:
                for table, columns in TABLES.items():
                    target.execute(sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(table),
                                                                           sql.SQL(columns)))
                _apply(target, _changes(client, name))
                for table in TABLES:
                    assert _table(target, table) == _table(source, table), table
                # The cutover: the mirror's own sequences take the source's next values.
                for seq in body["sequences"]:
                    table = seq["table"].split(".", 1)[1]
                    target.execute("SELECT setval(pg_get_serial_sequence(%s, %s), %s, false)",
                                   (table, seq["column"], seq["next_value"]))
                new_orders = [target.execute("INSERT INTO cut_orders (item) VALUES ('after') RETURNING id")
                              .fetchone()[0] for _ in range(5)]  # type: ignore[index]
                new_event = target.execute("INSERT INTO cut_events (note) VALUES ('after') RETURNING id"
                                           ).fetchone()[0]  # type: ignore[index]
            assert new_orders == [46, 47, 48, 49, 50]  # what the source would have handed out next
            assert new_event == 41

            # On request, the same snapshot as a message in the feed, at its position.
            emitted = client.post(f"/v1/feeds/{name}/sequences")
            assert emitted.status_code == 200, emitted.text
            message_lsn = emitted.json()["message_lsn"]
            assert message_lsn is not None
            wait_until(lambda: any(c["op"] == "message" for c in _changes(client, name)), 30,
                       "the sequences message")
            message, = [c for c in _changes(client, name) if c["op"] == "message"]
            assert (message["prefix"], message["transactional"], message["lsn"]) == (
                "pgfeed.sequences", True, message_lsn)
            content = json.loads(base64.b64decode(message["content"]))
            assert content["read_at"] == emitted.json()["read_at"]
            assert content["sequences"] == emitted.json()["sequences"]
        finally:
            client.delete(f"/v1/feeds/{name}")


def test_sequences_of_an_unknown_feed_are_a_404(pgfeed_service: Service) -> None:
    with httpx.Client(base_url=pgfeed_service.http_url, timeout=30) as client:
        answer = client.get("/v1/feeds/nope/sequences")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "feed_not_found"
