"""A backfill chunk as readers get it: op ``read``, origin ``pgfeed.backfill`` and the backfill id,
the same on the fast (transcoded, C and Python) and reference paths, JSON and protobuf."""

from __future__ import annotations

import json

import orjson
import pytest

from pgfeed.backfill.window import WindowTracker
from pgfeed.decoding.changes import TransactionDecoder
from pgfeed.decoding.model import Op
from pgfeed.decoding.relations import RelationCatalog
from pgfeed.encoding import transcode
from pgfeed.encoding.to_json import change_events, change_to_dict, dumps, transaction_json
from pgfeed.encoding.to_proto import transaction_frames
from pgfeed_proto.v1 import feed_pb2
from tests.unit.backfill.test_window import other, read, start


@pytest.fixture(autouse=True, params=["c", "reference"])
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "c" and transcode._compiled is None:
        pytest.fail("the compiled transcoder is not built")
    monkeypatch.setattr(transcode, "IMPLEMENTATION", request.param)
    return str(request.param)


def chunk_unit():  # type: ignore[no-untyped-def]
    tracker = WindowTracker()
    start(tracker)
    read(tracker, "c1", (1, 2))
    (_, unit) = tracker.process([other(150, 0x5000_0000 - 1)], 0x5000_0000) + tracker.release()
    return unit


def test_json_events_of_a_chunk_say_read_on_every_path() -> None:
    unit = chunk_unit()
    lazy = TransactionDecoder(RelationCatalog()).decode(unit)
    loaded = TransactionDecoder(RelationCatalog()).load(unit)
    fast = [orjson.loads(e) for e in change_events(lazy)]
    reference = [orjson.loads(dumps(change_to_dict(c, loaded))) for c in loaded.changes]
    assert fast == reference
    assert [(e["op"], e["key"], e["after"], e["origin"], e["backfill"]) for e in fast] == [
        ("read", {"id": 1}, {"id": 1, "v": "read"}, "pgfeed.backfill", "bf_1"),
        ("read", {"id": 2}, {"id": 2, "v": "read"}, "pgfeed.backfill", "bf_1")]
    whole = json.loads(transaction_json(lazy, "0/50000000"))
    assert whole["backfill"] == "bf_1" and whole["origin"] == "pgfeed.backfill"


def test_protobuf_frames_of_a_chunk_carry_op_read_and_the_backfill_id() -> None:
    unit = chunk_unit()
    txn = TransactionDecoder(RelationCatalog()).decode(unit)  # compiled or reference: the fixture's
    (frame,) = transaction_frames(txn)
    msg = feed_pb2.Transaction.FromString(frame)
    assert (msg.backfill, msg.origin, msg.commit_lsn) == ("bf_1", "pgfeed.backfill", 0x5000_0000)
    assert [c.op for c in msg.changes] == [feed_pb2.OP_READ, feed_pb2.OP_READ]
    assert [c.after["v"].string_value for c in msg.changes] == ["read", "read"]


def test_readers_filtering_other_tables_pass_a_chunk_whole_without_decoding_it() -> None:
    from pgfeed.changelog.memory import MemoryChangeLog
    from pgfeed.decoding.relations import RelationCatalog
    from pgfeed.decoding.runs import loaded
    from pgfeed.feeds.reader import FeedReader
    from pgfeed_client._cursor import EARLIEST, Cursor

    unit = chunk_unit()
    log = MemoryChangeLog()
    log.append([unit])
    catalog = RelationCatalog()
    for lsn, frame in log.schema_history():
        catalog.add(lsn, frame)
    reader = FeedReader(log, lambda: catalog)
    other = reader.page(EARLIEST, 1, tables=["public.other"])
    assert other.transactions == [] and other.next == Cursor(unit.commit_lsn)
    assert other.passed is not None and other.passed.backfill == "bf_1"
    assert reader.page(EARLIEST, 1, ops=[Op.INSERT]).next == Cursor(unit.commit_lsn)
    mine = reader.page(EARLIEST, 10, tables=["public.t"], ops=[Op.READ])
    assert [c.after for t in mine.transactions for c in loaded(t).changes] == [
        {"id": 1, "v": "read"}, {"id": 2, "v": "read"}]
