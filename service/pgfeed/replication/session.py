"""The replication session (pure): the settings and pgoutput options a feed's walsender connection
and ``pgfeed peek`` share, defined once so both decode the same text forms the same way.

pgoutput sends values in their text form, written by the decoding session's output functions;
the decoder and transcoders assume these settings (``decoding/values.py``, ``service/pgfeed/types``,
``encoding/transcode.py``). They come after the DSN's own ``options``, so a user's
``-c bytea_output=escape`` (or one set on the role or database) cannot change what is served.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "SETTINGS",
    "STREAMING_MODES",
    "connection_options",
    "max_proto_version",
    "pgoutput_options",
    "publication_list",
    "streaming_mode",
]

SETTINGS: tuple[tuple[str, str], ...] = (
    ("datestyle", "ISO"),  # dates and timestamps as YYYY-MM-DD HH:MM:SS
    ("timezone", "UTC"),  # timestamptz with +00
    ("extra_float_digits", "3"),  # floats in their shortest exact form
    ("intervalstyle", "postgres"),  # what service/pgfeed/types/interval.py parse_interval reads
    ("bytea_output", "hex"),  # \x... (composites and ranges holding bytea keep this text too)
)
STREAMING_MODES = ("off", "on", "parallel")


def connection_options(dsn_options: str | None = None) -> str:
    """The libpq ``options`` of a replication session: the DSN's own, then ``SETTINGS``."""
    pinned = " ".join(f"-c {name}={value}" for name, value in SETTINGS)
    return f"{dsn_options} {pinned}" if dsn_options else pinned


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


def publication_list(publications: Sequence[str]) -> str:
    """The ``publication_names`` value: ``"a","b"`` (quoted identifiers, ``""`` doubling), which
    pgoutput splits with SplitIdentifierString, so a publication named ``a"b,c`` survives."""
    if isinstance(publications, str):
        raise TypeError("publications must be a sequence of names, not one string")
    if not publications:
        raise ValueError("at least one publication is needed")
    quoted = []
    for name in publications:
        if not name:
            raise ValueError("a publication name cannot be empty")
        quoted.append('"' + name.replace('"', '""') + '"')
    return ",".join(quoted)


def streaming_mode(requested: bool, *, messages: bool, proto_version: int) -> str:
    """The ``streaming`` a feed asks the walsender for: ``on`` only if requested, the protocol has
    it (v2+), and the feed does not take logical messages.

    In a streamed transaction pgoutput labels a transactional message with the top-level xid even
    when a subtransaction emitted it (pgoutput.c, pgoutput_message: ``xid = txn->xid``), so that
    subtransaction's Stream Abort cannot take the message back, and nothing on the wire tells which
    subtransaction it was. Whole transactions (streaming off) never carry a rolled-back one: the
    walsender drops it with its subtransaction before sending (docs/design.md, "Logical messages
    turn streaming off").
    """
    return "on" if requested and not messages and proto_version >= 2 else "off"


def pgoutput_options(*, proto_version: int, publications: Sequence[str], streaming: str = "off",
                     messages: bool = False, two_phase: bool = False) -> list[tuple[str, str]]:
    """pgoutput's option names and values, for ``START_REPLICATION`` and for
    ``pg_logical_slot_peek_binary_changes`` alike.

    Options are sent only where the protocol version has them (so a PostgreSQL 13 source is not
    sent options it would reject): ``streaming`` needs v2+ (``parallel`` v4+), ``two_phase`` v3+,
    ``messages`` and ``binary`` v2+ (PostgreSQL 14). ``binary`` is always off: pgfeed decodes
    text tuples. Asking for a feature the version lacks is a ValueError, not a silent downgrade.
    """
    if not 1 <= proto_version <= 4:
        raise ValueError(f"proto_version must be 1..4, got {proto_version}")
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
    options = [("proto_version", str(proto_version)),
               ("publication_names", publication_list(publications))]
    if proto_version >= 2:
        options += [("streaming", streaming), ("messages", _bool(messages)),
                    ("binary", "false")]
    if proto_version >= 3:
        options.append(("two_phase", _bool(two_phase)))
    return options


def _bool(value: bool) -> str:
    return "true" if value else "false"
