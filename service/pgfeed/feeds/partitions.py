"""Partitions attached with rows (issue 28.5).

``ALTER TABLE root ATTACH PARTITION p`` makes p's rows part of a published partitioned table
without writing a change: the stream never carries them, so a mirror of the root would silently
miss them (PostgreSQL's own subscriber does too, until ``REFRESH PUBLICATION`` with
``copy_data``). The supervisor lists the leaf partitions of the feed's published tables every
few seconds (one catalog query; none at all when the database has no partitioned table) and
compares them with the leaves it saw last (``FeedSpec.partitions``): a new leaf that holds rows
older than its attachment (``_UNSTREAMED``) is backfilled. Its backfill reads the partition and, when the publication publishes via the root,
serves the rows under the root (``backfill.source.describe``). ``DETACH PARTITION`` writes no
change either: the detached rows stay in a mirror (no deletes are sent).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgfeed.replication.connect import admin_connection

__all__ = ["Leaves", "list_leaves"]

# The leaf partitions of every relation the publication publishes (a root published via
# itself, or a partition published as itself: pg_partition_tree of a leaf is the leaf).
_LEAVES = """
SELECT DISTINCT c.oid, n.nspname, c.relname
FROM pg_publication_tables pt
JOIN pg_namespace pn ON pn.nspname = pt.schemaname
JOIN pg_class pc ON pc.relnamespace = pn.oid AND pc.relname = pt.tablename,
LATERAL pg_partition_tree(pc.oid) t
JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE pt.pubname = %s AND t.isleaf AND c.relispartition
"""


# Does the leaf hold a row the stream never carried: one written no later than the transaction
# that last linked the leaf into its tree (the youngest pg_inherits row of its ancestor chain:
# the ATTACH, or the CREATE TABLE ... PARTITION OF)? A row inserted or updated after that was
# streamed whole; one older (or frozen) arrived by the ATTACH. So a partition created and then
# written to is not backfilled, and a partition attached with old rows is, however late the
# check. (Rows written in the linking transaction itself count as old: a harmless re-read when
# it was a CREATE.) EXISTS stops at the first such row; a new partition with none is read
# whole once, at the first check after its creation.
_UNSTREAMED = """
SELECT EXISTS (SELECT 1 FROM {} WHERE age(xmin) >= (
    SELECT min(age(i.xmin)) FROM pg_partition_ancestors(%s) a
    JOIN pg_inherits i ON i.inhrelid = a.relid))
"""


@dataclass(frozen=True, slots=True)
class Leaves:
    """The leaf partitions published now, and of the new ones (not in ``known``) those holding
    rows the stream never carried, as ``schema.table`` names quoted for a backfill."""

    oids: tuple[int, ...]
    attached: tuple[str, ...]


def list_leaves(dsn: str, publication: str, known: tuple[int, ...] | None) -> Leaves:
    """One admin connection; SourceError when the source cannot answer. ``known`` None: only
    list (nothing is new)."""
    with admin_connection(dsn, "cannot list the published partitions") as conn:
        return leaves(conn, publication, known)


def leaves(conn: psycopg.Connection, publication: str, known: tuple[int, ...] | None) -> Leaves:
    # a lock held on a new partition (DDL in a long transaction) or a long scan fails the check,
    # which is tried again, rather than holding it
    conn.execute("SET lock_timeout = '1s'; SET statement_timeout = '30s'")
    row = conn.execute("SELECT EXISTS (SELECT 1 FROM pg_class WHERE relkind = 'p')").fetchone()
    if not row or not row[0]:  # no partitioned table at all: nothing to list
        return Leaves((), ())
    rows = conn.execute(_LEAVES, (publication,)).fetchall()
    oids = tuple(sorted(int(r[0]) for r in rows))
    if known is None:
        return Leaves(oids, ())
    seen = set(known)
    attached = []
    for oid, schema, name in sorted(rows, key=lambda r: (r[1], r[2])):
        if oid in seen:
            continue
        filled = conn.execute(sql.SQL(_UNSTREAMED).format(sql.Identifier(schema, name)),
                              (oid,)).fetchone()
        if filled and filled[0]:
            attached.append(_quoted(schema, name))
    return Leaves(oids, tuple(attached))


def _quoted(schema: str, name: str) -> str:
    return '"{}"."{}"'.format(schema.replace('"', '""'), name.replace('"', '""'))
