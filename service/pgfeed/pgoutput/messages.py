"""One frozen dataclass per pgoutput message (protocol versions 1-4).

Field names follow PostgreSQL's "Logical Replication Message Formats" page. LSNs are ints;
timestamps are microseconds since 2000-01-01 UTC (PostgreSQL's epoch), converted at the edges.
``xid`` on change messages is set only inside a streamed block (protocol v2+), else None.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import IntEnum
from typing import Self


class TupleKind(IntEnum):
    """The per-column kind byte of TupleData."""

    NULL = ord("n")
    UNCHANGED_TOAST = ord("u")
    TEXT = ord("t")
    BINARY = ord("b")


class UnchangedToast:
    """Marker for an unchanged TOASTed column: the value was not sent (distinct from NULL)."""

    _instance: UnchangedToast | None = None

    def __new__(cls) -> Self:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance  # type: ignore[return-value]

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __reduce__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST = UnchangedToast()


@dataclass(frozen=True, slots=True)
class TupleData:
    """Column values of one row; text values are decoded UTF-8 strings, binary values raw bytes."""

    values: tuple[None | UnchangedToast | str | bytes, ...]


@dataclass(frozen=True, slots=True)
class RelationColumn:
    flags: int  # 1: part of the replica identity key
    name: str
    type_oid: int
    type_modifier: int

    @property
    def is_key(self) -> bool:
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True)
class BeginMessage:
    final_lsn: int
    commit_ts: int
    xid: int


@dataclass(frozen=True, slots=True)
class CommitMessage:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int


@dataclass(frozen=True, slots=True)
class OriginMessage:
    commit_lsn: int
    name: str


@dataclass(frozen=True, slots=True)
class RelationMessage:
    xid: int | None
    relation_id: int
    namespace: str  # empty string means pg_catalog, as the protocol says
    relation_name: str
    replica_identity: int  # ord of 'd' default, 'n' nothing, 'f' full, 'i' index
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True, slots=True)
class TypeMessage:
    xid: int | None
    type_oid: int
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class InsertMessage:
    xid: int | None
    relation_id: int
    new_tuple: TupleData


@dataclass(frozen=True, slots=True)
class UpdateMessage:
    xid: int | None
    relation_id: int
    old_kind: int | None  # ord('K') key only, ord('O') whole old row, None: no old part
    old_tuple: TupleData | None
    new_tuple: TupleData


@dataclass(frozen=True, slots=True)
class DeleteMessage:
    xid: int | None
    relation_id: int
    old_kind: int  # ord('K') or ord('O')
    old_tuple: TupleData


TRUNCATE_CASCADE = 1
TRUNCATE_RESTART_IDENTITY = 2


@dataclass(frozen=True, slots=True)
class TruncateMessage:
    xid: int | None
    options: int  # bit 1 cascade, bit 2 restart identity
    relation_ids: tuple[int, ...]

    @property
    def cascade(self) -> bool:
        return bool(self.options & TRUNCATE_CASCADE)

    @property
    def restart_identity(self) -> bool:
        return bool(self.options & TRUNCATE_RESTART_IDENTITY)


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    xid: int | None
    flags: int  # 1: transactional
    lsn: int
    prefix: str
    content: bytes

    @property
    def transactional(self) -> bool:
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True)
class StreamStartMessage:
    xid: int
    first_segment: bool


@dataclass(frozen=True, slots=True)
class StreamStopMessage:
    pass


@dataclass(frozen=True, slots=True)
class StreamCommitMessage:
    xid: int
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int


@dataclass(frozen=True, slots=True)
class StreamAbortMessage:
    xid: int
    subxid: int
    abort_lsn: int | None = None  # only with streaming = parallel (protocol v4)
    abort_ts: int | None = None


@dataclass(frozen=True, slots=True)
class BeginPrepareMessage:
    prepare_lsn: int
    end_lsn: int
    prepare_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class PrepareMessage:
    flags: int
    prepare_lsn: int
    end_lsn: int
    prepare_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class CommitPreparedMessage:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class RollbackPreparedMessage:
    flags: int
    prepare_end_lsn: int
    rollback_end_lsn: int
    prepare_ts: int
    rollback_ts: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class StreamPrepareMessage:
    flags: int
    prepare_lsn: int
    end_lsn: int
    prepare_ts: int
    xid: int
    gid: str


Message = (
    BeginMessage | CommitMessage | OriginMessage | RelationMessage | TypeMessage | InsertMessage
    | UpdateMessage | DeleteMessage | TruncateMessage | LogicalMessage | StreamStartMessage
    | StreamStopMessage | StreamCommitMessage | StreamAbortMessage | BeginPrepareMessage
    | PrepareMessage | CommitPreparedMessage | RollbackPreparedMessage | StreamPrepareMessage
)

# Tag bytes, as sent on the wire (first byte of each pgoutput message).
TAG_BEGIN = ord("B")
TAG_COMMIT = ord("C")
TAG_ORIGIN = ord("O")
TAG_RELATION = ord("R")
TAG_TYPE = ord("Y")
TAG_INSERT = ord("I")
TAG_UPDATE = ord("U")
TAG_DELETE = ord("D")
TAG_TRUNCATE = ord("T")
TAG_MESSAGE = ord("M")
TAG_STREAM_START = ord("S")
TAG_STREAM_STOP = ord("E")
TAG_STREAM_COMMIT = ord("c")
TAG_STREAM_ABORT = ord("A")
TAG_BEGIN_PREPARE = ord("b")
TAG_PREPARE = ord("P")
TAG_COMMIT_PREPARED = ord("K")
TAG_ROLLBACK_PREPARED = ord("r")
TAG_STREAM_PREPARE = ord("p")

# Tuple markers inside Insert, Update and Delete: which row image follows.
TUPLE_NEW = ord("N")  # the new row
TUPLE_KEY = ord("K")  # the old row's replica-identity columns
TUPLE_OLD = ord("O")  # the whole old row (REPLICA IDENTITY FULL)

# PostgreSQL's epoch: pgoutput's and the replication protocol's timestamps (and pgfeed's
# commit_ts) are microseconds since 2000-01-01 00:00:00 UTC.
PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
PG_EPOCH_UNIX = 946_684_800  # PG_EPOCH in Unix seconds
PG_EPOCH_UNIX_US = PG_EPOCH_UNIX * 1_000_000


def pg_now_us(unix_seconds: float | None = None) -> int:
    """Now (or ``unix_seconds``) in µs since PostgreSQL's epoch."""
    return int(((time.time() if unix_seconds is None else unix_seconds) - PG_EPOCH_UNIX) * 1_000_000)

