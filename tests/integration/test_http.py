"""The HTTP API end to end: real ``pgfeed serve`` runtimes on loopback (uvicorn + capture threads +
SQLite logs) capturing real PostgreSQL 15 and 18, read with httpx as any client would.

What is served is compared with ``test_decoding`` on the same WAL (a slot created before the
workload and peeked after it), page by page, filtered and unfiltered, as JSON and as Arrow; then
long-poll latency, splits, tables, consumers, the admin API against the real source catalogue,
every error answer, bearer tokens on HTTP and gRPC, the ops endpoints, and schemathesis over
``/openapi.json``.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import psycopg
import pyarrow as pa
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from pgfeed_client import Cursor, FeedClient, parse_cursor, parse_lsn
from pgfeed_proto.v1 import feed_pb2, feed_pb2_grpc
from tests.fixtures.fix_http import OFFLINE_DSN
from tests.fixtures.fix_http import error_body as _error
from tests.fixtures.fix_pg import Clusters, create_database, drop_slots
from tests.fixtures.fix_service import FeedFactory, Service, current_lsn, run_service, wait_until
from tests.fixtures.fix_testdecoding import (
    TableInfo,
    comparable_event,
    expected_change,
    group_units,
    peek_test_decoding,
    table_info,
)

pg = pytest.mark.pg

TD_SLOT = "http_td"
HEARTBEAT = "pgfeed.heartbeat"
BIG = 40  # rows of the transaction that pages split (limit 7)
SCHEMA = """
CREATE TABLE a (id int PRIMARY KEY, v int NOT NULL, s text);
CREATE TABLE b (id int PRIMARY KEY, note text);
ALTER TABLE b REPLICA IDENTITY FULL;
CREATE TABLE c (id bigint PRIMARY KEY, doc jsonb, at timestamptz, n numeric, flag bool);
"""


def _workload(dsn: str) -> None:
    """Inserts, updates (one changing the key, some under REPLICA IDENTITY FULL), deletes, a
    truncate, logical messages (transactional and not), a schema change, and one transaction of
    BIG rows, interleaved over three tables."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("INSERT INTO a SELECT g, g * 10, 'row ' || g FROM generate_series(1, %s) g", (BIG,))
        for i in range(1, 5):
            with conn.transaction():
                conn.execute("UPDATE a SET v = v + 1 WHERE id = %s", (i,))
                conn.execute("INSERT INTO b VALUES (%s, %s)", (i, f"note {i}"))
                conn.execute("DELETE FROM a WHERE id = %s", (BIG - i,))
        conn.execute("UPDATE b SET note = 'changed' WHERE id = 2")
        conn.execute("DELETE FROM b WHERE id = 3")
        conn.execute("UPDATE a SET id = 1000 WHERE id = 20")  # the key changes
        with conn.transaction():
            conn.execute("INSERT INTO c VALUES (1, '{\"k\": [1, \"x\", null], \"t\": true}', "
                         "'2026-11-22 10:00:00.25+02', 12.50, true)")
            conn.execute("SELECT pg_logical_emit_message(true, 'app.event', 'inside a transaction')")
        conn.execute("SELECT pg_logical_emit_message(false, 'app.event', 'on its own')")
        conn.execute("INSERT INTO c VALUES (2, 'null', NULL, 'NaN', false)")
        conn.execute("TRUNCATE c")
        conn.execute("ALTER TABLE c ADD COLUMN extra text")
        conn.execute("INSERT INTO c VALUES (3, '[]', now(), -1.5, NULL, 'new column')")
        conn.execute("INSERT INTO b VALUES (99, 'last')")


@dataclass
class Captured:
    base: str
    feed: str
    dsn: str
    expected: list[dict[str, Any]]  # test_decoding's units: {"xid", "end_lsn", "changes"}
    tables: dict[str, TableInfo]


@pytest.fixture(scope="module")
def captured(pgfeed_service: Service, any_pg_cluster: Any) -> Iterator[Captured]:
    """One feed per PostgreSQL version (14 included) over the workload, with test_decoding's view
    of the same WAL. Read-only for the tests that use it (the comparisons depend on it)."""
    pg_cluster = any_pg_cluster
    dsn = create_database(pg_cluster, prefix="http")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (TD_SLOT,))
    feeds = FeedFactory(pgfeed_service)
    try:
        name = feeds(dsn, tables=("public.a", "public.b", "public.c"))
        _workload(dsn)
        feeds.caught_up(name, dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            tables = table_info(conn)
            units = group_units(peek_test_decoding(conn, TD_SLOT))
        expected = []
        for unit in units:
            changes = [expected_change(c, tables) for c in unit.changes
                       if not (c.op == "message" and c.prefix == HEARTBEAT)]
            if changes:
                expected.append({"xid": unit.xid, "end_lsn": unit.end_lsn, "changes": changes})
        yield Captured(pgfeed_service.http_url, name, dsn, expected, tables)
    finally:
        feeds.delete_all()
        drop_slots(pg_cluster, dsn)


# -- helpers ----------------------------------------------------------------------------------------

def _page_all(client: httpx.Client, feed: str, path: str = "changes", start: str = "earliest",
              **params: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every item after ``start``, page by page (``changes`` or ``transactions``); also each
    page's envelope. Checks what holds on every page: cursors never go back, the headers say
    what the body says."""
    key = "changes" if path == "changes" else "transactions"
    cursor, items, pages = start, [], []
    for _ in range(10_000):
        response = client.get(f"/v1/feeds/{feed}/{path}", params={"after": cursor, **params})
        assert response.status_code == 200, response.text
        page = response.json()
        assert response.headers["PgFeed-Next"] == page["next"]
        assert response.headers["PgFeed-Head"] == page["head"]
        assert response.headers["PgFeed-Has-More"] == ("true" if page["has_more"] else "false")
        assert _cursor(page["next"]) >= _cursor(cursor)
        pages.append(page)
        items.extend(page[key])
        cursor = page["next"]
        if not page["has_more"]:
            return items, pages
    raise AssertionError("paging never ended")


def _cursor(text: str) -> Cursor:
    parsed = parse_cursor(text)
    assert isinstance(parsed, Cursor), text
    return parsed


def _units(changes: list[dict[str, Any]], tables: dict[str, TableInfo]) -> list[dict[str, Any]]:
    """Consecutive changes of one commit -> a unit, as test_decoding groups them."""
    units: list[dict[str, Any]] = []
    for event in changes:
        if not units or units[-1]["commit_lsn"] != event["commit_lsn"]:
            units.append({"xid": event["xid"], "commit_lsn": event["commit_lsn"], "changes": []})
        assert units[-1]["xid"] == event["xid"]
        units[-1]["changes"].append(comparable_event(event, parse_lsn(event["lsn"]), tables))
    return [{"xid": u["xid"], "changes": u["changes"]} for u in units]


def _positions(changes: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(parse_lsn(c["commit_lsn"]), c["seq"]) for c in changes]


# -- reading ----------------------------------------------------------------------------------------

@pg
def test_pages_of_7_reassemble_exactly_what_test_decoding_saw(captured: Captured) -> None:
    with httpx.Client(base_url=captured.base, timeout=30) as client:
        changes, pages = _page_all(client, captured.feed, limit=7)
        txns, _ = _page_all(client, captured.feed, "transactions")

    # The same transactions, the same changes, the same values, in the same order.
    assert _units(changes, captured.tables) == [{"xid": u["xid"], "changes": u["changes"]}
                                                for u in captured.expected]
    # ... ending where test_decoding's COMMIT records end (a non-transactional message, xid 0,
    # is a unit of its own at its own LSN).
    assert [(t["xid"], parse_lsn(t["end_lsn"])) for t in txns] == \
        [(u["xid"], u["end_lsn"] if u["xid"] else u["changes"][0]["lsn"]) for u in captured.expected]

    # No duplicate, no gap: positions strictly increase and each transaction is seq 0..n-1.
    positions = _positions(changes)
    assert positions == sorted(set(positions))
    counts = {parse_lsn(t["commit_lsn"]): t["change_count"] for t in txns}
    for commit_lsn, count in counts.items():
        assert [s for lsn, s in positions if lsn == commit_lsn] == list(range(count))
    assert len(changes) == sum(counts.values())

    # Pages: at most 7 changes; the BIG-row transaction is split by seq with LSN:seq cursors
    # naming the last change of the page; every page but the last says there is more.
    big = next(t for t in txns if t["change_count"] == BIG)
    assert all(len(p["changes"]) <= 7 for p in pages)
    for page in (p for p in pages if ":" in p["next"]):
        last = page["changes"][-1]
        assert page["next"] == f"{last['commit_lsn']}:{last['seq']}"
    inside_big = [p["next"] for p in pages if p["next"].startswith(f"{big['commit_lsn']}:")]
    assert inside_big == [f"{big['commit_lsn']}:{s}" for s in range(6, BIG - 1, 7)]
    assert all(p["has_more"] for p in pages[:-1]) and not pages[-1]["has_more"]
    head = pages[-1]["head"]
    assert all(p["head"] == head for p in pages)  # nothing committed meanwhile
    assert pages[-1]["next"] == head == changes[-1]["commit_lsn"]

    with httpx.Client(base_url=captured.base, timeout=30) as client:
        # Caught up: an empty page that stays where it is.
        idle = client.get(f"/v1/feeds/{captured.feed}/changes", params={"after": head}).json()
        assert idle == {"changes": [], "next": head, "head": head, "has_more": False}
        # `latest` is the head.
        assert client.get(f"/v1/feeds/{captured.feed}/changes",
                          params={"after": "latest"}).json()["next"] == head
        # Resuming from a cursor no page produced (inside the big transaction, and the LSN form
        # of a whole transaction) gives exactly the rest.
        for cursor in (f"{big['commit_lsn']}:11", f"{big['commit_lsn']}:0", big["commit_lsn"],
                       changes[0]["commit_lsn"]):
            rest, _ = _page_all_from(client, captured.feed, cursor, limit=9)
            bound = _cursor(cursor)
            assert rest == [c for c in changes if not bound.includes(parse_lsn(c["commit_lsn"]), c["seq"])]
        # `to` (inclusive) ends a read inside a transaction.
        upto = f"{big['commit_lsn']}:24"
        part = client.get(f"/v1/feeds/{captured.feed}/changes",
                          params={"after": "earliest", "to": upto, "limit": 1000}).json()
        assert part["next"] == upto and part["has_more"] is False
        assert part["changes"] == changes[:len(part["changes"])] and part["changes"][-1]["seq"] == 24


def _page_all_from(client: httpx.Client, feed: str, cursor: str, **params: Any,
                   ) -> tuple[list[dict[str, Any]], str]:
    out: list[dict[str, Any]] = []
    while True:
        page = client.get(f"/v1/feeds/{feed}/changes", params={"after": cursor, **params}).json()
        out.extend(page["changes"])
        cursor = page["next"]
        if not page["has_more"]:
            return out, cursor


@pg
def test_filters_return_exactly_the_matching_changes_and_keep_the_cursor_moving(
        captured: Captured) -> None:
    with httpx.Client(base_url=captured.base, timeout=30) as client:
        everything, full = _page_all(client, captured.feed, limit=6)
        final = full[-1]["next"]

        def by_table(names: set[str]) -> list[dict[str, Any]]:
            return [c for c in everything if (c["op"] == "truncate" and set(c["tables"]) & names)
                    or (c.get("table") is not None and f"{c['schema']}.{c['table']}" in names)]

        cases: list[tuple[dict[str, Any], list[dict[str, Any]]]] = [
            ({"tables": "public.b"}, by_table({"public.b"})),
            ({"tables": "b"}, by_table({"public.b"})),  # a bare name is in public
            ({"tables": ["public.a", "public.c"]}, by_table({"public.a", "public.c"})),  # repeated
            ({"tables": "public.c"}, by_table({"public.c"})),  # includes its truncate
            ({"ops": "delete"}, [c for c in everything if c["op"] == "delete"]),
            ({"ops": "update,truncate,message"},
             [c for c in everything if c["op"] in ("update", "truncate", "message")]),
            ({"tables": "public.a", "ops": "insert"},
             [c for c in by_table({"public.a"}) if c["op"] == "insert"]),
            ({"tables": "public.nothing"}, []),
        ]
        for params, want in cases:
            got, pages = _page_all(client, captured.feed, limit=6, **params)
            assert got == want, params
            # The filtered reader ends at the unfiltered final cursor: `next` moved past what
            # was filtered out, so resuming from any page's `next` neither re-reads nor skips.
            assert pages[-1]["next"] == final, params
            # `limit` counts the changes a page keeps (issue 30.2): every page but the last is
            # full, so a filtered reader needs as few requests as the changes it gets allow
            assert all(len(p["changes"]) == 6 for p in pages[:-1]), params
            assert len(pages) <= len(want) // 6 + 1, params
            for page in pages:
                if page["changes"]:
                    last = page["changes"][-1]
                    assert _cursor(page["next"]) >= Cursor(parse_lsn(last["commit_lsn"]), last["seq"])
        # A filter that keeps nothing passes the whole log in one page (far below the scan bound)
        empty_pages = _page_all(client, captured.feed, limit=6, tables="public.nothing")[1]
        assert len(full) > 1 and len(empty_pages) == 1 and empty_pages[0]["next"] == final


@pg
def test_count_pages_hold_what_json_pages_hold_and_skipping_lands_after_the_nth_change(
        captured: Captured) -> None:
    """``format=count`` answers each page's envelope (count, next, head, has_more) exactly as the
    JSON page at the same cursor, filters included; ``FeedClient.cursor_after`` (Spark's
    ``maxRowsPerTrigger``) lands right after the n-th kept change, or at ``to``."""
    feed = captured.feed
    with httpx.Client(base_url=captured.base, timeout=30) as client, \
            FeedClient(captured.base) as pgfeed:
        everything = _page_all(client, feed, limit=6)[0]
        for params in ({}, {"tables": "public.b"}, {"ops": "delete,truncate"},
                       {"tables": "public.a", "ops": "insert"}):
            want, pages = _page_all(client, feed, limit=5, **params)
            cursor = "earliest"
            for page in pages:
                r = client.get(f"/v1/feeds/{feed}/changes",
                               params={"after": cursor, "limit": 5, "format": "count", **params})
                assert r.status_code == 200, r.text
                assert r.json() == {"count": len(page["changes"]), "next": page["next"],
                                    "head": page["head"], "has_more": page["has_more"]}, params
                assert r.headers["PgFeed-Next"] == page["next"]
                cursor = page["next"]
            for n in {n for n in (1, 2, 7, len(want) - 1, len(want), len(want) + 3) if n >= 1}:
                after = pgfeed.cursor_after(feed, "earliest", n, **params)
                resumed = _page_all(client, feed, start=after, limit=50, **params)[0]
                assert resumed == want[n:], (params, n)
        to = everything[len(everything) // 2]["commit_lsn"]
        assert pgfeed.cursor_after(feed, "earliest", len(everything) + 10, to=to) == to
        assert pgfeed.cursor_after(feed, to, 0) == to


@pg
def test_concurrent_readers_each_get_the_whole_feed(captured: Captured) -> None:
    """Readers paging the same feed at once (sharing the feed's reader, its decode caches and
    read-ahead) each get exactly what a lone reader gets."""
    feed = captured.feed
    with httpx.Client(base_url=captured.base, timeout=30) as client:
        alone = {limit: _page_all(client, feed, limit=limit)[0] for limit in (3, 7, 1000)}
    results: dict[int, list[Any]] = {}

    def read(n: int) -> None:
        with httpx.Client(base_url=captured.base, timeout=30) as client:
            results[n] = [_page_all(client, feed, limit=(3, 7)[n % 2])[0] for _ in range(3)]

    threads = [threading.Thread(target=read, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [0, 1, 2, 3]
    for n, runs in results.items():
        assert all(run == alone[(3, 7)[n % 2]] for run in runs), n
    assert alone[3] == alone[7] == alone[1000]


@pg
def test_transactions_pages_and_arrow(captured: Captured) -> None:
    feed = captured.feed
    with httpx.Client(base_url=captured.base, timeout=30) as client:
        everything, _ = _page_all(client, feed, limit=1000)

        # Whole transactions, two a page; then slices of at most 7 changes.
        txns, pages = _page_all(client, feed, "transactions", limit=2)
        assert all(len(p["transactions"]) <= 2 for p in pages)
        assert [c for t in txns for c in t["changes"]] == everything
        for t in txns:
            assert t["change_count"] == len(t["changes"]) and t["cursor"] == t["commit_lsn"]
            assert {(c["commit_lsn"], c["xid"]) for c in t["changes"]} == {(t["commit_lsn"], t["xid"])}
        sliced, _ = _page_all(client, feed, "transactions", max_changes=7)
        assert [c for t in sliced for c in t["changes"]] == everything
        big = [t for t in sliced if t["change_count"] == BIG]
        # From inside a transaction: its rest first, then whole ones.
        rest = client.get(f"/v1/feeds/{feed}/transactions",
                          params={"after": f"{big[0]['commit_lsn']}:10", "limit": 2}).json()
        assert [c["seq"] for c in rest["transactions"][0]["changes"]] == list(range(11, BIG))
        assert rest["transactions"][0]["change_count"] == BIG
        assert [t["cursor"] for t in rest["transactions"]] == [t["commit_lsn"] for t in txns[:2]]
        assert len(big) == -(-BIG // 7) and all(len(t["changes"]) <= 7 for t in sliced)
        assert [t["cursor"] for t in big[:-1]] == [f"{t['commit_lsn']}:{t['changes'][-1]['seq']}"
                                                   for t in big[:-1]]
        assert big[-1]["cursor"] == big[-1]["commit_lsn"]

        # Arrow, generic rows: the same changes as the JSON; the cursor in PgFeed-Next.
        json_page = client.get(f"/v1/feeds/{feed}/changes", params={"limit": 30}).json()
        arrow = client.get(f"/v1/feeds/{feed}/changes", params={"limit": 30, "format": "arrow"})
        assert arrow.status_code == 200
        assert arrow.headers["content-type"] == "application/vnd.apache.arrow.stream"
        assert arrow.headers["PgFeed-Next"] == json_page["next"]
        assert arrow.headers["PgFeed-Has-More"] == "true"
        rows = pa.ipc.open_stream(arrow.content).read_all().to_pylist()
        assert [(r["commit_lsn"], r["seq"], r["xid"], r["op"], r["table"]) for r in rows] == \
            [(parse_lsn(c["commit_lsn"]), c["seq"], c["xid"], c["op"], c.get("table"))
             for c in json_page["changes"]]

        # Arrow /transactions: every change, with the transactions' end LSNs.
        arrow_txns = client.get(f"/v1/feeds/{feed}/transactions", params={"format": "arrow"})
        assert arrow_txns.status_code == 200
        assert arrow_txns.headers["PgFeed-Next"] == everything[-1]["commit_lsn"]
        table = pa.ipc.open_stream(arrow_txns.content).read_all()
        assert table.column("lsn").to_pylist() == [parse_lsn(c["lsn"]) for c in everything]
        by_commit = {parse_lsn(t["commit_lsn"]): parse_lsn(t["end_lsn"]) for t in txns}
        assert table.column("end_lsn").to_pylist() == [by_commit[parse_lsn(c["commit_lsn"])]
                                                       for c in everything]

        # Arrow, one table: typed columns of its newest shape; rows from before the column was
        # added have it null; a delete carries its old row.
        typed = client.get(f"/v1/feeds/{feed}/changes", params={"tables": "public.c", "format": "arrow"})
        t = pa.ipc.open_stream(typed.content).read_all()
        assert [t.schema.field(n).type for n in ("id", "n", "flag", "extra")] == \
            [pa.int64(), pa.string(), pa.bool_(), pa.string()]  # numeric without typmod: exact text
        json_c = [c for c in everything if c.get("table") == "c" or "public.c" in c.get("tables", ())]
        assert t.column("_op").to_pylist() == [c["op"] for c in json_c] == \
            ["insert", "insert", "truncate", "insert"]  # a truncate is a row without values
        assert t.column("_seq").to_pylist() == [c["seq"] for c in json_c]
        assert t.column("id").to_pylist() == [1, 2, None, 3]
        assert t.column("extra").to_pylist() == [None, None, None, "new column"]
        assert t.column("flag").to_pylist() == [True, False, None, None]
        assert t.column("n").to_pylist() == ["12.50", "NaN", None, "-1.5"]
        b = pa.ipc.open_stream(client.get(f"/v1/feeds/{feed}/changes",
                                          params={"tables": "b", "format": "arrow"}).content).read_all()
        json_b = [c for c in everything if c.get("table") == "b"]
        assert b.column("note").to_pylist() == [(c.get("after") or c["before"])["note"] for c in json_b]


@pg
def test_splits_and_tables(captured: Captured) -> None:
    feed = captured.feed
    with httpx.Client(base_url=captured.base, timeout=30) as client:
        everything, _ = _page_all(client, feed, limit=1000)
        head = everything[-1]["commit_lsn"]
        for n in (1, 2, 4):
            bounds = client.get(f"/v1/feeds/{feed}/splits", params={"n": n}).json()["boundaries"]
            assert bounds[0] == "0/0" and bounds[-1] == head and 2 <= len(bounds) <= n + 1
            cursors = [_cursor(b) for b in bounds]
            assert cursors == sorted(set(cursors))  # strictly ascending
            parts = []
            for low, high in itertools.pairwise(bounds):
                part = client.get(f"/v1/feeds/{feed}/changes",
                                  params={"after": low, "to": high, "limit": 1000}).json()
                assert not part["has_more"] and part["changes"]
                parts.append(part["changes"])
            assert [c for p in parts for c in p] == everything  # the parts tile the range
        inner = client.get(f"/v1/feeds/{feed}/splits",
                           params={"from": everything[0]["commit_lsn"], "to": head, "n": 3}).json()
        assert inner["boundaries"][0] == everything[0]["commit_lsn"] and inner["boundaries"][-1] == head
        _error(client.get(f"/v1/feeds/{feed}/splits", params={"from": head, "to": "0/1"}), 400)

        tables = {t["name"]: t for t in client.get(f"/v1/feeds/{feed}/tables").json()["tables"]}
        assert set(tables) == {"public.a", "public.b", "public.c"}
        cols = {c["name"]: c for c in tables["public.a"]["columns"]}
        assert [(n, c["type_name"], c["type_oid"], c["key"]) for n, c in cols.items()] == \
            [("id", "int4", 23, True), ("v", "int4", 23, False), ("s", "text", 25, False)]
        assert tables["public.b"]["replica_identity"] == "full"
        assert all(c["key"] for c in tables["public.b"]["columns"])  # FULL: every column
        c_table = tables["public.c"]
        assert [v["version"] for v in c_table["versions"]] == [1, 2]
        assert [c["name"] for c in c_table["versions"][0]["columns"]] == ["id", "doc", "at", "n", "flag"]
        assert [c["name"] for c in c_table["columns"]] == ["id", "doc", "at", "n", "flag", "extra"]
        assert [c["type_name"] for c in c_table["columns"]] == \
            ["int8", "jsonb", "timestamptz", "numeric", "bool", "text"]
        assert parse_lsn(c_table["valid_from"]) > parse_lsn(c_table["versions"][0]["valid_from"])


@pg
def test_named_consumers(captured: Captured) -> None:
    feed = captured.feed
    with httpx.Client(base_url=captured.base, timeout=30) as client:
        everything, _ = _page_all(client, feed, limit=1000)
        early, later = f"{everything[3]['commit_lsn']}:{everything[3]['seq']}", everything[-5]["commit_lsn"]
        path = f"/v1/feeds/{feed}/consumers"
        assert client.get(f"{path}/reporting").status_code == 404
        assert _error(client.get(f"{path}/reporting"), 404)["code"] == "consumer_not_found"

        put = client.put(f"{path}/reporting", json={"cursor": early})
        shown = {"name", "cursor", "lag_bytes", "acked_at", "expires_at"}
        assert put.status_code == 200 and set(put.json()) == shown
        assert {k: put.json()[k] for k in ("name", "cursor")} == {"name": "reporting", "cursor": early}
        assert client.get(f"{path}/reporting").json() == put.json()
        assert client.put(f"{path}/reporting", json={"cursor": later}).json()["cursor"] == later
        # Never backward: an older acknowledgement keeps the newer cursor.
        assert client.put(f"{path}/reporting", json={"cursor": early}).json()["cursor"] == later
        assert client.put(f"{path}/other.app-2", json={"cursor": "latest"}).json()["cursor"] == \
            everything[-1]["commit_lsn"]
        listed = client.get(path).json()["consumers"]
        assert {"name": "reporting", "cursor": later} in \
            [{"name": c["name"], "cursor": c["cursor"]} for c in listed] and len(listed) >= 2

        assert "16/B374D848" in _error(client.put(f"{path}/reporting", json={"cursor": "yesterday"}),
                                       400)["message"]
        assert _error(client.put(f"{path}/reporting", json={"cursor": "FFFFFFFF/0"}), 400)["code"] == \
            "cursor_ahead"
        _error(client.put(f"{path}/reporting", json={}), 422)
        _error(client.put(f"{path}/reporting", json={"cursor": later, "extra": 1}), 422)
        _error(client.put(f"{path}/bad%20name", json={"cursor": later}), 400)
        _error(client.put("/v1/feeds/no_such_feed/consumers/reporting", json={"cursor": later}), 404)
        assert client.get(f"{path}/reporting").json()["cursor"] == later  # refusals changed nothing


# -- long-poll --------------------------------------------------------------------------------------

class _Poll(threading.Thread):
    """A long-poll request on a thread; when it answered and what."""

    def __init__(self, base: str, feed: str, **params: Any) -> None:
        super().__init__(daemon=True)
        self.url = f"{base}/v1/feeds/{feed}/changes"
        self.params = params
        self.answered_at = 0.0
        self.response: httpx.Response | None = None

    def run(self) -> None:
        self.response = httpx.get(self.url, params=self.params, timeout=60)
        self.answered_at = time.monotonic()


def _waiting(service: Service, feed: str, n: int = 1) -> None:
    """Until ``n`` requests are parked on the feed's head notifier (long-polling)."""
    notifier = service.supervisor.notifier(feed)
    wait_until(lambda: notifier.waiting() >= n, 10, "the long-poll to be waiting")


@pg
def test_long_poll_answers_right_after_a_commit(make_served_feed: FeedFactory, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE lp (id int PRIMARY KEY); CREATE TABLE other (id int PRIMARY KEY)")
    name = make_served_feed(pg_dsn, tables=("public.lp", "public.other"))
    service = make_served_feed.service
    head = httpx.get(f"{service.http_url}/v1/feeds/{name}/changes", params={"after": "latest"},
                     timeout=30).json()["next"]

    # Nothing comes: the request waits `wait` seconds, then an empty page at the same cursor.
    started = time.monotonic()
    idle = httpx.get(f"{service.http_url}/v1/feeds/{name}/changes",
                     params={"after": head, "wait": 0.4}, timeout=30).json()
    assert time.monotonic() - started >= 0.38
    assert idle["changes"] == [] and idle["next"] == head and not idle["has_more"]

    # A commit while the request waits: answered at once.
    poll = _Poll(service.http_url, name, after=head, wait=10)
    poll.start()
    _waiting(service, name)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO lp VALUES (1)")
        committed = time.monotonic()
    poll.join(15)
    assert poll.response is not None and poll.response.status_code == 200
    page = poll.response.json()
    assert [(c["table"], c["after"]) for c in page["changes"]] == [("lp", {"id": 1})]
    latency = poll.answered_at - committed
    assert latency < 0.5, f"long-poll answered {latency * 1000:.0f} ms after the commit"

    # A reader that has reached `to` has nothing to wait for: answered at once.
    for to in (page["next"], "latest", "0/10"):
        started = time.monotonic()
        done = httpx.get(f"{service.http_url}/v1/feeds/{name}/changes",
                         params={"after": page["next"], "to": to, "wait": 10}, timeout=30).json()
        assert time.monotonic() - started < 1.0, to
        assert done["changes"] == [] and done["next"] == page["next"] and not done["has_more"]

    # With a filter, a commit the filter drops does not end the wait; the next matching one
    # does, and the answer's cursor is past both.
    poll = _Poll(service.http_url, name, after=page["next"], wait=10, tables="public.lp")
    poll.start()
    _waiting(service, name)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO other VALUES (1)")
    make_served_feed.caught_up(name, pg_dsn)
    _waiting(service, name)  # woken by the filtered-out commit, and waiting again
    assert poll.response is None
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO lp VALUES (2)")
        committed = time.monotonic()
    poll.join(15)
    assert poll.response is not None
    filtered = poll.response.json()
    assert [c["after"] for c in filtered["changes"]] == [{"id": 2}]
    assert filtered["next"] == filtered["changes"][0]["commit_lsn"] == filtered["head"]
    assert poll.answered_at - committed < 0.5


# -- admin ------------------------------------------------------------------------------------------

def _slot(dsn: str, slot: str) -> tuple[Any, ...] | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT plugin, database, active FROM pg_replication_slots "
                            "WHERE slot_name = %s", (slot,)).fetchone()


def _publication(dsn: str, publication: str) -> tuple[bool, list[str]] | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pubviaroot FROM pg_publication WHERE pubname = %s",
                           (publication,)).fetchone()
        if row is None:
            return None
        tables = conn.execute("SELECT schemaname || '.' || tablename FROM pg_publication_tables "
                              "WHERE pubname = %s ORDER BY 1", (publication,)).fetchall()
    return bool(row[0]), [t[0] for t in tables]


@pg
def test_admin_lifecycle_on_a_real_source(pgfeed_service: Service, pg_dsn: str) -> None:
    secret = "Pw-only-the-service-knows-7"
    dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, total numeric)")
        conn.execute("CREATE TABLE items (id int PRIMARY KEY)")
        server_version = conn.info.server_version
    name = f"adm_{dbname}"
    bodies: list[str] = []
    with httpx.Client(base_url=pgfeed_service.http_url, timeout=30,
                      event_hooks={"response": [lambda r: r.read()]}) as client:

        def call(method: str, path: str, **kw: Any) -> httpx.Response:
            response = client.request(method, path, **kw)
            bodies.append(response.text)
            return response

        created = call("POST", "/v1/feeds", json={
            "name": name, "dsn": f"{pg_dsn} password={secret}", "tables": ["public.orders"],
            "options": {"heartbeat_seconds": 1, "toast": "omit"}})
        assert created.status_code == 201, created.text
        assert created.headers["Location"] == f"/v1/feeds/{name}"
        feed = created.json()
        try:
            assert (feed["slot"], feed["publication"]) == (f"pgfeed_{name}", f"pgfeed_{name}")
            assert feed["owns_slot"] and feed["owns_publication"] and feed["tables"] == ["public.orders"]
            assert feed["options"]["toast"] == "omit" and feed["options"]["heartbeat_seconds"] == 1
            assert "password=***" in feed["source"] and f"dbname={dbname}" in feed["source"]
            # The source has what pgfeed created.
            assert _slot(pg_dsn, feed["slot"])[:2] == ("pgoutput", dbname)  # type: ignore[index]
            assert _publication(pg_dsn, feed["publication"]) == (True, ["public.orders"])

            wait_until(lambda: call("GET", f"/v1/feeds/{name}").json()["state"] == "running", 30,
                       "running")
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO orders VALUES (1, 9.99), (2, 0)")
            target = current_lsn(pg_dsn)
            status = wait_until(lambda: (s := call("GET", f"/v1/feeds/{name}").json())
                                and parse_lsn(s["confirmed_lsn"]) >= target and s, 30, "confirmed")
            assert status["state"] == "running" and status["last_error"] is None
            assert status["proto_version"] == (3 if server_version < 160000 else 4)
            assert parse_lsn(status["head_lsn"]) <= parse_lsn(status["confirmed_lsn"])
            assert parse_lsn(status["server_lsn"]) >= parse_lsn(status["confirmed_lsn"])
            assert status["lag_bytes"] == parse_lsn(status["server_lsn"]) - parse_lsn(status["confirmed_lsn"])
            assert status["lag_seconds"] is not None and status["lag_seconds"] >= 0
            assert status["changes_captured"] >= 2 and status["changes_per_second"] >= 0
            risk = status["slot_risk"]
            assert risk["wal_status"] in ("reserved", "extended") and risk["retained_bytes"] >= 0
            assert status["log"]["change_count"] == 2
            assert name in [f["name"] for f in call("GET", "/v1/feeds").json()["feeds"]]
            assert _error(call("POST", "/v1/feeds", json={"name": name, "dsn": pg_dsn,
                                                          "tables": ["public.orders"]}), 409)["code"]

            # Pause: capture stops (the slot goes idle) but the log stays readable; nothing
            # committed meanwhile is lost once resumed.
            paused = call("POST", f"/v1/feeds/{name}/pause")
            assert paused.status_code == 200 and paused.json()["state"] == "paused"
            wait_until(lambda: _slot(pg_dsn, feed["slot"])[2] is False, 30,  # type: ignore[index]
                       "the slot to be released")
            assert call("GET", f"/v1/feeds/{name}").json()["state"] == "paused"
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO orders VALUES (3, 1)")
            page = call("GET", f"/v1/feeds/{name}/changes").json()
            assert [c["after"]["id"] for c in page["changes"]] == [1, 2]
            resumed = call("POST", f"/v1/feeds/{name}/resume")
            assert resumed.status_code == 200 and resumed.json()["state"] in ("starting", "running")
            wait_until(lambda: [c["after"]["id"] for c in
                                call("GET", f"/v1/feeds/{name}/changes").json()["changes"]] == [1, 2, 3],
                       30, "the change committed while paused")
            assert call("GET", f"/v1/feeds/{name}").json()["state"] == "running"

            # An adopted publication and slot: used, never dropped.
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("CREATE PUBLICATION mine FOR TABLE items")
                conn.execute("SELECT pg_create_logical_replication_slot('mine_slot', 'pgoutput')")
            adopted = call("POST", "/v1/feeds", json={"name": f"{name}_adopted", "dsn": pg_dsn,
                                                      "publication": "mine", "slot": "mine_slot"})
            assert adopted.status_code == 201, adopted.text
            assert not adopted.json()["owns_slot"] and not adopted.json()["owns_publication"]
            deleted = call("DELETE", f"/v1/feeds/{name}_adopted")
            assert deleted.status_code == 204
            assert _slot(pg_dsn, "mine_slot") is not None and _publication(pg_dsn, "mine") is not None

            # A long-poll waiting on the feed when it is deleted answers 404 at once.
            head = call("GET", f"/v1/feeds/{name}/changes", params={"after": "latest"}).json()["next"]
            poll = _Poll(pgfeed_service.http_url, name, after=head, wait=20)
            poll.start()
            _waiting(pgfeed_service, name)
        finally:
            deleted = call("DELETE", f"/v1/feeds/{name}")
            deleted_at = time.monotonic()
            call("DELETE", f"/v1/feeds/{name}_adopted")  # already gone unless a check failed
        assert deleted.status_code == 204 and deleted.content == b""
        poll.join(30)
        assert poll.response is not None and _error(poll.response, 404)["code"] == "feed_not_found"
        assert poll.answered_at - deleted_at < 1.0
        # It dropped what it owned.
        assert _slot(pg_dsn, feed["slot"]) is None and _publication(pg_dsn, feed["publication"]) is None
        for method, path in (("GET", f"/v1/feeds/{name}"), ("DELETE", f"/v1/feeds/{name}"),
                             ("GET", f"/v1/feeds/{name}/changes"), ("POST", f"/v1/feeds/{name}/resume")):
            assert _error(call(method, path), 404)["code"] == "feed_not_found"
        assert name not in [f["name"] for f in call("GET", "/v1/feeds").json()["feeds"]]
        # A source that refuses: 422, and the password is not in the message either.
        refused = call("POST", "/v1/feeds", json={"name": f"{name}_x", "tables": ["public.orders"],
                                                  "dsn": f"{OFFLINE_DSN} password={secret}"})
        assert _error(refused, 422)
        missing = call("POST", "/v1/feeds", json={"name": f"{name}_y", "dsn": pg_dsn,
                                                  "tables": ["public.no_such_table"]})
        assert "no_such_table" in _error(missing, 422)["message"]
        assert _slot(pg_dsn, f"pgfeed_{name}_y") is None and _publication(pg_dsn, f"pgfeed_{name}_y") is None
        call("GET", "/metrics")
        call("GET", "/openapi.json")
    assert len(bodies) > 15 and not [b for b in bodies if secret in b]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('mine_slot')")


@pg
def test_two_phase_is_refused_where_the_source_lacks_it_creating_nothing(
        pgfeed_service: Service, any_pg_dsn: str) -> None:
    """two_phase needs pgoutput v3 (PostgreSQL 15): on 14 the feed is refused with a 422 that
    says so, before a publication or slot exists; on 15+ it is created (and its slot is)."""
    dsn = any_pg_dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE tp (id int PRIMARY KEY)")
        version = conn.info.server_version
    name = f"tp_{psycopg.conninfo.conninfo_to_dict(dsn)['dbname']}"
    with httpx.Client(base_url=pgfeed_service.http_url, timeout=30) as client:
        response = client.post("/v1/feeds", json={"name": name, "dsn": dsn, "tables": ["public.tp"],
                                                  "options": {"two_phase": True}})
        try:
            if version < 150000:
                error = _error(response, 422)
                assert error["code"] == "source_error"
                assert "two_phase needs PostgreSQL 15 or later" in error["message"], error
                assert "PostgreSQL 14." in error["message"], error
                assert _slot(dsn, f"pgfeed_{name}") is None
                assert _publication(dsn, f"pgfeed_{name}") is None
            else:
                assert response.status_code == 201, response.text
                with psycopg.connect(dsn, autocommit=True) as conn:
                    row = conn.execute("SELECT two_phase FROM pg_replication_slots "
                                       "WHERE slot_name = %s", (f"pgfeed_{name}",)).fetchone()
                assert row == (True,)
        finally:
            client.delete(f"/v1/feeds/{name}")


# -- errors -----------------------------------------------------------------------------------------

EXPECTED_FORM = "16/B374D848"  # every malformed-cursor message shows the expected form


@pg
def test_every_error_is_the_contract_json(captured: Captured) -> None:
    feed = captured.feed
    cases: list[tuple[str, str, dict[str, Any], int, str, str]] = [
        # method, path, request kwargs, status, code, text the message must contain
        ("GET", "changes", {"params": {"after": "16/zz"}}, 400, "invalid_cursor", EXPECTED_FORM),
        ("GET", "changes", {"params": {"after": "latest:3"}}, 400, "invalid_cursor", EXPECTED_FORM),
        ("GET", "changes", {"params": {"after": "0/10:-1"}}, 400, "invalid_cursor", EXPECTED_FORM),
        ("GET", "changes", {"params": {"after": "123456789/0"}}, 400, "invalid_cursor", EXPECTED_FORM),
        ("GET", "changes", {"params": {"after": ""}}, 400, "invalid_cursor", EXPECTED_FORM),
        ("GET", "changes", {"params": {"after": "0/1" * 30}}, 400, "invalid_cursor", EXPECTED_FORM),
        ("GET", "changes", {"params": {"to": "tomorrow"}}, 400, "invalid_cursor", EXPECTED_FORM),
        ("GET", "changes", {"params": {"after": "FFFF/0"}}, 400, "cursor_ahead", "past the feed's head"),
        ("GET", "changes", {"params": {"after": "FFFF/0", "wait": 1}}, 400, "cursor_ahead", "'earliest'"),
        ("GET", "transactions", {"params": {"after": "FFFF/0:3"}}, 400, "cursor_ahead", "past"),
        ("GET", "transactions", {"params": {"after": "x/y"}}, 400, "invalid_cursor", EXPECTED_FORM),
        ("GET", "splits", {"params": {"from": "0:0"}}, 400, "invalid_cursor", EXPECTED_FORM),
        ("GET", "changes", {"params": {"ops": "upsert"}}, 400, "invalid_parameter", "upsert"),
        ("GET", "changes", {"params": {"ops": "insert,"}}, 400, "invalid_parameter", "ops"),
        ("GET", "changes", {"params": {"tables": "public.a,,public.b"}}, 400, "invalid_parameter", "tables"),
        ("GET", "changes", {"params": {"tables": " "}}, 400, "invalid_parameter", "tables"),
        ("GET", "changes", {"params": {"limit": 0}}, 400, "invalid_parameter", "limit"),
        ("GET", "changes", {"params": {"limit": -3}}, 400, "invalid_parameter", "limit"),
        ("GET", "changes", {"params": {"limit": 100_001}}, 400, "invalid_parameter", "limit"),
        ("GET", "changes", {"params": {"limit": "ten"}}, 400, "invalid_parameter", "limit"),
        ("GET", "transactions", {"params": {"limit": 0}}, 400, "invalid_parameter", "limit"),
        ("GET", "transactions", {"params": {"max_changes": "many"}}, 400, "invalid_parameter", "max_changes"),
        ("GET", "changes", {"params": {"wait": "soon"}}, 400, "invalid_parameter", "wait"),
        ("GET", "changes", {"params": {"wait": -1}}, 400, "invalid_parameter", "wait"),
        ("GET", "changes", {"params": {"wait": "nan"}}, 400, "invalid_parameter", "wait"),
        ("GET", "changes", {"params": {"wait": 3600}}, 400, "invalid_parameter", "wait"),
        ("GET", "changes", {"params": {"format": "csv"}}, 400, "invalid_parameter", "format"),
        ("GET", "splits", {"params": {"n": 0}}, 400, "invalid_parameter", "n"),
        ("GET", "splits", {"params": {"n": "two"}}, 400, "invalid_parameter", "n"),
    ]
    for missing in ("changes", "transactions", "splits", "tables", "consumers", "consumers/x"):
        cases.append(("GET", f"/v1/feeds/no_such_feed/{missing}", {}, 404, "feed_not_found", "no_such_feed"))
    cases += [
        ("GET", "/v1/feeds/no_such_feed", {}, 404, "feed_not_found", "no_such_feed"),
        ("POST", "/v1/feeds/no_such_feed/pause", {}, 404, "feed_not_found", "no_such_feed"),
        ("POST", "/v1/feeds/no_such_feed/resume", {}, 404, "feed_not_found", "no_such_feed"),
        ("DELETE", "/v1/feeds/no_such_feed", {}, 404, "feed_not_found", "no_such_feed"),
        ("PATCH", "/v1/feeds/no_such_feed", {"json": {"tables": ["public.a"]}}, 404, "feed_not_found", ""),
        ("GET", "/v2/feeds", {}, 404, "not_found", "/v2/feeds"),
        ("POST", "/healthz", {}, 405, "method_not_allowed", "POST"),
        ("DELETE", "/v1/feeds/{feed}/changes", {}, 405, "method_not_allowed", "DELETE"),
    ]
    # Bad bodies on POST /v1/feeds: not JSON is 400, JSON of the wrong shape 422.
    post = "/v1/feeds"
    good = {"name": "fine_name", "dsn": OFFLINE_DSN, "tables": ["public.a"]}
    cases += [
        ("POST", post, {"content": b"{not json", "headers": {"content-type": "application/json"}},
         400, "invalid_json", "JSON"),
        ("POST", post, {"json": [good]}, 422, "invalid_body", "JSON object"),
        ("POST", post, {"json": {}}, 422, "invalid_body", "name"),
        ("POST", post, {"json": {**good, "name": "Bad Name"}}, 422, "invalid_body", "name"),
        ("POST", post, {"json": {**good, "all_tables": True}}, 422, "invalid_body", "all_tables"),
        ("POST", post, {"json": {**good, "tables": []}}, 422, "invalid_body", "tables"),
        ("POST", post, {"json": {**good, "tables": [" "]}}, 422, "invalid_body", "tables"),
        ("POST", post, {"json": {**good, "options": {"toast": "drop"}}}, 422, "invalid_body", "toast"),
        ("POST", post, {"json": {**good, "options": {"heartbeat_seconds": 0}}}, 422, "invalid_body",
         "heartbeat_seconds"),
        ("POST", post, {"json": {**good, "surprise": 1}}, 422, "invalid_body", "surprise"),
        ("POST", post, {"json": {**good, "dsn": ""}}, 422, "invalid_body", "dsn"),
        ("PATCH", "/v1/feeds/{feed}", {"json": {"tables": []}}, 422, "invalid_body", "tables"),
    ]
    with httpx.Client(base_url=captured.base, timeout=30) as client:
        for method, path, kwargs, status, code, text in cases:
            url = path.format(feed=feed) if path.startswith("/") else f"/v1/feeds/{feed}/{path}"
            error = _error(client.request(method, url, **kwargs), status)
            assert error["code"] == code, (method, url, kwargs, error)
            assert text in error["message"], (method, url, kwargs, error)
        # None of that changed the feed.
        assert client.get(f"/v1/feeds/{feed}").json()["state"] == "running"


# -- tokens -----------------------------------------------------------------------------------------

READ, ADMIN = "read-token-http-1", "admin-token-http-1"


@pg
def test_tokens_on_http_and_grpc(tmp_path: Path, pg_clusters: Clusters) -> None:
    cluster = pg_clusters.newest()
    dsn = create_database(cluster, prefix="tok")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    with run_service(tmp_path / "svc", read_tokens=[READ], admin_tokens=[ADMIN]) as service:
        feeds = FeedFactory(service)
        try:
            name = feeds(dsn, tables=("public.t",))
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO t VALUES (1)")
            feeds.caught_up(name, dsn)
            _check_http_tokens(service, name)
            _check_grpc_tokens(service, name)
        finally:
            feeds.delete_all()
            drop_slots(cluster, dsn)


def _check_http_tokens(service: Service, name: str) -> None:
    Call = tuple[str, str, dict[str, Any]]
    reads: list[Call] = [("GET", f"/v1/feeds/{name}/changes", {}), ("GET", f"/v1/feeds/{name}/transactions", {}),
             ("GET", f"/v1/feeds/{name}/splits", {}), ("GET", f"/v1/feeds/{name}/tables", {}),
             ("PUT", f"/v1/feeds/{name}/consumers/app", {"json": {"cursor": "0/0"}}),
             ("GET", f"/v1/feeds/{name}/consumers/app", {})]
    admin: list[Call] = [("GET", "/v1/feeds", {}), ("GET", f"/v1/feeds/{name}", {}),
             ("POST", "/v1/feeds", {"json": {"name": "sneaky", "dsn": OFFLINE_DSN, "tables": ["public.t"]}}),
             ("POST", f"/v1/feeds/{name}/pause", {}), ("DELETE", f"/v1/feeds/{name}", {}),
             ("PATCH", f"/v1/feeds/{name}", {"json": {"tables": ["public.t"]}}),
             ("DELETE", f"/v1/feeds/{name}/consumers/app", {}),
             ("POST", f"/v1/feeds/{name}/trim", {"json": {"before": "latest"}})]
    anonymous = {"Authorization": ""}
    with httpx.Client(base_url=service.http_url, timeout=30) as client:
        for method, path, kw in reads + admin:
            for headers in ({}, anonymous, {"Authorization": f"Basic {ADMIN}"},
                            {"Authorization": "Bearer wrong-token"}, {"Authorization": "Bearer"}):
                response = client.request(method, path, headers=headers, **kw)
                error = _error(response, 401)
                assert error["code"] == "unauthorized", (method, path, headers)
                assert response.headers["WWW-Authenticate"].startswith("Bearer"), (method, path)
            if (method, path, kw) in admin:
                refused = client.request(method, path, headers={"Authorization": f"Bearer {READ}"}, **kw)
                assert _error(refused, 403)["code"] == "forbidden", (method, path)
            else:
                ok = client.request(method, path, headers={"Authorization": f"Bearer {READ}"}, **kw)
                assert ok.status_code == 200, (method, path, ok.text)
        # The read token changed nothing an admin owns: the feed is there and running.
        as_admin = {"Authorization": f"bearer {ADMIN}"}  # the scheme is case-insensitive
        status = client.get(f"/v1/feeds/{name}", headers=as_admin)
        assert status.status_code == 200 and status.json()["state"] == "running"
        assert "sneaky" not in [f["name"] for f in client.get("/v1/feeds", headers=as_admin).json()["feeds"]]
        # Admin tokens read too.
        page = client.get(f"/v1/feeds/{name}/changes", headers=as_admin).json()
        assert [c["after"] for c in page["changes"]] == [{"id": 1}]
        # Probes and the API document stay open.
        for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
            assert client.get(path).status_code == 200, path
        spec = client.get("/openapi.json").json()
        assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def _check_grpc_tokens(service: Service, name: str) -> None:
    def subscribe_one(metadata: tuple[tuple[str, str], ...]) -> Any:
        call = stub.Subscribe(feed_pb2.SubscribeRequest(feed=name, cursor="earliest"),
                              metadata=metadata, timeout=10)
        try:
            return next(iter(call))
        finally:
            call.cancel()

    with grpc.insecure_channel(service.grpc_target) as channel:
        stub = feed_pb2_grpc.ChangeFeedStub(channel)
        for metadata in ((), (("authorization", "Bearer wrong"),), (("authorization", f"Basic {READ}"),),
                         (("authorization", "Bearer"),)):
            for call in (lambda md: subscribe_one(md),
                         lambda md: stub.ListFeeds(feed_pb2.ListFeedsRequest(), metadata=md, timeout=10),
                         lambda md: stub.GetFeed(feed_pb2.GetFeedRequest(name=name), metadata=md, timeout=10)):
                with pytest.raises(grpc.RpcError) as denied:
                    call(metadata)
                assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED, metadata
                assert "bearer" in (denied.value.details() or "").lower()
        for token in (READ, ADMIN):
            metadata = (("authorization", f"Bearer {token}"),)
            frame = subscribe_one(metadata)
            assert [c.after["id"].int_value for c in frame.changes] == [1] and frame.final
        # Feed status is administration on gRPC as on HTTP (pgfeed.access): read tokens are refused.
        as_reader = (("authorization", f"Bearer {READ}"),)
        for status_call in (lambda md: stub.ListFeeds(feed_pb2.ListFeedsRequest(), metadata=md, timeout=10),
                            lambda md: stub.GetFeed(feed_pb2.GetFeedRequest(name=name), metadata=md,
                                                    timeout=10)):
            with pytest.raises(grpc.RpcError) as denied:
                status_call(as_reader)
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "admin token" in (denied.value.details() or "")
        as_admin = (("authorization", f"Bearer {ADMIN}"),)
        assert [f.name for f in stub.ListFeeds(feed_pb2.ListFeedsRequest(), metadata=as_admin,
                                               timeout=10).feeds] == [name]
        assert stub.GetFeed(feed_pb2.GetFeedRequest(name=name), metadata=as_admin, timeout=10).name == name
        with httpx.Client(base_url=service.http_url, timeout=30) as client:  # the same rule on HTTP
            assert client.get(f"/v1/feeds/{name}", headers={"Authorization": f"Bearer {READ}"}).status_code == 403
        # Health stays open for probes.
        health = health_pb2_grpc.HealthStub(channel)
        answer = health.Check(health_pb2.HealthCheckRequest(service="pgfeed.v1.ChangeFeed"), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


# -- operations -------------------------------------------------------------------------------------

def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


@pg
def test_health_readiness_and_metrics(captured: Captured) -> None:
    feed = captured.feed
    with httpx.Client(base_url=captured.base, timeout=30) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").json() == {"status": "ready"}
        before = _samples(client.get("/metrics").text)
        served_key = ("pgfeed_served_changes_total", frozenset({("feed", feed), ("surface", "http")}))
        everything, pages = _page_all(client, feed, limit=10)
        metrics = client.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    after = _samples(metrics.text)  # parses as Prometheus text exposition
    assert after[served_key] - before.get(served_key, 0) == len(everything)
    latency = ("pgfeed_request_duration_seconds_count",
               frozenset({("surface", "http"), ("endpoint", "/v1/feeds/{feed}/changes")}))
    assert after[latency] - before.get(latency, 0) >= len(pages)
    # Per-feed gauges from the capture side, consistent with what was read.
    head = parse_lsn(everything[-1]["commit_lsn"])
    assert after[("pgfeed_feed_head_lsn", frozenset({("feed", feed)}))] == head
    assert after[("pgfeed_feed_confirmed_lsn", frozenset({("feed", feed)}))] >= head
    assert after[("pgfeed_log_changes", frozenset({("feed", feed)}))] == len(everything)
    assert after[("pgfeed_feed_state", frozenset({("feed", feed), ("state", "running")}))] == 1
