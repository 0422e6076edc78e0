"""The gRPC servicer with no PostgreSQL: a real ``pgfeed serve`` runtime on loopback over feeds
that capture nothing, whose change logs the tests write directly. Discovery, Subscribe's replay,
live tail and resume, its filters, and every error status a request can earn."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from pgfeed.feeds.catalogue import Catalogue
from pgfeed.feeds.model import FeedOptions, FeedSpec
from pgfeed.feeds.supervisor import Supervisor
from pgfeed_client import parse_lsn
from pgfeed_proto.v1 import feed_pb2, feed_pb2_grpc
from tests.fixtures.fix_http import OFFLINE_DSN
from tests.fixtures.fix_service import Service, run_service
from tests.unit.changelog.txns import txn

TIMEOUT = 20.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data = tmp_path_factory.mktemp("grpc") / "data"
    data.mkdir()
    catalogue = Catalogue(data / "catalogue.json")
    for name in ("shop", "quiet"):
        catalogue.put(FeedSpec(name=name, dsn=OFFLINE_DSN, tables=("public.orders",),
                               options=FeedOptions()))
    supervisor = Supervisor(data, changelog_kind="memory", capture=False)
    with run_service(data, supervisor) as service:
        log = service.supervisor.changelog("shop")
        log.append([txn(n * 0x1000, 3, schema=n == 1, ts=n) for n in range(1, 6)])
        yield service


@pytest.fixture
def stub(served: Service) -> Iterator[feed_pb2_grpc.ChangeFeedStub]:
    with grpc.insecure_channel(served.grpc_target) as channel:
        yield feed_pb2_grpc.ChangeFeedStub(channel)


def _take(stream: Iterator[feed_pb2.Transaction], n: int) -> list[feed_pb2.Transaction]:
    out = []
    for message in stream:
        out.append(message)
        if len(out) == n:
            break
    return out


def test_discovery_lists_feeds_without_their_secrets(stub: feed_pb2_grpc.ChangeFeedStub) -> None:
    feeds = stub.ListFeeds(feed_pb2.ListFeedsRequest(), timeout=TIMEOUT).feeds
    assert [f.name for f in feeds] == ["quiet", "shop"]
    shop = stub.GetFeed(feed_pb2.GetFeedRequest(name="shop"), timeout=TIMEOUT)
    assert shop.name == "shop" and shop.head_lsn == 5 * 0x1000 and list(shop.tables) == ["public.orders"]
    assert "s3cr3t-pw" not in str(shop) and "***" in shop.source


def test_subscribe_replays_the_log_in_order_with_resumable_cursors(
        stub: feed_pb2_grpc.ChangeFeedStub) -> None:
    call = stub.Subscribe(feed_pb2.SubscribeRequest(feed="shop"), timeout=TIMEOUT)
    got = _take(call, 5)
    call.cancel()
    assert [t.commit_lsn for t in got] == [n * 0x1000 for n in range(1, 6)]
    assert all(t.final and len(t.changes) == 3 for t in got)
    assert [c.seq for c in got[0].changes] == [0, 1, 2]
    assert {c.op for t in got for c in t.changes} == {feed_pb2.OP_INSERT}
    assert parse_lsn(got[2].cursor) == 3 * 0x1000
    # Resuming from a frame's cursor starts right after it.
    call = stub.Subscribe(feed_pb2.SubscribeRequest(feed="shop", cursor=got[2].cursor), timeout=TIMEOUT)
    rest = _take(call, 2)
    call.cancel()
    assert [t.commit_lsn for t in rest] == [0x4000, 0x5000]


def test_a_live_subscriber_gets_what_is_appended_after_it_caught_up(
        served: Service, stub: feed_pb2_grpc.ChangeFeedStub) -> None:
    log = served.supervisor.changelog("quiet")
    log.append([txn(0x1000, 2, schema=True, ts=1)])
    served.supervisor.notifier("quiet").publish(0x1000)
    call = stub.Subscribe(feed_pb2.SubscribeRequest(feed="quiet"), timeout=TIMEOUT)
    stream = iter(call)
    first = next(stream)  # replayed: the stream has caught up and waits on the feed's head
    time.sleep(0.3)
    log.append([txn(0x2000, 1, ts=2)])
    served.supervisor.notifier("quiet").publish(0x2000)
    second = next(stream)
    call.cancel()
    assert [(t.commit_lsn, len(t.changes)) for t in (first, second)] == [(0x1000, 2), (0x2000, 1)]


def test_filters_that_leave_everything_out_still_close_at_the_head(
        stub: feed_pb2_grpc.ChangeFeedStub) -> None:
    call = stub.Subscribe(feed_pb2.SubscribeRequest(feed="shop", ops=["delete"]), timeout=TIMEOUT)
    (progress,) = _take(call, 1)  # one empty final frame reports how far it got
    call.cancel()
    assert progress.final and not progress.changes and parse_lsn(progress.cursor) == 5 * 0x1000


@pytest.mark.parametrize(("request_", "code", "text"), [
    (feed_pb2.SubscribeRequest(), grpc.StatusCode.INVALID_ARGUMENT, "'feed' is required"),
    (feed_pb2.SubscribeRequest(feed="shop", cursor="yesterday"), grpc.StatusCode.INVALID_ARGUMENT,
     "cursor"),
    (feed_pb2.SubscribeRequest(feed="shop", ops=["upsert"]), grpc.StatusCode.INVALID_ARGUMENT, "ops"),
    (feed_pb2.SubscribeRequest(feed="shop", tables=[" "]), grpc.StatusCode.INVALID_ARGUMENT,
     "empty table name"),
    (feed_pb2.SubscribeRequest(feed="nope"), grpc.StatusCode.NOT_FOUND, "nope"),
], ids=["no-feed", "bad-cursor", "bad-op", "empty-table", "unknown-feed"])
def test_subscribe_errors(stub: feed_pb2_grpc.ChangeFeedStub, request_: feed_pb2.SubscribeRequest,
                          code: grpc.StatusCode, text: str) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        _take(stub.Subscribe(request_, timeout=TIMEOUT), 1)
    assert caught.value.code() == code and text in caught.value.details()


def test_get_feed_errors(stub: feed_pb2_grpc.ChangeFeedStub) -> None:
    for name, code in (("", grpc.StatusCode.INVALID_ARGUMENT), ("nope", grpc.StatusCode.NOT_FOUND)):
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetFeed(feed_pb2.GetFeedRequest(name=name), timeout=TIMEOUT)
        assert caught.value.code() == code


def test_a_cursor_older_than_retention_is_out_of_range_naming_the_oldest(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    Catalogue(data / "catalogue.json").put(
        FeedSpec(name="old", dsn=OFFLINE_DSN, tables=("public.orders",)))
    supervisor = Supervisor(data, changelog_kind="memory", capture=False)
    with run_service(data, supervisor) as service:
        log = service.supervisor.changelog("old")
        log.append([txn(n * 0x1000, 2, schema=n == 1, ts=n) for n in range(1, 5)])
        log.trim(0x3000, force=True)
        with grpc.insecure_channel(service.grpc_target) as channel:
            stub = feed_pb2_grpc.ChangeFeedStub(channel)
            with pytest.raises(grpc.RpcError) as caught:
                _take(stub.Subscribe(feed_pb2.SubscribeRequest(feed="old", cursor="0/1000"),
                                     timeout=TIMEOUT), 1)
    assert caught.value.code() == grpc.StatusCode.OUT_OF_RANGE
    assert dict(caught.value.trailing_metadata() or ())["pgfeed-oldest"] == "0/3000"
