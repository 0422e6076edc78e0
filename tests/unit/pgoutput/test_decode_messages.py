"""Every pgoutput message, v1-v4, decoded from hand-built bytes (laid out per the protocol page)."""

from __future__ import annotations

import struct

import pytest

from pgfeed.pgoutput import (
    UNCHANGED_TOAST,
    BeginMessage,
    BeginPrepareMessage,
    CommitMessage,
    CommitPreparedMessage,
    DeleteMessage,
    InsertMessage,
    LogicalMessage,
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
    decode,
    message_tag_name,
)
from pgfeed.pgoutput.messages import TRUNCATE_CASCADE, TRUNCATE_RESTART_IDENTITY


def be(fmt: str, *values: int) -> bytes:
    return struct.pack(">" + fmt, *values)


LSN1, LSN2, LSN3 = 0x16_B374D848, 0x16_B374D900, 0x17_00000010
TS1, TS2 = 817_000_000_123_456, 817_000_001_000_000  # microseconds since 2000-01-01
XID = 749
REL = 16384

# TupleData (id int4 = 1, note text = NULL), built byte by byte.
TUPLE_1_NULL = be("H", 2) + b"t" + be("i", 1) + b"1" + b"n"
TUPLE_2_TEXT = be("H", 2) + b"t" + be("i", 1) + b"2" + b"t" + be("i", 4) + b"paid"


# --- transaction framing (v1) -------------------------------------------------------------


def test_begin() -> None:
    buf = b"B" + be("Q", LSN1) + be("q", TS1) + be("I", XID)
    assert decode(buf) == BeginMessage(final_lsn=LSN1, commit_ts=TS1, xid=XID)


def test_commit() -> None:
    buf = b"C" + b"\0" + be("Q", LSN1) + be("Q", LSN2) + be("q", TS1)
    assert decode(buf) == CommitMessage(flags=0, commit_lsn=LSN1, end_lsn=LSN2, commit_ts=TS1)


def test_origin() -> None:
    buf = b"O" + be("Q", LSN3) + b"node_a\0"
    assert decode(buf) == OriginMessage(commit_lsn=LSN3, name="node_a")


def test_negative_timestamp_is_kept_signed() -> None:
    buf = b"B" + be("Q", LSN1) + be("q", -5) + be("I", XID)
    assert decode(buf).commit_ts == -5  # type: ignore[union-attr]


def test_memoryview_input() -> None:
    buf = bytearray(b"xx" + b"B" + be("Q", LSN1) + be("q", TS1) + be("I", XID))
    assert decode(memoryview(buf)[2:]) == BeginMessage(LSN1, TS1, XID)


# --- schema messages ------------------------------------------------------------------------


RELATION_BODY = (
    be("I", REL) + b"public\0" + b"orders\0" + b"d" + be("H", 3)
    + b"\x01" + b"id\0" + be("I", 23) + be("i", -1)
    + b"\x00" + b"status\0" + be("I", 1043) + be("i", 36)
    + b"\x00" + b"caf\xc3\xa9\0" + be("I", 25) + be("i", -1)
)
RELATION = RelationMessage(
    xid=None, relation_id=REL, namespace="public", relation_name="orders",
    replica_identity=ord("d"),
    columns=(RelationColumn(1, "id", 23, -1), RelationColumn(0, "status", 1043, 36),
             RelationColumn(0, "café", 25, -1)),
)


def test_relation_v1() -> None:
    msg = decode(b"R" + RELATION_BODY)
    assert msg == RELATION
    assert isinstance(msg, RelationMessage)
    assert [c.is_key for c in msg.columns] == [True, False, False]


def test_relation_in_stream_carries_xid() -> None:
    msg = decode(b"R" + be("I", XID) + RELATION_BODY, in_stream=True)
    assert isinstance(msg, RelationMessage)
    assert msg.xid == XID and msg.columns == RELATION.columns


def test_relation_pg_catalog_namespace_is_empty_and_no_columns() -> None:
    buf = b"R" + be("I", 1259) + b"\0" + b"pg_class\0" + b"n" + be("H", 0)
    assert decode(buf) == RelationMessage(None, 1259, "", "pg_class", ord("n"), ())


@pytest.mark.parametrize("in_stream", [False, True])
def test_type(in_stream: bool) -> None:
    xid = be("I", XID) if in_stream else b""
    buf = b"Y" + xid + be("I", 70001) + b"public\0" + b"mood\0"
    assert decode(buf, in_stream=in_stream) == TypeMessage(
        XID if in_stream else None, 70001, "public", "mood")


# --- row changes ------------------------------------------------------------------------------


@pytest.mark.parametrize("in_stream", [False, True])
def test_insert(in_stream: bool) -> None:
    xid = be("I", XID) if in_stream else b""
    buf = b"I" + xid + be("I", REL) + b"N" + TUPLE_1_NULL
    assert decode(buf, in_stream=in_stream) == InsertMessage(
        XID if in_stream else None, REL, TupleData(("1", None)))


@pytest.mark.parametrize("in_stream", [False, True])
def test_update_without_old_part(in_stream: bool) -> None:
    xid = be("I", XID) if in_stream else b""
    buf = b"U" + xid + be("I", REL) + b"N" + TUPLE_2_TEXT
    assert decode(buf, in_stream=in_stream) == UpdateMessage(
        XID if in_stream else None, REL, None, None, TupleData(("2", "paid")))


@pytest.mark.parametrize("kind", [b"K", b"O"])
@pytest.mark.parametrize("in_stream", [False, True])
def test_update_with_old_part(kind: bytes, in_stream: bool) -> None:
    xid = be("I", XID) if in_stream else b""
    buf = b"U" + xid + be("I", REL) + kind + TUPLE_1_NULL + b"N" + TUPLE_2_TEXT
    assert decode(buf, in_stream=in_stream) == UpdateMessage(
        XID if in_stream else None, REL, ord(kind), TupleData(("1", None)),
        TupleData(("2", "paid")))


@pytest.mark.parametrize("kind", [b"K", b"O"])
@pytest.mark.parametrize("in_stream", [False, True])
def test_delete(kind: bytes, in_stream: bool) -> None:
    xid = be("I", XID) if in_stream else b""
    buf = b"D" + xid + be("I", REL) + kind + TUPLE_1_NULL
    assert decode(buf, in_stream=in_stream) == DeleteMessage(
        XID if in_stream else None, REL, ord(kind), TupleData(("1", None)))


def test_tuple_data_every_kind() -> None:
    tuple_ = (be("H", 6) + b"n" + b"u" + b"t" + be("i", 6) + "naïve".encode()
              + b"b" + be("i", 3) + b"\x00\xff\x01" + b"t" + be("i", 0) + b"b" + be("i", 0))
    msg = decode(b"I" + be("I", REL) + b"N" + tuple_)
    assert isinstance(msg, InsertMessage)
    assert msg.new_tuple.values == (None, UNCHANGED_TOAST, "naïve", b"\x00\xff\x01", "", b"")


def test_unchanged_toast_is_not_null() -> None:
    msg = decode(b"U" + be("I", REL) + b"N" + be("H", 2) + b"u" + b"n")
    assert isinstance(msg, UpdateMessage)
    toast, null = msg.new_tuple.values
    assert toast is UNCHANGED_TOAST and null is None
    assert toast != null and toast is not None
    assert repr(toast) == "UNCHANGED_TOAST"


def test_empty_tuple() -> None:
    assert decode(b"I" + be("I", REL) + b"N" + be("H", 0)) == InsertMessage(
        None, REL, TupleData(()))


@pytest.mark.parametrize(("options", "cascade", "restart"), [
    (0, False, False),
    (TRUNCATE_CASCADE, True, False),
    (TRUNCATE_RESTART_IDENTITY, False, True),
    (TRUNCATE_CASCADE | TRUNCATE_RESTART_IDENTITY, True, True),
])
def test_truncate_options(options: int, cascade: bool, restart: bool) -> None:
    buf = b"T" + be("i", 2) + bytes([options]) + be("I", REL) + be("I", REL + 1)
    msg = decode(buf)
    assert msg == TruncateMessage(None, options, (REL, REL + 1))
    assert isinstance(msg, TruncateMessage)
    assert (msg.cascade, msg.restart_identity) == (cascade, restart)


def test_truncate_in_stream() -> None:
    buf = b"T" + be("I", XID) + be("i", 1) + b"\0" + be("I", REL)
    assert decode(buf, in_stream=True) == TruncateMessage(XID, 0, (REL,))


# --- logical decoding messages ------------------------------------------------------------------


@pytest.mark.parametrize("flags", [0, 1])
def test_message_transactional_flag(flags: int) -> None:
    buf = b"M" + bytes([flags]) + be("Q", LSN1) + b"pgfeed.heartbeat\0" + be("i", 3) + b"\x00hi"
    msg = decode(buf)
    assert msg == LogicalMessage(None, flags, LSN1, "pgfeed.heartbeat", b"\x00hi")
    assert isinstance(msg, LogicalMessage) and msg.transactional is bool(flags)


def test_message_in_stream_and_empty_content() -> None:
    buf = b"M" + be("I", XID) + b"\x01" + be("Q", LSN1) + b"p\0" + be("i", 0)
    assert decode(buf, in_stream=True) == LogicalMessage(XID, 1, LSN1, "p", b"")


# --- streaming (v2) -------------------------------------------------------------------------------


@pytest.mark.parametrize(("byte", "first"), [(1, True), (0, False)])
def test_stream_start(byte: int, first: bool) -> None:
    assert decode(b"S" + be("I", XID) + bytes([byte])) == StreamStartMessage(XID, first)


def test_stream_stop() -> None:
    assert decode(b"E") == StreamStopMessage()
    assert decode(b"E", in_stream=True) == StreamStopMessage()


def test_stream_commit() -> None:
    buf = b"c" + be("I", XID) + b"\0" + be("Q", LSN1) + be("Q", LSN2) + be("q", TS1)
    assert decode(buf) == StreamCommitMessage(XID, 0, LSN1, LSN2, TS1)


def test_stream_abort_v2() -> None:
    buf = b"A" + be("I", XID) + be("I", XID + 3)
    assert decode(buf) == StreamAbortMessage(XID, XID + 3)
    assert decode(buf).abort_lsn is None  # type: ignore[union-attr]


def test_stream_abort_v4_parallel() -> None:
    buf = b"A" + be("I", XID) + be("I", XID) + be("Q", LSN3) + be("q", TS2)
    assert decode(buf) == StreamAbortMessage(XID, XID, abort_lsn=LSN3, abort_ts=TS2)


# --- two-phase (v3) -------------------------------------------------------------------------------


def test_begin_prepare() -> None:
    buf = b"b" + be("Q", LSN1) + be("Q", LSN2) + be("q", TS1) + be("I", XID) + b"gid-1\0"
    assert decode(buf) == BeginPrepareMessage(LSN1, LSN2, TS1, XID, "gid-1")


def test_prepare() -> None:
    buf = b"P" + b"\0" + be("Q", LSN1) + be("Q", LSN2) + be("q", TS1) + be("I", XID) + b"g\0"
    assert decode(buf) == PrepareMessage(0, LSN1, LSN2, TS1, XID, "g")


def test_commit_prepared() -> None:
    buf = b"K" + b"\0" + be("Q", LSN2) + be("Q", LSN3) + be("q", TS2) + be("I", XID) + b"g\0"
    assert decode(buf) == CommitPreparedMessage(0, LSN2, LSN3, TS2, XID, "g")


def test_rollback_prepared() -> None:
    buf = (b"r" + b"\0" + be("Q", LSN2) + be("Q", LSN3) + be("q", TS1) + be("q", TS2)
           + be("I", XID) + "gïd\0".encode())
    assert decode(buf) == RollbackPreparedMessage(0, LSN2, LSN3, TS1, TS2, XID, "gïd")


def test_stream_prepare() -> None:
    buf = b"p" + b"\0" + be("Q", LSN1) + be("Q", LSN2) + be("q", TS1) + be("I", XID) + b"\0"
    assert decode(buf) == StreamPrepareMessage(0, LSN1, LSN2, TS1, XID, "")


# --- names ------------------------------------------------------------------------------------------


def test_message_tag_names() -> None:
    assert message_tag_name(ord("I")) == "Insert"
    assert message_tag_name(ord("A")) == "Stream Abort"
    assert message_tag_name(ord("r")) == "Rollback Prepared"
    assert message_tag_name(ord("Z")).startswith("unknown 0x5a")
    assert message_tag_name(0).startswith("unknown 0x00")
