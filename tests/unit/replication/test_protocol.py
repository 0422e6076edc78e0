"""Replication frames: XLogData and keepalive parsing, status updates, and the confirm/feedback rules."""

from __future__ import annotations

import random
import struct

import pytest

from pgfeed.errors import DecodeError
from pgfeed.replication import protocol
from pgfeed.replication.protocol import (
    Keepalive,
    XLogData,
    build_status_update,
    feedback_due,
    keepalive_confirmable,
    parse_frame,
    parse_keepalive,
    parse_xlog_data,
)


def xlog(data_start: int, wal_end: int, send_time: int, payload: bytes) -> bytes:
    return b"w" + struct.pack(">QQq", data_start, wal_end, send_time) + payload


def keepalive(wal_end: int, send_time: int, reply: int) -> bytes:
    return b"k" + struct.pack(">QqB", wal_end, send_time, reply)


# -- parsing ---------------------------------------------------------------------------------------


def test_xlog_data_fields_and_payload() -> None:
    frame = xlog(0x16B374D848, 0x16B374D900, 123_456_789, b"C\x00payload")
    msg = parse_xlog_data(frame)
    assert msg == XLogData(0x16B374D848, 0x16B374D900, 123_456_789, b"C\x00payload")
    assert bytes(parse_xlog_data(memoryview(frame)).payload) == b"C\x00payload"
    assert parse_frame(frame) == msg


def test_xlog_data_empty_payload_and_extremes() -> None:
    top = (1 << 64) - 1
    msg = parse_xlog_data(xlog(top, top, -1, b""))
    assert (msg.data_start, msg.wal_end, msg.send_time, bytes(msg.payload)) == (top, top, -1, b"")


@pytest.mark.parametrize("reply", [0, 1])
def test_keepalive_fields(reply: int) -> None:
    frame = keepalive(0xABCDEF, -5, reply)
    assert parse_keepalive(frame) == Keepalive(0xABCDEF, -5, bool(reply))
    assert parse_frame(memoryview(frame)) == Keepalive(0xABCDEF, -5, bool(reply))


@pytest.mark.parametrize(("cut", "field", "offset"), [
    (1, "dataStart", 1), (8, "dataStart", 1), (9, "walEnd", 9), (16, "walEnd", 9),
    (17, "sendTime", 17), (24, "sendTime", 17)])
def test_truncated_xlog_data_names_field_and_offset(cut: int, field: str, offset: int) -> None:
    frame = xlog(1, 2, 3, b"")[:cut]
    for parse in (parse_xlog_data, parse_frame):
        with pytest.raises(DecodeError) as info:
            parse(frame)
        err = info.value
        assert (err.msg_type, err.field, err.offset) == ("XLogData", field, offset)
        assert "truncated" in str(err)


@pytest.mark.parametrize(("cut", "field", "offset"), [
    (1, "walEnd", 1), (9, "sendTime", 9), (16, "sendTime", 9), (17, "replyRequested", 17)])
def test_truncated_keepalive(cut: int, field: str, offset: int) -> None:
    with pytest.raises(DecodeError) as info:
        parse_frame(keepalive(1, 2, 0)[:cut])
    assert (info.value.msg_type, info.value.field, info.value.offset) == ("PrimaryKeepalive", field, offset)


def test_keepalive_trailing_bytes_and_bad_flag() -> None:
    with pytest.raises(DecodeError, match="trailing") as info:
        parse_keepalive(keepalive(1, 2, 0) + b"\x00")
    assert info.value.offset == 18
    with pytest.raises(DecodeError, match="replyRequested") as info:
        parse_keepalive(keepalive(1, 2, 2))
    assert info.value.field == "replyRequested" and info.value.offset == 17


@pytest.mark.parametrize("frame", [b"", b"r" + bytes(40), b"\x00", b"W" + bytes(24)])
def test_empty_or_unknown_tag(frame: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        parse_frame(frame)
    assert info.value.field == "tag" and info.value.offset == 0


def test_wrong_tag_for_specific_parser() -> None:
    with pytest.raises(DecodeError, match="expected tag"):
        parse_xlog_data(keepalive(1, 2, 0))
    with pytest.raises(DecodeError, match="expected tag"):
        parse_keepalive(xlog(1, 2, 3, b"x"))
    with pytest.raises(DecodeError, match="empty"):
        parse_keepalive(b"")


def test_random_frames_parse_or_raise_decode_error() -> None:
    rng = random.Random(20261122)
    seeds = [xlog(1, 2, 3, b"B" + bytes(20)), keepalive(7, 8, 1)]
    for _ in range(20_000):
        buf = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            op = rng.randrange(3)
            if op == 0 and buf:
                buf[rng.randrange(len(buf))] = rng.randrange(256)
            elif op == 1:
                del buf[rng.randrange(len(buf) + 1):]
            else:
                buf += bytes(rng.randrange(4))
        try:
            parsed = parse_frame(bytes(buf))
        except DecodeError:
            continue
        assert isinstance(parsed, (XLogData, Keepalive))


# -- status update -------------------------------------------------------------------------------


def test_status_update_layout() -> None:
    msg = build_status_update(0x30, 0x20, 0x10, now_us=987_654_321, reply=True)
    assert msg == b"r" + struct.pack(">QQQqB", 0x30, 0x20, 0x10, 987_654_321, 1)
    assert len(build_status_update(1, 1, 1)) == 34
    assert build_status_update(1, 2, 3, now_us=0)[-1] == 0


def test_status_update_clock_is_microseconds_since_2000() -> None:
    assert protocol.pg_now_us(protocol.PG_EPOCH_UNIX + 1.5) == 1_500_000
    msg = build_status_update(0, 0, 0)
    clock = struct.unpack(">q", msg[25:33])[0]
    assert abs(clock - protocol.pg_now_us()) < 60_000_000


@pytest.mark.parametrize("bad", [-1, 1 << 64])
def test_status_update_rejects_out_of_range_lsn(bad: int) -> None:
    with pytest.raises(ValueError, match="flushed"):
        build_status_update(0, bad, 0)


# -- decisions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("received", "in_txn", "hold", "expected"), [
    (100, False, None, True),  # idle, nothing pending: confirm the keepalive's position
    (100, True, None, False),  # walEnd may lie past the commit still being sent
    (100, False, 50, False),  # a prepared transaction is pending: PostgreSQL must re-send it
    (100, False, 200, False),
    (100, True, 50, False),
    (0, False, None, False),  # nothing received yet: nothing to confirm
])
def test_keepalive_confirmable(received: int, in_txn: bool, hold: int | None, expected: bool) -> None:
    assert keepalive_confirmable(received, in_txn, hold) is expected


@pytest.mark.parametrize(("now", "last", "interval", "expected"), [
    (10.0, 9.5, 1.0, False),
    (10.0, 9.0, 1.0, True),
    (10.0, 0.0, 1.0, True),  # never sent
    (5.0, 10.0, 1.0, True),  # the clock went back: do not stall
    (10.0, 10.0, 0.0, True),
])
def test_feedback_due(now: float, last: float, interval: float, expected: bool) -> None:
    assert feedback_due(now, last, interval) is expected
