"""Test-only pgoutput encoder: message object -> wire bytes, written from PostgreSQL's
"Logical Replication Message Formats" page (independently of the decoder, so tests cross-check it).
"""

from __future__ import annotations

import struct

from service.pgoutput.messages import (
    UNCHANGED_TOAST,
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


def int8(v: int) -> bytes:
    return struct.pack(">B", v)


def int16(v: int) -> bytes:
    return struct.pack(">H", v)


def int32(v: int) -> bytes:
    return struct.pack(">I", v)


def sint32(v: int) -> bytes:
    return struct.pack(">i", v)


def lsn(v: int) -> bytes:
    return struct.pack(">Q", v)


def ts(v: int) -> bytes:
    return struct.pack(">q", v)


def string(s: str) -> bytes:
    return s.encode() + b"\0"


def tuple_data(t: TupleData) -> bytes:
    out = [int16(len(t.values))]
    for v in t.values:
        if v is None:
            out.append(b"n")
        elif v is UNCHANGED_TOAST:
            out.append(b"u")
        elif isinstance(v, str):
            raw = v.encode()
            out.append(b"t" + sint32(len(raw)) + raw)
        elif isinstance(v, bytes):
            out.append(b"b" + sint32(len(v)) + v)
        else:
            raise TypeError(f"not a TupleData value: {v!r}")
    return b"".join(out)


def _xid(xid: int | None, in_stream: bool) -> bytes:
    if in_stream:
        if xid is None:
            raise ValueError("in_stream messages carry an xid")
        return int32(xid)
    if xid is not None:
        raise ValueError("xid is sent only inside a streamed block")
    return b""


def encode(m: Message, *, in_stream: bool = False) -> bytes:
    """The wire bytes of ``m``; ``in_stream`` puts the streamed xid on R/Y/I/U/D/T/M (v2+)."""
    match m:
        case BeginMessage():
            return b"B" + lsn(m.final_lsn) + ts(m.commit_ts) + int32(m.xid)
        case CommitMessage():
            return b"C" + int8(m.flags) + lsn(m.commit_lsn) + lsn(m.end_lsn) + ts(m.commit_ts)
        case OriginMessage():
            return b"O" + lsn(m.commit_lsn) + string(m.name)
        case RelationMessage():
            cols = b"".join(int8(c.flags) + string(c.name) + int32(c.type_oid)
                            + sint32(c.type_modifier) for c in m.columns)
            return (b"R" + _xid(m.xid, in_stream) + int32(m.relation_id) + string(m.namespace)
                    + string(m.relation_name) + int8(m.replica_identity)
                    + int16(len(m.columns)) + cols)
        case TypeMessage():
            return (b"Y" + _xid(m.xid, in_stream) + int32(m.type_oid) + string(m.namespace)
                    + string(m.name))
        case InsertMessage():
            return (b"I" + _xid(m.xid, in_stream) + int32(m.relation_id) + b"N"
                    + tuple_data(m.new_tuple))
        case UpdateMessage():
            old = b""
            if m.old_kind is not None:
                assert m.old_tuple is not None
                old = int8(m.old_kind) + tuple_data(m.old_tuple)
            return (b"U" + _xid(m.xid, in_stream) + int32(m.relation_id) + old + b"N"
                    + tuple_data(m.new_tuple))
        case DeleteMessage():
            return (b"D" + _xid(m.xid, in_stream) + int32(m.relation_id) + int8(m.old_kind)
                    + tuple_data(m.old_tuple))
        case TruncateMessage():
            return (b"T" + _xid(m.xid, in_stream) + sint32(len(m.relation_ids)) + int8(m.options)
                    + b"".join(int32(r) for r in m.relation_ids))
        case LogicalMessage():
            return (b"M" + _xid(m.xid, in_stream) + int8(m.flags) + lsn(m.lsn) + string(m.prefix)
                    + sint32(len(m.content)) + m.content)
        case StreamStartMessage():
            return b"S" + int32(m.xid) + int8(1 if m.first_segment else 0)
        case StreamStopMessage():
            return b"E"
        case StreamCommitMessage():
            return (b"c" + int32(m.xid) + int8(m.flags) + lsn(m.commit_lsn) + lsn(m.end_lsn)
                    + ts(m.commit_ts))
        case StreamAbortMessage():
            out = b"A" + int32(m.xid) + int32(m.subxid)
            if m.abort_lsn is not None or m.abort_ts is not None:  # streaming = parallel (v4)
                assert m.abort_lsn is not None and m.abort_ts is not None
                out += lsn(m.abort_lsn) + ts(m.abort_ts)
            return out
        case BeginPrepareMessage():
            return (b"b" + lsn(m.prepare_lsn) + lsn(m.end_lsn) + ts(m.prepare_ts) + int32(m.xid)
                    + string(m.gid))
        case PrepareMessage():
            return (b"P" + int8(m.flags) + lsn(m.prepare_lsn) + lsn(m.end_lsn) + ts(m.prepare_ts)
                    + int32(m.xid) + string(m.gid))
        case CommitPreparedMessage():
            return (b"K" + int8(m.flags) + lsn(m.commit_lsn) + lsn(m.end_lsn) + ts(m.commit_ts)
                    + int32(m.xid) + string(m.gid))
        case RollbackPreparedMessage():
            return (b"r" + int8(m.flags) + lsn(m.prepare_end_lsn) + lsn(m.rollback_end_lsn)
                    + ts(m.prepare_ts) + ts(m.rollback_ts) + int32(m.xid) + string(m.gid))
        case StreamPrepareMessage():
            return (b"p" + int8(m.flags) + lsn(m.prepare_lsn) + lsn(m.end_lsn) + ts(m.prepare_ts)
                    + int32(m.xid) + string(m.gid))
    raise TypeError(f"not a pgoutput message: {m!r}")
