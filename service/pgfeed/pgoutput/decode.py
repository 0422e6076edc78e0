"""pgoutput decoding: ``decode(buf, *, in_stream)`` turns one message's bytes into its message object.

Layouts follow PostgreSQL's "Logical Replication Message Formats" (protocol versions 1-4) and
``src/backend/replication/logical/proto.c``. Pure and stateless; ``_DECODERS`` dispatches by tag.
"""

from __future__ import annotations

from collections.abc import Callable
from struct import Struct

from pgfeed.errors import DecodeError
from pgfeed.pgoutput._wire import FAST_FAILURES as _FAST_FAILURES
from pgfeed.pgoutput._wire import Layout, _Reader, fast_tuple, show_byte
from pgfeed.pgoutput.messages import (
    TAG_BEGIN,
    TAG_BEGIN_PREPARE,
    TAG_COMMIT,
    TAG_COMMIT_PREPARED,
    TAG_DELETE,
    TAG_INSERT,
    TAG_MESSAGE,
    TAG_ORIGIN,
    TAG_PREPARE,
    TAG_RELATION,
    TAG_ROLLBACK_PREPARED,
    TAG_STREAM_ABORT,
    TAG_STREAM_COMMIT,
    TAG_STREAM_PREPARE,
    TAG_STREAM_START,
    TAG_STREAM_STOP,
    TAG_TRUNCATE,
    TAG_TYPE,
    TAG_UPDATE,
    TUPLE_KEY,
    TUPLE_NEW,
    TUPLE_OLD,
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
    TypeMessage,
    UpdateMessage,
)

__all__ = ["decode", "message_tag_name"]

_TAG_NAMES: dict[int, str] = {
    TAG_BEGIN: "Begin",
    TAG_COMMIT: "Commit",
    TAG_ORIGIN: "Origin",
    TAG_RELATION: "Relation",
    TAG_TYPE: "Type",
    TAG_INSERT: "Insert",
    TAG_UPDATE: "Update",
    TAG_DELETE: "Delete",
    TAG_TRUNCATE: "Truncate",
    TAG_MESSAGE: "Message",
    TAG_STREAM_START: "Stream Start",
    TAG_STREAM_STOP: "Stream Stop",
    TAG_STREAM_COMMIT: "Stream Commit",
    TAG_STREAM_ABORT: "Stream Abort",
    TAG_BEGIN_PREPARE: "Begin Prepare",
    TAG_PREPARE: "Prepare",
    TAG_COMMIT_PREPARED: "Commit Prepared",
    TAG_ROLLBACK_PREPARED: "Rollback Prepared",
    TAG_STREAM_PREPARE: "Stream Prepare",
}


def message_tag_name(tag: int) -> str:
    """The protocol page's name for a tag byte ("Insert", "Stream Abort"), or "unknown 0x.."."""
    name = _TAG_NAMES.get(tag)
    return name if name is not None else f"unknown {show_byte(tag)}"


# Fixed parts, in wire order (after the tag byte). Timestamps are signed (TimestampTz), LSNs and
# xids unsigned.
_BEGIN = Layout(("Q", "final_lsn"), ("q", "commit_ts"), ("I", "xid"))
_COMMIT = Layout(("B", "flags"), ("Q", "commit_lsn"), ("Q", "end_lsn"), ("q", "commit_ts"))
_STREAM_START = Layout(("I", "xid"), ("B", "first_segment"))
_STREAM_COMMIT = Layout(("I", "xid"), ("B", "flags"), ("Q", "commit_lsn"), ("Q", "end_lsn"),
                        ("q", "commit_ts"))
_STREAM_ABORT = Layout(("I", "xid"), ("I", "subxid"))
_STREAM_ABORT_PARALLEL = Layout(("I", "xid"), ("I", "subxid"), ("Q", "abort_lsn"),
                                ("q", "abort_ts"))
_BEGIN_PREPARE = Layout(("Q", "prepare_lsn"), ("Q", "end_lsn"), ("q", "prepare_ts"), ("I", "xid"))
# Prepare, Commit Prepared and Stream Prepare share one shape: flags, two LSNs, a time, the xid.
_PREPARE = Layout(("B", "flags"), ("Q", "prepare_lsn"), ("Q", "end_lsn"), ("q", "prepare_ts"),
                  ("I", "xid"))
_COMMIT_PREPARED = Layout(("B", "flags"), ("Q", "commit_lsn"), ("Q", "end_lsn"),
                          ("q", "commit_ts"), ("I", "xid"))
_ROLLBACK_PREPARED = Layout(("B", "flags"), ("Q", "prepare_end_lsn"), ("Q", "rollback_end_lsn"),
                            ("q", "prepare_ts"), ("q", "rollback_ts"), ("I", "xid"))
_MESSAGE_HEAD = Layout(("B", "flags"), ("Q", "lsn"))
_ORIGIN_HEAD = Layout(("Q", "commit_lsn"),)
_RELATION_COLUMN_TAIL = Layout(("I", "type_oid"), ("i", "type_modifier"))

# Hot-path heads: [xid,] relation id, tuple marker, and the first TupleData's column count.
_REL_MARK_NCOLS = Struct(">IBH").unpack_from
_XID_REL_MARK_NCOLS = Struct(">IIBH").unpack_from
_MARK_NCOLS = Struct(">BH").unpack_from

_NEW, _KEY, _OLD = TUPLE_NEW, TUPLE_KEY, TUPLE_OLD  # which row image follows


def _xid(r: _Reader, in_stream: bool) -> int | None:
    # Protocol v2+: inside Stream Start..Stream Stop, R/Y/I/U/D/T/M carry the streamed xid first.
    return r.u32("xid") if in_stream else None


def _decode_begin(data: bytes, in_stream: bool) -> BeginMessage:
    r = _Reader(data, 1, 'Begin')
    final_lsn, commit_ts, xid = r.layout(_BEGIN)
    r.finish()
    return BeginMessage(final_lsn, commit_ts, xid)


def _decode_commit(data: bytes, in_stream: bool) -> CommitMessage:
    r = _Reader(data, 1, 'Commit')
    flags, commit_lsn, end_lsn, commit_ts = r.layout(_COMMIT)
    r.finish()
    return CommitMessage(flags, commit_lsn, end_lsn, commit_ts)


def _decode_origin(data: bytes, in_stream: bool) -> OriginMessage:
    r = _Reader(data, 1, 'Origin')
    (commit_lsn,) = r.layout(_ORIGIN_HEAD)
    name = r.string("name")
    r.finish()
    return OriginMessage(commit_lsn, name)


def _decode_relation(data: bytes, in_stream: bool) -> RelationMessage:
    r = _Reader(data, 1, 'Relation')
    xid = _xid(r, in_stream)
    relation_id = r.u32("relation_id")
    namespace = r.string("namespace")  # '' stands for pg_catalog
    relation_name = r.string("relation_name")
    replica_identity = r.u8("replica_identity")
    ncols = r.u16("ncols")
    columns = []
    for i in range(ncols):
        flags = r.u8(f"columns[{i}].flags")
        name = r.string(f"columns[{i}].name")
        type_oid, type_modifier = r.layout(_RELATION_COLUMN_TAIL, f"columns[{i}].")
        columns.append(RelationColumn(flags, name, type_oid, type_modifier))
    r.finish()
    return RelationMessage(xid, relation_id, namespace, relation_name, replica_identity,
                           tuple(columns))


def _decode_type(data: bytes, in_stream: bool) -> TypeMessage:
    r = _Reader(data, 1, 'Type')
    xid = _xid(r, in_stream)
    type_oid = r.u32("type_oid")
    namespace = r.string("namespace")
    name = r.string("name")
    r.finish()
    return TypeMessage(xid, type_oid, namespace, name)


def _checked_insert(data: bytes, in_stream: bool) -> InsertMessage:
    r = _Reader(data, 1, 'Insert')
    xid = _xid(r, in_stream)
    relation_id = r.u32("relation_id")
    pos = r.pos
    if r.u8("new_marker") != _NEW:
        r.fail(f"expected 'N', got {show_byte(r.data[pos])}", "new_marker", pos)
    new_tuple = r.tuple_data("new_tuple")
    r.finish()
    return InsertMessage(xid, relation_id, new_tuple)


def _checked_update(data: bytes, in_stream: bool) -> UpdateMessage:
    r = _Reader(data, 1, 'Update')
    # Optional 'K' (old key) or 'O' (old row) TupleData, then 'N' and the new row.
    xid = _xid(r, in_stream)
    relation_id = r.u32("relation_id")
    pos = r.pos
    marker = r.u8("marker")
    old_kind = old_tuple = None
    if marker == _KEY or marker == _OLD:
        old_kind = marker
        old_tuple = r.tuple_data("old_tuple")
        pos = r.pos
        marker = r.u8("new_marker")
        if marker != _NEW:
            r.fail(f"expected 'N', got {show_byte(marker)}", "new_marker", pos)
    elif marker != _NEW:
        r.fail(f"expected 'K', 'O' or 'N', got {show_byte(marker)}", "marker", pos)
    new_tuple = r.tuple_data("new_tuple")
    r.finish()
    return UpdateMessage(xid, relation_id, old_kind, old_tuple, new_tuple)


def _checked_delete(data: bytes, in_stream: bool) -> DeleteMessage:
    r = _Reader(data, 1, 'Delete')
    xid = _xid(r, in_stream)
    relation_id = r.u32("relation_id")
    pos = r.pos
    old_kind = r.u8("old_kind")
    if old_kind != _KEY and old_kind != _OLD:
        r.fail(f"expected 'K' or 'O', got {show_byte(old_kind)}", "old_kind", pos)
    old_tuple = r.tuple_data("old_tuple")
    r.finish()
    return DeleteMessage(xid, relation_id, old_kind, old_tuple)


def _decode_truncate(data: bytes, in_stream: bool) -> TruncateMessage:
    r = _Reader(data, 1, 'Truncate')
    xid = _xid(r, in_stream)
    nrelids = r.length("nrelids")
    options = r.u8("options")  # bit 1 CASCADE, bit 2 RESTART IDENTITY
    pos = r.pos
    if nrelids * 4 > r.remaining():
        r.fail(f"{nrelids} relation ids run past the end ({r.remaining()} bytes left)",
               "relation_ids", pos)
    relation_ids = tuple(r.u32(f"relation_ids[{i}]") for i in range(nrelids))
    r.finish()
    return TruncateMessage(xid, options, relation_ids)


def _decode_message(data: bytes, in_stream: bool) -> LogicalMessage:
    r = _Reader(data, 1, 'Message')
    xid = _xid(r, in_stream)
    flags, lsn = r.layout(_MESSAGE_HEAD)  # flags bit 1: transactional
    prefix = r.string("prefix")
    n = r.length("content_length")
    content = r.raw(n, "content")
    r.finish()
    return LogicalMessage(xid, flags, lsn, prefix, content)


def _decode_stream_start(data: bytes, in_stream: bool) -> StreamStartMessage:
    r = _Reader(data, 1, 'Stream Start')
    xid, first_segment = r.layout(_STREAM_START)
    r.finish()
    return StreamStartMessage(xid, first_segment == 1)  # proto.c: first segment iff byte == 1


def _decode_stream_stop(data: bytes, in_stream: bool) -> StreamStopMessage:
    r = _Reader(data, 1, 'Stream Stop')
    r.finish()
    return StreamStopMessage()


def _decode_stream_commit(data: bytes, in_stream: bool) -> StreamCommitMessage:
    r = _Reader(data, 1, 'Stream Commit')
    xid, flags, commit_lsn, end_lsn, commit_ts = r.layout(_STREAM_COMMIT)
    r.finish()
    return StreamCommitMessage(xid, flags, commit_lsn, end_lsn, commit_ts)


def _decode_stream_abort(data: bytes, in_stream: bool) -> StreamAbortMessage:
    r = _Reader(data, 1, 'Stream Abort')
    # abort_lsn and abort_ts follow only with streaming = parallel (protocol v4); nothing in the
    # message says so, so the length decides: 8 bytes after the tag without them, 24 with them.
    left = r.remaining()
    if left == _STREAM_ABORT_PARALLEL.size:
        xid, subxid, abort_lsn, abort_ts = r.layout(_STREAM_ABORT_PARALLEL)
        return StreamAbortMessage(xid, subxid, abort_lsn, abort_ts)
    if left == _STREAM_ABORT.size:
        xid, subxid = r.layout(_STREAM_ABORT)
        return StreamAbortMessage(xid, subxid)
    if left < _STREAM_ABORT.size:
        r.layout(_STREAM_ABORT)  # raises, naming the field that is cut short
    r.fail(f"{left} bytes after the tag; expected 8 (xid, subxid) or 24 (with abort_lsn, "
           "abort_ts)", "end", r.pos)


def _decode_begin_prepare(data: bytes, in_stream: bool) -> BeginPrepareMessage:
    r = _Reader(data, 1, 'Begin Prepare')
    prepare_lsn, end_lsn, prepare_ts, xid = r.layout(_BEGIN_PREPARE)
    gid = r.string("gid")
    r.finish()
    return BeginPrepareMessage(prepare_lsn, end_lsn, prepare_ts, xid, gid)


def _decode_prepare(data: bytes, in_stream: bool) -> PrepareMessage:
    r = _Reader(data, 1, 'Prepare')
    flags, prepare_lsn, end_lsn, prepare_ts, xid = r.layout(_PREPARE)
    gid = r.string("gid")
    r.finish()
    return PrepareMessage(flags, prepare_lsn, end_lsn, prepare_ts, xid, gid)


def _decode_commit_prepared(data: bytes, in_stream: bool) -> CommitPreparedMessage:
    r = _Reader(data, 1, 'Commit Prepared')
    flags, commit_lsn, end_lsn, commit_ts, xid = r.layout(_COMMIT_PREPARED)
    gid = r.string("gid")
    r.finish()
    return CommitPreparedMessage(flags, commit_lsn, end_lsn, commit_ts, xid, gid)


def _decode_rollback_prepared(data: bytes, in_stream: bool) -> RollbackPreparedMessage:
    r = _Reader(data, 1, 'Rollback Prepared')
    flags, prepare_end_lsn, rollback_end_lsn, prepare_ts, rollback_ts, xid = r.layout(
        _ROLLBACK_PREPARED)
    gid = r.string("gid")
    r.finish()
    return RollbackPreparedMessage(flags, prepare_end_lsn, rollback_end_lsn, prepare_ts,
                                   rollback_ts, xid, gid)


def _decode_stream_prepare(data: bytes, in_stream: bool) -> StreamPrepareMessage:
    r = _Reader(data, 1, 'Stream Prepare')
    flags, prepare_lsn, end_lsn, prepare_ts, xid = r.layout(_PREPARE)
    gid = r.string("gid")
    r.finish()
    return StreamPrepareMessage(flags, prepare_lsn, end_lsn, prepare_ts, xid, gid)


# Hot path. Insert, Update and Delete are nearly every message served, so they are first read
# optimistically: no per-field bounds checks, relying on Python to fail on a short buffer
# (IndexError, struct.error, ValueError incl. UnicodeDecodeError) and on a final length check.
# Any failure re-reads the message through the checked _Reader, which raises the precise
# DecodeError (message, field, offset); the checked decoders are the reference the fast ones
# are tested against.

_new = object.__new__


def _slot_setters(cls: type, *names: str) -> tuple[Callable[[object, object], None], ...]:
    return tuple(cls.__dict__[name].__set__ for name in names)


# As in _wire.fast_tuple: fill the frozen slots directly on the hot path.
_ins_xid, _ins_rel, _ins_new = _slot_setters(InsertMessage, "xid", "relation_id", "new_tuple")
_upd_xid, _upd_rel, _upd_kind, _upd_old, _upd_new = _slot_setters(
    UpdateMessage, "xid", "relation_id", "old_kind", "old_tuple", "new_tuple")
_del_xid, _del_rel, _del_kind, _del_old = _slot_setters(
    DeleteMessage, "xid", "relation_id", "old_kind", "old_tuple")


def _decode_insert(data: bytes, in_stream: bool) -> InsertMessage:
    try:
        if in_stream:
            xid, relation_id, marker, ncols = _XID_REL_MARK_NCOLS(data, 1)
            pos = 12
        else:
            xid = None
            relation_id, marker, ncols = _REL_MARK_NCOLS(data, 1)
            pos = 8
        if marker == _NEW:
            new_tuple, pos = fast_tuple(data, pos, ncols)
            if pos == len(data):
                msg = _new(InsertMessage)
                _ins_xid(msg, xid)
                _ins_rel(msg, relation_id)
                _ins_new(msg, new_tuple)
                return msg
    except _FAST_FAILURES:
        pass
    return _checked_insert(data, in_stream)


def _decode_update(data: bytes, in_stream: bool) -> UpdateMessage:
    try:
        if in_stream:
            xid, relation_id, marker, ncols = _XID_REL_MARK_NCOLS(data, 1)
            pos = 12
        else:
            xid = None
            relation_id, marker, ncols = _REL_MARK_NCOLS(data, 1)
            pos = 8
        old_kind = old_tuple = None
        if marker == _KEY or marker == _OLD:
            old_kind = marker
            old_tuple, pos = fast_tuple(data, pos, ncols)
            marker, ncols = _MARK_NCOLS(data, pos)
            pos += 3
        if marker == _NEW:
            new_tuple, pos = fast_tuple(data, pos, ncols)
            if pos == len(data):
                msg = _new(UpdateMessage)
                _upd_xid(msg, xid)
                _upd_rel(msg, relation_id)
                _upd_kind(msg, old_kind)
                _upd_old(msg, old_tuple)
                _upd_new(msg, new_tuple)
                return msg
    except _FAST_FAILURES:
        pass
    return _checked_update(data, in_stream)


def _decode_delete(data: bytes, in_stream: bool) -> DeleteMessage:
    try:
        if in_stream:
            xid, relation_id, old_kind, ncols = _XID_REL_MARK_NCOLS(data, 1)
            pos = 12
        else:
            xid = None
            relation_id, old_kind, ncols = _REL_MARK_NCOLS(data, 1)
            pos = 8
        if old_kind == _KEY or old_kind == _OLD:
            old_tuple, pos = fast_tuple(data, pos, ncols)
            if pos == len(data):
                msg = _new(DeleteMessage)
                _del_xid(msg, xid)
                _del_rel(msg, relation_id)
                _del_kind(msg, old_kind)
                _del_old(msg, old_tuple)
                return msg
    except _FAST_FAILURES:
        pass
    return _checked_delete(data, in_stream)


_DECODERS: dict[int, Callable[[bytes, bool], Message]] = {
    TAG_BEGIN: _decode_begin,
    TAG_COMMIT: _decode_commit,
    TAG_ORIGIN: _decode_origin,
    TAG_RELATION: _decode_relation,
    TAG_TYPE: _decode_type,
    TAG_INSERT: _decode_insert,
    TAG_UPDATE: _decode_update,
    TAG_DELETE: _decode_delete,
    TAG_TRUNCATE: _decode_truncate,
    TAG_MESSAGE: _decode_message,
    TAG_STREAM_START: _decode_stream_start,
    TAG_STREAM_STOP: _decode_stream_stop,
    TAG_STREAM_COMMIT: _decode_stream_commit,
    TAG_STREAM_ABORT: _decode_stream_abort,
    TAG_BEGIN_PREPARE: _decode_begin_prepare,
    TAG_PREPARE: _decode_prepare,
    TAG_COMMIT_PREPARED: _decode_commit_prepared,
    TAG_ROLLBACK_PREPARED: _decode_rollback_prepared,
    TAG_STREAM_PREPARE: _decode_stream_prepare,
}


def decode(buf: bytes | bytearray | memoryview, *, in_stream: bool = False) -> Message:
    """Decode one whole pgoutput message (tag byte first).

    ``in_stream`` is True between Stream Start and Stream Stop, where Relation, Type, Insert,
    Update, Delete, Truncate and Message carry the streamed transaction's xid (protocol v2+).
    Raises DecodeError, naming the message type, field and byte offset, on anything malformed.
    """
    data = buf if type(buf) is bytes else bytes(buf)
    if not data:
        raise DecodeError("empty message", field="tag", offset=0)
    tag = data[0]
    decoder = _DECODERS.get(tag)
    if decoder is None:
        raise DecodeError(f"unknown message tag {show_byte(tag)}", msg_type=message_tag_name(tag),
                          field="tag", offset=0)
    return decoder(data, in_stream)
