"""Slot and publication administration over a normal SQL connection (not a replication one).

Every name reaches SQL as ``sql.Identifier`` or a bound parameter, never pasted. Functions take
an open ``psycopg.Connection`` (autocommit or not: writes run in their own transaction block).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from pgfeed.errors import SourceError
from pgfeed.replication.commands import FAILOVER_SERVER
from pgfeed_client._cursor import parse_lsn

__all__ = [
    "PublishedTable",
    "drop_publication",
    "drop_slot",
    "emit_heartbeat",
    "ensure_publication",
    "failover_info",
    "publication_exists",
    "published",
    "row_filter_sql",
    "set_publication_tables",
    "slot_exists",
    "slot_info",
    "split_table_name",
]

@dataclass(frozen=True, slots=True)
class StandbySlot:
    """A physical slot named in the source's ``synchronized_standby_slots``: a standby the
    logical walsender waits for, so a promoted one never lacks what the feed was sent."""

    name: str
    exists: bool
    active: bool  # a standby streams from it now
    restart_lsn: int | None
    caught_up: bool  # the standby has the WAL up to the feed slot's confirmed position


@dataclass(frozen=True, slots=True)
class SlotFailover:
    """What the source (PostgreSQL 17+) says about the feed slot's failover readiness.

    ``enabled``: ``pg_replication_slots.failover``. ``synced``: the slot is a standby's
    synchronized copy (only true when the DSN reached a standby). The primary cannot see whether
    a standby has copied the slot (``synced`` is a column of the standby's view); what it can
    show is ``synchronized_standby_slots`` and the state of those physical slots. ``ready``:
    enabled, at least one standby slot, and every one active and caught up. ``note`` says what
    is missing when not ready.
    """

    enabled: bool
    synced: bool
    standby_slots: tuple[StandbySlot, ...] = ()
    ready: bool = False
    note: str | None = None


@dataclass(frozen=True, slots=True)
class PublishedTable:
    """One table of a publication pgfeed creates, with what PostgreSQL 15+ may publish of it:
    ``where`` is the row filter (SQL the user writes for their own source), ``columns`` the
    column list (None: every column). In status: as the source reports them."""

    table: str
    where: str | None = None
    columns: tuple[str, ...] | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PublishedTable:
        columns = data.get("columns")
        return cls(data["table"], data.get("where"), None if columns is None else tuple(columns))


GENERATED_SERVER = 180000  # publish_generated_columns
FILTER_SERVER = 150000  # row filters and column lists


def row_filter_sql(expr: str) -> sql.Composable:
    """A row filter as ``(expr)``. PostgreSQL validates the expression itself when the
    publication is created; this only makes sure it is one expression that cannot close the
    parentheses around it or end the statement (balanced outside quotes, no ``;``, no comments).
    ValueError says what is wrong."""
    depth, quote, i = 0, "", 0
    if not expr.strip():
        raise ValueError("a row filter cannot be empty")
    while i < len(expr):
        ch = expr[i]
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "$":
            raise ValueError("dollar quoting is not accepted in a row filter: use '...'")
        elif ch == ";" or expr.startswith("--", i) or expr.startswith("/*", i):
            raise ValueError("a row filter is one expression: no ';' and no comments")
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced parentheses in the row filter")
        i += 1
    if quote or depth:
        raise ValueError("unbalanced quotes or parentheses in the row filter")
    return sql.SQL("({})").format(sql.SQL(expr))  # validated above; PostgreSQL checks it


def table_entry(schema: str, table: str, entry: PublishedTable | None) -> sql.Composable:
    """``schema.table [(columns)] [WHERE (expr)]``: one entry of a ``FOR TABLE`` list."""
    parts: list[sql.Composable] = [sql.Identifier(schema, table)]
    if entry is not None and entry.columns is not None:
        if not entry.columns:
            raise ValueError(f"{schema}.{table}: a column list needs at least one column")
        parts.append(sql.SQL(" ({})").format(sql.SQL(", ").join(sql.Identifier(c) for c in entry.columns)))
    if entry is not None and entry.where is not None:
        parts.append(sql.SQL(" WHERE {}").format(row_filter_sql(entry.where)))
    return sql.Composed(parts)


DROP_WAIT = 5.0  # seconds drop_slot waits for a terminated walsender to let go of its slot


def split_table_name(name: str) -> tuple[str, str]:
    """``"schema.table"`` -> ``("schema", "table")``, split at the first dot and taken verbatim
    (exact catalogue names, no case folding or quote parsing); a bare name is in ``public``."""
    schema, dot, table = name.partition(".")
    if not dot:
        schema, table = "public", name
    if not schema or not table:
        raise ValueError(f"invalid table name {name!r}: expected schema.table")
    return schema, table


def _table_list(conn: psycopg.Connection, tables: Sequence[str],
                filters: Mapping[str, PublishedTable] | None = None) -> sql.Composable:
    """Quoted ``schema.table`` list, each with its column list and row filter from ``filters``
    (keyed by the name as given); every table must exist (a clear error names the missing)."""
    if isinstance(tables, str):
        raise TypeError("tables must be a list of names, not one string")
    if not tables:
        raise ValueError("a table list needs at least one table")
    pairs = [split_table_name(t) for t in tables]
    missing = []
    for schema, table in pairs:
        row = conn.execute(
            "SELECT c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s", (schema, table)).fetchone()
        if row is None:
            missing.append(f"{schema}.{table}")
        elif row[0] not in ("r", "p"):
            raise SourceError(f"{schema}.{table} is not a table (relkind {row[0]!r}): only tables "
                              "and partitioned tables can be published")
    if missing:
        raise SourceError(f"unknown table{'s' if len(missing) > 1 else ''} on the source: "
                          f"{', '.join(missing)}")
    by_pair = {split_table_name(name): entry for name, entry in (filters or {}).items()}
    return sql.SQL(", ").join(table_entry(s, t, by_pair.get((s, t))) for s, t in dict.fromkeys(pairs))


def publication_exists(conn: psycopg.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone() is not None


def publication_tables(conn: psycopg.Connection, name: str) -> tuple[bool, tuple[str, ...]] | None:
    """What a publication holds, as the server says: ``(puballtables, ("schema.table", ...))``
    from pg_publication / pg_publication_tables (sorted), or None when it does not exist."""
    row = conn.execute("SELECT puballtables FROM pg_publication WHERE pubname = %s", (name,)).fetchone()
    if row is None:
        return None
    if row[0]:
        return True, ()
    rows = conn.execute("SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s "
                        "ORDER BY schemaname, tablename", (name,)).fetchall()
    return False, tuple(f"{schema}.{table}" for schema, table in rows)


def ensure_publication(conn: psycopg.Connection, name: str, *, tables: Sequence[str],
                       all_tables: bool, partition_root: bool = True,
                       filters: Mapping[str, PublishedTable] | None = None,
                       generated_columns: bool = False) -> bool:
    """Create the publication if absent (``FOR ALL TABLES``, ``FOR TABLE ...`` or empty) with
    ``publish_via_partition_root``; if present, bring its option and, when ``tables`` is given,
    its table list in line (``ALTER PUBLICATION ... SET TABLE``). Returns True if it was created.
    ``filters``: per table name its row filter and column list (PostgreSQL 15+);
    ``generated_columns``: ``publish_generated_columns = stored`` (PostgreSQL 18+).

    Raises SourceError for an unknown table, or for a table list asked of an existing
    ``FOR ALL TABLES`` publication (which cannot hold one).
    """
    if all_tables and tables:
        raise ValueError("give either tables or all_tables, not both")
    with conn.transaction():
        row = conn.execute("SELECT puballtables FROM pg_publication WHERE pubname = %s",
                           (name,)).fetchone()
        via_root: sql.Composable = sql.SQL("publish_via_partition_root = {}").format(
            sql.SQL("true" if partition_root else "false"))
        if generated_columns:
            via_root = sql.SQL("{}, publish_generated_columns = stored").format(via_root)
        if row is None:
            if all_tables:
                what: sql.Composable = sql.SQL(" FOR ALL TABLES")
            elif tables:
                what = sql.SQL(" FOR TABLE {}").format(_table_list(conn, tables, filters))
            else:
                what = sql.SQL("")
            conn.execute(sql.SQL("CREATE PUBLICATION {}{} WITH ({})").format(
                sql.Identifier(name), what, via_root))
            return True
        conn.execute(sql.SQL("ALTER PUBLICATION {} SET ({})").format(sql.Identifier(name), via_root))
        if tables:
            if row[0]:
                raise SourceError(f"publication {name!r} is FOR ALL TABLES: it cannot be given a "
                                  "table list")
            _set_tables(conn, name, tables, filters)
        return False


def set_publication_tables(conn: psycopg.Connection, name: str, tables: Sequence[str],
                           filters: Mapping[str, PublishedTable] | None = None) -> None:
    """Replace the publication's table list (``ALTER PUBLICATION ... SET TABLE``), with each
    table's row filter and column list from ``filters``."""
    with conn.transaction():
        if not publication_exists(conn, name):
            raise SourceError(f"publication {name!r} does not exist on the source")
        _set_tables(conn, name, tables, filters)


def _set_tables(conn: psycopg.Connection, name: str, tables: Sequence[str],
                filters: Mapping[str, PublishedTable] | None = None) -> None:
    conn.execute(sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(
        sql.Identifier(name), _table_list(conn, tables, filters)))


def published(conn: psycopg.Connection, name: str) -> tuple[list[PublishedTable], bool | None] | None:
    """What the publication publishes, as the source reports it: per table its row filter and
    column list (``pg_publication_tables.rowfilter``/``attnames``, PostgreSQL 15+; before 15
    every column, no filter), and ``publish_generated_columns`` (PostgreSQL 18+; else None).
    None when the publication does not exist."""
    v = conn.info.server_version
    gen = "p.pubgencols = 's'" if v >= GENERATED_SERVER else "NULL::bool"
    row = conn.execute(sql.SQL("SELECT {} FROM pg_publication p WHERE p.pubname = %s").format(
        sql.SQL(gen)), (name,)).fetchone()
    if row is None:
        return None
    detail = "rowfilter, attnames" if v >= FILTER_SERVER else "NULL::text, NULL::text[]"
    rows = conn.execute(sql.SQL("SELECT schemaname, tablename, {} FROM pg_publication_tables "
                                "WHERE pubname = %s ORDER BY 1, 2").format(sql.SQL(detail)),
                        (name,)).fetchall()
    tables = [PublishedTable(f"{schema}.{table}", where, tuple(cols) if cols is not None else None)
              for schema, table, where, cols in rows]
    return tables, row[0]


def drop_publication(conn: psycopg.Connection, name: str) -> None:
    """Drop the publication if it exists."""
    with conn.transaction():
        conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(name)))


def slot_exists(conn: psycopg.Connection, slot: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s",
                        (slot,)).fetchone() is not None


def drop_slot(conn: psycopg.Connection, slot: str, *, wait: float = DROP_WAIT) -> bool:
    """Drop a replication slot; a walsender still streaming it is terminated first and given up
    to ``wait`` seconds to let go. Returns False if there was no such slot."""
    deadline = time.monotonic() + wait
    while True:
        with conn.transaction():
            row = conn.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                               (slot,)).fetchone()
            if row is None:
                return False
            pid = row[0]
            if pid is not None:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        if pid is None:
            try:
                with conn.transaction():
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                return True
            except psycopg.errors.UndefinedObject:  # dropped meanwhile by someone else
                return False
            except psycopg.errors.ObjectInUse:  # a walsender took it again: go round
                pass
        if time.monotonic() > deadline:
            raise SourceError(f"replication slot {slot!r} is still in use after {wait:g} s")
        time.sleep(0.05)


def free_slot(conn: psycopg.Connection, slot: str, *, wait: float = DROP_WAIT) -> None:
    """End the walsender streaming ``slot`` (a previous leader's, paused or cut off: it would keep
    the slot until ``wal_sender_timeout``) and wait until the slot is free to start from."""
    deadline = time.monotonic() + wait
    while True:
        row = conn.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                           (slot,)).fetchone()
        if row is None or row[0] is None:
            return
        conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))
        if time.monotonic() > deadline:
            raise SourceError(f"replication slot {slot!r} is still in use after {wait:g} s")
        time.sleep(0.05)


def slot_info(conn: psycopg.Connection, slot: str) -> dict[str, Any] | None:
    """The slot's state and WAL risk, or None when it does not exist.

    Keys: ``server_lsn`` (the server's current WAL position; the last received one on a
    standby), ``restart_lsn``, ``confirmed_flush_lsn`` (ints or None), ``retained_bytes``
    (server_lsn - restart_lsn: WAL the slot holds back), ``wal_status`` (``reserved``,
    ``extended``, ``unreserved`` or ``lost``), ``safe_wal_size`` (bytes before the slot is at
    risk; None without ``max_slot_wal_keep_size``), ``active``, ``active_pid``, ``plugin``,
    ``two_phase``.
    """
    two_phase = "two_phase" if conn.info.server_version >= 140000 else "false"
    row = conn.execute(sql.SQL(
        "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() "
        "ELSE pg_current_wal_lsn() END::text, "
        "restart_lsn::text, confirmed_flush_lsn::text, wal_status, safe_wal_size, active, "
        "active_pid, plugin, {} FROM pg_replication_slots WHERE slot_name = %s"
    ).format(sql.SQL(two_phase)), (slot,)).fetchone()
    if row is None:
        return None
    server, restart, confirmed, wal_status, safe_size, active, pid, plugin, two = row
    server_lsn = parse_lsn(server) if server else None
    restart_lsn = parse_lsn(restart) if restart else None
    retained = (max(0, server_lsn - restart_lsn)
                if server_lsn is not None and restart_lsn is not None else None)
    return {
        "server_lsn": server_lsn,
        "restart_lsn": restart_lsn,
        "confirmed_flush_lsn": parse_lsn(confirmed) if confirmed else None,
        "retained_bytes": retained,
        "wal_status": wal_status,
        "safe_wal_size": int(safe_size) if safe_size is not None else None,
        "active": bool(active),
        "active_pid": pid,
        "plugin": plugin,
        "two_phase": bool(two),
    }


def setting_list(value: str) -> list[str]:
    """A list setting's names (``a, "B c"``: SplitIdentifierString's syntax, case kept)."""
    names, i, n = [], 0, len(value)
    while i < n:
        while i < n and value[i] in " \t,":
            i += 1
        if i >= n:
            break
        if value[i] == '"':
            j, name = i + 1, []
            while j < n:
                if value[j] == '"':
                    if j + 1 < n and value[j + 1] == '"':
                        name.append('"')
                        j += 2
                        continue
                    break
                name.append(value[j])
                j += 1
            names.append("".join(name))
            i = j + 1
        else:
            j = i
            while j < n and value[j] not in " \t,":
                j += 1
            names.append(value[i:j])
            i = j
    return names


def failover_info(conn: psycopg.Connection, slot: str) -> SlotFailover | None:
    """The slot's failover state as this server sees it (None before PostgreSQL 17, or when
    there is no such slot): its ``failover`` and ``synced`` flags, and on a primary the physical
    slots of ``synchronized_standby_slots`` the logical walsender waits for."""
    if conn.info.server_version < FAILOVER_SERVER:
        return None
    row = conn.execute("SELECT failover, synced, confirmed_flush_lsn::text, pg_is_in_recovery(), "
                       "current_setting('synchronized_standby_slots', true) "
                       "FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
    if row is None:
        return None
    enabled, synced, confirmed, standby, setting = row
    names = setting_list(setting or "")
    states = {name: (bool(active), parse_lsn(lsn) if lsn else None) for name, active, lsn in
              conn.execute("SELECT slot_name, active, restart_lsn::text FROM pg_replication_slots "
                           "WHERE slot_type = 'physical' AND slot_name = ANY(%s)", (names,))}
    confirmed_lsn = parse_lsn(confirmed) if confirmed else 0
    held = []
    for name in names:
        active, lsn = states.get(name, (False, None))
        held.append(StandbySlot(name, name in states, active, lsn,
                                lsn is not None and lsn >= confirmed_lsn))
    note = None
    if not enabled:
        note = "the slot was not created with FAILOVER: standbys do not synchronize it"
    elif standby:
        note = None if synced else "the source is a standby and this slot is not a synchronized copy"
    elif not held:
        note = ("synchronized_standby_slots is empty on the source: the feed may be sent changes a "
                "standby lacks, which a failover to it would lose")
    else:
        missing = [s.name for s in held if not (s.exists and s.active and s.caught_up)]
        if missing:
            note = ("standby slot(s) missing, inactive or behind the feed: " + ", ".join(missing))
    return SlotFailover(bool(enabled), bool(synced), tuple(held), note is None and bool(enabled), note)


def emit_heartbeat(conn: psycopg.Connection, prefix: str) -> int:
    """A non-transactional, empty logical message (``pg_logical_emit_message(false, prefix,
    '')``): moves an idle slot's stream forward. Returns its LSN.

    A non-transactional message does not flush WAL by itself; the walsender sends it once
    something else flushes WAL (any commit, or the WAL writer within ``wal_writer_delay``).
    PostgreSQL 17+ flushes it at once (``flush``): held backfill chunks wait for it on an
    idle source (``window.py``).
    """
    query = ("SELECT pg_logical_emit_message(false, %s, '', true)::text"
             if conn.info.server_version >= 170000 else
             "SELECT pg_logical_emit_message(false, %s, '')::text")
    with conn.transaction():
        row = conn.execute(query, (prefix,)).fetchone()
    return parse_lsn(row[0]) if row else 0


def quoted_publication_tables(conn: psycopg.Connection, publication: str) -> list[str]:
    """The tables a publication covers (its partition roots when it publishes via the root),
    as quoted ``"schema"."table"`` names: what a feed's initial backfill reads."""
    rows = conn.execute("SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s "
                        "ORDER BY 1, 2", (publication,)).fetchall()
    return ['"{}"."{}"'.format(s.replace('"', '""'), t.replace('"', '""')) for s, t in rows]
