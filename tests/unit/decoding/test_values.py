"""Text values -> Python values by type OID: every family, the values Python cannot hold, arrays."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from pgfeed.decoding.relations import TypeName, resolve_value_oid
from pgfeed.decoding.values import load_value, row_loader
from pgfeed.pgoutput.messages import UNCHANGED_TOAST
from pgfeed.types.array import parse_array
from pgfeed.types.datetime import TimeTz
from pgfeed.types.floating import SpecialFloat
from pgfeed.types.interval import Interval, parse_interval
from pgfeed.types.json import JsonText
from pgfeed.types.registry import loader_oid

# (type oid, pgoutput text, expected Python value)
CASES: list[tuple[int, str, Any]] = [
    (21, "-32768", -32768),
    (23, "2147483647", 2147483647),
    (20, "-9223372036854775808", -9223372036854775808),
    (1700, "123456789012345678901234567890.123456789012345678901234567890",
     Decimal("123456789012345678901234567890.123456789012345678901234567890")),
    (1700, "0.0000001", Decimal("0.0000001")),
    (1700, "1.50", Decimal("1.50")),
    (701, "1.5", 1.5),
    (701, "0.30000000000000004", 0.30000000000000004),
    (700, "3.4028235e+38", 3.4028235e38),
    (16, "t", True),
    (16, "f", False),
    (25, "héllo, wörld", "héllo, wörld"),
    (1043, "", ""),
    (1042, "ab  ", "ab  "),
    (19, "pg_class", "pg_class"),
    (18, "x", "x"),
    (17, "\\x00ff10", b"\x00\xff\x10"),
    (17, "\\x", b""),
    (1082, "2024-02-29", date(2024, 2, 29)),
    (1082, "0001-01-01", date(1, 1, 1)),
    (1082, "9999-12-31", date(9999, 12, 31)),
    (1083, "23:59:59.999999", time(23, 59, 59, 999999)),
    (1114, "2024-05-06 07:08:09.5", datetime(2024, 5, 6, 7, 8, 9, 500000)),
    (1184, "2024-05-06 07:08:09.123456+00", datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)),
    (114, '{"a": [1, 2.5, null, "x"]}', JsonText('{"a": [1, 2.5, null, "x"]}')),
    (3802, '{"b": {"c": true}}', JsonText('{"b": {"c": true}}')),
    (3802, "[]", JsonText("[]")),
    (3802, '"just a string"', JsonText('"just a string"')),
    (2950, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    # anything else keeps its text form
    (869, "192.168.0.1/24", "192.168.0.1/24"),
    (650, "10.0.0.0/8", "10.0.0.0/8"),
    (790, "$1,000.00", Decimal("1000.00")),  # money: the exact amount (C/English locales)
    (790, "-$92,233,720,368,547,758.08", Decimal("-92233720368547758.08")),
    (790, "1.000,00 €", "1.000,00 €"),  # another locale's text: kept as it is
    (791, '{"$1,000.00",-$0.01}', [Decimal("1000.00"), Decimal("-0.01")]),  # money[]
    (3904, "[1,10)", "[1,10)"),
    (3614, "'a' 'b'", "'a' 'b'"),
    (142, "<a/>", "<a/>"),
    (1560, "101", "101"),
    (26, "12345", "12345"),
    (3220, "16/B374D848", "16/B374D848"),
    (603, "(1,1),(0,0)", "(1,1),(0,0)"),
    (99999, "happy", "happy"),  # an OID no loader knows (an enum): text
]

# Values Python's datetime cannot hold keep PostgreSQL's text form.
TEXT_KEPT: list[tuple[int, str]] = [
    (1082, "infinity"), (1082, "-infinity"), (1082, "0044-03-15 BC"), (1082, "10000-01-01"),
    (1114, "infinity"), (1114, "-infinity"), (1114, "294276-12-31 23:59:59.999999"),
    (1114, "4713-01-01 00:00:00 BC"), (1114, "0001-12-31 23:59:59 BC"),
    (1184, "infinity"), (1184, "-infinity"), (1184, "294276-12-31 23:59:59.999999+00"),
    (1184, "0044-03-15 12:00:00+00 BC"),
    (1083, "24:00:00"), (1266, "24:00:00+00"),
    (1186, "infinity"), (1186, "-infinity"),
    (1186, "@ 1 year 2 mons"),  # postgres_verbose style is not parsed
]


@pytest.mark.parametrize(("oid", "text", "expected"), CASES, ids=lambda v: repr(v)[:40])
def test_scalar(oid: int, text: str, expected: Any) -> None:
    value = load_value(oid, text)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(("oid", "text"), TEXT_KEPT, ids=lambda v: repr(v)[:40])
def test_values_python_cannot_hold_keep_their_text(oid: int, text: str) -> None:
    assert load_value(oid, text) == text


def test_numeric_special_values() -> None:
    assert load_value(1700, "NaN").is_nan()
    assert load_value(1700, "Infinity") == Decimal("Infinity")
    assert load_value(1700, "-Infinity") == Decimal("-Infinity")


@pytest.mark.parametrize("oid", [114, 3802], ids=["json", "jsonb"])
@pytest.mark.parametrize("number", ["1e400", "-1e400", "1e-400", "0." + "0" * 399 + "1",
                                    "123456789012345678901234567890", "1E-7", "-0.0",
                                    "0.10000000000000000001"])
def test_json_documents_keep_their_text(oid: int, number: str) -> None:
    """Never parsed: no number goes through a float (issue 13, item 2)."""
    doc = f'{{"n": {number}, "f": 0.5}}'
    assert load_value(oid, doc) == JsonText(doc)
    assert load_value(oid, f"[{doc}, null]") == JsonText(f"[{doc}, null]")
    assert load_value(oid, "null") == JsonText("null")  # the document null is not SQL NULL (27.4)


def test_json_arrays_hold_documents_as_text() -> None:
    # NULL is SQL NULL; "null" (PostgreSQL quotes it) the document null, which the encoders
    # write as a null element (an array has no json_null list; docs/design.md, issue 27.4)
    assert load_value(3807, '{"{\\"a\\": 1e-7}",NULL,"null","[1.50]"}') == [
        JsonText('{"a": 1e-7}'), None, JsonText("null"), JsonText("[1.50]")]


def test_float_special_values_are_marked_floats() -> None:
    nan = load_value(701, "NaN")
    assert isinstance(nan, SpecialFloat) and isinstance(nan, float) and math.isnan(nan)
    assert nan.text == "NaN"
    inf, ninf = load_value(701, "Infinity"), load_value(700, "-Infinity")
    assert (inf, inf.text) == (math.inf, "Infinity") and (ninf, ninf.text) == (-math.inf, "-Infinity")
    zero = load_value(701, "-0")
    assert type(zero) is float and math.copysign(1, zero) == -1


def test_timetz_keeps_its_offset() -> None:
    value = load_value(1266, "12:30:00.25+05:30")
    assert isinstance(value, TimeTz)
    assert value == TimeTz(12, 30, 0, 250000, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert value.isoformat() == "12:30:00.250000+05:30"


def test_none_and_binary_values_pass_through() -> None:
    assert load_value(23, None) is None
    assert load_value(23, b"\x00\x00\x00\x01") == b"\x00\x00\x00\x01"


# -- intervals -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "months", "days", "us", "iso"), [
    ("1 year 2 mons 3 days 04:05:06.5", 14, 3, 14_706_500_000, "P1Y2M3DT4H5M6.5S"),
    ("00:00:00", 0, 0, 0, "PT0S"),
    ("-1 days +02:03:00", 0, -1, 7_380_000_000, "P-1DT2H3M"),
    ("-00:00:01.5", 0, 0, -1_500_000, "PT-1.5S"),
    ("-1 years -2 mons", -14, 0, 0, "P-1Y-2M"),
    ("1 mon -1 days", 1, -1, 0, "P1M-1D"),
    ("100:00:00", 0, 0, 360_000_000_000, "PT100H"),
    ("-01:02:03.000004", 0, 0, -3_723_000_004, "PT-1H-2M-3.000004S"),
    ("3 days", 0, 3, 0, "P3D"),
    ("178000000 years", 2_136_000_000, 0, 0, "P178000000Y"),
    ("P1Y2M3DT4H5M6.5S", 14, 3, 14_706_500_000, "P1Y2M3DT4H5M6.5S"),  # iso_8601 style input
    ("PT-1.5S", 0, 0, -1_500_000, "PT-1.5S"),
])
def test_interval(text: str, months: int, days: int, us: int, iso: str) -> None:
    value = load_value(1186, text)
    assert value == Interval(months, days, us)
    assert value.isoformat() == iso and str(value) == iso
    assert parse_interval(iso) == value  # the ISO form reads back to the same interval


def test_interval_rejects_the_empty_string() -> None:
    assert parse_interval("") is None


# -- arrays --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("oid", "text", "expected"), [
    (1007, "{1,2,3}", [1, 2, 3]),
    (1007, "{}", []),
    (1007, "{{1,NULL},{3,4}}", [[1, None], [3, 4]]),
    (1007, "[0:1]={1,2}", [1, 2]),
    (1007, "[1:2][1:1]={{1},{2}}", [[1], [2]]),
    (1009, '{"a\\"b",NULL,"NULL",c,"x,y","back\\\\slash"," sp "}',
     ['a"b', None, "NULL", "c", "x,y", "back\\slash", " sp "]),
    (1009, '{"{braces}",""}', ["{braces}", ""]),
    (1231, "{1.5,-Infinity,NULL}", [Decimal("1.5"), Decimal("-Infinity"), None]),
    (1000, "{t,f,NULL}", [True, False, None]),
    (1001, '{"\\\\x00ff",NULL}', [b"\x00\xff", None]),
    (1182, "{2024-01-02,infinity,NULL}", [date(2024, 1, 2), "infinity", None]),
    (1185, '{"2024-01-02 00:00:00+00",-infinity}',
     [datetime(2024, 1, 2, tzinfo=UTC), "-infinity"]),
    (1183, "{12:00:00,24:00:00}", [time(12), "24:00:00"]),
    (3807, '{"{\\"a\\": 1}","[1, 2]"}', [JsonText('{"a": 1}'), JsonText("[1, 2]")]),
    (2951, "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]),
    (1041, "{10.0.0.1,NULL}", ["10.0.0.1", None]),  # arrays of text-form types: lists of text
    (1187, '{"1 day",-00:00:01}', [Interval(0, 1, 0), Interval(0, 0, -1_000_000)]),
    (1020, "{(1,1),(0,0);(2,2),(1,1)}", "{(1,1),(0,0);(2,2),(1,1)}"),  # box[]: ';' delimited
])
def test_array(oid: int, text: str, expected: Any) -> None:
    assert load_value(oid, text) == expected


def test_float_arrays_keep_special_values() -> None:
    value = load_value(1022, "{NaN,Infinity,-0,1.5}")
    assert [type(v) for v in value] == [SpecialFloat, SpecialFloat, float, float]
    assert math.isnan(value[0]) and value[1] == math.inf and math.copysign(1, value[2]) == -1


def test_parse_array_structure() -> None:
    assert parse_array('{{"a",NULL},{b,"NULL"}}') == [["a", None], ["b", "NULL"]]
    assert parse_array("[0:0]={x}") == ["x"]
    for bad in ("{1,2", "1,2}", "{1,2}x", "{"):
        with pytest.raises(ValueError):
            parse_array(bad)


def test_malformed_array_keeps_text() -> None:
    assert load_value(1007, "{1,x}") == [1, "x"]  # a loader refuses an element: it keeps text
    assert load_value(1182, "{2024-01-02") == "{2024-01-02"


# -- resolution and row loaders -------------------------------------------------------------------

def test_resolution_of_non_builtin_types() -> None:
    assert resolve_value_oid(23, None) == 23
    assert resolve_value_oid(5555, None) == 25  # a built-in-range OID nobody named: text
    assert resolve_value_oid(16500, TypeName("", "int4")) == 23  # domain over int4
    assert resolve_value_oid(16500, TypeName("", "_int4")) == 1007  # domain over int4[]
    assert resolve_value_oid(16500, TypeName("public", "mood")) == 25  # enum
    assert resolve_value_oid(16501, TypeName("public", "_mood")) == 1009  # enum[]: list of text
    assert resolve_value_oid(16502, None) == 25  # no Type message seen
    assert loader_oid(2950) == 25 and loader_oid(2951) == 1009 and loader_oid(1186) == 1186


def test_row_loader_fast_and_slow_paths() -> None:
    load = row_loader((23, 25, 1700, 1184, 3802, 16), ("id", "name", "amount", "ts", "doc", "ok"))
    assert load(("1", "a", "2.50", "2024-01-01 00:00:00+00", '{"k": 1}', "t")) == {
        "id": 1, "name": "a", "amount": Decimal("2.50"),
        "ts": datetime(2024, 1, 1, tzinfo=UTC), "doc": JsonText('{"k": 1}'), "ok": True}
    # UNCHANGED_TOAST and binary values are kept as they are; refused text stays text
    assert load(("2", UNCHANGED_TOAST, None, "infinity", UNCHANGED_TOAST, b"\x01")) == {
        "id": 2, "name": UNCHANGED_TOAST, "amount": None, "ts": "infinity",
        "doc": UNCHANGED_TOAST, "ok": b"\x01"}
    assert row_loader((23, 25, 1700, 1184, 3802, 16),
                      ("id", "name", "amount", "ts", "doc", "ok")) is load  # cached by shape
    with pytest.raises(ValueError):
        load(("1", "a"))


def test_row_loader_all_text_columns() -> None:
    load = row_loader((25, 1043), ("a", "b"))
    assert load(("x", None)) == {"a": "x", "b": None}
    with pytest.raises(ValueError):
        load(("x",))


def test_row_loader_single_loaded_column() -> None:
    assert row_loader((20,), ("n",))(("7",)) == {"n": 7}
    assert row_loader((20,), ("n",))((None,)) == {"n": None}
