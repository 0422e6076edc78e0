"""Issue 28.4: a backfill selects what the stream sends, whatever the publication: row filters and
column lists (PostgreSQL 15+) and stored generated columns (18+: ``publish_generated_columns =
stored``, or a column list naming them). Each table is compared three ways, through the served
API: the rows a backfill read, the rows the stream sends for the same rows (a no-op UPDATE of
every row after the backfill), and PostgreSQL's own initial table copy (``CREATE SUBSCRIPTION
... WITH (copy_data = true)`` into a second database of the same cluster, from the same
publication)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from pgfeed.localpg import LocalCluster
from pgfeed_client import FeedClient
from tests.fixtures.fix_pg import (
    PG_VERSIONS,
    Clusters,
    create_database,
    drop_slots,
    drop_subscription,
)
from tests.fixtures.fix_service import Service, current_lsn, wait_until

pytestmark = pytest.mark.pg

_names = itertools.count()


def _create_feed(service: Service, body: dict[str, Any]) -> str:
    name = f"bfpub{next(_names)}_{conninfo_to_dict(body['dsn'])['dbname']}"
    with httpx.Client(base_url=service.http_url, timeout=60) as client:
        created = client.post("/v1/feeds", json={"name": name, **body})
        assert created.status_code == 201, created.text
    wait_until(lambda: service.supervisor.status(name, probe_source=False).state == "running",
               30, "feed running")
    return name


@contextlib.contextmanager
def initial_copy(cluster: LocalCluster, dsn: str, publication: str,
                 tables: dict[str, str]) -> Iterator[psycopg.Connection]:
    """PostgreSQL's own initial copy of ``publication``'s tables (``tables``: name -> columns
    DDL on the subscriber, every source column as a plain column), once every table is synced;
    yields a connection to the subscriber database."""
    sub_dsn = create_database(cluster, "copy")
    subscription = f"copy_{conninfo_to_dict(dsn)['dbname']}_{publication}"[:63]
    # on one cluster CREATE SUBSCRIPTION cannot create its own slot (PostgreSQL's docs)
    with psycopg.connect(dsn, autocommit=True) as src:
        src.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (subscription,))
    with psycopg.connect(sub_dsn, autocommit=True) as sub:
        for table, columns in tables.items():
            sub.execute(sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(table), sql.SQL(columns)))
        sub.execute(sql.SQL("CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {} WITH (create_slot = "
                            "false, slot_name = {}, copy_data = true)").format(
            sql.Identifier(subscription), sql.Literal(dsn), sql.Identifier(publication),
            sql.Literal(subscription)))
        try:
            wait_until(lambda: sub.execute("SELECT count(*) FILTER (WHERE srsubstate = 'r'), count(*) "
                                           "FROM pg_subscription_rel").fetchone() == (len(tables),) * 2,
                       60, "PostgreSQL's initial copy")
            yield sub
        finally:
            drop_subscription(sub, dsn, subscription)


def copied(sub: psycopg.Connection, table: str, key: str,
           published: tuple[str, ...]) -> dict[Any, dict[str, Any]]:
    """The subscriber's copy of ``table``: the published columns by key; every other column
    must have stayed NULL (PostgreSQL did not copy it)."""
    out: dict[Any, dict[str, Any]] = {}
    for (row,) in sub.execute(sql.SQL("SELECT to_jsonb(t) FROM {} t").format(sql.Identifier(table))):
        assert all(v is None for c, v in row.items() if c not in published), row
        out[row[key]] = {c: row[c] for c in published}
    return out


def compare(service: Service, feed: str, dsn: str, sub: psycopg.Connection,
            tables: dict[str, tuple[str, tuple[str, ...], str]], chunk_rows: int = 40) -> None:
    """Backfill every table of ``tables`` (name -> key column, published columns, SET clause of
    a no-op UPDATE), then assert: read rows == streamed rows == PostgreSQL's copy, with exactly
    the published columns."""
    with FeedClient(service.http_url) as client:
        started = client.start_backfill(feed, [f"public.{t}" for t in tables], chunk_rows=chunk_rows)
        done = wait_until(lambda: (b := client.backfill(feed, started["id"]))["state"] != "running"
                          and b, 120, "the backfill")
        assert done["state"] == "done", done
        with psycopg.connect(dsn, autocommit=True) as conn:
            for table, (_, _, touch) in tables.items():
                conn.execute(sql.SQL("UPDATE {} SET {}").format(sql.Identifier(table), sql.SQL(touch)))
        target = current_lsn(dsn)
        wait_until(lambda: service.supervisor.changelog(feed).confirmed_lsn() >= target, 60,
                   "the feed caught up")
        changes = list(client.iter_changes(feed, "earliest", limit=5000))
    for table, (key, published, _) in tables.items():
        reads = {c.after[key]: c.after for c in changes if c.table == table and c.op == "read"}
        streamed = {c.after[key]: c.after for c in changes if c.table == table and c.op == "update"}
        expected = copied(sub, table, key, published)
        assert len(expected) > 10, table
        assert {tuple(r) for r in reads.values()} == {published}, table  # the columns, in order
        assert reads == expected, table
        assert streamed == expected, table


ORDERS = ("orders", "id int, region text, total int, note text, PRIMARY KEY (id, region)")
ITEMS = ("items", "id int PRIMARY KEY, sku text, qty int, secret text")
EVENTS = ("events", "id int PRIMARY KEY, kind text, v int")


def test_filters_and_column_lists_backfill_as_the_stream_and_postgresqls_copy(
        pgfeed_service: Service, pg_cluster: LocalCluster, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for table, columns in (ORDERS, ITEMS, EVENTS):
            conn.execute(f"CREATE TABLE {table} ({columns})")
        conn.execute("ALTER TABLE events REPLICA IDENTITY FULL")  # its filter reads any column
        conn.execute("INSERT INTO orders SELECT g, CASE WHEN g % 3 = 0 THEN 'us' ELSE 'eu' END, "
                     "g * 10, 'n' || g FROM generate_series(1, 300) g")
        conn.execute("INSERT INTO items SELECT g, 's' || g, g % 13, 'x' || g FROM generate_series(1, 200) g")
        conn.execute("INSERT INTO events SELECT g, (ARRAY['debug', 'info', 'warn'])[1 + g % 3], g "
                     "FROM generate_series(1, 250) g")
    feed = _create_feed(pgfeed_service, {"dsn": pg_dsn, "options": {"heartbeat_seconds": 1}, "tables": [
        {"table": "public.orders", "where": "region = 'eu' AND id > 30",
         "columns": ["id", "region", "total"]},
        {"table": "public.items", "columns": ["id", "qty", "sku"]},  # list only (in table order)
        {"table": "public.events", "where": "kind <> 'debug'"}]})  # filter only
    try:
        with initial_copy(pg_cluster, pg_dsn, f"pgfeed_{feed}",
                          {t: c for t, c in (ORDERS, ITEMS, EVENTS)}) as sub:
            compare(pgfeed_service, feed, pg_dsn, sub, {
                "orders": ("id", ("id", "region", "total"), "total = total"),
                "items": ("id", ("id", "sku", "qty"), "qty = qty"),
                "events": ("id", ("id", "kind", "v"), "v = v")})
    finally:
        pgfeed_service.supervisor.delete(feed)


GENERATED = ("gen", ("id int PRIMARY KEY, a int, d int GENERATED ALWAYS AS (a * 2) STORED, "
                    "v int GENERATED ALWAYS AS (a + 1) VIRTUAL, b text"))


@pytest.mark.parametrize("how", ["publish_generated_columns", "column_list"])
def test_stored_generated_columns_backfill_as_the_stream_and_postgresqls_copy_on_18(
        pgfeed_service: Service, pg_clusters: Clusters, how: str) -> None:
    """Only PostgreSQL 18 publishes generated columns: stored ones, with the publication's option
    or named by a column list; virtual ones never."""
    newest = max(PG_VERSIONS, key=int)
    assert int(newest) >= 18, "generated columns are published from PostgreSQL 18 on"
    cluster = pg_clusters.get(newest)
    dsn = create_database(cluster)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {GENERATED[0]} ({GENERATED[1]})")
        conn.execute("INSERT INTO gen (id, a, b) SELECT g, g * 3, 'b' || g FROM generate_series(1, 150) g")
        if how == "column_list":  # a hand-written publication, adopted; no option
            conn.execute("CREATE PUBLICATION hand FOR TABLE gen (id, d, b) WHERE (id % 2 = 0)")
    if how == "column_list":
        body: dict[str, Any] = {"publication": "hand"}
        publication, published = "hand", ("id", "d", "b")
    else:
        body = {"tables": ["public.gen"], "options": {"publish_generated_columns": True}}
        publication, published = "", ("id", "a", "d", "b")
    feed = _create_feed(pgfeed_service, {"dsn": dsn, **body,
                                         "options": {"heartbeat_seconds": 1, **body.get("options", {})}})
    try:
        with initial_copy(cluster, dsn, publication or f"pgfeed_{feed}",
                          {"gen": "id int PRIMARY KEY, a int, d int, v int, b text"}) as sub:
            compare(pgfeed_service, feed, dsn, sub, {"gen": ("id", published, "b = b")})
    finally:
        pgfeed_service.supervisor.delete(feed)
        drop_slots(cluster, dsn)
