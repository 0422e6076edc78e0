"""apply_changes (SCD types 1 and 2) and the streaming parquet mirror against the table they
mirror: inserts, updates, key changes, deletes, a truncate, TOAST-only updates and a backfill."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pgfeed_client import ColumnInfo, TableInfo
from pgfeed_spark import apply_changes, latest_rows, table_schema
from tests.integration import mirror_workload

pytestmark = [pytest.mark.spark]

# -- hand-made change rows: every shape, no service -----------------------------------------------

SCHEMA = table_schema(TableInfo("public", "t", (ColumnInfo("id", 23, "int4", -1, True),
                                                ColumnInfo("v", 25, "text"),
                                                ColumnInfo("big", 25, "text"))))
T0 = datetime(2026, 11, 22, tzinfo=UTC)


def _ev(commit: int, seq: int, op: str, row_id: int | None, v: str | None, big: str | None,
        old_id: int | None = None, toast: tuple[str, ...] = ()) -> tuple[Any, ...]:
    key = None if op == "truncate" else (row_id if old_id is None else old_id,)
    return (row_id, v, big, op, commit * 100 + seq, seq, commit, T0 + timedelta(seconds=commit),
            commit, list(toast), None if op == "truncate" else 1, key)  # ..., _table_version, _key


BATCH_1 = [
    _ev(10, 0, "insert", 1, "a", "B1"), _ev(10, 1, "insert", 2, "b", "B2"),
    _ev(10, 2, "insert", 3, "c", "B3"), _ev(10, 3, "insert", 4, "d", "B4"),
    _ev(20, 0, "update", 1, "a2", None, toast=("big",)),          # TOAST-only: big kept
    _ev(21, 0, "update", 1, "a3", None, toast=("big",)),          # ... twice
    _ev(22, 0, "update", 20, "b2", None, old_id=2, toast=("big",)),  # key change, big kept
    _ev(23, 0, "update", 20, "b3", None, toast=("big",)),         # then TOAST-only on the new key
    _ev(24, 0, "delete", 3, None, None),
    _ev(25, 0, "read", 4, "d", "B4"),                             # a backfill read
]
BATCH_2 = [
    _ev(30, 0, "update", 4, "d2", None, toast=("big",)),          # big from the mirror so far
    _ev(31, 0, "update", 40, "d3", None, old_id=4, toast=("big",)),  # ... across a key change
    _ev(32, 0, "insert", 5, "e", "B5"),
    _ev(40, 0, "truncate", None, None, None),
    _ev(41, 0, "insert", 1, "new", "N1"),
    _ev(42, 0, "update", 1, "new2", None, toast=("big",)),
    _ev(43, 0, "update", 7, "x", None, toast=("big",)),           # no earlier version: unknown
]


def _rows(df: DataFrame, *cols: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.select(*cols).collect())


def test_apply_changes_by_hand(spark_session: SparkSession) -> None:
    one = spark_session.createDataFrame(BATCH_1, SCHEMA)
    two = spark_session.createDataFrame(BATCH_2, SCHEMA)
    first = apply_changes(one, ["id"]).localCheckpoint()  # a stored mirror, as a stream keeps it
    assert first.columns == ["id", "v", "big", "_commit_lsn", "_seq", "_commit_ts",
                             "_unchanged_toast"]
    assert _rows(first, "id", "v", "big", "_commit_lsn") == [
        (1, "a3", "B1", 21), (4, "d", "B4", 25), (20, "b3", "B2", 23)]
    merged = apply_changes(two, ["id"], target=first)
    whole = apply_changes(one.unionByName(two), ["id"])
    expected = [(1, "new2", "N1", []), (7, "x", None, ["big"])]
    assert _rows(merged, "id", "v", "big", "_unchanged_toast") == expected
    assert _rows(whole, "id", "v", "big", "_unchanged_toast") == expected
    before_truncate = apply_changes(two.where("_commit_lsn < 40"), ["id"], target=first)
    assert _rows(before_truncate, "id", "v", "big") == [
        (1, "a3", "B1"), (5, "e", "B5"), (20, "b3", "B2"), (40, "d3", "B4")]
    # A backfill read older than the mirror's version never overwrites it.
    stale = spark_session.createDataFrame([_ev(15, 0, "read", 1, "old", "OLD")], SCHEMA)
    assert _rows(apply_changes(stale, ["id"], target=first), "id", "v") == [
        (1, "a3"), (4, "d"), (20, "b3")]
    assert _rows(latest_rows(one, ["id"]), "id", "v", "big") == [
        (1, "a3", "B1"), (4, "d", "B4"), (20, "b3", "B2")]


def test_scd2_by_hand(spark_session: SparkSession) -> None:
    one = spark_session.createDataFrame(BATCH_1, SCHEMA)
    two = spark_session.createDataFrame(BATCH_2, SCHEMA)
    history = apply_changes(one, ["id"], stored_as_scd_type=2).localCheckpoint()
    merged = apply_changes(two, ["id"], stored_as_scd_type=2, target=history)
    whole = apply_changes(one.unionByName(two), ["id"], stored_as_scd_type=2)
    cols = ("id", "v", "big", "valid_from.commit_lsn", "valid_to.commit_lsn", "is_current")
    assert _rows(merged, *cols) == _rows(whole, *cols)
    got = {(r[0], r[1]): r[2:] for r in _rows(whole, "id", "valid_from.commit_lsn", "v", "big",
                                             "valid_to.commit_lsn", "is_current")}
    assert got[(1, 10)] == ("a", "B1", 20, False)
    assert got[(1, 21)] == ("a3", "B1", 40, False)   # closed by the truncate
    assert got[(1, 42)] == ("new2", "N1", None, True)
    assert got[(2, 10)] == ("b", "B2", 22, False)    # closed by the key change
    assert got[(3, 10)] == ("c", "B3", 24, False)    # closed by the delete
    assert got[(4, 10)] == ("d", "B4", 30, False)    # the read equal to the insert: one version
    assert (4, 25) not in got
    assert got[(40, 31)] == ("d3", "B4", 40, False)
    # Only ``big`` tracked: v's changes update the version in place.
    tracked = apply_changes(one, ["id"], stored_as_scd_type=2, track_history_column_list=["big"])
    assert _rows(tracked.where("id = 1"), "v", "valid_from.commit_lsn", "is_current") == [
        ("a3", 10, True)]


# -- the real thing: PostgreSQL -> pgfeed -> a typed read -> apply_changes ------------------------

COLUMNS = ["id", "v", "n", "big"]


def typed_read(spark: SparkSession, base_url: str, feed: str, table: str) -> DataFrame:
    return (spark.read.format("pgfeed").option("url", base_url).option("feed", feed)
            .option("table", table).option("partitions", 2).load())


def as_of(history: list[Any], lsn: int) -> list[tuple[Any, ...]]:
    """The rows of an SCD2 history (collected) in force at WAL position ``lsn``."""
    return sorted(tuple(r[c] for c in COLUMNS) for r in history
                  if r["valid_from"]["commit_lsn"] <= lsn
                  and (r["valid_to"] is None or r["valid_to"]["commit_lsn"] > lsn))


def assert_no_overlaps(history: list[Any]) -> None:
    by_key: dict[int, list[Any]] = {}
    for r in history:
        by_key.setdefault(r["id"], []).append(r)
    for key, versions in by_key.items():
        versions.sort(key=lambda r: tuple(r["valid_from"]))
        assert sum(r["is_current"] for r in versions) <= 1, key
        assert all(r["is_current"] == (r["valid_to"] is None) for r in versions), key
        for a, b in pairwise(versions):
            assert a["valid_to"] is not None and tuple(a["valid_to"]) <= tuple(b["valid_from"]), (
                f"key {key}: {a} overlaps {b}")
        for r in versions:
            assert r["valid_to"] is None or tuple(r["valid_from"]) < tuple(r["valid_to"]), r


@pytest.mark.pg
def test_apply_changes_of_a_typed_read_equals_the_table_now_and_then(
        pg_dsn: str, make_served_feed: Any, spark_session: SparkSession) -> None:
    feed = make_served_feed(pg_dsn, all_tables=True, toast="placeholder")
    name = f"mirror_{uuid.uuid4().hex[:8]}"
    base_url = make_served_feed.service.http_url
    shots = mirror_workload.run(pg_dsn, name, base_url, feed)
    make_served_feed.caught_up(feed, pg_dsn)
    df = typed_read(spark_session, base_url, feed, f"public.{name}").cache()

    ops = {r["_op"]: r["n"] for r in df.groupBy("_op").agg(F.count("*").alias("n")).collect()}
    assert {"insert", "update", "delete", "truncate", "read"} <= set(ops), ops
    shapes = df.select(
        F.sum(F.expr("_op = 'update' AND array_contains(_unchanged_toast, 'big')").cast("int")),
        F.sum(F.expr("_op = 'update' AND array_contains(_unchanged_toast, 'big') "
                     "AND _key.id <> id").cast("int"))).first()
    assert shapes is not None and shapes[0] > 20 and shapes[1] > 0, shapes  # TOAST kept, keys too

    mirror = apply_changes(df, ["id"]).collect()
    assert sorted(tuple(r[c] for c in COLUMNS) for r in mirror) == shots[-1].rows
    assert all(r["_unchanged_toast"] == [] for r in mirror)
    assert sorted(tuple(r) for r in latest_rows(df, ["id"]).collect()) == shots[-1].rows

    history = apply_changes(df, ["id"], stored_as_scd_type=2).collect()
    assert_no_overlaps(history)
    for shot in shots:  # three positions in the workload's course, then its end
        assert as_of(history, shot.lsn) == shot.rows
    df.unpersist()
