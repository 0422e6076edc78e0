"""The pgfeed Spark data source against a real pgfeed server: batch reads (raw and typed, Arrow and
JSON), Structured Streaming with availableNow and restarts, and latest_rows mirroring a table."""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pgfeed_client import FeedClient, format_lsn, parse_cursor
from pgfeed_client._json import loads_exact
from pgfeed_spark import latest_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]

Feed = tuple[str, str]  # (base_url, feed name)


# -- where the feeds come from -------------------------------------------------------------------
# tests/fixtures/fix_service.py: ``served_feed`` (base_url, feed) over test data, ``live_feed``
# (base_url, feed, dsn) capturing every table of ``dsn`` from real PostgreSQL, toast=placeholder.


@pytest.fixture
def served(served_feed: tuple[str, str]) -> Feed:
    return served_feed[0], served_feed[1]


@pytest.fixture
def live(live_feed: tuple[str, str, str]) -> tuple[str, str, str]:
    return live_feed


@pytest.fixture
def spark(request: pytest.FixtureRequest) -> SparkSession:
    """The session-wide SparkSession (fix_spark.py), started only once a feed is at hand: as a
    function-scoped fixture listed after the feed, a test that fails while setting up its feed
    never starts a JVM."""
    session: SparkSession = request.getfixturevalue("spark_session")
    return session


def _reader(spark: SparkSession, feed: Feed, **options: Any) -> Any:
    r = spark.read.format("pgfeed").option("url", feed[0]).option("feed", feed[1])
    for k, v in options.items():
        r = r.option(k, v)
    return r


def _log(feed: Feed, **filters: Any) -> list[tuple[int, int]]:
    with FeedClient(feed[0]) as client:
        return [(parse_cursor(c.commit_lsn).lsn, c.seq)  # type: ignore[union-attr]
                for c in client.iter_changes(feed[1], **filters)]


def _positions(df: DataFrame, lsn: str = "commit_lsn", seq: str = "seq") -> list[tuple[int, int]]:
    return sorted((r[0], r[1]) for r in df.select(lsn, seq).collect())


def _partition_sizes(df: DataFrame) -> list[int]:
    return df.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()


# -- batch over the served test log -----------------------------------------------------------------

def test_batch_read_returns_exactly_the_log(served: Feed, spark: SparkSession) -> None:
    expected = _log(served)
    assert len(expected) > 0
    df = _reader(spark, served, partitions=4).load()
    assert _positions(df) == sorted(expected)  # nothing lost, nothing twice
    sizes = _partition_sizes(df)
    assert sum(sizes) == len(expected)
    # as many partitions as the server's equal-count split of the log has parts (fewer than four
    # when one big transaction holds two boundaries), none empty
    with FeedClient(served[0]) as client:
        parts = len(client.splits(served[1], n=4)) - 1
    assert parts >= 2 and len(sizes) == parts and all(sizes), (parts, sizes)


def test_json_and_arrow_paths_agree(served: Feed, spark: SparkSession) -> None:
    """The same rows from both wire paths. Row images are JSON text: Arrow carries PostgreSQL's
    text of a json/jsonb value, the JSON path the document rewritten compactly
    (test_spark_wire.py), so those columns are compared as documents, number by number."""
    arrow = _reader(spark, served, partitions=2).load()
    json_ = _reader(spark, served, partitions=2, wireFormat="json").load()
    assert arrow.schema == json_.schema
    documents = {i for i, f in enumerate(arrow.schema.fields) if f.name in _ROW_IMAGES}
    assert documents, "the raw schema's row images"

    def rows(df: DataFrame) -> list[tuple[Any, ...]]:
        return sorted((tuple(_document(v) if i in documents else v for i, v in enumerate(r))
                       for r in df.collect()), key=repr)

    got = rows(arrow)
    assert len(got) == len(_log(served)) and got == rows(json_)


_ROW_IMAGES = {"key", "before", "after", "options"}


def _document(text: str | None) -> Any:
    """A JSON text as a comparable document: numbers as normalized decimals, keys in order."""
    def canonical(v: Any) -> Any:
        if isinstance(v, dict):
            return tuple(sorted((k, canonical(x)) for k, x in v.items()))
        if isinstance(v, list):
            return tuple(canonical(x) for x in v)
        if isinstance(v, (int, float, Decimal)) and not isinstance(v, bool):
            return ("number", Decimal(str(v)).normalize())
        return v

    return None if text is None else canonical(loads_exact(text))


def test_small_first_pages_that_double_read_exactly_the_log(served: Feed,
                                                             spark: SparkSession) -> None:
    """A partition's pages start at pageSize / 8 and double (the server answering a doubled
    limit with the page it read ahead): pages of 1, 2, 4, 8 changes, then 8 at a time, cut
    mid-transaction, still give every change once."""
    expected = _log(served)
    assert len(expected) > 16
    df = _reader(spark, served, partitions=2, pageSize=8).load()
    assert _positions(df) == sorted(expected)


def test_filters_and_bounds(served: Feed, spark: SparkSession) -> None:
    everything = _log(served)
    lsns = sorted({lsn for lsn, _ in everything})
    assert len(lsns) >= 3, "the served log has many transactions (fix_service.served_feed)"
    after, to = format_lsn(lsns[0]), format_lsn(lsns[-2])
    df = _reader(spark, served, partitions=3, **{"from": after, "to": to}).load()
    assert _positions(df) == sorted(p for p in everything if lsns[0] < p[0] <= lsns[-2])


def test_streaming_stop_and_restart_sees_every_change_once(served: Feed, spark: SparkSession,
                                                          tmp_path: Path) -> None:
    expected = sorted(_log(served))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    consumer = f"spark-{uuid.uuid4().hex[:8]}"
    stream = (spark.readStream.format("pgfeed").option("url", served[0])
              .option("feed", served[1]).option("partitions", 2)
              .option("maxRowsPerTrigger", max(1, len(expected) // 3))
              .option("consumer", consumer).load())

    def start(**trigger: Any) -> Any:
        return (stream.writeStream.format("parquet").option("path", str(out))
                .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())

    first = start(processingTime="1 second")  # a batch or two, then stopped
    deadline = time.monotonic() + 120
    while first.lastProgress is None or first.lastProgress["numInputRows"] == 0:
        assert time.monotonic() < deadline, "no batch within 120 s"
        time.sleep(0.2)
    first.stop()
    second = start(availableNow=True)  # restarted from the checkpoint, drains the rest
    second.awaitTermination(300)
    assert second.exception() is None
    written = spark.read.parquet(str(out))
    assert _positions(written) == expected
    # Acknowledged in the background as batches commit; the last batch too, by the time the
    # query's source has stopped.
    end = second.recentProgress[-1]["sources"][0]["endOffset"]
    end = parse_cursor((json.loads(end) if isinstance(end, str) else end)["cursor"])
    with FeedClient(served[0]) as client:
        deadline = time.monotonic() + 30
        while (acked := client.consumer(served[1], consumer)) is None or parse_cursor(acked) != end:
            assert time.monotonic() < deadline, (acked, end)
            time.sleep(0.2)


# -- real PostgreSQL capture -----------------------------------------------------------------------

TYPES_DDL = """
CREATE TABLE {t} (
  id bigint PRIMARY KEY, small int2, i int4, amount numeric(12,3), big numeric, f float8,
  r real, flag bool, body text, code varchar(20), raw bytea, day date, at_local timestamp,
  at_zone timestamptz, doc jsonb, uid uuid, nums int4[], tags text[], prices numeric(5,2)[]
)"""

TYPE_ROWS = [
    ("(1, 1, 10, 12.345, 'NaN', 'NaN', 1.5, true, 'hello', 'c1', '\\x00ff'::bytea, '2026-11-22',"
     " '2026-11-22 10:00:00.123456', '2026-11-22 12:00:00.5+02', '{\"a\": [1, 2]}',"
     " 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{1,2,3}', '{a,NULL,c}', '{1.50,2.25}')"),
    ("(2, -32768, 2147483647, -999999999.999, '123456789012345678901234567890.123456789',"
     " 'Infinity', '-0', false, NULL, NULL, NULL, NULL, NULL, NULL,"
     " '{\"big\": 123456789012345678901234567890, \"small\": 1e-7}', NULL, NULL, NULL, NULL)"),
]


def _wait_for(feed: Feed, table: str, count: int, timeout: float = 60.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    with FeedClient(feed[0]) as client:
        while True:
            changes = list(client.iter_changes(feed[1], tables=[table]))
            if len(changes) >= count or time.monotonic() > deadline:
                return changes
            time.sleep(0.3)


@pytest.fixture
def live_table(live: tuple[str, str, str]) -> Iterator[tuple[Feed, str, Any]]:
    base_url, feed, dsn = live
    name = f"spark_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield (base_url, feed), f"public.{name}", conn


@pytest.mark.pg
def test_typed_read_has_the_right_types_and_values(live_table: tuple[Feed, str, Any],
                                                   spark: SparkSession) -> None:
    feed, table, conn = live_table
    conn.execute(TYPES_DDL.format(t=table))
    conn.execute(f"INSERT INTO {table} VALUES {', '.join(TYPE_ROWS)}")
    conn.execute(f"UPDATE {table} SET i = 11 WHERE id = 1")
    conn.execute(f"DELETE FROM {table} WHERE id = 2")
    assert len(_wait_for(feed, table, 4)) == 4
    df = _reader(spark, feed, table=table, partitions=2).load()
    types = dict(df.dtypes)
    assert types["id"] == "bigint" and types["small"] == "smallint" and types["i"] == "int"
    assert types["amount"] == "decimal(12,3)" and types["big"] == "string"
    assert types["f"] == "double" and types["r"] == "float" and types["flag"] == "boolean"
    assert types["raw"] == "binary" and types["day"] == "date"
    assert types["at_local"] == "timestamp_ntz" and types["at_zone"] == "timestamp"
    assert types["doc"] == "string" and types["uid"] == "string"
    assert types["nums"] == "array<int>" and types["tags"] == "array<string>"
    assert types["prices"] == "array<decimal(5,2)>"
    assert types["_commit_lsn"] == "bigint" and types["_unchanged_toast"] == "array<string>"
    rows = {(r["id"], r["_op"]): r for r in
            df.withColumn("at_zone_us", F.unix_micros("at_zone")).collect()}
    assert set(rows) == {(1, "insert"), (2, "insert"), (1, "update"), (2, "delete")}
    one = rows[(1, "insert")]
    assert one["small"] == 1 and one["amount"] == Decimal("12.345") and one["big"] == "NaN"
    assert math.isnan(one["f"]) and one["r"] == 1.5 and one["flag"] is True
    assert one["body"] == "hello" and one["raw"] == bytearray(b"\x00\xff")
    assert str(one["day"]) == "2026-11-22"
    assert one["at_local"].isoformat() == "2026-11-22T10:00:00.123456"
    zoned = datetime(2026, 11, 22, 10, 0, 0, 500000, tzinfo=UTC)
    assert one["at_zone_us"] == round(zoned.timestamp() * 1_000_000)
    assert one["doc"] == '{"a": [1, 2]}'  # jsonb's text, as PostgreSQL printed it
    assert one["uid"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert one["nums"] == [1, 2, 3] and one["tags"] == ["a", None, "c"]
    assert one["prices"] == [Decimal("1.50"), Decimal("2.25")]
    two = rows[(2, "insert")]
    assert two["small"] == -32768 and two["i"] == 2147483647
    assert two["amount"] == Decimal("-999999999.999")
    assert two["big"] == "123456789012345678901234567890.123456789"
    assert two["f"] == math.inf and math.copysign(1.0, two["r"]) == -1.0
    assert two["body"] is None and two["_unchanged_toast"] == []
    assert two["doc"] == '{"big": 123456789012345678901234567890, "small": 0.0000001}'  # every digit
    assert rows[(1, "update")]["i"] == 11 and rows[(2, "delete")]["_op"] == "delete"
    ordered = df.orderBy("_commit_lsn", "_seq").select("_op").collect()
    assert [r[0] for r in ordered] == ["insert", "insert", "update", "delete"]


@pytest.mark.pg
def test_unchanged_toast_is_never_confused_with_null(live_table: tuple[Feed, str, Any],
                                                     spark: SparkSession) -> None:
    feed, table, conn = live_table
    conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, n int, body text)")
    conn.execute(f"ALTER TABLE {table} ALTER COLUMN body SET STORAGE EXTERNAL")
    big = "".join(uuid.uuid4().hex for _ in range(400))  # 12.8 kB, stored out of line
    conn.execute(f"INSERT INTO {table} VALUES (1, 0, %s), (2, 0, NULL)", (big,))
    conn.execute(f"UPDATE {table} SET n = n + 1")
    _wait_for(feed, table, 4)
    df = _reader(spark, feed, table=table).load().where("_op = 'update'")
    rows = {r["id"]: r for r in df.collect()}
    assert rows[2]["body"] is None and rows[2]["_unchanged_toast"] == []  # a real NULL
    # live_feed pins toast=placeholder: the unchanged value is absent and named, never a NULL
    assert rows[1]["body"] is None and rows[1]["_unchanged_toast"] == ["body"]


@pytest.mark.pg
def test_streaming_and_latest_rows_mirror_the_table(live_table: tuple[Feed, str, Any],
                                                    spark: SparkSession, tmp_path: Path) -> None:
    feed, table, conn = live_table
    conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text, n numeric(10,2))")
    conn.execute(f"INSERT INTO {table} SELECT g, 'v' || g, g / 4.0 FROM generate_series(1, 3000) g")
    conn.execute(f"UPDATE {table} SET v = v || '!' WHERE id % 3 = 0")
    conn.execute(f"DELETE FROM {table} WHERE id % 7 = 0")
    first_count = 3000 + 1000 + 428
    assert len(_wait_for(feed, table, first_count)) == first_count

    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def drain() -> None:
        q = (spark.readStream.format("pgfeed").option("url", feed[0]).option("feed", feed[1])
             .option("table", table).option("partitions", 2).option("maxRowsPerTrigger", 1500)
             .option("consumer", f"mirror-{uuid.uuid4().hex[:6]}").load()
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        q.awaitTermination(300)
        assert q.exception() is None

    drain()
    conn.execute(f"UPDATE {table} SET n = n + 1 WHERE id % 5 = 0")
    conn.execute(f"INSERT INTO {table} VALUES (5000, 'late', 1.25)")
    conn.execute(f"DELETE FROM {table} WHERE id <= 10")
    # 515 updates (id % 5 = 0 and still there), 1 insert, 9 deletes (ids 1-10 but 7)
    total = len(_wait_for(feed, table, first_count + 525))
    assert total == first_count + 525
    drain()  # restarted from its checkpoint
    written = spark.read.parquet(str(out))
    assert written.count() == total
    assert written.select("_commit_lsn", "_seq").distinct().count() == total  # each once
    mirror = {tuple(r) for r in latest_rows(written, ["id"]).select("id", "v", "n").collect()}
    source = {tuple(r) for r in conn.execute(f"SELECT id, v, n FROM {table}").fetchall()}
    assert mirror == source
