"""DDL capture on the source (feed option ``ddl: "capture"``): a feed-owned table that an event
trigger fills with one row per DDL command touching a table of the feed, published in a
feed-owned publication of its own (``publish = 'insert'``) that the feed streams beside its main
one. A row is a row change: it sits at the command's exact position in its transaction, goes
away with a rolled-back savepoint (streamed or not), and nothing it holds needs a logical
message. The reader serves each row as an ``op: "ddl"`` event; capture turns each into a ``ddl``
schema annotation (``replication.schemanotes``).

What the feed installs (superuser only: event triggers need one), in the creation's
transaction, dropped with the feed:

- schema ``pgfeed`` (when it does not exist; dropped with the feed only if it made it and it
  is empty), table ``pgfeed."<feed>_ddl"``, function ``pgfeed."<feed>_ddl_columns"(oid)`` (a
  table's columns as JSON), function ``pgfeed."<feed>_ddl_capture"()`` (SECURITY DEFINER) and
  event trigger ``pgfeed_<feed>_ddl`` on ``ddl_command_end``, publication ``pgfeed_<feed>_ddl``;
- one baseline row per table of the feed (in the creation's transaction, before the slot
  exists, so never served): the trigger compares a table's columns by ``attnum`` with its last
  row to tell a rename (``previous_name``) and an added column (``added``).

The trigger never makes the application's DDL fail: each command's capture runs in its own
exception block, and an error is a ``WARNING``. Every identifier reaches SQL through
``psycopg.sql``.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from pgfeed.replication.schemanotes import DDL_SCHEMA, ddl_table_name

__all__ = ["DDL_SCHEMA", "drop_capture", "install_capture", "publication_name", "trigger_name"]


def trigger_name(feed: str) -> str:
    """The feed's event trigger (at most 63 bytes: feed names have at most 48)."""
    return f"pgfeed_{feed}_ddl"


def publication_name(feed: str) -> str:
    """The feed's publication of its DDL table."""
    return f"pgfeed_{feed}_ddl"


# A table's columns after a command, in attnum order: what a DDL row's ``columns`` holds (the
# trigger adds previous_name / added). Text forms follow the function's pinned settings.
_COLUMNS_BODY = """
SELECT coalesce(jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
    'attnum', a.attnum, 'name', a.attname, 'type', format_type(a.atttypid, a.atttypmod),
    'type_oid', a.atttypid::int8, 'not_null', a.attnotnull,
    'default', pg_get_expr(ad.adbin, ad.adrelid),
    'generated', nullif(a.attgenerated::text, ''), 'identity', nullif(a.attidentity::text, ''),
    'missing', CASE WHEN a.atthasmissing THEN (a.attmissingval::text::text[])[1] END))
    ORDER BY a.attnum), '[]'::jsonb)
FROM pg_attribute a LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
"""

# {table}: the DDL table, {columns}: the columns function, quoted; {pub}: the main publication's
# name as a literal. One exception block per command: a failure (the DDL table dropped or made
# unwritable, anything) warns and the application's DDL goes on.
_CAPTURE_BODY = """
DECLARE
  cmd record;
  prev record;
  cols jsonb;
  sch text;
  tab text;
  oldn text;
  newn text;
BEGIN
  FOR cmd IN SELECT * FROM pg_event_trigger_ddl_commands()
             WHERE classid = 'pg_class'::regclass LOOP
    BEGIN
      SELECT n.nspname, c.relname INTO sch, tab FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = cmd.objid AND c.relkind IN ('r', 'p') AND c.relpersistence = 'p'
          AND c.oid IS DISTINCT FROM to_regclass({table_text});
      IF tab IS NULL THEN CONTINUE; END IF;
      IF NOT EXISTS (SELECT 1 FROM pg_publication p WHERE p.pubname = {pub} AND p.puballtables)
         AND NOT EXISTS (SELECT 1 FROM pg_publication_tables pt
                         JOIN pg_namespace n ON n.nspname = pt.schemaname
                         JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
                         WHERE pt.pubname = {pub}
                           AND (c.oid = cmd.objid OR c.oid IN
                                (SELECT relid FROM pg_partition_ancestors(cmd.objid)))) THEN
        CONTINUE;
      END IF;
      cols := {columns}(cmd.objid);
      SELECT d.schema_name, d.table_name, d.columns INTO prev FROM {table} d
        WHERE d.table_oid = cmd.objid ORDER BY d.id DESC LIMIT 1;
      oldn := NULL;
      newn := NULL;
      IF prev.columns IS NOT NULL THEN
        SELECT coalesce(jsonb_agg(c.v || CASE
                 WHEN p.v IS NULL THEN '{{"added": true}}'::jsonb
                 WHEN p.v->>'name' <> c.v->>'name' THEN jsonb_build_object('previous_name', p.v->>'name')
                 ELSE '{{}}'::jsonb END ORDER BY (c.v->>'attnum')::int), '[]'::jsonb) INTO cols
          FROM jsonb_array_elements(cols) AS c(v)
          LEFT JOIN jsonb_array_elements(prev.columns) AS p(v) ON (p.v->>'attnum') = (c.v->>'attnum');
        IF cmd.object_type = 'table column' AND cmd.objsubid > 0 THEN
          SELECT c.v->>'previous_name', c.v->>'name' INTO oldn, newn
            FROM jsonb_array_elements(cols) AS c(v)
            WHERE (c.v->>'attnum')::int = cmd.objsubid AND c.v ? 'previous_name';
        ELSIF (prev.schema_name, prev.table_name) IS DISTINCT FROM (sch, tab) THEN
          oldn := prev.schema_name || '.' || prev.table_name;
          newn := sch || '.' || tab;
        END IF;
      ELSIF cmd.command_tag IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO') THEN
        SELECT coalesce(jsonb_agg(c.v || '{{"added": true}}'::jsonb ORDER BY (c.v->>'attnum')::int),
                        '[]'::jsonb) INTO cols FROM jsonb_array_elements(cols) AS c(v);
      END IF;
      INSERT INTO {table} (command, object_type, object, table_oid, schema_name, table_name,
                           old_name, new_name, columns)
        VALUES (cmd.command_tag, cmd.object_type, cmd.object_identity, cmd.objid, sch, tab,
                oldn, newn, cols);
    EXCEPTION WHEN OTHERS THEN
      RAISE WARNING 'pgfeed: feed {feed_text} could not capture % on %: % (the command itself went on)',
        cmd.command_tag, cmd.object_identity, SQLERRM;
    END;
  END LOOP;
EXCEPTION WHEN OTHERS THEN
  RAISE WARNING 'pgfeed: feed {feed_text} could not capture DDL: % (the command itself went on)', SQLERRM;
END
"""

# The function's settings pin the text forms of missing values and defaults to the replication
# session's (``session.SETTINGS``), whatever the application's session says.
_PINNED = ("SET search_path = pg_catalog, pg_temp SET datestyle = 'ISO' SET timezone = 'UTC' "
           "SET extra_float_digits = 3 SET intervalstyle = 'postgres' SET bytea_output = 'hex'")


def _names(feed: str) -> tuple[sql.Identifier, sql.Identifier, sql.Identifier, sql.Identifier,
                                sql.Identifier]:
    table = ddl_table_name(feed)
    return (sql.Identifier(DDL_SCHEMA, table), sql.Identifier(DDL_SCHEMA, f"{table}_columns"),
            sql.Identifier(DDL_SCHEMA, f"{table}_capture"), sql.Identifier(trigger_name(feed)),
            sql.Identifier(publication_name(feed)))


def install_capture(conn: psycopg.Connection[Any], feed: str, publication: str) -> bool:
    """Create the feed's DDL table, functions, event trigger and publication, and a baseline row
    for each table ``publication`` holds (in the caller's transaction). Returns whether it
    created schema ``pgfeed``."""
    table, columns, capture, trigger, pub = _names(feed)
    made_schema = conn.execute("SELECT to_regnamespace(%s) IS NULL", (DDL_SCHEMA,)).fetchone()
    created = bool(made_schema and made_schema[0])
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(DDL_SCHEMA)))
    conn.execute(sql.SQL(
        "CREATE TABLE {} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, command text NOT "
        "NULL, object_type text, object text, table_oid oid NOT NULL, schema_name text NOT NULL, "
        "table_name text NOT NULL, old_name text, new_name text, columns jsonb NOT NULL, "
        "at timestamptz NOT NULL DEFAULT now())").format(table))
    conn.execute(sql.SQL("REVOKE ALL ON {} FROM PUBLIC").format(table))
    conn.execute(sql.SQL("CREATE FUNCTION {}(oid) RETURNS jsonb LANGUAGE sql STABLE {} AS {}")
                 .format(columns, sql.SQL(_PINNED), sql.Literal(_COLUMNS_BODY)))
    body = _CAPTURE_BODY.format(
        table=table.as_string(conn), columns=columns.as_string(conn),
        table_text=sql.Literal(table.as_string(conn)).as_string(conn),
        pub=sql.Literal(publication).as_string(conn), feed_text=feed.replace("'", "''"))
    conn.execute(sql.SQL("CREATE FUNCTION {}() RETURNS event_trigger LANGUAGE plpgsql SECURITY "
                         "DEFINER {} AS {}").format(capture, sql.SQL(_PINNED), sql.Literal(body)))
    conn.execute(sql.SQL("CREATE EVENT TRIGGER {} ON ddl_command_end EXECUTE FUNCTION {}()")
                 .format(trigger, capture))
    conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WITH (publish = 'insert')")
                 .format(pub, table))
    baseline(conn, feed, publication)
    return created


def baseline(conn: psycopg.Connection[Any], feed: str, publication: str,
             tables: list[tuple[str, str]] | None = None) -> None:
    """A baseline row for each table of ``publication`` (or of ``tables``, ``(schema, table)``
    pairs) that has no row yet: the columns the trigger compares its first capture with."""
    table, columns, _capture, _trigger, _pub = _names(feed)
    everything = conn.execute("SELECT puballtables FROM pg_publication WHERE pubname = %s",
                              (publication,)).fetchone()
    if tables is not None:
        source = sql.SQL("SELECT c.oid FROM unnest(%s::text[], %s::text[]) AS w(s, r) JOIN "
                         "pg_namespace n ON n.nspname = w.s JOIN pg_class c ON c.relnamespace = "
                         "n.oid AND c.relname = w.r")
        params: tuple[Any, ...] = ([s for s, _ in tables], [t for _, t in tables])
    elif everything and everything[0]:
        source = sql.SQL("SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = "
                         "c.relnamespace WHERE c.relkind IN ('r', 'p') AND c.relpersistence = 'p' "
                         "AND c.oid >= 16384 AND n.nspname NOT IN ('pg_catalog', "
                         "'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%%'")
        params = ()
    else:
        source = sql.SQL("SELECT c.oid FROM pg_publication_tables pt JOIN pg_namespace n ON "
                         "n.nspname = pt.schemaname JOIN pg_class c ON c.relnamespace = n.oid AND "
                         "c.relname = pt.tablename WHERE pt.pubname = %s")
        params = (publication,)
    conn.execute(sql.SQL(
        "INSERT INTO {table} (command, object_type, object, table_oid, schema_name, table_name, "
        "columns) SELECT 'pgfeed baseline', 'table', n.nspname || '.' || c.relname, c.oid, "
        "n.nspname, c.relname, {columns}(c.oid) FROM ({source}) AS s JOIN pg_class c ON "
        "c.oid = s.oid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid <> {table_text}"
        "::regclass AND NOT EXISTS (SELECT 1 FROM {table} d WHERE d.table_oid = c.oid)").format(
            table=table, columns=columns, source=source,
            table_text=sql.Literal(table.as_string(conn))), params)


def drop_capture(conn: psycopg.Connection[Any], feed: str, drop_schema: bool = False) -> None:
    """Drop what ``install_capture`` made (what is left of it), and schema ``pgfeed`` when the
    feed made it and nothing else is in it."""
    table, columns, capture, trigger, pub = _names(feed)
    with conn.transaction():
        conn.execute(sql.SQL("DROP EVENT TRIGGER IF EXISTS {}").format(trigger))
        conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(pub))
        conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {}()").format(capture))
        conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {}(oid)").format(columns))
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
    if drop_schema:
        try:
            with conn.transaction():
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {}").format(sql.Identifier(DDL_SCHEMA)))
        except psycopg.errors.DependentObjectsStillExist:
            pass  # another feed's (or anything else's) objects live there
