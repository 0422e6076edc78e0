"""A published table as pgoutput describes it: its columns (what pgoutput sends) and the Relation
and Type messages a backfill chunk carries before its rows (Insert messages, ``rows.py``), encoded
the way PostgreSQL's proto.c writes them, so readers decode a chunk like streamed rows.

(Until 2026-11-24 this was ``replication/snapshot.py``, the exported-snapshot initial load; the
feed option ``snapshot`` now runs a backfill instead.)
"""

from __future__ import annotations

from dataclasses import dataclass

from pgfeed.netorder import I16, I32, U32

_FIRST_NORMAL_OID = 16384  # FirstNormalObjectId: OIDs below are built in


@dataclass(frozen=True, slots=True)
class PublishedTable:
    oid: int
    schema: str
    name: str
    replica_identity: str  # 'd', 'n', 'f' or 'i', as pg_class.relreplident
    columns: tuple[tuple[str, int, int, bool], ...]  # name, type oid, typmod, part of the key
    user_types: tuple[tuple[int, str, str], ...]  # oid, schema, name of non-built-in column types
    row_filter: str | None  # PostgreSQL 15+ publication WHERE clause, as pg_get_expr prints it


# Columns as pgoutput sends them: not dropped, within the publication's column list
# (pg_publication_tables.attnames, PostgreSQL 15+; None before: every column); generated columns
# only on PostgreSQL 18+, and there only stored ones attnames names (18 lists them exactly when
# pgoutput sends them: publish_generated_columns = stored, or a column list naming them; 15-17
# list generated columns in attnames too, but pgoutput never sends them). Key flags per
# logicalrep_write_attrs in proto.c (every column under FULL, the replica identity index's
# columns otherwise). Parameters: the table's oid, then attnames twice.
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
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
  AND (%s::text[] IS NULL AND a.attgenerated = ''
       OR a.attname = ANY (%s::text[]) AND (a.attgenerated = '' OR a.attgenerated = 's'
           AND current_setting('server_version_num')::int >= 180000))
ORDER BY a.attnum
"""


def _string(text: str) -> bytes:
    return text.encode() + b"\0"


def relation_message(table: PublishedTable) -> bytes:
    """A pgoutput Relation message (proto.c logicalrep_write_rel, without the streaming xid)."""
    parts = [b"R", U32.pack(table.oid), _string(table.schema), _string(table.name),
             table.replica_identity.encode(), I16.pack(len(table.columns))]
    for name, type_oid, typmod, is_key in table.columns:
        parts += [b"\x01" if is_key else b"\x00", _string(name), U32.pack(type_oid), I32.pack(typmod)]
    return b"".join(parts)


def type_message(type_oid: int, schema: str, name: str) -> bytes:
    """A pgoutput Type message (proto.c logicalrep_write_typ)."""
    return b"Y" + U32.pack(type_oid) + _string(schema) + _string(name)
