"""Pure parts of the Spark connector: type mapping, schemas, JSON values -> rows, Arrow conforming,
partition planning and option parsing. No SparkSession."""

from __future__ import annotations

import pickle
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pgfeed_client import Change, ColumnInfo, TableInfo
from pgfeed_client._json import loads_exact
from pgfeed_spark import (
    KEY_COLUMN,
    METADATA_COLUMNS,
    FeedOptions,
    change_schema,
    spark_type,
    table_schema,
)
from pgfeed_spark._arrow import arrow_schema, conform, lsn_to_int64, rows_to_batch
from pgfeed_spark._partition import LsnRange, plan_ranges
from pgfeed_spark._schema import json_converter, numeric_precision, raw_row, typed_row


def _numeric(p: int, s: int) -> int:
    return ((p << 16) | (s & 0x7FF)) + 4


@pytest.mark.parametrize(("name", "typmod", "expected"), [
    ("int2", -1, ShortType()), ("int4", -1, IntegerType()), ("int8", -1, LongType()),
    ("bigint", -1, LongType()), ("float4", -1, FloatType()), ("float8", -1, DoubleType()),
    ("bool", -1, BooleanType()), ("text", -1, StringType()), ("varchar", 36, StringType()),
    ("bpchar", 14, StringType()), ("bytea", -1, BinaryType()), ("date", -1, DateType()),
    ("timestamp", -1, TimestampNTZType()), ("timestamptz", -1, TimestampType()),
    ("json", -1, StringType()), ("jsonb", -1, StringType()), ("uuid", -1, StringType()),
    ("interval", -1, StringType()), ("time", -1, StringType()), ("public.mood", -1, StringType()),
    ("numeric", -1, StringType()), ("numeric", _numeric(10, 2), DecimalType(10, 2)),
    ("numeric", _numeric(38, 38), DecimalType(38, 38)), ("numeric", _numeric(39, 2), StringType()),
    ("numeric", _numeric(5, -2), StringType()), ("numeric", _numeric(3, 5), StringType()),
    ("_int4", -1, ArrayType(IntegerType())), ("_text", -1, ArrayType(StringType())),
    ("_numeric", _numeric(12, 4), ArrayType(DecimalType(12, 4))),
    ("_timestamptz", -1, ArrayType(TimestampType())), ("int4[]", -1, ArrayType(IntegerType())),
    ("pg_catalog.int8", -1, LongType()),
])
def test_spark_type(name: str, typmod: int, expected: object) -> None:
    assert spark_type(name, typmod) == expected


def test_spark_type_by_oid_when_unnamed() -> None:
    assert spark_type(None, -1, 20) == LongType()
    assert spark_type(None, -1, 1007) == ArrayType(IntegerType())
    assert spark_type(None, -1, 99999) == StringType()


def test_numeric_typmod_decoding() -> None:
    assert numeric_precision(-1) is None
    assert numeric_precision(_numeric(10, 2)) == (10, 2)
    assert numeric_precision(_numeric(5, -3)) == (5, -3)  # PostgreSQL 15+


TABLE = TableInfo("public", "t", (
    ColumnInfo("id", 20, "int8", -1, True),
    ColumnInfo("amount", 1700, "numeric", _numeric(12, 3)),
    ColumnInfo("big", 1700, "numeric", -1),
    ColumnInfo("ratio", 701, "float8"),
    ColumnInfo("at", 1184, "timestamptz"),
    ColumnInfo("local", 1114, "timestamp"),
    ColumnInfo("day", 1082, "date"),
    ColumnInfo("tags", 1009, "_text"),
    ColumnInfo("nums", 1007, "_int4"),
    ColumnInfo("blob", 17, "bytea"),
    ColumnInfo("doc", 3802, "jsonb"),
    ColumnInfo("body", 25, "text"),
))


def test_table_schema_has_columns_then_metadata() -> None:
    schema = table_schema(TABLE)
    assert schema.fieldNames() == [c.name for c in TABLE.columns] + [
        "_op", "_lsn", "_seq", "_commit_lsn", "_commit_ts", "_xid", "_unchanged_toast",
        "_table_version", "_key"]
    assert schema["_key"].dataType == StructType([StructField("id", LongType())])
    assert schema["amount"].dataType == DecimalType(12, 3)
    assert schema["_unchanged_toast"].dataType == ArrayType(StringType())
    assert all(f.nullable for f in schema.fields)


def test_metadata_name_clash_is_refused() -> None:
    bad = TableInfo("public", "x", (ColumnInfo("_op", 25, "text"),))
    with pytest.raises(ValueError, match="metadata"):
        table_schema(bad)


def _change(**kw: object) -> Change:
    base: dict[str, object] = {
        "lsn": "0/16B1A20", "seq": 3, "commit_lsn": "1/16B1B00", "xid": 749,
        "commit_ts": datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=UTC), "op": "insert",
        "schema": "public", "table": "t", "key": {"id": 1}}
    base.update(kw)
    return Change(**base)  # type: ignore[arg-type]


def _converters() -> tuple[list[str], list[object]]:
    names = [c.name for c in TABLE.columns]
    return names, [json_converter(c.type_name, c.typmod, c.type_oid) for c in TABLE.columns]


def test_typed_row_converts_contract_json_values() -> None:
    after = {"id": 1, "amount": "12.5", "big": "NaN", "ratio": "-Infinity",
             "at": "2026-11-22T12:00:00.5+02:00", "local": "2026-11-22T10:00:00",
             "day": "2026-11-22", "tags": ["a", None], "nums": [1, 2], "blob": "AAE=",
             "doc": {"a": [1, "x"]}, "body": "hi"}
    names, convs = _converters()
    row = typed_row(_change(after=after), names, convs)
    assert row[:12] == (
        1, Decimal("12.500"), "NaN", float("-inf"),
        datetime(2026, 11, 22, 10, 0, 0, 500000, tzinfo=UTC), datetime(2026, 11, 22, 10, 0),
        date(2026, 11, 22), ["a", None], [1, 2], b"\x00\x01", '{"a":[1,"x"]}', "hi")
    assert row[12:] == ("insert", 0x16B1A20, 3, 0x1_016B1B00,
                        datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=UTC), 749, [], None)


def test_values_spark_cannot_hold_become_null() -> None:
    names, convs = _converters()
    after = {"id": 2, "amount": "NaN", "at": "infinity", "day": "0044-03-15 BC",
             "nums": [[1, 2], [3, 4]], "ratio": "NaN"}
    row = typed_row(_change(after=after), names, convs)
    assert row[1] is None and row[4] is None and row[6] is None and row[8] is None
    assert row[3] != row[3]  # float NaN stays NaN


def test_unchanged_toast_is_null_and_named_never_confused_with_null() -> None:
    names, convs = _converters()
    row = typed_row(_change(op="update", after={"id": 1, "body": "__pgfeed_unchanged__",
                                                "doc": None},
                            unchanged_toast=["body"]), names, convs)
    assert row[names.index("body")] is None and row[-2] == ["body"]  # _unchanged_toast
    assert row[names.index("doc")] is None  # a real NULL: not listed
    filled = typed_row(_change(op="update", after={"id": 1, "body": "kept"},
                               unchanged_toast=["body"], toast_filled=["body"]), names, convs)
    assert filled[names.index("body")] == "kept"


def test_delete_uses_old_image_or_key() -> None:
    names, convs = _converters()
    row = typed_row(_change(op="delete", key={"id": 7}), names, convs)
    assert row[0] == 7 and row[1:12] == (None,) * 11 and row[12] == "delete"
    full = typed_row(_change(op="delete", key={"id": 7}, before={"id": 7, "body": "x"}),
                     names, convs)
    assert full[names.index("body")] == "x"


def test_raw_row_and_batch_match_the_change_schema() -> None:
    change = _change(after={"id": 1, "n": "1.5"}, unchanged_toast=["b"])
    row = raw_row(change)
    assert row[8] == '{"id":1}' and row[10] == '{"id":1,"n":"1.5"}' and row[9] is None
    target = arrow_schema(change_schema())
    batch = rows_to_batch([row, raw_row(_change(op="truncate", key=None, tables=["public.t"],
                                                options={"cascade": False}))], target)
    assert batch.schema.equals(target) and batch.num_rows == 2
    assert batch.column("options").to_pylist() == [None, '{"cascade":false}']
    typed = rows_to_batch([typed_row(_change(after={"id": 1}), *_converters(), [("id", int)])],
                          arrow_schema(table_schema(TABLE)))
    assert typed.schema.equals(arrow_schema(table_schema(TABLE)))


def test_conform_casts_renames_fills_and_drops() -> None:
    target = arrow_schema(table_schema(TABLE))
    paris = timezone(timedelta(hours=1))
    source = pa.RecordBatch.from_pydict({
        "id": pa.array([1, 2], pa.int64()),
        "amount": pa.array([Decimal("1.5"), None], pa.decimal128(20, 3)),
        "at": pa.array([datetime(2026, 1, 1, 12, tzinfo=paris)] * 2, pa.timestamp("ns", "+01:00")),
        "tags": pa.array([["a"], None], pa.large_list(pa.large_string())),
        "body": pa.array(["x", "y"], pa.large_string()).dictionary_encode(),
        "op": pa.array(["insert", "update"]),
        "lsn": pa.array(["0/10", "A/FF"]),
        "seq": pa.array([0, 1], pa.int32()),
        "commit_lsn": pa.array(["0/20", "B/0"]).dictionary_encode(),
        "extra": pa.array([1, 2]),
    })
    aliases = {"_op": ("op",), "_lsn": ("lsn",), "_seq": ("seq",), "_commit_lsn": ("commit_lsn",)}
    out = conform(source, target, aliases)
    assert out.schema.equals(target)
    assert out.column("at").to_pylist()[0] == datetime(2026, 1, 1, 11, tzinfo=UTC)
    assert out.column("_lsn").to_pylist() == [0x10, 0xA_000000FF]
    assert out.column("_commit_lsn").to_pylist() == [0x20, 0xB_00000000]
    assert out.column("amount").to_pylist() == [Decimal("1.500"), None]
    assert out.column("ratio").null_count == 2 and out.column("body").to_pylist() == ["x", "y"]


def test_lsn_to_int64_keeps_nulls() -> None:
    assert lsn_to_int64(pa.array(["1/0", None, "1/0"])).to_pylist() == [1 << 32, None, 1 << 32]


def test_plan_ranges_cuts_inside_the_range_only() -> None:
    ranges = plan_ranges("earliest", "0/500", ["0/0", "0/100", "0/300", "0/300", "0/500"])
    assert [(r.after, r.to) for r in ranges] == [
        ("earliest", "0/100"), ("0/100", "0/300"), ("0/300", "0/500")]
    mid = plan_ranges("0/100:5", "0/300:2", ["0/100", "0/200", "0/300"])
    assert [(r.after, r.to) for r in mid] == [("0/100:5", "0/100"), ("0/100", "0/200"),
                                               ("0/200", "0/300:2")]
    assert plan_ranges("0/300", "0/300", ["0/300"]) == []
    assert [r.index for r in ranges] == [0, 1, 2]


def test_partitions_pickle() -> None:
    part = LsnRange(1, "0/10", "0/20:3")
    assert pickle.loads(pickle.dumps(part)) == part


def test_options() -> None:
    opts = FeedOptions.parse({"URL": "http://h:1/", "Feed": "shop", "table": "orders",
                              "PARTITIONS": "8", "maxrowspertrigger": "50"})
    assert (opts.url, opts.feed, opts.table, opts.tables, opts.partitions) == (
        "http://h:1", "shop", "public.orders", "public.orders", 8)
    assert opts.ops == "insert,update,delete,read,truncate" and opts.max_rows_per_trigger == 50
    assert opts.urls == ("http://h:1",)
    assert opts.start == "earliest" and opts.end == "latest" and opts.wire == "arrow"
    raw = FeedOptions.parse({"url": "u", "feed": "f", "tables": "public.a,public.b",
                             "from": "0/10:3", "wireFormat": "JSON"})
    assert raw.ops is None and raw.tables == "public.a,public.b" and raw.wire == "json"
    with pytest.raises(ValueError, match="'url'"):
        FeedOptions.parse({"feed": "f"})
    with pytest.raises(ValueError, match="positive"):
        FeedOptions.parse({"url": "u", "feed": "f", "partitions": "0"})
    with pytest.raises(ValueError, match="expected"):
        FeedOptions.parse({"url": "u", "feed": "f", "from": "yesterday"})
    assert opts.read_ahead == 1
    assert FeedOptions.parse({"url": "u", "feed": "f", "readahead": "0"}).read_ahead == 0
    with pytest.raises(ValueError, match="'readAhead' must be an integer >= 0"):
        FeedOptions.parse({"url": "u", "feed": "f", "readAhead": "-1"})
    assert pickle.loads(pickle.dumps(opts)) == opts
    several = FeedOptions.parse({"url": "http://a:1, http://b:2/", "urls": "http://c:3",
                                 "feed": "f"})
    assert several.url == "http://a:1" and several.urls == ("http://a:1", "http://b:2", "http://c:3")


def test_metadata_columns_are_the_documented_ones() -> None:
    assert [m.name for m in METADATA_COLUMNS] == [
        "_op", "_lsn", "_seq", "_commit_lsn", "_commit_ts", "_xid", "_unchanged_toast",
        "_table_version"]
    assert KEY_COLUMN == "_key"  # last, after these, when the table has key columns


def test_arrow_rows_past_the_range_end_are_cut() -> None:
    from pgfeed_spark._read import _cut

    target = arrow_schema(change_schema())
    rows = [(1, s, lsn, None, 1, "insert", "public", "t", None, None, None, [], None, None, None,
             None, None, None, None, None, None, None) for lsn, s in [(0x10, 0), (0x10, 1), (0x20, 0), (0x20, 1)]]
    batch = rows_to_batch(rows, target)
    from pgfeed_client import Cursor
    assert _cut(batch, Cursor(0x20, 0), "commit_lsn", "seq").num_rows == 3
    assert _cut(batch, Cursor(0x10), "commit_lsn", "seq").num_rows == 2



def test_json_wire_path_keeps_every_digit_of_json_documents() -> None:
    """wireFormat=json: the client parses documents with exact numbers (issue 13, item 2); the
    typed string column and the raw row images write them back digit for digit."""
    doc = loads_exact('{"big": 123456789012345678901234567890, "small": 0.10000000000000000001, '
                      '"e": 1e-7}')
    text = '{"big":123456789012345678901234567890,"small":0.10000000000000000001,"e":1e-07}'
    assert json_converter("jsonb")(doc) == text
    assert json_converter("_jsonb")([doc, None]) == [text, None]
    change = Change(lsn="0/1", seq=0, commit_lsn="0/2", xid=1, commit_ts=None, op="insert",
                    schema="public", table="t", key={"id": 1}, after={"id": 1, "doc": doc})
    assert raw_row(change)[10] == '{"id":1,"doc":' + text + "}"
