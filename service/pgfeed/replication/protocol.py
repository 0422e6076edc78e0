"""The streaming replication protocol's CopyData frames (pure, no I/O): parse XLogData ``w`` and
Primary keepalive ``k``, build the Standby Status Update ``r``, and the capture loop's decisions
about when a position may be confirmed and when feedback is due.
"""

from __future__ import annotations

from dataclasses import dataclass
from struct import Struct

from pgfeed.errors import DecodeError
from pgfeed.pgoutput._wire import Layout, show_byte
from pgfeed.pgoutput.messages import PG_EPOCH_UNIX, pg_now_us

__all__ = [
    "KEEPALIVE",
    "PG_EPOCH_UNIX",
    "XLOG_DATA",
    "XLOG_HEADER",
    "Keepalive",
    "XLogData",
    "build_status_update",
    "feedback_due",
    "keepalive_confirmable",
    "parse_frame",
    "parse_keepalive",
    "parse_xlog_data",
    "pg_now_us",
]

XLOG_DATA = 0x77  # 'w'
KEEPALIVE = 0x6B  # 'k'
_MAX_U64 = (1 << 64) - 1

_XLOG = Layout(("Q", "dataStart"), ("Q", "walEnd"), ("q", "sendTime"))
_KEEPALIVE = Layout(("Q", "walEnd"), ("q", "sendTime"), ("B", "replyRequested"))
XLOG_HEADER = 1 + _XLOG.size  # bytes before the payload of an XLogData frame (25)
_STATUS = Struct(">cQQQqB")


@dataclass(frozen=True, slots=True)
class XLogData:
    """``w``: WAL data; for logical replication ``payload`` is one output plugin message."""

    data_start: int  # LSN where the payload's WAL starts (a Commit's end LSN for pgoutput)
    wal_end: int  # the server's current end of WAL
    send_time: int  # server clock, µs since 2000-01-01
    payload: bytes | memoryview


@dataclass(frozen=True, slots=True)
class Keepalive:
    """``k``: the server is alive; ``reply_requested`` asks for a status update at once."""

    wal_end: int
    send_time: int
    reply_requested: bool


def _fixed(frame: bytes | memoryview, tag: int, name: str, layout: Layout) -> tuple[int, ...]:
    n = len(frame)
    if n == 0:
        raise DecodeError("empty replication frame", msg_type=name, field="tag", offset=0)
    if frame[0] != tag:
        raise DecodeError(f"expected tag {show_byte(tag)}, got {show_byte(frame[0])}",
                          msg_type=name, field="tag", offset=0)
    if n < 1 + layout.size:
        field, rel, size = layout.field_at(n - 1)
        raise DecodeError(f"truncated: {field} needs {size} bytes, {n - 1 - rel} left",
                          msg_type=name, field=field, offset=1 + rel)
    return layout.struct.unpack_from(frame, 1)


def parse_xlog_data(frame: bytes | memoryview) -> XLogData:
    """A whole ``w`` frame (tag included); the payload is a zero-copy slice of ``frame``."""
    data_start, wal_end, send_time = _fixed(frame, XLOG_DATA, "XLogData", _XLOG)
    return XLogData(data_start, wal_end, send_time, frame[XLOG_HEADER:])


def parse_keepalive(frame: bytes | memoryview) -> Keepalive:
    """A whole ``k`` frame (tag included); trailing bytes or a reply flag other than 0/1 are
    malformed."""
    wal_end, send_time, reply = _fixed(frame, KEEPALIVE, "PrimaryKeepalive", _KEEPALIVE)
    end = 1 + _KEEPALIVE.size
    if len(frame) != end:
        raise DecodeError(f"{len(frame) - end} trailing bytes after a complete message",
                          msg_type="PrimaryKeepalive", field="end", offset=end)
    if reply > 1:
        raise DecodeError(f"replyRequested must be 0 or 1, got {reply}",
                          msg_type="PrimaryKeepalive", field="replyRequested", offset=end - 1)
    return Keepalive(wal_end, send_time, bool(reply))


def parse_frame(frame: bytes | memoryview) -> XLogData | Keepalive:
    """Dispatch one CopyData frame of a replication stream by its tag."""
    if len(frame) == 0:
        raise DecodeError("empty replication frame", msg_type="CopyData", field="tag", offset=0)
    tag = frame[0]
    if tag == XLOG_DATA:
        return parse_xlog_data(frame)
    if tag == KEEPALIVE:
        return parse_keepalive(frame)
    raise DecodeError(f"unknown replication frame tag {show_byte(tag)}", msg_type="CopyData",
                      field="tag", offset=0)


def build_status_update(written: int, flushed: int, applied: int, *, now_us: int | None = None,
                        reply: bool = False) -> bytes:
    """``r``: Standby Status Update. ``flushed`` is what the server may treat as durable on our
    side (the slot's confirmed_flush_lsn follows it); ``reply`` asks for a keepalive back."""
    for name, lsn in (("written", written), ("flushed", flushed), ("applied", applied)):
        if not 0 <= lsn <= _MAX_U64:
            raise ValueError(f"{name} LSN {lsn} is outside 0..2**64-1")
    clock = pg_now_us() if now_us is None else now_us
    return _STATUS.pack(b"r", written, flushed, applied, clock, 1 if reply else 0)


def keepalive_confirmable(received: int, in_transaction: bool, hold_lsn: int | None) -> bool:
    """May the position a keepalive reported (``received``) be confirmed as flushed?

    Only between transactions: inside one, walEnd may lie past the commit still being sent, and
    confirming it would skip that transaction on a restart. And only while no prepared
    transaction is pending (``hold_lsn`` is None): PostgreSQL re-sends a PREPARE after a restart
    only if the slot was not confirmed past it.
    """
    return received > 0 and not in_transaction and hold_lsn is None


def feedback_due(now: float, last: float, interval: float) -> bool:
    """Is an unsolicited status update due (``now``/``last`` on one monotonic clock, seconds)?

    ``last`` in the future (a clock that jumped back) counts as due, so feedback never stalls.
    """
    return now - last >= interval or now < last
