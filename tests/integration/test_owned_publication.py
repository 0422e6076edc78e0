"""Issue 27.5: a publication pgfeed creates may carry row filters, column lists (PostgreSQL 15+)
and publish_generated_columns (18+); refused with a clear 422 where the source cannot or where
PostgreSQL would then refuse the application's UPDATE/DELETE; status shows what is published.
Through HTTP and the CLI against real PostgreSQL, compared with PostgreSQL's own subscriber."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from pgfeed.localpg import LocalCluster
from tests.fixtures.fix_pg import create_database, drop_subscription
from tests.fixtures.fix_service import Service, current_lsn, wait_until

pytestmark = pytest.mark.pg

ROOT = Path(__file__).resolve().parents[2]
ORDERS = ("CREATE TABLE orders (id int, region text, total int, note text, "
          "PRIMARY KEY (id, region))")
EU_ORDERS = {"table": "public.orders", "where": "region = 'eu'", "columns": ["id", "region", "total"]}


def _db(dsn: str) -> str:
    return str(conninfo_to_dict(dsn)["dbname"])


def _client(service: Service) -> httpx.Client:
    return httpx.Client(base_url=service.http_url, timeout=60)


def _source(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {"publications": conn.execute("SELECT pubname FROM pg_publication ORDER BY 1").fetchall(),
                "slots": conn.execute("SELECT slot_name FROM pg_replication_slots WHERE database = "
                                      "current_database() ORDER BY 1").fetchall()}


def _lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def _changes(service: Service, name: str, dsn: str) -> list[dict[str, Any]]:
    """Every change of the feed up to the source's current position (paged)."""
    target = current_lsn(dsn)
    with _client(service) as client:
        wait_until(lambda: _lsn(client.get(f"/v1/feeds/{name}").json()["confirmed_lsn"]) >= target,
                   60, f"{name} caught up")
        out: list[dict[str, Any]] = []
        after = "earliest"
        while True:
            page = client.get(f"/v1/feeds/{name}/changes", params={"after": after, "limit": 1000}).json()
            out += page["changes"]
            if not page["changes"]:
                return out
            after = page["next"]


def _mirror(changes: list[dict[str, Any]]) -> dict[tuple[int, str], dict[str, Any]]:
    """A table rebuilt from the feed's changes, keyed by (id, region)."""
    rows: dict[tuple[int, str], dict[str, Any]] = {}
    for c in changes:
        if c.get("table") != "orders":
            continue
        if c["op"] in ("update", "delete"):
            old = c["key"]  # the old row's replica identity
            rows.pop((old["id"], old["region"]), None)
        if c["op"] in ("insert", "update"):
            rows[(c["after"]["id"], c["after"]["region"])] = c["after"]
    return rows


def _workload(dsn: str) -> None:
    """Inserts, updates and deletes moving rows into and out of the filter, and changes to a
    column outside the column list."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(1, 61):
            conn.execute("INSERT INTO orders VALUES (%s, %s, %s, %s)",
                         (i, "eu" if i % 3 else "us", i * 10, f"n{i}"))
        conn.execute("UPDATE orders SET total = total + 1 WHERE id % 4 = 0")  # in and outside
        conn.execute("UPDATE orders SET region = 'us' WHERE id % 5 = 0 AND region = 'eu'")  # leave
        conn.execute("UPDATE orders SET region = 'eu' WHERE id % 6 = 0 AND region = 'us'")  # enter
        conn.execute("UPDATE orders SET note = 'changed' WHERE id % 7 = 0")  # not published column
        with conn.transaction():
            conn.execute("DELETE FROM orders WHERE id % 8 = 0")
            conn.execute("INSERT INTO orders VALUES (100, 'eu', 1, 'x'), (101, 'us', 2, 'y')")
            conn.execute("UPDATE orders SET region = 'us', total = 7 WHERE id = 100")
        conn.execute("DELETE FROM orders WHERE id = 1")


def test_row_filter_and_column_list_equal_postgresqls_own_subscriber(
        pgfeed_service: Service, pg_cluster: LocalCluster, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(ORDERS)
    name = f"rf_{_db(pg_dsn)}"
    with _client(pgfeed_service) as client:
        created = client.post("/v1/feeds", json={"name": name, "dsn": pg_dsn, "tables": [EU_ORDERS],
                                                 "options": {"heartbeat_seconds": 1}})
        assert created.status_code == 201, created.text
    sub_dsn = create_database(pg_cluster, "sub")
    subscription = f"s_{name}"
    # On one cluster CREATE SUBSCRIPTION cannot create its slot (it would wait for its own
    # transaction): the slot is made on the source first, as PostgreSQL's documentation says.
    with psycopg.connect(pg_dsn, autocommit=True) as src:
        src.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (subscription,))
    with psycopg.connect(sub_dsn, autocommit=True) as sub:
        sub.execute("CREATE TABLE orders (id int, region text, total int, PRIMARY KEY (id, region))")
        sub.execute(sql.SQL("CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {} "
                            "WITH (create_slot = false, slot_name = {}, copy_data = false)").format(
            sql.Identifier(subscription), sql.Literal(pg_dsn), sql.Identifier(f"pgfeed_{name}"),
            sql.Literal(subscription)))
        try:
            wait_until(lambda: pgfeed_service.supervisor.status(name, probe_source=False).state
                       == "running", 30, "feed running")
            _workload(pg_dsn)
            with psycopg.connect(pg_dsn) as src:
                expected = {(r[0], r[1]): {"id": r[0], "region": r[1], "total": r[2]} for r in src.execute(
                    "SELECT id, region, total FROM orders WHERE region = 'eu'").fetchall()}
            assert 20 < len(expected) < 60

            def subscribed() -> dict[tuple[int, str], dict[str, Any]]:
                return {(r[0], r[1]): {"id": r[0], "region": r[1], "total": r[2]}
                        for r in sub.execute("SELECT id, region, total FROM orders").fetchall()}
            wait_until(lambda: subscribed() == expected, 60, "the subscriber caught up")
            changes = _changes(pgfeed_service, name, pg_dsn)
            assert _mirror(changes) == subscribed() == expected
            published = [c for c in changes if c.get("table") == "orders"]
            assert all(set(c.get("after") or {}) <= {"id", "region", "total"} for c in published)
            assert {c["op"] for c in published} == {"insert", "update", "delete"}
            assert not any(c["op"] == "insert" and c["after"]["region"] == "us" for c in published)
            with _client(pgfeed_service) as client:
                status = client.get(f"/v1/feeds/{name}").json()
            assert status["tables"] == ["public.orders"]
            assert status["published"] == [{"table": "public.orders", "where": "(region = 'eu'::text)",
                                             "columns": ["id", "region", "total"]}]
        finally:
            drop_subscription(sub, pg_dsn, subscription)
            with _client(pgfeed_service) as client:
                client.delete(f"/v1/feeds/{name}")


def test_refusals_name_the_table_and_leave_nothing(pgfeed_service: Service, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(ORDERS + "; CREATE TABLE items (id int PRIMARY KEY, name text, price int); "
                     "CREATE TABLE notes (id int, body text); ALTER TABLE notes REPLICA IDENTITY FULL; "
                     "CREATE TABLE parts (id int, region text, qty int, PRIMARY KEY (id, region)) "
                     "PARTITION BY LIST (region); CREATE TABLE parts_eu PARTITION OF parts "
                     "FOR VALUES IN ('eu')")
    name = f"bad_{_db(pg_dsn)}"
    before = _source(pg_dsn)
    cases = [
        ({"table": "public.orders", "where": "regon = 'eu'"}, "invalid_table_filter",
         ['public.orders: PostgreSQL refused its row filter: column "regon" does not exist']),
        ({"table": "public.orders", "where": "total > 10"}, "invalid_table_filter",
         ["public.orders: the row filter reads total, outside its replica identity (id, region)",
          "ALTER TABLE public.orders REPLICA IDENTITY FULL"]),
        ({"table": "public.orders", "columns": ["region", "total"]}, "invalid_table_filter",
         ["public.orders: the column list leaves out id of its replica identity",
          "add id to the column list"]),
        ({"table": "public.orders", "columns": ["id", "region", "nope"]}, "invalid_table_filter",
         ["public.orders: PostgreSQL refused its column list", '"nope"']),
        ({"table": "public.orders", "where": "true) , public.items WHERE (true"}, "invalid_table_filter",
         ["public.orders: PostgreSQL refused its row filter: unbalanced parentheses"]),
        ({"table": "public.notes", "columns": ["id", "body"]}, "invalid_table_filter",
         ["public.notes has (or gets) REPLICA IDENTITY FULL, which no column list covers"]),
        ({"table": "public.parts", "where": "qty > 1"}, "invalid_table_filter",
         [("public.parts_eu (as public.parts's partition): the row filter reads qty, outside its "
           "replica identity (id, region)")]),
    ]
    with _client(pgfeed_service) as client:
        for entry, code, parts in cases:
            answer = client.post("/v1/feeds", json={"name": name, "dsn": pg_dsn,
                                                    "tables": ["public.items", entry]})
            assert answer.status_code == 422, answer.text
            error = answer.json()["error"]
            assert error["code"] == code, error
            for part in parts:
                assert part in error["message"], (part, error)
            assert _source(pg_dsn) == before
            assert client.get(f"/v1/feeds/{name}").status_code == 404
        dry = client.post("/v1/feeds", params={"dry_run": "true"}, json={
            "name": name, "dsn": pg_dsn, "tables": [cases[0][0]]}).json()
        assert dry["ok"] is False and any("regon" in f["message"] for f in dry["findings"])
    checked = subprocess.run([sys.executable, "-m", "pgfeed", "check", "--dsn", pg_dsn, "--tables",
                              "public.items", "--where", "public.orders=total > 10", "--columns",
                              "public.items=name", "--json"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, check=False)
    assert checked.returncode == 1, checked.stderr
    errors = [f for f in json.loads(checked.stdout)["findings"] if f["level"] == "error"]
    assert sorted(f["check"] for f in errors) == ["column_list", "row_filter"], errors
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the application's writes still work
        conn.execute("INSERT INTO orders VALUES (1, 'eu', 1); UPDATE orders SET total = 2; DELETE FROM orders; "
                     "INSERT INTO notes VALUES (1, 'a'); UPDATE notes SET body = 'b'; DELETE FROM notes; "
                     "INSERT INTO parts VALUES (1, 'eu', 1); UPDATE parts SET qty = 2; DELETE FROM parts")


def test_publish_generated_columns_on_18_refused_before(pgfeed_service: Service, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE g (id int PRIMARY KEY, price int, "
                     "doubled int GENERATED ALWAYS AS (price * 2) STORED)")
        version = conn.info.server_version
    name = f"gen_{_db(pg_dsn)}"
    body = {"name": name, "dsn": pg_dsn, "tables": ["public.g"],
            "options": {"heartbeat_seconds": 1, "publish_generated_columns": True}}
    before = _source(pg_dsn)
    with _client(pgfeed_service) as client:
        answer = client.post("/v1/feeds", json=body)
        if version < 180000:
            assert answer.status_code == 422, answer.text
            assert "publish_generated_columns needs PostgreSQL 18 or later; the source runs " \
                   "PostgreSQL 15" in answer.json()["error"]["message"]
            assert _source(pg_dsn) == before
            return
        assert answer.status_code == 201, answer.text
        try:
            assert answer.json()["options"]["publish_generated_columns"] is True
            wait_until(lambda: client.get(f"/v1/feeds/{name}").json()["state"] == "running", 30, "running")
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO g (id, price) VALUES (1, 21)")
                conn.execute("UPDATE g SET price = 5 WHERE id = 1")
            rows = [c for c in _changes(pgfeed_service, name, pg_dsn) if c.get("table") == "g"]
            assert [c["after"] for c in rows] == [{"id": 1, "price": 21, "doubled": 42},
                                                  {"id": 1, "price": 5, "doubled": 10}]
            status = client.get(f"/v1/feeds/{name}").json()
            assert status["publish_generated_columns"] is True
            assert status["published"] == [{"table": "public.g", "where": None,
                                            "columns": ["id", "price", "doubled"]}]
        finally:
            client.delete(f"/v1/feeds/{name}")


def test_row_filters_refused_before_15(pgfeed_service: Service, any_pg_dsn: str) -> None:
    with psycopg.connect(any_pg_dsn, autocommit=True) as conn:
        conn.execute(ORDERS)
        version = conn.info.server_version
    body = {"name": f"old_{_db(any_pg_dsn)}", "dsn": any_pg_dsn, "tables": [EU_ORDERS]}
    with _client(pgfeed_service) as client:
        dry = client.post("/v1/feeds", params={"dry_run": "true"}, json=body).json()
    errors = [f for f in dry["findings"] if f["level"] == "error"]
    if version < 150000:
        assert dry["ok"] is False
        assert [f["check"] for f in errors] == ["row_filter"]
        assert "row filters and column lists need PostgreSQL 15 or later; the source runs " \
               "PostgreSQL 14" in errors[0]["message"]
    else:
        assert dry["ok"] is True, errors


def _cli(service: Service, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgfeed", *args, "--url", service.http_url],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def test_cli_and_patch_set_filters(pgfeed_service: Service, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(ORDERS + "; CREATE TABLE items (id int PRIMARY KEY, name text, price int)")
    name = f"cli_{_db(pg_dsn)}"
    made = _cli(pgfeed_service, "feeds", "create", name, "--dsn", pg_dsn, "--tables", "public.items",
                "--where", "public.orders=region = 'eu'", "--columns", "public.orders=id,region,total",
                "--heartbeat-seconds", "1")
    assert made.returncode == 0, made.stderr
    try:
        shown = json.loads(_cli(pgfeed_service, "feeds", "show", name, "--json").stdout)
        assert shown["tables"] == ["public.items", "public.orders"]
        assert shown["published"] == [
            {"table": "public.items", "where": None, "columns": ["id", "name", "price"]},
            {"table": "public.orders", "where": "(region = 'eu'::text)", "columns": ["id", "region", "total"]}]
        refused = _cli(pgfeed_service, "feeds", "set-tables", name, "--tables", "public.orders",
                       "--columns", "public.items=name")
        assert refused.returncode == 1
        assert "invalid_table_filter: table list not changed" in refused.stderr
        assert "public.items: the column list leaves out id" in refused.stderr
        with _client(pgfeed_service) as client:
            patched = client.patch(f"/v1/feeds/{name}", json={"tables": [
                "public.orders", {"table": "public.items", "where": "id > 10"}]})
            assert patched.status_code == 200, patched.text
            assert patched.json()["published"] == [
                {"table": "public.items", "where": "(id > 10)", "columns": ["id", "name", "price"]},
                {"table": "public.orders", "where": None, "columns": ["id", "region", "total", "note"]}]
            wait_until(lambda: client.get(f"/v1/feeds/{name}").json()["state"] == "running", 30, "running")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO items VALUES (1, 'a', 1), (11, 'b', 2); "
                         "INSERT INTO orders VALUES (1, 'us', 3, 'n')")
        rows = [(c["table"], c["after"]["id"]) for c in _changes(pgfeed_service, name, pg_dsn)
                if c["op"] == "insert"]
        assert rows == [("items", 11), ("orders", 1)]
    finally:
        _cli(pgfeed_service, "feeds", "delete", name)
