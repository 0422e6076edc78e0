"""The exception hierarchy: every error pgfeed raises on purpose is a PgfeedError."""

from __future__ import annotations


class PgfeedError(Exception):
    """Base of pgfeed's own errors; ``code`` is the machine-readable name served in error JSON."""

    code = "pgfeed_error"


class DecodeError(PgfeedError):
    """pgoutput bytes that do not follow the protocol: names the message, the field and the offset."""

    code = "decode_error"

    def __init__(self, message: str, *, msg_type: str | None = None, field: str | None = None,
                 offset: int | None = None) -> None:
        self.msg_type = msg_type
        self.field = field
        self.offset = offset
        where = []
        if msg_type is not None:
            where.append(f"message {msg_type}")
        if field is not None:
            where.append(f"field {field}")
        if offset is not None:
            where.append(f"offset {offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)


class FeedNotFound(PgfeedError):
    code = "feed_not_found"


class FeedExists(PgfeedError):
    code = "feed_exists"


class RetentionError(PgfeedError):
    """A cursor points before the oldest retained position."""

    code = "cursor_expired"

    def __init__(self, message: str, oldest: str) -> None:
        self.oldest = oldest
        super().__init__(message)


class CursorAhead(PgfeedError):
    """A reader's cursor is past the feed's head: nothing it names was ever in this log (a feed
    deleted and created again under the same name starts a new one). HTTP 400, gRPC
    OUT_OF_RANGE; an empty page would leave the reader waiting forever."""

    code = "cursor_ahead"


class SourceError(PgfeedError):
    """The source PostgreSQL refused or dropped something pgfeed needs (slot, publication, connection)."""

    code = "source_error"


class SourceRefused(SourceError):
    """A feed creation the source refused or that failed at a step, with nothing left behind:
    ``code`` names the reason (``table_without_replica_identity``, ``source_error``) and
    ``findings`` are the preflight's errors (``{"check", "level", "message", "fix"}`` each)."""

    def __init__(self, message: str, *, code: str = "source_error",
                 findings: list[dict[str, str | None]] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.findings = findings or []


class AssemblyError(PgfeedError):
    """pgoutput messages in an order the protocol does not allow (names the message and its LSN)."""

    code = "assembly_error"


class SchemaError(PgfeedError):
    """A change names a relation (or a tuple shape) the feed's schema history does not explain."""

    code = "schema_unknown"


class BackfillError(PgfeedError):
    """A backfill request pgfeed refuses before starting anything (HTTP 400 or, with ``status``,
    another 4xx): an unknown table, one outside the feed's publication, one without a usable key,
    bad options, or a table another running backfill is reading (409)."""

    code = "backfill_invalid"

    def __init__(self, message: str, *, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        if code is not None:
            self.code = code


class StartupError(PgfeedError):
    """``pgfeed serve`` cannot start: one line saying what to fix (a resource another process
    owns, a port in use, a data directory that cannot be written, a store out of reach), printed
    without a traceback. Never holds a secret."""

    code = "startup_error"


class FeedStateConflict(PgfeedError):
    """The feed is not in the state the call needs (HTTP 409): a resync of a feed whose slot is
    fine, a resume of one whose slot is lost."""

    code = "feed_state_conflict"
