"""The HTTP read API end to end: a real `pgfeed serve` runtime on loopback capturing real
PostgreSQL 15 and 18, read with httpx exactly as a client would, checked against test_decoding
on the same WAL."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import psycopg
import pyarrow as pa
import pytest

from clients import parse_cursor
from tests.fixtures.fix_service import FeedFactory, Service, wait_until
from tests.fixtures.fix_testdecoding import group_units, peek_test_decoding

pytestmark = pytest.mark.pg

REF_SLOT = "ref_http"
SCHEMA = """
CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, s text);
CREATE TABLE u (id int PRIMARY KEY, note text);
"""


def _workload(dsn: str) -> None:
    """A transaction larger than a page, small ones, updates (one changing the key), deletes and
    a truncate, over two tables interleaved."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("INSERT INTO t SELECT g, g * 10, 'row ' || g FROM generate_series(1, 60) g")
        for i in range(1, 6):
            with conn.transaction():
                conn.execute("UPDATE t SET v = v + 1 WHERE id = %s", (i,))
                conn.execute("INSERT INTO u VALUES (%s, %s)", (i, f"note {i}"))
                conn.execute("DELETE FROM t WHERE id = %s", (60 - i,))
        conn.execute("UPDATE t SET id = 1000 WHERE id = 30")  # the key changes
        conn.execute("TRUNCATE u")
        conn.execute("INSERT INTO u VALUES (99, 'after truncate')")


@pytest.fixture
def feed(make_served_feed: FeedFactory, pg_dsn: str) -> tuple[str, str, str]:
    """(base_url, feed, dsn): a feed over t and u, with the workload captured, and a
    test_decoding slot that saw the same WAL."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (REF_SLOT,))
    name = make_served_feed(pg_dsn, tables=("public.t", "public.u"))
    _workload(pg_dsn)
    make_served_feed.caught_up(name, pg_dsn)
    return make_served_feed.service.http_url, name, pg_dsn


def _page_all(client: httpx.Client, feed: str, **params: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every change from earliest, page by page; also each page's envelope."""
    cursor, changes, pages = "earliest", [], []
    while True:
        response = client.get(f"/v1/feeds/{feed}/changes", params={"after": cursor, **params})
        assert response.status_code == 200, response.text
        page = response.json()
        pages.append(page)
        changes.extend(page["changes"])
        assert parse_cursor(page["next"]) >= parse_cursor(cursor)  # cursors never go back
        cursor = page["next"]
        if not page["has_more"]:
            return changes, pages


def _reference(dsn: str) -> list[tuple[str, str, Any]]:
    """(op, table, id) of every change test_decoding reports."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        units = group_units(peek_test_decoding(conn, REF_SLOT))
    out = []
    for unit in units:
        for c in unit.changes:
            if c.op == "truncate":
                out.append(("truncate", ",".join(c.tables or []), None))
            elif c.op in ("insert", "update", "delete"):
                row = c.new if c.op != "delete" else c.old
                ident = next(int(col.literal) for col in row or [] if col.name == "id")
                out.append((c.op, c.table or "", ident))
    return out


def _ours(changes: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
    out = []
    for c in changes:
        if c["op"] == "truncate":
            out.append(("truncate", ",".join(c["tables"]), None))
        else:
            row = c["after"] if c["op"] != "delete" else c["key"]
            out.append((c["op"], f"{c['schema']}.{c['table']}", row["id"]))
    return out


def test_small_pages_reassemble_exactly_what_was_committed(feed: tuple[str, str, str]) -> None:
    base, name, dsn = feed
    with httpx.Client(base_url=base, timeout=30) as client:
        changes, pages = _page_all(client, name, limit=7)
    positions = [(parse_cursor(c["commit_lsn"]).lsn, c["seq"]) for c in changes]
    assert len(positions) == len(set(positions)) and positions == sorted(positions)  # no duplicate
    by_txn: dict[int, list[int]] = {}
    for lsn, seq in positions:
        by_txn.setdefault(lsn, []).append(seq)
    assert all(seqs == list(range(len(seqs))) for seqs in by_txn.values())  # no gap inside one
    assert any(":" in p["next"] for p in pages)  # the 60-row transaction was split by seq
    assert all(len(p["changes"]) <= 7 for p in pages)
    assert _ours(changes) == _reference(dsn)
    key_change = next(c for c in changes if c["op"] == "update" and c["after"]["id"] == 1000)
    assert key_change["key"] == {"id": 30}  # the key as it was before the change
    last = pages[-1]
    assert last["next"] == last["head"] == changes[-1]["commit_lsn"]  # caught up at the head


def test_filters_never_break_cursor_continuity(feed: tuple[str, str, str]) -> None:
    base, name, _ = feed
    with httpx.Client(base_url=base, timeout=30) as client:
        everything, full_pages = _page_all(client, name, limit=5)
        only_u, u_pages = _page_all(client, name, limit=5, tables="public.u")
        deletes, d_pages = _page_all(client, name, limit=5, ops="delete,truncate")
    assert only_u == [c for c in everything if c["op"] == "truncate" or c["table"] == "u"]
    assert deletes == [c for c in everything if c["op"] in ("delete", "truncate")]
    # The filtered readers end at the same cursor as the unfiltered one: nothing skipped twice.
    assert u_pages[-1]["next"] == d_pages[-1]["next"] == full_pages[-1]["next"]
    assert any(not p["changes"] and p["has_more"] for p in u_pages)  # a page of only skipped changes


def test_transactions_arrow_splits_and_tables(feed: tuple[str, str, str]) -> None:
    base, name, _ = feed
    with httpx.Client(base_url=base, timeout=30) as client:
        everything, _ = _page_all(client, name, limit=1000)
        txns = client.get(f"/v1/feeds/{name}/transactions", params={"after": "earliest"}).json()
        assert [c for t in txns["transactions"] for c in t["changes"]] == everything
        assert all(len(t["changes"]) == t["change_count"] for t in txns["transactions"])

        arrow = client.get(f"/v1/feeds/{name}/changes",
                           params={"after": "earliest", "tables": "public.t", "format": "arrow"})
        assert arrow.headers["content-type"] == "application/vnd.apache.arrow.stream"
        table = pa.ipc.open_stream(arrow.content).read_all()
        json_t = [c for c in everything if c.get("table") == "t"]
        assert table.num_rows == len(json_t)
        assert table.column("_op").to_pylist() == [c["op"] for c in json_t]
        images = [c.get("after") or c.get("before") or c["key"] for c in json_t]  # deletes: old image
        assert table.column("v").to_pylist() == [img.get("v") for img in images]
        assert table.schema.field("id").type == pa.int32() and table.schema.field("s").type == pa.string()
        assert arrow.headers["PgFeed-Next"] == client.get(
            f"/v1/feeds/{name}/changes", params={"after": "earliest", "tables": "public.t"}).json()["next"]

        bounds = client.get(f"/v1/feeds/{name}/splits", params={"n": 3}).json()["boundaries"]
        assert bounds[0] == "0/0" and bounds[-1] == everything[-1]["commit_lsn"] and 2 <= len(bounds) <= 4
        assert [parse_cursor(b) for b in bounds] == sorted(parse_cursor(b) for b in bounds)

        tables = {t["name"]: t for t in client.get(f"/v1/feeds/{name}/tables").json()["tables"]}
        cols = {c["name"]: c for c in tables["public.t"]["columns"]}
        assert cols["id"]["key"] and not cols["v"]["key"]
        assert (cols["id"]["type_name"], cols["s"]["type_name"]) == ("int4", "text")


def test_long_poll_answers_within_milliseconds_of_a_commit(feed: tuple[str, str, str]) -> None:
    base, name, dsn = feed
    with httpx.Client(base_url=base, timeout=30) as client:
        head = client.get(f"/v1/feeds/{name}/changes", params={"after": "latest"}).json()["next"]
        started = time.monotonic()
        idle = client.get(f"/v1/feeds/{name}/changes", params={"after": head, "wait": 0.5}).json()
        assert idle["changes"] == [] and idle["next"] == head and time.monotonic() - started >= 0.45

        result: dict[str, Any] = {}

        def poll() -> None:
            page = client.get(f"/v1/feeds/{name}/changes", params={"after": head, "wait": 20}).json()
            result["at"], result["page"] = time.monotonic(), page

        poller = threading.Thread(target=poll)
        poller.start()
        time.sleep(0.5)  # the request is waiting
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO t VALUES (5000, 1, 'live')")
            committed = time.monotonic()
        poller.join(25)
    assert [c["after"]["id"] for c in result["page"]["changes"]] == [5000]
    latency = result["at"] - committed
    assert latency < 0.5, f"long-poll answered {latency * 1000:.0f} ms after the commit"


def test_named_consumers_round_trip(feed: tuple[str, str, str]) -> None:
    base, name, _ = feed
    with httpx.Client(base_url=base, timeout=30) as client:
        cursor = client.get(f"/v1/feeds/{name}/changes", params={"limit": 3}).json()["next"]
        put = client.put(f"/v1/feeds/{name}/consumers/app", json={"cursor": cursor})
        assert put.status_code == 200 and put.json()["cursor"] == cursor
        assert client.get(f"/v1/feeds/{name}/consumers/app").json()["cursor"] == cursor
        assert client.get(f"/v1/feeds/{name}/consumers/nobody").status_code == 404
        bad = client.put(f"/v1/feeds/{name}/consumers/app", json={"cursor": "yesterday"})
        assert bad.status_code == 400 and "error" in bad.json()


# -- errors: the contract's JSON with the right status, never a 5xx ----------------------------------

@pytest.mark.parametrize(("path", "params", "status", "code_or_text"), [
    ("/v1/feeds/{feed}/changes", {"after": "16/zz"}, 400, "16/B374D848"),
    ("/v1/feeds/{feed}/changes", {"after": "0/10:-1"}, 400, "16/B374D848"),
    ("/v1/feeds/{feed}/changes", {"after": "earliest", "ops": "upsert"}, 400, "upsert"),
    ("/v1/feeds/{feed}/changes", {"after": "earliest", "limit": 0}, 400, "limit"),
    ("/v1/feeds/{feed}/changes", {"after": "earliest", "wait": "soon"}, 400, "wait"),
    ("/v1/feeds/{feed}/changes", {"after": "earliest", "format": "xml"}, 400, "format"),
    ("/v1/feeds/{feed}/splits", {"from": "0/20", "to": "0/10"}, 400, "before it starts"),
    ("/v1/feeds/no_such_feed/changes", {}, 404, "no_such_feed"),
    ("/v1/feeds/no_such_feed", {}, 404, "no_such_feed"),
])
def test_bad_input_gets_a_clear_error(feed: tuple[str, str, str], path: str, params: dict[str, Any],
                                      status: int, code_or_text: str) -> None:
    base, name, _ = feed
    response = httpx.get(base + path.format(feed=name), params=params, timeout=30)
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"])
    assert code_or_text in body["error"]["message"] or code_or_text == body["error"]["code"]
    assert "Traceback" not in response.text


def test_admin_bodies_are_validated(pgfeed_service: Service) -> None:
    with httpx.Client(base_url=pgfeed_service.http_url, timeout=30) as client:
        for body in ({}, {"name": "Bad Name!", "dsn": "x", "tables": ["public.t"]},
                     {"name": "ok", "dsn": "x", "tables": ["public.t"], "all_tables": True},
                     {"name": "ok", "dsn": "x"}):
            response = client.post("/v1/feeds", json=body)
            assert response.status_code in (400, 422), response.text
            assert set(response.json()["error"]) >= {"code", "message"}
        garbage = client.post("/v1/feeds", content=b"{not json", headers={"content-type": "application/json"})
        assert garbage.status_code in (400, 422) and "error" in garbage.json()


def test_passwords_never_leave_the_service(make_served_feed: FeedFactory, pg_dsn: str) -> None:
    secret = "pw-never-shown-42"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE p (id int PRIMARY KEY)")
    name = make_served_feed(f"{pg_dsn} password={secret}", tables=("public.p",))
    base = make_served_feed.service.http_url
    with httpx.Client(base_url=base, timeout=30) as client:
        shown = client.get(f"/v1/feeds/{name}").json()
        assert "password=***" in shown["source"] and "dbname=" in shown["source"]  # masked, still useful
        for path in (f"/v1/feeds/{name}", "/v1/feeds", "/metrics", "/openapi.json"):
            assert secret not in client.get(path).text, path
        refused = client.post("/v1/feeds", json={"name": "leaky", "tables": ["public.p"],
                                                 "dsn": f"host=/nonexistent port=1 dbname=x password={secret}"})
        assert refused.status_code == 422 and secret not in refused.text


def test_ops_endpoints(feed: tuple[str, str, str]) -> None:
    base, name, _ = feed
    with httpx.Client(base_url=base, timeout=30) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 200
        client.get(f"/v1/feeds/{name}/changes", params={"limit": 10})
        metrics = client.get("/metrics")
        assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
        text = metrics.text
        assert f'feed="{name}"' in text
        for metric in ("pgfeed_feed_changes", "pgfeed_feed_confirmed_lsn", "pgfeed_served_changes",
                       "pgfeed_request_duration_seconds"):
            assert metric in text, metric
        docs = client.get("/docs")
        assert docs.status_code == 200 and "openapi.json" in docs.text
        spec = client.get("/openapi.json").json()
        assert {"/v1/feeds", "/v1/feeds/{feed}/changes", "/v1/feeds/{feed}/splits"} <= set(spec["paths"])


def test_feed_status_reports_positions_lag_and_slot_risk(feed: tuple[str, str, str]) -> None:
    base, name, _ = feed
    status = httpx.get(f"{base}/v1/feeds/{name}", timeout=30).json()
    assert status["state"] == "running" and status["proto_version"] in (3, 4)
    assert parse_cursor(status["confirmed_lsn"]) >= parse_cursor(status["head_lsn"])
    assert status["lag_bytes"] is not None and status["lag_bytes"] >= 0
    assert status["slot_risk"]["wal_status"] in ("reserved", "extended")
    assert status["slot_risk"]["retained_bytes"] >= 0
    assert status["log"]["change_count"] > 60
    wait_until(lambda: httpx.get(f"{base}/v1/feeds/{name}", timeout=30).json()["changes_captured"] > 0,
               10, "captured counter")
