"""PgFeedStreamReader's offset logic against a fake service (httpx.MockTransport), no SparkSession:
initial offsets, maxRowsPerTrigger, availableNow target, partitions and commit acknowledgements."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from typing import Any

import httpx
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from pgfeed_client import FeedClient, RetryPolicy
from pgfeed_spark import FeedOptions, change_schema
from pgfeed_spark._clients import shared_client
from pgfeed_spark._evolve import Lineage, SchemaChangedError, Version
from pgfeed_spark._streaming import PgFeedStreamReader
from tests.unit.clients.test_http_client import FakeFeed, _change


class FakeService(FakeFeed):
    def __init__(self) -> None:
        super().__init__(transactions=4)
        self.acks: list[Any] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/splits"):
            self.requests.append(request)
            return httpx.Response(200, json={"boundaries": ["0/1000", "0/2000", "0/3000"]})
        if "/consumers/" in path:
            self.requests.append(request)
            self.acks.append(httpx.Response(200, content=request.content).json())
            return httpx.Response(200, json={"cursor": self.acks[-1]["cursor"]})
        return super().__call__(request)


def _reader(service: FakeService, **options: str) -> PgFeedStreamReader:
    opts = FeedOptions.parse({"url": "http://pgfeed.test", "feed": "shop", **options})
    reader = PgFeedStreamReader(opts, change_schema())
    reader._client = FeedClient("http://pgfeed.test", transport=httpx.MockTransport(service))
    return reader


def test_initial_offset_honours_from() -> None:
    service = FakeService()
    assert _reader(service).initialOffset() == {"cursor": "earliest"}
    assert _reader(service, **{"from": "latest"}).initialOffset() == {"cursor": "0/4000"}
    assert _reader(service, **{"from": "0/2000:1"}).initialOffset() == {"cursor": "0/2000:1"}


def test_latest_offset_all_available_and_caught_up() -> None:
    service = FakeService()
    reader = _reader(service)
    assert reader.latestOffset({"cursor": "earliest"}, ReadAllAvailable()) == {"cursor": "0/4000"}
    assert reader.latestOffset({"cursor": "0/4000"}, ReadAllAvailable()) == {"cursor": "0/4000"}


def test_max_rows_per_trigger() -> None:
    service = FakeService()
    reader = _reader(service, maxRowsPerTrigger="4")
    assert reader.getDefaultReadLimit() == ReadMaxRows(4)
    offsets, start = [], {"cursor": "earliest"}
    while True:
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        if end == start:
            break
        offsets.append(end["cursor"])
        start = end
    assert offsets == ["0/2000:0", "0/3000:1", "0/4000"]
    assert _reader(service).getDefaultReadLimit() == ReadAllAvailable()


def test_available_now_never_plans_past_its_target() -> None:
    service = FakeService()
    reader = _reader(service)
    reader.prepareForTriggerAvailableNow()
    service.log.extend(_change(0x9000, s) for s in range(3))  # arrives after the target
    end = reader.latestOffset({"cursor": "earliest"}, ReadAllAvailable())
    assert end == {"cursor": "0/4000"}
    assert reader.latestOffset(end, ReadAllAvailable()) == end
    capped = _reader(service, maxRowsPerTrigger="100")
    capped.prepareForTriggerAvailableNow()
    assert capped.latestOffset({"cursor": "0/4000"}, ReadMaxRows(100)) == {"cursor": "0/9000"}


def test_partitions_cover_the_offset_range() -> None:
    service = FakeService()
    reader = _reader(service, partitions="3")
    parts = reader.partitions({"cursor": "0/1000:1"}, {"cursor": "0/4000"})
    assert [(p.after, p.to) for p in parts] == [  # the rest of 0/1000 is a range of its own
        ("0/1000:1", "0/1000"), ("0/1000", "0/2000"), ("0/2000", "0/3000"), ("0/3000", "0/4000")]
    split = next(r for r in service.requests if r.url.path.endswith("/splits"))
    assert split.url.params["from"] == "0/1000" and split.url.params["to"] == "0/4000"
    assert reader.partitions({"cursor": "0/4000"}, {"cursor": "0/4000"}) == []


def test_commit_acknowledges_to_the_named_consumer() -> None:
    service = FakeService()
    _reader(service).commit({"cursor": "0/3000"})  # no consumer: nothing sent
    assert service.acks == []
    reader = _reader(service, consumer="mirror")
    reader.commit({"cursor": "earliest"})
    reader.commit({"cursor": "0/3000:1"})
    assert reader._acker is not None and reader._acker.flush()  # sent from a background thread
    assert service.acks == [{"cursor": "0/3000:1"}]
    assert service.requests[-1].url.path == "/v1/feeds/shop/consumers/mirror"
    reader.commit({"cursor": "0/3000:1"})  # not again
    reader.commit({"cursor": "0/2000"})  # nor backwards
    # Planning from a start offset means everything up to it is committed downstream: the last
    # batch of an availableNow run is acknowledged although commit() never comes for it.
    assert reader.latestOffset({"cursor": "0/4000"}, ReadAllAvailable()) == {"cursor": "0/4000"}
    reader.stop()  # waits for the last acknowledgement
    assert service.acks == [{"cursor": "0/3000:1"}, {"cursor": "0/4000"}]


def test_acknowledgements_never_hold_up_a_trigger() -> None:
    """A slow acknowledgement runs beside planning; the newest cursor wins, older ones pending
    meanwhile are skipped; a failing one is logged and superseded, never raised."""
    gate, service, in_flight = threading.Event(), FakeService(), threading.Event()
    inner = service.__call__

    def slow(request: httpx.Request) -> httpx.Response:
        if "/consumers/" in request.url.path:
            in_flight.set()
            gate.wait(10)
            if json.loads(request.content)["cursor"] == "0/1000":
                return httpx.Response(503, json={"error": {"code": "unavailable", "message": "x"}})
        return inner(request)

    opts = FeedOptions.parse({"url": "http://pgfeed.test", "feed": "shop", "consumer": "m"})
    reader = PgFeedStreamReader(opts, change_schema())
    reader._client = FeedClient("http://pgfeed.test", transport=httpx.MockTransport(slow),
                                retry=RetryPolicy(retries=0))
    t0 = time.monotonic()
    reader.commit({"cursor": "0/1000"})  # blocked in the server until the gate opens
    assert in_flight.wait(5)  # (else 0/2000 would supersede it before it was sent)
    reader.commit({"cursor": "0/2000"})
    reader.commit({"cursor": "0/3000"})
    assert reader.latestOffset({"cursor": "0/3000"}, ReadAllAvailable()) == {"cursor": "0/4000"}
    assert time.monotonic() - t0 < 5  # the trigger did not wait for the acknowledgements
    gate.set()
    reader.stop()
    # 0/1000 failed; 0/2000 was superseded; latestOffset's acknowledgement of its start (0/3000,
    # maybe in flight by then) is not sent twice
    assert service.acks == [{"cursor": "0/3000"}]


def test_a_trigger_asks_the_server_once() -> None:
    """latestOffset fetches the head (none in availableNow mode: the target is fixed);
    reportLatestOffset reuses it; partitions inside one transaction need no /splits."""
    service = FakeService()
    reader = _reader(service, partitions="3")
    before = len(service.requests)
    end = reader.latestOffset({"cursor": "0/1000"}, ReadAllAvailable())
    assert reader.reportLatestOffset() == end == {"cursor": "0/4000"}
    assert len(service.requests) == before + 1
    assert [(p.after, p.to) for p in reader.partitions({"cursor": "0/3000:0"},
                                                       {"cursor": "0/3000"})] == [("0/3000:0", "0/3000")]
    assert len(service.requests) == before + 1  # no /splits for a range inside one transaction
    reader.prepareForTriggerAvailableNow()
    asked = len(service.requests)
    assert reader.initialOffset() == {"cursor": "earliest"}
    assert reader.latestOffset({"cursor": "0/1000"}, ReadAllAvailable()) == {"cursor": "0/4000"}
    assert len(service.requests) == asked
    latest = _reader(service, **{"from": "latest"})
    latest.prepareForTriggerAvailableNow()
    asked = len(service.requests)
    assert latest.initialOffset() == {"cursor": "0/4000"}  # the target pinned just before
    assert len(service.requests) == asked


def test_read_tasks_share_one_client_per_worker_and_server() -> None:
    a = FeedOptions.parse({"url": "http://127.0.0.1:1", "feed": "shop"})
    b = FeedOptions.parse({"url": "http://127.0.0.1:1", "feed": "other", "partitions": "2"})
    c = FeedOptions.parse({"url": "http://127.0.0.1:1", "feed": "shop", "token": "t"})
    assert shared_client(a) is shared_client(b)  # same server and credentials
    assert shared_client(c) is not shared_client(a)


# -- schemaEvolution: where a micro-batch ends when the table changes (issue 27.3) ----------------

def _history_service() -> FakeService:
    """The fake feed (head 0/4000) with a table whose version 2 (at 0/2000) drops qty and
    version 3 (at 0/3000) adds flag."""
    def col(name: str, oid: int, type_name: str, key: bool = False) -> dict[str, Any]:
        return {"name": name, "type_oid": oid, "type_name": type_name, "typmod": -1, "key": key}

    shapes = [[col("id", 23, "int4", True), col("qty", 23, "int4")], [col("id", 23, "int4", True)],
              [col("id", 23, "int4", True), {**col("flag", 16, "bool"), "missing_value": True}]]
    versions = [{"version": n + 1, "valid_from": f"0/{[0x100, 0x2000, 0x3000][n]:X}",
                 "replica_identity": "default", "columns": c, "schema": "public", "table": "t"}
                for n, c in enumerate(shapes)]

    class WithHistory(FakeService):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/schema/history"):
                return httpx.Response(200, json={"schema": "public", "table": "t",
                                                 "versions": versions})
            return super().__call__(request)

    return WithHistory()


def _evolving_reader(service: FakeService, policy: str) -> PgFeedStreamReader:
    reader = _reader(service, table="public.t", schemaEvolution=policy)
    first = Version.of(FeedClient("http://pgfeed.test", transport=httpx.MockTransport(service))
                       .table_schema_history("shop", "public.t")[0])
    reader.opts = replace(reader.opts, lineage=Lineage.build("public.t", [first],
                                                             rescue=policy == "rescue"))
    return reader


def test_a_stream_ends_its_micro_batch_before_a_version_it_cannot_hold() -> None:
    service = _history_service()
    add = _evolving_reader(service, "addNewColumns")  # the drop goes on; the new column stops
    assert add.latestOffset({"cursor": "earliest"}, ReadAllAvailable()) == {"cursor": "0/2FFF"}
    with pytest.raises(SchemaChangedError, match=r"public.t changed at 0/3000 \(version 2 -> 3: "
                       r"added flag bool \(rows before it: True\)\).*restart"):
        add.latestOffset({"cursor": "0/2FFF"}, ReadAllAvailable())
    fail = _evolving_reader(service, "fail")  # every change stops
    assert fail.latestOffset({"cursor": "earliest"}, ReadAllAvailable()) == {"cursor": "0/1FFF"}
    with pytest.raises(SchemaChangedError, match=r"version 1 -> 2: dropped qty"):
        fail.latestOffset({"cursor": "0/1FFF"}, ReadAllAvailable())
    rescue = _evolving_reader(service, "rescue")  # never stops
    assert rescue.latestOffset({"cursor": "earliest"}, ReadAllAvailable()) == {"cursor": "0/4000"}
