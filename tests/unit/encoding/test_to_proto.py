"""The hand-written protobuf encoder against the generated pgfeed.v1 classes: every Value kind,
change fields, frame splitting and the Framer's closing frames. The client's ``from_value`` reads
each value back, so the two ends of the gRPC surface are held to each other."""

from __future__ import annotations

import math
import struct
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from pgfeed.decoding.model import Change, Op, Transaction
from pgfeed.encoding.to_proto import Framer, change_bytes, transaction_frames, value_bytes
from pgfeed.types.datetime import TimeTz
from pgfeed.types.floating import SpecialFloat
from pgfeed.types.interval import Interval
from pgfeed.types.json import JsonText
from pgfeed_client._cursor import Cursor
from pgfeed_client._grpc import from_value
from pgfeed_proto.v1 import feed_pb2


def parsed(v: Any, kind: str | None = None) -> feed_pb2.Value:
    return feed_pb2.Value.FromString(value_bytes(v, kind))


# (python value, expected oneof field, expected field content, value from_value gives back)
CASES: list[tuple[Any, str, Any, Any]] = [
    (None, "null_value", 0, None),
    (True, "bool_value", True, True),
    (False, "bool_value", False, False),
    *[(n, "int_value", n, n) for n in (0, 1, 127, 128, 16383, 16384, 2**31, 2**62, -1, -2**63, 2**63 - 1)],
    (2**64, "numeric_value", "18446744073709551616", Decimal(2**64)),  # a json integer past int64
    (1.5, "double_value", 1.5, 1.5),
    ("", "string_value", "", ""),
    ("héllo ✓", "string_value", "héllo ✓", "héllo ✓"),
    ("x" * 20_000, "string_value", "x" * 20_000, "x" * 20_000),  # length past a 2-byte varint
    (b"\x00\xff", "bytes_value", b"\x00\xff", b"\x00\xff"),
    (Decimal("12.50"), "numeric_value", "12.50", Decimal("12.50")),
    (Decimal("1E+3"), "numeric_value", "1000", Decimal(1000)),
    (Decimal("-0.0000001"), "numeric_value", "-0.0000001", Decimal("-0.0000001")),
    (Decimal("NaN"), "numeric_value", "NaN", None),  # checked below: NaN != NaN
    (date(2026, 11, 22), "date_value", "2026-11-22", date(2026, 11, 22)),
    (time(10, 0, 0, 123456), "time_value", "10:00:00.123456", time(10, 0, 0, 123456)),
    (Interval(14, 3, 4 * 3_600_000_000 + 500_000), "interval_value", "P1Y2M3DT4H0.5S", "P1Y2M3DT4H0.5S"),
    ("P1Y2M3DT4H0.5S", "string_value", "P1Y2M3DT4H0.5S", "P1Y2M3DT4H0.5S"),
]


@pytest.mark.parametrize(("value", "field", "content", "back"), CASES, ids=lambda v: repr(v)[:30])
def test_each_value_kind_parses_and_reads_back(value: Any, field: str, content: Any, back: Any) -> None:
    msg = parsed(value)
    assert msg.WhichOneof("kind") == field
    assert getattr(msg, field) == content
    if back is not None or value is None:
        assert from_value(msg) == back


def test_special_floats_travel_as_ieee_doubles() -> None:
    for value, bits in ((SpecialFloat("nan"), None), (SpecialFloat("inf"), math.inf),
                        (SpecialFloat("-inf"), -math.inf), (-0.0, None)):
        got = parsed(value).double_value
        if math.isnan(value):
            assert math.isnan(got) and math.isnan(from_value(parsed(value)))
        elif bits is not None:
            assert got == bits
        else:
            assert struct.pack("<d", got) == struct.pack("<d", -0.0)  # the sign of zero kept
    assert from_value(parsed(Decimal("NaN"))).is_nan()


@pytest.mark.parametrize("instant", [
    datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=UTC),
    datetime(1970, 1, 1, tzinfo=UTC),
    datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC),  # negative seconds, positive nanos
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(2026, 11, 22, 12, 0, 0, 500000, tzinfo=timezone(timedelta(hours=2))),
])
def test_timestamps_are_instants(instant: datetime) -> None:
    msg = parsed(instant)
    assert msg.WhichOneof("kind") == "timestamp_value"
    assert msg.timestamp_value.ToDatetime(tzinfo=UTC) == instant
    assert from_value(msg) == instant


def test_timestamps_without_zone_are_wall_clock_readings() -> None:
    naive = datetime(2026, 11, 22, 10, 0, 0, 7)
    msg = parsed(naive)
    assert msg.WhichOneof("kind") == "local_timestamp_value"
    assert msg.local_timestamp_value.ToDatetime() == naive
    assert from_value(msg) == naive and from_value(msg).tzinfo is None


def test_timetz_keeps_its_offset() -> None:
    value = TimeTz(10, 0, 0, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    msg = parsed(value)
    assert msg.time_value == "10:00:00+05:30"
    assert from_value(msg).utcoffset() == timedelta(hours=5, minutes=30)


def test_json_columns_keep_numbers_exactly() -> None:
    text = '{"a": [1, 2.5, null], "big": 1180591620717411303424, "tiny": 1e-400, "s": "x"}'
    msg = parsed(JsonText(text), "json")
    assert msg.WhichOneof("kind") == "json_value" and msg.json_value == text
    assert parsed(JsonText("[" * 3000 + "]" * 3000), "json").json_value == "[" * 3000 + "]" * 3000
    assert parsed("just a string", "json").json_value == '"just a string"'
    assert parsed(None, "json").WhichOneof("kind") == "null_value"  # JSON null


def test_arrays_nest_and_keep_null_elements() -> None:
    msg = parsed([[1, None], [3, 4]])
    assert msg.WhichOneof("kind") == "list_value"
    rows = msg.list_value.values
    assert [v.WhichOneof("kind") for v in rows[0].list_value.values] == ["int_value", "null_value"]
    assert from_value(msg) == [[1, None], [3, 4]]
    jsons = parsed([{"a": 1}, None], "json[]")
    assert [v.WhichOneof("kind") for v in jsons.list_value.values] == ["json_value", "null_value"]


def _change(seq: int, **kw: Any) -> Change:
    return Change(lsn=1000 + seq, seq=seq, op=kw.pop("op", Op.INSERT), schema="public", table="orders",
                  **kw)


def test_change_fields() -> None:
    row = _change(3, op=Op.UPDATE, key={"id": 1}, before={"id": 1, "s": "new"},
                  after={"id": 1, "s": "paid", "body": "__toast__"}, unchanged_toast=["body"])
    msg = feed_pb2.Change.FromString(change_bytes(row))
    assert (msg.lsn, msg.seq, msg.op, msg.schema, msg.table) == (1003, 3, feed_pb2.OP_UPDATE, "public", "orders")
    assert {k: from_value(v) for k, v in msg.after.items()} == row.after
    assert {k: from_value(v) for k, v in msg.key.items()} == {"id": 1}
    assert dict(msg.before) and list(msg.unchanged_toast) == ["body"]

    trunc = feed_pb2.Change.FromString(change_bytes(Change(
        2000, 0, Op.TRUNCATE, tables=["public.a", "public.b"], options={"cascade": True, "restart_identity": False})))
    assert list(trunc.tables) == ["public.a", "public.b"]
    assert dict(trunc.options) == {"cascade": True, "restart_identity": False}

    message = feed_pb2.Change.FromString(change_bytes(Change(
        3000, 0, Op.MESSAGE, prefix="app", content=b"\x00hi", transactional=False)))
    assert (message.op, message.prefix, message.content, message.transactional) == \
        (feed_pb2.OP_MESSAGE, "app", b"\x00hi", False)


def _txn(changes: int, *, first: int = 0, last: int | None = None, total: int | None = None) -> Transaction:
    total = changes if total is None else total
    return Transaction(xid=77, commit_lsn=0x1_0000_0000, end_lsn=0x1_0000_0010, commit_ts=123_456_789,
                       origin=None,
                       changes=[_change(first + i, key={"id": first + i}, after={"id": first + i, "v": "x" * 40})
                                for i in range(changes)],
                       change_count=total, last_seq=first + changes - 1 if last is None else last)


def test_a_large_transaction_is_split_into_bounded_frames() -> None:
    frames = transaction_frames(_txn(25_000), frame_bytes=64 << 10, frame_changes=4_000)
    parsed_frames = [feed_pb2.Transaction.FromString(f) for f in frames]
    assert len(frames) > 10 and all(len(f) <= 64 << 10 for f in frames)
    assert all(len(t.changes) <= 4_000 for t in parsed_frames)
    assert {(t.xid, t.commit_lsn, t.end_lsn) for t in parsed_frames} == {(77, 0x1_0000_0000, 0x1_0000_0010)}
    assert [t.final for t in parsed_frames] == [False] * (len(frames) - 1) + [True]
    for t in parsed_frames[:-1]:
        assert t.cursor == f"1/0:{t.changes[-1].seq}"  # resume right after this frame
    assert parsed_frames[-1].cursor == "1/0"
    assert [c.seq for t in parsed_frames for c in t.changes] == list(range(25_000))
    assert parsed_frames[0].commit_ts.ToMicroseconds() == 123_456_789 + 946_684_800_000_000


def test_the_default_frame_limit_stays_under_grpcs_4_mib() -> None:
    huge = _txn(1)
    huge.changes[0].after = {"id": 0, "v": "y" * (5 << 20)}  # one change larger than a frame
    frames = transaction_frames(_txn(100_000))
    assert all(len(f) <= 1 << 20 for f in frames)
    [alone] = transaction_frames(huge)  # a change cannot be split: sent whole, in its own frame
    t = feed_pb2.Transaction.FromString(alone)
    assert t.final and len(t.changes[0].after["v"].string_value) == 5 << 20


def test_framer_closes_a_transaction_whose_rest_was_filtered_out() -> None:
    framer = Framer()
    first = framer.frames([_txn(3, total=10)], Cursor(0x1_0000_0000, 2))
    assert [feed_pb2.Transaction.FromString(f).final for f in first] == [False]
    # The next page scanned seqs 3..9 and kept none: the transaction is closed anyway.
    closing = framer.frames([], Cursor(0x1_0000_0000))
    [t] = [feed_pb2.Transaction.FromString(f) for f in closing]
    assert (t.final, len(t.changes), t.cursor, t.xid) == (True, 0, "1/0", 77)
    assert framer.frames([], Cursor(0x1_0000_0000)) == []  # closed once


def test_generated_row_encoder_writes_what_the_reference_row_writer_does() -> None:
    """The fast twin of ``to_proto._row`` (``_RowEncoder``, generated per row shape with each
    column's type speculated from the first row) against it: the same map entries for rows whose
    values keep the first row's types, change type (None, text for a number, a list), or change
    shape, and for json columns (``kinds``)."""
    from pgfeed.encoding import to_proto

    first = {"id": 1, "name": "a", "amount": Decimal("1.50"), "at": datetime(2026, 1, 2, tzinfo=UTC),
             "day": date(2026, 1, 2), "on": True, "f": 1.5, "raw": b"\x00", "iv": Interval(1, 2, 3),
             "doc": JsonText('{"a": 1}')}
    rows = [first,
            {**first, "id": 70000, "name": "é" * 200, "amount": Decimal("1E-7"), "on": False},
            {**first, "id": None, "name": None, "amount": "NaN", "at": "infinity", "f": SpecialFloat("nan")},
            {**first, "id": -5, "name": ["x", None], "raw": b"y" * 300, "doc": None},
            {"id": 1, "other": "shape"}]
    kinds = {"doc": "json"}
    for tag in (b"\x32", b"\x42"):
        for row in rows:
            fast: list[bytes] = []
            reference: list[bytes] = []
            to_proto._encode_row(tag, "public", "t_encoder_twin", row, fast, kinds)
            to_proto._row(tag, row, reference, kinds)
            assert b"".join(fast) == b"".join(reference), row
