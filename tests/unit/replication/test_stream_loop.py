"""ReplicationStream.receive / read_batch / send_feedback over a scripted libpq connection (no server).

The fast path parses XLogData inline; these tests hold it to protocol.py's parsers and to the
batching and error rules. The real server is in tests/integration/test_stream.py.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections import deque

import psycopg
import pytest
from psycopg import pq

from pgfeed.errors import DecodeError, SourceError
from pgfeed.replication import protocol
from pgfeed.replication.stream import ReplicationStream

END = object()  # the server ends the copy (get_copy_data -> -1)


def xlog(lsn: int, payload: bytes) -> bytes:
    return b"w" + struct.pack(">QQq", lsn, lsn + 100, 42) + payload


def keepalive(wal_end: int, reply: bool) -> bytes:
    return b"k" + struct.pack(">QqB", wal_end, 7, int(reply))


class FakeResult:
    def __init__(self, message: bytes) -> None:
        self.error_message = message


class FakePGconn:
    """Frames arrive in groups; a group becomes readable on the socket and is buffered by
    consume_input, as libpq does."""

    def __init__(self, arrivals: list[list[object]], *, result_error: bytes = b"") -> None:
        self.rsock, self.wsock = socket.socketpair()
        self.arrivals = deque(arrivals)
        self.buffered: deque[object] = deque()
        self.status = pq.ConnStatus.OK
        self.error_message = b""
        self.results = [FakeResult(result_error)] if result_error else []
        self.sent: list[bytes] = []
        self.consumes = 0
        self.fail_on_get: Exception | None = None
        if self.arrivals:
            self.wsock.send(b"x")

    @property
    def socket(self) -> int:
        return self.rsock.fileno()

    def get_copy_data(self, async_: int) -> tuple[int, memoryview]:
        if self.fail_on_get is not None:
            raise self.fail_on_get
        if not self.buffered:
            return 0, memoryview(b"")
        item = self.buffered.popleft()
        if item is END:
            return -1, memoryview(b"")
        assert isinstance(item, bytes)
        return len(item), memoryview(item)

    def consume_input(self) -> None:
        self.consumes += 1
        self.rsock.setblocking(False)
        try:
            self.rsock.recv(100)
        except BlockingIOError:
            return
        if self.arrivals:
            self.buffered.extend(self.arrivals.popleft())
        if self.arrivals:
            self.wsock.send(b"x")

    def get_result(self) -> FakeResult | None:
        return self.results.pop(0) if self.results else None

    def put_copy_data(self, data: bytes) -> int:
        self.sent.append(bytes(data))
        return 1

    def flush(self) -> int:
        return 0

    def put_copy_end(self) -> int:
        self.ended = True
        self.buffered.append(END)
        return 1

    def close(self) -> None:
        self.rsock.close()
        self.wsock.close()


class FakeConn:
    def __init__(self, pg: FakePGconn) -> None:
        self.pg = pg
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self.pg.close()


def make_stream(pg: FakePGconn, dsn: str = "host=h dbname=d user=u password=s3cret") -> ReplicationStream:
    stream = ReplicationStream.__new__(ReplicationStream)
    stream._dsn = dsn
    stream._conn = FakeConn(pg)  # type: ignore[assignment]
    stream._pg = pg  # type: ignore[assignment]
    stream._fd = pg.socket
    stream._reads = select.poll()
    stream._reads.register(pg.socket, select.POLLIN)
    stream._streaming = True
    stream._ended = False
    stream._native = None  # the scripted connection has no PGconn *: the Python loop
    stream.server_version = 180000
    return stream


def test_frames_match_the_reference_parser_and_batches_gather_what_is_ready() -> None:
    frames = [xlog(1000 + i, bytes([65 + i % 26]) * (i % 40)) for i in range(50)]
    pg = FakePGconn([frames[:20], frames[20:35], frames[35:]])
    stream = make_stream(pg)
    got, keepalives = stream.read_batch(1000, timeout=1)
    assert keepalives == []
    expected = [(m.data_start, bytes(m.payload)) for m in map(protocol.parse_xlog_data, frames)]
    assert got == expected
    # Views over each message's own buffer (libpq hands out a fresh one per CopyData): still
    # intact after the connection has moved on.
    pg.arrivals.append([xlog(9999, b"Z" * 64)])
    pg.wsock.send(b"x")
    later, _ = stream.read_batch(1000, timeout=1)
    assert [bytes(p) for _, p in later] == [b"Z" * 64]
    assert [(lsn, bytes(p)) for lsn, p in got] == expected
    stream.close()  # ends the copy cleanly: CopyDone, then reads to the server's end
    assert pg.ended and not pg.buffered


def test_max_messages_caps_a_batch_and_the_rest_follows() -> None:
    frames = [xlog(i, b"I") for i in range(10)]
    stream = make_stream(FakePGconn([frames]))
    first, _ = stream.read_batch(4, timeout=1)
    second, _ = stream.read_batch(4, timeout=1)
    third, _ = stream.read_batch(4, timeout=1)
    assert [lsn for lsn, _ in first + second + third] == list(range(10))
    assert (len(first), len(second), len(third)) == (4, 4, 2)


def test_keepalives_are_returned_with_their_reply_flag() -> None:
    stream = make_stream(FakePGconn([[xlog(5, b"B"), keepalive(99, True), xlog(6, b"C"), keepalive(120, False)]]))
    frames, keepalives = stream.read_batch(100, timeout=1)
    assert frames == [(5, b"B"), (6, b"C")]
    assert keepalives == [(99, True), (120, False)]


def test_empty_payload_frame_is_valid() -> None:
    stream = make_stream(FakePGconn([[xlog(5, b"")]]))
    assert stream.read_batch(10, timeout=1)[0] == [(5, b"")]


@pytest.mark.parametrize("frame", [b"w" + bytes(10), b"w", b"Z" + bytes(30), b"k" + bytes(5),
                                   b"k" + bytes(16) + b"\x02",  # replyRequested neither 0 nor 1
                                   b"k" + bytes(18)])  # a trailing byte
def test_malformed_frames_raise_decode_error(frame: bytes) -> None:
    stream = make_stream(FakePGconn([[xlog(1, b"B"), frame]]))
    with pytest.raises(DecodeError):
        stream.read_batch(10, timeout=1)


def test_nothing_available_waits_for_the_timeout() -> None:
    stream = make_stream(FakePGconn([]))
    t0 = time.monotonic()
    assert stream.read_batch(10, timeout=0.2) == ([], [])
    assert 0.15 < time.monotonic() - t0 < 2


def test_copy_end_raises_source_error_without_the_password() -> None:
    error = b"FATAL:  terminating connection due to administrator command (password=s3cret)"
    stream = make_stream(FakePGconn([[xlog(1, b"B"), END]], result_error=error))
    with pytest.raises(SourceError) as info:
        stream.read_batch(10, timeout=1)
    assert "administrator command" in str(info.value)
    assert "s3cret" not in str(info.value)
    with pytest.raises(SourceError, match="ended"):
        stream.read_batch(10, timeout=0)
    with pytest.raises(SourceError, match="ended"):
        stream.send_feedback(1, 1, 1)


def test_libpq_errors_become_source_errors_without_the_password() -> None:
    pg = FakePGconn([[xlog(1, b"B")]])
    pg.fail_on_get = psycopg.OperationalError("receiving copy data failed: server closed the connection "
                                              "(dsn password=s3cret)")
    stream = make_stream(pg)
    with pytest.raises(SourceError) as info:
        stream.read_batch(10, timeout=1)
    assert "server closed" in str(info.value) and "s3cret" not in str(info.value)


def test_max_messages_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_messages"):
        make_stream(FakePGconn([])).read_batch(0, timeout=0)


def test_send_feedback_builds_a_status_update() -> None:
    pg = FakePGconn([])
    stream = make_stream(pg)
    stream.send_feedback(300, 200, 100, reply=True)
    (msg,) = pg.sent
    assert msg[:1] == b"r" and struct.unpack(">QQQ", msg[1:25]) == (300, 200, 100) and msg[-1] == 1


def test_closed_stream_refuses_and_close_is_idempotent() -> None:
    pg = FakePGconn([])
    stream = make_stream(pg)
    stream._streaming = False  # nothing to end cleanly
    stream.close()
    stream.close()
    with pytest.raises(SourceError, match="closed"):
        stream.read_batch(1, timeout=0)
    with pytest.raises(SourceError, match="closed"):
        stream.send_feedback(1, 1, 1)
