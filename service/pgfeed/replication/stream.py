"""The walsender connection: the only module that touches ``conn.pgconn`` and its socket.

``ReplicationStream`` reads CopyData frames of a logical replication stream in batches (a
compiled loop, ``_receive.c``, where it can) and sends standby status updates; ``create_slot`` / ``exported_slot`` create a pgoutput slot over a
replication connection. Every libpq or connection failure surfaces as ``SourceError`` with the
DSN's password scrubbed.
"""

from __future__ import annotations

import contextlib
import logging
import select
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from struct import Struct
from typing import Any, NoReturn, Self

import psycopg
from psycopg import pq, sql

from pgfeed.assembler.framing import FRAME, walk
from pgfeed.compiled import optional
from pgfeed.dsn import scrub
from pgfeed.errors import SourceError
from pgfeed.replication import commands, libpq, protocol
from pgfeed.replication.connect import connect, one_line
from pgfeed_client._cursor import parse_lsn

__all__ = ["ReplicationStream", "create_slot", "exported_slot"]

log = logging.getLogger("pgfeed.replication")

WRITE_TIMEOUT = 30.0  # seconds a status update may wait for a writable socket
CLOSE_TIMEOUT = 5.0  # seconds close() waits for the server to end the copy cleanly

_HEAD = Struct(">BQ")  # tag and dataStart of an XLogData frame
_KEEPALIVE = Struct(">BQqB")  # a whole PrimaryKeepalive: tag, walEnd, sendTime, replyRequested
_K = protocol.KEEPALIVE
_MIN_XLOG = protocol.XLOG_HEADER  # 25: a shorter 'w' frame is malformed
_W = protocol.XLOG_DATA
_COPY_BOTH = pq.ExecStatus.COPY_BOTH
_CONN_OK = pq.ConnStatus.OK

Frame = tuple[int, memoryview]  # (dataStart, pgoutput message): a view into Received.data


_READABLE = select.POLLIN | select.POLLERR | select.POLLHUP


@dataclass(frozen=True, slots=True)
class Received:
    """One receive: the XLogData payloads as log frames back to back in ``data`` (``FRAME``:
    dataStart, length, message), ``runs`` of them ``(start, stop, rows)``: ``rows`` > 0 for
    that many consecutive row changes (the assembler appends such a run as it is), 0 for one
    other message; the keepalives ``(walEnd, replyRequested)``."""

    data: bytes
    runs: list[tuple[int, int, int]]
    keepalives: list[tuple[int, bool]]
    last_lsn: int = 0  # the last frame's dataStart (0: no frame)

    def frames(self) -> list[Frame]:
        view = memoryview(self.data)
        return [(lsn, view[a:b]) for _, lsn, a, b in walk(view)]


_NOTHING = Received(b"", [], [])
_ROW_TAGS = frozenset(b"IUDT")  # as _receive.c's is_row


def _receive_py(pg: pq.abc.PGconn, max_messages: int) -> tuple[
        int, bytes, list[tuple[int, int, int]], list[tuple[int, bool]], int, bytes | None]:
    """``_receive.receive`` in Python, with psycopg's calls: the fallback and the specification
    (statuses: 0 nothing more ready, 1 full, -1 copy ended, -2 libpq error, -3 ``bad``)."""
    data = bytearray()
    runs: list[tuple[int, int, int]] = []
    keepalives: list[tuple[int, bool]] = []
    consumed = False
    count = status = last = 0
    while count < max_messages:
        n, buf = pg.get_copy_data(1)
        if n == 0:
            if consumed:
                break
            pg.consume_input()  # raises psycopg's error when the connection broke
            consumed = True
            continue
        if n < 0:
            status = n if n == -1 else -2
            break
        consumed = False
        if n >= _MIN_XLOG and buf[0] == _W:
            at = len(data)
            last = _HEAD.unpack_from(buf)[1]
            data += FRAME.pack(last, n - _MIN_XLOG)
            data += buf[_MIN_XLOG:]
            row = n > _MIN_XLOG and buf[_MIN_XLOG] in _ROW_TAGS
            if row and runs and runs[-1][2]:
                runs[-1] = (runs[-1][0], len(data), runs[-1][2] + 1)
            else:
                runs.append((at, len(data), int(row)))
        elif n == _KEEPALIVE.size and buf[0] == _K and buf[17] <= 1:
            keepalives.append((_KEEPALIVE.unpack_from(buf)[1], buf[17] == 1))
        else:
            return -3, bytes(data), runs, keepalives, last, bytes(buf)
        count += 1
    if status == 0 and count >= max_messages:
        status = 1
    return status, bytes(data), runs, keepalives, last, None


_compiled: Any = optional("pgfeed.replication._receive")


def _wait(fd: int, timeout: float, *, write: bool = False) -> int:
    """Wait up to ``timeout`` seconds for ``fd`` to be readable (or writable with ``write``);
    the poll events, 0 on timeout. poll, not select: descriptors past 1023 work too."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | (select.POLLOUT if write else 0))
    ready = poller.poll(_ms(timeout))
    return ready[0][1] if ready else 0


def _ms(timeout: float) -> int:
    """A poll timeout in whole milliseconds, rounded up (a wait never ends before its deadline)."""
    return max(0, int(timeout * 1000 + 0.999))


def _connect(dsn: str) -> psycopg.Connection:
    return connect(dsn, replication=True)


class ReplicationStream:
    """One logical replication connection (``replication=database``) to a source.

    Use: ``start(...)`` once, then ``receive`` (or ``read_batch``) / ``send_feedback`` from one
    thread, then ``close()`` (idempotent). What is received is copied out of libpq's buffers
    into one buffer a batch (``Received.data``), so callers may keep it.
    """

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: psycopg.Connection | None = _connect(dsn)
        self._pg: pq.abc.PGconn | None = self._conn.pgconn
        self._fd = self._pg.socket
        self._reads = select.poll()  # read_batch's wait, registered once: it runs on every batch
        self._reads.register(self._fd, select.POLLIN)
        # the compiled loop's arguments: this connection's PGconn * and libpq's functions
        functions = libpq.functions() if _compiled is not None else None
        address = getattr(self._pg, "pgconn_ptr", None)
        self._native = (address, *functions) if functions is not None and address else None
        self._streaming = False
        self._ended = False  # the server ended the copy: this stream is dead
        self.server_version: int = self._conn.info.server_version

    # -- commands --------------------------------------------------------------------------------

    def identify_system(self) -> tuple[str, int, int, str | None]:
        """``IDENTIFY_SYSTEM``: (system identifier, timeline, current WAL flush LSN, database)."""
        row = self._command(commands.identify_system())
        return str(row[0]), int(row[1]), parse_lsn(str(row[2])), None if row[3] is None else str(row[3])

    def start(self, slot: str, start_lsn: int, *, proto_version: int, publications: Sequence[str],
              streaming: str = "off", messages: bool = False, two_phase: bool = False) -> None:
        """``START_REPLICATION`` from ``start_lsn`` (0: the slot's confirmed position). The server
        starts at max(start_lsn, confirmed_flush_lsn) and skips transactions committed before."""
        if self._streaming:
            raise SourceError("replication already started on this connection")
        cmd = commands.start_replication(slot, start_lsn, proto_version=proto_version,
                                         publications=publications, streaming=streaming,
                                         messages=messages, two_phase=two_phase)
        conn = self._open_conn()
        try:
            cur = conn.execute(cmd)
        except psycopg.Error as exc:
            raise self._error(f"START_REPLICATION on slot {slot!r} failed", exc) from None
        status = cur.pgresult.status if cur.pgresult is not None else None
        if status != _COPY_BOTH:
            raise SourceError(f"START_REPLICATION on slot {slot!r} did not start a stream ({status})")
        self._streaming = True

    def _command(self, cmd: sql.SQL | sql.Composed) -> tuple[Any, ...]:
        conn = self._open_conn()
        try:
            row: tuple[Any, ...] | None = conn.execute(cmd).fetchone()
        except psycopg.Error as exc:
            raise self._error("replication command failed", exc) from None
        if row is None:
            raise SourceError("replication command returned no row")
        return row

    # -- the hot path ----------------------------------------------------------------------------

    def receive(self, max_messages: int, timeout: float) -> Received:
        """What arrived: its XLogData payloads as log frames (``Received``) and its keepalives.

        Returns as soon as something has arrived and the socket has nothing more ready (at most
        ``max_messages`` messages); with nothing available, waits up to ``timeout`` seconds and
        may return nothing. The loop is compiled (``_receive.c``) where it can be.
        """
        pg = self._pg
        if pg is None or not self._streaming:
            raise self._not_streaming("receive")
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, got {max_messages}")
        native = self._native
        deadline = 0.0
        try:
            while True:
                if native is not None:
                    status, data, runs, keepalives, last, bad = _compiled.receive(*native, max_messages)
                else:
                    status, data, runs, keepalives, last, bad = _receive_py(pg, max_messages)
                if status == -1:
                    self._copy_ended()
                if status == -2:
                    raise psycopg.OperationalError(pg.get_error_message())
                if status == -3:  # neither a well-formed XLogData nor keepalive
                    self._other(memoryview(bad), keepalives)  # raises DecodeError saying why
                if runs or keepalives:
                    return Received(data, runs, keepalives, last)
                now = time.monotonic()
                if not deadline:
                    deadline = now + timeout
                if now >= deadline or not self._reads.poll(_ms(deadline - now)):
                    return _NOTHING
        except psycopg.Error as exc:
            raise self._error("replication stream failed", exc) from None

    def read_batch(self, max_messages: int, timeout: float,
                   ) -> tuple[list[Frame], list[tuple[int, bool]]]:
        """``receive`` as frames ``(dataStart, message)`` and keepalives ``(walEnd,
        replyRequested)`` (tools and tests; capture takes ``Received`` as it is)."""
        got = self.receive(max_messages, timeout)
        return got.frames(), got.keepalives

    @staticmethod
    def _other(buf: memoryview, keepalives: list[tuple[int, bool]]) -> None:
        """Anything but a well-formed XLogData frame: a keepalive, or DecodeError."""
        if len(buf) and buf[0] == protocol.KEEPALIVE:
            keepalive = protocol.parse_keepalive(buf)
            keepalives.append((keepalive.wal_end, keepalive.reply_requested))
        else:
            protocol.parse_frame(buf)  # raises DecodeError: the fast path took every good 'w'
            raise AssertionError(f"frame {bytes(buf[:1])!r} escaped the fast path")

    def _copy_ended(self) -> NoReturn:
        """The server ended the copy (shutdown, terminated walsender, slot dropped): raise with
        its reason."""
        self._streaming = False
        self._ended = True
        reason = "the server ended the replication stream"
        pg = self._pg
        if pg is not None:
            for _ in range(16):
                res = pg.get_result()
                if res is None:
                    break
                message = one_line(scrub(res.error_message.decode("utf-8", "replace"), self._dsn))
                if message:
                    reason = f"{reason}: {message}"
                    break
            if pg.status != _CONN_OK:
                err = one_line(scrub(pg.error_message.decode("utf-8", "replace"), self._dsn))
                if err and err not in reason:
                    reason = f"{reason}: {err}"
        raise SourceError(scrub(reason, self._dsn))

    # -- feedback --------------------------------------------------------------------------------

    def send_feedback(self, written: int, flushed: int, applied: int, reply: bool = False) -> None:
        """Send a Standby Status Update; ``flushed`` becomes the slot's confirmed_flush_lsn (the
        server never moves it backward). Blocks at most ``WRITE_TIMEOUT`` on a full socket."""
        pg = self._pg
        if pg is None or not self._streaming:
            raise self._not_streaming("send_feedback")
        message = protocol.build_status_update(written, flushed, applied, reply=reply)
        try:
            deadline = time.monotonic() + WRITE_TIMEOUT
            while not pg.put_copy_data(message):
                self._wait_writable(deadline)
            while pg.flush():
                self._wait_writable(deadline)
        except psycopg.Error as exc:
            raise self._error("sending a status update failed", exc) from None

    def _wait_writable(self, deadline: float) -> None:
        """Wait until the socket can take more (reading what arrives meanwhile, as libpq asks)."""
        pg = self._pg
        assert pg is not None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SourceError(f"the source did not accept a status update within {WRITE_TIMEOUT:g} s")
        if _wait(self._fd, remaining, write=True) & _READABLE:
            pg.consume_input()

    # -- teardown --------------------------------------------------------------------------------

    def close(self) -> None:
        """End the copy cleanly when the connection is healthy (CopyDone, drain what the server
        still sends for up to ``CLOSE_TIMEOUT``), then close. Idempotent, never raises."""
        conn, pg = self._conn, self._pg
        self._conn = self._pg = None
        if conn is None:
            return
        try:
            if self._streaming and pg is not None and pg.status == _CONN_OK:
                self._end_copy(pg)
        except Exception as exc:  # noqa: BLE001 - the connection is going away regardless
            log.debug("replication stream did not end cleanly: %s", one_line(scrub(str(exc), self._dsn)))
        finally:
            self._streaming = False
            conn.close()

    def _end_copy(self, pg: pq.abc.PGconn) -> None:
        deadline = time.monotonic() + CLOSE_TIMEOUT
        pg.put_copy_end()
        while pg.flush():
            if time.monotonic() > deadline:
                return
            _wait(self._fd, 0.1, write=True)
        while True:
            n, _ = pg.get_copy_data(1)
            if n < 0:
                break
            if n == 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not _wait(self._fd, remaining):
                    return
                pg.consume_input()
        while pg.get_result() is not None and time.monotonic() < deadline:
            pass

    # -- helpers ---------------------------------------------------------------------------------

    def _not_streaming(self, what: str) -> SourceError:
        if self._pg is None:
            return SourceError("the replication stream is closed")
        if self._ended:
            return SourceError("the server ended the replication stream; open a new one")
        return SourceError(f"{what} before start()")

    def _open_conn(self) -> psycopg.Connection:
        if self._conn is None:
            raise SourceError("the replication stream is closed")
        return self._conn

    def _error(self, what: str, exc: BaseException) -> SourceError:
        return SourceError(f"{what}: {one_line(scrub(str(exc), self._dsn))}")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def create_slot(dsn: str, slot: str, *, snapshot: str = "nothing", two_phase: bool = False,
                failover: bool = False) -> tuple[int, str | None]:
    """Create a pgoutput logical slot; return (consistent point LSN, exported snapshot name).

    The connection is closed on return, so with ``snapshot="export"`` the returned snapshot name
    is already dead (it only lives while the creating connection stays open and idle): to read
    the slot's consistent snapshot, use ``exported_slot`` instead. Blocks until transactions
    running on the source have ended (the slot needs a consistent point).
    """
    with _created_slot(dsn, slot, snapshot=snapshot, two_phase=two_phase,
                       failover=failover) as created:
        return created


@contextlib.contextmanager
def exported_slot(dsn: str, slot: str, *, two_phase: bool = False) -> Iterator[tuple[int, str]]:
    """Create a pgoutput slot exporting its snapshot, and keep its replication connection open
    and idle for the block.

    Yields (consistent point LSN, snapshot name). While the block runs, other sessions on the
    same database can import the snapshot and see exactly the data the slot's stream starts
    after::

        with exported_slot(dsn, "s") as (lsn, name), psycopg.connect(dsn) as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(name)))
            ...  # rows committed before lsn; the slot streams everything committed after

    The snapshot ends when the block exits (the connection is closed); the slot remains.
    """
    with _created_slot(dsn, slot, snapshot="export", two_phase=two_phase) as (lsn, name):
        if not name:
            raise SourceError(f"replication slot {slot!r} was created without an exported snapshot")
        yield lsn, name


@contextlib.contextmanager
def _created_slot(dsn: str, slot: str, *, snapshot: str, two_phase: bool,
                  failover: bool = False) -> Iterator[tuple[int, str | None]]:
    conn = _connect(dsn)
    try:
        cmd = commands.create_replication_slot(slot, snapshot=snapshot, two_phase=two_phase,
                                               failover=failover,
                                               server_version=conn.info.server_version)
        try:
            row = conn.execute(cmd).fetchone()
        except psycopg.Error as exc:
            raise SourceError(f"cannot create replication slot {slot!r}: "
                              f"{one_line(scrub(str(exc), dsn))}") from None
        if row is None:
            raise SourceError(f"CREATE_REPLICATION_SLOT {slot!r} returned no row")
        yield parse_lsn(row[1]), row[2]
    finally:
        conn.close()
