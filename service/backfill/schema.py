"""A published table as pgoutput describes it: its columns (what pgoutput sends) and the Relation,
Type and Insert messages a backfill stores its rows as, encoded the way PostgreSQL's proto.c
writes them, so readers, filters, Arrow and Spark decode them like streamed rows.

(Until 2026-11-24 this was ``replication/snapshot.py``, the exported-snapshot initial load; the
feed option ``snapshot`` now runs a backfill instead.)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import psycopg
from psycopg import sql

from service.assembler.model import FRAME, StoredTransaction

SNAPSHOT_ORIGIN = "pgfeed.snapshot"
PG_EPOCH_UNIX = 946_684_800
_MAX_LSN = (1 << 63) - 1  # beyond any position; SQLite integers are signed 64-bit

_FIRST_NORMAL_OID = 16384  # FirstNormalObjectId: OIDs below are built in
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class PublishedTable:
    oid: int
    schema: str
    name: str
    replica_identity: str  # 'd', 'n', 'f' or 'i', as pg_class.relreplident
    columns: tuple[tuple[str, int, int, bool], ...]  # name, type oid, typmod, part of the key
    user_types: tuple[tuple[int, str, str], ...]  # oid, schema, name of non-built-in column types
    row_filter: str | None  # PostgreSQL 15+ publication WHERE clause, as pg_get_expr prints it


# Columns as pgoutput sends them: not dropped, not generated (PostgreSQL < 18 never publishes
# generated columns), within the publication's column list (pg_publication_tables.attnames,
# PostgreSQL 15+); key flags per logicalrep_write_attrs in proto.c (every column under FULL,
# the replica identity index's columns otherwise).
_TABLES = """
SELECT c.oid, pt.schemaname, pt.tablename, c.relreplident, {row_filter}
FROM pg_publication_tables pt
JOIN pg_namespace n ON n.nspname = pt.schemaname
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
WHERE pt.pubname = %s
ORDER BY pt.schemaname, pt.tablename
"""

_COLUMNS = """
SELECT a.attname, a.atttypid, a.atttypmod,
       c.relreplident = 'f' OR COALESCE(a.attnum = ANY (i.indkey), false) AS is_key,
       tn.nspname, t.typname
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_namespace tn ON tn.oid = t.typnamespace
LEFT JOIN pg_index i ON i.indrelid = c.oid AND (
    (c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident))
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
  AND (%s::text[] IS NULL OR a.attname = ANY (%s::text[]))
ORDER BY a.attnum
"""


def published_tables(conn: psycopg.Connection, publication: str) -> list[PublishedTable]:
    """The tables a publication covers (its partition roots when it publishes via the root)."""
    modern = conn.info.server_version >= 150000
    row_filter = "pt.rowfilter, pt.attnames" if modern else "NULL::text, NULL::text[]"
    tables = []
    for oid, schema, name, ident, rowfilter, attnames in conn.execute(
            sql.SQL(_TABLES.format(row_filter=row_filter)), (publication,)).fetchall():  # type: ignore[arg-type]
        rows = conn.execute(_COLUMNS, (oid, attnames, attnames)).fetchall()
        columns = tuple((n, t, m, bool(k)) for n, t, m, k, _, _ in rows)
        # pgoutput sends a Type message before the Relation for types that are not built in.
        user_types = tuple(dict.fromkeys((t, ns, tn) for _, t, _, _, ns, tn in rows if t >= _FIRST_NORMAL_OID))
        tables.append(PublishedTable(oid, schema, name, ident, columns, user_types, rowfilter))
    return tables


def _string(text: str) -> bytes:
    return text.encode() + b"\0"


def relation_message(table: PublishedTable) -> bytes:
    """A pgoutput Relation message (proto.c logicalrep_write_rel, without the streaming xid)."""
    parts = [b"R", _U32.pack(table.oid), _string(table.schema), _string(table.name),
             table.replica_identity.encode(), _I16.pack(len(table.columns))]
    for name, type_oid, typmod, is_key in table.columns:
        parts += [b"\x01" if is_key else b"\x00", _string(name), _U32.pack(type_oid), _I32.pack(typmod)]
    return b"".join(parts)


def type_message(type_oid: int, schema: str, name: str) -> bytes:
    """A pgoutput Type message (proto.c logicalrep_write_typ)."""
    return b"Y" + _U32.pack(type_oid) + _string(schema) + _string(name)


def _schema_frames(lsn: int, table: PublishedTable) -> tuple[bytes, ...]:
    messages = [type_message(*t) for t in table.user_types] + [relation_message(table)]
    return tuple(FRAME.pack(lsn, len(m)) + m for m in messages)


def insert_message(header: bytes, values: tuple[str | None, ...]) -> bytes:
    """A pgoutput Insert message with text TupleData (proto.c logicalrep_write_insert);
    ``header`` is its fixed start: 'I', relation OID, 'N', column count."""
    parts = [header]
    for value in values:
        if value is None:
            parts.append(b"n")
        else:
            data = value.encode()
            parts += [b"t", _I32.pack(len(data)), data]
    return b"".join(parts)


def _select(table: PublishedTable) -> sql.Composed:
    columns = sql.SQL(", ").join(sql.Identifier(c[0]) for c in table.columns)
    query = sql.SQL("SELECT {} FROM {}").format(columns, sql.Identifier(table.schema, table.name))
    if table.row_filter:
        # The publication's own WHERE clause, as the server printed it (pg_get_expr): not user input.
        query = sql.SQL("{} WHERE {}").format(query, sql.SQL(table.row_filter))  # type: ignore[arg-type]
    return query


def _transaction(commit_lsn: int, commit_ts: int, payload: bytearray, count: int,
                 table: PublishedTable) -> StoredTransaction:
    return StoredTransaction(xid=0, commit_lsn=commit_lsn, end_lsn=commit_lsn, commit_ts=commit_ts,
                             origin=SNAPSHOT_ORIGIN, change_count=count, payload=payload,
                             schema_frames=_schema_frames(commit_lsn, table))


