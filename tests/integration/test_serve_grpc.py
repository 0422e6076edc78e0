"""The gRPC surface end to end: generated stubs against a real `pgfeed serve` on loopback,
capturing real PostgreSQL 15 and 18. Replay then live tail with no gap at the hand-over, a large
transaction in bounded frames, resuming mid-transaction, filters, discovery, errors, health and
reflection, and the client library over the same feed."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import grpc
import httpx
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from pgfeed.v1 import feed_pb2, feed_pb2_grpc

from clients import FeedClient, GrpcFeedClient, format_lsn
from service.encoding.to_json import dumps
from tests.fixtures.fix_service import FeedFactory, current_lsn

pytestmark = pytest.mark.pg

FOUR_MIB = 4 << 20


class Subscription:
    """A Subscribe stream read on a thread; frames (or the error that ended it) in a queue."""

    def __init__(self, stub: Any, request: feed_pb2.SubscribeRequest) -> None:
        self.call = stub.Subscribe(request, timeout=180)
        self.frames: queue.Queue[Any] = queue.Queue()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            for frame in self.call:
                self.frames.put(frame)
        except grpc.RpcError as exc:
            self.frames.put(exc)

    def take(self, done: Callable[[list[Any]], bool], timeout: float = 60) -> list[Any]:
        got: list[Any] = []
        deadline = time.monotonic() + timeout
        while not done(got):
            item = self.frames.get(timeout=max(0.01, deadline - time.monotonic()))
            if isinstance(item, grpc.RpcError):
                raise item
            got.append(item)
        return got

    def close(self) -> None:
        self.call.cancel()


def finals(frames: list[Any]) -> int:
    return sum(1 for f in frames if f.final)


@pytest.fixture
def stub(make_served_feed: FeedFactory) -> Any:
    with grpc.insecure_channel(make_served_feed.service.grpc_target,
                               options=[("grpc.max_receive_message_length", FOUR_MIB)]) as channel:
        yield feed_pb2_grpc.ChangeFeedStub(channel)


def _http_positions(base: str, feed: str) -> list[tuple[int, int]]:
    with FeedClient(base) as client:
        return [(int(c.cursor.lsn), c.seq) for c in client.iter_changes(feed)]


def test_replay_then_live_tail_has_no_gap_at_the_hand_over(make_served_feed: FeedFactory, pg_dsn: str,
                                                          stub: Any) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE g (id int PRIMARY KEY, v int)")
    name = make_served_feed(pg_dsn, tables=("public.g",))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for i in range(30):
            conn.execute("INSERT INTO g VALUES (%s, 0), (%s, 0)", (2 * i, 2 * i + 1))
    make_served_feed.caught_up(name, pg_dsn)

    def writer() -> None:  # commits keep landing while the subscriber replays and hands over
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for i in range(30):
                conn.execute("UPDATE g SET v = v + 1 WHERE id = %s", (i,))
                time.sleep(0.01)

    sub = Subscription(stub, feed_pb2.SubscribeRequest(feed=name, cursor="earliest"))
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        frames = sub.take(lambda got: finals(got) >= 60)
    finally:
        thread.join()
        sub.close()
    got = [(f.commit_lsn, c.seq) for f in frames for c in f.changes]
    assert len(got) == len(set(got)) == 90  # 30 two-row inserts, 30 updates, each once
    assert got == _http_positions(make_served_feed.service.http_url, name)
    assert [f.commit_lsn for f in frames] == sorted(f.commit_lsn for f in frames)
    assert all(f.cursor == format_lsn(f.commit_lsn) for f in frames if f.final)
    live = [f for f in frames if f.changes and f.changes[0].op == feed_pb2.OP_UPDATE]
    assert {c.after["v"].int_value for f in live for c in f.changes} == {1}


def test_a_100k_row_transaction_comes_in_bounded_frames_and_resumes_mid_way(
        make_served_feed: FeedFactory, pg_dsn: str, stub: Any) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id int PRIMARY KEY, v text)")
    name = make_served_feed(pg_dsn, tables=("public.big",))
    start = format_lsn(current_lsn(pg_dsn))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO big SELECT g, repeat('x', 30) || g FROM generate_series(1, 100000) g")
    make_served_feed.caught_up(name, pg_dsn, timeout=120)

    sub = Subscription(stub, feed_pb2.SubscribeRequest(feed=name, cursor=start))
    try:
        frames = sub.take(lambda got: finals(got) >= 1, timeout=120)
    finally:
        sub.close()
    assert len(frames) > 1 and all(f.ByteSize() < FOUR_MIB for f in frames)
    assert {(f.xid, f.commit_lsn, f.end_lsn) for f in frames} == {(frames[0].xid, frames[0].commit_lsn,
                                                                   frames[0].end_lsn)}
    assert [f.final for f in frames] == [False] * (len(frames) - 1) + [True]
    seqs = [c.seq for f in frames for c in f.changes]
    assert seqs == list(range(100_000))

    # Resume from the cursor of a frame in the middle (LSN:seq): exactly the rest.
    middle = frames[len(frames) // 2]
    assert ":" in middle.cursor
    resumed = Subscription(stub, feed_pb2.SubscribeRequest(feed=name, cursor=middle.cursor))
    try:
        rest = resumed.take(lambda got: finals(got) >= 1, timeout=120)
    finally:
        resumed.close()
    assert [c.seq for f in rest for c in f.changes] == list(range(middle.changes[-1].seq + 1, 100_000))


def test_filters_discovery_and_errors(make_served_feed: FeedFactory, pg_dsn: str, stub: Any) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE fa (id int PRIMARY KEY); CREATE TABLE fb (id int PRIMARY KEY)")
    name = make_served_feed(pg_dsn, tables=("public.fa", "public.fb"))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for i in range(5):
            with conn.transaction():
                conn.execute("INSERT INTO fa VALUES (%s)", (i,))
                conn.execute("INSERT INTO fb VALUES (%s)", (i,))
        conn.execute("DELETE FROM fb WHERE id < 2")
    make_served_feed.caught_up(name, pg_dsn)
    head = httpx.get(f"{make_served_feed.service.http_url}/v1/feeds/{name}/changes",
                     params={"after": "latest"}, timeout=30).json()["next"]

    def collect(**filters: Any) -> list[tuple[str, str]]:
        sub = Subscription(stub, feed_pb2.SubscribeRequest(feed=name, **filters))
        try:  # every transaction ends with a final frame, filtered or not: read up to the head
            frames = sub.take(lambda got: bool(got) and got[-1].final and got[-1].cursor == head)
        finally:
            sub.close()
        return [(c.table, feed_pb2.Op.Name(c.op)) for f in frames for c in f.changes]

    assert collect(tables=["public.fb"]) == [("fb", "OP_INSERT")] * 5 + [("fb", "OP_DELETE")] * 2
    assert collect(ops=["delete"]) == [("fb", "OP_DELETE")] * 2

    feeds = stub.ListFeeds(feed_pb2.ListFeedsRequest(), timeout=10)
    assert name in [f.name for f in feeds.feeds]
    one = stub.GetFeed(feed_pb2.GetFeedRequest(name=name), timeout=10)
    assert one.name == name and one.state == "running"
    for call, code, text in [
        (lambda: stub.GetFeed(feed_pb2.GetFeedRequest(name="nope"), timeout=10), grpc.StatusCode.NOT_FOUND, "nope"),
        (lambda: next(iter(stub.Subscribe(feed_pb2.SubscribeRequest(feed="nope"), timeout=10))),
         grpc.StatusCode.NOT_FOUND, "nope"),
        (lambda: next(iter(stub.Subscribe(feed_pb2.SubscribeRequest(feed=name, cursor="0/xyz"), timeout=10))),
         grpc.StatusCode.INVALID_ARGUMENT, "16/B374D848"),
        (lambda: next(iter(stub.Subscribe(feed_pb2.SubscribeRequest(feed=name, ops=["upsert"]), timeout=10))),
         grpc.StatusCode.INVALID_ARGUMENT, "upsert"),
    ]:
        with pytest.raises(grpc.RpcError) as failure:
            call()
        assert failure.value.code() == code and text in (failure.value.details() or "")


def test_health_and_reflection(make_served_feed: FeedFactory) -> None:
    with grpc.insecure_channel(make_served_feed.service.grpc_target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "pgfeed.v1.ChangeFeed"):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        [response] = list(reflection.ServerReflectionInfo(iter([request]), timeout=10))
        names = {s.name for s in response.list_services_response.service}
        assert {"pgfeed.v1.ChangeFeed", "grpc.health.v1.Health"} <= names


def test_the_client_library_reads_the_same_feed_over_both_surfaces(make_served_feed: FeedFactory,
                                                                   pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE lib (id int PRIMARY KEY, at timestamptz, n numeric, tags text[])")
        conn.execute("INSERT INTO lib VALUES (1, '2026-11-22 10:00:00.5+02', 12.50, '{a,NULL}')")
        conn.execute("UPDATE lib SET n = 'NaN' WHERE id = 1")
        conn.execute("DELETE FROM lib")
    name = make_served_feed(pg_dsn, tables=("public.lib",))
    make_served_feed.caught_up(name, pg_dsn)  # created after the commits: nothing captured
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO lib VALUES (2, '2026-11-22 10:00:00.5+02', 12.50, '{a,NULL}')")
        conn.execute("UPDATE lib SET n = 7 WHERE id = 2")
    make_served_feed.caught_up(name, pg_dsn)
    service = make_served_feed.service
    with FeedClient(service.http_url) as http:
        over_http = list(http.iter_changes(name))
    with GrpcFeedClient(service.grpc_target) as rpc:
        over_grpc = []
        for txn in rpc.subscribe(name):
            over_grpc.extend(txn.changes)
            if len(over_grpc) >= len(over_http):
                break
    # gRPC values are typed (Decimal, aware datetime); HTTP values are the contract's JSON text.
    def as_json(row: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if row is None else json.loads(dumps(row))

    assert [(c.op, c.commit_lsn, c.seq, as_json(c.key), as_json(c.after)) for c in over_grpc] == \
        [(c.op, c.commit_lsn, c.seq, c.key, c.after) for c in over_http]
    assert isinstance(over_grpc[0].after["n"], Decimal) and over_grpc[0].after["at"].tzinfo is not None
    assert [c.op for c in over_http] == ["insert", "update"]
