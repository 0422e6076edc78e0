"""latest_rows (a typed change DataFrame -> the table it describes) and mirror_writer (a
``foreachBatch`` function keeping a parquet mirror of a stream exactly once)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_connector._apply import COMMIT_TS, TOAST, latest_versions, mirror_events

__all__ = ["latest_rows"]


def latest_rows(df: DataFrame, key_columns: Sequence[str], *,
                keep_metadata: bool = False) -> DataFrame:
    """The latest row per key, ordered by ``_commit_lsn`` then ``_seq``: ``apply_changes`` of
    type 1 (deletes, truncates, key changes, backfill reads and unchanged TOAST values handled)
    holding the table's columns only, or with ``keep_metadata`` the input's columns (metadata of
    each row's latest change; ``_unchanged_toast`` then names the columns still unknown).

    An update that changes the key also removes the old key (named by ``_key``). Without a
    ``_key`` column, key changes are not seen."""
    if not key_columns:
        raise ValueError("latest_rows needs the table's key columns")
    ev, plan = mirror_events(df, key_columns)
    latest = latest_versions(ev, plan)
    if not keep_metadata:
        return latest.select(*plan.data)
    top = {*plan.data, *plan.sequence, COMMIT_TS}
    return latest.select(*[F.col(c) if c in top else F.col("__toast").alias(c) if c == TOAST
                           else F.col(f"__meta.{c}").alias(c) for c in df.columns])
