"""The source side of a backfill: describe a table, split it, read a chunk (nothing is written).

Each chunk is one short REPEATABLE READ, READ ONLY transaction that takes no lock stronger than
``ACCESS SHARE`` (taken first, so the columns it describes stay those it reads), reads its
snapshot and the WAL insert position in its first query (``ChunkRead``: what capture judges it
by, ``backfill/window.py``) and reads
``chunk_rows`` rows in key order after the last key read (keyset pagination on the primary key or
replica-identity index), with ``COPY (SELECT …) TO STDOUT`` in text format: each value its
type's output function in the replication session's settings, byte for byte what pgoutput
would send once COPY's escapes are undone. Rows are encoded here as pgoutput Insert messages
(``rows``), off the capture thread.
"""

from __future__ import annotations

import itertools
import json
import re
import select
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as e
from psycopg import pq, sql

from pgfeed.backfill.rows import Rows, copy_text_rows, read_copy
from pgfeed.backfill.schema import _COLUMNS, relation_message, type_message
from pgfeed.errors import BackfillError
from pgfeed.pgoutput.encode import insert_head
from pgfeed.replication import libpq
from pgfeed.replication.connect import conninfo
from pgfeed.types import integer

_FIRST_NORMAL_OID = 16384
_INT_TYPES = frozenset(t.oid for t in integer.FAMILY.types)  # int2, int4, int8

_TABLE = """
SELECT c.oid, c.relreplident, c.relkind, c.reltuples::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s
"""
# How the feed's publications publish the table: per publication listing it, its row filter and
# column list, for the table itself or, when the table is a partition published through an
# ancestor (publish_via_partition_root), for the nearest such ancestor (depth 0: the table).
# A partition's rows are then the ancestor's rows: pgoutput sends them under its relation.
_PUBLISHED = """
WITH tree AS (
    SELECT %(oid)s::oid AS relid, 0 AS depth
    UNION ALL
    SELECT a.relid, a.depth FROM pg_partition_ancestors(%(oid)s) WITH ORDINALITY a(relid, depth)
    WHERE a.relid <> %(oid)s
)
SELECT t.depth, c.oid, n.nspname, c.relname, c.relreplident, {detail}
FROM tree t JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_publication_tables pt ON pt.schemaname = n.nspname AND pt.tablename = c.relname
WHERE pt.pubname = ANY (%(pubs)s)
ORDER BY t.depth, pt.pubname
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
    # The partitioned table (schema, name) whose rows these are, when the table read is one of
    # its partitions published through it (publish_via_partition_root): ``oid``, ``columns``,
    # ``key`` and ``messages`` are then that table's, as the stream names the partition's rows.
    root: tuple[str, str] | None = None

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def published(self) -> tuple[str, str]:
        """(schema, name) of the relation the stream names the rows with."""
        return self.root or (self.schema, self.name)


def publication_list(publication: str | Sequence[str]) -> list[str]:
    return [publication] if isinstance(publication, str) else list(publication)


def effective(entries: Sequence[tuple[str | None, Sequence[str] | None]],
              ) -> tuple[str | None, list[str] | None]:
    """The row filter and column list pgoutput applies to a table several publications list, as
    PostgreSQL combines them (pgoutput.c, and tablesync's initial copy): the filters ORed, none
    when any publication has none; the column lists' union, every column when any has none.
    ``entries``: (filter, columns) per publication; (None, None) when it has neither."""
    filters = list(dict.fromkeys(f for f, _ in entries))
    row_filter = None
    if filters and None not in filters:
        row_filter = filters[0] if len(filters) == 1 else " OR ".join(f"({f})" for f in filters)
    lists = [c for _, c in entries]
    columns = None if not lists or None in lists else \
        list(dict.fromkeys(name for c in lists if c is not None for name in c))
    return row_filter, columns


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
    """A normal (not replication) autocommit connection with the replication session's settings
    (``replication.connect``'s policy). psycopg errors stay psycopg errors: the manager retries."""
    return psycopg.connect(conninfo(dsn, "pgfeed-backfill"), autocommit=True)


def describe(conn: psycopg.Connection, publication: str | Sequence[str], table: str, *,
             estimate: bool = True) -> TablePlan:
    """The table as the feed publishes it; BackfillError when it cannot be backfilled.
    ``publication``: the feed's publication(s); a chunk selects what pgoutput sends for them
    (``effective``). A partition published through its root describes the root (``root``).
    ``estimate=False`` leaves ``reltuples`` as pg_class has it (no count of a fresh table)."""
    schema, name = split_name(table)
    pubs = publication_list(publication)
    row = conn.execute(_TABLE, (schema, name)).fetchone()
    if row is None:
        raise BackfillError(f"table {schema}.{name} does not exist on the source", status=404,
                            code="table_not_found")
    read_oid, _, relkind, reltuples = row
    modern = conn.info.server_version >= 150000
    found = conn.execute(sql.SQL(_PUBLISHED.format(
        detail="pt.rowfilter, pt.attnames" if modern else "NULL::text, NULL::text[]")),
        {"oid": read_oid, "pubs": pubs}).fetchall()
    if not found:
        names = ", ".join(repr(p) for p in pubs)
        raise BackfillError(f"table {schema}.{name} is not in the feed's publication {names}: "
                            "add it first (set-tables)", code="table_not_published")
    depth, oid, root_schema, root_name, ident = found[0][:5]
    row_filter, attnames = effective([(r[5], r[6]) for r in found if r[0] == depth])
    root = (root_schema, root_name) if depth else None
    if ident == "n":
        raise BackfillError(f"table {schema}.{name} has REPLICA IDENTITY NOTHING: its deletes "
                            "carry no key, so a backfill could not tell which rows they remove")
    key = tuple(r[0] for r in conn.execute(_KEY, (oid, ident)).fetchall())
    if not key:
        raise BackfillError(
            f"table {schema}.{name} has no primary key (nor a replica identity index): a backfill "
            "reads in key-ordered chunks and leaves out of each chunk the rows the stream changed "
            "while it was read, by key, and a reader applies a read as an upsert by key; without "
            "a key neither can be exact (reading the whole table in one long snapshot instead "
            "would hold back vacuum for as long). Add a primary key (ALTER TABLE ... ADD PRIMARY "
            "KEY), or a unique index on NOT NULL columns and ALTER TABLE ... REPLICA IDENTITY "
            "USING INDEX ..., then start the backfill again", code="table_without_key")
    rows = conn.execute(_COLUMNS, (oid, attnames, attnames)).fetchall()
    columns = tuple(r[0] for r in rows)
    missing = [k for k in key if k not in columns]
    if missing:
        raise BackfillError(f"table {schema}.{name}: key column {missing[0]!r} is not published "
                            "(the publication's column list leaves it out)")
    types = {r[0]: r[1] for r in rows}
    user_types = dict.fromkeys((t, ns, tn) for _, t, _, _, ns, tn in rows if t >= _FIRST_NORMAL_OID)
    from pgfeed.backfill.schema import PublishedTable
    published_table = PublishedTable(oid, root_schema, root_name, ident,
                                     tuple((n, t, m, bool(k)) for n, t, m, k, _, _ in rows),
                                     tuple(user_types), row_filter)
    messages = tuple(type_message(*t) for t in user_types) + (relation_message(published_table),)
    return TablePlan(oid, schema, name, columns, key, tuple(columns.index(k) for k in key),
                     tuple(types[k] for k in key), messages, row_filter,
                     _estimate(conn, read_oid, relkind, int(reltuples)) if estimate
                     else int(reltuples), root)


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


SPLIT_SAMPLE_ROWS = 2_000  # keys sampled to cut a table with a non-integer key into parts


def split(conn: psycopg.Connection, plan: TablePlan, parts: int,
          chunk_rows: int) -> list[tuple[str | None, str | None]]:
    """Key ranges ``(lower exclusive, upper inclusive)`` (JSON key lists, None: open) that cut the
    table into up to ``parts`` of about equal size: even cuts of an integer key's span; for other
    keys (text, uuid, composite), quantiles of a sample of the keys in the key's own order. One
    range for small tables."""
    if parts < 2 or plan.reltuples < 2 * chunk_rows:
        return [(None, None)]
    table = sql.Identifier(plan.schema, plan.name)
    if len(plan.key) == 1 and plan.key_types[0] in _INT_TYPES:
        column = sql.Identifier(plan.key[0])
        low, high = conn.execute(sql.SQL("SELECT min({c}), max({c}) FROM {t}").format(
            c=column, t=table)).fetchone() or (None, None)
        if low is None or high - low < parts:
            return [(None, None)]
        cuts = [[str(low + (high - low) * i // parts)] for i in range(1, parts)]
    else:
        cuts = _sampled_cuts(conn, plan, parts)
    bounds: list[str | None] = [None, *(json.dumps(c) for c in cuts), None]
    return list(itertools.pairwise(bounds))


def _sampled_cuts(conn: psycopg.Connection, plan: TablePlan, parts: int) -> list[list[str]]:
    """Cut keys at the quantiles of a block sample (``TABLESAMPLE SYSTEM``: reads about
    SPLIT_SAMPLE_ROWS rows' worth of pages, not the table), sorted by the key's own ordering
    (its collation, its type's comparison) so the cuts split the ranges keyset pagination reads."""
    percent = min(100.0, 100.0 * SPLIT_SAMPLE_ROWS / max(1, plan.reltuples))
    keys = sql.SQL(", ").join(sql.Identifier(k) for k in plan.key)
    texts = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(k)) for k in plan.key)
    # ORDER BY the sample's columns qualified: bare names would be the ::text output columns
    order = sql.SQL(", ").join(sql.Identifier("s", k) for k in plan.key)
    rows = conn.execute(sql.SQL("SELECT {texts} FROM (SELECT {keys} FROM {t} TABLESAMPLE SYSTEM "
                                "({p})) s ORDER BY {order}").format(
        texts=texts, keys=keys, t=sql.Identifier(plan.schema, plan.name),
        p=sql.Literal(percent), order=order)).fetchall()
    cuts: list[list[str]] = []
    for i in range(1, parts):
        if len(rows) < parts:
            break
        cut = list(rows[len(rows) * i // parts])
        if None in cut or (cuts and cut == cuts[-1]):
            continue
        cuts.append(cut)
    return cuts


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
    rows: Rows
    xmax: int  # the chunk's snapshot: xmax and in-progress xids (32-bit), ...
    xip: set[int]
    lsn: int  # ... and the WAL insert position read after it was taken
    last_key: list[str] | None  # key of the last row read (None when no rows)
    exhausted: bool  # fewer rows than asked: the range has no more
    fingerprint: str | None = None  # digest of the catalog rows the plan was read from


# Everything ``describe`` reads that can change under a running backfill, as one digest: a chunk
# compares it instead of describing again. The chunk's first query, so it also reads the snapshot
# (taken at its start: xmax, in-progress xids) and then the WAL insert position, which is at or
# after the end of the commit record of every transaction the snapshot sees.
_FINGERPRINT = """
SELECT md5(concat_ws('|',
    (SELECT string_agg(concat_ws(':', attnum, attname, atttypid, atttypmod, attisdropped,
                                 attgenerated), ',' ORDER BY attnum)
     FROM pg_attribute WHERE attrelid = %(oid)s AND attnum > 0),
    (SELECT concat_ws(':', relreplident, relkind, relname, relnamespace) FROM pg_class
     WHERE oid = %(oid)s),
    (SELECT string_agg(concat_ws(':', indexrelid, indkey::text, indisprimary, indisreplident),
                       ',' ORDER BY indexrelid) FROM pg_index WHERE indrelid = %(oid)s),
    (SELECT string_agg({published}, ',' ORDER BY pubname) FROM pg_publication_tables
     WHERE pubname = ANY (%(pubs)s) AND schemaname = %(schema)s AND tablename = %(name)s),
    (SELECT string_agg(a.relid::text, ',') FROM pg_class c
     JOIN pg_namespace n ON n.oid = c.relnamespace, pg_partition_ancestors(c.oid) a
     WHERE n.nspname = %(read_schema)s AND c.relname = %(read_name)s))),
    pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
    ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(pg_current_snapshot()) x),
    (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
          ELSE pg_current_wal_insert_lsn() END - '0/0')::bigint
"""
# Before a chunk's snapshot is taken (autocommit): the oldest xid still running (the chunk's
# floor: no xid its snapshot cannot see is older) and, on a standby, the running transactions.
# A standby's pg_current_snapshot() lists none in progress (recovery keeps them in the snapshot's
# subxip, which it does not report), so a chunk there is judged by these instead: a transaction
# older than this xmax and not running now ended before the chunk's snapshot, which sees it; one
# running now, or from xmax on, may or may not be seen, and is taken for one it does not see (its
# keys are left out of the chunk: always safe, the stream carries their changes, at the cost of
# rows read for nothing). The commit log is read per xid between xmin and xmax.
_RUNNING = """
SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint,
       CASE WHEN %(standby)s THEN ARRAY(
           SELECT g FROM generate_series(pg_snapshot_xmin(s)::text::bigint,
                                         pg_snapshot_xmax(s)::text::bigint - 1) g
           WHERE pg_xact_status(g::text::xid8) = 'in progress') END
FROM pg_current_snapshot() s
"""


@dataclass(frozen=True, slots=True)
class Running:
    """Read before a chunk's snapshot (``running``): ``floor``, its xmin (32-bit); on a standby,
    ``judge_by``: the xmax and running xids (32-bit) to judge the chunk by."""

    floor: int
    judge_by: tuple[int, frozenset[int]] | None = None


def in_recovery(conn: psycopg.Connection) -> bool:
    """The source is a standby (PostgreSQL 16+ decodes there): chunks are judged by ``running``."""
    row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
    return bool(row and row[0])


def running(conn: psycopg.Connection, standby: bool) -> Running:
    """What is running just before a chunk's snapshot is taken (``_RUNNING``)."""
    row = conn.execute(_RUNNING, {"standby": standby}).fetchone()
    assert row is not None
    floor = int(row[0]) & 0xFFFFFFFF
    if not standby:
        return Running(floor)
    return Running(floor, (int(row[1]) & 0xFFFFFFFF, frozenset(int(x) & 0xFFFFFFFF for x in row[2])))


def read_chunk(conn: psycopg.Connection, publication: str | Sequence[str], table: str,
               after: list[str] | None, upper: list[str] | None, limit: int,
               known: TablePlan | None = None, fingerprint: str | None = None,
               judge_by: tuple[int, frozenset[int]] | None = None) -> ChunkRead:
    """One chunk: rows with key > ``after`` and <= ``upper``, in key order, at most ``limit``.
    ``known``/``fingerprint``: the plan of the previous chunk and its catalog digest, reused
    when the digest is the same (``ChunkRead.fingerprint`` is this chunk's). ``judge_by``: on a
    standby, the xmax and running xids read before (``running``) instead of the snapshot's."""
    schema, name = split_name(table)
    pubs = publication_list(publication)
    published = ("concat_ws(':', pubname, rowfilter, attnames::text)"
                 if conn.info.server_version >= 150000 else "pubname::text")
    query = sql.SQL(_FINGERPRINT.format(published=published))

    def digest_of(plan: TablePlan | None) -> tuple[Any, ...] | None:
        # the published relation (a partition's root) and the ancestors of the table read
        pub_schema, pub_name = plan.published if plan is not None else (schema, name)
        return conn.execute(query, {"oid": plan.oid if plan is not None else 0, "pubs": pubs,
                                    "schema": pub_schema, "name": pub_name,
                                    "read_schema": schema, "read_name": name}).fetchone()

    with conn.transaction():
        # one round trip: isolation, lock timeout and the lock (taken first: the columns the
        # chunk describes stay the columns it reads)
        conn.execute(sql.SQL("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY; "
                             "SET LOCAL lock_timeout = '10s'; LOCK TABLE {} IN ACCESS SHARE MODE")
                     .format(sql.Identifier(schema, name)))
        row = digest_of(known)
        assert row is not None
        digest, xmax, xids, lsn = row
        xip = {int(x) & 0xFFFFFFFF for x in xids}
        plan = known
        if plan is None or digest != fingerprint:
            plan = describe(conn, pubs, table, estimate=False)
            again = digest_of(plan)
            digest = again[0] if again else None
        text = copy_out(conn, _chunk_query(plan, after, upper, limit))
    rows = copy_text_rows(text, insert_head(plan.oid, len(plan.columns)), plan.key_index)
    last_key = [v.decode() for v in rows.key(len(rows) - 1)] if len(rows) else None
    if judge_by is not None:
        xmax, xip = judge_by[0], set(judge_by[1])
    return ChunkRead(plan, rows, int(xmax) & 0xFFFFFFFF, xip, int(lsn), last_key,
                     len(rows) < limit, digest)


def copy_out(conn: psycopg.Connection, query: sql.Composable, *, native: bool = True) -> bytes:
    """Run a ``COPY … TO STDOUT`` and return its data (every CopyData message, back to back),
    with libpq's calls in a plain loop: psycopg's ``Copy`` iterator spends ~7 µs of Python a
    message (PostgreSQL sends one a row), more than the rest of a chunk's work together
    (bench/RESULTS.md, Backfill). ``native``: the loop in C when it can be (``_read_copy``).
    Errors are psycopg's own."""
    pg = conn.pgconn
    encoding = conn.info.encoding
    text = b""
    with conn.lock:
        pg.send_query(query.as_bytes(conn))
        error: psycopg.Error | None = None
        result = _result(pg)
        if result is None or result.status != pq.ExecStatus.COPY_OUT:
            error = e.error_from_result(result, encoding=encoding) if result is not None else \
                psycopg.OperationalError("COPY did not start")
        else:
            text = _read_copy(pg, encoding, native)
        while (result := _result(pg)) is not None:  # the COPY's own result, then none
            if result.status != pq.ExecStatus.COMMAND_OK and error is None:
                error = e.error_from_result(result, encoding=encoding)
    if error is not None:
        raise error
    return text


def _read_copy(pg: pq.abc.PGconn, encoding: str, native: bool) -> bytes:
    """The data of the COPY in progress on ``pg``: with ``_rows.read_copy`` (libpq's calls in C,
    the GIL released: ~0.35 µs of Python a row less, and the other chunk reader runs meanwhile)
    when the libpq psycopg uses is known, else psycopg's calls in a Python loop that waits for
    the socket with the GIL released."""
    functions = libpq.functions() if native and read_copy is not None else None
    address = getattr(pg, "pgconn_ptr", None)  # PGconn *: both psycopg implementations have it
    if read_copy is not None and functions is not None and address:
        status, data = read_copy(address, functions.get_copy_data, functions.freemem)
        if status == -2:
            raise psycopg.OperationalError(pg.get_error_message(encoding))
        return bytes(data)
    text = bytearray()
    get, consume, fd = pg.get_copy_data, pg.consume_input, pg.socket
    while True:
        n, chunk = get(1)
        if n > 0:
            text += chunk
        elif n == 0:
            select.select([fd], [], [])
            consume()
        elif n == -1:
            return bytes(text)
        else:
            raise psycopg.OperationalError(pg.get_error_message(encoding))


def _result(pg: pq.abc.PGconn) -> pq.abc.PGresult | None:
    while True:
        pg.consume_input()
        if not pg.is_busy():
            return pg.get_result()
        select.select([pg.socket], [], [])


def _chunk_query(plan: TablePlan, after: list[str] | None, upper: list[str] | None,
                 limit: int) -> sql.Composed:
    """COPY (text format) of the chunk's published columns: each value its type's output
    function, in the session's settings, as pgoutput sends it (a ``::text`` cast is not always
    that: ``true::text`` is ``true`` where pgoutput sends ``t``; ``inet`` and ``char(n)`` differ
    too). ``rows.copy_text_rows`` turns a row into an Insert message."""
    columns = sql.SQL(", ").join(sql.Identifier(c) for c in plan.columns)
    key = sql.SQL(", ").join(sql.Identifier(k) for k in plan.key)
    conditions: list[sql.Composable] = []
    if plan.row_filter:
        # the publication's own WHERE clause as the server printed it (pg_get_expr), not input
        conditions.append(sql.SQL("({})").format(sql.SQL(plan.row_filter)))
    row = key if len(plan.key) == 1 else sql.SQL("ROW({})").format(key)
    if after is not None:
        conditions.append(sql.SQL("{} > {}").format(row, _literals(after)))
    if upper is not None:
        conditions.append(sql.SQL("{} <= {}").format(row, _literals(upper)))
    where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("")
    order = sql.SQL(", ").join(sql.Identifier(plan.schema, plan.name, k) for k in plan.key)
    return sql.SQL("COPY (SELECT {} FROM {}{} ORDER BY {} LIMIT {}) TO STDOUT").format(
        columns, sql.Identifier(plan.schema, plan.name), where, order, sql.Literal(limit))


def _literals(values: list[str]) -> sql.Composable:
    if len(values) == 1:
        return sql.Literal(values[0])
    return sql.SQL("ROW({})").format(sql.SQL(", ").join(sql.Literal(v) for v in values))
