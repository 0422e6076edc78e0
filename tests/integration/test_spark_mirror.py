"""latest_rows against the table it mirrors when updates change the primary key: a typed row shows
only the new image, so the key an update left must come from ``_key`` (a struct of the key
columns, the contract's ``key``) and be deleted at the update's position."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.types import IntegerType, StructField, StructType

from pgfeed_client import ColumnInfo, TableInfo
from pgfeed_spark import latest_rows, table_schema
from tests.fixtures.fix_service import Service, current_lsn, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# -- latest_rows on hand-made change rows: every key-change shape, no service --------------------

SCHEMA = table_schema(TableInfo("public", "t", (ColumnInfo("id", 23, "int4", -1, True),
                                                ColumnInfo("v", 25, "text"))))
AT = datetime(2026, 11, 22, tzinfo=UTC)


def _event(commit_lsn: int, seq: int, op: str, row_id: int, v: str | None,
           old_id: int | None) -> tuple[Any, ...]:
    """A typed row: ``row_id`` the new key (the old one for a delete), ``old_id`` the change's
    key."""
    return (row_id, v, op, commit_lsn * 16 + seq, seq, commit_lsn, AT, commit_lsn, [], 1,
            None if old_id is None else (old_id,))


EVENTS = [
    # 1 -> 2
    _event(10, 0, "insert", 1, "a", 1), _event(20, 0, "update", 2, "a", 1),
    # 11 -> 12, then back to 11 with a new value
    _event(10, 1, "insert", 11, "b", 11), _event(20, 1, "update", 12, "b", 11),
    _event(30, 0, "update", 11, "b2", 12),
    # 21 and 22 swap through a temporary key, in one transaction
    _event(10, 2, "insert", 21, "x", 21), _event(10, 3, "insert", 22, "y", 22),
    _event(40, 0, "update", -21, "x", 21), _event(40, 1, "update", 21, "y", 22),
    _event(40, 2, "update", 22, "x", -21),
    # 31 -> 32, then deleted
    _event(10, 4, "insert", 31, "d", 31), _event(50, 0, "update", 32, "d", 31),
    _event(60, 0, "delete", 32, None, 32),
    # a key that never changes
    _event(10, 5, "insert", 41, "e", 41), _event(50, 1, "update", 41, "e2", 41),
    _event(70, 0, "update", 41, "e3", 41),
    # 51 -> 52, then 51 inserted again
    _event(10, 6, "insert", 51, "f", 51), _event(80, 0, "update", 52, "f", 51),
    _event(90, 0, "insert", 51, "g", 51),
    # an update without a key (none was sent): nothing to remove
    _event(10, 7, "insert", 61, "h", 61), _event(95, 0, "update", 61, "h2", None),
]
MIRROR = {(2, "a"), (11, "b2"), (21, "y"), (22, "x"), (41, "e3"), (52, "f"), (51, "g"),
          (61, "h2")}


def _pairs(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.select("id", "v").collect())


def test_latest_rows_removes_the_keys_updates_left(spark_session: SparkSession) -> None:
    df = spark_session.createDataFrame(EVENTS, SCHEMA)
    mirror = latest_rows(df, ["id"])
    assert mirror.columns == ["id", "v"]
    assert _pairs(mirror) == sorted(MIRROR)
    blind = set(_pairs(latest_rows(df.drop("_key"), ["id"])))  # as before _key: moved rows live on
    assert blind - MIRROR == {(1, "a"), (12, "b"), (-21, "x"), (31, "d")}
    kept = latest_rows(df, ["id"], keep_metadata=True)
    assert kept.columns == SCHEMA.fieldNames()
    assert {r["id"]: r["_key"] for r in kept.collect()}[21] == Row(id=22)


def test_latest_rows_with_a_composite_key_and_a_key_it_cannot_see(
        spark_session: SparkSession) -> None:
    schema = table_schema(TableInfo("public", "t", (
        ColumnInfo("tenant", 23, "int4", -1, True), ColumnInfo("id", 23, "int4", -1, True),
        ColumnInfo("v", 25, "text"))))
    rows = [(1, 1, "a", "insert", 1, 0, 1, AT, 1, [], 1, (1, 1)),
            (1, 2, "b", "insert", 2, 1, 1, AT, 1, [], 1, (1, 2)),
            (2, 1, "a", "update", 3, 0, 2, AT, 2, [], 1, (1, 1)),   # tenant 1 -> 2, same id
            (1, 2, "b2", "update", 4, 0, 3, AT, 3, [], 1, (1, 2))]
    df = spark_session.createDataFrame(rows, schema)
    assert sorted(tuple(r) for r in latest_rows(df, ["tenant", "id"]).collect()) == [
        (1, 2, "b2"), (2, 1, "a")]
    with pytest.raises(ValueError, match=r"key columns \['v'\]"):
        latest_rows(df, ["v"])


# -- the real thing: PostgreSQL -> pgfeed -> spark.read.format("pgfeed") -------------------------

def _captured(service: Service, feed: str, dsn: str) -> None:
    target = current_lsn(dsn)
    changelog = service.supervisor.changelog(feed)
    wait_until(lambda: changelog.confirmed_lsn() >= target, 60, "the table's changes captured")


def _read(spark: SparkSession, base_url: str, feed: str, table: str, **options: Any) -> DataFrame:
    reader = (spark.read.format("pgfeed").option("url", base_url).option("feed", feed)
              .option("table", table))
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_latest_rows_of_a_typed_read_equals_the_table(
        live_feed: tuple[str, str, str], pgfeed_service: Service,
        spark_session: SparkSession) -> None:
    base_url, feed, dsn = live_feed
    table = f"public.keys_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text, n numeric(8,2))")
        conn.execute(f"INSERT INTO {table} SELECT g, 'v' || g, g FROM generate_series(1, 20) g")
        for sql in [
            "UPDATE {t} SET v = 'plain', n = 1.5 WHERE id = 1",     # non-key update
            "UPDATE {t} SET id = 100 WHERE id = 2",                 # 2 -> 100
            "UPDATE {t} SET id = 3000, v = 'away' WHERE id = 3",    # 3 -> 3000 ...
            "UPDATE {t} SET id = 3 WHERE id = 3000",                # ... and back
            "UPDATE {t} SET id = 200 WHERE id = 4",                 # 4 -> 200 ...
            "DELETE FROM {t} WHERE id = 200",                       # ... then gone
            "DELETE FROM {t} WHERE id = 7",
            "UPDATE {t} SET n = n * 2 WHERE id BETWEEN 8 AND 12",   # several rows, keys kept
            "UPDATE {t} SET id = id + 1000 WHERE id BETWEEN 13 AND 15",  # several keys at once
        ]:
            conn.execute(sql.format(t=table))
        with conn.transaction():  # 5 and 6 swap keys through a temporary one
            conn.execute(f"UPDATE {table} SET id = -5 WHERE id = 5")
            conn.execute(f"UPDATE {table} SET id = 5 WHERE id = 6")
            conn.execute(f"UPDATE {table} SET id = 6 WHERE id = -5")
        columns = [d.name for d in conn.execute(f"SELECT * FROM {table} LIMIT 0").description]
        source = sorted(conn.execute(f"SELECT * FROM {table}").fetchall())
    _captured(pgfeed_service, feed, dsn)

    df = _read(spark_session, base_url, feed, table, partitions=2)
    assert df.schema["_key"].dataType == StructType([StructField("id", IntegerType())])
    assert df.columns[:3] == columns and df.columns[-1] == "_key"
    moved = df.where("_op = 'update' AND id = 100").collect()
    assert [r["_key"] for r in moved] == [Row(id=2)]
    swap = df.where("_op = 'update' AND id IN (-5, 5, 6)").orderBy("_seq").collect()
    assert [(r["id"], r["_key"]["id"]) for r in swap] == [(-5, 5), (5, 6), (6, -5)]
    assert df.where("_op = 'insert' AND _key.id <> id").count() == 0  # an insert: its own key
    deletes = df.where("_op = 'delete'").select("id", "_key.id").collect()
    assert sorted(tuple(r) for r in deletes) == [(7, 7), (200, 200)]

    mirror = latest_rows(df, ["id"])
    assert mirror.columns == columns
    assert sorted(tuple(r) for r in mirror.collect()) == source
    assert {100, 1013, 3}.issubset(r[0] for r in source) and 2 not in {r[0] for r in source}
    blind = sorted(tuple(r) for r in latest_rows(df.drop("_key"), ["id"]).collect())
    assert {r[0] for r in blind} - {r[0] for r in source} == {2, 3000, 4, -5, 13, 14, 15}

    json_df = _read(spark_session, base_url, feed, table, wireFormat="json")
    assert json_df.schema == df.schema
    assert json_df.exceptAll(df).count() == 0 and df.exceptAll(json_df).count() == 0
    assert sorted(tuple(r) for r in latest_rows(json_df, ["id"]).collect()) == source


def test_key_columns_follow_the_replica_identity(
        live_feed: tuple[str, str, str], pgfeed_service: Service,
        spark_session: SparkSession) -> None:
    """FULL flags every column, so ``_key`` is the whole old row; NOTHING flags none: no
    ``_key``."""
    base_url, feed, dsn = live_feed
    full, nothing = (f"public.{kind}_{uuid.uuid4().hex[:8]}" for kind in ("full", "nothing"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in (full, nothing):
            conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
        conn.execute(f"ALTER TABLE {full} REPLICA IDENTITY FULL")
        conn.execute(f"ALTER TABLE {nothing} REPLICA IDENTITY NOTHING")
        conn.execute(f"INSERT INTO {full} VALUES (1, 'a'), (2, 'b')")
        conn.execute(f"UPDATE {full} SET id = 10, v = 'a2' WHERE id = 1")
        conn.execute(f"INSERT INTO {nothing} VALUES (1, 'a')")  # UPDATE/DELETE would fail here
        source = sorted(conn.execute(f"SELECT * FROM {full}").fetchall())
    _captured(pgfeed_service, feed, dsn)

    df = _read(spark_session, base_url, feed, full)
    assert [f.name for f in df.schema["_key"].dataType.fields] == ["id", "v"]
    assert [r["_key"] for r in df.where("_op = 'update'").collect()] == [Row(id=1, v="a")]
    assert sorted(tuple(r) for r in latest_rows(df, ["id"]).collect()) == source

    bare = _read(spark_session, base_url, feed, nothing)
    assert "_key" not in bare.columns
    assert [tuple(r) for r in bare.select("id", "v", "_op").collect()] == [(1, "a", "insert")]


def test_latest_rows_after_a_backfill_under_writes_equals_the_table(
        live_feed: tuple[str, str, str], pgfeed_service: Service,
        spark_session: SparkSession) -> None:
    """A table filled before any of its changes reached the feed, backfilled while it is written:
    the typed read carries op ``read`` rows, which ``latest_rows`` takes as upserts."""
    base_url, feed, dsn = live_feed
    table = f"public.bf_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text, n numeric(8,2))")
        conn.execute(f"INSERT INTO {table} SELECT g, 'v' || g, g FROM generate_series(1, 5000) g")
    manager = pgfeed_service.supervisor.backfills(feed)
    record = manager.start([table], chunk_rows=400, parallel=2)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(1, 400, 7):  # writes racing the chunks: updates, key moves, deletes, inserts
            conn.execute(f"UPDATE {table} SET v = 'w' || {i} WHERE id = {i * 11}")
            conn.execute(f"UPDATE {table} SET id = id + 100000 WHERE id = {i * 12 + 1}")
            conn.execute(f"DELETE FROM {table} WHERE id = {i * 5 + 2}")
            conn.execute(f"INSERT INTO {table} VALUES ({50000 + i}, 'new', 1)")
        source = sorted(conn.execute(f"SELECT * FROM {table}").fetchall())
    wait_until(lambda: manager.get(record.id).state != "running", 60, "the backfill")
    assert manager.get(record.id).state == "done"
    _captured(pgfeed_service, feed, dsn)
    df = _read(spark_session, base_url, feed, table, partitions=2)
    assert df.where("_op = 'read'").count() > 0
    assert sorted(tuple(r) for r in latest_rows(df, ["id"]).collect()) == source
