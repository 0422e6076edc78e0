"""Leader failover between ``pgfeed serve`` processes sharing the PostgreSQL store.

The full scenario (last test): three replicas, the leader SIGKILLed five times and then
SIGSTOPped past its lease, an HTTP and a gRPC subscriber moving between replicas as they fail;
both must see exactly what test_decoding reports for the same WAL.

Two replicas, a workload committing all along. The leader is SIGKILLed: the other takes the
lease and goes on capturing (the time from the kill to its first append is measured, target
<= 10 s). The killed one comes back as a standby; the new leader is then SIGSTOPped for longer
than its lease, taken over, and SIGCONTed: it must never write again (fencing). At the end the
log must hold every committed change exactly once: replaying it gives the source table.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import httpx
import psycopg
import pytest
from psycopg import sql

from pgfeed.feeds.model import FeedOptions, FeedSpec
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.pgstore.store import PgStore
from pgfeed_proto.v1 import feed_pb2, feed_pb2_grpc
from tests.checkout import PYTHONPATH
from tests.fixtures.fix_pg import create_database, drop_slots
from tests.fixtures.fix_pgstore import SCHEMA, store_dsn
from tests.integration.capture_helpers import MARKER_PREFIX, data_changes, read_all, wait_until

pytestmark = [pytest.mark.pg, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TAKEOVER_TARGET = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Replica:
    """A ``pgfeed serve`` process on the store, with no data dir option at all."""

    def __init__(self, store: str, replica_id: str, log_dir: Path) -> None:
        self.id = replica_id
        self.http_port, self.grpc_port = free_port(), free_port()
        env = {**os.environ, "PYTHONPATH": PYTHONPATH, "PGFEED_STORE": store}
        self.stderr = open(log_dir / f"{replica_id}.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pgfeed", "serve", "--replica-id", replica_id, "--http-port",
             str(self.http_port), "--grpc-port", str(self.grpc_port)],
            env=env, stdout=subprocess.DEVNULL, stderr=self.stderr, cwd=log_dir)

    def kill(self, sig: signal.Signals) -> None:
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        self.stderr.close()


def store_query(store: str, query: str, *args: object) -> list[tuple]:
    with psycopg.connect(store, autocommit=True) as conn:
        return conn.execute(sql.SQL(query).format(s=sql.Identifier(SCHEMA)), args).fetchall()  # type: ignore[arg-type]


def lease(store: str) -> tuple[str, int] | None:
    rows = store_query(store, "SELECT holder, epoch FROM {s}.lease WHERE feed = 'f' AND expires_at > now()")
    return rows[0] if rows else None


def appended_by(store: str, epoch: int) -> int:
    return store_query(store, "SELECT count(*) FROM {s}.txn WHERE feed = 'f' AND epoch = %s", epoch)[0][0]


def workload(dsn: str, stop: threading.Event, committed: list[int]) -> None:
    rng = random.Random(7)
    next_id = 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            with conn.transaction():
                n = rng.choice([1, 3, 20])
                conn.execute("INSERT INTO c SELECT g, 0 FROM generate_series(%s::int, %s::int) g",
                             (next_id, next_id + n - 1))
                next_id += n
                conn.execute("UPDATE c SET v = v + 1 WHERE id %% 5 = %s", (rng.randrange(5),))
                conn.execute("DELETE FROM c WHERE id %% 11 = %s AND id < %s", (rng.randrange(11), next_id - 50))
            committed.append(next_id)
            time.sleep(rng.uniform(0.005, 0.02))


def take_over(store: str, old: tuple[str, int], since: float) -> tuple[str, int, float]:
    """Wait for another replica's first append under a newer epoch; (holder, epoch, seconds)."""
    def moved():
        now = lease(store)
        return now if now and now[1] > old[1] and appended_by(store, now[1]) > 0 else None

    holder, epoch = wait_until(moved, 30, "another replica to take over and append")
    return holder, epoch, time.monotonic() - since


def test_leader_sigkill_and_sigstop_lose_duplicate_and_fence_nothing(pg_cluster, tmp_path):
    store = store_dsn(pg_cluster)
    source = create_database(pg_cluster, prefix="fosrc")
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE c (id int PRIMARY KEY, v int NOT NULL)")
    admin = Supervisor(store=PgStore(store, replica_id="admin", schema=SCHEMA), capture=False)
    admin.start()
    admin.create(FeedSpec(name="f", dsn=source, tables=("public.c",), options=FeedOptions(heartbeat_seconds=1, messages=True)))
    replicas = {r: Replica(store, r, tmp_path) for r in ("a", "b")}
    stop = threading.Event()
    committed: list[int] = []
    load = threading.Thread(target=workload, args=(source, stop, committed), daemon=True)
    try:
        first = wait_until(lambda: lease(store), 30, "a leader")
        load.start()
        wait_until(lambda: len(committed) > 50, 30, "the workload")
        wait_until(lambda: appended_by(store, first[1]) > 0 or None, 30, "the first append")

        # 1. SIGKILL the leader: the other replica takes over within the target.
        leader = replicas[first[0]]
        t0 = time.monotonic()
        leader.kill(signal.SIGKILL)
        holder, epoch, took = take_over(store, first, t0)
        assert holder != leader.id
        print(f"takeover after SIGKILL: {took:.2f} s")
        assert took <= TAKEOVER_TARGET
        leader.stop()
        replicas[leader.id] = Replica(store, leader.id, tmp_path)  # back, as a standby
        wait_until(lambda: len(store_query(store, "SELECT 1 FROM {s}.replica WHERE id = %s AND "
                                                  "heartbeat_at > now() - interval '2 s'", leader.id)),
                   30, "the restarted replica's heartbeat")

        # 2. SIGSTOP the new leader past its lease: taken over; SIGCONTed, it never writes again.
        paused = replicas[holder]
        t0 = time.monotonic()
        paused.kill(signal.SIGSTOP)
        try:
            new_holder, new_epoch, took2 = take_over(store, (holder, epoch), t0)
        finally:
            written = appended_by(store, epoch)
            paused.kill(signal.SIGCONT)
        assert new_holder != holder
        print(f"takeover after SIGSTOP: {took2:.2f} s")
        time.sleep(6)  # the woken replica's capture and leadership threads run again meanwhile
        assert paused.proc.poll() is None, "the paused replica died"
        assert appended_by(store, epoch) == written, "a deposed leader wrote after a takeover"
        assert lease(store) == (new_holder, new_epoch)
        r = httpx.get(f"http://127.0.0.1:{paused.http_port}/v1/feeds/f", timeout=10).json()
        assert r["leader"] == {"replica": new_holder, "epoch": new_epoch, "since": r["leader"]["since"]}

        # 3. Everything committed is in the log once.
        stop.set()
        load.join(30)
        with psycopg.connect(source, autocommit=True) as conn:
            conn.execute("SELECT pg_logical_emit_message(true, %s, 'end')", (MARKER_PREFIX,))
            expected = dict(conn.execute("SELECT id, v FROM c").fetchall())

        def marker_arrived():
            txns = read_all(admin, "f")
            return txns if any(c.prefix == MARKER_PREFIX for t in txns for c in t.changes) else None

        txns = wait_until(marker_arrived, 60, "the end marker in the log")
        lsns = [t.commit_lsn for t in txns]
        assert lsns == sorted(set(lsns))
        replayed: dict[int, int] = {}
        inserted: list[int] = []
        for _, change in data_changes(txns):
            if change.op == "insert":
                inserted.append(change.after["id"])
                assert change.after["id"] not in replayed
                replayed[change.after["id"]] = change.after["v"]
            elif change.op == "update":
                replayed[change.after["id"]] = change.after["v"]
            elif change.op == "delete":
                del replayed[change.key["id"]]
        assert len(inserted) == len(set(inserted)) == committed[-1] - 1  # every id, once
        assert replayed == expected
    finally:
        stop.set()
        for replica in replicas.values():
            if replica.proc.poll() is None:
                replica.kill(signal.SIGCONT)
            replica.stop()
        admin.stop()
        drop_slots(pg_cluster, source)


# -- the full scenario: three replicas, five SIGKILLs and a SIGSTOP, readers throughout ------------

_TD_LINE = re.compile(r"table public\.c: (INSERT|UPDATE|DELETE): id\[integer\]:(\d+)(?: v\[integer\]:(\d+))?")
_OPS = {feed_pb2.OP_INSERT: "INSERT", feed_pb2.OP_UPDATE: "UPDATE", feed_pb2.OP_DELETE: "DELETE"}


class Reader(threading.Thread):
    """A subscriber that does not care which replica it talks to: it follows the feed from its
    last cursor on one replica and moves to the next one when that one fails or stalls."""

    def __init__(self, replicas: dict[str, Replica], grpc_api: bool) -> None:
        super().__init__(daemon=True)
        self.replicas, self.grpc_api = replicas, grpc_api
        self.got: list[tuple[str, int, int | None]] = []
        self.marker = threading.Event()
        self.stop = threading.Event()
        self.cursor = "earliest"
        self.switches = 0

    def run(self) -> None:
        i = 0
        while not self.stop.is_set() and not self.marker.is_set():
            replica = list(self.replicas.values())[i % len(self.replicas)]
            try:
                (self._grpc if self.grpc_api else self._http)(replica)
            except (httpx.HTTPError, grpc.RpcError, AssertionError):
                i += 1
                self.switches += 1
                time.sleep(0.2)

    def _take(self, op: str, id_: int, v: int | None) -> None:
        self.got.append((op, id_, v))

    def _http(self, replica: Replica) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{replica.http_port}", timeout=8) as client:
            while not self.stop.is_set():
                r = client.get("/v1/feeds/f/changes", params={"after": self.cursor, "wait": 2, "limit": 500})
                assert r.status_code == 200, r.text
                page = r.json()
                for c in page["changes"]:
                    if c["op"] == "message" and c["prefix"] == MARKER_PREFIX:
                        self.marker.set()
                    elif c["op"] in ("insert", "update"):
                        self._take(c["op"].upper(), c["after"]["id"], c["after"]["v"])
                    elif c["op"] == "delete":
                        self._take("DELETE", c["key"]["id"], None)
                self.cursor = page["next"]
                if self.marker.is_set():
                    return

    def _grpc(self, replica: Replica) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{replica.grpc_port}") as channel:
            call = feed_pb2_grpc.ChangeFeedStub(channel).Subscribe(
                feed_pb2.SubscribeRequest(feed="f", cursor=self.cursor), timeout=600)
            stall = threading.Timer(8, call.cancel)  # a stopped replica sends nothing: move on
            stall.start()
            try:
                for frame in call:
                    stall.cancel()
                    for c in frame.changes:
                        if c.op == feed_pb2.OP_MESSAGE and c.prefix == MARKER_PREFIX:
                            self.marker.set()
                        elif c.op in (feed_pb2.OP_INSERT, feed_pb2.OP_UPDATE):
                            self._take(_OPS[c.op], c.after["id"].int_value, c.after["v"].int_value)
                        elif c.op == feed_pb2.OP_DELETE:
                            self._take("DELETE", c.key["id"].int_value, None)
                    self.cursor = frame.cursor
                    if self.marker.is_set() or self.stop.is_set():
                        call.cancel()
                        return
                    stall = threading.Timer(8, call.cancel)
                    stall.start()
            finally:
                stall.cancel()


def test_three_replicas_five_sigkills_and_a_sigstop_against_test_decoding(pg_cluster, tmp_path):
    store = store_dsn(pg_cluster)
    source = create_database(pg_cluster, prefix="fo5src")
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE c (id int PRIMARY KEY, v int NOT NULL)")
        conn.execute("SELECT pg_create_logical_replication_slot('reference', 'test_decoding')")
    admin = Supervisor(store=PgStore(store, replica_id="admin", schema=SCHEMA), capture=False)
    admin.start()
    admin.create(FeedSpec(name="f", dsn=source, tables=("public.c",), options=FeedOptions(heartbeat_seconds=1, messages=True)))
    replicas = {r: Replica(store, r, tmp_path) for r in ("r1", "r2", "r3")}
    readers = [Reader(replicas, grpc_api=False), Reader(replicas, grpc_api=True)]
    stop = threading.Event()
    committed: list[int] = []
    load = threading.Thread(target=workload, args=(source, stop, committed), daemon=True)
    takeovers: list[float] = []
    try:
        current = wait_until(lambda: lease(store), 30, "a leader")
        load.start()
        for reader in readers:
            reader.start()
        for _ in range(5):
            wait_until(lambda: appended_by(store, current[1]) > 0 or None, 30, "the leader appending")
            killed = replicas[current[0]]
            t0 = time.monotonic()
            killed.kill(signal.SIGKILL)
            holder, epoch, took = take_over(store, current, t0)
            takeovers.append(took)
            killed.stop()
            replicas[killed.id] = Replica(store, killed.id, tmp_path)
            current = (holder, epoch)
        paused = replicas[current[0]]
        t0 = time.monotonic()
        paused.kill(signal.SIGSTOP)
        try:
            holder, epoch, took = take_over(store, current, t0)
        finally:
            written = appended_by(store, current[1])
            paused.kill(signal.SIGCONT)
        time.sleep(6)
        assert appended_by(store, current[1]) == written, "a deposed leader wrote after a takeover"
        print("takeovers after SIGKILL (s):", " ".join(f"{t:.2f}" for t in takeovers),
              f"| after SIGSTOP: {took:.2f}")
        assert max(takeovers) <= TAKEOVER_TARGET
        stop.set()
        load.join(30)
        with psycopg.connect(source, autocommit=True) as conn:
            conn.execute("SELECT pg_logical_emit_message(true, %s, 'end')", (MARKER_PREFIX,))
        for reader in readers:
            assert reader.marker.wait(90), f"a reader ({'gRPC' if reader.grpc_api else 'HTTP'}) never got the end"
        with psycopg.connect(source) as conn:
            rows = conn.execute("SELECT data FROM pg_logical_slot_peek_changes('reference', NULL, NULL)").fetchall()
        reference = [(m.group(1), int(m.group(2)), int(m.group(3)) if m.group(3) else None)
                     for (line,) in rows if (m := _TD_LINE.match(line))]
        assert len(reference) > 1000
        for reader in readers:  # nothing lost, nothing twice, in order, whichever replicas served it
            assert reader.got == reference, "gRPC" if reader.grpc_api else "HTTP"
        print("reader replica switches: HTTP", readers[0].switches, "gRPC", readers[1].switches)
    finally:
        stop.set()
        for reader in readers:
            reader.stop.set()
        for replica in replicas.values():
            if replica.proc.poll() is None:
                replica.kill(signal.SIGCONT)
            replica.stop()
        admin.stop()
        drop_slots(pg_cluster, source)
