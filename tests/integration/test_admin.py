"""Feed administration beyond create/read, through the public surfaces (HTTP admin API, CLI) on
real PostgreSQL: changing a feed's table list, and a delete that never orphans a slot silently."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from service.localpg import LocalCluster
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
            cli = subprocess.run([sys.executable, "-m", "service", "feeds", "set-tables", name,
                                  "--url", pgfeed_service.http_url, "--tables", "public.tl_b"],
                                 env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
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
