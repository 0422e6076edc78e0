"""PURE: PostgreSQL column types -> Spark types, the raw and typed change schemas, and contract JSON
values -> the Python values those Spark types hold (the JSON wire path)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
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

from pgfeed_client import Change, TableInfo, parse_lsn
from pgfeed_client._json import dumps_exact
from pgfeed_client.pgtypes import (
    CHANGE_COLUMN_TYPES,
    JSON_TYPES,
    KEY_COLUMN,
    METADATA_COLUMN_TYPES,
    ColumnType,
    base_name,
    column_type,
    numeric_precision,
)

__all__ = [
    "KEY_COLUMN", "METADATA_COLUMNS", "METADATA_NAMES", "change_schema", "json_converter",
    "numeric_precision", "raw_row", "spark_type", "table_schema", "typed_row",
]

# pgfeed_client.pgtypes.column_type's kinds (the one table the server's Arrow encoder reads too)
_KINDS: dict[str, DataType] = {
    "int16": ShortType(), "int32": IntegerType(), "int64": LongType(), "float32": FloatType(),
    "float64": DoubleType(), "bool": BooleanType(), "binary": BinaryType(), "date": DateType(),
    "timestamp": TimestampNTZType(), "timestamptz": TimestampType(), "string": StringType(),
}

def _spark(t: ColumnType) -> DataType:
    if t.kind == "list":
        assert t.element is not None
        return ArrayType(_spark(t.element))
    if t.kind == "decimal":
        return DecimalType(t.precision, t.scale)
    return _KINDS[t.kind]


# Metadata of every typed row (pgfeed_client.pgtypes.METADATA_COLUMN_TYPES), then KEY_COLUMN
# when the table has key columns (a struct of them, same names and types).
METADATA_COLUMNS: tuple[StructField, ...] = tuple(StructField(name, _spark(t))
                                                  for name, t in METADATA_COLUMN_TYPES)
METADATA_NAMES = frozenset({m.name for m in METADATA_COLUMNS} | {KEY_COLUMN})

_CHANGE_SCHEMA = StructType([StructField(name, _spark(t)) for name, t in CHANGE_COLUMN_TYPES])


def change_schema() -> StructType:
    """The raw change schema: one row per change event, row images as JSON text, LSNs as 64-bit
    positions (they sort numerically; ``pgfeed_client.format_lsn`` gives the ``16/B374D848`` form)."""
    return StructType(list(_CHANGE_SCHEMA.fields))


def spark_type(type_name: str | None, typmod: int = -1, type_oid: int = 0) -> DataType:
    """The Spark type of a PostgreSQL column: exact where Spark can hold every value, else string
    (``pgfeed_client.pgtypes.column_type``; timestamp -> TimestampNTZ, timestamptz -> Timestamp)."""
    return _spark(column_type(type_name, typmod, type_oid))


def table_schema(table: TableInfo) -> StructType:
    """Typed schema of one table: its columns (``spark_type``), ``METADATA_COLUMNS``, then
    ``_key`` (a struct of the key columns, as typed above) unless the table has no key columns
    (REPLICA IDENTITY NOTHING, or DEFAULT without a primary key)."""
    fields = [StructField(c.name, spark_type(c.type_name, c.typmod, c.type_oid))
              for c in table.columns]
    clash = {f.name for f in fields} & METADATA_NAMES
    if clash:
        raise ValueError(f"{table.qualified_name} has columns named like pgfeed's metadata: "
                         f"{sorted(clash)}")
    keys = [f for f, c in zip(fields, table.columns) if c.key]
    key = [StructField(KEY_COLUMN, StructType(keys))] if keys else []
    return StructType(fields + list(METADATA_COLUMNS) + key)


# -- contract JSON values -> Spark's Python values ------------------------------------------------

Converter = Callable[[Any], Any]


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def _float(v: Any) -> float | None:
    return None if v is None else float(v)  # "NaN", "Infinity", "-Infinity" parse too


def _str(v: Any) -> str | None:
    return v if v is None or isinstance(v, str) else dumps_exact(v)


def _json_text(v: Any) -> str | None:
    """A json/jsonb value as the client parsed it (numbers exact) -> compact JSON text, every
    digit kept; the Arrow wire format carries PostgreSQL's own text instead."""
    return None if v is None else dumps_exact(v)  # JSON_NULL (the document null): "null"


def _bytes(v: Any) -> bytes | None:
    return None if v is None else base64.b64decode(v)


def _maybe(parse: Callable[[str], Any]) -> Converter:
    def convert(v: Any) -> Any:
        if v is None:
            return None
        try:
            return parse(v)
        except (ValueError, TypeError):  # infinity, BC dates, years past 9999: not holdable
            return None
    return convert


def _decimal(scale: int) -> Converter:
    quantum = Decimal(1).scaleb(-scale)

    def convert(v: Any) -> Decimal | None:
        if v is None:
            return None
        try:
            d = Decimal(v)
        except (InvalidOperation, TypeError):
            return None
        return d.quantize(quantum) if d.is_finite() else None  # NaN cannot be a Spark decimal
    return convert


def _array(element: Converter, documents: bool = False) -> Converter:
    """``documents``: json/jsonb elements, where a list is a JSON array document, not a second
    dimension (the JSON wire form cannot tell them apart; 1-D arrays of documents win)."""
    def convert(v: Any) -> list[Any] | None:
        if v is None:
            return None
        if not documents and any(isinstance(x, list) for x in v):  # multi-dimensional: no 1-D
            return None                                              # Spark array holds it
        return [element(x) for x in v]
    return convert


def json_converter(type_name: str | None, typmod: int = -1, type_oid: int = 0) -> Converter:
    """The function turning one contract JSON value of this column into its Spark Python value."""
    name = base_name(type_name, type_oid)
    if name is not None and name.startswith("_"):
        return _array(json_converter(name[1:], typmod), documents=name[1:] in JSON_TYPES)
    if name in JSON_TYPES:
        return _json_text
    data_type = spark_type(type_name, typmod, type_oid)
    if isinstance(data_type, (ShortType, IntegerType, LongType)):
        return _int
    if isinstance(data_type, (FloatType, DoubleType)):
        return _float
    if isinstance(data_type, DecimalType):
        return _decimal(data_type.scale)
    if isinstance(data_type, BooleanType):
        return lambda v: None if v is None else bool(v)
    if isinstance(data_type, BinaryType):
        return _bytes
    if isinstance(data_type, DateType):
        return _maybe(date.fromisoformat)
    if isinstance(data_type, TimestampNTZType):
        return _maybe(lambda v: datetime.fromisoformat(v).replace(tzinfo=None))
    if isinstance(data_type, TimestampType):
        return _maybe(datetime.fromisoformat)
    return _str


def typed_row(change: Change, names: Sequence[str], converters: Sequence[Converter],
              key: Sequence[tuple[str, Converter]] | None = None) -> tuple[Any, ...]:
    """One change -> a row of ``table_schema``: the new image for inserts and updates, the old
    one (whole or key) for deletes; unchanged TOAST columns are NULL and named in
    ``_unchanged_toast`` (unless the service filled them: ``toast_filled``). With ``key`` (the
    ``_key`` fields and their converters) the row ends with the change's key as a tuple."""
    op = change.op
    image = (change.after if op in ("insert", "update", "read") else change.before or change.key) or {}
    toast = change.unchanged_toast
    hidden = set(toast).difference(change.toast_filled or ()) if toast else ()
    values = [None if name in hidden else conv(image.get(name))
              for name, conv in zip(names, converters)]
    row = (*values, op, parse_lsn(change.lsn), change.seq, parse_lsn(change.commit_lsn),
           change.commit_ts, change.xid, list(toast), change.table_version)
    if key is None:
        return row
    old = change.key
    return (*row, None if old is None else tuple(conv(old.get(n)) for n, conv in key))


def raw_row(change: Change) -> tuple[Any, ...]:
    """One change -> a row of ``change_schema()``."""
    return (
        parse_lsn(change.lsn), change.seq, parse_lsn(change.commit_lsn), change.commit_ts,
        change.xid, change.op, change.schema, change.table, _json_text(change.key),
        _json_text(change.before), _json_text(change.after), list(change.unchanged_toast),
        change.origin, change.prefix, change.content, change.transactional, change.tables,
        _json_text(change.options), change.toast_filled, change.table_version,
        _json_text(change.json_null), _json_text(change.ddl),
    )
