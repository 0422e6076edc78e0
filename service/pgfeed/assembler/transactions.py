"""TransactionAssembler: pgoutput messages in arrival order -> committed StoredTransactions.

Readers only ever see committed transactions: streamed ones wait for Stream Commit, prepared
(two-phase) ones for COMMIT PREPARED; aborted and rolled-back ones are never emitted.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from functools import partial
from itertools import chain

from pgfeed.assembler.framing import FRAME, walk
from pgfeed.assembler.model import Payload, StoredTransaction, end_position
from pgfeed.assembler.spill import SpilledPayload, SpillStore
from pgfeed.errors import AssemblyError
from pgfeed.netorder import U32
from pgfeed.pgoutput.decode import decode, message_tag_name
from pgfeed.pgoutput.messages import (
    TAG_BEGIN,
    TAG_BEGIN_PREPARE,
    TAG_COMMIT,
    TAG_COMMIT_PREPARED,
    TAG_ORIGIN,
    TAG_PREPARE,
    TAG_ROLLBACK_PREPARED,
    TAG_STREAM_ABORT,
    TAG_STREAM_COMMIT,
    TAG_STREAM_PREPARE,
    TAG_STREAM_START,
    TAG_STREAM_STOP,
    BeginMessage,
    BeginPrepareMessage,
    CommitMessage,
    CommitPreparedMessage,
    LogicalMessage,
    OriginMessage,
    PrepareMessage,
    RollbackPreparedMessage,
    StreamAbortMessage,
    StreamCommitMessage,
    StreamPrepareMessage,
    StreamStartMessage,
)

_pack = FRAME.pack
_HEADER = FRAME.size
_unpack_xid = U32.unpack_from

_ROW = frozenset(b"IUDT")  # row changes: framed, counted, never decoded here
_SCHEMA = frozenset(b"RY")  # Relation / Type: framed and kept in schema_frames
_CHANGE = frozenset(b"IUDTM")  # what change_count counts (transactional 'M' included)
_DATA = _CHANGE | _SCHEMA  # carry a leading Int32 (sub)xid inside a stream block
_M = ord("M")
# pgfeed's own heartbeats (non-transactional messages capture emits so an idle slot moves): they
# advance the position and are never stored.
HEARTBEAT_PREFIX = "pgfeed.heartbeat"
_u32 = U32.unpack_from
# Spill key of a transaction's frames with aborted subtransactions filtered out (xids are 32-bit).
_FILTERED = 1 << 32


def _fmt(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def _error(tag: int, lsn: int, problem: str) -> AssemblyError:
    return AssemblyError(f"{message_tag_name(tag)} message at {_fmt(lsn)}: {problem}")


class _Txn:
    """A transaction being assembled: ``spilled`` bytes in the spill store, then ``data``."""

    __slots__ = (
        "aborted",
        "changes",
        "data",
        "final_lsn",
        "first_lsn",
        "gid",
        "last_subxid",
        "origin",
        "runs",
        "schema",
        "schema_published",
        "spilled",
        "xid",
    )

    def __init__(self, xid: int, first_lsn: int, final_lsn: int = 0) -> None:
        self.xid = xid
        self.first_lsn = first_lsn  # dataStart of Begin / Begin Prepare / first Stream Start
        self.final_lsn = final_lsn
        self.origin: str | None = None
        self.data = bytearray()
        self.changes = 0
        self.schema: list[bytes] = []
        self.spilled = 0
        # Streamed only: (offset in the whole frame stream, subxid) where the subxid changes.
        self.runs: list[tuple[int, int]] = []
        self.last_subxid = 0
        self.aborted: set[int] | None = None
        self.gid: str | None = None
        self.schema_published = False


class TransactionAssembler:
    """Turns raw pgoutput messages (fed in arrival order) into committed ``StoredTransaction``\\ s.

    Changes are framed as they arrive, never decoded; only control messages go through the
    decoder. Buffers of every open, streamed or prepared transaction count against
    ``memory_limit``; past it the largest buffer moves to ``spill`` (with ``spill=None`` nothing
    is spilled and the limit is ignored).

    Decisions:
    - Streamed changes are stored without their leading (sub)xid, i.e. in the non-stream layout.
    - A Stream Abort of a subtransaction drops that subxid's changes but keeps its Relation/Type
      frames: pgoutput sends a relation's schema once per streamed top-level xid, so sibling
      subtransactions may rely on it.
    - A transaction with no changes is not emitted unless it carries Relation/Type frames (pgoutput
      will not resend them, so the log's schema history needs them); it then has change_count 0.
    - At Prepare (and Stream Prepare) the transaction is parked until Commit Prepared; its schema
      frames are emitted at once as a change-less unit (xid 0, at ``end_position`` of the
      prepare's end LSN), because pgoutput counts them as sent and later transactions may rely
      on them.
    - ``confirmable_lsn`` stays below ``hold_lsn`` while a prepared transaction is pending:
      PostgreSQL re-sends a PREPARE after restart only if the slot was not confirmed past it.
    - Rollback Prepared for an unknown gid is ignored, like PostgreSQL's apply worker does: a
      transaction prepared before the slot's two_phase point is rolled back without a Prepare.
    """

    def __init__(self, *, spill: SpillStore | None = None, memory_limit: int = 64 << 20,
                 heartbeat_prefix: str = HEARTBEAT_PREFIX) -> None:
        self._spill = spill
        self._limit = memory_limit if spill is not None else sys.maxsize
        self._heartbeat = heartbeat_prefix
        self._current: _Txn | None = None  # inside Begin..Commit or Begin Prepare..Prepare
        self._block: _Txn | None = None  # inside Stream Start..Stream Stop
        self._streams: dict[int, _Txn] = {}  # top-level xid -> streamed, not yet committed
        self._pending: dict[str, _Txn] = {}  # gid -> prepared, not yet committed / rolled back
        self._mem = 0  # bytes of frames held in memory across all transactions
        self._confirmable = 0
        self._handlers = {
            TAG_BEGIN: self._begin, TAG_COMMIT: self._commit, TAG_ORIGIN: self._origin,
            TAG_STREAM_START: self._stream_start, TAG_STREAM_STOP: self._stream_stop,
            TAG_STREAM_COMMIT: self._stream_commit, TAG_STREAM_ABORT: self._stream_abort,
            TAG_BEGIN_PREPARE: self._begin_prepare, TAG_PREPARE: self._prepare,
            TAG_STREAM_PREPARE: self._stream_prepare, TAG_COMMIT_PREPARED: self._commit_prepared,
            TAG_ROLLBACK_PREPARED: self._rollback_prepared,
        }

    # -- state seen by capture -------------------------------------------------------------------

    @property
    def in_transaction(self) -> bool:
        """Inside Begin..Commit, Begin Prepare..Prepare or a stream block: a keepalive's walEnd may
        lie past the commit of what is being sent, so it must not be confirmed now."""
        return self._current is not None or self._block is not None

    @property
    def confirmable_lsn(self) -> int:
        """Highest end LSN up to which every unit was returned by ``feed`` (or was empty, a
        heartbeat or rolled back); below ``hold_lsn`` while a prepared transaction is pending."""
        hold = self.hold_lsn
        return self._confirmable if hold is None else min(self._confirmable, hold - 1)

    @property
    def hold_lsn(self) -> int | None:
        """Lowest position that must not be confirmed yet (begin of the oldest pending prepared
        transaction), or None."""
        if not self._pending:
            return None
        return min(txn.first_lsn for txn in self._pending.values())

    @property
    def buffered_bytes(self) -> int:
        """Bytes of frames held in memory (spilled bytes excluded)."""
        return self._mem

    def reset(self) -> None:
        """Drop all in-flight state (after a reconnect the slot replays from its confirmed position,
        re-sending streamed and prepared transactions from their start)."""
        self._confirmable = self.confirmable_lsn
        for txn in self._open_txns():
            self._drop(txn)
        self._current = self._block = None
        self._streams.clear()
        self._pending.clear()
        self._mem = 0

    # -- the hot path ----------------------------------------------------------------------------

    def feed_batch(self, frames: Iterable[tuple[int, bytes | memoryview]]) -> list[StoredTransaction]:
        """``feed`` for every ``(lsn, message)`` of a received batch, in order.

        Capture's loop: a row change inside Begin..Commit (nearly every message) is framed here
        without a call per message, which is most of the assembler's cost at ~300k changes/s.
        """
        out: list[StoredTransaction] = []
        dispatch, pack, row, header = self._dispatch, _pack, _ROW, _HEADER
        for lsn, message in frames:
            txn = self._current
            if txn is not None and message and message[0] in row:
                n = len(message)
                data = txn.data
                data += pack(lsn, n)
                data += message
                txn.changes += 1
                self._mem += n + header
                if self._mem > self._limit:
                    self._spill_over()
            else:
                done = dispatch(lsn, message)
                if done:
                    out.extend(done)
        return out

    def feed_framed(self, data: bytes, runs: Iterable[tuple[int, int, int]]) -> list[StoredTransaction]:
        """``feed`` for every message of a received batch already framed (``data``: FRAME
        headers and messages back to back; ``runs``: ``(start, stop, rows)``, ``rows`` > 0 for
        that many consecutive row changes). Capture's loop: a run of row changes inside
        Begin..Commit is appended to its transaction as it is, with no step per message."""
        out: list[StoredTransaction] = []
        view = memoryview(data)
        dispatch = self._dispatch
        for start, stop, rows in runs:
            txn = self._current
            if rows and txn is not None:
                txn.data += view[start:stop]
                txn.changes += rows
                self._mem += stop - start
                if self._mem > self._limit:
                    self._spill_over()
                continue
            for _at, lsn, a, b in walk(view, start, stop):
                done = dispatch(lsn, view[a:b])
                if done:
                    out.extend(done)
        return out

    def feed(self, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        """Take one pgoutput message (``lsn``: its XLogData dataStart); return what it completes."""
        return self.feed_batch(((lsn, message),))

    def _dispatch(self, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        """Any message but a row change inside Begin..Commit (``feed_batch`` frames those)."""
        try:
            tag = message[0]
        except IndexError:
            raise AssemblyError(f"empty pgoutput message at {_fmt(lsn)}") from None
        txn = self._block
        if tag in _ROW and txn is not None and len(message) > 4:  # streamed: drop the (sub)xid
            subxid = _unpack_xid(message, 1)[0]
            if subxid != txn.last_subxid:
                txn.runs.append((txn.spilled + len(txn.data), subxid))
                txn.last_subxid = subxid
            n = len(message) - 4
            data = txn.data
            data += _pack(lsn, n)
            data.append(tag)
            data += message[5:]
            txn.changes += 1
            self._mem += n + _HEADER
            if self._mem > self._limit:
                self._spill_over()
            return []
        return self._other(tag, lsn, message)

    def _other(self, tag: int, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        block = self._block
        if tag in _DATA:
            if tag == _M:
                flags_at = 5 if block is not None else 1
                if len(message) <= flags_at:
                    raise _error(tag, lsn, "too short")
                if not message[flags_at] & 1:
                    return self._non_transactional(lsn, message)
            if block is not None:
                if len(message) < 5:
                    raise _error(tag, lsn, "too short for its stream xid")
                subxid = _unpack_xid(message, 1)[0]
                if subxid != block.last_subxid:
                    block.runs.append((block.spilled + len(block.data), subxid))
                    block.last_subxid = subxid
                self._add(block, tag, _pack(lsn, len(message) - 4) + message[:1] + message[5:])
            elif self._current is not None:
                self._add(self._current, tag, _pack(lsn, len(message)) + message)
            else:
                raise _error(tag, lsn, "change outside a transaction (no Begin or Stream Start)")
            return []
        handler = self._handlers.get(tag)
        if handler is None:
            raise _error(tag, lsn, "not a pgoutput message tag")
        return handler(lsn, message)

    def _add(self, txn: _Txn, tag: int, framed: bytes) -> None:
        txn.data += framed
        if tag in _SCHEMA:
            txn.schema.append(framed)
        else:
            txn.changes += 1
        self._mem += len(framed)
        if self._mem > self._limit:
            self._spill_over()

    # -- memory ----------------------------------------------------------------------------------

    def _open_txns(self) -> list[_Txn]:
        txns = list(self._streams.values())
        txns.extend(self._pending.values())
        if self._current is not None:
            txns.append(self._current)
        return txns

    def _spill_over(self) -> None:
        """Move the largest in-memory buffers to the spill store until within the limit."""
        assert self._spill is not None
        txns = self._open_txns()
        while self._mem > self._limit:
            txn = max(txns, key=lambda t: len(t.data))
            n = len(txn.data)
            if not n:
                break
            self._spill.append(txn.xid, txn.data)
            txn.spilled += n
            txn.data = bytearray()
            self._mem -= n

    def _drop(self, txn: _Txn) -> None:
        self._mem -= len(txn.data)
        txn.data = bytearray()
        if txn.spilled and self._spill is not None:
            self._spill.discard(txn.xid)

    def _finish(self, txn: _Txn, commit_lsn: int, end_lsn: int,
                commit_ts: int) -> list[StoredTransaction]:
        self._mem -= len(txn.data)
        tail, txn.data = txn.data, bytearray()
        changes = txn.changes
        payload: Payload
        if not txn.spilled:
            payload = bytes(tail)
            if txn.aborted:
                payload, changes = _drop_aborted(payload, 0, txn.runs, txn.aborted)
        else:
            payload, changes = self._spilled_payload(txn, tail)
        schema = () if txn.schema_published else tuple(txn.schema)
        if not changes and not schema:
            if isinstance(payload, SpilledPayload):
                bytes(payload)  # reading it to the end releases its spill file
            return []
        return [StoredTransaction(txn.xid, commit_lsn, end_lsn, commit_ts, txn.origin, changes,
                                  payload, schema)]

    def _spilled_payload(self, txn: _Txn, tail: bytearray) -> tuple[SpilledPayload, int]:
        """The payload of a spilled transaction, left on disk for the change log to read in
        pieces. Aborted subtransactions are filtered out segment by segment into a second entry."""
        spill = self._spill
        assert spill is not None
        if not txn.aborted:
            # The tail is handed over as is: the transaction no longer owns it.
            return SpilledPayload(partial(spill.read, txn.xid), txn.spilled + len(tail), tail), txn.changes
        key = txn.xid | _FILTERED
        size = changes = offset = 0
        segments: Iterator[bytes | bytearray] = chain(spill.read(txn.xid), (tail,))
        for segment in segments:
            kept, n = _drop_aborted(segment, offset, txn.runs, txn.aborted)
            offset += len(segment)
            if kept:
                spill.append(key, kept)
                size += len(kept)
                changes += n
        return SpilledPayload(partial(spill.read, key), size, b""), changes

    def _advance(self, lsn: int) -> None:
        self._confirmable = max(self._confirmable, lsn)

    # -- control messages ------------------------------------------------------------------------

    def _idle(self, tag: int, lsn: int) -> None:
        if self._current is not None:
            raise _error(tag, lsn, f"inside transaction {self._current.xid} (no Commit or Prepare)")
        if self._block is not None:
            raise _error(tag, lsn, f"inside the stream block of xid {self._block.xid}")

    def _non_transactional(self, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        in_block = self._block is not None
        msg = decode(message, in_stream=in_block)
        assert isinstance(msg, LogicalMessage)
        inside = self.in_transaction
        if msg.prefix == self._heartbeat:  # pgfeed's own: moves the position, never served
            if not inside:
                self._advance(msg.lsn)
            return []
        body = bytes(message[:1]) + bytes(message[5:]) if in_block else bytes(message)
        unit = StoredTransaction(0, end_position(msg.lsn), msg.lsn, 0, None, 1,
                                 _pack(lsn, len(body)) + body)
        if not inside:
            self._advance(msg.lsn)
        return [unit]

    def _begin(self, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        self._idle(message[0], lsn)
        msg = decode(message)
        assert isinstance(msg, BeginMessage)
        self._current = _Txn(msg.xid, lsn, msg.final_lsn)
        return []

    def _commit(self, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        txn = self._current
        if txn is None or txn.gid is not None:
            raise _error(message[0], lsn, "Commit without Begin")
        msg = decode(message)
        assert isinstance(msg, CommitMessage)
        if msg.commit_lsn != txn.final_lsn:  # Begin's final_lsn is the commit record's LSN
            raise _error(message[0], lsn, f"commit LSN {_fmt(msg.commit_lsn)} differs from Begin's "
                                          f"final LSN {_fmt(txn.final_lsn)} (xid {txn.xid})")
        self._current = None
        done = self._finish(txn, msg.commit_lsn, msg.end_lsn, msg.commit_ts)
        self._advance(msg.end_lsn)
        return done

    def _origin(self, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        txn = self._current or self._block  # PostgreSQL sends Origin after Begin or Stream Start
        if txn is None:
            raise _error(message[0], lsn, "outside a transaction")
        msg = decode(message)
        assert isinstance(msg, OriginMessage)
        txn.origin = msg.name
        return []

    def _stream_start(self, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        self._idle(message[0], lsn)
        msg = decode(message)
        assert isinstance(msg, StreamStartMessage)
        txn = self._streams.get(msg.xid)
        if msg.first_segment:
            if txn is not None:
                raise _error(message[0], lsn, f"first segment of xid {msg.xid}, which is already "
                                              "streaming (reset() missed after a reconnect?)")
            txn = self._streams[msg.xid] = _Txn(msg.xid, lsn)
        elif txn is None:
            raise _error(message[0], lsn, f"continues xid {msg.xid}, whose first segment was "
                                          "never received")
        self._block = txn
        return []

    def _stream_stop(self, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        if self._block is None:
            raise _error(message[0], lsn, "without Stream Start")
        self._block = None
        return []

    def _stream_commit(self, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        self._idle(message[0], lsn)
        msg = decode(message)
        assert isinstance(msg, StreamCommitMessage)
        txn = self._streams.pop(msg.xid, None)
        done = self._finish(txn, msg.commit_lsn, msg.end_lsn, msg.commit_ts) if txn else []
        self._advance(msg.end_lsn)
        return done

    def _stream_abort(self, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        self._idle(message[0], lsn)
        msg = decode(message)
        assert isinstance(msg, StreamAbortMessage)
        txn = self._streams.get(msg.xid)
        if txn is None:  # nothing of it was kept: nothing to drop
            return []
        if msg.subxid == msg.xid:
            del self._streams[msg.xid]
            self._drop(txn)
        else:  # ROLLBACK TO SAVEPOINT: that subtransaction's changes go, the rest stays
            if txn.aborted is None:
                txn.aborted = set()
            txn.aborted.add(msg.subxid)
        return []

    def _begin_prepare(self, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        self._idle(message[0], lsn)
        msg = decode(message)
        assert isinstance(msg, BeginPrepareMessage)
        txn = self._current = _Txn(msg.xid, lsn, msg.prepare_lsn)
        txn.gid = msg.gid
        return []

    def _prepare(self, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        txn = self._current
        if txn is None or txn.gid is None:
            raise _error(message[0], lsn, "Prepare without Begin Prepare")
        msg = decode(message)
        assert isinstance(msg, PrepareMessage)
        if msg.gid != txn.gid or msg.xid != txn.xid:
            raise _error(message[0], lsn, f"gid {msg.gid!r} / xid {msg.xid} differ from Begin "
                                          f"Prepare's {txn.gid!r} / {txn.xid}")
        self._current = None
        return self._park(txn, msg.gid, lsn, msg.end_lsn, msg.prepare_ts)

    def _stream_prepare(self, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        self._idle(message[0], lsn)
        msg = decode(message)
        assert isinstance(msg, StreamPrepareMessage)
        txn = self._streams.pop(msg.xid, None) or _Txn(msg.xid, lsn, msg.prepare_lsn)
        txn.gid = msg.gid
        return self._park(txn, msg.gid, lsn, msg.end_lsn, msg.prepare_ts)

    def _park(self, txn: _Txn, gid: str, lsn: int, end_lsn: int,
              prepare_ts: int) -> list[StoredTransaction]:
        if gid in self._pending:
            raise AssemblyError(f"Prepare at {_fmt(lsn)}: gid {gid!r} is already prepared")
        self._pending[gid] = txn
        if not txn.schema:
            return []
        txn.schema_published = True
        schema = tuple(txn.schema)
        payload = b"".join(schema)
        return [StoredTransaction(0, end_position(end_lsn), end_lsn, prepare_ts, None, 0, payload,
                                  schema)]

    def _commit_prepared(self, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        self._idle(message[0], lsn)
        msg = decode(message)
        assert isinstance(msg, CommitPreparedMessage)
        txn = self._pending.pop(msg.gid, None)
        if txn is None:
            raise _error(message[0], lsn, f"unknown gid {msg.gid!r} (xid {msg.xid}): its Prepare "
                                          "was never received; was the slot confirmed past it?")
        done = self._finish(txn, msg.commit_lsn, msg.end_lsn, msg.commit_ts)
        self._advance(msg.end_lsn)
        return done

    def _rollback_prepared(self, lsn: int, message: bytes | memoryview) -> list[StoredTransaction]:
        self._idle(message[0], lsn)
        msg = decode(message)
        assert isinstance(msg, RollbackPreparedMessage)
        txn = self._pending.pop(msg.gid, None)
        if txn is not None:
            self._drop(txn)
        self._advance(msg.rollback_end_lsn)
        return []


def _drop_aborted(segment: bytes | bytearray, base: int, runs: list[tuple[int, int]],
                  aborted: set[int]) -> tuple[bytes, int]:
    """Remove change frames of aborted subtransactions from ``segment`` (whole frames, starting at
    offset ``base`` of the transaction's frame stream; schema frames stay); count changes kept."""
    view = memoryview(segment)
    bounds = [offset for offset, _ in runs[1:]] + [sys.maxsize]
    kept: list[memoryview] = []
    changes = run = 0
    for pos, _lsn, start, end in walk(view):
        while bounds[run] <= base + pos:
            run += 1
        tag = view[start]
        if tag not in _CHANGE:
            kept.append(view[pos:end])
        elif runs[run][1] not in aborted:
            kept.append(view[pos:end])
            changes += 1
    return b"".join(kept), changes
