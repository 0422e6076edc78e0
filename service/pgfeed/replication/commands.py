"""Replication commands (pure): ``START_REPLICATION`` / ``CREATE_REPLICATION_SLOT`` composed with
``psycopg.sql`` (the options and the protocol version a server speaks are ``session``'s).

Names are never pasted: slot names are ``sql.Identifier``, option values ``ReplicationLiteral``
(a ``sql.Composable``), and ``publication_names`` is such a literal holding a comma list of quoted
identifiers (pgoutput splits it with SplitIdentifierString, so a publication named ``a"b,c``
survives).
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import sql
from psycopg.abc import AdaptContext

from pgfeed.replication import session
from pgfeed.replication.session import STREAMING_MODES, max_proto_version, streaming_mode
from pgfeed_client._cursor import format_lsn

__all__ = [
    "FAILOVER_SERVER",
    "OLDEST_SERVER",
    "STREAMING_MODES",
    "ReplicationLiteral",
    "create_replication_slot",
    "identify_system",
    "max_proto_version",
    "publication_names",
    "source_refusal",
    "start_replication",
    "streaming_mode",
]

_MAX_LSN = (1 << 64) - 1


class ReplicationLiteral(sql.Composable):
    """A string literal of the walsender's command grammar (repl_scanner.l): ``'...'`` with
    quotes doubled and every other character, backslash included, taken as is.

    ``sql.Literal`` cannot be used there: for a value holding a backslash it writes the escape
    string form ``E'...'``, which that grammar does not have (a syntax error).
    """

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"a replication literal is a str, not {type(value).__name__}")
        if "\0" in value:
            raise ValueError("a replication literal cannot hold a NUL character")
        super().__init__(value)

    def as_bytes(self, context: AdaptContext | None = None) -> bytes:
        conn = context.connection if context is not None else None
        encoding = conn.info.encoding if conn is not None else "utf-8"
        value: str = self._obj
        return b"'" + value.replace("'", "''").encode(encoding) + b"'"


# The oldest PostgreSQL pgfeed captures from (server_version_num): 14 brought pgoutput v2
# (streaming, logical messages), which the feed options rely on. The suite tests 14, 15 and 18.
OLDEST_SERVER = 140000
# Slots synchronized to standbys (``FAILOVER``, ``sync_replication_slots``) came with 17.
FAILOVER_SERVER = 170000


def source_refusal(server_version: int, *, two_phase: bool, failover: bool = False) -> str | None:
    """Why a source cannot carry a feed with these options (None: it can). Asked at feed creation,
    before anything is created on the source."""
    release = f"{server_version // 10000}.{server_version % 10000}"
    if server_version < OLDEST_SERVER:
        return (f"the source runs PostgreSQL {release}; pgfeed needs PostgreSQL "
                f"{OLDEST_SERVER // 10000} or later")
    if two_phase and max_proto_version(server_version) < 3:
        return f"two_phase needs PostgreSQL 15 or later; the source runs PostgreSQL {release}"
    if failover and server_version < FAILOVER_SERVER:
        return (f"failover needs PostgreSQL 17 or later (slots synchronized to standbys); the "
                f"source runs PostgreSQL {release}")
    return None


def identify_system() -> sql.SQL:
    return sql.SQL("IDENTIFY_SYSTEM")


def publication_names(publications: Sequence[str]) -> sql.Composable:
    """The ``publication_names`` option value: ``'"a","b"'`` as one literal."""
    return ReplicationLiteral(session.publication_list(publications))


def start_replication(slot: str, start_lsn: int, *, proto_version: int,
                      publications: Sequence[str], streaming: str = "off", messages: bool = False,
                      two_phase: bool = False) -> sql.Composed:
    """``START_REPLICATION SLOT "slot" LOGICAL X/Y (...)`` with ``session.pgoutput_options``
    (which says what each protocol version may be sent, and refuses what it lacks)."""
    if not 0 <= start_lsn <= _MAX_LSN:
        raise ValueError(f"start LSN {start_lsn} is outside 0..2**64-1")
    options = session.pgoutput_options(proto_version=proto_version, publications=publications,
                                       streaming=streaming, messages=messages, two_phase=two_phase)
    return sql.SQL("START_REPLICATION SLOT {} LOGICAL {} ({})").format(
        sql.Identifier(slot),
        sql.SQL(format_lsn(start_lsn)),  # generated from an int: X/Y hex, nothing to quote
        sql.SQL(", ").join(sql.SQL("{} {}").format(sql.SQL(k), ReplicationLiteral(v))
                           for k, v in options),  # fixed names
    )


def create_replication_slot(slot: str, *, snapshot: str = "nothing", two_phase: bool = False,
                            failover: bool = False, server_version: int = 150000) -> sql.Composed:
    """``CREATE_REPLICATION_SLOT "slot" LOGICAL pgoutput (SNAPSHOT '...'[, TWO_PHASE][, FAILOVER])``.

    ``snapshot``: ``"export"`` (the slot's consistent snapshot is exported for
    ``SET TRANSACTION SNAPSHOT`` while the creating connection stays idle) or ``"nothing"``.
    PostgreSQL 14 only knows the older spelling (``EXPORT_SNAPSHOT``/``NOEXPORT_SNAPSHOT``) and no
    two-phase slots; ``FAILOVER`` (a slot standbys with ``sync_replication_slots`` keep a copy of)
    needs PostgreSQL 17.
    """
    if failover and server_version < FAILOVER_SERVER:
        raise ValueError("failover slots need PostgreSQL 17 or later")
    if snapshot not in ("export", "nothing"):
        raise ValueError(f"snapshot must be 'export' or 'nothing', got {snapshot!r}")
    head = sql.SQL("CREATE_REPLICATION_SLOT {} LOGICAL pgoutput").format(sql.Identifier(slot))
    if server_version < 150000:
        if two_phase:
            raise ValueError("two-phase slots need PostgreSQL 15 or later")
        word = "EXPORT_SNAPSHOT" if snapshot == "export" else "NOEXPORT_SNAPSHOT"
        return sql.SQL("{} {}").format(head, sql.SQL(word))
    options: list[sql.Composable] = [sql.SQL("SNAPSHOT {}").format(ReplicationLiteral(snapshot))]
    if two_phase:
        options.append(sql.SQL("TWO_PHASE"))
    if failover:
        options.append(sql.SQL("FAILOVER"))
    return sql.SQL("{} ({})").format(head, sql.SQL(", ").join(options))
