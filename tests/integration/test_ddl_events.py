"""Issue 27.2 through the public surface, on PostgreSQL 15 and 18: schema history annotations
(``previous_name``, ``missing_value``) and, with feed option ``ddl: "capture"``, DDL served as
events at their position (HTTP and gRPC)."""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import httpx
import orjson
import psycopg
import pyarrow as pa
import pytest

from pgfeed.decoding.relations import RelationCatalog
from pgfeed.decoding.values import load_value
from pgfeed_client import FeedClient, GrpcFeedClient
from tests.fixtures.fix_service import FeedFactory, grpc_changes

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


def _changes(base: str, feed: str, **params: Any) -> list[dict[str, Any]]:
    answer = httpx.get(f"{base}/v1/feeds/{feed}/changes", params={"limit": 1000, **params},
                       timeout=30)
    assert answer.status_code == 200, answer.text
    changes: list[dict[str, Any]] = answer.json()["changes"]
    return changes


def test_ddl_capture_serves_events_at_their_position(make_served_feed: FeedFactory,
                                                     pg_dsn: str) -> None:
    """With ddl "capture": each DDL is an event between the last change of the old shape and the
    first of the new one (HTTP, gRPC, both clients), and schema history knows renames."""
    _setup(pg_dsn)
    name = make_served_feed(pg_dsn, tables=("public.dd",), ddl="capture")
    _run_steps(pg_dsn)
    make_served_feed.caught_up(name, pg_dsn)
    service = make_served_feed.service
    base = service.http_url

    versions = _history(base, name)
    assert [_notes(v) for v in versions] == [
        {}, {"flag": {"missing_value": True}}, {}, {}, {"title": {"previous_name": "name"}}, {},
        {}, {"at": {"missing_value": "2026-01-02T03:04:05+00:00"}}]

    # durable: a catalogue rebuilt from the change log alone (as a restart or a replica does)
    # answers the same annotations
    rebuilt = RelationCatalog()
    for commit_lsn, frame in service.supervisor.changelog(name).schema_history():
        rebuilt.add(commit_lsn, frame)
    assert orjson.loads(orjson.dumps(rebuilt.tables(load_value), default=str))[0]["versions"] == \
        httpx.get(f"{base}/v1/feeds/{name}/tables", timeout=30).json()["tables"][0]["versions"]

    events = _changes(base, name)
    assert [e["op"] for e in events] == ["update"] + ["ddl", "insert"] * 3 + ["ddl", "update"] + \
        ["ddl", "insert"] * 3
    rows = [e for e in events if e["op"] != "ddl"]
    assert [e["table_version"] for e in rows] == list(range(1, 9))
    ddls = [e for e in events if e["op"] == "ddl"]
    for i, event in enumerate(ddls):  # between the old shape and the new one, in one transaction
        before, after = events[events.index(event) - 1], events[events.index(event) + 1]
        assert (before["table_version"], after["table_version"]) == (i + 1, i + 2)
        assert (event["schema"], event["table"]) == ("public", "dd")
        assert event["ddl"]["table"] == "public.dd" and event["ddl"]["command"] == "ALTER TABLE"
        assert [c["name"] for c in event["ddl"]["columns"]] == \
            [c["name"] for c in versions[i + 1]["columns"]]
        assert "table_version" not in event
    add_flag, add_note, drop_qty, rename, widen, rewrite, add_at = (e["ddl"] for e in ddls)
    flag = add_flag["columns"][-1]
    assert flag == {"attnum": 4, "name": "flag", "type": "boolean", "type_oid": 16,
                    "not_null": False, "default": "true", "added": True, "missing_value": True}
    assert add_note["columns"][-1]["added"] and "missing_value" not in add_note["columns"][-1]
    assert [c["name"] for c in drop_qty["columns"]] == ["id", "name", "flag", "note"]
    assert (rename["object_type"], rename["object"]) == ("table column", "public.dd.title")
    assert (rename["old_name"], rename["new_name"]) == ("name", "title")
    assert rename["columns"][1] == {"attnum": 2, "name": "title", "type": "character varying(40)",
                                    "type_oid": 1043, "not_null": False, "default": None,
                                    "previous_name": "name"}
    assert widen["columns"][1]["type"] == "character varying(80)" and "old_name" not in widen
    assert rewrite["columns"][0] == {"attnum": 1, "name": "id", "type": "bigint", "type_oid": 20,
                                     "not_null": True, "default": None}
    assert add_at["columns"][-1]["missing_value"] == "2026-01-02T03:04:05+00:00"
    # filters: ops=ddl alone, and a table filter keeps the table's DDL
    assert _changes(base, name, ops="ddl") == ddls
    assert _changes(base, name, tables="public.dd") == events
    assert [e["op"] for e in _changes(base, name, ops="insert,update")] == \
        [e["op"] for e in rows]

    # gRPC: OP_DDL with the same ddl, raw and through both clients
    raw = grpc_changes(service.grpc_target, name, len(events))
    assert [c.op for c in raw] == [{"insert": 1, "update": 2, "ddl": 7}[e["op"]] for e in events]
    assert raw[7].ddl.old_name == "name" and raw[7].ddl.columns[1].previous_name == "name"
    assert raw[1].ddl.columns[3].missing_value.bool_value is True
    with GrpcFeedClient(service.grpc_target) as grpc_client:
        txns = list(itertools.islice(grpc_client.subscribe(name), len({e["commit_lsn"]
                                                                          for e in events})))
    over_grpc = [c.ddl for t in txns for c in t.changes if c.op == "ddl"]
    with FeedClient(base) as client:
        over_http = [c.ddl for c in client.iter_changes(name) if c.op == "ddl"]
    # the gRPC client types values (a timestamptz is a datetime), the HTTP one keeps JSON's
    over_grpc[-1]["columns"][-1]["missing_value"] = \
        over_grpc[-1]["columns"][-1]["missing_value"].isoformat()
    assert over_grpc == over_http == [e["ddl"] for e in ddls]
    # a generic Arrow read carries it as JSON text; Debezium as pgfeed's own ddl envelope
    arrow = httpx.get(f"{base}/v1/feeds/{name}/changes", params={"format": "arrow"}, timeout=30)
    table = pa.ipc.open_stream(arrow.content).read_all()
    assert [orjson.loads(d) for d in table.column("ddl").to_pylist() if d is not None] == \
        [e["ddl"] for e in ddls]
    typed = httpx.get(f"{base}/v1/feeds/{name}/changes",
                      params={"format": "arrow", "tables": "public.dd"}, timeout=30)
    assert "ddl" not in pa.ipc.open_stream(typed.content).read_all().column("_op").to_pylist()
    debezium = httpx.get(f"{base}/v1/feeds/{name}/changes", params={"format": "debezium"},
                         timeout=30).json()["changes"]
    assert [d["ddl"] for d in debezium if d["op"] == "ddl"] == [e["ddl"] for e in ddls]


def _objects(dsn: str, feed: str) -> dict[str, list[str]]:
    """What the feed's DDL capture left on the source."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        def names(query: str) -> list[str]:
            return [r[0] for r in conn.execute(query, (f"%{feed}%",)).fetchall()]
        return {
            "event triggers": names("SELECT evtname FROM pg_event_trigger WHERE evtname LIKE %s"),
            "functions": names("SELECT proname FROM pg_proc WHERE proname LIKE %s"),
            "tables": names("SELECT relname FROM pg_class WHERE relname LIKE %s"),
            "publications": names("SELECT pubname FROM pg_publication WHERE pubname LIKE %s"),
            "schemas": names("SELECT nspname FROM pg_namespace WHERE nspname = 'pgfeed' "
                             "AND %s::text IS NOT NULL"),
        }


def test_ddl_capture_never_breaks_ddl_and_rolled_back_ddl_is_no_event(
        make_served_feed: FeedFactory, pg_dsn: str) -> None:
    """A DDL rolled back with its savepoint (in a transaction the walsender streams) is no
    event; a capture that fails only warns; a feed of all tables serves a table created later
    from its CREATE TABLE on; everything goes with the feed."""
    dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{dbname}" SET logical_decoding_work_mem = \'64kB\'')
        conn.execute("CREATE TABLE sp (id int PRIMARY KEY, pad text)")
    name = make_served_feed(pg_dsn, all_tables=True, ddl="capture", messages=False)
    assert set(_objects(pg_dsn, name)["tables"]) == {f"{name}_ddl", f"{name}_ddl_id_seq", f"{name}_ddl_pkey"}
    warnings: list[str] = []
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: warnings.append(d.message_primary or ""))
        with conn.transaction():  # bigger than logical_decoding_work_mem: streamed
            conn.execute("INSERT INTO sp SELECT g, repeat('x', 200) FROM generate_series(1, 2000) g")
            with contextlib.suppress(psycopg.errors.QueryCanceled), conn.transaction():
                conn.execute("ALTER TABLE sp ADD COLUMN gone int")
                conn.execute("INSERT INTO sp VALUES (-1, 'rolled back', 1)")
                raise psycopg.errors.QueryCanceled("roll back to the savepoint")
            conn.execute("INSERT INTO sp SELECT g, 'y' FROM generate_series(2001, 2100) g")
        conn.execute("CREATE TABLE later (id int PRIMARY KEY, label text DEFAULT 'l')")
        conn.execute("INSERT INTO later VALUES (1, 'first')")
        # the capture cannot write: the application's DDL still succeeds, with a WARNING
        conn.execute(f"ALTER TABLE pgfeed.{name}_ddl ADD CONSTRAINT refuse CHECK (false) NOT VALID")
        conn.execute("ALTER TABLE later ADD COLUMN unseen int")
        assert any("could not capture ALTER TABLE" in w for w in warnings), warnings
        conn.execute(f"DROP TABLE pgfeed.{name}_ddl")
        conn.execute("ALTER TABLE later ADD COLUMN unseen2 int")
        assert sum("could not capture ALTER TABLE" in w for w in warnings) == 2, warnings
        conn.execute("INSERT INTO later VALUES (2, 'second', 2, 3)")
    make_served_feed.caught_up(name, pg_dsn)
    base = make_served_feed.service.http_url
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        streamed = conn.execute("SELECT stream_txns FROM pg_stat_replication_slots "
                                "WHERE slot_name = %s", (f"pgfeed_{name}",)).fetchone()
    assert streamed is not None and streamed[0] > 0  # the savepoint's transaction was streamed
    events = _changes(base, name, limit=5000)
    assert len(events) == 2000 + 100 + 3  # the rows, CREATE TABLE later and its two rows
    assert {(e["schema"], e["table"]) for e in events} == {("public", "sp"), ("public", "later")}
    assert -1 not in {e["after"]["id"] for e in events if e["table"] == "sp"}
    create = [e for e in events if e["op"] == "ddl"]
    assert len(create) == 1 and create[0]["ddl"]["command"] == "CREATE TABLE"
    assert create[0]["ddl"]["columns"] == [
        {"attnum": 1, "name": "id", "type": "integer", "type_oid": 23, "not_null": True,
         "default": None, "added": True},
        {"attnum": 2, "name": "label", "type": "text", "type_oid": 25, "not_null": False,
         "default": "'l'::text", "added": True}]
    assert [e["after"] for e in events if e["table"] == "later" and e["op"] == "insert"] == [
        {"id": 1, "label": "first"}, {"id": 2, "label": "second", "unseen": 2, "unseen2": 3}]
    # deleting the feed drops what it installed (the schema it made too)
    make_served_feed.service.supervisor.delete(name)
    make_served_feed.created.remove(name)
    assert _objects(pg_dsn, name) == {"event triggers": [], "functions": [], "tables": [],
                                      "publications": [], "schemas": []}


def test_ddl_capture_needs_a_superuser(make_served_feed: FeedFactory, pg_dsn: str) -> None:
    """Preflight: event triggers need a superuser; nothing is created otherwise."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        role = f"plain_{conn.info.dbname}"  # roles are the cluster's: one per test database
        conn.execute("CREATE TABLE ns (id int PRIMARY KEY)")
        conn.execute(f'CREATE ROLE "{role}" LOGIN REPLICATION')
        conn.execute(f'GRANT ALL ON SCHEMA public TO "{role}"')
        conn.execute(f'ALTER TABLE ns OWNER TO "{role}"')
        conn.execute(f'GRANT CREATE ON DATABASE "{conn.info.dbname}" TO "{role}"')
    params = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    params["user"] = role
    dsn = psycopg.conninfo.make_conninfo(**params)
    base = make_served_feed.service.http_url
    body = {"name": "ddlplain", "dsn": dsn, "tables": ["public.ns"], "options": {"ddl": "capture"}}
    answer = httpx.post(f"{base}/v1/feeds", json=body, timeout=60)
    assert answer.status_code == 422, answer.text
    assert "event triggers need a superuser" in answer.json()["error"]["message"]
    assert _objects(pg_dsn, "ddlplain") == {"event triggers": [], "functions": [], "tables": [],
                                            "publications": [], "schemas": []}
