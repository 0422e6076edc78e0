"""Retention as the running service applies it: its periodic check drops the oldest transactions
past the feed's byte budget, never what a named consumer has not acknowledged, and readers of a
dropped position get 410 naming the oldest one left."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import psycopg
import pytest

from clients import parse_cursor
from tests.fixtures.fix_service import FeedFactory, run_service, wait_until

pytestmark = pytest.mark.pg


def test_retention_waits_for_the_slowest_consumer(tmp_path: Path, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE r (id int PRIMARY KEY, pad text)")
    with run_service(tmp_path / "svc", retention_check_seconds=0.2) as service:
        feeds = FeedFactory(service)
        name = feeds(pg_dsn, tables=("public.r",), retention={"hours": None, "bytes": 1})
        try:
            with httpx.Client(base_url=service.http_url, timeout=30) as client:
                # A consumer registered before anything is captured holds everything after it.
                client.put(f"/v1/feeds/{name}/consumers/slow", json={"cursor": "0/0"})
                with psycopg.connect(pg_dsn, autocommit=True) as conn:
                    for i in range(10):
                        conn.execute("INSERT INTO r VALUES (%s, repeat('x', 200))", (i,))
                feeds.caught_up(name, pg_dsn)
                time.sleep(0.6)  # at least two retention checks (every 0.2 s) have run
                status = client.get(f"/v1/feeds/{name}").json()
                assert status["log"]["change_count"] == 10  # 1-byte budget, yet nothing dropped

                # The consumer acknowledges the 4th transaction: the first four may go, no more.
                everything = client.get(f"/v1/feeds/{name}/changes").json()["changes"]
                fourth = everything[3]["commit_lsn"]
                client.put(f"/v1/feeds/{name}/consumers/slow", json={"cursor": fourth})
                wait_until(lambda: client.get(f"/v1/feeds/{name}").json()["log"]["change_count"] == 6,
                           10, "retention to drop what the consumer acknowledged")
                log = client.get(f"/v1/feeds/{name}").json()["log"]
                assert parse_cursor(log["trimmed_lsn"]) == parse_cursor(fourth)
                assert log["oldest_lsn"] == everything[4]["commit_lsn"] and log["forced_trims"] == 0

                gone = client.get(f"/v1/feeds/{name}/changes", params={"after": everything[1]["commit_lsn"]})
                assert gone.status_code == 410 and gone.json()["error"]["oldest"] == everything[4]["commit_lsn"]
                kept = client.get(f"/v1/feeds/{name}/changes", params={"after": fourth}).json()["changes"]
                assert [c["after"]["id"] for c in kept] == [4, 5, 6, 7, 8, 9]
        finally:
            feeds.delete_all()
