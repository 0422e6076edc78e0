"""latest_rows: collapse a typed change DataFrame into the table it describes (a mirror)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_connector._schema import METADATA_COLUMNS

__all__ = ["latest_rows"]


def latest_rows(df: DataFrame, key_columns: Sequence[str], *,
                keep_metadata: bool = False) -> DataFrame:
    """The latest row per key, ordered by ``_commit_lsn`` then ``_seq``; keys whose latest
    change is a delete are removed. The result holds the table's columns (and the metadata
    columns too with ``keep_metadata``)."""
    if not key_columns:
        raise ValueError("latest_rows needs the table's key columns")
    order = Window.partitionBy(*key_columns).orderBy(F.col("_commit_lsn").desc(),
                                                    F.col("_seq").desc())
    latest = (df.withColumn("__pgfeed_rank", F.row_number().over(order))
                .where((F.col("__pgfeed_rank") == 1) & (F.col("_op") != F.lit("delete")))
                .drop("__pgfeed_rank"))
    if keep_metadata:
        return latest
    return latest.drop(*(m.name for m in METADATA_COLUMNS))
