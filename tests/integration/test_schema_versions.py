"""Issue 27.1 and 27.4 through the public surface, on PostgreSQL 15 and 18.

- Every row change names the table version it was decoded with (HTTP ``table_version``, protobuf
  ``Change.table_version``, both clients), across ADD COLUMN, DROP COLUMN, RENAME COLUMN, ALTER
  TYPE and an ALTER TABLE in the middle of a transaction; ``GET …/tables/{table}/schema?at=`` at
  every change's cursor answers that version's columns, with the types PostgreSQL's own
  ``format_type(atttypid, atttypmod)`` gives, and its key columns; ``…/schema/history`` every
  version; unknown tables are 404, bad cursors 400.
- The jsonb/json document ``null`` stays apart from SQL NULL: HTTP (``json_null``), gRPC
  (``json_value`` "null"), both clients (``JSON_NULL``), Debezium (``source.json_null``) and a
  typed Arrow page (the string "null")."""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import psycopg
import pyarrow as pa
import pytest

from pgfeed_client import JSON_NULL, FeedClient, GrpcFeedClient
from pgfeed_proto.v1 import feed_pb2
from tests.fixtures.fix_service import FeedFactory, grpc_changes

pytestmark = pytest.mark.pg

COLUMNS_SQL = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod),
       coalesce(a.attnum = ANY (i.indkey), false)
FROM pg_attribute a LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
WHERE a.attrelid = 'public.sv'::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum"""

# (DDL before the step, rows of the step); each step's rows use a new shape: version = step + 1
STEPS: list[tuple[list[str], list[str]]] = [
    ([], ["INSERT INTO sv VALUES (1, 'a', 10, 1.50, '{\"k\": 1}')",
          "INSERT INTO sv VALUES (2, 'b', 20, 2.25, NULL)"]),
    (["ALTER TABLE sv ADD COLUMN at timestamp(3) with time zone DEFAULT '2026-01-01 00:00:00+00'"],
     ["INSERT INTO sv VALUES (3, 'c', 30, 3.00, NULL, '2026-11-28 10:00:00.123+00')",
      "UPDATE sv SET qty = 11 WHERE id = 1"]),
    (["ALTER TABLE sv DROP COLUMN qty"],
     ["INSERT INTO sv VALUES (4, 'd', 4.00, NULL, now())", "DELETE FROM sv WHERE id = 2"]),
    (["ALTER TABLE sv RENAME COLUMN name TO title"],
     ["INSERT INTO sv VALUES (5, 'e', 5.00, NULL, now())", "UPDATE sv SET title = 'A' WHERE id = 1"]),
    (["ALTER TABLE sv ALTER COLUMN price TYPE numeric(14,3)",
      "ALTER TABLE sv ALTER COLUMN title TYPE varchar(80)"],
     ["INSERT INTO sv VALUES (6, 'f', 6.125, NULL, now())"]),
]


def _columns(conn: psycopg.Connection[Any]) -> list[tuple[str, str, bool]]:
    return [(n, t, bool(k)) for n, t, k in conn.execute(COLUMNS_SQL).fetchall()]


def _schema(base: str, feed: str, at: str | None = None, table: str = "public.sv") -> httpx.Response:
    params = {} if at is None else {"at": at}
    return httpx.get(f"{base}/v1/feeds/{feed}/tables/{table}/schema", params=params, timeout=30)


def test_every_change_names_its_table_version(make_served_feed: FeedFactory, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE sv (id int PRIMARY KEY, name varchar(40), qty int, "
                     "price numeric(12,2), doc jsonb)")
    name = make_served_feed(pg_dsn, tables=("public.sv",))
    expected: list[list[tuple[str, str, bool]]] = []  # per version: PostgreSQL's own columns
    rows_per_version: list[int] = []
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for ddl, rows in STEPS:
            for statement in ddl:
                conn.execute(statement)
            expected.append(_columns(conn))
            for statement in rows:
                conn.execute(statement)
            rows_per_version.append(len(rows))
        # an ALTER TABLE inside a transaction: the change before it and the one after it differ
        with conn.transaction():
            conn.execute("INSERT INTO sv VALUES (7, 'g', 7.000, NULL, now())")
            conn.execute("ALTER TABLE sv ADD COLUMN flag bool")
            conn.execute("INSERT INTO sv VALUES (8, 'h', 8.000, NULL, now(), true)")
        expected.append(_columns(conn))
    rows_per_version[-1] += 1  # id 7 still has version 5's shape
    rows_per_version.append(1)
    make_served_feed.caught_up(name, pg_dsn)
    base = make_served_feed.service.http_url
    want_versions = [v + 1 for v, n in enumerate(rows_per_version) for _ in range(n)]
    assert expected[2][1] == ("name", "character varying(40)", False)
    assert ("at", "timestamp(3) with time zone", False) in expected[1]
    assert ("price", "numeric(14,3)", False) in expected[4]

    # HTTP: each change names the version in force at its position, and has exactly its columns
    page = httpx.get(f"{base}/v1/feeds/{name}/changes", params={"limit": 1000}, timeout=30).json()
    changes = [c for c in page["changes"] if c["op"] in ("insert", "update", "delete")]
    assert [c["table_version"] for c in changes] == want_versions
    for change in changes:
        columns = expected[change["table_version"] - 1]
        if change["op"] != "delete":
            assert list(change["after"]) == [n for n, _, _ in columns]
        # schema?at= the change's cursor: that version, PostgreSQL's types with modifiers, key
        at = f"{change['commit_lsn']}:{change['seq']}"
        answer = _schema(base, name, at)
        assert answer.status_code == 200, answer.text
        schema = answer.json()
        assert schema["version"] == change["table_version"], (at, schema)
        assert [(c["name"], c["type"], c["key"]) for c in schema["columns"]] == columns
        assert schema["key_columns"] == ["id"]
        assert (schema["schema"], schema["table"]) == ("public", "sv")

    # the mid-transaction ALTER: the transaction's whole cursor is the version after it
    last = changes[-1]
    assert last["commit_lsn"] == changes[-2]["commit_lsn"]
    assert _schema(base, name, last["commit_lsn"]).json()["version"] == len(expected)
    assert _schema(base, name).json()["version"] == len(expected)  # at omitted: latest
    history = httpx.get(f"{base}/v1/feeds/{name}/tables/sv/schema/history", timeout=30).json()
    assert [v["version"] for v in history["versions"]] == list(range(1, len(expected) + 1))
    assert [[(c["name"], c["type"], c["key"]) for c in v["columns"]]
            for v in history["versions"]] == expected
    tables = httpx.get(f"{base}/v1/feeds/{name}/tables", timeout=30).json()["tables"]
    assert [v["valid_from"] for v in tables[0]["versions"]] == \
        [v["valid_from"] for v in history["versions"]]
    # errors: unknown table 404, bad cursor 400, a position before the table's first change 404
    unknown = _schema(base, name, table="public.nope")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "table_not_found"
    bad = _schema(base, name, "16/nothex")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_cursor"
    early = _schema(base, name, "earliest")
    assert early.status_code == 404 and early.json()["error"]["code"] == "schema_not_found"
    assert httpx.get(f"{base}/v1/feeds/{name}/tables/nope/schema/history",
                     timeout=30).status_code == 404

    # gRPC: the same version on every change, raw and through the client; and the HTTP client
    service = make_served_feed.service
    raw = [c for c in grpc_changes(service.grpc_target, name, len(page["changes"]))
           if c.op in (feed_pb2.OP_INSERT, feed_pb2.OP_UPDATE, feed_pb2.OP_DELETE)]
    assert [c.table_version for c in raw] == want_versions
    transactions = len({c["commit_lsn"] for c in page["changes"]})
    with GrpcFeedClient(service.grpc_target) as grpc_client:
        txns = list(itertools.islice(grpc_client.subscribe(name), transactions))
    versions = [c.table_version for t in txns for c in t.changes if c.table is not None]
    assert versions[:len(want_versions)] == want_versions
    with FeedClient(base) as client:
        client_changes = list(client.iter_changes(name))
        assert [c.table_version for c in client_changes] == want_versions
        first = client.table_schema(name, "public.sv", at=client_changes[0].cursor)
        assert first.version == 1 and first.key_columns == ("id",)
        assert [(c.name, c.type, c.key) for c in first.columns] == expected[0]


JSON_ROWS = [
    "INSERT INTO jn VALUES (1, 'null', 'null')",  # both documents null
    "INSERT INTO jn VALUES (2, NULL, NULL)",  # SQL NULL
    "INSERT INTO jn VALUES (3, '{\"a\": null}', '[null]')",  # nulls inside documents
    "INSERT INTO jn VALUES (4, 'null', NULL)",
    "UPDATE jn SET jb = '{\"a\": 1}' WHERE id = 1",  # before: the document null, after: not
    "DELETE FROM jn WHERE id = 4",
]


def test_json_null_stays_apart_from_sql_null(make_served_feed: FeedFactory, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE jn (id int PRIMARY KEY, jb jsonb, j json)")
        conn.execute("ALTER TABLE jn REPLICA IDENTITY FULL")
    name = make_served_feed(pg_dsn, tables=("public.jn",))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for statement in JSON_ROWS:
            conn.execute(statement)
    make_served_feed.caught_up(name, pg_dsn)
    service = make_served_feed.service
    base = service.http_url

    # HTTP: the value is null either way; json_null names the document nulls, per image
    events = httpx.get(f"{base}/v1/feeds/{name}/changes", timeout=30).json()["changes"]
    assert [e.get("json_null") for e in events] == [
        # REPLICA IDENTITY FULL: the key is the whole row, so it names them too
        {"key": ["j", "jb"], "after": ["j", "jb"]}, None, None, {"key": ["jb"], "after": ["jb"]},
        {"key": ["j", "jb"], "before": ["j", "jb"], "after": ["j"]},
        {"key": ["jb"], "before": ["jb"]},
    ]
    assert events[0]["after"] == {"id": 1, "jb": None, "j": None}
    assert events[2]["after"] == {"id": 3, "jb": {"a": None}, "j": [None]}

    # the client library: JSON_NULL for the document, None for SQL NULL, on both transports
    def images(changes: list[Any]) -> list[Any]:
        return [(c.op, c.before, c.after, c.json_null) for c in changes]

    with FeedClient(base) as client:
        http_changes = list(client.iter_changes(name))
    with GrpcFeedClient(service.grpc_target) as grpc_client:
        client_changes = [c for t in itertools.islice(grpc_client.subscribe(name), len(JSON_ROWS))
                        for c in t.changes]
    assert images(http_changes) == images(client_changes)
    first, second = http_changes[0].after, http_changes[1].after
    assert first is not None and second is not None
    assert first["jb"] is JSON_NULL and first["j"] is JSON_NULL
    assert second["jb"] is None and second["j"] is None
    before = http_changes[4].before
    assert before is not None and before["jb"] is JSON_NULL
    assert http_changes[4].after == {"id": 1, "jb": {"a": 1}, "j": JSON_NULL}

    # gRPC on the wire: json_value "null" for the document, null_value for SQL NULL
    raw = grpc_changes(service.grpc_target, name, len(JSON_ROWS))
    assert raw[0].after["jb"].WhichOneof("kind") == "json_value"
    assert raw[0].after["jb"].json_value == "null"
    assert raw[1].after["jb"].WhichOneof("kind") == "null_value"

    # Debezium: the values as Debezium's, json_null in the source block
    dbz = httpx.get(f"{base}/v1/feeds/{name}/changes", params={"format": "debezium"},
                    timeout=30).json()["changes"]
    assert dbz[0]["after"]["jb"] is None and dbz[0]["source"]["json_null"] == {"after": ["j", "jb"]}
    assert "json_null" not in dbz[1]["source"]
    assert dbz[5]["op"] == "d" and dbz[5]["source"]["json_null"] == {"before": ["jb"]}
    assert dbz[0]["source"]["table_version"] == 1

    # a typed Arrow page: the string "null" against a null
    body = httpx.get(f"{base}/v1/feeds/{name}/changes",
                     params={"format": "arrow", "tables": "public.jn"}, timeout=30).content
    typed = pa.ipc.open_stream(body).read_all().to_pylist()
    assert [(r["id"], r["jb"], r["j"]) for r in typed[:4]] == [
        (1, "null", "null"), (2, None, None), (3, '{"a": null}', "[null]"), (4, "null", None)]
    # the raw change rows (every table): json_null and table_version as columns
    raw_body = httpx.get(f"{base}/v1/feeds/{name}/changes", params={"format": "arrow"},
                         timeout=30).content
    generic = pa.ipc.open_stream(raw_body).read_all().to_pylist()
    assert generic[0]["json_null"] == '{"key":["j","jb"],"after":["j","jb"]}' and generic[1]["json_null"] is None
    assert {r["table_version"] for r in generic} == {1}


@pytest.mark.spark
@pytest.mark.slow
def test_spark_mirror_keeps_the_json_document_null(live_feed: tuple[str, str, str],
                                                   spark_session: Any) -> None:
    """A typed read (Arrow and JSON wire formats) and its mirror (``latest_rows``) hold the
    string 'null' where the source holds ``'null'::jsonb``, and NULL where it holds NULL."""
    import json
    import time
    import uuid

    from pgfeed_spark import latest_rows

    base, feed, dsn = live_feed
    table = f"jnull_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, jb jsonb, j json)")
        conn.execute(f"INSERT INTO {table} VALUES (1, 'null', 'null'), (2, NULL, NULL), "
                     "(3, '{\"a\": null}', '[null]'), (4, 'null', 'null')")
        conn.execute(f"UPDATE {table} SET j = NULL WHERE id = 1")
        conn.execute(f"UPDATE {table} SET jb = NULL, j = 'null' WHERE id = 2")
        source = {r[0]: (r[1], r[2]) for r in
                  conn.execute(f"SELECT id, jb::text, j::text FROM {table}").fetchall()}
    qualified = f"public.{table}"
    deadline = time.monotonic() + 60
    with FeedClient(base) as client:
        while len(list(client.iter_changes(feed, tables=[qualified]))) < 6:
            assert time.monotonic() < deadline, "changes not captured"
            time.sleep(0.3)

    def document(v: str | None) -> Any:  # None for SQL NULL, the parsed document otherwise
        return None if v is None else ("document", json.loads(v))

    want = {k: (document(a), document(b)) for k, (a, b) in source.items()}
    assert want[1] == (("document", None), None)  # the document null against SQL NULL
    for wire in ("arrow", "json"):
        df = (spark_session.read.format("pgfeed").option("url", base).option("feed", feed)
              .option("table", qualified).option("wireFormat", wire).load())
        mirror = {r["id"]: (r["jb"], r["j"]) for r in latest_rows(df, ["id"]).collect()}
        assert {k: (document(a), document(b)) for k, (a, b) in mirror.items()} == want, wire
        assert mirror[1][0] == "null" and mirror[2][0] is None
