"""Spark never loses a column (issue 27.3), on PostgreSQL 15 and 18: a table goes through ADD
COLUMN (with and without a default), DROP COLUMN, RENAME COLUMN and ALTER TYPE (widening, and
rewriting) with rows of each new shape after each change.

- A typed batch read over the whole range holds every value every change carried, each in the
  column the version it was decoded with gives it (a renamed column under its newest name, a
  dropped one kept, types widened), jsonb's document null apart from SQL NULL.
- A streaming mirror and its SCD2 history equal ``SELECT *`` at the end: made in one run, and
  (slow) under each ``schemaEvolution`` policy with the schema changes happening under running
  queries, ``fail`` and ``addNewColumns`` restarted as their errors say."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BooleanType, DecimalType, IntegerType, LongType, StringType

from pgfeed_client import JSON_NULL, Change, ColumnInfo, FeedClient, parse_lsn
from pgfeed_spark import apply_changes, mirror_writer, read_mirror
from pgfeed_spark._evolve import Lineage, Version
from pgfeed_spark._read import evolved_row

pytestmark = [pytest.mark.spark, pytest.mark.pg]

# With DDL capture (feed option ``ddl: "capture"``) a rename is a rename; without it a drop and
# an add: the old column keeps the values of rows last changed before it, the new one the values
# from then on. The quick test captures DDL, the slow one does not.
BIG = 2**40

# (DDL of the step, its rows): each step's rows use the shape its DDL made.
STEPS: list[tuple[list[str], list[str]]] = [
    ([("CREATE TABLE {t} (id int PRIMARY KEY, name text, qty int, price numeric(10,2), n int, "
      "jb jsonb)")],
     [("INSERT INTO {t} VALUES (1, 'a', 10, 1.50, 1, 'null'), (2, 'b', 20, 2.25, 2, NULL), "
      "(3, 'c', 30, 3.00, 3, '{{\"k\": 1}}'), (4, 'd', 40, 4.00, 4, '[1, null]'), "
      "(5, 'e', 50, 5.00, 5, NULL)"),
      "UPDATE {t} SET qty = 21 WHERE id = 2"]),
    (["ALTER TABLE {t} ADD COLUMN note text"],
     ["INSERT INTO {t} (id, name, qty, price, n, note) VALUES (6, 'f', 60, 6.00, 6, 'six')",
      "UPDATE {t} SET note = 'one' WHERE id = 1"]),
    (["ALTER TABLE {t} ADD COLUMN flag bool DEFAULT true"],
     ["INSERT INTO {t} (id, name, qty, price, n, flag) VALUES (7, 'g', 70, 7.00, 7, false)",
      "UPDATE {t} SET qty = 31 WHERE id = 3"]),
    (["ALTER TABLE {t} DROP COLUMN qty"],
     ["INSERT INTO {t} (id, name, price, n, note) VALUES (8, 'h', 8.00, 8, 'eight')",
      "DELETE FROM {t} WHERE id = 4"]),
    (["ALTER TABLE {t} RENAME COLUMN name TO title"],
     ["INSERT INTO {t} (id, title, price, n) VALUES (9, 'i', 9.00, 9)",
      "UPDATE {t} SET title = 'E' WHERE id = 5"]),
    (["ALTER TABLE {t} ALTER COLUMN price TYPE numeric(12,2)"],  # widening, no rewrite
     ["INSERT INTO {t} (id, title, price, n) VALUES (10, 'j', 1234567890.12, 10)",
      "UPDATE {t} SET price = 6.50 WHERE id = 6"]),
    (["ALTER TABLE {t} ALTER COLUMN n TYPE bigint"],  # rewrites the table
     [f"INSERT INTO {{t}} (id, title, price, n, jb) VALUES (11, 'k', 11.00, {BIG}, 'null')",
      f"UPDATE {{t}} SET n = {BIG * 2} WHERE id = 1"]),
]

SOURCE_COLUMNS = ["id", "title", "price", "n", "jb", "note", "flag"]


def _run(dsn: str, table: str, statements: list[str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(sql.SQL(statement).format(t=sql.Identifier(table)))


def _source(dsn: str, table: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql.SQL("SELECT {cols}, jb IS NOT NULL AND jb = 'null'::jsonb "
                                   "FROM {t} ORDER BY id").format(
            cols=sql.SQL(", ").join(map(sql.Identifier, SOURCE_COLUMNS[:4])),
            t=sql.Identifier(table)))
        head = [dict(zip(SOURCE_COLUMNS[:4], r[:4]), json_null=r[4]) for r in cur.fetchall()]
        rest = conn.execute(sql.SQL("SELECT jb::text, note, flag FROM {t} ORDER BY id").format(
            t=sql.Identifier(table))).fetchall()
    return [{**h, "jb": _doc(r[0]), "note": r[1], "flag": r[2]} for h, r in zip(head, rest)]


def _doc(text: str | None) -> Any:
    """A jsonb value: SQL NULL -> None, the document null -> JSON_NULL, else the parsed document."""
    if text is None:
        return None
    value = json.loads(text)
    return JSON_NULL if value is None else value


def _mirror_rows(df: DataFrame) -> list[dict[str, Any]]:
    """A mirror's rows with the source's columns: a renamed column under its source name, values
    only ``_rescued_data`` holds (rescue) taken from it, jsonb as ``_doc`` reads it."""
    out = []
    for r in df.collect():
        row = r.asDict()
        rescued = json.loads(row.get("_rescued_data") or "{}")
        got: dict[str, Any] = {}
        for c in SOURCE_COLUMNS:
            value = row.get(c)
            if c == "title" and value is None:  # one column, or (no DDL capture) two
                value = row.get("name")
            if value is None and c in rescued:
                value = rescued[c]
                value = Decimal(value) if c == "price" else value
                value = json.dumps(value) if c == "jb" and value is not None else value
            got[c] = _doc(value) if c == "jb" else value
        got["json_null"] = got["jb"] is JSON_NULL
        out.append(got)
    return sorted(out, key=lambda g: g["id"])


def _logical(name: str) -> str:
    return "title" if name == "name" else name


def _setup(dsn: str, make_served_feed: Any, steps: int,
           capture: bool) -> tuple[str, str, str]:
    table = f"ev_{uuid.uuid4().hex[:8]}"
    _run(dsn, table, STEPS[0][0])
    feed = make_served_feed(dsn, tables=(f"public.{table}",),
                            **({"ddl": "capture"} if capture else {}))
    for ddl, rows in STEPS[:steps]:
        _run(dsn, table, [d for d in ddl if not d.startswith("CREATE")] + rows)
    make_served_feed.caught_up(feed, dsn)
    return make_served_feed.service.http_url, feed, table


def _stream(spark: SparkSession, url: str, feed: str, table: str, **options: str) -> DataFrame:
    reader = (spark.readStream.format("pgfeed").option("url", url).option("feed", feed)
              .option("table", f"public.{table}").option("partitions", 2))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _mirror_once(df: DataFrame, out: Path, checkpoint: Path) -> None:
    latest = mirror_writer(str(out / "latest"), ["id"], buckets=2)
    history = mirror_writer(str(out / "history"), ["id"], buckets=2, stored_as_scd_type=2)

    def both(batch: DataFrame, batch_id: int) -> None:
        latest(batch, batch_id)
        history(batch, batch_id)

    query = (df.writeStream.foreachBatch(both).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()


def _assert_mirrors(spark: SparkSession, out: Path, expected: list[dict[str, Any]]) -> None:
    assert _mirror_rows(read_mirror(spark, str(out / "latest"))) == expected
    history = read_mirror(spark, str(out / "history"))
    assert _mirror_rows(history.where("is_current")) == expected


# -- the mirror's side alone, on a synthetic history (what /schema/history serves with DDL capture)

_ID, _NAME, _QTY = (ColumnInfo("id", 23, "int4", -1, True), ColumnInfo("name", 25, "text"),
                    ColumnInfo("qty", 23, "int4"))
_TITLE = ColumnInfo("title", 25, "text", previous_name="name")
_FLAG = ColumnInfo("flag", 16, "bool", missing_value=True, has_missing_value=True)
_VERSIONS = [Version(1, 0x100, (_ID, _NAME, _QTY)), Version(2, 0x200, (_ID, _TITLE, _QTY, _FLAG)),
             Version(3, 0x300, (_ID, _TITLE, _FLAG))]


def _changes(spark: SparkSession, lineage: Lineage,
             events: list[tuple[int, int, str, dict[str, Any]]]) -> DataFrame:
    rows = [evolved_row(Change(f"0/{lsn:X}", 0, f"0/{lsn:X}", 1, None, op, "public", "t",
                               key={"id": image["id"]}, after=image, table_version=version),
                        lineage, has_key=True) for lsn, version, op, image in events]
    return spark.createDataFrame(rows, lineage.schema())


def test_a_mirror_follows_renames_drops_and_missing_values(spark_session: SparkSession) -> None:
    """A mirror written before a rename, an ADD COLUMN ... DEFAULT and a DROP, merged with
    changes after them: the renamed column keeps its values, the rows that were there hold the
    default (carried by no change), the dropped column stays with its old values. (In one pass,
    rows of older versions getting the default: the mirror test below.)"""
    spark = spark_session
    old = Lineage.build("public.t", _VERSIONS[:1])
    before = _changes(spark, old, [(0x110, 1, "insert", {"id": 1, "name": "a", "qty": 10}),
                                   (0x120, 1, "insert", {"id": 2, "name": "b", "qty": 20})])
    new = Lineage.build("public.t", _VERSIONS)
    after = _changes(spark, new, [
        (0x210, 2, "insert", {"id": 3, "title": "c", "qty": 30, "flag": False}),
        (0x310, 3, "update", {"id": 1, "title": "A", "flag": True})])
    expected = [(1, "A", None, True), (2, "b", 20, True), (3, "c", 30, False)]
    for scd in (1, 2):
        target = apply_changes(before, ["id"], stored_as_scd_type=scd).localCheckpoint()
        assert "name" in target.columns and "flag" not in target.columns
        merged = apply_changes(after, ["id"], target=target, stored_as_scd_type=scd)
        if scd == 2:
            merged = merged.where("is_current")
        assert sorted(tuple(r) for r in merged.select("id", "title", "qty", "flag").collect()) \
            == expected, scd


def test_a_batch_read_and_a_mirror_hold_every_column_of_every_version(
        pg_dsn: str, make_served_feed: Any, spark_session: SparkSession, tmp_path: Path) -> None:
    url, feed, table = _setup(pg_dsn, make_served_feed, len(STEPS), capture=True)
    spark = spark_session
    df = (spark.read.format("pgfeed").option("url", url).option("feed", feed)
          .option("table", f"public.{table}").option("partitions", 2).load())
    data = [(f.name, f.dataType) for f in df.schema.fields if not f.name.startswith("_")]
    assert data == [("id", IntegerType()), ("title", StringType()), ("qty", IntegerType()),
                    ("price", DecimalType(12, 2)), ("n", LongType()), ("jb", StringType()),
                    ("note", StringType()), ("flag", BooleanType())]
    assert df.schema["title"].metadata == {"pgfeed": {"previous_names": ["name"]}}
    rows = {(r["_commit_lsn"], r["_seq"]): r.asDict() for r in df.collect()}

    # every value every change carried over HTTP, in its column
    with FeedClient(url) as client:
        changes = list(client.iter_changes(feed, tables=f"public.{table}",
                                           ops="insert,update,delete"))
    assert len(rows) == len(changes) == 18
    carried = 0
    for change in changes:
        row = rows[(parse_lsn(change.commit_lsn), change.seq)]
        assert row["_table_version"] == change.table_version
        image = change.after if change.op != "delete" else (change.before or change.key)
        assert image
        for name, value in image.items():
            got = row[_logical(name)]
            if name == "jb":
                assert _doc(got) == value and (got == "null") == (value is JSON_NULL), change
            elif name == "price":
                assert got == Decimal(value), change
            else:
                assert got == value, change
            carried += 1
        absent = set(row) - {_logical(n) for n in image}
        assert all(row[c] is None for c in absent if not c.startswith("_")), change
    assert carried > 100
    # small pages: those holding only the newest version's rows take the Arrow path, the others
    # JSON, into the same columns
    paged = (spark.read.format("pgfeed").option("url", url).option("feed", feed)
             .option("table", f"public.{table}").option("pageSize", 2).load())
    assert {(r["_commit_lsn"], r["_seq"]): r.asDict() for r in paged.collect()} == rows

    # one streaming mirror over the whole feed: equal to the table, dropped qty kept
    out = tmp_path / "mirror"
    _mirror_once(_stream(spark, url, feed, table), out, tmp_path / "checkpoint")
    expected = _source(pg_dsn, table)
    _assert_mirrors(spark, out, expected)
    latest = {r["id"]: r for r in read_mirror(spark, str(out / "latest")).collect()}
    assert latest[2]["qty"] == 21 and latest[8]["qty"] is None  # kept; NULL once dropped
    assert latest[2]["flag"] is True  # the missing value, carried by no change
    assert [r["json_null"] for r in expected if r["id"] in (1, 2, 11)] == [True, False, True]


@pytest.mark.slow
def test_each_policy_mirrors_schema_changes_under_a_running_query(
        newest_pg_dsn: str, make_served_feed: Any, spark_session: SparkSession,
        tmp_path: Path) -> None:
    """Each step's DDL and rows come after the queries loaded their schemas (a query that was
    running); ``fail`` stops at every change, ``addNewColumns`` where its schema cannot hold the
    new version, ``rescue`` never; each restarts until it reaches the head. No DDL capture: the
    rename is a drop and an add (the documented fallback). Minutes: on the
    newest PostgreSQL only (the quick test above reads and mirrors the same steps on 15 and 18)."""
    pg_dsn = newest_pg_dsn
    url, feed, table = _setup(pg_dsn, make_served_feed, 1, capture=False)
    spark = spark_session
    policies = ("fail", "addNewColumns", "rescue")
    stops = dict.fromkeys(policies, 0)
    messages: list[str] = []
    for ddl, rows in STEPS[1:]:
        loaded = {p: _stream(spark, url, feed, table, schemaEvolution=p) for p in policies}
        _run(pg_dsn, table, ddl + rows)
        make_served_feed.caught_up(feed, pg_dsn)
        for policy in policies:
            df = loaded[policy]
            for _attempt in range(4):
                try:
                    _mirror_once(df, tmp_path / policy, tmp_path / f"checkpoint-{policy}")
                    break
                except StreamingQueryException as exc:
                    assert "SchemaChangedError" in str(exc) and "restart" in str(exc), exc
                    messages.append(str(exc))
                    stops[policy] += 1
                    df = _stream(spark, url, feed, table, schemaEvolution=policy)  # restart
            else:
                raise AssertionError(f"{policy}: still stopping after 4 restarts")
    # fail: every change; addNewColumns: all but the drop; rescue: none
    assert stops == {"fail": 6, "addNewColumns": 5, "rescue": 0}, stops
    # without DDL capture the rename reads as a drop and an add
    change = "dropped name; added title text"
    assert any(f"public.{table} changed at" in m and change in m for m in messages), messages
    expected = _source(pg_dsn, table)
    for policy in policies:
        _assert_mirrors(spark, tmp_path / policy, expected)
    # the old column beside the new one (coalesce(title, name) is the value, as compared above)
    latest = read_mirror(spark, str(tmp_path / "addNewColumns" / "latest"))
    assert {"name", "title"} <= set(latest.columns)
    assert latest.where("name IS NOT NULL AND title IS NULL").count() > 0
