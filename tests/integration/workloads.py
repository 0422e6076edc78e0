"""Shared SQL workloads for integration tests: schemas, publications and change mixes on a real source.

Each workload names the decoding behaviour it exercises; ``run_all`` plays them in order on one
database, ending with a commit so that everything before it is flushed and decodable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

PUBLICATION = "conf_pub"
# REPLICA IDENTITY NOTHING: publishing its updates/deletes would make them fail on the source.
PUBLICATION_NOTHING = "conf_pub_nothing"
PUBLICATIONS = (PUBLICATION, PUBLICATION_NOTHING)
EVOLVING = {"public.evolving"}  # tables whose columns change during the workloads
NOT_PUBLISHED = {"public.rid_nothing": {"update", "delete"}}  # per table: ops its publication skips

BODY_BYTES = 9000  # > TOAST_TUPLE_THRESHOLD (~2 kB); STORAGE EXTERNAL keeps it out of line, uncompressed
STREAM_ROWS = 1500  # x ~250 B per change: well past logical_decoding_work_mem = 64kB

SCHEMA = f"""
CREATE TABLE rid_default (
  id int PRIMARY KEY, name text, amount numeric, ratio float8, small real, ok bool, data bytea,
  ts timestamptz, tsl timestamp, d date, j jsonb, tags text[], nums int[], u uuid,
  vc varchar(20), big bigint, tiny smallint);
CREATE TABLE rid_full (id int, name text, note text);
ALTER TABLE rid_full REPLICA IDENTITY FULL;
CREATE TABLE rid_nothing (id int, name text);
ALTER TABLE rid_nothing REPLICA IDENTITY NOTHING;
CREATE TABLE rid_index (id int PRIMARY KEY, code text NOT NULL, name text);
CREATE UNIQUE INDEX rid_index_code ON rid_index (code);
ALTER TABLE rid_index REPLICA IDENTITY USING INDEX rid_index_code;
CREATE TABLE toasty (id int PRIMARY KEY, counter int, body text);
ALTER TABLE toasty ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE toasty_full (id int PRIMARY KEY, counter int, body text);
ALTER TABLE toasty_full ALTER COLUMN body SET STORAGE EXTERNAL;
ALTER TABLE toasty_full REPLICA IDENTITY FULL;
CREATE TABLE parent (id serial PRIMARY KEY, name text);
CREATE TABLE child (id serial PRIMARY KEY, parent_id int REFERENCES parent (id));
CREATE TABLE big (id int PRIMARY KEY, payload text);
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE DOMAIN label AS text;
CREATE TYPE pair AS (a int, b text);
CREATE TABLE more_types (
  id posint PRIMARY KEY, m mood, l label, iv interval, t time, tz timetz, ip inet, r int4range,
  na numeric[], fa float8[], ba bytea[], tsa timestamptz[], moods mood[], pr pair, js json,
  c char(3), bits bit(3), money_ money, total int GENERATED ALWAYS AS (id * 2) STORED);
CREATE TABLE evolving (id int PRIMARY KEY, a text);
CREATE TABLE json_edge (id int PRIMARY KEY, js json, jb jsonb);
CREATE PUBLICATION {PUBLICATION} FOR TABLE rid_default, rid_full, rid_index, toasty, toasty_full,
  parent, child, big, more_types, evolving, json_edge;
CREATE PUBLICATION {PUBLICATION_NOTHING} FOR TABLE rid_nothing WITH (publish = 'insert, truncate');
"""

Conn = psycopg.Connection[Any]


@dataclass(frozen=True)
class Workload:
    name: str
    what: str
    run: Callable[[Conn, str], None]  # (autocommit connection, dsn)


def _sql(*statements: str) -> Callable[[Conn, str], None]:
    def run(conn: Conn, dsn: str) -> None:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]
    return run


def _body(seed: str) -> str:
    return (seed * (BODY_BYTES // len(seed) + 1))[:BODY_BYTES]


def _toast(table: str) -> Callable[[Conn, str], None]:
    def run(conn: Conn, dsn: str) -> None:
        ident = sql.Identifier(table)
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 0, %s), (2, 0, %s)").format(ident),
                     (_body("abc"), _body("xyz")))
        conn.execute(sql.SQL("UPDATE {} SET counter = counter + 1 WHERE id = 1").format(ident))
        conn.execute(sql.SQL("UPDATE {} SET body = %s WHERE id = 2").format(ident), (_body("new"),))
        with conn.transaction():  # a row updated in the transaction that inserted it: still 'u'
            conn.execute(sql.SQL("INSERT INTO {} VALUES (3, 0, %s)").format(ident), (_body("q"),))
            conn.execute(sql.SQL("UPDATE {} SET counter = 7 WHERE id = 3").format(ident))
        conn.execute(sql.SQL("UPDATE {} SET body = body WHERE id = 1").format(ident))
        conn.execute(sql.SQL("DELETE FROM {} WHERE id = 2").format(ident))
    return run


def _interleaved(conn: Conn, dsn: str) -> None:
    """Begins first, commits last: commit order, not start order."""
    with psycopg.connect(dsn, autocommit=True) as other:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO rid_full VALUES (50, 'first to start', NULL)")
        other.execute("INSERT INTO rid_full VALUES (51, 'first to commit', 'x')")
        conn.execute("INSERT INTO rid_full VALUES (52, 'first to start', 'y')")
        conn.execute("COMMIT")


def _prepared(conn: Conn, dsn: str) -> None:
    conn.execute("BEGIN")
    conn.execute("INSERT INTO rid_index VALUES (60, 'p-60', 'prepared')")
    conn.execute("UPDATE rid_index SET name = 'prepared and updated' WHERE id = 60")
    conn.execute("PREPARE TRANSACTION 'conf_commit'")
    conn.execute("INSERT INTO rid_index VALUES (61, 'p-61', 'between prepare and commit')")
    conn.execute("COMMIT PREPARED 'conf_commit'")
    conn.execute("BEGIN")
    conn.execute("INSERT INTO rid_index VALUES (62, 'p-62', 'rolled back')")
    conn.execute("PREPARE TRANSACTION 'conf_rollback'")
    conn.execute("ROLLBACK PREPARED 'conf_rollback'")
    conn.execute("BEGIN")  # streamed, then prepared (Stream Prepare on v3+)
    conn.execute(f"INSERT INTO big SELECT g, repeat('p', 200) FROM generate_series(20001, {20000 + STREAM_ROWS}) g")
    conn.execute("PREPARE TRANSACTION 'conf_big'")
    conn.execute("COMMIT PREPARED 'conf_big'")


WORKLOADS: tuple[Workload, ...] = (
    Workload("values", "replica identity DEFAULT; every contract value family, NULLs, specials", _sql(
        """INSERT INTO rid_default VALUES
          (1, 'plain', 1.50, 0.1, 1.5, true, '\\x00ff', '2026-11-22 10:00:00.123456+00',
           '2026-11-22 10:00:00', '2026-11-22', '{"k": [1, 2], "s": "é"}', '{a,"b c",NULL}',
           '{1,NULL,3}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'var', 9007199254740993, -2),
          (2, E'quote '' and \\\\ and\\nnewline', 'NaN', 'NaN', '-0', false, '\\x', 'infinity',
           '-infinity', 'infinity', 'null', '{}', '{{1,2},{3,4}}', NULL, '', -9223372036854775808, 0),
          (3, NULL, '-Infinity', '-Infinity', 'Infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL, NULL),
          (4, 'bc', '123456789012345678901234567890.000000000000000000001', '-0', 3.4e38, true,
           '\\xdeadbeef', '0044-03-15 12:00:00+00 BC', '2000-01-01 00:00:00', '0001-01-01 BC',
           '[1, 2.5, "x"]', '{"{}", "\\\\"}', '{-1}', NULL, 'x', 0, 32767)""",
        "UPDATE rid_default SET name = 'updated', amount = amount + 1 WHERE id = 1",
        "UPDATE rid_default SET id = 100 WHERE id = 2",  # key change: old key in 'key'
        "DELETE FROM rid_default WHERE id = 3",
    )),
    Workload("types", "enums, domains, intervals, times, ranges, composites, arrays, generated", _sql(
        """INSERT INTO more_types (id, m, l, iv, t, tz, ip, r, na, fa, ba, tsa, moods, pr, js, c, bits,
                                   money_) VALUES
          (1, 'happy', 'lbl', '1 year 2 mons 3 days 04:05:06.5', '10:00:00.25', '10:00:00+02',
           '192.168.0.1/24', '[1,10)', '{1.50,NaN,-Infinity}', '{NaN,-0,1.5,1e-320}',
           '{"\\\\x00ff",NULL}', '{"2026-11-22 10:00:00+00",NULL}', '{sad,happy}', '(1,"a b")',
           '{"f": 1.0, "e": 1.5e300, "a": [1, {"b": null}]}', 'ab', B'101', 12.34),
          (2, NULL, '', '-1 days +02:03:04', '24:00:00', '00:00:00-12:30', '::1', 'empty',
           '{}', '{Infinity}', '{}', '{infinity}', '{}', '(,)', '-0.0', 'xyz', B'000', -1),
          (3, 'ok', NULL, '-00:00:00.000001', '23:59:59.999999', NULL, NULL, '(,)', NULL, NULL,
           NULL, '{"294276-12-31 23:59:59+00"}', NULL, NULL, 'null', NULL, NULL, NULL),
          (4, NULL, NULL, '0', '00:00:00.01', NULL, NULL, NULL, '{{1,2},{3,4}}', NULL, NULL, NULL, NULL,
           NULL, '[]', NULL, NULL, NULL)""",
        "UPDATE more_types SET iv = iv * 2, m = 'sad' WHERE id = 1",
        "DELETE FROM more_types WHERE id = 3",
    )),
    Workload("json_edge", "json numbers past float range (json keeps its text; jsonb makes them "
             "numeric)", _sql(
        """INSERT INTO json_edge VALUES (1, '{"big": 1e400, "neg": -1e400}', '{"big": 1e400}'),
                                        (2, '1e400', '1e400'), (3, '[1e-400]', '[1e-400]')""",
    )),
    Workload("schema_change", "columns added and dropped between and inside transactions", _sql(
        "INSERT INTO evolving VALUES (1, 'a')",
        "ALTER TABLE evolving ADD COLUMN b int DEFAULT 5",
        "INSERT INTO evolving VALUES (2, 'b', 6)",
        "BEGIN; UPDATE evolving SET a = 'before drop' WHERE id = 1; ALTER TABLE evolving DROP COLUMN a; "
        "INSERT INTO evolving VALUES (3, 7); ALTER TABLE evolving ADD COLUMN c text; "
        "UPDATE evolving SET c = 'after add' WHERE id = 2; COMMIT",
        "DELETE FROM evolving WHERE id = 1",
    )),
    Workload("full", "replica identity FULL: whole old rows, NULLs in them", _sql(
        "INSERT INTO rid_full VALUES (1, 'one', NULL), (2, 'two', 'note')",
        "UPDATE rid_full SET note = 'set' WHERE id = 1",
        "UPDATE rid_full SET id = 20, name = NULL WHERE id = 2",
        "DELETE FROM rid_full WHERE id = 1",
    )),
    Workload("nothing", "replica identity NOTHING: inserts only (its publication skips the rest)", _sql(
        "INSERT INTO rid_nothing VALUES (1, 'a'), (2, 'b')",
        "UPDATE rid_nothing SET name = 'c' WHERE id = 1",
        "DELETE FROM rid_nothing WHERE id = 2",
    )),
    Workload("index", "replica identity USING INDEX: key is the index columns", _sql(
        "INSERT INTO rid_index VALUES (1, 'c-1', 'one'), (2, 'c-2', 'two')",
        "UPDATE rid_index SET name = 'uno' WHERE id = 1",
        "UPDATE rid_index SET code = 'c-22' WHERE id = 2",
        "DELETE FROM rid_index WHERE id = 1",
    )),
    Workload("toast", "unchanged TOAST ('u') under DEFAULT", _toast("toasty")),
    Workload("toast_full", "unchanged TOAST under FULL (the old image has the value)", _toast("toasty_full")),
    Workload("interleaved", "two transactions interleaved: commit order", _interleaved),
    Workload("truncate", "TRUNCATE with CASCADE, RESTART IDENTITY, several tables", _sql(
        "INSERT INTO parent (name) VALUES ('p1'), ('p2')",
        "INSERT INTO child (parent_id) VALUES (1), (2)",
        "TRUNCATE parent RESTART IDENTITY CASCADE",
        "INSERT INTO parent (name) VALUES ('p3')",
        "TRUNCATE child",
        "BEGIN; INSERT INTO rid_nothing VALUES (9, 'z'); TRUNCATE rid_nothing, child; COMMIT",
    )),
    Workload("messages", "transactional and non-transactional logical messages", _sql(
        "BEGIN; INSERT INTO rid_index VALUES (10, 'c-10', 'with message'); "
        "SELECT pg_logical_emit_message(true, 'conf.tx', E'hello\\nworld é'); COMMIT",
        "SELECT pg_logical_emit_message(true, 'conf.only', 'a transaction of one message')",
        "SELECT pg_logical_emit_message(false, 'conf.nontx', 'outside any transaction')",
        "BEGIN; INSERT INTO rid_index VALUES (11, 'c-11', 'rolled back'); "
        "SELECT pg_logical_emit_message(false, 'conf.survivor', 'survives the rollback'); "
        "SELECT pg_logical_emit_message(true, 'conf.gone', 'rolled back'); ROLLBACK",
    )),
    Workload("streamed", "a transaction past logical_decoding_work_mem, with a rolled-back "
             "savepoint inside", _sql(
        "BEGIN; "
        f"INSERT INTO big SELECT g, repeat('s', 200) FROM generate_series(1, {STREAM_ROWS}) g; "
        "SAVEPOINT sp; "
        f"INSERT INTO big SELECT g, repeat('r', 200) FROM generate_series(5001, {5000 + STREAM_ROWS}) g; "
        "ROLLBACK TO SAVEPOINT sp; "
        "SELECT pg_logical_emit_message(true, 'conf.in_stream', 'inside a streamed transaction'); "
        "UPDATE big SET payload = 'updated' WHERE id <= 10; "
        "DELETE FROM big WHERE id > 1490; "
        "COMMIT",
    )),
    Workload("streamed_abort", "a streamed transaction that aborts: no trace", _sql(
        "BEGIN; "
        f"INSERT INTO big SELECT g, repeat('a', 200) FROM generate_series(10001, {10000 + STREAM_ROWS}) g; "
        "ROLLBACK",
    )),
    Workload("prepared", "two-phase: one committed, one rolled back, one streamed then prepared",
             _prepared),
    Workload("closing", "a last commit: flushes what came before", _sql(
        "INSERT INTO rid_default (id, name) VALUES (999, 'the end')",
    )),
)


def create_schema(conn: Conn) -> None:
    """Tables and publications used by the workloads (in the connection's database)."""
    conn.execute(SCHEMA)  # type: ignore[arg-type]


def run_all(dsn: str, workloads: tuple[Workload, ...] = WORKLOADS) -> None:
    """Play the workloads in order (each statement autocommitted unless it opens a transaction)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for workload in workloads:
            workload.run(conn, dsn)


def server_version(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.info.server_version
