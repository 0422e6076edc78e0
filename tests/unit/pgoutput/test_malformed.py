"""Malformed pgoutput input: every case raises DecodeError naming the message type and offset."""

from __future__ import annotations

import struct

import pytest

from pgfeed.errors import DecodeError
from pgfeed.pgoutput import decode, message_tag_name
from pgfeed.pgoutput.encode import encode
from pgfeed.pgoutput.messages import Message, StreamAbortMessage
from tests.unit.pgoutput.samples import SAMPLES


def be(fmt: str, *values: int) -> bytes:
    return struct.pack(">" + fmt, *values)


def decode_error(buf: bytes, *, in_stream: bool = False) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        decode(buf, in_stream=in_stream)
    return info.value


def assert_names(err: DecodeError, msg_type: str, offset: int | None = None) -> None:
    assert err.msg_type == msg_type
    assert f"message {msg_type}" in str(err)
    assert err.offset is not None and f"offset {err.offset}" in str(err)
    if offset is not None:
        assert err.offset == offset, str(err)


def _id(sample: tuple[Message, bool]) -> str:
    msg, in_stream = sample
    return type(msg).__name__ + ("-in-stream" if in_stream else "")


@pytest.mark.parametrize("sample", SAMPLES, ids=_id)
def test_truncated_at_every_byte(sample: tuple[Message, bool]) -> None:
    msg, in_stream = sample
    buf = encode(msg, in_stream=in_stream)
    name = message_tag_name(buf[0])
    for cut in range(1, len(buf)):
        if isinstance(msg, StreamAbortMessage) and cut == 9:
            continue  # the 8 bytes after the tag are a whole protocol v2 Stream Abort
        err = decode_error(buf[:cut], in_stream=in_stream)
        assert_names(err, name)
        assert err.offset is not None and 0 < err.offset <= cut, (cut, str(err))


@pytest.mark.parametrize("sample", SAMPLES, ids=_id)
def test_trailing_bytes(sample: tuple[Message, bool]) -> None:
    msg, in_stream = sample
    buf = encode(msg, in_stream=in_stream)
    if isinstance(msg, StreamAbortMessage):
        return  # covered by test_stream_abort_bad_length: the length picks the variant
    err = decode_error(buf + b"\x00", in_stream=in_stream)
    assert_names(err, message_tag_name(buf[0]), offset=len(buf))
    assert "trailing" in str(err)


def test_empty_buffer() -> None:
    err = decode_error(b"")
    assert err.offset == 0 and err.field == "tag"


@pytest.mark.parametrize("tag", [b"Z", b"\x00", b"\xff", b"X"])
def test_unknown_tag(tag: bytes) -> None:
    err = decode_error(tag + b"\x00" * 20)
    assert_names(err, message_tag_name(tag[0]), offset=0)
    assert "unknown message tag" in str(err)


def test_unknown_tuple_kind() -> None:
    buf = b"I" + be("I", 1) + b"N" + be("H", 2) + b"n" + b"x"
    err = decode_error(buf)
    assert_names(err, "Insert", offset=9)
    assert err.field == "new_tuple[1].kind" and "unknown TupleData kind" in str(err)


@pytest.mark.parametrize("kind", [b"t", b"b"])
def test_tuple_value_length_past_end(kind: bytes) -> None:
    buf = b"I" + be("I", 1) + b"N" + be("H", 1) + kind + be("i", 10) + b"abc"
    err = decode_error(buf)
    assert_names(err, "Insert", offset=13)
    assert err.field == "new_tuple[0].value" and "past the end" in str(err)


@pytest.mark.parametrize("kind", [b"t", b"b"])
def test_tuple_negative_length(kind: bytes) -> None:
    buf = b"U" + be("I", 1) + b"N" + be("H", 1) + kind + be("i", -1) + b"abc"
    err = decode_error(buf)
    assert_names(err, "Update", offset=9)
    assert "negative length" in str(err)


def test_tuple_huge_ncols_fails_fast() -> None:
    err = decode_error(b"D" + be("I", 1) + b"K" + be("H", 65535) + b"n" * 10)
    assert_names(err, "Delete", offset=18)


def test_message_content_length_past_end_and_negative() -> None:
    head = b"M" + b"\x01" + be("Q", 5) + b"p\0"
    assert_names(decode_error(head + be("i", 100) + b"xy"), "Message", offset=len(head) + 4)
    err = decode_error(head + be("i", -3) + b"xy")
    assert_names(err, "Message", offset=len(head))
    assert "negative length" in str(err)


def test_truncate_relation_count_past_end_and_negative() -> None:
    err = decode_error(b"T" + be("i", 1_000_000_000) + b"\0" + be("I", 1))
    assert_names(err, "Truncate", offset=6)
    assert "past the end" in str(err)
    assert_names(decode_error(b"T" + be("i", -1) + b"\0"), "Truncate", offset=1)


def test_missing_nul_terminator() -> None:
    err = decode_error(b"R" + be("I", 1) + b"public\0" + b"orders")
    assert_names(err, "Relation", offset=12)
    assert err.field == "relation_name" and "NUL" in str(err)
    assert_names(decode_error(b"O" + be("Q", 1) + b"origin"), "Origin", offset=9)


def test_bad_utf8_in_string() -> None:
    err = decode_error(b"Y" + be("I", 1) + b"pub\xfflic\0" + b"t\0")
    assert_names(err, "Type", offset=8)
    assert err.field == "namespace" and "UTF-8" in str(err)


def test_bad_utf8_in_text_column() -> None:
    buf = b"I" + be("I", 1) + b"N" + be("H", 1) + b"t" + be("i", 3) + b"a\xc3("
    err = decode_error(buf)
    assert_names(err, "Insert", offset=14)
    assert err.field == "new_tuple[0].value" and "UTF-8" in str(err)


def test_bad_utf8_in_binary_column_is_fine() -> None:
    buf = b"I" + be("I", 1) + b"N" + be("H", 1) + b"b" + be("i", 2) + b"\xc3("
    assert decode(buf).new_tuple.values == (b"\xc3(",)  # type: ignore[union-attr]


@pytest.mark.parametrize(("buf", "msg_type", "offset"), [
    (b"I" + be("I", 1) + b"K" + be("H", 0), "Insert", 5),
    (b"U" + be("I", 1) + b"X" + be("H", 0), "Update", 5),
    (b"U" + be("I", 1) + b"K" + be("H", 0) + b"K" + be("H", 0), "Update", 8),
    (b"D" + be("I", 1) + b"N" + be("H", 0), "Delete", 5),
])
def test_bad_tuple_markers(buf: bytes, msg_type: str, offset: int) -> None:
    err = decode_error(buf)
    assert_names(err, msg_type, offset=offset)
    assert "expected" in str(err)


@pytest.mark.parametrize("extra", [1, 4, 8, 15, 17, 30])
def test_stream_abort_bad_length(extra: int) -> None:
    buf = b"A" + be("I", 7) + be("I", 7) + b"\x01" * extra
    assert_names(decode_error(buf), "Stream Abort")


def test_in_stream_flag_mismatch_is_caught_when_it_breaks_framing() -> None:
    # An in-stream Insert read as not in-stream sees the xid as relation id, then a bad marker.
    buf = b"I" + be("I", 749) + be("I", 16384) + b"N" + be("H", 0)
    assert_names(decode_error(buf), "Insert", offset=5)
