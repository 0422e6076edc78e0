"""The gRPC surface end to end: the generated ``pgfeed.v1`` stubs against a real ``pgfeed serve``
on loopback capturing real PostgreSQL 15 and 18.

Replay then live tail with no gap and no duplicate at the hand-over, a 100,000-row transaction in
bounded frames, resuming from both cursor forms, filters (including a transaction whose filtered
tail closes with an empty final frame), discovery, every error status, health and reflection,
and the client library against the raw stubs. Channels keep gRPC's default 4 MiB receive limit,
so a frame over it would fail the stream.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import httpx
import psycopg
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from pgfeed_client import FeedClient, GrpcFeedClient, format_lsn, parse_lsn
from pgfeed_client import FeedNotFound as ClientFeedNotFound
from pgfeed_client import InvalidCursor as ClientInvalidCursor
from pgfeed_proto.v1 import feed_pb2, feed_pb2_grpc
from tests.fixtures.fix_service import FeedFactory, Service, wait_until

pytestmark = pytest.mark.pg

FOUR_MIB = 4 << 20
EXPECTED_FORM = "16/B374D848"  # every malformed-cursor message shows the expected form


class Subscription:
    """A Subscribe stream read on a thread; frames (or the error that ended it) in a queue, each
    with the time it arrived."""

    def __init__(self, stub: Any, request: feed_pb2.SubscribeRequest, timeout: float = 120) -> None:
        self.call = stub.Subscribe(request, timeout=timeout)
        self.frames: queue.Queue[tuple[float, Any]] = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for frame in self.call:
                self.frames.put((time.monotonic(), frame))
        except grpc.RpcError as exc:
            self.frames.put((time.monotonic(), exc))

    def take(self, done: Callable[[list[Any]], bool], timeout: float = 60) -> list[Any]:
        """Frames until ``done(frames so far)``."""
        return [f for _, f in self.take_timed(done, timeout)]

    def take_timed(self, done: Callable[[list[Any]], bool], timeout: float = 60) -> list[tuple[float, Any]]:
        got: list[tuple[float, Any]] = []
        deadline = time.monotonic() + timeout
        while not done([f for _, f in got]):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"stream: only {len(got)} frames after {timeout} s")
            try:
                at, item = self.frames.get(timeout=left)
            except queue.Empty:
                continue
            if isinstance(item, grpc.RpcError):
                raise item
            got.append((at, item))
        return got

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(10)


def finals(n: int) -> Callable[[list[Any]], bool]:
    return lambda frames: sum(1 for f in frames if f.final) >= n


def up_to(cursor: str) -> Callable[[list[Any]], bool]:
    return lambda frames: bool(frames) and frames[-1].final and frames[-1].cursor == cursor


def subscribe(stub: Any, done: Callable[[list[Any]], bool], timeout: float = 60, **request: Any) -> list[Any]:
    sub = Subscription(stub, feed_pb2.SubscribeRequest(**request))
    try:
        return sub.take(done, timeout)
    finally:
        sub.close()


def positions(frames: list[Any]) -> list[tuple[int, int]]:
    return [(f.commit_lsn, c.seq) for f in frames for c in f.changes]


@pytest.fixture
def stub(pgfeed_service: Service) -> Iterator[Any]:
    with grpc.insecure_channel(pgfeed_service.grpc_target) as channel:  # default 4 MiB limit
        yield feed_pb2_grpc.ChangeFeedStub(channel)


def _http_changes(base: str, feed: str, **params: Any) -> list[dict[str, Any]]:
    out, cursor = [], "earliest"
    with httpx.Client(base_url=base, timeout=30) as client:
        while True:
            page = client.get(f"/v1/feeds/{feed}/changes", params={"after": cursor, "limit": 5000, **params}).json()
            out.extend(page["changes"])
            cursor = page["next"]
            if not page["has_more"]:
                return out


def _head(base: str, feed: str) -> str:
    page = httpx.get(f"{base}/v1/feeds/{feed}/changes", params={"after": "latest"}, timeout=30).json()
    return str(page["head"])


def _served(base: str, feed: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{base}/metrics", timeout=30).text):
        for s in family.samples:
            if s.labels.get("feed") == feed and s.name in ("pgfeed_subscribers", "pgfeed_served_changes_total"):
                out[f"{s.name}:{s.labels.get('surface', '')}"] = s.value
    return out


# -- replay, live tail ------------------------------------------------------------------------------

def test_replay_then_live_tail_without_gap_or_duplicate(make_served_feed: FeedFactory, pg_dsn: str,
                                                        stub: Any) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE g (id int PRIMARY KEY, v int)")
    name = make_served_feed(pg_dsn, tables=("public.g",))
    base = make_served_feed.service.http_url
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for i in range(20):
            conn.execute("INSERT INTO g VALUES (%s, 0), (%s, 0)", (2 * i, 2 * i + 1))
    make_served_feed.caught_up(name, pg_dsn)

    stop = threading.Event()

    def writer() -> None:  # commits keep landing while the subscriber replays and hands over
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for i in range(20):
                conn.execute("UPDATE g SET v = v + 1 WHERE id = %s", (i,))
                if stop.wait(0.005):
                    return

    sub = Subscription(stub, feed_pb2.SubscribeRequest(feed=name, cursor="earliest"))
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        frames = sub.take(finals(40))  # 20 replayed inserts, 20 updates across the hand-over
        thread.join(30)
        # A second subscriber from `latest` gets only what is committed after it started.
        latest = Subscription(stub, feed_pb2.SubscribeRequest(feed=name, cursor="latest"))
        wait_until(lambda: _served(base, name).get("pgfeed_subscribers:") == 2, 10, "the subscriber gauge")
        # Caught up, the streams wait; a commit now arrives within a fraction of a second.
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO g VALUES (1000, 7)")
            committed = time.monotonic()
        [(arrived, live)] = sub.take_timed(finals(1), 30)
        assert latest.take(finals(1), 30) == [live]
        latest.close()
    finally:
        stop.set()
        thread.join(30)
        sub.close()
    frames.append(live)
    assert [(c.after["id"].int_value, c.after["v"].int_value) for c in live.changes] == [(1000, 7)]
    assert arrived - committed < 0.5, f"live change arrived {(arrived - committed) * 1000:.0f} ms late"

    got = positions(frames)
    assert len(got) == len(set(got)) == 40 + 20 + 1  # no duplicate
    assert got == [(parse_lsn(c["commit_lsn"]), c["seq"]) for c in _http_changes(base, name)]  # no gap
    assert [f.commit_lsn for f in frames] == sorted(f.commit_lsn for f in frames)
    assert all(f.final and f.cursor == format_lsn(f.commit_lsn) for f in frames)
    ids = [c.after["id"].int_value for f in frames for c in f.changes]
    assert ids == list(range(40)) + list(range(20)) + [1000]  # inserts, the updates in order, live
    wanted = {"pgfeed_subscribers:": 0, "pgfeed_served_changes_total:grpc": len(got) + 1}  # + latest
    wait_until(lambda: _served(base, name).items() >= wanted.items(), 10,
               "the subscriber gauge to drop and the served counter to count every change")


def test_deleting_a_feed_ends_its_live_streams_with_not_found(make_served_feed: FeedFactory, pg_dsn: str,
                                                               stub: Any) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE gone (id int PRIMARY KEY)")
    name = make_served_feed(pg_dsn, tables=("public.gone",))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO gone VALUES (1)")
    make_served_feed.caught_up(name, pg_dsn)
    base = make_served_feed.service.http_url
    sub = Subscription(stub, feed_pb2.SubscribeRequest(feed=name, cursor="earliest"))
    try:
        assert len(sub.take(finals(1))) == 1
        notifier = make_served_feed.service.supervisor.notifier(name)
        wait_until(lambda: notifier.waiting(), 10, "the stream to wait for commits")
        assert httpx.delete(f"{base}/v1/feeds/{name}", timeout=30).status_code == 204
        deleted = time.monotonic()
        with pytest.raises(grpc.RpcError) as ended:
            sub.take(finals(1), 30)
        assert time.monotonic() - deleted < 1.0  # not after the tail's 30 s wait
    finally:
        sub.close()
    assert ended.value.code() == grpc.StatusCode.NOT_FOUND and name in (ended.value.details() or "")


# -- a big transaction ------------------------------------------------------------------------------

def test_a_100k_row_transaction_in_bounded_frames_and_resuming_from_both_cursor_forms(
        make_served_feed: FeedFactory, pg_dsn: str, stub: Any) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id int PRIMARY KEY, v text)")
    name = make_served_feed(pg_dsn, tables=("public.big",))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO big VALUES (0, 'before')")
        conn.execute("INSERT INTO big SELECT g, repeat('x', 40) || g FROM generate_series(1, 100000) g")
        conn.execute("INSERT INTO big VALUES (-1, 'after')")
    make_served_feed.caught_up(name, pg_dsn, timeout=120)
    base = make_served_feed.service.http_url
    head = _head(base, name)

    frames = subscribe(stub, up_to(head), 120, feed=name, cursor="earliest")
    first, last = frames[0], frames[-1]
    assert len(first.changes) == len(last.changes) == 1 and first.final and last.final
    big = frames[1:-1]
    assert len(big) > 1 and all(f.ByteSize() < FOUR_MIB for f in big)
    assert {(f.xid, f.commit_lsn, f.end_lsn, f.commit_ts.ToMicroseconds()) for f in big} == \
        {(big[0].xid, big[0].commit_lsn, big[0].end_lsn, big[0].commit_ts.ToMicroseconds())}
    assert [f.final for f in big] == [False] * (len(big) - 1) + [True]
    changes = [c for f in big for c in f.changes]
    assert len(changes) == 100_000 and [c.seq for c in changes] == list(range(100_000))
    assert [c.after["id"].int_value for c in changes] == list(range(1, 100_001))
    lsn = format_lsn(big[0].commit_lsn)
    assert [f.cursor for f in big] == [f"{lsn}:{f.changes[-1].seq}" for f in big[:-1]] + [lsn]

    # Resume: after a frame in the middle (LSN:seq), after the transaction before (LSN), after
    # the big one itself (LSN): exactly the rest each time.
    middle = big[len(big) // 2]
    rest = subscribe(stub, up_to(head), 120, feed=name, cursor=middle.cursor)
    assert positions(rest) == positions(frames)[positions(frames).index((middle.commit_lsn,
                                                                         middle.changes[-1].seq)) + 1:]
    assert rest[0].changes[0].seq == middle.changes[-1].seq + 1
    odd = f"{lsn}:99987"  # a cursor no frame produced
    assert [c.seq for f in subscribe(stub, up_to(lsn), 120, feed=name, cursor=odd) for c in f.changes] == \
        list(range(99_988, 100_000))
    whole = subscribe(stub, up_to(head), 120, feed=name, cursor=first.cursor)
    assert positions(whole) == positions(frames)[1:]
    after_big = subscribe(stub, up_to(head), 30, feed=name, cursor=lsn)
    assert [[c.after["id"].int_value for c in f.changes] for f in after_big] == [[-1]]


def test_wide_rows_are_framed_by_size(make_served_feed: FeedFactory, pg_dsn: str, stub: Any) -> None:
    """Three 1.5 MB rows in one transaction: no frame may carry two of them (it would pass the
    4 MiB a default client accepts)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE wide (id int PRIMARY KEY, body text)")
    name = make_served_feed(pg_dsn, tables=("public.wide",))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO wide SELECT g, repeat(chr(96 + g), 1500000) FROM generate_series(1, 3) g")
    make_served_feed.caught_up(name, pg_dsn)
    frames = subscribe(stub, finals(1), 60, feed=name, cursor="earliest")
    assert len(frames) >= 2 and all(f.ByteSize() < FOUR_MIB for f in frames)
    assert [f.final for f in frames] == [False] * (len(frames) - 1) + [True]
    bodies = [c.after["body"].string_value for f in frames for c in f.changes]
    assert bodies == [chr(96 + g) * 1_500_000 for g in (1, 2, 3)]


# -- filters ----------------------------------------------------------------------------------------

def test_filters_match_the_http_filters_and_close_every_transaction(make_served_feed: FeedFactory,
                                                                     pg_dsn: str, stub: Any) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE fa (id int PRIMARY KEY); CREATE TABLE fb (id int PRIMARY KEY)")
    name = make_served_feed(pg_dsn, tables=("public.fa", "public.fb"))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for i in range(5):
            with conn.transaction():
                conn.execute("INSERT INTO fa VALUES (%s)", (i,))
                conn.execute("INSERT INTO fb VALUES (%s)", (i,))
        conn.execute("DELETE FROM fb WHERE id < 2")
        conn.execute("UPDATE fa SET id = id + 100 WHERE id = 4")
        # Ten rows of fa, then 15,000 of fb: a subscriber of fa gets the ten in a non-final
        # frame (the stream reads 10,000 changes a page), then an empty final frame.
        with conn.transaction():
            conn.execute("INSERT INTO fa SELECT g FROM generate_series(10, 19) g")
            conn.execute("INSERT INTO fb SELECT g FROM generate_series(10, 15009) g")
        conn.execute("TRUNCATE fb")
        conn.execute("INSERT INTO fb VALUES (1)")
    make_served_feed.caught_up(name, pg_dsn, timeout=60)
    base = make_served_feed.service.http_url
    head = _head(base, name)

    def both(**filters: Any) -> tuple[list[Any], list[tuple[int, int]]]:
        http = _http_changes(base, name, **{k: ",".join(v) for k, v in filters.items()})
        want = [(parse_lsn(c["commit_lsn"]), c["seq"]) for c in http]
        # A transaction the filter drops entirely sends no frame: read until every matching
        # change has come and its transaction is closed.
        frames = subscribe(stub, lambda got: len(positions(got)) >= len(want) and got[-1].final, 60,
                           feed=name, cursor="earliest", **filters)
        return frames, want

    for filters in ({"tables": ["public.fa"]}, {"tables": ["fb"]}, {"ops": ["delete", "update"]},
                    {"ops": ["truncate"]}, {"tables": ["public.fb"], "ops": ["insert"]}):
        frames, want = both(**filters)
        assert positions(frames) == want, filters
        assert frames[-1].cursor == format_lsn(want[-1][0])
    frames, _ = both(tables=["public.fb"])
    assert frames[-1].cursor == head

    frames, _ = both(tables=["public.fa"])
    mixed = [f for f in frames if f.commit_lsn == frames[-1].commit_lsn]
    assert [len(f.changes) for f in mixed] == [10, 0] and [f.final for f in mixed] == [False, True]
    assert mixed[-1].cursor == format_lsn(mixed[-1].commit_lsn)
    assert [feed_pb2.Op.Name(c.op) for f in frames for c in f.changes][:7] == ["OP_INSERT"] * 5 + \
        ["OP_UPDATE", "OP_INSERT"]
    truncates = [c for f in both(ops=["truncate"])[0] for c in f.changes]
    assert [(list(c.tables), dict(c.options)) for c in truncates] == \
        [(["public.fb"], {"cascade": False, "restart_identity": False})]


def test_a_stream_whose_filters_leave_everything_out_reports_progress(
        make_served_feed: FeedFactory, pg_dsn: str, stub: Any) -> None:
    """A subscriber of a quiet table, while another table is busy, still hears how far the feed
    got (an empty final frame at most once a second), and resuming there skips what it passed."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE quiet (id int PRIMARY KEY); CREATE TABLE busy (id int PRIMARY KEY)")
    name = make_served_feed(pg_dsn, tables=("public.quiet", "public.busy"))
    sub = Subscription(stub, feed_pb2.SubscribeRequest(feed=name, cursor="latest", tables=["public.quiet"]))
    try:
        started = time.monotonic()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for i in range(30):  # 1.5 s of commits that the filter leaves out
                conn.execute("INSERT INTO busy VALUES (%s)", (i,))
                time.sleep(0.05)
        make_served_feed.caught_up(name, pg_dsn, timeout=60)
        head = _head(make_served_feed.service.http_url, name)
        timed = sub.take_timed(up_to(head), timeout=10)
        frames = [f for _, f in timed]
        assert all(f.final and not f.changes for f in frames)
        assert [f.cursor for f in frames] == [format_lsn(f.commit_lsn) for f in frames]
        assert [f.commit_lsn for f in frames] == sorted({f.commit_lsn for f in frames})
        # At most one a second, counted from the subscription's start: not one per transaction.
        assert len(frames) <= int(timed[-1][0] - started) + 1 < 30
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO quiet VALUES (1)")
        row = sub.take(lambda got: bool(got) and bool(got[-1].changes), timeout=30)[-1]
        assert [c.after["id"].int_value for c in row.changes] == [1]
    finally:
        sub.close()
    # Resuming from the progress cursor: the quiet row first, nothing of the busy table.
    resumed = subscribe(stub, lambda got: any(f.changes for f in got), 30,
                        feed=name, cursor=head, tables=["public.quiet"])
    assert [(f.commit_lsn, [c.after["id"].int_value for c in f.changes]) for f in resumed] == \
        [(row.commit_lsn, [1])]


# -- discovery and errors ---------------------------------------------------------------------------

def test_discovery_and_every_error_status(make_served_feed: FeedFactory, pg_dsn: str, stub: Any) -> None:
    secret = "grpc-never-shows-this-9"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE d (id int PRIMARY KEY)")
        server_version = conn.info.server_version
    name = make_served_feed(f"{pg_dsn} password={secret}", tables=("public.d",))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for i in range(4):
            conn.execute("INSERT INTO d VALUES (%s)", (i,))
    make_served_feed.caught_up(name, pg_dsn)
    base = make_served_feed.service.http_url

    listed = {f.name: f for f in stub.ListFeeds(feed_pb2.ListFeedsRequest(), timeout=10).feeds}
    feed = stub.GetFeed(feed_pb2.GetFeedRequest(name=name), timeout=10)
    assert listed[name].slot == feed.slot == f"pgfeed_{name}"
    http = httpx.get(f"{base}/v1/feeds/{name}", timeout=30).json()
    assert (feed.state, feed.publication, list(feed.tables), feed.all_tables, feed.source) == \
        ("running", http["publication"], ["public.d"], False, http["source"])
    assert secret not in str(feed) + str(listed[name]) and "password=***" in feed.source
    assert feed.confirmed_lsn >= feed.head_lsn == parse_lsn(http["head_lsn"])
    assert feed.HasField("server_lsn") and feed.server_lsn >= feed.confirmed_lsn
    assert feed.HasField("lag_bytes") and feed.lag_bytes == feed.server_lsn - feed.confirmed_lsn
    assert feed.proto_version == (3 if server_version < 160000 else 4)
    assert feed.slot_risk.wal_status in ("reserved", "extended") and feed.slot_risk.retained_bytes >= 0
    assert feed.changes_captured >= 4 and not feed.HasField("last_error")

    def code_of(call: Callable[[], Any]) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.RpcError) as failure:
            call()
        return failure.value.code(), failure.value.details() or ""

    def first(**request: Any) -> Any:
        return next(iter(stub.Subscribe(feed_pb2.SubscribeRequest(**request), timeout=10)))

    invalid = grpc.StatusCode.INVALID_ARGUMENT
    for call, code, text in [
        (lambda: stub.GetFeed(feed_pb2.GetFeedRequest(name="no_such_feed"), timeout=10),
         grpc.StatusCode.NOT_FOUND, "no_such_feed"),
        (lambda: first(feed="no_such_feed"), grpc.StatusCode.NOT_FOUND, "no_such_feed"),
        (lambda: stub.GetFeed(feed_pb2.GetFeedRequest(), timeout=10), invalid, "name"),
        (lambda: first(), invalid, "feed"),
        (lambda: first(feed=name, cursor="0/xyz"), invalid, EXPECTED_FORM),
        (lambda: first(feed=name, cursor="latest:3"), invalid, EXPECTED_FORM),
        (lambda: first(feed=name, cursor="0/10:x"), invalid, EXPECTED_FORM),
        (lambda: first(feed=name, cursor="123456789/0"), invalid, EXPECTED_FORM),
        (lambda: first(feed=name, ops=["upsert"]), invalid, "upsert"),
        (lambda: first(feed=name, tables=["public.d", " "]), invalid, "public.orders"),
        # a cursor past the head names nothing this log ever held
        (lambda: first(feed=name, cursor="FFFF/0"), grpc.StatusCode.OUT_OF_RANGE, "past the feed's head"),
    ]:
        got_code, details = code_of(call)
        assert (got_code, text in details) == (code, True), (got_code, details)

    # A cursor older than retention: OUT_OF_RANGE, naming the oldest position kept in the
    # message and in the trailing metadata "pgfeed-oldest".
    lsns = [parse_lsn(c["commit_lsn"]) for c in _http_changes(base, name)]
    make_served_feed.service.supervisor.changelog(name).trim(lsns[2], force=True)
    with pytest.raises(grpc.RpcError) as expired:
        first(feed=name, cursor=format_lsn(lsns[0]))
    assert expired.value.code() == grpc.StatusCode.OUT_OF_RANGE
    assert format_lsn(lsns[2]) in (expired.value.details() or "")
    assert dict(expired.value.trailing_metadata() or ())["pgfeed-oldest"] == format_lsn(lsns[2])
    kept = subscribe(stub, up_to(format_lsn(lsns[-1])), 30, feed=name, cursor="earliest")
    assert [f.commit_lsn for f in kept] == lsns[2:]


def test_health_and_reflection(pgfeed_service: Service) -> None:
    with grpc.insecure_channel(pgfeed_service.grpc_target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "pgfeed.v1.ChangeFeed"):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as unknown:
            health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND

        # v1alpha through its stub, and v1 (what current tools ask first; the same messages
        # under another package) through its method path.
        v1 = channel.stream_stream(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
        for info in (reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo, v1):
            requests = [reflection_pb2.ServerReflectionRequest(list_services=""),
                        reflection_pb2.ServerReflectionRequest(file_containing_symbol="pgfeed.v1.ChangeFeed")]
            listed, described = list(info(iter(requests), timeout=10))
            names = {s.name for s in listed.list_services_response.service}
            assert {"pgfeed.v1.ChangeFeed", "grpc.health.v1.Health",
                    "grpc.reflection.v1alpha.ServerReflection",
                    "grpc.reflection.v1.ServerReflection"} <= names
            files = [descriptor_pb2.FileDescriptorProto.FromString(b)
                     for b in described.file_descriptor_response.file_descriptor_proto]
            service = next(s for f in files if f.package == "pgfeed.v1" for s in f.service
                           if s.name == "ChangeFeed")
            methods = {m.name: m for m in service.method}
            assert set(methods) == {"Subscribe", "ListFeeds", "GetFeed"}
            assert methods["Subscribe"].server_streaming and not methods["GetFeed"].server_streaming
            assert methods["Subscribe"].output_type == ".pgfeed.v1.Transaction"


# -- the client library -----------------------------------------------------------------------------

def test_grpc_client_yields_what_the_raw_stream_does(make_served_feed: FeedFactory, pg_dsn: str,
                                                     stub: Any) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE lib (id int PRIMARY KEY, n numeric, tags text[])")
    name = make_served_feed(pg_dsn, tables=("public.lib",))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO lib SELECT g, g * 1.5, ARRAY['a', NULL] FROM generate_series(1, 30) g")
        conn.execute("UPDATE lib SET n = 'NaN' WHERE id = 3")
        conn.execute("DELETE FROM lib WHERE id > 25")
    make_served_feed.caught_up(name, pg_dsn)
    service = make_served_feed.service
    head = _head(service.http_url, name)
    raw = subscribe(stub, up_to(head), 30, feed=name, cursor="earliest")

    with GrpcFeedClient(service.grpc_target) as client:
        txns = []
        for t in client.subscribe(name):
            txns.append(t)
            if t.cursor == head:
                break
        assert client.get_feed(name)["name"] == name
        with pytest.raises(ClientFeedNotFound):
            next(iter(client.subscribe("no_such_feed")))
        with pytest.raises(ClientInvalidCursor):
            next(iter(client.subscribe(name, cursor="nonsense")))
    assert [t.commit_lsn for t in txns] == [format_lsn(f.commit_lsn) for f in raw]
    assert [t.cursor for t in txns] == [f.cursor for f in raw]
    assert [(c.commit_lsn, c.seq, c.op, c.key) for t in txns for c in t.changes] == \
        [(format_lsn(f.commit_lsn), c.seq, feed_pb2.Op.Name(c.op).removeprefix("OP_").lower(),
          {k: v.int_value for k, v in c.key.items()}) for f in raw for c in f.changes]
    assert [str(c.after["n"]) for t in txns[:1] for c in t.changes[:3]] == ["1.5", "3.0", "4.5"]
    assert txns[1].changes[0].after["tags"] == ["a", None]


def test_http_client_yields_what_the_raw_stream_does(make_served_feed: FeedFactory, pg_dsn: str,
                                                     stub: Any) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE hc (id int PRIMARY KEY, s text)")
    name = make_served_feed(pg_dsn, tables=("public.hc",))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("INSERT INTO hc SELECT g, 's' || g FROM generate_series(1, 25) g")
        conn.execute("UPDATE hc SET s = 'changed' WHERE id % 5 = 0")
        conn.execute("DELETE FROM hc WHERE id = 7")
    make_served_feed.caught_up(name, pg_dsn)
    service = make_served_feed.service
    raw = subscribe(stub, up_to(_head(service.http_url, name)), 30, feed=name, cursor="earliest")
    with FeedClient(service.http_url) as client:
        changes = list(client.iter_changes(name, limit=4))  # pages split the 25-row transaction
        with pytest.raises(ClientInvalidCursor) as bad:
            client.page(name, "nonsense")
        assert EXPECTED_FORM in bad.value.message
        with pytest.raises(ClientFeedNotFound):
            client.page("no_such_feed")
    assert [(c.commit_lsn, c.seq, c.op) for c in changes] == \
        [(format_lsn(f.commit_lsn), c.seq, feed_pb2.Op.Name(c.op).removeprefix("OP_").lower())
         for f in raw for c in f.changes]
    assert [c.after or c.key for c in changes] == \
        [{k: (v.int_value if v.WhichOneof("kind") == "int_value" else v.string_value)
          for k, v in (c.after or c.key).items()} for f in raw for c in f.changes]
