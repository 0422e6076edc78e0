"""latest_rows against the table it mirrors when updates change the primary key: the old key
must go (a typed row shows only the new image; ``_key`` names the key it left)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import psycopg
import pytest

from clients import FeedClient

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import SparkSession

from spark_connector import latest_rows

pytestmark = [pytest.mark.spark, pytest.mark.pg, pytest.mark.slow]


def _wait_for(base_url: str, feed: str, table: str, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    with FeedClient(base_url) as client:
        while len(list(client.iter_changes(feed, tables=[table]))) < count:
            assert time.monotonic() < deadline, f"{count} changes of {table} not captured"
            time.sleep(0.3)


def test_latest_rows_follows_key_changes(live_feed: tuple[str, str, str], spark_session: SparkSession) -> None:
    base_url, feed, dsn = live_feed
    table = f"public.keys_{uuid.uuid4().hex[:8]}"
    steps = [
        f"CREATE TABLE {table} (id int PRIMARY KEY, v text)",
        f"INSERT INTO {table} SELECT g, 'v' || g FROM generate_series(1, 20) g",   # 20 changes
        f"UPDATE {table} SET v = 'plain' WHERE id = 1",                             # 1
        f"UPDATE {table} SET id = 100 WHERE id = 2",                                # 1: 2 -> 100
        f"UPDATE {table} SET id = 3000 WHERE id = 3",                               # 1: 3 -> 3000
        f"UPDATE {table} SET id = 3 WHERE id = 3000",                               # 1: and back
        f"UPDATE {table} SET id = 200 WHERE id = 4",                                # 1
        f"DELETE FROM {table} WHERE id = 200",                                      # 1: moved, then gone
    ]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for sql in steps:
            conn.execute(sql)
        with conn.transaction():  # 5 and 6 swap keys through a temporary one: 3 changes
            conn.execute(f"UPDATE {table} SET id = -5 WHERE id = 5")
            conn.execute(f"UPDATE {table} SET id = 5 WHERE id = 6")
            conn.execute(f"UPDATE {table} SET id = 6 WHERE id = -5")
        source = {tuple(r) for r in conn.execute(f"SELECT id, v FROM {table}").fetchall()}
    _wait_for(base_url, feed, table, 29)

    df = (spark_session.read.format("pgfeed").option("url", base_url).option("feed", feed)
          .option("table", table).option("partitions", 2).load())
    moved = df.where("_op = 'update' AND id = 100").collect()
    assert len(moved) == 1 and json.loads(moved[0]["_key"]) == {"id": 2}
    assert {r["id"] for r in df.where("_op = 'update'").collect()} >= {100, 3000, 3, 200, 5, 6, -5}
    mirror = {tuple(r) for r in latest_rows(df, ["id"]).select("id", "v").collect()}
    assert mirror == source
    blind = {tuple(r) for r in latest_rows(df.drop("_key"), ["id"]).select("id", "v").collect()}
    assert (2, "v2") in blind and blind != source  # without the old key, moved rows live on
    assert (2, "v2") not in mirror and (100, "v2") in mirror and (6, "v5") in mirror and (5, "v6") in mirror
    with_meta: Any = latest_rows(df, ["id"], keep_metadata=True)
    assert "_key" in with_meta.columns and with_meta.count() == len(source)
