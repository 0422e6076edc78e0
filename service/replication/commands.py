"""Replication commands (pure): the pgoutput protocol version a server speaks, and
``START_REPLICATION`` / ``CREATE_REPLICATION_SLOT`` composed with ``psycopg.sql``.

Names are never pasted: slot names are ``sql.Identifier``, option values ``ReplicationLiteral``
(a ``sql.Composable``), and ``publication_names`` is such a literal holding a comma list of quoted
identifiers (pgoutput splits it with SplitIdentifierString, so a publication named ``a"b,c``
survives).
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import sql
from psycopg.abc import AdaptContext

from clients._cursor import format_lsn

__all__ = [
    "OLDEST_SERVER",
    "STREAMING_MODES",
    "ReplicationLiteral",
    "create_replication_slot",
    "identify_system",
    "max_proto_version",
    "publication_names",
    "source_refusal",
    "start_replication",
]

STREAMING_MODES = ("off", "on", "parallel")
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


def max_proto_version(server_version: int) -> int:
    """Highest pgoutput ``proto_version`` of a server (``server_version_num``, e.g. 180001):
    before 14: 1; 14: 2 (streaming); 15: 3 (two-phase); 16+: 4 (parallel streaming)."""
    if server_version >= 160000:
        return 4
    if server_version >= 150000:
        return 3
    if server_version >= 140000:
        return 2
    return 1


# The oldest PostgreSQL pgfeed captures from (server_version_num): 14 brought pgoutput v2
# (streaming, logical messages), which the feed options rely on. The suite tests 14, 15 and 18.
OLDEST_SERVER = 140000


def source_refusal(server_version: int, *, two_phase: bool) -> str | None:
    """Why a source cannot carry a feed with these options (None: it can). Asked at feed creation,
    before anything is created on the source."""
    release = f"{server_version // 10000}.{server_version % 10000}"
    if server_version < OLDEST_SERVER:
        return (f"the source runs PostgreSQL {release}; pgfeed needs PostgreSQL "
                f"{OLDEST_SERVER // 10000} or later")
    if two_phase and max_proto_version(server_version) < 3:
        return f"two_phase needs PostgreSQL 15 or later; the source runs PostgreSQL {release}"
    return None


def identify_system() -> sql.SQL:
    return sql.SQL("IDENTIFY_SYSTEM")


def publication_names(publications: Sequence[str]) -> sql.Composable:
    """The ``publication_names`` option value: ``'"a","b"'`` as one literal."""
    if isinstance(publications, str):
        raise TypeError("publications must be a sequence of names, not one string")
    if not publications:
        raise ValueError("at least one publication is needed")
    quoted = []
    for name in publications:
        if not name:
            raise ValueError("a publication name cannot be empty")
        quoted.append(sql.Identifier(name).as_string())  # "..." with "" doubling: no context needed
    return ReplicationLiteral(",".join(quoted))


def _bool(value: bool) -> ReplicationLiteral:
    return ReplicationLiteral("true" if value else "false")


def start_replication(slot: str, start_lsn: int, *, proto_version: int,
                      publications: Sequence[str], streaming: str = "off", messages: bool = False,
                      two_phase: bool = False) -> sql.Composed:
    """``START_REPLICATION SLOT "slot" LOGICAL X/Y (...)`` for pgoutput.

    Options are sent only where the protocol version has them (so a PostgreSQL 13 source is not
    sent options it would reject): ``streaming`` needs v2+ (``parallel`` v4+), ``two_phase`` v3+,
    ``messages`` and ``binary`` v2+ (PostgreSQL 14). ``binary`` is always off: capture stores text
    tuples. Asking for a feature the version lacks is a ValueError, not a silent downgrade.
    """
    if not 1 <= proto_version <= 4:
        raise ValueError(f"proto_version must be 1..4, got {proto_version}")
    if not 0 <= start_lsn <= _MAX_LSN:
        raise ValueError(f"start LSN {start_lsn} is outside 0..2**64-1")
    if streaming not in STREAMING_MODES:
        raise ValueError(f"streaming must be one of {', '.join(STREAMING_MODES)}, got {streaming!r}")
    if streaming == "on" and proto_version < 2:
        raise ValueError("streaming needs proto_version 2 or later (PostgreSQL 14+)")
    if streaming == "parallel" and proto_version < 4:
        raise ValueError("streaming 'parallel' needs proto_version 4 (PostgreSQL 16+)")
    if two_phase and proto_version < 3:
        raise ValueError("two_phase needs proto_version 3 or later (PostgreSQL 15+)")
    if messages and proto_version < 2:
        raise ValueError("messages need proto_version 2 or later (PostgreSQL 14+)")
    options: list[tuple[str, sql.Composable]] = [
        ("proto_version", ReplicationLiteral(str(proto_version))),
        ("publication_names", publication_names(publications)),
    ]
    if proto_version >= 2:
        options += [("streaming", ReplicationLiteral(streaming)), ("messages", _bool(messages)),
                    ("binary", _bool(False))]
    if proto_version >= 3:
        options.append(("two_phase", _bool(two_phase)))
    return sql.SQL("START_REPLICATION SLOT {} LOGICAL {} ({})").format(
        sql.Identifier(slot),
        sql.SQL(format_lsn(start_lsn)),  # generated from an int: X/Y hex, nothing to quote
        sql.SQL(", ").join(sql.SQL("{} {}").format(sql.SQL(k), v) for k, v in options),  # fixed names
    )


def create_replication_slot(slot: str, *, snapshot: str = "nothing", two_phase: bool = False,
                            server_version: int = 150000) -> sql.Composed:
    """``CREATE_REPLICATION_SLOT "slot" LOGICAL pgoutput (SNAPSHOT '...'[, TWO_PHASE])``.

    ``snapshot``: ``"export"`` (the slot's consistent snapshot is exported for
    ``SET TRANSACTION SNAPSHOT`` while the creating connection stays idle) or ``"nothing"``.
    PostgreSQL 14 only knows the older spelling (``EXPORT_SNAPSHOT``/``NOEXPORT_SNAPSHOT``) and no
    two-phase slots.
    """
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
    return sql.SQL("{} ({})").format(head, sql.SQL(", ").join(options))
