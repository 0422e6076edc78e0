"""latest_rows (a typed change DataFrame -> the table it describes) and mirror_writer (a
``foreachBatch`` function keeping a parquet mirror of a stream exactly once)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pgfeed_spark._apply import (
    COMMIT_TS,
    MOVE_ROUNDS,
    TOAST,
    apply_changes,
    latest_versions,
    mirror_events,
)
from pgfeed_spark._evolve import RESCUED
from pgfeed_spark._schema import KEY_COLUMN

__all__ = ["Manifest", "committed", "latest_rows", "mirror_writer", "read_mirror"]


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


# -- a parquet mirror of a stream, exactly once across driver kills -------------------------------

BUCKET = "_bucket"
_MANIFESTS, _DATA = "_manifest", "data"


@dataclass(frozen=True, slots=True)
class Manifest:
    """One committed state of a mirror: the data folder holding each bucket's rows (``data/<batch
    id>/_bucket=<n>``, relative to the mirror) and the schema of those rows."""

    batch_id: int
    buckets: dict[int, int]  # bucket -> the batch whose folder holds its rows
    schema: str  # StructType JSON

    def paths(self, root: Path, buckets: Iterable[int] | None = None) -> list[str]:
        wanted = self.buckets if buckets is None else [b for b in buckets if b in self.buckets]
        return [str(root / _DATA / str(self.buckets[b]) / f"{BUCKET}={b}") for b in sorted(wanted)]


def _root(path: str) -> Path:
    if "://" in path and not path.startswith("file:"):
        raise ValueError(f"the parquet mirror commits with a local atomic rename; {path!r} is not "
                         "a local path (for object stores merge with apply_changes into a table "
                         "format such as Delta or Iceberg)")
    return Path(path.removeprefix("file://").removeprefix("file:")).resolve()


def _manifest_ids(root: Path) -> list[int]:
    folder = root / _MANIFESTS
    if not folder.is_dir():
        return []
    return sorted(int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit())


def committed(path: str, before: int | None = None) -> Manifest | None:
    """The newest committed state of the mirror at ``path`` (older than batch ``before``)."""
    root = _root(path)
    ids = [i for i in _manifest_ids(root) if before is None or i < before]
    if not ids:
        return None
    doc = json.loads((root / _MANIFESTS / f"{ids[-1]:020d}.json").read_text())
    return Manifest(doc["batch_id"], {int(k): v for k, v in doc["buckets"].items()}, doc["schema"])


def read_mirror(spark: SparkSession, path: str) -> DataFrame:
    """The mirror at ``path`` as of its last committed micro-batch (never a half-written one)."""
    state = committed(path)
    if state is None:
        raise FileNotFoundError(f"no committed micro-batch in the mirror at {path}")
    schema = StructType.fromJson(json.loads(state.schema))
    paths = state.paths(_root(path))
    return spark.read.schema(schema).parquet(*paths) if paths else spark.createDataFrame([], schema)


def _commit(root: Path, state: Manifest) -> None:
    """Written beside its final name, flushed, then renamed: readers see all of it or none."""
    folder = root / _MANIFESTS
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{state.batch_id:020d}.json"
    tmp = folder / f".{final.name}.tmp"
    with open(tmp, "w") as f:
        json.dump({"batch_id": state.batch_id, "buckets": state.buckets, "schema": state.schema}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _clean(root: Path, keep: int) -> None:
    """Drop manifests but the newest ``keep`` and data folders none of them names."""
    ids = _manifest_ids(root)
    for old in ids[:-keep]:
        (root / _MANIFESTS / f"{old:020d}.json").unlink(missing_ok=True)
    live = set()
    for i in ids[-keep:]:
        doc = json.loads((root / _MANIFESTS / f"{i:020d}.json").read_text())
        live.update(doc["buckets"].values())
    newest = ids[-1] if ids else -1
    for folder in (root / _DATA).iterdir() if (root / _DATA).is_dir() else ():
        if folder.name.isdigit() and int(folder.name) < newest and int(folder.name) not in live:
            shutil.rmtree(folder, ignore_errors=True)


def _shape(schema: StructType) -> list[tuple[str, str, str]]:
    """What a mirror's stored rows depend on: names, types, and the missing values of columns
    only ``_rescued_data`` holds (``rescue``)."""
    return [(f.name, f.dataType.simpleString(),
             json.dumps(f.metadata, sort_keys=True) if f.name == RESCUED else "")
            for f in schema.fields]


def mirror_writer(path: str, keys: Sequence[str], *, buckets: int = 16, keep: int = 2,
                  before_commit: Callable[[int], None] | None = None,
                  **options: Any) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function merging each micro-batch of a typed stream into the parquet
    mirror at ``path`` (a local or mounted path); ``options`` are ``apply_changes``' (SCD type,
    ``sequence_by``, ...).

    Rows live in ``buckets`` buckets by key hash. A micro-batch rewrites only the buckets its
    keys fall in (every bucket after a truncate) into ``data/<batch id>/``, then commits by
    renaming a manifest naming each bucket's folder. A batch that Spark replays after a driver
    kill finds either its manifest (done: nothing to do) or none (its files are rewritten from the
    previous manifest), so each change is applied exactly once. ``keep`` manifests (and the data
    they name) are kept for readers still on an older one; ``before_commit(batch_id)`` runs
    between the data and the manifest (tests)."""
    root = _root(path)
    truncates = options.get("apply_as_truncates")

    def bucket_of(cols: Sequence[Column]) -> Column:
        return F.pmod(F.xxhash64(*cols), F.lit(buckets)).cast("int")

    def merge(batch: DataFrame, batch_id: int) -> None:
        done = committed(path, before=batch_id + 1)
        if done is not None and done.batch_id == batch_id:
            return  # committed before the driver died; Spark did not record it
        batch = batch.persist()
        try:
            touched = batch.select(bucket_of([F.col(k) for k in keys]).alias("b"))
            if KEY_COLUMN in batch.columns:
                touched = touched.union(batch.where(F.col(KEY_COLUMN).isNotNull()).select(
                    bucket_of([F.col(f"{KEY_COLUMN}.{k}") for k in keys]).alias("b")))
            truncate = (F.expr(truncates) if isinstance(truncates, str) else truncates) \
                if truncates is not None else (F.col("_op") == "truncate") \
                if "_op" in batch.columns else F.lit(False)
            moved = F.lit(False)
            if KEY_COLUMN in batch.columns and "_unchanged_toast" in batch.columns:
                same = reduce(Column.__and__, [F.col(k).eqNullSafe(F.col(f"{KEY_COLUMN}.{k}"))
                                               for k in keys])
                moved = (F.col(KEY_COLUMN).isNotNull() & ~same
                         & (F.size(F.coalesce("_unchanged_toast", F.array())) > 0))
            flags = batch.select(F.max(truncate.cast("int")).alias("t"),
                                 F.max(moved.cast("int")).alias("m")).first()
            if flags is None or flags["t"] is None:
                return  # an empty micro-batch changes nothing
            affected = set(range(buckets)) if flags["t"] else {
                r["b"] for r in touched.where(F.col("b").isNotNull()).distinct().collect()}
            hints: dict[str, Any] = {"truncates": bool(flags["t"]), "move_rounds": MOVE_ROUNDS if flags["m"] else 0}
            previous = done.buckets if done else {}

            def merge_into(wanted: set[int]) -> DataFrame:
                if done is None:
                    return apply_changes(batch, keys, **hints, **options)
                paths = done.paths(root, wanted)
                schema = StructType.fromJson(json.loads(done.schema))
                target = (batch.sparkSession.read.schema(schema).parquet(*paths) if paths
                          else batch.sparkSession.createDataFrame([], schema))
                return apply_changes(batch, keys, target=target, **hints, **options)

            merged = merge_into(affected)
            if RESCUED in batch.columns:  # the manifest keeps which missing values it holds
                merged = merged.withMetadata(RESCUED, batch.schema[RESCUED].metadata)
            if done is not None and _shape(merged.schema) != _shape(
                    StructType.fromJson(json.loads(done.schema))):
                # the table's schema changed (a column added, renamed, widened): every bucket
                # is rewritten in the new shape, so the manifest's one schema reads them all
                affected = set(range(buckets))
                merged = merge_into(affected)
                if RESCUED in batch.columns:
                    merged = merged.withMetadata(RESCUED, batch.schema[RESCUED].metadata)
            out = root / _DATA / str(batch_id)
            (merged.withColumn(BUCKET, bucket_of([F.col(k) for k in keys]))
                   .write.mode("overwrite").partitionBy(BUCKET).parquet(str(out)))
            written = {int(p.name.split("=", 1)[1]) for p in out.glob(f"{BUCKET}=*")}
            state = {b: v for b, v in previous.items() if b not in affected}
            state.update({b: batch_id for b in written})
            if before_commit is not None:
                before_commit(batch_id)
            _commit(root, Manifest(batch_id, state, merged.schema.json()))
            _clean(root, keep)
        finally:
            batch.unpersist()

    return merge
