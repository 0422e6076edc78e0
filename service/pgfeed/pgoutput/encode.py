"""PURE: pgoutput message objects -> wire bytes, written from PostgreSQL's "Logical Replication
Message Formats" page (independently of ``decode.py``, so tests cross-check the two).

The one encoder of pgoutput bytes: backfills write their rows as Insert messages
(``insert_head``), tests and benches build messages with ``encode``.
"""

from __future__ import annotations

from pgfeed.netorder import I32, I64, U8, U16, U32, U64
from pgfeed.pgoutput import messages as pm

__all__ = ["encode", "insert_head", "tuple_data"]

_NEW = bytes((pm.TUPLE_NEW,))
_NULL, _TOAST = bytes((pm.TupleKind.NULL,)), bytes((pm.TupleKind.UNCHANGED_TOAST,))
_TEXT, _BINARY = bytes((pm.TupleKind.TEXT,)), bytes((pm.TupleKind.BINARY,))


def int8(v: int) -> bytes:
    return U8.pack(v)


def int16(v: int) -> bytes:
    return U16.pack(v)


def int32(v: int) -> bytes:
    return U32.pack(v)


def sint32(v: int) -> bytes:
    return I32.pack(v)


def lsn(v: int) -> bytes:
    return U64.pack(v)


def ts(v: int) -> bytes:
    return I64.pack(v)


def string(s: str) -> bytes:
    return s.encode() + b"\0"


def tuple_data(t: pm.TupleData) -> bytes:
    """pm.TupleData: column count, then per column its kind byte and, for text and binary, the
    length and the bytes."""
    out = [int16(len(t.values))]
    for v in t.values:
        if v is None:
            out.append(_NULL)
        elif v is pm.UNCHANGED_TOAST:
            out.append(_TOAST)
        elif isinstance(v, str):
            raw = v.encode()
            out.append(_TEXT + sint32(len(raw)) + raw)
        elif isinstance(v, bytes):
            out.append(_BINARY + sint32(len(v)) + v)
        else:
            raise TypeError(f"not a pm.TupleData value: {v!r}")
    return b"".join(out)


_TAG = {tag: bytes((tag,)) for tag in range(256)}  # a tag byte (messages.TAG_*) as bytes


def insert_head(relation_id: int, columns: int) -> bytes:
    """The bytes of an Insert message before its columns: tag, relation, new-tuple marker and
    column count (each column then follows as in ``tuple_data``)."""
    return _TAG[pm.TAG_INSERT] + int32(relation_id) + _NEW + int16(columns)


def _xid(xid: int | None, in_stream: bool) -> bytes:
    if in_stream:
        if xid is None:
            raise ValueError("in_stream messages carry an xid")
        return int32(xid)
    if xid is not None:
        raise ValueError("xid is sent only inside a streamed block")
    return b""


def encode(m: pm.Message, *, in_stream: bool = False) -> bytes:
    """The wire bytes of ``m``; ``in_stream`` puts the streamed xid on R/Y/I/U/D/T/M (v2+)."""
    match m:
        case pm.BeginMessage():
            return _TAG[pm.TAG_BEGIN] + lsn(m.final_lsn) + ts(m.commit_ts) + int32(m.xid)
        case pm.CommitMessage():
            return _TAG[pm.TAG_COMMIT] + int8(m.flags) + lsn(m.commit_lsn) + lsn(m.end_lsn) + ts(m.commit_ts)
        case pm.OriginMessage():
            return _TAG[pm.TAG_ORIGIN] + lsn(m.commit_lsn) + string(m.name)
        case pm.RelationMessage():
            cols = b"".join(int8(c.flags) + string(c.name) + int32(c.type_oid)
                            + sint32(c.type_modifier) for c in m.columns)
            return (_TAG[pm.TAG_RELATION] + _xid(m.xid, in_stream) + int32(m.relation_id) + string(m.namespace)
                    + string(m.relation_name) + int8(m.replica_identity)
                    + int16(len(m.columns)) + cols)
        case pm.TypeMessage():
            return (_TAG[pm.TAG_TYPE] + _xid(m.xid, in_stream) + int32(m.type_oid) + string(m.namespace)
                    + string(m.name))
        case pm.InsertMessage():
            return (_TAG[pm.TAG_INSERT] + _xid(m.xid, in_stream) + int32(m.relation_id) + _NEW
                    + tuple_data(m.new_tuple))
        case pm.UpdateMessage():
            old = b""
            if m.old_kind is not None:
                assert m.old_tuple is not None
                old = int8(m.old_kind) + tuple_data(m.old_tuple)
            return (_TAG[pm.TAG_UPDATE] + _xid(m.xid, in_stream) + int32(m.relation_id) + old + _NEW
                    + tuple_data(m.new_tuple))
        case pm.DeleteMessage():
            return (_TAG[pm.TAG_DELETE] + _xid(m.xid, in_stream) + int32(m.relation_id) + int8(m.old_kind)
                    + tuple_data(m.old_tuple))
        case pm.TruncateMessage():
            return (_TAG[pm.TAG_TRUNCATE] + _xid(m.xid, in_stream) + sint32(len(m.relation_ids)) + int8(m.options)
                    + b"".join(int32(r) for r in m.relation_ids))
        case pm.LogicalMessage():
            return (_TAG[pm.TAG_MESSAGE] + _xid(m.xid, in_stream) + int8(m.flags) + lsn(m.lsn) + string(m.prefix)
                    + sint32(len(m.content)) + m.content)
        case pm.StreamStartMessage():
            return _TAG[pm.TAG_STREAM_START] + int32(m.xid) + int8(1 if m.first_segment else 0)
        case pm.StreamStopMessage():
            return _TAG[pm.TAG_STREAM_STOP]
        case pm.StreamCommitMessage():
            return (_TAG[pm.TAG_STREAM_COMMIT] + int32(m.xid) + int8(m.flags) + lsn(m.commit_lsn) + lsn(m.end_lsn)
                    + ts(m.commit_ts))
        case pm.StreamAbortMessage():
            out = _TAG[pm.TAG_STREAM_ABORT] + int32(m.xid) + int32(m.subxid)
            if m.abort_lsn is not None or m.abort_ts is not None:  # streaming = parallel (v4)
                assert m.abort_lsn is not None and m.abort_ts is not None
                out += lsn(m.abort_lsn) + ts(m.abort_ts)
            return out
        case pm.BeginPrepareMessage():
            return (_TAG[pm.TAG_BEGIN_PREPARE] + lsn(m.prepare_lsn) + lsn(m.end_lsn) + ts(m.prepare_ts) + int32(m.xid)
                    + string(m.gid))
        case pm.PrepareMessage():
            return (_TAG[pm.TAG_PREPARE] + int8(m.flags) + lsn(m.prepare_lsn) + lsn(m.end_lsn) + ts(m.prepare_ts)
                    + int32(m.xid) + string(m.gid))
        case pm.CommitPreparedMessage():
            return (_TAG[pm.TAG_COMMIT_PREPARED] + int8(m.flags) + lsn(m.commit_lsn) + lsn(m.end_lsn) + ts(m.commit_ts)
                    + int32(m.xid) + string(m.gid))
        case pm.RollbackPreparedMessage():
            return (_TAG[pm.TAG_ROLLBACK_PREPARED] + int8(m.flags) + lsn(m.prepare_end_lsn) + lsn(m.rollback_end_lsn)
                    + ts(m.prepare_ts) + ts(m.rollback_ts) + int32(m.xid) + string(m.gid))
        case pm.StreamPrepareMessage():
            return (_TAG[pm.TAG_STREAM_PREPARE] + int8(m.flags) + lsn(m.prepare_lsn) + lsn(m.end_lsn) + ts(m.prepare_ts)
                    + int32(m.xid) + string(m.gid))
    raise TypeError(f"not a pgoutput message: {m!r}")
