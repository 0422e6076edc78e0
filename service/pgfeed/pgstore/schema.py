"""The store's schema: created and migrated by pgfeed, its version checked at every start.

Every table lives in one schema (``pgfeed`` unless configured), named through ``psycopg.sql``
identifiers. The version sits in ``meta``; a store written by a newer pgfeed is refused, since
this one cannot know what the newer layout means.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgfeed.changelog.base import ChangeLogError

__all__ = ["SCHEMA_VERSION", "channel", "ensure_schema", "table"]

SCHEMA_VERSION = 3

# Each migration brings the store from the version before it to its index + 1. Statements use
# {s} for the schema identifier.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE {s}.feed (
            name text PRIMARY KEY,
            spec jsonb NOT NULL,             -- FeedSpec.to_dict(): holds the source DSN
            paused boolean NOT NULL DEFAULT false,
            updated_at timestamptz NOT NULL DEFAULT now())""",
        # One row per feed: its capturing leader. epoch grows at every acquisition and is the
        # fencing token every append checks (see changelog.PgChangeLog.append).
        """CREATE TABLE {s}.lease (
            feed text PRIMARY KEY,
            holder text NOT NULL,
            epoch bigint NOT NULL,
            since timestamptz NOT NULL,
            expires_at timestamptz NOT NULL)""",
        """CREATE TABLE {s}.replica (
            id text PRIMARY KEY,
            started_at timestamptz NOT NULL,
            heartbeat_at timestamptz NOT NULL)""",
        """CREATE TABLE {s}.log_state (
            feed text PRIMARY KEY,
            head bigint NOT NULL DEFAULT 0,          -- newest commit_lsn ever stored
            confirmed_lsn bigint NOT NULL DEFAULT 0,
            trimmed_lsn bigint NOT NULL DEFAULT 0,   -- newest commit_lsn ever removed
            forced_trims bigint NOT NULL DEFAULT 0,
            txn_total bigint NOT NULL DEFAULT 0,     -- running totals over everything appended
            change_total bigint NOT NULL DEFAULT 0,
            byte_total bigint NOT NULL DEFAULT 0)""",
        """CREATE TABLE {s}.txn (
            feed text NOT NULL,
            commit_lsn bigint NOT NULL,
            xid bigint NOT NULL,
            end_lsn bigint NOT NULL,
            commit_ts bigint NOT NULL,
            origin text,
            change_count bigint NOT NULL,
            payload_bytes bigint NOT NULL,
            ordinal bigint NOT NULL,        -- running totals including this transaction
            cum_changes bigint NOT NULL,
            cum_bytes bigint NOT NULL,
            epoch bigint NOT NULL,          -- lease epoch of the writer: names its chunks
            chunk_count integer NOT NULL,
            PRIMARY KEY (feed, commit_lsn))""",
        # Payload pieces are keyed by the writer's epoch too: a deposed leader paused in the
        # middle of its COPY holds no key a new leader's pieces could wait on.
        """CREATE TABLE {s}.chunk (
            feed text NOT NULL,
            commit_lsn bigint NOT NULL,
            epoch bigint NOT NULL,
            piece integer NOT NULL,
            data bytea NOT NULL,
            PRIMARY KEY (feed, commit_lsn, epoch, piece))""",
        # Payloads are pgoutput frames the store cannot shrink much: no compression on the way in.
        "ALTER TABLE {s}.chunk ALTER COLUMN data SET STORAGE EXTERNAL",
        """CREATE TABLE {s}.schema_frame (
            feed text NOT NULL,
            commit_lsn bigint NOT NULL,
            n integer NOT NULL,
            frame bytea NOT NULL,
            PRIMARY KEY (feed, commit_lsn, n))""",
        """CREATE TABLE {s}.consumer (
            feed text NOT NULL,
            name text NOT NULL,
            lsn bigint NOT NULL,
            seq bigint,
            acked_at bigint NOT NULL,       -- last acknowledgement, µs since 2000-01-01
            PRIMARY KEY (feed, name))""",
    ),
    # Backfills (service/pgfeed/backfill): a header per backfill, progress per part, written by
    # ``append`` in the same transaction as the chunk that made it.
    (
        """CREATE TABLE {s}.backfill (
            feed text NOT NULL,
            id text NOT NULL,
            ordinal bigserial,              -- creation order
            header text NOT NULL,           -- BackfillRecord.header(): JSON
            PRIMARY KEY (feed, id))""",
        """CREATE TABLE {s}.backfill_part (
            feed text NOT NULL,
            backfill_id text NOT NULL,
            part integer NOT NULL,
            tbl text NOT NULL,
            lower text,
            upper text,
            estimate bigint NOT NULL,
            last_key text,
            rows bigint NOT NULL,
            chunks bigint NOT NULL,
            done boolean NOT NULL,
            PRIMARY KEY (feed, backfill_id, part))""",
    ),
    # The leader's capture counters (rate, totals, state, last error), written at each renewal
    # and kept when the lease goes: every replica's status shows them (leadership.capture_report).
    (
        "ALTER TABLE {s}.lease ADD COLUMN stats jsonb",
    ),
)

assert len(_MIGRATIONS) == SCHEMA_VERSION


def table(schema: str, name: str) -> sql.Identifier:
    """A store table, schema-qualified and quoted."""
    return sql.Identifier(schema, name)


def ensure_schema(conn: psycopg.Connection, schema: str) -> int:
    """Create or migrate the store in ``schema`` (under an advisory lock, so replicas starting
    together do it once); return the version found before. Refuses a newer version."""
    s = sql.Identifier(schema)
    with conn.transaction():
        # Serialise replicas migrating the same schema (key: the schema's name).
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"pgfeed-store:{schema}",))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s))
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {}.meta (id integer PRIMARY KEY CHECK (id = 1), "
                             "version integer NOT NULL)").format(s))
        row = conn.execute(sql.SQL("SELECT version FROM {}.meta").format(s)).fetchone()
        found = 0 if row is None else int(row[0])
        if found > SCHEMA_VERSION:
            raise ChangeLogError(
                f"the pgfeed store in schema {schema!r} has version {found}, newer than this pgfeed "
                f"understands ({SCHEMA_VERSION}): upgrade pgfeed, or use another schema")
        for version in range(found, SCHEMA_VERSION):
            for statement in _MIGRATIONS[version]:
                conn.execute(sql.SQL(statement).format(s=s))
        if found == 0:
            conn.execute(sql.SQL("INSERT INTO {}.meta VALUES (1, %s)").format(s), (SCHEMA_VERSION,))
        elif found < SCHEMA_VERSION:
            conn.execute(sql.SQL("UPDATE {}.meta SET version = %s").format(s), (SCHEMA_VERSION,))
    return found


def channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of the store in ``schema`` (one per store, shared by its feeds):
    ``pg_notify(channel, …)`` takes it as text, ``LISTEN`` as ``sql.Identifier(channel)``."""
    return f"{schema}_events"[:63]
