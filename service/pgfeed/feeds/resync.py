"""Lost slots and the way back (issue 26): check a feed's slot, and resync's work on the source
and in the log.

A resync drops the dead slot (when it still exists), creates a new one, and writes a **gap
marker** into the feed just before the first position the new slot can deliver: one transaction
(origin ``pgfeed.resync``) holding the Relation frames of the feed's tables and one Truncate of
them. A reader (or a Spark mirror) applying the feed in order discards there what it can no
longer know, and the backfill that resync starts rebuilds it with ``read`` changes after it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg

from pgfeed.assembler.framing import frame
from pgfeed.assembler.model import StoredTransaction
from pgfeed.backfill.schema import _COLUMNS, PublishedTable, relation_message, type_message
from pgfeed.errors import SourceError
from pgfeed.feeds.model import FeedSpec
from pgfeed.pgoutput import messages as pm
from pgfeed.pgoutput.encode import encode
from pgfeed.replication import slots
from pgfeed.replication.connect import admin_connection
from pgfeed.replication.lost import LostSlot, slot_loss
from pgfeed.replication.stream import create_slot

__all__ = ["RESYNC_ORIGIN", "NewSlot", "check_loss", "drop_new_slot", "marker", "new_slot"]

RESYNC_ORIGIN = "pgfeed.resync"
_FIRST_NORMAL_OID = 16384


@dataclass(frozen=True, slots=True)
class PublishedRelation:
    """A table of the feed's publication as the marker names it: quoted name, relation id and
    its Type/Relation messages (what pgoutput would send before a change of it)."""

    quoted: str
    oid: int
    messages: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class NewSlot:
    dropped: bool  # the dead slot still existed and was dropped
    consistent_point: int  # the new slot delivers nothing committed before this
    relations: tuple[PublishedRelation, ...]


def check_loss(spec: FeedSpec) -> LostSlot | None:
    """One admin connection: is the feed's slot gone? None also when the source does not answer
    (that is ``reconnecting``, not a loss)."""
    try:
        with admin_connection(spec.dsn, "cannot check the slot") as conn:
            return slot_loss(conn, spec.slot_name)
    except SourceError:
        return None


def new_slot(spec: FeedSpec) -> NewSlot:
    """Drop the feed's slot if it still exists (terminating a walsender on it), create it anew,
    and read the publication's tables as they are now. SourceError says what the source refused."""
    with admin_connection(spec.dsn, "resync: the source refused") as conn:
        dropped = slots.drop_slot(conn, spec.slot_name)
    consistent_point, _ = create_slot(spec.dsn, spec.slot_name, snapshot="nothing",
                                      two_phase=spec.options.two_phase,
                                      failover=spec.options.failover)
    try:
        with admin_connection(spec.dsn, "resync: cannot read the publication's tables") as conn:
            relations = _relations(conn, spec.publication_name)
    except SourceError:
        drop_new_slot(spec)
        raise
    return NewSlot(dropped, consistent_point, relations)


def drop_new_slot(spec: FeedSpec) -> None:
    """Undo ``new_slot``'s slot (a resync that cannot go on must not leave one retaining WAL)."""
    try:
        with admin_connection(spec.dsn, "resync: cannot drop the new slot") as conn:
            slots.drop_slot(conn, spec.slot_name)
    except SourceError:
        pass


def _relations(conn: psycopg.Connection, publication: str) -> tuple[PublishedRelation, ...]:
    modern = conn.info.server_version >= 150000
    rows = conn.execute(
        "SELECT c.oid, pt.schemaname, pt.tablename, c.relreplident, "
        + ("pt.attnames" if modern else "NULL::text[]")
        + " FROM pg_publication_tables pt JOIN pg_namespace n ON n.nspname = pt.schemaname "
        "JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename "
        "WHERE pt.pubname = %s ORDER BY 2, 3", (publication,)).fetchall()
    out = []
    for oid, schema, name, ident, attnames in rows:
        columns = conn.execute(_COLUMNS, (oid, attnames, attnames)).fetchall()
        user_types = tuple(dict.fromkeys((t, ns, tn) for _, t, _, _, ns, tn in columns
                                         if t >= _FIRST_NORMAL_OID))
        table = PublishedTable(oid, schema, name, ident,
                               tuple((n, t, m, bool(k)) for n, t, m, k, _, _ in columns),
                               user_types, None)
        quoted = '"{}"."{}"'.format(schema.replace('"', '""'), name.replace('"', '""'))
        out.append(PublishedRelation(quoted, oid, tuple(type_message(*t) for t in user_types)
                                     + (relation_message(table),)))
    return tuple(out)


def marker(position: int, end_lsn: int, relations: tuple[PublishedRelation, ...]) -> StoredTransaction:
    """The gap marker at ``position``: the tables' Type/Relation frames, then one Truncate of them
    all (no Truncate when the publication holds no table)."""
    schema = tuple(frame(position, m) for r in relations for m in r.messages)
    changes = []
    if relations:
        changes.append(frame(position, encode(pm.TruncateMessage(
            None, 0, tuple(r.oid for r in relations)))))
    commit_ts = int((time.time() - pm.PG_EPOCH_UNIX) * 1_000_000)
    return StoredTransaction(0, position, end_lsn, commit_ts, RESYNC_ORIGIN, len(changes),
                             b"".join(schema + tuple(changes)), schema)
