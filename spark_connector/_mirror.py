"""latest_rows: collapse a typed change DataFrame into the table it describes (a mirror)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from spark_connector._schema import KEY_COLUMN, METADATA_NAMES

__all__ = ["latest_rows"]


def latest_rows(df: DataFrame, key_columns: Sequence[str], *,
                keep_metadata: bool = False) -> DataFrame:
    """The latest row per key, ordered by ``_commit_lsn`` then ``_seq``; keys whose latest
    change is a delete are removed. The result holds the table's columns (and the metadata
    columns too with ``keep_metadata``).

    An update that changes the key also removes the old key (named by ``_key``), as a delete at
    the same position: a typed row shows only the new image, so without it the row would live
    on under the key it left. Without a ``_key`` column, key changes are not seen."""
    if not key_columns:
        raise ValueError("latest_rows needs the table's key columns")
    events = df.unionByName(_left_keys(df, key_columns)) if KEY_COLUMN in df.columns else df
    order = Window.partitionBy(*key_columns).orderBy(F.col("_commit_lsn").desc(),
                                                    F.col("_seq").desc())
    latest = (events.withColumn("__pgfeed_rank", F.row_number().over(order))
                    .where((F.col("__pgfeed_rank") == 1) & (F.col("_op") != F.lit("delete")))
                    .drop("__pgfeed_rank"))
    if keep_metadata:
        return latest
    return latest.drop(*(c for c in latest.columns if c in METADATA_NAMES))


def _left_keys(df: DataFrame, key_columns: Sequence[str]) -> DataFrame:
    """A delete of the old key for every update whose ``_key`` differs from its new key."""
    key_type = df.schema[KEY_COLUMN].dataType
    missing = [k for k in key_columns
               if not isinstance(key_type, StructType) or k not in key_type.fieldNames()]
    if missing:
        raise ValueError(f"{KEY_COLUMN} ({key_type.simpleString()}) does not hold the key columns "
                         f"{missing}: pass the replica-identity columns, or drop {KEY_COLUMN} "
                         "to ignore key changes")
    old = F.col(KEY_COLUMN)
    same = reduce(Column.__and__, [F.col(k).eqNullSafe(old.getField(k)) for k in key_columns])
    moved = df.where((F.col("_op") == F.lit("update")) & old.isNotNull() & ~same)
    return moved.select(*[
        (old.getField(f.name) if f.name in key_columns
         else F.lit("delete") if f.name == "_op"
         else F.col(f.name) if f.name in METADATA_NAMES
         else F.lit(None).cast(f.dataType)).alias(f.name)
        for f in df.schema.fields])
