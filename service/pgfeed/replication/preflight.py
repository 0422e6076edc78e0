"""Check a source before a feed is created on it: what would fail, what would harm the
application, what puts a paused feed's slot at risk. Each finding carries a one-line fix.

``gather`` reads the source in one connection (catalogue queries only: nothing is created);
``judge`` is pure, so every finding can be tested without a source in that state
(``wal_level = replica`` cannot be set on a shared test cluster). ``pgfeed check``,
``POST /v1/feeds?dry_run=true`` and every real create run the same two.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import psycopg
from psycopg import sql

from pgfeed.replication import identity
from pgfeed.replication.commands import FAILOVER_SERVER, OLDEST_SERVER, source_refusal
from pgfeed.replication.identity import TableIdentity
from pgfeed.replication.slots import (
    FILTER_SERVER,
    GENERATED_SERVER,
    PublishedTable,
    split_table_name,
    table_entry,
)

__all__ = ["Facts", "FilterFacts", "Finding", "LeafIdentity", "Request", "filter_findings", "gather",
           "gather_filters", "judge", "render", "run"]

Level = Literal["ok", "warning", "error"]
Keyless = Literal["refuse", "identity_full"]
MANAGED_REPLICATION = ("rds_replication", "azure_pg_admin")  # managed services' REPLICATION
MANAGED_SUPERUSER = ("rds_superuser", "azure_pg_admin")


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing checked: ``check`` names it, ``fix`` is the SQL or setting to change (None when
    nothing is to be done)."""

    check: str
    level: Level
    message: str
    fix: str | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """What a feed would ask of the source. ``name`` None: the slot and publication names
    pgfeed would create are not checked (``pgfeed check`` without ``--name``)."""

    name: str | None = None
    tables: tuple[str, ...] = ()
    all_tables: bool = False
    publication: str | None = None  # adopt this one
    slot: str | None = None  # adopt this one
    two_phase: bool = False
    failover: bool = False
    keyless: Keyless = "refuse"
    # Issue 27.5: row filters and column lists of the tables that have one (PostgreSQL 15+), and
    # publish_generated_columns = stored (PostgreSQL 18+); for a publication pgfeed creates.
    filters: tuple[PublishedTable, ...] = ()
    generated_columns: bool = False
    partition_root: bool = True  # publish_via_partition_root: a partitioned table's filter needs it
    ddl: bool = False  # option ddl "capture": an event trigger (issue 27.2)

    @property
    def slot_name(self) -> str | None:
        return self.slot or (f"pgfeed_{self.name}" if self.name else None)

    @property
    def publication_name(self) -> str | None:
        return self.publication or (f"pgfeed_{self.name}" if self.name else None)


@dataclass(frozen=True, slots=True)
class LeafIdentity:
    """A table PostgreSQL checks UPDATE/DELETE on (a partition of a partitioned one): its
    replica identity's columns (``full``: every column) and whether it has a usable one."""

    name: str
    identity: str  # default, index, full, nothing
    columns: tuple[str, ...]  # the identity's columns (every column when full)
    protected: bool


@dataclass(frozen=True, slots=True)
class FilterFacts:
    """What the source says of one table's row filter and column list: ``error`` is
    PostgreSQL's refusal of them (a trial ``CREATE PUBLICATION`` rolled back), ``where_columns``
    the columns the filter reads (the trial's dependencies)."""

    table: str
    error: str | None = None
    where_columns: tuple[str, ...] = ()
    leaves: tuple[LeafIdentity, ...] = ()


@dataclass(frozen=True, slots=True)
class Facts:
    """What ``gather`` read of the source (settings in their base units)."""

    server_version: int
    role: str
    database: str
    wal_level: str = "logical"
    in_recovery: bool = False
    superuser: bool = False
    replication: bool = False
    managed_roles: tuple[str, ...] = ()  # of MANAGED_*, those the role is a member of
    managed_available: tuple[str, ...] = ()  # of MANAGED_*, those that exist
    create_on_database: bool = True
    max_replication_slots: int = 10
    slots_used: int = 0
    max_wal_senders: int = 10
    walsenders_used: int = 0
    max_slot_wal_keep_mb: int = -1
    idle_slot_timeout_s: int | None = None  # PostgreSQL 18+
    tables: tuple[TableIdentity, ...] = ()
    missing_tables: tuple[str, ...] = ()
    not_tables: tuple[str, ...] = ()
    slot_exists: bool = False
    slot_plugin: str | None = None
    slot_database: str | None = None
    slot_failover: bool | None = None
    publication_exists: bool = False
    publication_writes: bool = True  # the (adopted) publication publishes updates or deletes
    unprotected_published: tuple[str, ...] = field(default=())  # adopted publication
    filters: tuple[FilterFacts, ...] = ()


def _setting(conn: psycopg.Connection[Any], name: str) -> tuple[str | None, str | None]:
    row = conn.execute("SELECT setting, unit FROM pg_settings WHERE name = %s", (name,)).fetchone()
    return (row[0], row[1]) if row else (None, None)


def _seconds(value: str | None, unit: str | None) -> int | None:
    if value is None:
        return None
    return int(int(value) * {"min": 60, "ms": 0.001, "h": 3600, "d": 86400}.get(unit or "s", 1))


def gather(conn: psycopg.Connection[Any], request: Request) -> Facts:
    """Read what ``judge`` needs (catalogue queries; nothing is changed)."""
    row = conn.execute(
        "SELECT current_user, current_database(), pg_is_in_recovery(), r.rolsuper, r.rolreplication, "
        "has_database_privilege(current_database(), 'CREATE') FROM pg_roles r "
        "WHERE r.rolname = current_user").fetchone()
    assert row is not None
    role, database, recovery, superuser, replication, create = row
    managed = conn.execute(
        "SELECT rolname, pg_has_role(current_user, oid, 'MEMBER') FROM pg_roles "
        "WHERE rolname = ANY(%s) ORDER BY 1",
        (list(dict.fromkeys(MANAGED_REPLICATION + MANAGED_SUPERUSER)),)).fetchall()
    wal_level = _setting(conn, "wal_level")[0] or "replica"
    keep = _setting(conn, "max_slot_wal_keep_size")[0]
    idle = _setting(conn, "idle_replication_slot_timeout") if conn.info.server_version >= 180000 else (None, None)
    counts = conn.execute(
        "SELECT current_setting('max_replication_slots')::int, (SELECT count(*) FROM pg_replication_slots), "
        "current_setting('max_wal_senders')::int, "
        "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender')").fetchone()
    assert counts is not None
    tables: list[TableIdentity] = []
    missing: list[str] = []
    not_tables: list[str] = []
    if request.all_tables:
        tables = identity.all_tables(conn)
    elif request.tables:
        pairs = []
        for name in request.tables:
            try:
                pairs.append(split_table_name(name))
            except ValueError:
                missing.append(name)
        tables, absent, not_tables = identity.named_tables(conn, pairs)
        missing += absent
    slot = None
    if request.slot_name:
        failover = "failover" if conn.info.server_version >= FAILOVER_SERVER else "NULL::bool"
        slot = conn.execute(sql.SQL("SELECT plugin, database, {} FROM pg_replication_slots "
                                    "WHERE slot_name = %s").format(sql.SQL(failover)),
                            (request.slot_name,)).fetchone()
    pub = None
    unprotected: list[str] = []
    if request.publication_name:
        pub = conn.execute("SELECT pubupdate OR pubdelete FROM pg_publication WHERE pubname = %s",
                           (request.publication_name,)).fetchone()
        if pub is not None and request.publication:
            unprotected = identity.unprotected_in_publication(conn, request.publication)
    filters = gather_filters(conn, request, missing + not_tables)
    return Facts(
        filters=filters, server_version=conn.info.server_version, role=role, database=database, wal_level=wal_level,
        in_recovery=bool(recovery), superuser=bool(superuser), replication=bool(replication),
        managed_roles=tuple(name for name, member in managed if member),
        managed_available=tuple(name for name, _ in managed), create_on_database=bool(create),
        max_replication_slots=counts[0], slots_used=counts[1], max_wal_senders=counts[2],
        walsenders_used=counts[3], max_slot_wal_keep_mb=int(keep) if keep is not None else -1,
        idle_slot_timeout_s=_seconds(*idle), tables=tuple(tables), missing_tables=tuple(missing),
        not_tables=tuple(not_tables), slot_exists=slot is not None,
        slot_plugin=slot[0] if slot else None, slot_database=slot[1] if slot else None,
        slot_failover=slot[2] if slot else None, publication_exists=pub is not None,
        publication_writes=bool(pub[0]) if pub else True, unprotected_published=tuple(unprotected))


TRIAL = "pgfeed_preflight_trial"
_LEAVES = (
    "SELECT n.nspname || '.' || c.relname, c.relreplident, "
    "ARRAY(SELECT a.attname::text FROM pg_attribute a "
    "WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum), "
    "ARRAY(SELECT a.attname::text FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
    "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = c.oid AND CASE c.relreplident "
    "WHEN 'd' THEN i.indisprimary AND i.indimmediate WHEN 'i' THEN i.indisreplident ELSE false END "
    "ORDER BY a.attnum) "
    "FROM (SELECT relid FROM pg_partition_tree(%(oid)s::oid) WHERE isleaf UNION "
    "SELECT %(oid)s::oid) leaf JOIN pg_class c ON c.oid = leaf.relid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r' ORDER BY 1")
_IDENT = {"d": "default", "f": "full", "i": "index", "n": "nothing"}


def _trial(conn: psycopg.Connection[Any], schema: str, table: str, entry: PublishedTable,
           partition_root: bool) -> tuple[str | None, tuple[str, ...]]:
    """Create the publication of this one table with its filter and column list inside a
    transaction that is rolled back: PostgreSQL's refusal (or None), and the columns the row
    filter reads (its recorded dependencies)."""
    try:
        what = table_entry(schema, table, entry)
    except ValueError as exc:
        return str(exc), ()
    columns: tuple[str, ...] = ()
    try:
        with conn.transaction() as tx:
            conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WITH "
                                 "(publish_via_partition_root = {})").format(
                sql.Identifier(TRIAL), what, sql.SQL("true" if partition_root else "false")))
            if entry.where is not None:
                conn.execute(sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(
                    sql.Identifier(TRIAL), table_entry(schema, table, PublishedTable(entry.table, entry.where))))
                columns = tuple(r[0] for r in conn.execute(
                    "SELECT a.attname::text FROM pg_publication p JOIN pg_publication_rel r "
                    "ON r.prpubid = p.oid JOIN pg_depend d ON d.classid = 'pg_publication_rel'::regclass "
                    "AND d.objid = r.oid AND d.refclassid = 'pg_class'::regclass AND d.refobjsubid > 0 "
                    "JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid "
                    "WHERE p.pubname = %s ORDER BY a.attnum", (TRIAL,)))
            raise psycopg.Rollback(tx)
    except psycopg.Error as exc:
        return " ".join(str(exc).split("\n")[0].split()), ()
    return None, columns


def gather_filters(conn: psycopg.Connection[Any], request: Request,
                   unknown: list[str] | tuple[str, ...] = ()) -> tuple[FilterFacts, ...]:
    """For each table with a row filter or column list (a publication pgfeed creates, on
    PostgreSQL 15+): PostgreSQL's verdict on them and the replica identity of the tables it
    checks UPDATE/DELETE on. Nothing stays on the source."""
    if request.publication is not None or conn.info.server_version < FILTER_SERVER:
        return ()
    out = []
    for entry in request.filters:
        if entry.table in unknown:
            continue
        try:
            schema, table = split_table_name(entry.table)
        except ValueError:
            continue
        row = conn.execute("SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                           "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
                           (schema, table)).fetchone()
        if row is None:
            continue
        error, columns = _trial(conn, schema, table, entry, request.partition_root)
        leaves = []
        for name, ident, every, keyed in conn.execute(_LEAVES, {"oid": row[0]}).fetchall():
            identity = _IDENT.get(ident, "default")
            leaves.append(LeafIdentity(name, identity, tuple(every if identity == "full" else keyed),
                                       identity == "full" or bool(keyed)))
        out.append(FilterFacts(entry.table, error, columns, tuple(leaves)))
    return tuple(out)


def filter_findings(facts: Facts, request: Request) -> list[Finding]:
    """Row filters and column lists PostgreSQL cannot take, or that would make it refuse the
    application's UPDATE/DELETE (issue 27.5): (pure)."""
    v = facts.server_version
    out = []
    if request.filters and request.publication is None and v < FILTER_SERVER:
        names = ", ".join(f.table for f in request.filters)
        out.append(Finding("row_filter", "error", f"row filters and column lists need PostgreSQL 15 "
                           f"or later; the source runs PostgreSQL {_release(v)} ({names})",
                           "leave 'where' and 'columns' out, or upgrade the source"))
    consent = request.keyless == "identity_full"
    entries = {e.table: e for e in request.filters}
    for f in facts.filters:
        entry = entries.get(f.table)
        if f.error is not None:
            what = " and ".join(x for x in ("row filter" if entry and entry.where is not None else "",
                                            "column list" if entry and entry.columns is not None else "") if x)
            out.append(Finding("row_filter", "error", f"{f.table}: PostgreSQL refused its {what or 'entry'}: "
                               f"{f.error}", "correct the expression or the column names"))
            continue
        for leaf in f.leaves:
            full = leaf.identity == "full" or (not leaf.protected and consent)
            if not leaf.protected and not consent:
                continue  # the replica_identity check refuses it already
            on = f" (as {f.table}'s partition)" if leaf.name != f.table else ""
            if not full and f.where_columns:
                outside = [c for c in f.where_columns if c not in leaf.columns]
                if outside:
                    out.append(Finding("row_filter", "error", f"{leaf.name}{on}: the row filter reads "
                                       f"{', '.join(outside)}, outside its replica identity "
                                       f"({', '.join(leaf.columns)}): once published, PostgreSQL "
                                       "refuses every UPDATE and DELETE on it",
                                       f"ALTER TABLE {_qualified(leaf.name)} REPLICA IDENTITY FULL; "
                                       "or filter on replica identity columns only"))
            if entry is not None and entry.columns is not None:
                # PostgreSQL (15-18) refuses UPDATE/DELETE of a REPLICA IDENTITY FULL table under
                # any column list, even one naming every column (tested).
                uncovered = [c for c in leaf.columns if c not in entry.columns]
                if full:
                    out.append(Finding("column_list", "error", f"{leaf.name}{on} has (or gets) "
                                       "REPLICA IDENTITY FULL, which no column list covers: once "
                                       "published, PostgreSQL refuses every UPDATE and DELETE on it",
                                       "leave the column list out, or give the table a primary key "
                                       "(or a REPLICA IDENTITY USING INDEX) whose columns it lists"))
                elif uncovered:
                    out.append(Finding("column_list", "error", f"{leaf.name}{on}: the column list "
                                       f"leaves out {', '.join(uncovered)} of its replica identity: "
                                       "once published, PostgreSQL refuses every UPDATE and DELETE "
                                       "on it", f"add {', '.join(uncovered)} to the column list"))
    return out


def _ident(name: str) -> str:
    """A name as SQL would quote it (for the fixes shown; nothing here is executed)."""
    return name if name.isidentifier() and name.islower() and name.isascii() else '"' + name.replace('"', '""') + '"'


def _qualified(name: str) -> str:
    schema, _, table = name.partition(".")
    return f"{_ident(schema)}.{_ident(table)}"


def _release(version: int) -> str:
    return f"{version // 10000}.{version % 10000}"


def judge(facts: Facts, request: Request) -> list[Finding]:
    """Every finding for ``request`` on a source described by ``facts`` (pure)."""
    out: list[Finding] = []
    v = facts.server_version
    refusal = source_refusal(v, two_phase=request.two_phase, failover=request.failover)
    if refusal is None and request.generated_columns and v < GENERATED_SERVER:
        refusal = (f"publish_generated_columns needs PostgreSQL 18 or later; the source runs "
                   f"PostgreSQL {_release(v)}")
    allows = (f"two_phase {'yes' if v >= 150000 else 'no (15+)'}, failover "
              f"{'yes' if v >= FAILOVER_SERVER else 'no (17+)'}, row filters and column lists "
              f"{'yes' if v >= FILTER_SERVER else 'no (15+)'}, publish_generated_columns "
              f"{'yes' if v >= GENERATED_SERVER else 'no (18+)'}")
    if refusal:
        fix = (f"upgrade to PostgreSQL {OLDEST_SERVER // 10000} or later" if v < OLDEST_SERVER
               else "leave the option off, or upgrade the source")
        out.append(Finding("server_version", "error", refusal, fix))
    else:
        out.append(Finding("server_version", "ok", f"PostgreSQL {_release(v)}: {allows}"))
    owns_pub = request.publication is None
    if facts.in_recovery and owns_pub:
        out.append(Finding("standby", "error", "the source is a standby (in recovery): pgfeed cannot "
                           "create a publication there", "point the DSN at the primary"))
    if facts.wal_level == "logical":
        out.append(Finding("wal_level", "ok", "wal_level = logical"))
    else:
        out.append(Finding("wal_level", "error", f"wal_level = {facts.wal_level}: logical decoding "
                           "needs logical", "ALTER SYSTEM SET wal_level = logical; then restart "
                           "PostgreSQL"))
    out.append(_replication(facts))
    out += _publication_rights(facts, request)
    out += _tables(facts, request)
    out += filter_findings(facts, request)
    out += _ddl_capture(facts, request)
    out += _headroom(facts)
    out += _slot_risk(facts)
    out += _names(facts, request)
    return out


def _replication(facts: Facts) -> Finding:
    if facts.superuser:
        return Finding("replication", "ok", f"role {facts.role} is a superuser")
    if facts.replication:
        return Finding("replication", "ok", f"role {facts.role} has REPLICATION")
    managed = [r for r in facts.managed_roles if r in MANAGED_REPLICATION]
    if managed:
        return Finding("replication", "ok", f"role {facts.role} is a member of {managed[0]} "
                       "(the managed service's replication role)")
    grant = next((r for r in facts.managed_available if r in MANAGED_REPLICATION), None)
    fix = (f"GRANT {grant} TO {_ident(facts.role)};" if grant == "rds_replication"
           else f"ALTER ROLE {_ident(facts.role)} REPLICATION;")
    return Finding("replication", "error", f"role {facts.role} lacks REPLICATION: it cannot create "
                   "or stream a replication slot", fix)


def _publication_rights(facts: Facts, request: Request) -> list[Finding]:
    if request.publication is not None:
        if not facts.publication_exists:
            return [Finding("publication", "error", f"publication {request.publication} does not "
                            "exist on the source", f"CREATE PUBLICATION {_ident(request.publication)} "
                            "FOR TABLE ...; or leave 'publication' out for pgfeed to create one")]
        return [Finding("publication", "ok", f"publication {request.publication} exists (adopted "
                        "as it is)")]
    if request.all_tables:
        if facts.superuser:
            return [Finding("create_publication", "ok", "a superuser may create a publication FOR ALL TABLES")]
        managed = [r for r in facts.managed_roles if r in MANAGED_SUPERUSER]
        level: Level = "warning" if managed else "error"
        return [Finding("create_publication", level, f"role {facts.role} is not a superuser: a "
                        "publication FOR ALL TABLES needs one" + (f" (it is a member of {managed[0]}, "
                        "which some managed services allow)" if managed else ""),
                        "name the tables instead (--tables), or run as a superuser")]
    out = []
    if not facts.create_on_database:
        out.append(Finding("create_publication", "error", f"role {facts.role} lacks CREATE on "
                           f"database {facts.database}: it cannot create a publication",
                           f"GRANT CREATE ON DATABASE {_ident(facts.database)} TO {_ident(facts.role)};"))
    foreign = [t.name for t in facts.tables if t.named and not t.owned and not facts.superuser]
    for name in foreign:
        out.append(Finding("create_publication", "error", f"role {facts.role} does not own "
                           f"{name}: only its owner may publish it",
                           f"ALTER TABLE {_qualified(name)} OWNER TO {_ident(facts.role)};"))
    if not out:
        out.append(Finding("create_publication", "ok", f"role {facts.role} may create the publication"))
    return out


def _tables(facts: Facts, request: Request) -> list[Finding]:
    out = []
    if facts.missing_tables:
        s = "s" if len(facts.missing_tables) > 1 else ""
        out.append(Finding("tables", "error", f"unknown table{s} on the source: "
                           f"{', '.join(facts.missing_tables)}", "create it, or fix the name "
                           "(schema.table)"))
    for name in facts.not_tables:
        out.append(Finding("tables", "error", f"{name} is not a table: only tables and partitioned "
                           "tables can be published", "name a table"))
    if request.publication is not None:  # adopted: pgfeed changes nothing, but says what it sees
        for name in facts.unprotected_published:
            out.append(Finding("replica_identity", "warning", f"{name} is published by "
                               f"{request.publication} without a usable replica identity: "
                               "PostgreSQL already refuses UPDATE and DELETE on it",
                               f"ALTER TABLE {_qualified(name)} REPLICA IDENTITY FULL; or add a primary key"))
        return out
    leaves = [t for t in facts.tables if t.kind == "table"]
    unprotected = [t for t in leaves if not t.protected]
    consent = request.keyless == "identity_full"
    for t in unprotected:
        if consent and (t.owned or facts.superuser):
            out.append(Finding("replica_identity", "warning", f"{t.name}: once published, {t.effect}; pgfeed will set "
                               "REPLICA IDENTITY FULL (option keyless: identity_full), so they "
                               "keep working and each writes the whole old row to WAL"))
        elif consent:
            out.append(Finding("replica_identity", "error", f"{t.name}: {t.effect}, and role "
                               f"{facts.role} does not own it to set REPLICA IDENTITY FULL",
                               f"ALTER TABLE {_qualified(t.name)} REPLICA IDENTITY FULL; (as its owner)"))
        else:
            out.append(Finding("replica_identity", "error", f"{t.name}: once published, {t.effect}: "
                               "the application's writes would fail",
                               f"ALTER TABLE {_qualified(t.name)} REPLICA IDENTITY FULL; or add a "
                               "primary key; or option keyless: identity_full"))
    full = [t.name for t in leaves if t.identity == "full"]
    if full:
        out.append(Finding("replica_identity", "ok", f"REPLICA IDENTITY FULL ({', '.join(full[:20])}"
                           f"{', ...' if len(full) > 20 else ''}): UPDATE/DELETE work; each writes "
                           "the whole old row to WAL"))
    keyed = [t for t in leaves if t.protected and t.identity != "full"]
    if keyed:
        out.append(Finding("replica_identity", "ok", f"{len(keyed)} table(s) keyed by a primary key "
                           "or replica identity index: UPDATE/DELETE unaffected"))
    if request.all_tables:
        if consent and facts.superuser:
            out.append(Finding("new_tables", "ok", "tables created later without a primary key get "
                               "REPLICA IDENTITY FULL from the feed's event trigger"))
        elif consent:
            out.append(Finding("new_tables", "warning", "event triggers need a superuser: tables "
                               "created later without a primary key are not protected (status "
                               "lists them as unprotected_tables)",
                               "create tables with a primary key, or ALTER TABLE ... REPLICA IDENTITY FULL"))
        else:
            out.append(Finding("new_tables", "warning", "a table created later without a primary key "
                               "is published at once, and PostgreSQL then refuses UPDATE and DELETE "
                               "on it (status lists it as unprotected_tables)",
                               "create tables with a primary key, or option keyless: identity_full "
                               "(an event trigger gives them REPLICA IDENTITY FULL)"))
    return out


def _ddl_capture(facts: Facts, request: Request) -> list[Finding]:
    """Option ddl "capture" installs an event trigger, which only a superuser may create."""
    if not request.ddl:
        return []
    if facts.superuser:
        return [Finding("ddl", "ok", "DDL capture: an event trigger records each DDL command on "
                        "the feed's tables (served as op \"ddl\" events)")]
    return [Finding("ddl", "error", f"option ddl \"capture\" installs an event trigger, and "
                    f"event triggers need a superuser; role {facts.role} is not one",
                    "create the feed as a superuser, or leave option ddl off (schema changes are "
                    "then derived from Relation messages: a rename reads as a drop and an add)")]


def _headroom(facts: Facts) -> list[Finding]:
    out = []
    free = facts.max_replication_slots - facts.slots_used
    if free <= 0:
        out.append(Finding("replication_slots", "error", f"max_replication_slots = "
                           f"{facts.max_replication_slots} and {facts.slots_used} slot(s) exist: no "
                           "slot is free", f"ALTER SYSTEM SET max_replication_slots = "
                           f"{facts.slots_used + 4}; then restart PostgreSQL (or drop an unused slot)"))
    else:
        out.append(Finding("replication_slots", "ok", f"{facts.slots_used} of "
                           f"{facts.max_replication_slots} replication slots in use"))
    free = facts.max_wal_senders - facts.walsenders_used
    level: Level = "error" if free <= 0 else "ok"
    out.append(Finding("wal_senders", level, f"{facts.walsenders_used} of {facts.max_wal_senders} "
                       "WAL senders in use" + (": capture cannot connect" if free <= 0 else ""),
                       f"ALTER SYSTEM SET max_wal_senders = {facts.walsenders_used + 4}; then restart "
                       "PostgreSQL" if free <= 0 else None))
    return out


def _slot_risk(facts: Facts) -> list[Finding]:
    out = []
    if facts.max_slot_wal_keep_mb < 0:
        out.append(Finding("max_slot_wal_keep_size", "warning", "max_slot_wal_keep_size = -1: a "
                           "paused or stopped feed's slot retains WAL without bound (the source's "
                           "disk can fill)", "ALTER SYSTEM SET max_slot_wal_keep_size = '50GB'; "
                           "then SELECT pg_reload_conf(); (a bound; a slot past it is invalidated)"))
    else:
        out.append(Finding("max_slot_wal_keep_size", "warning", f"max_slot_wal_keep_size = "
                           f"{facts.max_slot_wal_keep_mb}MB: a slot that falls that far behind (a "
                           "feed paused too long) is invalidated and its changes are lost",
                           "resume paused feeds in time, or raise it: ALTER SYSTEM SET "
                           "max_slot_wal_keep_size = ...; SELECT pg_reload_conf();"))
    if facts.idle_slot_timeout_s is not None:
        if facts.idle_slot_timeout_s > 0:
            out.append(Finding("idle_replication_slot_timeout", "warning",
                               f"idle_replication_slot_timeout = {facts.idle_slot_timeout_s}s: a "
                               "paused feed's slot idle that long is invalidated at a checkpoint "
                               "and its changes are lost", "ALTER SYSTEM SET "
                               "idle_replication_slot_timeout = 0; SELECT pg_reload_conf();"))
        else:
            out.append(Finding("idle_replication_slot_timeout", "ok",
                               "idle_replication_slot_timeout = 0: idle slots are kept"))
    return out


def _names(facts: Facts, request: Request) -> list[Finding]:
    out = []
    slot = request.slot_name
    if slot and request.slot is None:
        if facts.slot_exists:
            out.append(Finding("slot", "error", f"replication slot {slot} already exists on the "
                               "source: pgfeed will not take over or drop a slot it did not create",
                               f"name it as 'slot' to adopt it, or SELECT pg_drop_replication_slot("
                               f"'{slot}'); if nothing uses it"))
        else:
            out.append(Finding("slot", "ok", f"replication slot {slot} is free to create"))
    elif slot:
        if not facts.slot_exists:
            out.append(Finding("slot", "error", f"replication slot {slot} does not exist on the "
                               "source", "create it (pgoutput), or leave 'slot' out for pgfeed to "
                               "create one"))
        elif facts.slot_plugin != "pgoutput" or facts.slot_database != facts.database:
            out.append(Finding("slot", "error", f"replication slot {slot} is not a pgoutput slot of "
                               f"database {facts.database} (plugin {facts.slot_plugin}, database "
                               f"{facts.slot_database})", "name a pgoutput slot of this database"))
        elif request.failover and not facts.slot_failover:
            out.append(Finding("slot", "error", f"replication slot {slot} is not a failover slot",
                               "ALTER_REPLICATION_SLOT ... (FAILOVER true) on the source, or leave "
                               "option failover off"))
        else:
            out.append(Finding("slot", "ok", f"replication slot {slot} exists (adopted)"))
    pub = request.publication_name
    if pub and request.publication is None:
        if facts.publication_exists:
            out.append(Finding("publication", "error", f"publication {pub} already exists on the "
                               "source: pgfeed will not take over or drop a publication it did not "
                               "create", f"name it as 'publication' to adopt it, or DROP "
                               f"PUBLICATION {_ident(pub)}; if nothing uses it"))
        else:
            out.append(Finding("publication", "ok", f"publication {pub} is free to create"))
    return out


def run(conn: psycopg.Connection[Any], request: Request) -> list[Finding]:
    """``judge(gather(conn, request), request)``."""
    return judge(gather(conn, request), request)


def render(findings: list[Finding]) -> str:
    """A plain table for a terminal: level, check, message, and the fix under it."""
    marks = {"ok": "ok", "warning": "WARN", "error": "ERROR"}
    width = max((len(f.check) for f in findings), default=5)
    lines = []
    for f in findings:
        lines.append(f"{marks[f.level]:<5}  {f.check:<{width}}  {f.message}")
        if f.fix and f.level != "ok":
            lines.append(f"{'':<5}  {'':<{width}}  fix: {f.fix}")
    errors = sum(f.level == "error" for f in findings)
    warnings = sum(f.level == "warning" for f in findings)
    lines.append(f"{errors} error(s), {warnings} warning(s)")
    return "\n".join(lines)
