"""Decoded transactions -> Arrow IPC streams: the generic change schema, and the typed schema of a
single-table read (the table's columns with Arrow types from their PostgreSQL types).

Columns are built from one Python list per column (never per-row dicts) so a page of 100,000
changes encodes in tens of milliseconds. The typed mapping mirrors
``pgfeed_spark._schema.spark_type`` exactly (a unit test holds them together), so Spark's
``conform`` finds every column already in its declared type:

- int2/int4/int8 -> int16/int32/int64; float4/float8 -> float32/float64; bool; bytea -> binary;
- numeric(p,s) with 1 <= p <= 38 and 0 <= s <= p -> decimal128(p,s), NaN and ±Infinity -> null;
  any other numeric -> string (exact text, ``NaN`` kept);
- date -> date32; timestamp -> timestamp[us]; timestamptz -> timestamp[us, UTC]; values Arrow
  cannot hold (``infinity``, BC, years past 9999: the JSON keeps their text) -> null;
- arrays -> list<element>; a multi-dimensional array value -> null;
- json/jsonb -> string holding the document exactly as PostgreSQL printed it (the document
  ``null`` is the string "null", SQL NULL a null; in json[]/jsonb[] both are null elements); uuid, text types, time, interval and anything
  else -> string: a JSON string value as is, any other value as its JSON text.

Unchanged-TOAST columns (not filled by ``toast=reselect``) are null and listed in
``_unchanged_toast``. ``_key``, last, is a struct of the replica-identity columns (the Relation's
key flags; every column under FULL) typed as the table's: the contract's ``key``, i.e. the old key
of an update or delete, so a key-changing update says which key it left. A table without key
columns has no ``_key`` column.

LSNs are 64-bit integers in Arrow (numerically ordered); the JSON API writes them as
``16/B374D848`` (``pgfeed_client.format_lsn``).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Context, Decimal, InvalidOperation
from typing import Any, cast

import orjson
import pyarrow as pa

from pgfeed.decoding.model import Change, Op, Transaction
from pgfeed.encoding import ARROW_MEDIA_TYPE
from pgfeed.encoding.to_json import dumps
from pgfeed.pgoutput.messages import PG_EPOCH_UNIX_US
from pgfeed.types.floating import SpecialFloat
from pgfeed.types.interval import Interval
from pgfeed.types.json import JsonText
from pgfeed_client.pgtypes import (
    CHANGE_COLUMN_TYPES,
    KEY_COLUMN,
    METADATA_COLUMN_TYPES,
    ColumnType,
    column_type,
    element_is_json,
    is_json,
)

__all__ = [
    "ARROW_MEDIA_TYPE",
    "KEY_FIELD",
    "METADATA_FIELDS",
    "ArrowColumn",
    "arrow_type",
    "change_schema",
    "generic_batch",
    "ipc_stream",
    "typed_batch",
    "typed_schema",
]


_TS_UTC = pa.timestamp("us", tz="UTC")
_STRINGS = pa.list_(pa.field("element", pa.string()))


def _list_of(t: pa.DataType) -> pa.DataType:
    return pa.list_(pa.field("element", t))


# -- PostgreSQL types -> Arrow types: pgfeed_client.pgtypes.column_type, as Spark's schema reads it -----

_KINDS: dict[str, pa.DataType] = {
    "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(), "float32": pa.float32(),
    "float64": pa.float64(), "bool": pa.bool_(), "binary": pa.binary(), "date": pa.date32(),
    "timestamp": pa.timestamp("us"), "timestamptz": _TS_UTC, "string": pa.string(),
}


def _arrow(t: ColumnType) -> pa.DataType:
    if t.kind == "list":
        assert t.element is not None
        return _list_of(_arrow(t.element))
    if t.kind == "decimal":
        return pa.decimal128(t.precision, t.scale)
    return _KINDS[t.kind]


# -- the generic schema: one row per change event, as Spark's change_schema() plus end_lsn -------

_CHANGE_FIELDS: tuple[pa.Field, ...] = (*(pa.field(name, _arrow(t)) for name, t in CHANGE_COLUMN_TYPES),
                                        pa.field("end_lsn", pa.int64()))
_CHANGE_SCHEMA = pa.schema(list(_CHANGE_FIELDS))

# Metadata columns of a typed row, after the table's columns (pgfeed_client.pgtypes), then
# KEY_FIELD (a struct whose fields depend on the table; absent when it has no key columns).
METADATA_FIELDS: tuple[pa.Field, ...] = tuple(pa.field(name, _arrow(t))
                                              for name, t in METADATA_COLUMN_TYPES)
KEY_FIELD = KEY_COLUMN
_METADATA_NAMES = frozenset({f.name for f in METADATA_FIELDS} | {KEY_FIELD})


def change_schema() -> pa.Schema:
    return _CHANGE_SCHEMA


def arrow_type(type_name: str | None, typmod: int = -1, type_oid: int = 0) -> pa.DataType:
    """The Arrow type of a PostgreSQL column in a typed read (see the module docstring)."""
    return _arrow(column_type(type_name, typmod, type_oid))


@dataclass(frozen=True, slots=True)
class ArrowColumn:
    """A table column as ``/tables`` describes it, with what its Arrow column needs."""

    name: str
    type_name: str | None
    typmod: int = -1
    type_oid: int = 0
    key: bool = False  # a replica-identity column (the Relation message's key flag)

    @property
    def is_json(self) -> bool:
        return is_json(self.type_name, self.type_oid)

    @property
    def arrow(self) -> pa.DataType:
        return arrow_type(self.type_name, self.typmod, self.type_oid)

    @property
    def element_is_json(self) -> bool:
        return element_is_json(self.type_name, self.type_oid)


def typed_schema(columns: Sequence[ArrowColumn]) -> pa.Schema:
    """The table's columns (``arrow_type``), ``METADATA_FIELDS``, then ``_key`` when the table
    has key columns."""
    clash = sorted({c.name for c in columns} & _METADATA_NAMES)
    if clash:
        raise ValueError(f"the table has columns named like pgfeed's metadata columns: {clash}; "
                         "read it without a single-table filter (generic schema)")
    fields = [pa.field(c.name, c.arrow) for c in columns] + list(METADATA_FIELDS)
    keys = [pa.field(c.name, c.arrow) for c in columns if c.key]
    return pa.schema(fields + [pa.field(KEY_FIELD, pa.struct(keys))] if keys else fields)


# -- values -> column arrays -----------------------------------------------------------------------

def _json_text(value: Any) -> str | None:
    """A json/jsonb value: PostgreSQL's text as it is (every digit, whatever its depth)."""
    if value is None:
        return None
    if type(value) is JsonText:
        text: str = value.text
        return text
    return dumps(value).decode()


def _text(value: Any) -> str | None:
    """A string column's value: a JSON string as is, any other JSON value as its JSON text."""
    t = type(value)
    if value is None or t is str:
        return cast("str | None", value)
    if t is Decimal:
        return format(value, "f")
    if t is SpecialFloat:
        return cast(str, value.text)
    if t is Interval or isinstance(value, (time, date)):  # date covers datetime
        return cast(str, value.isoformat())
    if t is bytes:
        return base64.b64encode(value).decode()
    if isinstance(value, str):
        return str(value)
    encoded = dumps(value)
    return orjson.loads(encoded) if encoded[:1] == b'"' else encoded.decode()


def _scalar_converter(t: pa.DataType, is_json: bool) -> Callable[[Any], Any]:
    """Per-value fallback when a column's list does not convert as is."""
    if is_json:
        return _json_text
    if pa.types.is_string(t):
        return _text
    if pa.types.is_integer(t):
        return _maybe(int)
    if pa.types.is_floating(t):
        return _maybe(float)
    if pa.types.is_boolean(t):
        return lambda v: v if v is None or type(v) is bool else None
    if pa.types.is_binary(t):
        return lambda v: v if v is None or isinstance(v, bytes) else None
    if pa.types.is_decimal(t):
        quantum = Decimal(1).scaleb(-t.scale)
        # the type's own precision, not the default context's 28 digits: numeric(38,3) holds
        # 10^25 with its three decimals (29 digits); a value wider than the type is null
        context = Context(prec=t.precision)

        def decimal(v: Any) -> Decimal | None:
            try:
                d = v if type(v) is Decimal else Decimal(str(v))
                return d.quantize(quantum, context=context) if d.is_finite() else None
            except (InvalidOperation, ValueError, TypeError):
                return None
        return decimal
    if pa.types.is_date(t):
        return lambda v: v if type(v) is date else (v.date() if isinstance(v, datetime) else None)
    if pa.types.is_timestamp(t):
        return lambda v: v if isinstance(v, datetime) else None
    return lambda v: v


def _maybe(cast: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``cast(v)``, or None when the value does not convert (as Spark's JSON path does)."""
    def convert(v: Any) -> Any:
        if v is None:
            return None
        try:
            return cast(v)
        except (TypeError, ValueError, OverflowError):
            return None
    return convert


def _json_element_text(value: Any) -> str | None:
    """A json[]/jsonb[] element: its text, the document ``null`` a null element (as the JSON
    event and protobuf write it: an array's elements have no ``json_null`` list)."""
    text = _json_text(value)
    return None if text == "null" else text


def _converter(column: ArrowColumn, t: pa.DataType) -> Callable[[Any], Any]:
    if pa.types.is_list(t):
        element = (_json_element_text if column.element_is_json
                   else _scalar_converter(t.value_type, False))

        def array(v: Any) -> list[Any] | None:
            if not isinstance(v, list) or any(isinstance(x, list) for x in v):
                return None  # not an array, or multi-dimensional: no 1-D list holds it
            return [element(x) for x in v]
        return array
    return _scalar_converter(t, column.is_json)


_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)


def _column(values: list[Any], column: ArrowColumn, t: pa.DataType) -> pa.Array:
    if column.is_json or column.element_is_json:
        convert = _converter(column, t)
        return pa.array([convert(v) for v in values], type=t)
    try:
        return pa.array(values, type=t)
    except _CONVERSION_ERRORS:  # strings where times were, NaN numerics, nested arrays...
        convert = _converter(column, t)
        return pa.array([convert(v) for v in values], type=t)


_ROW_IMAGE_AFTER = frozenset({Op.INSERT, Op.UPDATE, Op.READ})
_EMPTY: dict[str, Any] = {}


def _changes(transactions: Iterable[Transaction[Change]],
             ) -> tuple[list[Change], list[Transaction[Change]]]:
    """Every change, and the transaction of each (same length)."""
    changes: list[Change] = []
    owners: list[Transaction[Change]] = []
    for t in transactions:
        changes.extend(t.changes)
        owners.extend([t] * len(t.changes))
    return changes, owners


def _repeated(transactions: Iterable[Transaction[Change]],
              attr: Callable[[Transaction[Change]], Any]) -> list[Any]:
    out: list[Any] = []
    for t in transactions:
        out.extend([attr(t)] * len(t.changes))
    return out


def typed_batch(transactions: Sequence[Transaction[Change]], columns: Sequence[ArrowColumn],
                schema: pa.Schema | None = None) -> pa.RecordBatch:
    """Changes of one table as rows of ``typed_schema(columns)``: the new image for inserts and
    updates, the old one (whole, else the key) for deletes, nothing for truncates; DDL events
    are left out (they are no row: a generic read has them)."""
    schema = schema or typed_schema(columns)
    if any(c.op is Op.DDL for t in transactions for c in t.changes):  # not rows: generic reads only
        transactions = [t.with_changes([c for c in t.changes if c.op is not Op.DDL])
                        for t in transactions]
    changes, _ = _changes(transactions)
    images = [(c.after if c.op in _ROW_IMAGE_AFTER else (c.before or c.key)) or _EMPTY
              for c in changes]
    values = {col.name: [img.get(col.name) for img in images] for col in columns}
    toast_lists: list[list[str]] = []
    for i, c in enumerate(changes):
        toast = c.unchanged_toast
        toast_lists.append(toast)
        if toast:
            hidden = set(toast).difference(c.toast_filled or ())
            for name in hidden:
                column_values = values.get(name)
                if column_values is not None:
                    column_values[i] = None
    arrays = [_column(values[col.name], col, schema.field(col.name).type) for col in columns]
    arrays.extend(_metadata(transactions, changes, toast_lists))
    if KEY_FIELD in schema.names:
        arrays.append(_key_struct(changes, columns, schema.field(KEY_FIELD).type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _key_struct(changes: list[Change], columns: Sequence[ArrowColumn],
                t: pa.StructType) -> pa.StructArray:
    """Each change's ``key`` as a struct, its values converted as the table's columns are; null
    where the change has no key."""
    by_name = {c.name: c for c in columns}
    keys = [c.key or _EMPTY for c in changes]
    children = [_column([k.get(f.name) for k in keys], by_name[f.name], f.type) for f in t]
    mask = pa.array([c.key is None for c in changes], pa.bool_())
    return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)


def _metadata(transactions: Sequence[Transaction[Change]], changes: list[Change],
              toast_lists: list[list[str]]) -> list[pa.Array]:
    return [
        pa.array([c.op.value for c in changes], pa.string()),
        pa.array([c.lsn for c in changes], pa.int64()),
        pa.array([c.seq for c in changes], pa.int64()),
        pa.array(_repeated(transactions, lambda t: t.commit_lsn), pa.int64()),
        pa.array(_repeated(transactions, lambda t: t.commit_ts + PG_EPOCH_UNIX_US), pa.int64()).cast(_TS_UTC),
        pa.array(_repeated(transactions, lambda t: t.xid), pa.int64()),
        pa.array(toast_lists, _STRINGS),
        pa.array([c.table_version or None for c in changes], pa.int32()),
    ]


def _json_or_none(values: Iterable[Any]) -> list[bytes | None]:
    return [None if v is None else dumps(v) for v in values]


def generic_batch(transactions: Sequence[Transaction[Change]]) -> pa.RecordBatch:
    """Every change as a row of ``change_schema()``; row images and options as JSON text."""
    changes, _ = _changes(transactions)
    arrays = [
        pa.array([c.lsn for c in changes], pa.int64()),
        pa.array([c.seq for c in changes], pa.int64()),
        pa.array(_repeated(transactions, lambda t: t.commit_lsn), pa.int64()),
        pa.array(_repeated(transactions, lambda t: t.commit_ts + PG_EPOCH_UNIX_US), pa.int64()).cast(_TS_UTC),
        pa.array(_repeated(transactions, lambda t: t.xid), pa.int64()),
        pa.array([c.op.value for c in changes], pa.string()),
        pa.array([c.schema for c in changes], pa.string()),
        pa.array([c.table for c in changes], pa.string()),
        pa.array(_json_or_none(c.key for c in changes), pa.string()),
        pa.array(_json_or_none(c.before for c in changes), pa.string()),
        pa.array(_json_or_none(c.after for c in changes), pa.string()),
        pa.array([c.unchanged_toast if c.op in _ROW_OPS else None for c in changes], _STRINGS),
        pa.array(_repeated(transactions, lambda t: t.origin), pa.string()),
        pa.array([c.prefix for c in changes], pa.string()),
        pa.array([c.content for c in changes], pa.binary()),
        pa.array([c.transactional for c in changes], pa.bool_()),
        pa.array([c.tables for c in changes], _STRINGS),
        pa.array(_json_or_none(c.options for c in changes), pa.string()),
        pa.array([c.toast_filled for c in changes], _STRINGS),
        pa.array([c.table_version for c in changes], pa.int32()),
        pa.array(_json_or_none(c.json_null for c in changes), pa.string()),
        pa.array(_json_or_none(c.ddl for c in changes), pa.string()),
        pa.array(_repeated(transactions, lambda t: t.end_lsn), pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=_CHANGE_SCHEMA)


_ROW_OPS = frozenset({Op.INSERT, Op.UPDATE, Op.DELETE, Op.READ})


def ipc_stream(schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> memoryview:
    """An Arrow IPC stream: the schema, then the non-empty batches. Written once into a buffer
    of its exact size (measured by a first pass that copies nothing): a growing buffer and a
    copy to ``bytes`` cost a 100,000-row page 2-3x as much."""
    batches = [b for b in batches if b.num_rows]
    size = pa.MockOutputStream()
    _write(size, schema, batches)
    body = pa.allocate_buffer(size.size())
    _write(pa.FixedSizeBufferWriter(body), schema, batches)
    return memoryview(body)


def _write(sink: Any, schema: pa.Schema, batches: list[pa.RecordBatch]) -> None:
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
