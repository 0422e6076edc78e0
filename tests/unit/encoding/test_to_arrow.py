"""Typed Arrow rows' ``_key``: the struct of the replica-identity columns holding the contract's
``key`` (the old key of an update or delete), typed as the table's columns, and the same on the
Arrow and JSON wire paths. No SparkSession."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pytest

import pgfeed_client
from pgfeed.decoding.model import Change, Op, Transaction
from pgfeed.decoding.relations import RelationCatalog
from pgfeed.decoding.values import load_value
from pgfeed.encoding.to_arrow import ArrowColumn, ipc_stream, typed_batch, typed_schema
from pgfeed.encoding.to_json import change_to_dict, dumps
from pgfeed.http_api.encode import table_columns
from pgfeed.pgoutput.messages import RelationColumn, RelationMessage
from pgfeed_spark import table_schema
from pgfeed_spark._arrow import arrow_schema, conform, rows_to_batch
from pgfeed_spark._schema import json_converter, typed_row

NUMERIC_12_3 = ((12 << 16) | 3) + 4

# A composite key whose columns are not adjacent, and typed columns that need converting.
COLUMNS = [
    ArrowColumn("id", "int8", -1, 20, key=True),
    ArrowColumn("amount", "numeric", NUMERIC_12_3, 1700),
    ArrowColumn("region", "text", -1, 25, key=True),
    ArrowColumn("at", "timestamptz", -1, 1184),
]
OIDS = {c.name: c.type_oid for c in COLUMNS}


def _row(**texts: str | None) -> dict[str, Any]:
    return {k: load_value(OIDS[k], v) for k, v in texts.items()}


def _changes() -> list[Change]:
    new = _row(id="1", amount="2.5", region="eu", at="2026-11-22 10:00:00+00")
    return [
        Change(0x10, 0, Op.INSERT, "public", "t", _row(id="1", region="eu"), None, new),
        Change(0x11, 1, Op.UPDATE, "public", "t", _row(id="1", region="eu"), None,
               {**new, "amount": load_value(1700, "3")}),
        Change(0x12, 2, Op.UPDATE, "public", "t", _row(id="1", region="eu"), None,  # 1 -> 2
               {**new, "id": 2}),
        Change(0x13, 3, Op.DELETE, "public", "t", _row(id="2", region="eu")),
        Change(0x14, 4, Op.UPDATE, "public", "t", None, None, {**new, "id": 3}),  # no key sent
    ]


def _txn(changes: list[Change]) -> Transaction:
    return Transaction(749, 0x20, 0x28, 848_656_800_123_456, None, changes, len(changes))


def test_typed_schema_ends_with_a_struct_of_the_key_columns_typed_as_the_table() -> None:
    schema = typed_schema(COLUMNS)
    assert schema.names[-2:] == ["_table_version", "_key"]
    assert schema.field("_key").type == pa.struct([("id", pa.int64()), ("region", pa.string())])
    assert schema.names[:4] == ["id", "amount", "region", "at"]


def test_a_table_without_key_columns_has_no_key_column() -> None:
    plain = [ArrowColumn(c.name, c.type_name, c.typmod, c.type_oid) for c in COLUMNS]
    assert "_key" not in typed_schema(plain).names
    batch = typed_batch([_txn(_changes()[:1])], plain)
    assert batch.schema.names[-1] == "_table_version" and batch.num_rows == 1


@pytest.mark.parametrize("key", [True, False])
def test_a_column_named_key_is_refused(key: bool) -> None:
    with pytest.raises(ValueError, match=r"metadata columns: \['_key'\]"):
        typed_schema([ArrowColumn("_key", "int4", key=key), *COLUMNS[1:]])


def test_key_values_per_change() -> None:
    batch = typed_batch([_txn(_changes())], COLUMNS)
    assert batch.schema.equals(typed_schema(COLUMNS))
    assert batch.column("_op").to_pylist() == ["insert", "update", "update", "delete", "update"]
    assert batch.column("id").to_pylist() == [1, 1, 2, 2, 3]
    assert batch.column("_key").to_pylist() == [
        {"id": 1, "region": "eu"},  # insert: the new row's key
        {"id": 1, "region": "eu"},  # update that keeps its key
        {"id": 1, "region": "eu"},  # key-changing update: the key it left
        {"id": 2, "region": "eu"},  # delete
        None,                       # a change without key: a NULL struct, not a struct of NULLs
    ]


def test_key_values_convert_like_the_columns() -> None:
    """REPLICA IDENTITY FULL flags every column: the key holds numerics, times, JSON, arrays."""
    full = [ArrowColumn("id", "int8", -1, 20, key=True),
            ArrowColumn("amount", "numeric", NUMERIC_12_3, 1700, key=True),
            ArrowColumn("doc", "jsonb", -1, 3802, key=True),
            ArrowColumn("nums", "_int4", -1, 1007, key=True),
            ArrowColumn("big", "numeric", -1, 1700, key=True)]
    old = {"id": 7, "amount": load_value(1700, "1.5"), "doc": load_value(3802, '{"a": [1]}'),
           "nums": load_value(1007, "{1,NULL}"), "big": load_value(1700, "NaN")}
    change = Change(0x10, 0, Op.UPDATE, "public", "t", old, old, {**old, "id": 8})
    batch = typed_batch([_txn([change])], full)
    key_type = batch.schema.field("_key").type
    assert [key_type.field(i).type for i in range(key_type.num_fields)] == [
        pa.int64(), pa.decimal128(12, 3), pa.string(), pa.list_(pa.field("element", pa.int32())),
        pa.string()]
    assert batch.column("_key").to_pylist() == [
        {"id": 7, "amount": Decimal("1.500"), "doc": '{"a": [1]}', "nums": [1, None], "big": "NaN"}]


def test_the_key_struct_survives_an_ipc_stream() -> None:
    schema = typed_schema(COLUMNS)
    batch = typed_batch([_txn(_changes())], COLUMNS, schema)
    table = pa.ipc.open_stream(ipc_stream(schema, [batch])).read_all()
    assert table.schema.equals(schema) and table.column("_key").to_pylist() == \
        batch.column("_key").to_pylist()


def test_an_ipc_stream_is_pyarrows_own_stream_of_the_non_empty_batches() -> None:
    """Written into a buffer of its exact size (sliced batches too): byte for byte the stream
    pyarrow's writer gives, with the empty batches left out."""
    schema = typed_schema(COLUMNS)
    batch = typed_batch([_txn(_changes()), _txn(_changes())], COLUMNS, schema)
    parts = [batch.slice(0, 1), batch.slice(1, 0), batch.slice(1)]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(parts[0])
        writer.write_batch(parts[2])
    body = ipc_stream(schema, parts)
    assert bytes(body) == sink.getvalue().to_pybytes()
    assert [b.num_rows for b in pa.ipc.open_stream(body)] == [1, batch.num_rows - 1]
    assert bytes(ipc_stream(schema, [])) == bytes(ipc_stream(schema, [batch.slice(0, 0)]))


def _catalog(*versions: tuple[int, tuple[RelationColumn, ...]]) -> RelationCatalog:
    catalog = RelationCatalog()
    for lsn, columns in versions:
        catalog.add(lsn, RelationMessage(None, 16384, "public", "t", ord("d"), columns))
    return catalog


def test_table_columns_carry_the_relations_key_flags_newest_shape_first() -> None:
    first = (RelationColumn(1, "id", 20, -1), RelationColumn(0, "code", 25, -1))
    catalog = _catalog((0x10, first))
    columns = table_columns(catalog, "public.t")
    assert [(c.name, c.key) for c in columns] == [("id", True), ("code", False)]
    assert typed_schema(columns).field("_key").type == pa.struct([("id", pa.int64())])
    rekeyed = (RelationColumn(0, "id", 20, -1), RelationColumn(1, "code", 25, -1))
    catalog = _catalog((0x10, first), (0x30, rekeyed))
    assert typed_schema(table_columns(catalog, "public.t")).field("_key").type == \
        pa.struct([("code", pa.string())])
    nothing = _catalog((0x10, (RelationColumn(0, "id", 20, -1),)))
    assert "_key" not in typed_schema(table_columns(nothing, "public.t")).names


def _table_info() -> pgfeed_client.TableInfo:
    return pgfeed_client.TableInfo("public", "t", tuple(
        pgfeed_client.ColumnInfo(c.name, c.type_oid, c.type_name, c.typmod, c.key) for c in COLUMNS))


def _wire(event: dict[str, Any]) -> pgfeed_client.Change:
    """An event as a JSON reader gets it: serialized as the service does, parsed by clients."""
    return pgfeed_client.Change.from_json(orjson.loads(dumps(event)))


def test_arrow_and_json_wire_paths_give_the_same_typed_rows() -> None:
    """The server's typed batch, conformed to Spark's declared schema, equals the rows the JSON
    path builds from the contract JSON of the same changes: ``_key`` included."""
    spark_schema = table_schema(_table_info())
    target = arrow_schema(spark_schema)
    txn = _txn(_changes())
    served = typed_batch([txn], COLUMNS)
    assert served.schema.equals(target)  # already exact: conform has nothing to cast
    from_arrow = conform(served, target)
    names = [c.name for c in COLUMNS]
    convs = [json_converter(c.type_name, c.typmod, c.type_oid) for c in COLUMNS]
    key = [(n, convs[names.index(n)]) for n in ("id", "region")]
    rows = [typed_row(_wire(change_to_dict(c, txn)), names, convs, key)
            for c in txn.changes]
    from_json = rows_to_batch(rows, target)
    assert from_json.schema.equals(target)
    assert from_json.to_pylist() == from_arrow.to_pylist()
    assert from_json.column("_key").to_pylist()[2] == {"id": 1, "region": "eu"}
