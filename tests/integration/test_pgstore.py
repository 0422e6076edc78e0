"""Replicas on the PostgreSQL store, in process: real ``pgfeed serve`` runtimes (HTTP, gRPC,
capture, leadership) sharing one store database, capturing a real source, on PostgreSQL 15 and 18
(the store and the source on the same cluster, in different databases).

What must hold: capture lands in the store and any replica serves it; a replica restarted with no
data dir resumes without loss or duplicates; consumers and retention are cluster-wide; admin calls
on one replica (create, pause, resume, delete) take effect on the others; a live reader on a
replica that does not capture is woken through LISTEN/NOTIFY.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import psycopg
import pytest
from psycopg import sql

from pgfeed.localpg import LocalCluster
from pgfeed.pgstore.schema import SCHEMA_VERSION
from pgfeed.pgstore.store import PgStore
from pgfeed_client import parse_lsn
from pgfeed_proto.v1 import feed_pb2, feed_pb2_grpc
from tests.fixtures.fix_pg import create_database, drop_slots
from tests.fixtures.fix_pgstore import SCHEMA, store_dsn
from tests.fixtures.fix_service import Service, run_service, wait_until

pytestmark = pytest.mark.pg


@contextlib.contextmanager
def replica(tmp_path: Path, store: str, replica_id: str, **settings: Any) -> Iterator[Service]:
    """A ``pgfeed serve`` on the store; its data dir must stay unused (stateless replicas)."""
    data_dir = tmp_path / f"unused-{replica_id}"
    with run_service(data_dir, store=store, replica_id=replica_id, **settings) as service:
        yield service
    assert not data_dir.exists(), "a replica on the PostgreSQL store wrote to its data dir"


@pytest.fixture
def source(pg_cluster: LocalCluster) -> Iterator[str]:
    dsn = create_database(pg_cluster, prefix="src")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    yield dsn
    drop_slots(pg_cluster, dsn)


@pytest.fixture
def store(pg_cluster: LocalCluster) -> str:
    return store_dsn(pg_cluster)


def create_feed(service: Service, dsn: str, name: str = "f") -> None:
    r = httpx.post(f"{service.http_url}/v1/feeds", json={
        "name": name, "dsn": dsn, "tables": ["public.t"], "options": {"heartbeat_seconds": 1}})
    assert r.status_code == 201, r.text


def insert(dsn: str, first: int, count: int, per_txn: int = 1) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for start in range(first, first + count, per_txn):
            with conn.transaction():
                conn.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(%s::int, %s::int) g",
                             (start, min(start + per_txn, first + count) - 1))


def read_ids(service: Service, feed: str = "f") -> list[int]:
    """Every inserted id the feed serves, in order, paging from the start."""
    ids: list[int] = []
    cursor = "earliest"
    while True:
        r = httpx.get(f"{service.http_url}/v1/feeds/{feed}/changes", params={"after": cursor, "limit": 500})
        assert r.status_code == 200, r.text
        page = r.json()
        ids += [c["after"]["id"] for c in page["changes"] if c["op"] == "insert"]
        cursor = page["next"]
        if not page["has_more"]:
            return ids


def wait_ids(service: Service, expected: list[int], feed: str = "f", timeout: float = 60) -> None:
    wait_until(lambda: read_ids(service, feed) == expected, timeout, f"ids 1..{len(expected)} served")


def feed_json(service: Service, feed: str = "f") -> dict[str, Any]:
    r = httpx.get(f"{service.http_url}/v1/feeds/{feed}")
    assert r.status_code == 200, r.text
    return r.json()


def test_capture_into_the_store_and_restart_without_a_data_dir(tmp_path, store, source):
    with replica(tmp_path, store, "a") as a:
        create_feed(a, source)
        insert(source, 1, 50, per_txn=5)
        wait_ids(a, list(range(1, 51)))
        status = feed_json(a)
        assert status["state"] == "running" and status["leader"]["replica"] == "a"
        assert status["leader"]["epoch"] >= 1 and status["log"]["change_count"] == 50
        r = httpx.get(f"{a.http_url}/v1/replicas").json()
        assert [(x["id"], x["alive"], x["leads"]) for x in r["replicas"]] == [("a", True, ["f"])]
        epoch = status["leader"]["epoch"]
    insert(source, 51, 30)  # while no replica runs
    with replica(tmp_path, store, "a") as a:  # a restart: same id, the store is all it has
        insert(source, 81, 20, per_txn=10)
        wait_ids(a, list(range(1, 101)))
        assert feed_json(a)["leader"]["epoch"] > epoch
    with psycopg.connect(store) as conn:  # what the store holds, in its own schema
        version = conn.execute(sql.SQL("SELECT version FROM {}.meta").format(sql.Identifier(SCHEMA))).fetchone()
        assert version == (SCHEMA_VERSION,)


def test_admin_calls_and_consumers_reach_every_replica(tmp_path, store, source):
    with replica(tmp_path, store, "a") as a, replica(tmp_path, store, "b") as b:
        create_feed(b, source)
        wait_until(lambda: httpx.get(f"{a.http_url}/v1/feeds/f").status_code == 200, 15, "a sees f")
        insert(source, 1, 20)
        for service in (a, b):
            wait_ids(service, list(range(1, 21)))
        leader = feed_json(a)["leader"]["replica"]
        assert feed_json(b)["leader"]["replica"] == leader
        other = b if leader == "a" else a

        # A consumer acknowledged on one replica is read back on the other, and retention
        # (run on any replica) keeps what it has not acknowledged.
        r = httpx.put(f"{a.http_url}/v1/feeds/f/consumers/app", json={"cursor": "earliest"})
        assert r.status_code in (200, 204), r.text
        assert httpx.get(f"{b.http_url}/v1/feeds/f/consumers/app").json()["cursor"] == "0/0"
        head = feed_json(b)["head_lsn"]
        # (no trim endpoint yet: the log's trim, which any replica may run)
        assert b.supervisor.changelog("f").trim(parse_lsn(head)) == 0
        assert read_ids(a) == list(range(1, 21))  # nothing acknowledged: nothing trimmed
        httpx.put(f"{b.http_url}/v1/feeds/f/consumers/app", json={"cursor": head})
        assert a.supervisor.changelog("f").trim(parse_lsn(head)) > 0
        assert feed_json(b)["log"]["trimmed_lsn"] != "0/0"
        kept = read_ids(b)
        assert kept == list(range(kept[0], 21)) and kept[0] > 1 if kept else True
        first = kept[0] if kept else 21

        # Pause on the replica that does not lead: capture stops on the leader.
        assert httpx.post(f"{other.http_url}/v1/feeds/f/pause").status_code == 200
        wait_until(lambda: feed_json(a)["state"] == "paused" and feed_json(b)["state"] == "paused",
                   15, "paused everywhere")
        wait_until(lambda: feed_json(a)["leader"] is None, 15, "the lease released")
        insert(source, 21, 5)
        time.sleep(2)
        assert read_ids(a) == kept  # nobody captures a paused feed
        assert httpx.post(f"{other.http_url}/v1/feeds/f/resume").status_code == 200
        wait_ids(b, list(range(first, 26)), timeout=30)
        assert read_ids(a) == list(range(first, 26))

        # Delete on one replica: gone from the other, the slot dropped on the source.
        assert httpx.delete(f"{other.http_url}/v1/feeds/f").status_code == 204
        wait_until(lambda: httpx.get(f"{a.http_url}/v1/feeds/f").status_code == 404 and
                   httpx.get(f"{b.http_url}/v1/feeds/f").status_code == 404, 15, "deleted everywhere")
        with psycopg.connect(source) as conn:
            assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'pgfeed_f'"
                                ).fetchone() == (0,)


def test_a_live_reader_of_a_replica_that_does_not_capture_is_woken_by_notify(tmp_path, store, source):
    with replica(tmp_path, store, "a") as a:
        create_feed(a, source)
        insert(source, 1, 1)
        wait_ids(a, [1])
        with replica(tmp_path, store, "b", ) as b:  # joins later: a keeps the lease
            assert feed_json(b)["leader"]["replica"] == "a"
            head = feed_json(b)["head_lsn"]
            latencies = []
            for i in range(2, 7):
                started = time.monotonic()
                with httpx.Client(base_url=b.http_url, timeout=30) as client:
                    insert(source, i, 1)
                    r = client.get("/v1/feeds/f/changes", params={"after": head, "wait": 10})
                latencies.append(time.monotonic() - started)
                page = r.json()
                assert [c["after"]["id"] for c in page["changes"]] == [i]
                head = page["next"]
            # The poll fallback alone would take up to a second per wake-up.
            assert sorted(latencies)[len(latencies) // 2] < 0.5, latencies

            # gRPC on the same replica: a live subscription follows the head captured by a.
            with grpc.insecure_channel(b.grpc_target) as channel:
                stub = feed_pb2_grpc.ChangeFeedStub(channel)
                call = stub.Subscribe(feed_pb2.SubscribeRequest(feed="f", cursor=head), timeout=60)
                insert(source, 7, 3, per_txn=3)
                insert(source, 10, 1)
                got: list[int] = []
                for frame in call:
                    got += [c.after["id"].int_value for c in frame.changes]
                    if len(got) >= 4:
                        break
                call.cancel()
            assert got == [7, 8, 9, 10]

            # Splits (Spark) from the replica that does not capture.
            bounds = httpx.get(f"{b.http_url}/v1/feeds/f/splits", params={"n": 2}).json()["boundaries"]
            assert len(bounds) == 3 and bounds[-1] == feed_json(a)["head_lsn"]


def test_leases_spread_feeds_over_replicas_that_join_late(tmp_path, store, source):
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE u (id int PRIMARY KEY, v text)")
    with replica(tmp_path, store, "a") as a:
        create_feed(a, source, "f")
        r = httpx.post(f"{a.http_url}/v1/feeds", json={
            "name": "g", "dsn": source, "tables": ["public.u"], "options": {"heartbeat_seconds": 1}})
        assert r.status_code == 201, r.text
        wait_until(lambda: all((feed_json(a, n)["leader"] or {}).get("replica") == "a" for n in "fg"),
                   15, "a leads both")
        with replica(tmp_path, store, "b") as b:
            def spread():
                leads = {r["id"]: r["leads"] for r in httpx.get(f"{b.http_url}/v1/replicas").json()["replicas"]}
                return leads if sorted(leads.get("a", []) + leads.get("b", [])) == ["f", "g"] and \
                    len(leads.get("a", [])) == len(leads.get("b", [])) == 1 else None

            wait_until(spread, 30, "one feed each")
            insert(source, 1, 5)
            with psycopg.connect(source, autocommit=True) as conn:
                conn.execute("INSERT INTO u SELECT g, 'u' FROM generate_series(1, 3) g")
            wait_ids(b, [1, 2, 3, 4, 5], "f")
            wait_ids(a, [1, 2, 3], "g")


def test_toast_reselect_fills_on_a_replica_that_does_not_capture(tmp_path, store, source):
    body = "".join(str(i) for i in range(5000))  # TOASTed, incompressible enough
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, body text, n int)")
        conn.execute("ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL")
    with replica(tmp_path, store, "a") as a, replica(tmp_path, store, "b") as b:
        r = httpx.post(f"{a.http_url}/v1/feeds", json={
            "name": "d", "dsn": source, "tables": ["public.docs"],
            "options": {"heartbeat_seconds": 1, "toast": "reselect"}})
        assert r.status_code == 201, r.text
        with psycopg.connect(source, autocommit=True) as conn:
            conn.execute("INSERT INTO docs VALUES (1, %s, 0)", (body,))
            conn.execute("UPDATE docs SET n = 1 WHERE id = 1")
        reader = b if feed_json(a, "d")["leader"]["replica"] == "a" else a

        def update():
            page = httpx.get(f"{reader.http_url}/v1/feeds/d/changes", params={"after": "earliest"}).json()
            return next((c for c in page["changes"] if c["op"] == "update"), None)

        change = wait_until(update, 30, "the update served")
        assert change["after"]["body"] == body and change["toast_filled"] == ["body"]


def test_a_newer_store_schema_is_refused(pg_cluster):
    dsn = store_dsn(pg_cluster)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {}.meta SET version = %s").format(sql.Identifier(SCHEMA)),
                     (SCHEMA_VERSION + 1,))
    with pytest.raises(Exception, match=f"version {SCHEMA_VERSION + 1}, newer than this pgfeed"):
        PgStore(dsn, replica_id="x", schema=SCHEMA)
