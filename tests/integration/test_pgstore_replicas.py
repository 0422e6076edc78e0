"""Replicas on the PostgreSQL store, what a user sees through any of them: the leader and its
capture counters in every replica's status (HTTP and gRPC), a capture that fails on its leader
handed to another replica (and not bounced back), a backfill started through a replica that does
not capture it run by the leader; ``pgfeed serve`` on the store with no data dir, and the
three-replica compose file. In process, on PostgreSQL 15 and 18, as test_pgstore.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import psycopg
import pytest
import yaml

from pgfeed.cli import build_parser
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.localpg import LocalCluster, free_port
from pgfeed.pgstore.store import PgStore
from pgfeed_proto.v1 import feed_pb2, feed_pb2_grpc
from tests.checkout import PYTHONPATH
from tests.fixtures.fix_pg import create_database, drop_slots
from tests.fixtures.fix_pgstore import SCHEMA, store_dsn
from tests.fixtures.fix_service import run_service, wait_until
from tests.integration.test_pgstore import create_feed, feed_json, insert, replica, wait_ids

pytestmark = pytest.mark.pg
ROOT = Path(__file__).resolve().parents[2]


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


def leader_of(service, feed: str = "f") -> str | None:
    return (feed_json(service, feed)["leader"] or {}).get("replica")


def test_every_replica_shows_the_leader_and_its_capture_counters(tmp_path, store, source):
    with replica(tmp_path, store, "a") as a:
        create_feed(a, source)
        insert(source, 1, 1)
        wait_ids(a, [1])
        with replica(tmp_path, store, "b") as b:  # joins later: a keeps the lease
            insert(source, 2, 99, per_txn=3)
            wait_ids(b, list(range(1, 101)))
            # The counters reach the store at the leader's next renewal (every second).
            status = wait_until(lambda: (s := feed_json(b))["changes_captured"] == 100 and s, 10,
                                "a's counters on b")
            assert status["leader"]["replica"] == "a" and status["counters_from"] == "a"
            assert status["counters_at"] is not None and status["state"] == "running"
            assert status["proto_version"] == feed_json(a)["proto_version"] is not None
            own = feed_json(a)
            assert own["counters_from"] == "a" and own["counters_at"] is None  # live, its own
            assert own["changes_captured"] == 100
            for service in (a, b):
                with grpc.insecure_channel(service.grpc_target) as channel:
                    msg = feed_pb2_grpc.ChangeFeedStub(channel).GetFeed(feed_pb2.GetFeedRequest(name="f"))
                assert msg.HasField("leader") and msg.leader.replica == "a"
                assert msg.leader.epoch == status["leader"]["epoch"] and msg.leader.since
                assert msg.counters_from == "a" and msg.changes_captured == 100


def test_a_capture_that_fails_on_its_leader_moves_to_another_replica(tmp_path, store, source):
    """Replica a cannot spill (its spill root is a file): its capture fails at every start. It
    gives the lease up and stays away (backoff); b takes the feed and captures everything; a,
    its backoff over, does not take the feed back while b holds it."""
    broken = tmp_path / "not-a-dir"
    broken.write_text("")
    supervisor = Supervisor(store=PgStore(store, replica_id="a", schema=SCHEMA, spill_root=broken),
                            replica_id="a")
    with run_service(tmp_path / "unused-a", supervisor) as a:
        create_feed(a, source)
        insert(source, 1, 10)
        failed = wait_until(lambda: (s := feed_json(a))["state"] == "failed" and s["leader"] is None
                            and s, 20, "a's capture to fail and give the lease up")
        assert "not-a-dir" in failed["last_error"]
        assert failed["counters_from"] == "a"
        assert a.supervisor.leadership.benched("f") > 0
        with replica(tmp_path, store, "b") as b:
            took = time.monotonic()
            wait_until(lambda: leader_of(b) == "b", 15, "b to take the feed")
            wait_ids(b, list(range(1, 11)))
            print(f"\nfailed capture handed over in {time.monotonic() - took:.1f} s")
            # b's state as it reports it at its renewals (every second)
            status = wait_until(lambda: (s := feed_json(a))["state"] == "running" and s, 5,
                                "a to show b's capture running")
            assert status["leader"]["replica"] == "b" and status["counters_from"] == "b"
            assert status["last_error"] is None  # b's capture is fine
            # a's backoff (10 s) runs out; b's live lease keeps the feed where it works.
            wait_until(lambda: a.supervisor.leadership.benched("f") == 0, 15, "a's backoff over")
            insert(source, 11, 10)
            wait_ids(a, list(range(1, 21)))
            time.sleep(2)
            assert leader_of(a) == "b" and leader_of(b) == "b"


def test_a_backfill_started_on_a_replica_that_does_not_capture_runs_on_the_leader(tmp_path, store, source):
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("INSERT INTO t SELECT g, 'old' FROM generate_series(1001, 1500) g")
    with replica(tmp_path, store, "a") as a:
        create_feed(a, source)
        insert(source, 1, 1)
        wait_ids(a, [1])
        with replica(tmp_path, store, "b") as b:
            assert leader_of(b) == "a"
            capture = a.supervisor._feeds["f"].thread  # the leader's capture thread
            r = httpx.post(f"{b.http_url}/v1/feeds/f/backfills",
                           json={"tables": ["public.t"], "chunk_rows": 100, "parallel": 2})
            assert r.status_code == 202, r.text
            backfill = r.json()["id"]

            def done():
                got = httpx.get(f"{b.http_url}/v1/feeds/f/backfills/{backfill}").json()
                return got if got["state"] == "done" else None

            got = wait_until(done, 30, "the backfill done by the leader")
            assert got["rows"] == 501
            assert a.supervisor._feeds["f"].thread is capture and capture.is_alive()  # no restart
            page = httpx.get(f"{b.http_url}/v1/feeds/f/changes", params={"after": "earliest",
                                                                         "limit": 5000}).json()
            read = sorted(c["after"]["id"] for c in page["changes"] if c["op"] == "read")
            assert read == [1, *range(1001, 1501)]
            assert a.supervisor.backfills("f").rows_stored == 501
            assert b.supervisor.backfills("f").rows_stored == 0


def test_one_table_cancelled_and_retried_on_a_replica_that_does_not_capture(tmp_path, store, source):
    """Issue 28.3 across replicas: the leader's workers follow a table's cancel (the others go
    on) and its retry, both asked of another replica."""
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("INSERT INTO t SELECT g, 'old' FROM generate_series(1, 3000) g")
        conn.execute("CREATE TABLE t2 (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t2 SELECT g, 'two' FROM generate_series(1, 2000) g")
    with replica(tmp_path, store, "a") as a:
        r = httpx.post(f"{a.http_url}/v1/feeds", json={
            "name": "g", "dsn": source, "tables": ["public.t", "public.t2"],
            "options": {"heartbeat_seconds": 1}})
        assert r.status_code == 201, r.text
        with replica(tmp_path, store, "b") as b:
            wait_until(lambda: leader_of(b, "g") == "a", 30, "a leading g")
            base = f"{b.http_url}/v1/feeds/g/backfills"
            r = httpx.post(base, json={"tables": ["public.t", "public.t2"], "chunk_rows": 100,
                                       "parallel": 1})
            assert r.status_code == 202, r.text
            backfill = r.json()["id"]
            r = httpx.delete(f"{base}/{backfill}/tables/public.t2")
            assert r.status_code == 200, r.text
            tables = {t["table"]: t for t in r.json()["tables"]}
            assert tables["public.t2"]["state"] == "cancelled" and r.json()["state"] == "running"

            def ended():
                got = httpx.get(f"{base}/{backfill}").json()
                return got if got["state"] != "running" else None

            got = wait_until(ended, 30, "the leader to finish public.t")
            tables = {t["table"]: t for t in got["tables"]}
            assert got["state"] == "cancelled", got
            assert tables["public.t"]["state"] == "done" and tables["public.t"]["rows"] == 3000
            assert tables["public.t2"]["rows"] == 0  # the leader's worker skipped it
            assert a.supervisor.backfills("g").rows_stored == 3000

            r = httpx.post(f"{base}/{backfill}/tables/public.t2/retry")
            assert r.status_code == 202, r.text
            got = wait_until(ended, 30, "the leader to read public.t2")
            assert got["state"] == "done" and [t["rows"] for t in got["tables"]] == [3000, 2000]
            assert a.supervisor.backfills("g").rows_stored == 5000
            assert b.supervisor.backfills("g").rows_stored == 0


def test_serve_on_the_store_needs_no_data_dir(tmp_path, store, source):
    """``pgfeed serve --store`` as a process whose data dir cannot exist (under a regular file)
    and whose working directory must stay empty: it captures and serves, and leaves nothing
    behind (its spill directory, under TMPDIR, is removed at exit)."""
    work, tmp = tmp_path / "cwd", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "PGFEED_STORE": store,
           "PGFEED_DATA_DIR": "/dev/null/pgfeed-data", "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-m", "pgfeed", "serve", "--data-dir", "/dev/null/x",
                             "--replica-id", "solo", "--http-port", str(port), "--grpc-port",
                             str(free_port())], cwd=work, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"

        def ready():
            try:
                return httpx.get(f"{url}/readyz").status_code == 200
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
                return False

        wait_until(ready, 30, "pgfeed serve to be ready")
        r = httpx.post(f"{url}/v1/feeds", json={"name": "f", "dsn": source, "tables": ["public.t"]})
        assert r.status_code == 201, r.text
        insert(source, 1, 5)
        wait_until(lambda: [c["after"]["id"] for c in httpx.get(f"{url}/v1/feeds/f/changes").json()["changes"]]
                   == [1, 2, 3, 4, 5], 60, "the changes served")
        assert list(tmp.iterdir()) != []  # the replica's spill root: a temporary directory
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        proc.stderr.close()  # type: ignore[union-attr]
    assert proc.returncode == 0
    assert list(work.iterdir()) == [] and list(tmp.iterdir()) == []


def test_the_compose_file_runs_three_stateless_replicas_behind_the_balancer():
    """deploy/compose.yaml: three ``pgfeed serve`` commands the CLI accepts, on the store,
    without a data dir, read-only, each behind both nginx upstreams (HTTP and gRPC)."""
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    nginx = (ROOT / "deploy" / "nginx.conf").read_text()
    replicas = {name: svc for name, svc in compose["services"].items() if name.startswith("pgfeed-")}
    assert len(replicas) == 3
    ids = set()
    for name, svc in replicas.items():
        assert svc["command"][:2] == ["pgfeed", "serve"]
        args = build_parser().parse_args(svc["command"][1:])
        assert args.data_dir is None and args.replica_id == name
        ids.add(args.replica_id)
        assert svc["read_only"] is True and svc["tmpfs"] == ["/tmp"]
        assert svc["environment"]["PGFEED_STORE"].startswith("postgresql://")
        assert f"server {name}:{args.http_port} " in nginx and f"server {name}:{args.grpc_port} " in nginx
    assert len(ids) == 3
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "deploy/compose.yaml" in dockerfile
