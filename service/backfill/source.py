"""The source side of a backfill: describe a table, split it, write watermarks, read a chunk.

Each chunk is one short REPEATABLE READ transaction that takes no lock stronger than
``ACCESS SHARE`` (taken first, so the columns it describes stay those it reads) and reads
``chunk_rows`` rows in key order after the last key read (keyset pagination on the primary key or
replica-identity index), with ``COPY (SELECT col::text …) TO STDOUT (FORMAT binary)``: each value
in PostgreSQL's text output in the replication session's settings, byte for byte what pgoutput
would send. Rows are encoded here as pgoutput Insert messages (``rows``), off the capture thread.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from service.backfill.rows import copy_rows
from service.backfill.schema import _COLUMNS, relation_message, type_message
from service.backfill.window import Entry
from service.errors import BackfillError
from service.pgoutput.encode import insert_head
from service.replication.session import connection_options

WATERMARK_PREFIX = "pgfeed.watermark"
_FIRST_NORMAL_OID = 16384
_INT_TYPES = frozenset({20, 21, 23})

_TABLE = """
SELECT c.oid, c.relreplident, c.relkind, c.reltuples::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s
"""
_PUBLISHED = """
SELECT {row_filter} FROM pg_publication_tables pt
WHERE pt.pubname = %s AND pt.schemaname = %s AND pt.tablename = %s
"""
# The columns keyset pagination orders by: the replica identity index (REPLICA IDENTITY USING
# INDEX), else the primary key.
_KEY = """
SELECT a.attname FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
WHERE i.indrelid = %s AND CASE WHEN %s = 'i' THEN i.indisreplident ELSE i.indisprimary END
ORDER BY array_position(i.indkey::int2[], a.attnum)
"""


@dataclass(frozen=True, slots=True)
class TablePlan:
    """What reading one table needs, as of one catalog read."""

    oid: int
    schema: str
    name: str
    columns: tuple[str, ...]  # as pgoutput sends them (published, not generated, not dropped)
    key: tuple[str, ...]
    key_index: tuple[int, ...]  # positions of the key columns in ``columns``
    key_types: tuple[int, ...]
    messages: tuple[bytes, ...]  # Type messages, then the Relation message
    row_filter: str | None
    reltuples: int

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"


_NAME = re.compile(r'(?:("(?:[^"]|"")*"|[^."]+)\.)?("(?:[^"]|"")*"|[^."]+)')


def split_name(table: str) -> tuple[str, str]:
    """``"schema.table"`` (or ``"table"``: public) -> parts; double quotes allow dots in names."""
    match = _NAME.fullmatch(table.strip())
    if not match:
        raise BackfillError(f"table {table!r}: expected schema.table")
    schema, name = match.group(1) or "public", match.group(2)
    return _unquote(schema), _unquote(name)


def _unquote(part: str) -> str:
    return part[1:-1].replace('""', '"') if part.startswith('"') else part


def connect(dsn: str) -> psycopg.Connection:
    """A normal (not replication) autocommit connection with the replication session's settings."""
    params = conninfo_to_dict(dsn)
    # synchronous_commit on: a watermark's commit flushes WAL, so the stream gets it at once
    # (FIELD-NOTES: with it off, decoding waits for a later flush)
    options = connection_options(params.get("options")) + " -c synchronous_commit=on"
    extra: dict[str, str | int] = {"options": options}
    if "connect_timeout" not in params:
        extra["connect_timeout"] = 10
    if "application_name" not in params:
        extra["application_name"] = "pgfeed-backfill"
    return psycopg.connect(make_conninfo(dsn, **extra), autocommit=True)


def describe(conn: psycopg.Connection, publication: str, table: str, *,
             estimate: bool = True) -> TablePlan:
    """The table as the feed publishes it; BackfillError when it cannot be backfilled.
    ``estimate=False`` leaves ``reltuples`` as pg_class has it (no count of a fresh table)."""
    schema, name = split_name(table)
    row = conn.execute(_TABLE, (schema, name)).fetchone()
    if row is None:
        raise BackfillError(f"table {schema}.{name} does not exist on the source", status=404,
                            code="table_not_found")
    oid, ident, relkind, reltuples = row
    modern = conn.info.server_version >= 150000
    published = conn.execute(sql.SQL(_PUBLISHED.format(  # type: ignore[arg-type]
        row_filter="pt.rowfilter, pt.attnames" if modern else "NULL::text, NULL::text[]")),
        (publication, schema, name)).fetchone()
    if published is None:
        raise BackfillError(f"table {schema}.{name} is not in the feed's publication "
                            f"{publication!r}: add it first (set-tables)", code="table_not_published")
    row_filter, attnames = published
    if ident == "n":
        raise BackfillError(f"table {schema}.{name} has REPLICA IDENTITY NOTHING: its deletes "
                            "carry no key, so a backfill could not tell which rows they remove")
    key = tuple(r[0] for r in conn.execute(_KEY, (oid, ident)).fetchall())
    if not key:
        raise BackfillError(f"table {schema}.{name} has no primary key (nor a replica identity "
                            "index): a backfill reads in key order and needs one")
    rows = conn.execute(_COLUMNS, (oid, attnames, attnames)).fetchall()
    columns = tuple(r[0] for r in rows)
    missing = [k for k in key if k not in columns]
    if missing:
        raise BackfillError(f"table {schema}.{name}: key column {missing[0]!r} is not published "
                            "(the publication's column list leaves it out)")
    types = {r[0]: r[1] for r in rows}
    user_types = dict.fromkeys((t, ns, tn) for _, t, _, _, ns, tn in rows if t >= _FIRST_NORMAL_OID)
    from service.backfill.schema import PublishedTable
    published_table = PublishedTable(oid, schema, name, ident,
                                     tuple((n, t, m, bool(k)) for n, t, m, k, _, _ in rows),
                                     tuple(user_types), row_filter)
    messages = tuple(type_message(*t) for t in user_types) + (relation_message(published_table),)
    return TablePlan(oid, schema, name, columns, key, tuple(columns.index(k) for k in key),
                     tuple(types[k] for k in key), messages, row_filter,
                     _estimate(conn, oid, relkind, int(reltuples)) if estimate else int(reltuples))


_SMALL = 64 << 20  # a table smaller than this is counted when it was never analyzed


def _estimate(conn: psycopg.Connection, oid: int, relkind: str, reltuples: int) -> int:
    """Rows in the table, estimated: pg_class.reltuples (of its leaves when partitioned); a table
    never analyzed (-1 on PostgreSQL 14+) is counted when small, else guessed from its size."""
    row = conn.execute("SELECT COALESCE(sum(GREATEST(c.reltuples, 0)), 0)::bigint, "
                       "COALESCE(sum(pg_relation_size(c.oid)), 0)::bigint FROM pg_partition_tree(%s) t "
                       "JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf", (oid,)).fetchone()
    known, size = (int(row[0]), int(row[1])) if row else (0, 0)
    if known > 0:
        return known
    if size >= _SMALL:
        return size // 100
    count = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
        sql.SQL("{}.{}").format(*(sql.Identifier(p) for p in _names(conn, oid))))).fetchone()
    return int(count[0]) if count else 0


def _names(conn: psycopg.Connection, oid: int) -> tuple[str, str]:
    row = conn.execute("SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON "
                       "n.oid = c.relnamespace WHERE c.oid = %s", (oid,)).fetchone()
    assert row is not None
    return row[0], row[1]


def split(conn: psycopg.Connection, plan: TablePlan, parts: int,
          chunk_rows: int) -> list[tuple[str | None, str | None]]:
    """Key ranges ``(lower exclusive, upper inclusive)`` (JSON key lists, None: open) that cut the
    table into up to ``parts`` of about equal size: even cuts of an integer key's span; one range
    for other keys or small tables."""
    if parts < 2 or len(plan.key) != 1 or plan.key_types[0] not in _INT_TYPES \
            or plan.reltuples < 2 * chunk_rows:
        return [(None, None)]
    column = sql.Identifier(plan.key[0])
    low, high = conn.execute(sql.SQL("SELECT min({c}), max({c}) FROM {t}").format(
        c=column, t=sql.Identifier(plan.schema, plan.name))).fetchone() or (None, None)
    if low is None or high - low < parts:
        return [(None, None)]
    cuts = [low + (high - low) * i // parts for i in range(1, parts)]
    bounds: list[str | None] = [None, *(json.dumps([str(c)]) for c in cuts), None]
    return list(itertools.pairwise(bounds))


def emit_watermark(conn: psycopg.Connection, token: str, kind: str) -> int:
    """Write a watermark in a transaction of its own (its commit flushes WAL, so the stream gets
    it at once). Returns the snapshot xmin (32-bit) of that statement: no snapshot taken later
    has an older one."""
    content = json.dumps({"t": token, "k": kind})
    row = conn.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint, "
                       "pg_logical_emit_message(true, %s, %s)",
                       (WATERMARK_PREFIX, content)).fetchone()
    assert row is not None
    return int(row[0]) & 0xFFFFFFFF


def in_progress(conn: psycopg.Connection) -> tuple[set[int], set[int]]:
    """The xids (32-bit) in progress now, and those of them already committed in the commit log
    (a commit record written, the transaction not yet gone from the proc array)."""
    xids = {int(r[0]) for r in conn.execute(
        "SELECT pg_snapshot_xip(pg_current_snapshot())::text::bigint").fetchall()}
    committed = {int(r[0]) for r in conn.execute(
        "SELECT x FROM unnest(%s::bigint[]) x WHERE pg_xact_status(x::text::xid8) = 'committed'",
        (sorted(xids),)).fetchall()} if xids else set()
    return {x & 0xFFFFFFFF for x in xids}, {x & 0xFFFFFFFF for x in committed}


@dataclass(slots=True)
class ChunkRead:
    plan: TablePlan
    entries: list[Entry]
    xip: set[int]
    last_key: list[str] | None  # key of the last row read (None when no rows)
    exhausted: bool  # fewer rows than asked: the range has no more
    fingerprint: str | None = None  # digest of the catalog rows the plan was read from


# Everything ``describe`` reads that can change under a running backfill, as one digest: a chunk
# compares it (one query, with its snapshot's in-progress xids) instead of describing again.
_FINGERPRINT = """
SELECT md5(concat_ws('|',
    (SELECT string_agg(concat_ws(':', attnum, attname, atttypid, atttypmod, attisdropped,
                                 attgenerated), ',' ORDER BY attnum)
     FROM pg_attribute WHERE attrelid = %(oid)s AND attnum > 0),
    (SELECT concat_ws(':', relreplident, relkind, relname, relnamespace) FROM pg_class
     WHERE oid = %(oid)s),
    (SELECT string_agg(concat_ws(':', indexrelid, indkey::text, indisprimary, indisreplident),
                       ',' ORDER BY indexrelid) FROM pg_index WHERE indrelid = %(oid)s),
    (SELECT string_agg({published}, ',') FROM pg_publication_tables
     WHERE pubname = %(pub)s AND schemaname = %(schema)s AND tablename = %(name)s))),
    ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(pg_current_snapshot()) x)
"""


def read_chunk(conn: psycopg.Connection, publication: str, table: str, after: list[str] | None,
               upper: list[str] | None, limit: int, known: TablePlan | None = None,
               fingerprint: str | None = None) -> ChunkRead:
    """One chunk: rows with key > ``after`` and <= ``upper``, in key order, at most ``limit``.
    ``known``/``fingerprint``: the plan of the previous chunk and its catalog digest, reused
    when the digest is the same (``ChunkRead.fingerprint`` is this chunk's)."""
    schema, name = split_name(table)
    published = ("concat_ws(':', rowfilter, attnames::text)" if conn.info.server_version >= 150000
                 else "tablename::text")
    with conn.transaction():
        # one round trip: isolation, lock timeout and the lock (taken first: the columns the
        # chunk describes stay the columns it reads)
        conn.execute(sql.SQL("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY; "
                             "SET LOCAL lock_timeout = '10s'; LOCK TABLE {} IN ACCESS SHARE MODE")
                     .format(sql.Identifier(schema, name)))
        oid = known.oid if known is not None else 0
        row = conn.execute(sql.SQL(_FINGERPRINT.format(published=published)),  # type: ignore[arg-type]
                           {"oid": oid, "pub": publication, "schema": schema, "name": name}).fetchone()
        assert row is not None
        digest, xids = row
        xip = {int(x) & 0xFFFFFFFF for x in xids}
        plan = known
        if plan is None or digest != fingerprint:
            plan = describe(conn, publication, table, estimate=False)
            again = conn.execute(sql.SQL(_FINGERPRINT.format(published=published)),  # type: ignore[arg-type]
                                 {"oid": plan.oid, "pub": publication, "schema": schema,
                                  "name": name}).fetchone()
            digest = again[0] if again else None
        header = insert_head(plan.oid, len(plan.columns))
        nkeys = len(plan.key)
        entries: list[Entry] = []
        with conn.cursor().copy(_chunk_query(plan, after, upper, limit)) as copy:
            for block in copy:
                copy_rows(block, header, nkeys, entries)
    last_key = None if not entries else [v.decode() for v in entries[-1][0]]
    return ChunkRead(plan, entries, xip, last_key, len(entries) < limit, digest)


def _chunk_query(plan: TablePlan, after: list[str] | None, upper: list[str] | None,
                 limit: int) -> sql.Composed:
    """COPY BINARY of the chunk's key columns then every published column, each as its text
    output (``rows.copy_rows`` turns a tuple into an Insert message)."""
    texts = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c))
                               for c in (*plan.key, *plan.columns))
    key = sql.SQL(", ").join(sql.Identifier(k) for k in plan.key)
    conditions: list[sql.Composable] = []
    if plan.row_filter:
        # the publication's own WHERE clause as the server printed it (pg_get_expr), not input
        conditions.append(sql.SQL("({})").format(sql.SQL(plan.row_filter)))  # type: ignore[arg-type]
    row = key if len(plan.key) == 1 else sql.SQL("ROW({})").format(key)
    if after is not None:
        conditions.append(sql.SQL("{} > {}").format(row, _literals(after)))
    if upper is not None:
        conditions.append(sql.SQL("{} <= {}").format(row, _literals(upper)))
    where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("")
    # ORDER BY names the table's columns qualified: bare, ``id`` would be the output column
    # ``id::text`` (SQL resolves ORDER BY names to output columns first) and sort as text.
    order = sql.SQL(", ").join(sql.Identifier(plan.schema, plan.name, k) for k in plan.key)
    return sql.SQL("COPY (SELECT {} FROM {}{} ORDER BY {} LIMIT {}) TO STDOUT (FORMAT binary)").format(
        texts, sql.Identifier(plan.schema, plan.name), where, order, sql.Literal(limit))


def _literals(values: list[str]) -> sql.Composable:
    if len(values) == 1:
        return sql.Literal(values[0])
    return sql.SQL("ROW({})").format(sql.SQL(", ").join(sql.Literal(v) for v in values))
