"""``_key`` in the Spark connector's typed schema, JSON-path rows and Arrow conforming: a struct of
the replica-identity columns, typed as the table's columns. No SparkSession."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    DecimalType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pgfeed_client import Change, ColumnInfo, TableInfo
from pgfeed_spark import table_schema
from pgfeed_spark._arrow import arrow_schema, conform, rows_to_batch
from pgfeed_spark._schema import json_converter, typed_row

NUMERIC_12_3 = ((12 << 16) | 3) + 4

TABLE = TableInfo("public", "t", (
    ColumnInfo("region", 25, "text", -1, True),
    ColumnInfo("amount", 1700, "numeric", NUMERIC_12_3),
    ColumnInfo("id", 20, "int8", -1, True),
    ColumnInfo("at", 1184, "timestamptz", -1, True),
))
KEY_TYPE = StructType([StructField("region", StringType()), StructField("id", LongType()),
                       StructField("at", TimestampType())])


def test_key_is_last_a_struct_of_the_key_columns_in_table_order() -> None:
    schema = table_schema(TABLE)
    assert schema.fieldNames()[-3:] == ["_unchanged_toast", "_table_version", "_key"]
    assert schema["_key"].dataType == KEY_TYPE
    assert schema["amount"].dataType == DecimalType(12, 3)
    assert arrow_schema(schema).field("_key").type == pa.struct([
        ("region", pa.string()), ("id", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])


def test_no_key_columns_no_key_column() -> None:
    """REPLICA IDENTITY NOTHING (or DEFAULT without a primary key): no flag, no ``_key``."""
    plain = TableInfo("public", "t", (ColumnInfo("id", 20, "int8"), ColumnInfo("v", 25, "text")))
    assert table_schema(plain).fieldNames()[-1] == "_table_version"


@pytest.mark.parametrize("key", [True, False])
def test_a_column_named_key_is_refused(key: bool) -> None:
    bad = TableInfo("public", "x", (ColumnInfo("_key", 23, "int4", -1, key),
                                    ColumnInfo("v", 25, "text", -1, not key)))
    with pytest.raises(ValueError, match=r"metadata: \['_key'\]"):
        table_schema(bad)


def _change(op: str, key: dict[str, Any] | None, after: dict[str, Any] | None = None,
            before: dict[str, Any] | None = None) -> Change:
    return Change("0/10", 0, "0/20", 749, datetime(2026, 11, 22, tzinfo=UTC), op, "public", "t",
                  key, before, after)


def _rows(*changes: Change) -> pa.RecordBatch:
    names = [c.name for c in TABLE.columns]
    convs = [json_converter(c.type_name, c.typmod, c.type_oid) for c in TABLE.columns]
    key = [(f.name, convs[names.index(f.name)]) for f in KEY_TYPE.fields]
    return rows_to_batch([typed_row(c, names, convs, key) for c in changes],
                         arrow_schema(table_schema(TABLE)))


def test_json_path_key_per_change() -> None:
    at = "2026-11-22T10:00:00+00:00"
    k1 = {"region": "eu", "id": 1, "at": at}
    batch = _rows(
        _change("insert", k1, {**k1, "amount": "2.5"}),
        _change("update", k1, {**k1, "amount": "3"}),
        _change("update", k1, {**k1, "id": 2}),             # key 1 -> 2: names the key it left
        _change("delete", {**k1, "id": 2}),
        _change("update", None, {**k1, "id": 3}),           # no key: a NULL struct
    )
    assert batch.schema.equals(arrow_schema(table_schema(TABLE)))
    old = {"region": "eu", "id": 1, "at": datetime(2026, 11, 22, 10, tzinfo=UTC)}
    assert batch.column("_key").to_pylist() == [old, old, old, {**old, "id": 2}, None]
    assert batch.column("id").to_pylist() == [1, 1, 2, 2, 3]
    assert batch.column("amount").to_pylist()[:2] == [Decimal("2.500"), Decimal("3.000")]


def test_json_path_key_of_a_partial_key_keeps_the_struct() -> None:
    """A key column the key does not hold (unchanged TOAST, an older shape) is NULL inside a
    non-NULL struct."""
    batch = _rows(_change("update", {"id": 5}, {"id": 6}))
    assert batch.column("_key").to_pylist() == [{"region": None, "id": 5, "at": None}]


def test_typed_row_without_key_ends_at_the_table_version() -> None:
    names = [c.name for c in TABLE.columns]
    convs = [json_converter(c.type_name, c.typmod, c.type_oid) for c in TABLE.columns]
    row = typed_row(_change("insert", {"id": 1}, {"id": 1}), names, convs)
    assert len(row) == len(names) + 8 and row[-2] == [] and row[-1] is None


def test_conform_matches_struct_fields_by_name_and_casts_them() -> None:
    """A server's struct may order, type or hold fields differently; NULL structs stay NULL."""
    target = arrow_schema(table_schema(TABLE))
    served_key = pa.array(
        [{"id": 1, "region": "eu", "extra": True}, None, {"id": 3, "region": None, "extra": None}],
        pa.struct([("id", pa.int32()), ("region", pa.large_string()), ("extra", pa.bool_())]))
    source = pa.RecordBatch.from_pydict({"id": pa.array([1, 2, 3], pa.int64()),
                                         "_key": served_key})
    out = conform(source, target)
    assert out.schema.equals(target)
    assert out.column("_key").to_pylist() == [{"region": "eu", "id": 1, "at": None}, None,
                                              {"region": None, "id": 3, "at": None}]
    sliced = conform(source.slice(1), target)  # offsets into the children are kept
    assert sliced.column("_key").to_pylist() == [None, {"region": None, "id": 3, "at": None}]


def test_conform_casts_struct_children_like_columns() -> None:
    target = arrow_schema(table_schema(TABLE))
    served_key = pa.StructArray.from_arrays(
        [pa.array(["eu"]).dictionary_encode(), pa.array([7], pa.int16()),
         pa.array([datetime(2026, 1, 1, 12)], pa.timestamp("ns", tz="+01:00"))],
        names=["region", "id", "at"])
    out = conform(pa.RecordBatch.from_pydict({"_key": served_key}), target)
    assert out.schema.equals(target)
    assert out.column("_key").to_pylist() == [
        {"region": "eu", "id": 7, "at": datetime(2026, 1, 1, 12, tzinfo=UTC)}]


def test_conform_refuses_a_key_that_is_not_a_struct() -> None:
    """A server sending ``_key`` as JSON text cannot fill the struct: fail, never NULL it."""
    source = pa.RecordBatch.from_pydict({"_key": pa.array(['{"id":1}'])})
    with pytest.raises(pa.ArrowNotImplementedError):
        conform(source, arrow_schema(table_schema(TABLE)))
