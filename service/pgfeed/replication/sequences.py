"""The sequences of a publication's tables, read with the WAL position they cover (for cutover).

pgoutput carries no sequence values before PostgreSQL 19 (and 19 syncs them only into PostgreSQL
subscribers), so an application switching to a mirror needs them from the source. A value read
is only useful with a position: ``read_at`` is the WAL insert position read *before* the values,
so every transaction whose commit record precedes it drew its values before they were read.
Hence, for an ascending sequence, every row of the feed committed before ``read_at`` holds a
value at most ``last_value`` (descending: at least), and once a mirror holds the feed up to
``read_at`` a target sequence set to ``next_value`` cannot collide with a mirrored row.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import psycopg

from pgfeed_client._cursor import format_lsn, parse_lsn

__all__ = ["SEQUENCES_PREFIX", "SequenceValue", "SequenceSnapshot", "emit_snapshot", "read_sequences"]

SEQUENCES_PREFIX = "pgfeed.sequences"  # logical message prefix of an emitted snapshot

# The sequences a table's columns own: serial (OWNED BY, deptype 'a') and identity ('i'), of the
# tables the publication holds (their roots when it publishes via the root).
_OWNED = """
SELECT sn.nspname, s.relname, pt.schemaname, pt.tablename, a.attname,
       CASE d.deptype WHEN 'i' THEN 'identity' ELSE 'serial' END,
       has_sequence_privilege(s.oid, 'SELECT,USAGE'), q.seqincrement, s.oid
  FROM pg_publication_tables pt
  JOIN pg_namespace tn ON tn.nspname = pt.schemaname
  JOIN pg_class t ON t.relnamespace = tn.oid AND t.relname = pt.tablename
  JOIN pg_depend d ON d.refclassid = 'pg_class'::regclass AND d.refobjid = t.oid
                  AND d.classid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
  JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
  JOIN pg_namespace sn ON sn.oid = s.relnamespace
  JOIN pg_sequence q ON q.seqrelid = s.oid
  JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid
 WHERE pt.pubname = %s
 ORDER BY 3, 4, 5
"""


@dataclass(frozen=True, slots=True)
class SequenceValue:
    """One sequence owned by a published table's column.

    ``last_value``: the last value handed out (None when never used, or when the role may not
    read it: ``readable``). ``next_value``: what a target sequence should hand out next
    (``setval(seq, next_value, false)``)."""

    sequence: str  # "schema.name"
    table: str  # "schema.table"
    column: str
    kind: str  # "serial" (OWNED BY) or "identity"
    increment_by: int
    last_value: int | None
    next_value: int | None
    readable: bool


@dataclass(frozen=True, slots=True)
class SequenceSnapshot:
    read_at: int  # WAL position read before the values (see the module's docstring)
    sequences: tuple[SequenceValue, ...]

    def to_json(self) -> dict[str, object]:
        return {"read_at": format_lsn(self.read_at),
                "sequences": [asdict(s) for s in self.sequences]}


def read_sequences(conn: psycopg.Connection, publication: str) -> SequenceSnapshot:
    """The publication's tables' sequences with the position they cover. Reads only: no lock is
    taken and nothing is written (``last_value`` comes from ``pg_sequence_last_value``, which
    does not advance the sequence)."""
    owned = conn.execute(_OWNED, (publication,)).fetchall()
    # The position first: a commit before it drew its values before they are read below.
    row = conn.execute("SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
                       "ELSE pg_current_wal_insert_lsn() END::text").fetchone()
    assert row is not None
    read_at = parse_lsn(row[0])
    values = []
    for seq_schema, seq_name, schema, table, column, kind, readable, increment, oid in owned:
        last = None
        if readable:
            got = conn.execute("SELECT pg_sequence_last_value(%s::oid::regclass)",
                               (oid,)).fetchone()
            last = None if got is None or got[0] is None else int(got[0])
        values.append(SequenceValue(
            sequence=f"{seq_schema}.{seq_name}", table=f"{schema}.{table}", column=column,
            kind=kind, increment_by=int(increment), last_value=last,
            next_value=None if last is None else last + int(increment), readable=bool(readable)))
    return SequenceSnapshot(read_at, tuple(values))


def emit_snapshot(conn: psycopg.Connection, snapshot: SequenceSnapshot) -> int:
    """Write the snapshot into the WAL as a transactional logical message (prefix
    ``pgfeed.sequences``, content its JSON), so it reaches the feed as a ``message`` event
    among the changes; returns the message's LSN. Its ``read_at`` still says what it covers:
    commits between the read and the message may hold later values."""
    with conn.transaction():
        row = conn.execute("SELECT pg_logical_emit_message(true, %s, %s)::text",
                           (SEQUENCES_PREFIX, json.dumps(snapshot.to_json()))).fetchone()
    assert row is not None
    return parse_lsn(row[0])
