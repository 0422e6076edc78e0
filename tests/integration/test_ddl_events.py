"""Issue 27.2 through the public surface, on PostgreSQL 15 and 18: schema history annotations
(``previous_name``, ``missing_value``) and, with feed option ``ddl: "capture"``, DDL served as
events at their position (HTTP and gRPC)."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest

from tests.fixtures.fix_service import FeedFactory

pytestmark = pytest.mark.pg

# (DDL, rows using the new shape)
STEPS: list[tuple[str, list[str]]] = [
    ("ALTER TABLE dd ADD COLUMN flag bool DEFAULT true", ["INSERT INTO dd VALUES (3, 'c', 30, false)"]),
    ("ALTER TABLE dd ADD COLUMN note text", ["INSERT INTO dd VALUES (4, 'd', 40, true, 'n')"]),
    ("ALTER TABLE dd DROP COLUMN qty", ["INSERT INTO dd VALUES (5, 'e', NULL, 'x')"]),
    ("ALTER TABLE dd RENAME COLUMN name TO title", ["UPDATE dd SET title = 'A' WHERE id = 1"]),
    ("ALTER TABLE dd ALTER COLUMN title TYPE varchar(80)", ["INSERT INTO dd VALUES (6, 'f', true, 'y')"]),
    ("ALTER TABLE dd ALTER COLUMN id TYPE bigint", ["INSERT INTO dd VALUES (7, 'g', true, 'z')"]),
    ("ALTER TABLE dd ADD COLUMN at timestamptz DEFAULT '2026-01-02 03:04:05+00'",
     ["INSERT INTO dd (id, title) VALUES (8, 'h')"]),
]


def _history(base: str, feed: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{base}/v1/feeds/{feed}/tables/public.dd/schema/history", timeout=30)
    assert answer.status_code == 200, answer.text
    versions: list[dict[str, Any]] = answer.json()["versions"]
    return versions


def _setup(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE dd (id int PRIMARY KEY, name varchar(40), qty int)")
        conn.execute("INSERT INTO dd VALUES (1, 'a', 10), (2, 'b', 20)")


def _run_steps(dsn: str, settle: Any = None) -> None:
    """Each step's DDL and rows; ``settle()`` after each (the catalogue read without DDL capture
    happens when capture receives the Relation: a later rewrite would clear what it reads)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE dd SET qty = 11 WHERE id = 1")  # version 1 in the log
        for ddl, rows in STEPS:
            conn.execute(ddl)
            for row in rows:
                conn.execute(row)
            if settle is not None:
                settle()


def _notes(version: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: {k: c[k] for k in ("previous_name", "missing_value") if k in c}
            for c in version["columns"] if "previous_name" in c or "missing_value" in c}


def test_schema_history_without_capture(make_served_feed: FeedFactory, pg_dsn: str) -> None:
    """Without DDL capture: missing values from the catalogue, a rename is a drop plus an add."""
    _setup(pg_dsn)
    name = make_served_feed(pg_dsn, tables=("public.dd",))
    _run_steps(pg_dsn, lambda: make_served_feed.caught_up(name, pg_dsn))
    base = make_served_feed.service.http_url
    versions = _history(base, name)
    assert [[c["name"] for c in v["columns"]] for v in versions] == [
        ["id", "name", "qty"], ["id", "name", "qty", "flag"], ["id", "name", "qty", "flag", "note"],
        ["id", "name", "flag", "note"], ["id", "title", "flag", "note"],
        ["id", "title", "flag", "note"], ["id", "title", "flag", "note"],
        ["id", "title", "flag", "note", "at"]]
    assert [_notes(v) for v in versions] == [
        {}, {"flag": {"missing_value": True}}, {}, {}, {}, {}, {},
        {"at": {"missing_value": "2026-01-02T03:04:05+00:00"}}]
    # the same at a position, and in /tables
    at = httpx.get(f"{base}/v1/feeds/{name}/tables/public.dd/schema",
                   params={"at": versions[1]["valid_from"]}, timeout=30).json()
    assert _notes(at) == {"flag": {"missing_value": True}}
    tables = httpx.get(f"{base}/v1/feeds/{name}/tables", timeout=30).json()["tables"]
    assert [_notes(v) for v in tables[0]["versions"]] == [_notes(v) for v in versions]
