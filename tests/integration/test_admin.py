"""Feed administration beyond create/read, through the public surfaces (HTTP admin API, CLI) on
real PostgreSQL: changing a feed's table list, and a delete that never orphans a slot silently."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from pgfeed.localpg import LocalCluster
from tests.checkout import PYTHONPATH
from tests.fixtures.fix_service import Service, current_lsn, wait_until

pytestmark = pytest.mark.pg

ROOT = Path(__file__).resolve().parents[2]


def _create(client: httpx.Client, name: str, dsn: str, tables: list[str]) -> dict[str, Any]:
    response = client.post("/v1/feeds", json={"name": name, "dsn": dsn, "tables": tables,
                                              "options": {"heartbeat_seconds": 1}})
    assert response.status_code == 201, response.text
    wait_until(lambda: client.get(f"/v1/feeds/{name}").json()["state"] == "running", 30, "running")
    return response.json()


def _caught_up(client: httpx.Client, name: str, dsn: str) -> None:
    target = current_lsn(dsn)
    wait_until(lambda: _lsn(client.get(f"/v1/feeds/{name}").json()["confirmed_lsn"]) >= target, 60,
               f"{name} to confirm {target:X}")


def _lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def _rows(client: httpx.Client, name: str) -> list[tuple[str, int]]:
    page = client.get(f"/v1/feeds/{name}/changes", params={"after": "earliest", "limit": 1000}).json()
    return [(c["table"], c["after"]["id"]) for c in page["changes"] if c["op"] == "insert"]


def _published(dsn: str, publication: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT schemaname || '.' || tablename FROM pg_publication_tables "
                            "WHERE pubname = %s", (publication,)).fetchall()
    return {r[0] for r in rows}


def test_a_feeds_table_list_changes_from_the_next_commit(pgfeed_service: Service, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE tl_a (id int PRIMARY KEY); CREATE TABLE tl_b (id int PRIMARY KEY)")
    name = "tables_change"
    with httpx.Client(base_url=pgfeed_service.http_url, timeout=30) as client:
        feed = _create(client, name, pg_dsn, ["public.tl_a"])
        try:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO tl_a VALUES (1); INSERT INTO tl_b VALUES (1)")
            _caught_up(client, name, pg_dsn)

            response = client.patch(f"/v1/feeds/{name}", json={"tables": ["public.tl_a", "public.tl_b"]})
            assert response.status_code == 200, response.text
            assert response.json()["tables"] == ["public.tl_a", "public.tl_b"]
            assert _published(pg_dsn, feed["publication"]) == {"public.tl_a", "public.tl_b"}
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO tl_a VALUES (2); INSERT INTO tl_b VALUES (2)")
            _caught_up(client, name, pg_dsn)
            # tl_b's first row was committed before the change: not captured; its second is.
            assert _rows(client, name) == [("tl_a", 1), ("tl_a", 2), ("tl_b", 2)]

            # Through the CLI, back to one table; the list survives in the catalogue.
            cli = subprocess.run([sys.executable, "-m", "pgfeed", "feeds", "set-tables", name,
                                  "--url", pgfeed_service.http_url, "--tables", "public.tl_b"],
                                 env={**os.environ, "PYTHONPATH": PYTHONPATH}, capture_output=True,
                                 text=True, timeout=60, check=False)
            assert cli.returncode == 0, cli.stderr
            assert client.get(f"/v1/feeds/{name}").json()["tables"] == ["public.tl_b"]
            assert pgfeed_service.supervisor.spec(name).tables == ("public.tl_b",)
            assert _published(pg_dsn, feed["publication"]) == {"public.tl_b"}

            unknown = client.patch(f"/v1/feeds/{name}", json={"tables": ["public.nope"]})
            assert unknown.status_code == 422 and "public.nope" in unknown.json()["error"]["message"]
            empty = client.patch(f"/v1/feeds/{name}", json={"tables": []})
            assert empty.status_code in (400, 422) and "error" in empty.json()
            assert client.patch("/v1/feeds/no_such_feed", json={"tables": ["public.tl_a"]}).status_code == 404
        finally:
            client.delete(f"/v1/feeds/{name}")


def test_all_tables_feeds_refuse_a_table_list(pgfeed_service: Service, pg_dsn: str) -> None:
    with httpx.Client(base_url=pgfeed_service.http_url, timeout=30) as client:
        response = client.post("/v1/feeds", json={"name": "everything", "dsn": pg_dsn, "all_tables": True})
        assert response.status_code == 201, response.text
        try:
            refused = client.patch("/v1/feeds/everything", json={"tables": ["public.x"]})
            assert refused.status_code == 422
            assert "all tables" in refused.json()["error"]["message"]
        finally:
            client.delete("/v1/feeds/everything")


def test_delete_keeps_the_feed_when_the_source_cannot_drop_its_slot(
        pgfeed_service: Service, pg_cluster: LocalCluster, pg_dsn: str) -> None:
    dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE gone (id int PRIMARY KEY)")
    name = "unreachable"
    with httpx.Client(base_url=pgfeed_service.http_url, timeout=60) as client, \
            psycopg.connect(pg_cluster.dsn(), autocommit=True) as admin:
        feed = _create(client, name, pg_dsn, ["public.gone"])
        admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')  # the source refuses us
        try:
            refused = client.delete(f"/v1/feeds/{name}")
            assert refused.status_code == 422, refused.text
            message = refused.json()["error"]["message"]
            assert feed["slot"] in message and "force" in message
            assert client.get(f"/v1/feeds/{name}").status_code == 200  # kept, not half-deleted

            forced = client.delete(f"/v1/feeds/{name}", params={"force": "true"})
            assert forced.status_code == 204
            assert client.get(f"/v1/feeds/{name}").status_code == 404
            left = admin.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                                 (feed["slot"],)).fetchone()
            assert left == (1,)  # left behind, as the operator was told
        finally:
            admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
            admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                          "WHERE slot_name = %s AND NOT active", (feed["slot"],))


# -- item 13.7: one admin surface ------------------------------------------------------------------


def _cli(service: Service, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgfeed", *args, "--url", service.http_url],
                          env={**os.environ, "PYTHONPATH": PYTHONPATH},
                          capture_output=True, text=True, timeout=60, check=False)


def test_feeds_create_on_the_cli_takes_every_option_the_api_takes(pgfeed_service: Service,
                                                                   pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE cli_opts (id int PRIMARY KEY)")
    name = "cli_options"
    cli = _cli(pgfeed_service, "feeds", "create", name, "--dsn", pg_dsn, "--tables", "public.cli_opts",
               "--toast", "omit", "--snapshot", "never", "--no-messages", "--two-phase",
               "--no-streaming", "--no-partition-root", "--heartbeat-seconds", "2.5",
               "--retention-hours", "none", "--retention-bytes", "123456",
               "--retention-consumer-max-idle-hours", "6", "--no-failover", "--keyless", "identity_full",
               "--no-publish-generated-columns", "--no-backfill-attached", "--ddl", "off", "--json")
    try:
        assert cli.returncode == 0, cli.stderr
        expected = {"toast": "omit", "snapshot": "never", "messages": False, "two_phase": True,
                    "streaming": False, "partition_root": False, "heartbeat_seconds": 2.5,
                    "retention": {"hours": None, "bytes": 123456, "consumer_max_idle_hours": 6.0},
                    "failover": False, "keyless": "identity_full", "publish_generated_columns": False,
                    "backfill_attached": False, "ddl": "off"}
        assert json.loads(cli.stdout)["options"] == expected
        with httpx.Client(base_url=pgfeed_service.http_url, timeout=30) as client:
            assert client.get(f"/v1/feeds/{name}").json()["options"] == expected
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # reached the source too
            row = conn.execute("SELECT pubviaroot FROM pg_publication WHERE pubname = %s",
                               (f"pgfeed_{name}",)).fetchone()
            two_phase = conn.execute("SELECT two_phase FROM pg_replication_slots WHERE slot_name = %s",
                                     (f"pgfeed_{name}",)).fetchone()
        assert row == (False,) and two_phase == (True,)
        # Bad values are refused by the CLI before anything is sent.
        bad = _cli(pgfeed_service, "feeds", "create", "cli_bad", "--dsn", pg_dsn, "--all-tables",
                   "--retention-bytes", "lots")
        assert bad.returncode == 2 and "--retention-bytes" in bad.stderr
    finally:
        _cli(pgfeed_service, "feeds", "delete", name)


def test_an_adopted_publication_takes_no_table_list_and_status_shows_what_it_publishes(
        pgfeed_service: Service, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE ad_a (id int PRIMARY KEY); CREATE TABLE ad_b (id int PRIMARY KEY)")
        conn.execute("CREATE PUBLICATION adopted_pub FOR TABLE ad_a")
    name = "adopted"
    with httpx.Client(base_url=pgfeed_service.http_url, timeout=30) as client:
        for extra in ({"tables": ["public.ad_b"]}, {"all_tables": True}):
            refused = client.post("/v1/feeds", json={"name": name, "dsn": pg_dsn,
                                                     "publication": "adopted_pub", **extra})
            assert refused.status_code == 422, refused.text
            message = refused.json()["error"]["message"]
            assert "publication" in message and "status shows the tables" in message
            assert client.get(f"/v1/feeds/{name}").status_code == 404
        cli = _cli(pgfeed_service, "feeds", "create", name, "--dsn", pg_dsn, "--publication",
                   "adopted_pub", "--tables", "public.ad_b")
        assert cli.returncode == 1 and "adopted as it is" in cli.stderr

        created = client.post("/v1/feeds", json={"name": name, "dsn": pg_dsn, "publication": "adopted_pub",
                                                 "options": {"heartbeat_seconds": 1}})
        assert created.status_code == 201, created.text
        try:
            assert created.json()["tables"] == ["public.ad_a"] and not created.json()["all_tables"]
            listed = {f["name"]: f for f in client.get("/v1/feeds").json()["feeds"]}
            assert listed[name]["tables"] == ["public.ad_a"]
            with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the owner changes it on the source
                conn.execute("ALTER PUBLICATION adopted_pub ADD TABLE ad_b")
            status = client.get(f"/v1/feeds/{name}").json()
            assert status["tables"] == sorted(_published(pg_dsn, "adopted_pub")) == \
                ["public.ad_a", "public.ad_b"]
            assert not status["owns_publication"]
        finally:
            client.delete(f"/v1/feeds/{name}")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("DROP PUBLICATION adopted_pub")
