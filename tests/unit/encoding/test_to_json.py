"""Change/Transaction -> contract JSON: value rendering, event shape, commit_ts and LSN strings."""

from __future__ import annotations

import base64
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import orjson
import pytest

from pgfeed.decoding.model import Change, Op, Transaction
from pgfeed.decoding.values import load_value
from pgfeed.encoding.to_json import (
    MAX_EMBEDDED_DEPTH,
    change_to_dict,
    commit_ts_iso,
    dumps,
    transaction_to_dict,
)
from pgfeed.types.interval import Interval
from pgfeed.types.json import JsonText


def txn(*changes: Change, origin: str | None = None) -> Transaction:
    return Transaction(749, 0x16B1B00, 0x16B1B30, 848_656_800_123_456, origin, list(changes),
                       len(changes))


def render(value: Any) -> Any:
    return orjson.loads(dumps({"v": value}))["v"]


def raw(value: Any) -> bytes:
    return dumps([value])[1:-1]


@pytest.mark.parametrize(("oid", "text", "json_text"), [
    (23, "42", b"42"),
    (20, "-9223372036854775808", b"-9223372036854775808"),
    (1700, "1234.50", b'"1234.50"'),
    (1700, "0.0000001", b'"0.0000001"'),
    (1700, "123456789012345678901234567890.000000000000000000001",
     b'"123456789012345678901234567890.000000000000000000001"'),
    (1700, "NaN", b'"NaN"'),
    (1700, "Infinity", b'"Infinity"'),
    (1700, "-Infinity", b'"-Infinity"'),
    (701, "1.5", b"1.5"),
    (701, "-0", b"-0.0"),
    (701, "NaN", b'"NaN"'),
    (700, "Infinity", b'"Infinity"'),
    (701, "-Infinity", b'"-Infinity"'),
    (16, "t", b"true"),
    (25, 'quote " and \\', b'"quote \\" and \\\\"'),
    (17, "\\x00ff", b'"AP8="'),
    (1082, "2024-02-29", b'"2024-02-29"'),
    (1082, "infinity", b'"infinity"'),
    (1082, "0044-03-15 BC", b'"0044-03-15 BC"'),
    (1083, "04:05:06.5", b'"04:05:06.500000"'),
    (1083, "24:00:00", b'"24:00:00"'),
    (1266, "04:05:06+05:30", b'"04:05:06+05:30"'),
    (1114, "2024-05-06 07:08:09", b'"2024-05-06T07:08:09"'),
    (1184, "2024-05-06 07:08:09.123456+00", b'"2024-05-06T07:08:09.123456+00:00"'),
    (1184, "-infinity", b'"-infinity"'),
    (1184, "294276-12-31 23:59:59.999999+00", b'"294276-12-31 23:59:59.999999+00"'),
    (1186, "1 year 2 mons 3 days 04:05:06.5", b'"P1Y2M3DT4H5M6.5S"'),
    (1186, "-1 days +02:03:00", b'"P-1DT2H3M"'),
    (3802, '{"a": [1, 2.5, null, "x"], "b": {"c": true}}', b'{"a": [1, 2.5, null, "x"], "b": {"c": true}}'),
    (114, ' {"n" : 123456789012345678901234567890, "t": 1E-7} ',
     b' {"n" : 123456789012345678901234567890, "t": 1E-7} '),
    (2950, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", b'"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"'),
    (869, "10.0.0.1", b'"10.0.0.1"'),
    (1007, "{{1,NULL},{3,4}}", b"[[1,null],[3,4]]"),
    (1009, '{"a\\"b",NULL,"NULL"}', b'["a\\"b",null,"NULL"]'),
    (1022, "{NaN,-0,1}", b'["NaN",-0.0,1.0]'),
    (1185, "{infinity,NULL}", b'["infinity",null]'),
    (1001, '{"\\\\x01"}', b'["AQ=="]'),
])
def test_value_rendering(oid: int, text: str, json_text: bytes) -> None:
    assert raw(load_value(oid, text)) == json_text


def test_more_values() -> None:
    assert render(Interval(0, 0, 0)) == "PT0S"
    assert render(bytearray(b"\xff")) == "/w=="
    assert render(date(1, 1, 1)) == "0001-01-01"
    assert render(time(0, 0)) == "00:00:00"
    # orjson 3.13.0's own writer drops a digit here ("00:00:00.10000"): 10 ms must stay 10 ms
    assert render(time(0, 0, 0, 10_000)) == "00:00:00.010000"
    assert render(time(23, 59, 59, 99_999)) == "23:59:59.099999"
    assert render(datetime(2024, 1, 1, tzinfo=UTC)) == "2024-01-01T00:00:00+00:00"
    assert render(Decimal("1E+3")) == "1000"


def test_json_documents_are_embedded_as_postgresql_printed_them() -> None:
    """Every digit (issue 13, item 2); past MAX_EMBEDDED_DEPTH the text comes as a JSON string."""
    text = '{"big": [1180591620717411303424, -0.0, 0.10000000000000000001, 1E+300]}'
    assert dumps({"v": JsonText(text)}) == b'{"v":' + text.encode() + b"}"
    deep = "[" * (MAX_EMBEDDED_DEPTH + 1) + "1e-7" + "]" * (MAX_EMBEDDED_DEPTH + 1)
    assert orjson.loads(dumps({"v": JsonText(deep)})) == {"v": deep}
    shallow = "[" * MAX_EMBEDDED_DEPTH + "]" * MAX_EMBEDDED_DEPTH
    assert dumps({"v": JsonText(shallow)}) == b'{"v":' + shallow.encode() + b"}"


def test_unknown_objects_are_refused() -> None:
    with pytest.raises(TypeError):
        dumps(object())


def test_commit_ts_and_lsns() -> None:
    assert commit_ts_iso(0) == "2000-01-01T00:00:00.000000+00:00"
    assert commit_ts_iso(848_656_800_123_456) == "2026-11-22T10:00:00.123456+00:00"
    assert commit_ts_iso(-1) == "1999-12-31T23:59:59.999999+00:00"
    c = Change(0x16B1A20, 3, Op.INSERT, "public", "orders", {"id": 1}, None, {"id": 1})
    d = change_to_dict(c, txn(c))
    assert (d["lsn"], d["commit_lsn"], d["commit_ts"]) == (
        "0/16B1A20", "0/16B1B00", "2026-11-22T10:00:00.123456+00:00")


def test_update_event_shape_follows_the_contract() -> None:
    c = Change(0x16B1A20, 3, Op.UPDATE, "public", "orders", key={"id": 1},
               before={"id": 1, "status": "new"}, after={"id": 1, "status": "paid", "notes": None},
               unchanged_toast=["body"])
    d = orjson.loads(dumps(change_to_dict(c, txn(c))))
    assert list(d) == ["lsn", "seq", "commit_lsn", "xid", "commit_ts", "op", "schema", "table",
                       "table_version", "key", "before", "after", "unchanged_toast", "origin"]
    assert d == {
        "lsn": "0/16B1A20", "seq": 3, "commit_lsn": "0/16B1B00", "xid": 749,
        "commit_ts": "2026-11-22T10:00:00.123456+00:00", "op": "update", "schema": "public",
        "table": "orders", "table_version": None, "key": {"id": 1}, "before": {"id": 1, "status": "new"},
        "after": {"id": 1, "status": "paid", "notes": None}, "unchanged_toast": ["body"],
        "origin": None,
    }


def test_before_and_after_are_present_only_with_a_row() -> None:
    ins = Change(1, 0, Op.INSERT, "public", "t", None, None, {"a": 1})
    dele = Change(2, 1, Op.DELETE, "public", "t", {"a": 1})
    t = txn(ins, dele, origin="node_b")
    d_ins, d_del = (change_to_dict(c, t) for c in t.changes)
    assert "before" not in d_ins and d_ins["key"] is None and d_ins["after"] == {"a": 1}
    assert "before" not in d_del and "after" not in d_del and d_del["key"] == {"a": 1}
    assert d_del["unchanged_toast"] == [] and d_del["origin"] == "node_b"
    assert "toast_filled" not in d_ins


def test_toast_filled_is_reported() -> None:
    c = Change(1, 0, Op.UPDATE, "public", "t", {"a": 1}, None, {"a": 1, "b": "x"}, ["b"],
               toast_filled=["b"])
    assert change_to_dict(c, txn(c))["toast_filled"] == ["b"]


def test_truncate_and_message_events() -> None:
    trunc = Change(1, 0, Op.TRUNCATE, tables=["public.a", "public.b"],
                   options={"cascade": True, "restart_identity": False})
    msg = Change(2, 1, Op.MESSAGE, prefix="app", content=b"\x00hi", transactional=False)
    t = txn(trunc, msg)
    d_t, d_m = (orjson.loads(dumps(change_to_dict(c, t))) for c in t.changes)
    assert d_t["op"] == "truncate" and d_t["tables"] == ["public.a", "public.b"]
    assert d_t["options"] == {"cascade": True, "restart_identity": False}
    assert d_t["schema"] is None and "key" not in d_t
    assert d_m["op"] == "message" and d_m["prefix"] == "app" and d_m["transactional"] is False
    assert base64.b64decode(d_m["content"]) == b"\x00hi"


def test_transaction_to_dict() -> None:
    c = Change(0x10, 0, Op.INSERT, "public", "t", {"a": 1}, None, {"a": 1})
    t = txn(c)
    d = orjson.loads(dumps(transaction_to_dict(t)))
    assert {k: d[k] for k in ("xid", "commit_lsn", "end_lsn", "commit_ts", "origin", "change_count")} == {
        "xid": 749, "commit_lsn": "0/16B1B00", "end_lsn": "0/16B1B30",
        "commit_ts": "2026-11-22T10:00:00.123456+00:00", "origin": None, "change_count": 1}
    assert d["changes"] == [orjson.loads(dumps(change_to_dict(c, t)))]


def test_timestamptz_in_other_zones_keeps_its_offset() -> None:
    tz = timezone(timedelta(hours=-3))
    assert render(datetime(2024, 1, 1, 12, tzinfo=tz)) == "2024-01-01T12:00:00-03:00"
