"""Several versions of a table in one Spark schema (issue 27.3), on synthetic schema histories
(the columns ``/schema/history`` serves, with ``previous_name``/``missing_value``). No
SparkSession."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql.types import (
    BooleanType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
)

from pgfeed_client import Change, ColumnInfo, TableInfo, format_lsn
from pgfeed_spark._evolve import (
    RESCUED,
    Lineage,
    Version,
    describe_change,
    missing_value,
    versions_in,
    widen,
)
from pgfeed_spark._read import evolved_row

NUM_10_2 = ((10 << 16) | 2) + 4
NUM_12_2 = ((12 << 16) | 2) + 4


def col(name: str, oid: int, type_name: str, typmod: int = -1, key: bool = False,
        previous: str | None = None, missing: Any = ...) -> ColumnInfo:
    return ColumnInfo(name, oid, type_name, typmod, key, None, previous,
                      None if missing is ... else missing, missing is not ...)


ID = col("id", 23, "int4", key=True)
V1 = (ID, col("name", 25, "text"), col("qty", 23, "int4"), col("price", 1700, "numeric", NUM_10_2))


def history(*, renames: bool = True) -> list[TableInfo]:
    """v1; v2 RENAME name TO title; v3 DROP qty; v4 ADD flag bool DEFAULT true; v5 price
    numeric(12,2), id bigint."""
    title = col("title", 25, "text", previous="name" if renames else None)
    price12 = col("price", 1700, "numeric", NUM_12_2)
    flag = col("flag", 16, "bool", missing=True)
    shapes = [V1, (ID, title, V1[2], V1[3]), (ID, title, V1[3]), (ID, title, V1[3], flag),
              (col("id", 20, "int8", key=True), title, price12, flag)]
    return [TableInfo("public", "t", cols, version=n + 1,
                      valid_from=format_lsn(0x1000 * (n + 1)))
            for n, cols in enumerate(shapes)]


def lineage(rescue: bool = False, renames: bool = True) -> Lineage:
    return Lineage.build("public.t", [Version.of(t) for t in history(renames=renames)], rescue)


def change(version: int, after: dict[str, Any], op: str = "insert",
           key: dict[str, Any] | None = None, toast: list[str] | None = None) -> Change:
    return Change("0/1", 0, "0/1", 7, datetime(2026, 1, 1, tzinfo=UTC), op, "public", "t",
                  key=key, after=after, unchanged_toast=toast or [], table_version=version)


def test_widen_picks_a_type_holding_every_value() -> None:
    assert widen(IntegerType(), LongType()) == LongType()
    assert widen(DecimalType(10, 2), DecimalType(12, 2)) == DecimalType(12, 2)
    assert widen(DecimalType(10, 2), DecimalType(8, 4)) == DecimalType(12, 4)
    assert widen(IntegerType(), DecimalType(5, 2)) == DecimalType(12, 2)
    assert widen(LongType(), DecimalType(38, 30)) == StringType()
    assert widen(IntegerType(), StringType()) == StringType()
    assert widen(BooleanType(), IntegerType()) == StringType()


def test_union_keeps_dropped_columns_follows_renames_and_widens() -> None:
    lin = lineage()
    schema = lin.schema()
    data = [f for f in schema.fields if not f.name.startswith("_")]
    assert [(f.name, f.dataType) for f in data] == [
        ("id", LongType()), ("title", StringType()), ("qty", IntegerType()),
        ("price", DecimalType(12, 2)), ("flag", BooleanType())]
    assert data[1].metadata == {"pgfeed": {"previous_names": ["name"]}}
    meta = data[4].metadata["pgfeed"]
    assert meta["added_in_version"] == 4 and missing_value(meta, BooleanType()) is True
    assert schema["_key"].dataType.fieldNames() == ["id"]


def test_without_ddl_capture_a_rename_is_a_drop_and_an_add() -> None:
    names = [c.name for c in lineage(renames=False).columns]
    assert names == ["id", "name", "qty", "price", "title", "flag"]


def test_each_version_reads_into_its_logical_columns_exactly() -> None:
    lin = lineage()
    old = evolved_row(change(1, {"id": 1, "name": "a", "qty": 97849, "price": "29780.31"}),
                      lin, has_key=True)
    assert old[:5] == (1, "a", 97849, Decimal("29780.31"), None)
    new = evolved_row(change(5, {"id": 2**40, "title": "b", "price": "1234567890.12",
                                 "flag": False}, key={"id": 2**40}), lin, has_key=True)
    assert new[:5] == (2**40, "b", None, Decimal("1234567890.12"), False)
    assert new[-1] == (2**40,) and new[-2] == 5
    toast = evolved_row(change(2, {"id": 3, "title": None, "qty": 1, "price": "1.00"},
                               op="update", toast=["title"]), lin, has_key=True)
    assert toast[1] is None and toast[-3] == ["title"]


def test_rescue_keeps_the_first_version_and_rescues_the_rest() -> None:
    lin = lineage(rescue=True)
    names = lin.schema().fieldNames()
    assert names[:5] == ["id", "name", "qty", "price", RESCUED]
    row = evolved_row(change(5, {"id": 2**40, "title": "b", "price": "1234567890.12",
                                 "flag": True}), lin, has_key=True)
    # a renamed column (DDL captured) keeps its column; values the schema cannot hold are rescued
    assert row[:4] == (None, "b", None, None)
    assert row[4] == '{"id":1099511627776,"price":"1234567890.12","flag":true}'
    plain = evolved_row(change(1, {"id": 1, "name": "a", "qty": 2, "price": "3.00"}), lin, True)
    assert plain[:5] == (1, "a", 2, Decimal("3.00"), None)


def test_a_version_the_schema_holds_needs_no_restart() -> None:
    versions = [Version.of(t) for t in history()]
    lin = Lineage.build("public.t", versions[:2])
    assert lin.holds_version(versions[2])  # a drop
    assert not Lineage.build("public.t", versions[:1]).holds_version(versions[1])  # a rename
    assert not Lineage.build("public.t", versions[:3]).holds_version(versions[3])  # an add
    grown = lin.extended([versions[2]])
    row = evolved_row(change(3, {"id": 1, "title": "x", "price": "2.50"}), grown, False)
    assert row[:4] == (1, "x", None, Decimal("2.50"))


def test_versions_in_a_range() -> None:
    h = history()
    assert [v.number for v in versions_in(h, "earliest", "latest")] == [1, 2, 3, 4, 5]
    assert [v.number for v in versions_in(h, "earliest", format_lsn(0x1800))] == [1]
    assert [v.number for v in versions_in(h, format_lsn(0x2800), format_lsn(0x3800))] == [2, 3]
    assert [v.number for v in versions_in(h, "latest", "latest")] == [5]


def test_a_change_is_described_by_what_changed() -> None:
    versions = [Version.of(t) for t in history()]
    assert describe_change(versions[0], versions[1]) == "version 1 -> 2: renamed name to title"
    assert describe_change(versions[1], versions[2]) == "version 2 -> 3: dropped qty"
    assert "added flag bool (rows before it: True)" in describe_change(versions[2], versions[3])
    assert "id int4 -> int8" in describe_change(versions[3], versions[4])


def test_a_lineage_pickles() -> None:
    import pickle

    lin = lineage()
    lin.mapping(1)
    again = pickle.loads(pickle.dumps(lin))
    assert again.schema() == lin.schema()


@pytest.mark.parametrize("rescue", [False, True])
def test_arrow_rows_of_the_newest_shape_are_exact(rescue: bool) -> None:
    import pyarrow as pa

    lin = lineage(rescue=rescue)
    page = {"id": pa.int64(), "title": pa.string(), "price": pa.decimal128(12, 2),
            "flag": pa.bool_()}
    assert lin.arrow_exact(5, page) is (not rescue)
    assert not lin.arrow_exact(1, page)  # name and qty are not in the newest shape


def test_arrow_rows_cast_to_text_are_read_as_json() -> None:
    import pyarrow as pa

    v1 = Version(1, 0x100, (ID, col("n", 23, "int4")))
    v2 = Version(2, 0x200, (ID, col("n", 25, "text")))
    lin = Lineage.build("public.t", [v1, v2])
    assert lin.columns[1].data_type == StringType()
    # the server's page in v1's shape: int32 n, which Arrow would cast to text its own way
    assert not lin.arrow_exact(1, {"id": pa.int32(), "n": pa.int32()})
    assert lin.arrow_exact(2, {"id": pa.int32(), "n": pa.string()})
    assert evolved_row(change(1, {"id": 1, "n": 42}), lin, False)[:2] == (1, "42")
