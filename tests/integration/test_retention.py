"""Retention as the running service applies it: its periodic check drops the oldest transactions
past the feed's byte budget, never what a named consumer has not acknowledged, and readers of a
dropped position get 410 naming the oldest one left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from pgfeed_client import parse_cursor
from tests.checkout import PYTHONPATH
from tests.fixtures.fix_service import FeedFactory, Service, run_service, wait_until

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


# -- item 13.5: retention that no consumer can pin forever ----------------------------------------

READ, ADMIN = "read-token-retention", "admin-token-retention"
ROOT = Path(__file__).resolve().parents[2]


def _cli(service: Service, *args: str, token: str = ADMIN) -> subprocess.CompletedProcess[str]:
    """``pgfeed ARGS`` against the service, as an operator runs it."""
    return subprocess.run([sys.executable, "-m", "pgfeed", *args, "--url", service.http_url,
                           "--token", token],
                          env={**os.environ, "PYTHONPATH": PYTHONPATH},
                          capture_output=True, text=True, timeout=60, check=False)


def _as(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _commits(client: httpx.Client, name: str) -> list[str]:
    page = client.get(f"/v1/feeds/{name}/transactions", params={"limit": 1000}, headers=_as(READ))
    assert page.status_code == 200, page.text
    return [t["commit_lsn"] for t in page.json()["transactions"]]


def _status(client: httpx.Client, name: str) -> dict[str, Any]:
    response = client.get(f"/v1/feeds/{name}", headers=_as(ADMIN))
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_forced_trim_and_consumer_delete_are_admin_and_no_reader_pins_what_was_dropped(
        tmp_path: Path, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE pin (id int PRIMARY KEY)")
    with run_service(tmp_path / "svc", read_tokens=[READ], admin_tokens=[ADMIN]) as service:
        feeds = FeedFactory(service)
        name = feeds(pg_dsn, tables=("public.pin",),
                     retention={"hours": None, "bytes": None, "consumer_max_idle_hours": None})
        try:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                for i in range(10):
                    conn.execute("INSERT INTO pin VALUES (%s)", (i,))
            feeds.caught_up(name, pg_dsn)
            with httpx.Client(base_url=service.http_url, timeout=30) as client:
                lsns = _commits(client, name)
                assert len(lsns) == 10
                trim, consumer = f"/v1/feeds/{name}/trim", f"/v1/feeds/{name}/consumers"
                # Forced trims and deleting consumers are administration.
                for headers, code in (({}, 401), (_as(READ), 403)):
                    assert client.post(trim, json={"before": "latest"}, headers=headers).status_code == code
                    assert client.delete(f"{consumer}/x", headers=headers).status_code == code
                assert _commits(client, name) == lsns

                # An operator trims from the CLI: what a reader at the 3rd commit has consumed.
                cli = _cli(service, "feeds", "trim", name, "--before", lsns[2], "--json")
                assert cli.returncode == 0, cli.stderr
                out = json.loads(cli.stdout)
                assert (out["dropped"], out["removed_consumers"], out["trimmed_lsn"]) == (3, [], lsns[2])
                assert _commits(client, name) == lsns[3:]
                assert _status(client, name)["log"]["forced_trims"] == 0  # no consumer overridden

                # A reader cannot register a consumer below what is gone (it would hold every
                # later trim); at or after it, yes, with its read token.
                pinned = client.put(f"{consumer}/pin", json={"cursor": "0/0"}, headers=_as(READ))
                assert pinned.status_code == 410, pinned.text
                assert pinned.json()["error"]["code"] == "cursor_expired"
                assert pinned.json()["error"]["oldest"] == lsns[2]
                acked = client.put(f"{consumer}/app", json={"cursor": lsns[4]}, headers=_as(READ))
                assert acked.status_code == 200, acked.text
                assert acked.json()["cursor"] == lsns[4] and acked.json()["acked_at"]

                # A forced trim past it: logged, counted, and the overtaken consumer is removed.
                forced = client.post(trim, json={"before": lsns[6]}, headers=_as(ADMIN))
                assert forced.status_code == 200, forced.text
                assert forced.json()["dropped"] == 4 and forced.json()["removed_consumers"] == ["app"]
                status = _status(client, name)
                assert status["log"]["forced_trims"] == 1 and status["consumers"] == []
                assert status["log"]["trimmed_lsn"] == lsns[6]
                gone = client.get(f"/v1/feeds/{name}/changes", params={"after": lsns[4]}, headers=_as(READ))
                assert gone.status_code == 410

                # Delete from the CLI: read tokens are refused, admin tokens delete.
                client.put(f"{consumer}/app", json={"cursor": lsns[7]}, headers=_as(READ))
                listed = _cli(service, "consumers", "list", name, "--json", token=READ)
                assert listed.returncode == 0, listed.stderr
                assert [c["name"] for c in json.loads(listed.stdout)["consumers"]] == ["app"]
                refused = _cli(service, "consumers", "delete", name, "app", token=READ)
                assert refused.returncode == 1 and "forbidden" in refused.stderr
                deleted = _cli(service, "consumers", "delete", name, "app")
                assert deleted.returncode == 0, deleted.stderr
                assert client.get(consumer, headers=_as(READ)).json()["consumers"] == []
                again = _cli(service, "consumers", "delete", name, "app")
                assert again.returncode == 1 and "consumer_not_found" in again.stderr
                ahead = client.post(trim, json={"before": "FFFF/0"}, headers=_as(ADMIN))
                assert ahead.status_code == 400 and ahead.json()["error"]["code"] == "cursor_ahead"
                everything = client.post(trim, json={"before": "latest"}, headers=_as(ADMIN))
                assert everything.json()["dropped"] == 3 and _commits(client, name) == []
        finally:
            feeds.delete_all()


def test_an_idle_consumer_expires_after_the_feeds_bound_shown_in_status_and_kept_over_a_restart(
        tmp_path: Path, pg_dsn: str) -> None:
    bound = 12.0  # seconds
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE idle (id int PRIMARY KEY, pad text)")
    data_dir = tmp_path / "svc"
    settings = {"retention_check_seconds": 0.2, "read_tokens": [READ], "admin_tokens": [ADMIN]}
    with run_service(data_dir, **settings) as service:
        feeds = FeedFactory(service)
        name = feeds(pg_dsn, tables=("public.idle",),
                     retention={"hours": None, "bytes": 1, "consumer_max_idle_hours": bound / 3600})
        with httpx.Client(base_url=service.http_url, timeout=30) as client:
            # A Spark job registers its consumer, then goes away.
            acked = client.put(f"/v1/feeds/{name}/consumers/spark", json={"cursor": "latest"},
                               headers=_as(READ))
            assert acked.status_code == 200, acked.text
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                for i in range(5):
                    conn.execute("INSERT INTO idle VALUES (%s, repeat('x', 100))", (i,))
            feeds.caught_up(name, pg_dsn)
            time.sleep(0.6)  # retention checks ran: the consumer holds everything
            status = _status(client, name)
            assert status["options"]["retention"]["consumer_max_idle_hours"] == bound / 3600
            assert status["log"]["change_count"] == 5
            [shown] = status["consumers"]
            acked_at = datetime.fromisoformat(shown["acked_at"])
            expires_at = datetime.fromisoformat(shown["expires_at"])
            assert expires_at - acked_at == timedelta(seconds=bound)
            lag = parse_cursor(status["head_lsn"]).lsn - parse_cursor(shown["cursor"]).lsn
            assert shown["lag_bytes"] == lag > 0
    # The acknowledgement time is durable: after a restart the same expiry is shown.
    with run_service(data_dir, **settings) as service, \
            httpx.Client(base_url=service.http_url, timeout=30) as client:
        try:
            [again] = _status(client, name)["consumers"]
            assert again["acked_at"] == shown["acked_at"] and again["expires_at"] == shown["expires_at"]
            assert _status(client, name)["log"]["change_count"] == 5  # still held
            wait_until(lambda: not _status(client, name)["consumers"], bound + 30, "the consumer to expire")
            assert datetime.now(UTC) >= expires_at
            wait_until(lambda: _status(client, name)["log"]["change_count"] == 0, 10,
                       "retention to drop what the expired consumer held")
            assert client.get(f"/v1/feeds/{name}/consumers/spark", headers=_as(READ)).status_code == 404
        finally:
            service.supervisor.delete(name)
