"""Make a server Arrow batch match the declared Spark schema exactly (names, order, types)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from pgfeed_client import parse_lsn

__all__ = ["arrow_schema", "conform", "lsn_to_int64", "rows_to_batch"]


def arrow_schema(schema: StructType) -> pa.Schema:
    """The exact Arrow schema Spark checks a Python data source's batches against."""
    return to_arrow_schema(schema, timezone="UTC")


def lsn_to_int64(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``'16/B374D848'`` strings -> int64 positions, parsing each distinct value once."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not pa.types.is_dictionary(array.type):
        array = pc.dictionary_encode(array)
    values = pa.array([None if v is None else parse_lsn(v)
                       for v in array.dictionary.to_pylist()], pa.int64())
    return pc.take(values, array.indices)


def _convert(array: Any, target: pa.DataType) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.type == target:
        return array
    if pa.types.is_dictionary(array.type) and not pa.types.is_dictionary(target):
        if pa.types.is_integer(target) and (pa.types.is_string(array.type.value_type)
                                            or pa.types.is_large_string(array.type.value_type)):
            return lsn_to_int64(array).cast(target)
        array = array.dictionary_decode()
        if array.type == target:
            return array
    source = array.type
    if pa.types.is_struct(target) and pa.types.is_struct(source):
        return _struct(array, target)
    if pa.types.is_integer(target) and (pa.types.is_string(source) or pa.types.is_large_string(source)):
        return lsn_to_int64(array).cast(target)
    if pa.types.is_timestamp(target) and pa.types.is_timestamp(source):
        return pc.cast(array, target, safe=False)  # naive <-> UTC keep the wall clock; ns -> us
    return pc.cast(array, target)


def _struct(array: pa.StructArray, target: pa.StructType) -> pa.StructArray:
    """Fields matched by name and converted like top-level columns (absent: NULL, extra: dropped),
    keeping which structs are NULL: a server's struct may differ in order, types or fields."""
    names = {array.type.field(i).name: i for i in range(array.type.num_fields)}
    children = [_convert(array.field(names[f.name]), f.type) if f.name in names
                else pa.nulls(len(array), f.type) for f in target]
    mask = array.is_null() if array.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)


def conform(batch: pa.RecordBatch, target: pa.Schema,
            aliases: Mapping[str, Sequence[str]] | None = None) -> pa.RecordBatch:
    """``batch`` with exactly ``target``'s fields: columns found by name (or an alias) and cast,
    absent ones all NULL, extra ones dropped."""
    names = batch.schema.names
    arrays = []
    for f in target:
        source = f.name if f.name in names else next(
            (a for a in (aliases or {}).get(f.name, ()) if a in names), None)
        if source is None:
            arrays.append(pa.nulls(batch.num_rows, f.type))
        else:
            arrays.append(_convert(batch.column(source), f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def rows_to_batch(rows: Sequence[tuple[Any, ...]], target: pa.Schema) -> pa.RecordBatch:
    """Python rows (values of the Spark types) -> a batch of ``target``."""
    columns = list(zip(*rows)) if rows else [()] * len(target)
    return pa.RecordBatch.from_arrays(
        [pa.array(col, type=f.type) for col, f in zip(columns, target)], schema=target)
