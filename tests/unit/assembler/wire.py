"""Tiny pgoutput message builders for assembler tests (v1-v4 layouts; xid prefix in streams),
over the one pgoutput encoder (``pgfeed.pgoutput.encode``)."""

from __future__ import annotations

from pgfeed.pgoutput import encode as _encode
from pgfeed.pgoutput.messages import (
    TUPLE_KEY,
    BeginMessage,
    BeginPrepareMessage,
    CommitMessage,
    CommitPreparedMessage,
    DeleteMessage,
    InsertMessage,
    LogicalMessage,
    Message,
    OriginMessage,
    PrepareMessage,
    RelationColumn,
    RelationMessage,
    RollbackPreparedMessage,
    StreamAbortMessage,
    StreamCommitMessage,
    StreamPrepareMessage,
    StreamStartMessage,
    StreamStopMessage,
    TruncateMessage,
    TupleData,
    TypeMessage,
    UpdateMessage,
)


def _m(message: Message, xid: int | None = None) -> bytes:
    return _encode.encode(message, in_stream=xid is not None)


def tuple_data(*values: str | None) -> bytes:
    return _encode.tuple_data(TupleData(values))


def begin(xid: int, final_lsn: int, ts: int = 1000) -> bytes:
    return _m(BeginMessage(final_lsn, ts, xid))


def commit(commit_lsn: int, end_lsn: int, ts: int = 1000) -> bytes:
    return _m(CommitMessage(0, commit_lsn, end_lsn, ts))


def origin(name: str, lsn: int = 0) -> bytes:
    return _m(OriginMessage(lsn, name))


def relation(relid: int, name: str = "t", cols: tuple[str, ...] = ("id",), xid: int | None = None,
             namespace: str = "public") -> bytes:
    columns = tuple(RelationColumn(1 if i == 0 else 0, c, 23, -1) for i, c in enumerate(cols))
    return _m(RelationMessage(xid, relid, namespace, name, ord("d"), columns), xid)


def type_(oid: int, name: str = "mood", xid: int | None = None) -> bytes:
    return _m(TypeMessage(xid, oid, "public", name), xid)


def insert(relid: int, *values: str | None, xid: int | None = None) -> bytes:
    return _m(InsertMessage(xid, relid, TupleData(values)), xid)


def update(relid: int, *values: str | None, xid: int | None = None) -> bytes:
    return _m(UpdateMessage(xid, relid, None, None, TupleData(values)), xid)


def delete(relid: int, *values: str | None, xid: int | None = None) -> bytes:
    return _m(DeleteMessage(xid, relid, TUPLE_KEY, TupleData(values)), xid)


def truncate(*relids: int, options: int = 0, xid: int | None = None) -> bytes:
    return _m(TruncateMessage(xid, options, relids), xid)


def message(prefix: str, content: bytes, *, transactional: bool, lsn: int,
            xid: int | None = None) -> bytes:
    return _m(LogicalMessage(xid, 1 if transactional else 0, lsn, prefix, content), xid)


def stream_start(xid: int, first: bool) -> bytes:
    return _m(StreamStartMessage(xid, first))


def stream_stop() -> bytes:
    return _m(StreamStopMessage())


def stream_commit(xid: int, commit_lsn: int, end_lsn: int, ts: int = 2000) -> bytes:
    return _m(StreamCommitMessage(xid, 0, commit_lsn, end_lsn, ts))


def stream_abort(xid: int, subxid: int) -> bytes:
    return _m(StreamAbortMessage(xid, subxid, None, None))


def begin_prepare(xid: int, gid: str, prepare_lsn: int, end_lsn: int, ts: int = 3000) -> bytes:
    return _m(BeginPrepareMessage(prepare_lsn, end_lsn, ts, xid, gid))


def prepare(xid: int, gid: str, prepare_lsn: int, end_lsn: int, ts: int = 3000) -> bytes:
    return _m(PrepareMessage(0, prepare_lsn, end_lsn, ts, xid, gid))


def stream_prepare(xid: int, gid: str, prepare_lsn: int, end_lsn: int, ts: int = 3000) -> bytes:
    return _m(StreamPrepareMessage(0, prepare_lsn, end_lsn, ts, xid, gid))


def commit_prepared(xid: int, gid: str, commit_lsn: int, end_lsn: int, ts: int = 4000) -> bytes:
    return _m(CommitPreparedMessage(0, commit_lsn, end_lsn, ts, xid, gid))


def rollback_prepared(xid: int, gid: str, prepare_end_lsn: int, rollback_end_lsn: int) -> bytes:
    return _m(RollbackPreparedMessage(0, prepare_end_lsn, rollback_end_lsn, 3000, 5000, xid, gid))
