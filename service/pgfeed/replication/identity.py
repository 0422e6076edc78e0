"""Replica identity on the source: which tables PostgreSQL would refuse ``UPDATE``/``DELETE`` on
once they are published, giving them ``REPLICA IDENTITY FULL`` (only with the user's consent),
and the event trigger that does the same for tables created later under a feed of all tables.

PostgreSQL checks this on every ``UPDATE``/``DELETE`` of a leaf table that a publication
publishing updates or deletes covers (``CheckCmdReplicaIdentity``): the table needs a replica
identity index (its primary key under ``REPLICA IDENTITY DEFAULT`` when the key is not
deferrable, or the index of ``USING INDEX``) or ``REPLICA IDENTITY FULL``; otherwise the
statement fails. Partitioned tables are checked on their leaves; unlogged and temporary tables
are never published, so never checked.

Every name reaches SQL as ``sql.Identifier`` or a bound parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from psycopg import sql

__all__ = [
    "TableIdentity",
    "all_tables",
    "drop_guard",
    "guard_name",
    "install_guard",
    "named_tables",
    "set_full",
    "unprotected_in_publication",
]

Identity = Literal["default", "full", "index", "nothing"]
_IDENTITY: dict[str, Identity] = {"d": "default", "f": "full", "i": "index", "n": "nothing"}

# Whether a pg_class row ``c`` has what UPDATE/DELETE need once published.
_KEYED = ("EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary "
          "AND i.indimmediate)")
_PROTECTED = (f"(c.relreplident = 'f' OR (c.relreplident = 'd' AND {_KEYED}) OR "
              "(c.relreplident = 'i' AND EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid "
              "AND i.indisreplident)))")
_COLUMNS = (f"n.nspname, c.relname, c.relkind, c.relreplident, {_KEYED}, {_PROTECTED}, "
            "pg_has_role(c.relowner, 'USAGE')")


@dataclass(frozen=True, slots=True)
class TableIdentity:
    """One table as PostgreSQL will check it once published."""

    name: str  # schema.table, catalogue spelling
    kind: Literal["table", "partitioned"]
    identity: Identity
    has_key: bool  # a non-deferrable primary key
    protected: bool  # UPDATE/DELETE keep working once published (always true of a partitioned one)
    owned: bool  # the role owns it (may publish it, may change its identity)
    named: bool = True  # asked for by name (not reached as a partition or inheritance child)

    @property
    def effect(self) -> str:
        """What the application's UPDATE/DELETE on it do once it is published."""
        if self.kind == "partitioned":
            return "checked on its partitions"
        if self.identity == "full":
            return "UPDATE/DELETE work; each writes the whole old row to WAL (REPLICA IDENTITY FULL)"
        if self.protected:
            return ("UPDATE/DELETE work (keyed by its primary key)" if self.identity == "default"
                    else "UPDATE/DELETE work (keyed by its REPLICA IDENTITY index)")
        why = ("REPLICA IDENTITY NOTHING" if self.identity == "nothing" else
               "no usable replica identity index" if self.identity == "index" else
               "no primary key" + (" usable as identity (deferrable)" if self.has_key else ""))
        return f"PostgreSQL refuses every UPDATE and DELETE on it ({why})"


def _row(row: tuple[Any, ...], named: bool = True) -> TableIdentity:
    schema, table, relkind, ident, keyed, protected, owned = row[:7]
    kind: Literal["table", "partitioned"] = "partitioned" if relkind == "p" else "table"
    return TableIdentity(f"{schema}.{table}", kind, _IDENTITY.get(ident, "default"), bool(keyed),
                         bool(protected) or kind == "partitioned", bool(owned), named)


def named_tables(conn: psycopg.Connection[Any], pairs: Sequence[tuple[str, str]]
                 ) -> tuple[list[TableIdentity], list[str], list[str]]:
    """The tables a ``FOR TABLE`` publication of ``pairs`` covers: each named table, its
    partitions and inheritance children (which the publication covers too). Returns
    (tables, missing names, names that are not tables)."""
    schemas, names = [s for s, _ in pairs], [t for _, t in pairs]
    kinds = {(s, t): k for s, t, k in conn.execute(
        "SELECT n.nspname, c.relname, c.relkind FROM unnest(%s::text[], %s::text[]) AS w(s, r) "
        "JOIN pg_namespace n ON n.nspname = w.s JOIN pg_class c ON c.relnamespace = n.oid "
        "AND c.relname = w.r", (schemas, names)).fetchall()}
    missing = [f"{s}.{t}" for s, t in dict.fromkeys(pairs) if (s, t) not in kinds]
    not_tables = [f"{s}.{t}" for s, t in dict.fromkeys(pairs) if kinds.get((s, t), "r") not in "rp"]
    rows = conn.execute(
        "WITH RECURSIVE named AS (SELECT c.oid FROM unnest(%s::text[], %s::text[]) AS w(s, r) "
        "JOIN pg_namespace n ON n.nspname = w.s JOIN pg_class c ON c.relnamespace = n.oid "
        "AND c.relname = w.r WHERE c.relkind IN ('r', 'p')), "
        "tree AS (SELECT oid FROM named UNION SELECT i.inhrelid FROM pg_inherits i "
        "JOIN tree ON i.inhparent = tree.oid) "
        f"SELECT {_COLUMNS}, c.oid IN (SELECT oid FROM named) FROM tree "
        "JOIN pg_class c ON c.oid = tree.oid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind IN ('r', 'p') AND c.relpersistence = 'p' ORDER BY 1, 2",
        (schemas, names)).fetchall()
    return [_row(r, bool(r[7])) for r in rows], missing, not_tables


def all_tables(conn: psycopg.Connection[Any]) -> list[TableIdentity]:
    """Every table a ``FOR ALL TABLES`` publication covers (permanent user tables)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'r' AND c.relpersistence = 'p' AND c.oid >= 16384 "
        "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
        "AND n.nspname NOT LIKE 'pg\\_toast%' ORDER BY 1, 2").fetchall()
    return [_row(r) for r in rows]


def unprotected_in_publication(conn: psycopg.Connection[Any], publication: str) -> list[str]:
    """The leaf tables a publication covers on which PostgreSQL refuses UPDATE/DELETE now (it
    publishes updates or deletes and they have no usable identity): ``schema.table`` names."""
    rows = conn.execute(
        "SELECT DISTINCT n.nspname, c.relname FROM pg_publication p "
        "JOIN pg_publication_tables pt ON pt.pubname = p.pubname "
        "JOIN pg_namespace pn ON pn.nspname = pt.schemaname "
        "JOIN pg_class pc ON pc.relnamespace = pn.oid AND pc.relname = pt.tablename "
        "CROSS JOIN LATERAL (SELECT pc.oid AS relid WHERE pc.relkind <> 'p' UNION ALL "
        "SELECT t.relid::oid FROM pg_partition_tree(pc.oid) t WHERE pc.relkind = 'p' AND t.isleaf) leaf "
        "JOIN pg_class c ON c.oid = leaf.relid JOIN pg_namespace n ON n.oid = c.relnamespace "
        f"WHERE p.pubname = %s AND (p.pubupdate OR p.pubdelete) AND c.relkind = 'r' "
        f"AND c.relpersistence = 'p' AND NOT {_PROTECTED} ORDER BY 1, 2", (publication,)).fetchall()
    return [f"{s}.{t}" for s, t in rows]


def set_full(conn: psycopg.Connection[Any], tables: Sequence[str]) -> None:
    """``ALTER TABLE ... REPLICA IDENTITY FULL`` on each ``schema.table`` (in the caller's
    transaction, if any)."""
    for name in tables:
        schema, _, table = name.partition(".")
        conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(sql.Identifier(schema, table)))


def guard_name(feed: str) -> str:
    """The event trigger (and its function, in ``public``) a feed installs: at most 63 bytes."""
    return f"pgfeed_{feed}_keyless"


# Fired after CREATE TABLE, CREATE TABLE AS, SELECT INTO and ALTER TABLE (a dropped key): a
# permanent table left without a usable identity under REPLICA IDENTITY DEFAULT gets FULL. An
# explicit REPLICA IDENTITY NOTHING is a deliberate choice and stays (status reports it). A
# failure only warns: the trigger must never make the application's DDL fail.
_GUARD_BODY = f"""
DECLARE
  obj record;
BEGIN
  FOR obj IN SELECT objid FROM pg_event_trigger_ddl_commands() WHERE object_type = 'table' LOOP
    IF EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = obj.objid AND c.relkind = 'r'
               AND c.relpersistence = 'p' AND c.relreplident = 'd' AND NOT {_KEYED}) THEN
      BEGIN
        EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', obj.objid::regclass);
        RAISE NOTICE 'pgfeed: % has no primary key: REPLICA IDENTITY FULL, so that UPDATE and DELETE on it work while it is published', obj.objid::regclass;
      EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'pgfeed: could not give % REPLICA IDENTITY FULL (%): UPDATE and DELETE on it fail while it is published', obj.objid::regclass, SQLERRM;
      END;
    END IF;
  END LOOP;
END
"""


def install_guard(conn: psycopg.Connection[Any], feed: str) -> None:
    """Create the feed's event trigger and its function (superuser only; in the caller's
    transaction, if any)."""
    name = guard_name(feed)
    conn.execute(sql.SQL("CREATE FUNCTION public.{}() RETURNS event_trigger LANGUAGE plpgsql "
                         "SET search_path = pg_catalog AS {}").format(
        sql.Identifier(name), sql.Literal(_GUARD_BODY)))
    conn.execute(sql.SQL("CREATE EVENT TRIGGER {} ON ddl_command_end WHEN TAG IN "
                         "('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO', 'ALTER TABLE') "
                         "EXECUTE FUNCTION public.{}()").format(sql.Identifier(name), sql.Identifier(name)))


def drop_guard(conn: psycopg.Connection[Any], feed: str) -> None:
    """Drop the feed's event trigger and function if they exist."""
    name = guard_name(feed)
    with conn.transaction():
        conn.execute(sql.SQL("DROP EVENT TRIGGER IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP FUNCTION IF EXISTS public.{}()").format(sql.Identifier(name)))
