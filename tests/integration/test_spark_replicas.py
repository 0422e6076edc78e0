"""Partitions of a Spark read spread over several ``pgfeed serve`` replicas sharing one
PostgreSQL store (``url`` lists them): both replicas serve, and with one stopped the read still
completes on the other."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from pyspark.sql import SparkSession

from pgfeed.feeds.model import FeedOptions, FeedSpec
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.pgstore.store import PgStore
from pgfeed_client import ClientError, FeedClient
from pgfeed_spark._replicas import parse_urls, reachable_first
from tests.fixtures.fix_pg import Clusters, create_database
from tests.fixtures.fix_pgstore import SCHEMA, store_dsn
from tests.fixtures.fix_service import wait_until
from tests.integration.test_pgstore_failover import Replica, free_port

pytestmark = [pytest.mark.spark, pytest.mark.pg, pytest.mark.slow]

ROWS = 2000
_SERVED = re.compile(r'^pgfeed_request_duration_seconds_count\{[^}]*endpoint="[^"]*changes[^"]*"'
                     r'[^}]*\}\s+(\S+)', re.MULTILINE)


def changes_requests(url: str) -> float:
    """How many ``/changes`` requests this replica has answered (its /metrics)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(v) for v in _SERVED.findall(text))


def test_urls_are_parsed_and_a_refusing_replica_is_passed_over() -> None:
    assert parse_urls("http://a:1/, http://b:2", "http://b:2,http://c:3") == (
        "http://a:1", "http://b:2", "http://c:3")
    closed, other = (f"http://127.0.0.1:{free_port()}" for _ in range(2))
    assert reachable_first((closed, other), 1) == other  # none answers: the preferred one


def test_partitions_spread_over_replicas_and_fail_over(
        pg_clusters: Clusters, spark_session: SparkSession, tmp_path: Path) -> None:
    cluster = pg_clusters.newest()
    store = store_dsn(cluster)
    source = create_database(cluster, prefix="repsrc")
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE r (id int PRIMARY KEY, v text)")
    admin = Supervisor(store=PgStore(store, replica_id="admin", schema=SCHEMA), capture=False)
    admin.start()
    admin.create(FeedSpec(name="f", dsn=source, tables=("public.r",),
                          options=FeedOptions(heartbeat_seconds=1, messages=True)))
    replicas = [Replica(store, r, tmp_path) for r in ("a", "b")]
    urls = [f"http://127.0.0.1:{r.http_port}" for r in replicas]
    try:
        with psycopg.connect(source, autocommit=True) as conn:
            for start in range(0, ROWS, 100):  # many transactions: room for several splits
                conn.execute("INSERT INTO r SELECT g, 'v' || g FROM generate_series(%s::int, %s::int) g",
                             (start + 1, start + 100))

        def captured(url: str) -> bool:
            try:
                with FeedClient(url, timeout=5) as client:
                    return sum(1 for _ in client.iter_changes("f")) == ROWS
            except ClientError:
                return False

        for url in urls:
            wait_until(lambda u=url: captured(u), 120, f"{url} serving every change")
        before = [changes_requests(u) for u in urls]

        def read(*options: tuple[str, Any]) -> list[tuple[Any, ...]]:
            reader = spark_session.read.format("pgfeed").option("feed", "f") \
                .option("table", "public.r").option("partitions", 4)
            for name, value in options:
                reader = reader.option(name, value)
            return sorted(tuple(r) for r in reader.load().select("id", "v").collect())

        expected = [(i, f"v{i}") for i in range(1, ROWS + 1)]
        assert read(("url", ",".join(urls))) == expected
        served = [changes_requests(u) - b for u, b in zip(urls, before)]
        assert all(n > 0 for n in served), f"/changes requests by replica: {served}"

        replicas[0].stop()  # refuses connections from now on
        assert read(("url", urls[0]), ("urls", urls[1])) == expected
    finally:
        for r in replicas:
            r.stop()
        admin.stop()
