"""Chunk windows on the capture side (pure): which rows of a chunk may be stored, and where.

A chunk is read in one REPEATABLE READ transaction whose first statement reads its snapshot S
(``pg_current_snapshot()``: xmax and the in-progress xids) and the WAL insert position L. Every
transaction visible in S committed before S was taken, so its commit record ends at or before L.
Once capture's stream has passed L (a frame or a keepalive at or after it), every transaction
visible in S has passed, and every transaction still to come is invisible in S. Nothing is
written to the source: a role with SELECT and REPLICATION can backfill.

The chunk's rows are then held, and stored as one transaction of ``read`` changes after every unit
passed on so far (``release``), minus every key that may be newer in the stream than in S: the
keys changed by transactions passed on that S does not see (xid >= xmax, or in S's in-progress
list). For those the tracker keeps, per xid, the keys recent transactions changed in watched
tables, pruned below the oldest snapshot ``xmin`` a chunk can still have (read before the chunk is
registered; xmin only grows). Held chunks keep collecting the keys of the units passed on after
them (all invisible in S).

A judged chunk is held until capture's log writer is idle (``release``), so live transactions
never queue behind a chunk's append: it is then stored at a free position inside the last unit's
commit record; while live transactions flow, in pieces of at most PIECE_BYTES, each with the
part's progress up to its last row (a piece is a chunk of its own for resuming).

A chunk is redone (outcome ``redo``) when it cannot be judged exactly: a TRUNCATE of its table,
a transaction too large to scan (spilled), a key the stream did not send whole or a schema change
by a transaction S does not see, or an in-progress xid the tracker may have missed or forgotten.
Redoing is always safe: nothing of the chunk was stored.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pgfeed.assembler.framing import walk
from pgfeed.assembler.model import BACKFILL_ORIGIN, BackfillProgress, StoredTransaction
from pgfeed.backfill.keys import Key, add_key, key_positions, precedes, same_relation, tuple_key
from pgfeed.backfill.rows import Rows
from pgfeed.netorder import U16, U32, U64
from pgfeed.pgoutput.decode import decode
from pgfeed.pgoutput.messages import (
    TAG_DELETE,
    TAG_INSERT,
    TAG_RELATION,
    TAG_TRUNCATE,
    TAG_UPDATE,
    TUPLE_NEW,
    RelationMessage,
    TruncateMessage,
    pg_now_us,
)

# Keys remembered for xip lookups across all watched tables; past it the oldest xids are
# forgotten and a chunk whose snapshot names one of them is redone.
MAX_REMEMBERED_KEYS = 1_000_000
# While live transactions flow (one seen in the last LIVE_SECONDS), a judged chunk is stored in
# pieces of at most PIECE_BYTES, each when the log's writer has nothing else to do: a live commit
# waits behind one piece's append at most, never behind a whole chunk. Otherwise chunks go whole.
PIECE_BYTES = 192 << 10  # with framing, under the log's in-memory tail limit for a transaction
LIVE_SECONDS = 1.0
# One idle moment of the writer takes pieces until they hold this many bytes (each piece its own
# transaction at its own free position; 0: one piece a moment). Capture's loop turns a few
# hundred times a second beside live commits, about one idle moment a turn, so one 192 KiB piece
# a moment capped a backfill near a quarter of COPY's pace. Since pieces are written once to
# piece files (changelog/piece_files.py), not through the log's WAL that every live commit
# fsyncs, 2 MiB a moment keeps live latency within its target (bench/RESULTS.md, Backfill).
RELEASE_BYTES = 2 << 20

# Pacing: a live commit that took longer than LIVE_LATENCY from capture receiving it to durable
# in the log holds the backfill's next chunks back for PAUSE_SECONDS (a chunk's read, its
# encoding and the log writes and checkpoints it causes compete with live commits for the cores
# and the disk; bench/RESULTS.md, Backfill). A worker waits at most MAX_PAUSE a chunk: a backfill
# always progresses. Receipt to durable is measured on pgfeed's own clock (the source's may
# differ).
LIVE_LATENCY = 0.010
PAUSE_SECONDS = 0.25
MAX_PAUSE = 2.0
_MAX_TIMED = 4096  # live commits timed at once (receipt to durable); past it, timing restarts

_u32 = U32.unpack_from
_u16 = U16.unpack_from
_lsn8 = U64.pack
_ROW = frozenset({TAG_INSERT, TAG_UPDATE, TAG_DELETE})
_T, _R = TAG_TRUNCATE, TAG_RELATION
_INSERT, _UPDATE = TAG_INSERT, TAG_UPDATE


@dataclass(slots=True)
class Chunk:
    """One chunk of a backfill part, from registration (before its snapshot) to outcome."""

    token: str
    backfill_id: str
    part: int
    relation_id: int
    floor: int  # snapshot xmin (32-bit) read before the chunk's: no xid it cannot see is older
    schema: tuple[bytes, ...] = ()  # Type/Relation messages for the read transaction (reader's)
    # The chunk of the same part read just before this one while it was not yet judged: this one
    # is stored only if that one was, and counts its rows and chunks from that one's result.
    pred: Chunk | None = None
    # set by the reader once the chunk is read
    rows: Rows | None = None
    xmax: int = 0  # the snapshot's xmax (32-bit): it sees no xid at or after it
    xip: frozenset[int] = frozenset()  # the snapshot's in-progress xids (32-bit)
    lsn: int = 0  # WAL insert position read in the snapshot: judged once the stream passed it
    progress: BackfillProgress | None = None  # rows/chunks before this chunk; completed at store
    # capture side: keys changed by units passed on after it was judged
    changed: set[Key] = field(default_factory=set)
    problem: str | None = None
    outcome: str | None = None  # "stored", "redo", "cancelled"
    stored_rows: int = 0
    result: BackfillProgress | None = None  # the part's progress once this chunk is stored
    done: threading.Event = field(default_factory=threading.Event)

    def finish(self, outcome: str, problem: str | None = None) -> None:
        self.outcome = outcome
        if problem is not None:
            self.problem = problem
        self.rows = None
        self.pred = None  # judged: nothing needs the chunk before it any more (no chain builds up)
        self.done.set()


@dataclass(slots=True)
class _Held:
    """A chunk judged and not yet (wholly) handed to the log: its rows
    ``rows[next:]`` wait for a gap between live commits (``WindowTracker.release``)."""

    chunk: Chunk
    rows: Rows
    excluded: set[Key]  # keys changed by units its snapshot does not see (``chunk.changed`` grows)
    progress: BackfillProgress  # the chunk's own: last key and done of its last row
    next: int = 0
    released: bool = False  # a piece of it is in the log already


@dataclass(slots=True)
class _Recent:
    commit_lsn: int
    keys: dict[int, set[Key]]  # relation id -> keys changed
    truncated: frozenset[int]
    unknown: bool  # not scanned (spilled) or a key not sent whole: may have changed anything
    relations: tuple[RelationMessage, ...]  # Relation messages of watched tables it carried


class WindowTracker:
    """Shared by a feed's capture thread (``process``) and its backfill workers (the rest);
    every method takes one lock. ``process`` costs nothing while nothing is watched."""

    def __init__(self, *, max_keys: int = MAX_REMEMBERED_KEYS) -> None:
        self._lock = threading.Lock()
        self._watched: dict[int, tuple[tuple[str, ...], tuple[int, ...] | None, int]] = {}
        self._chunks: dict[str, Chunk] = {}
        self._recent: dict[int, _Recent] = {}
        self._remembered = 0
        self._max_keys = max_keys
        self._forgotten_below: int | None = None  # xids older than this may have been dropped
        self._suspects: set[int] = set()
        self._floor: int | None = None
        self._held: deque[_Held] = deque()
        # Free positions [next, limit) for held chunks: after everything passed on (and stored:
        # never below ``_low``) and before anything to come. Inside the last unit's commit record
        # (commit_lsn + 1 up to end_lsn - 1: no other unit can have them), then up to the
        # position the stream has passed (every commit record starting before it was sent).
        self._free = (0, 0)
        self._starved = False
        self._received_lsn = 0  # the stream's position at the last ``process``
        self._low = 0
        self._commit_ts = 0
        self._live_at = float("-inf")  # when a live transaction last passed (monotonic)
        self._parts: dict[tuple[str, int], BackfillProgress] = {}  # last progress handed to the log
        self._received: dict[int, float] = {}  # live commit_lsn -> when capture received it
        self._slow_until = float("-inf")  # workers wait until then before their next chunk
        self.paused = 0.0  # seconds workers waited (metrics, tests)
        self.generation = 0  # bumped by watch(); capture acknowledges in ``synced``
        self.synced = 0

    # -- workers ----------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return bool(self._watched) or bool(self._chunks) or bool(self._held)

    @property
    def holding(self) -> bool:
        """A backfill runs (a table watched, chunks being read or held): capture reads its
        stream often (HOLDING_POLL), since nothing on the stream wakes it when a chunk is read
        (a watermark's frame did). Capture asleep in a 0.2 s read while the workers registered
        their next chunks cost ~0.19 s a round: bench/backfill.py ran at 0.13x COPY."""
        return bool(self._held) or bool(self._chunks) or bool(self._watched)

    @property
    def starved(self) -> bool:
        """Chunks wait for WAL: held ones found no free position at the last ``release`` (each
        takes a position the stream has passed), or one read is past the stream's position; an
        idle source writes none (capture's heartbeat, sent early, writes some)."""
        return (self._starved and bool(self._held)) or any(
            c.rows is not None and c.lsn > self._received_lsn for c in list(self._chunks.values()))

    def watch(self, relation_id: int, key_names: Sequence[str], positions: tuple[int, ...]) -> int:
        """Start remembering the keys the stream changes in a table (reference counted). Returns
        the generation capture must reach (``synced``) before a chunk of it may start."""
        with self._lock:
            names, _, refs = self._watched.get(relation_id, (tuple(key_names), positions, 0))
            self._watched[relation_id] = (names, positions, refs + 1)
            self.generation += 1
            return self.generation

    def unwatch(self, relation_id: int) -> None:
        with self._lock:
            entry = self._watched.get(relation_id)
            if entry is None:
                return
            if entry[2] <= 1:
                del self._watched[relation_id]
                if not self._watched:
                    self._recent.clear()
                    self._remembered = 0
                    self._forgotten_below = None
                    self._suspects.clear()
            else:
                self._watched[relation_id] = (entry[0], entry[1], entry[2] - 1)

    def suspect(self, xids: Iterable[int]) -> None:
        """Transactions that may have committed before capture began remembering keys: a chunk
        whose snapshot still names one it has not seen commit is redone."""
        with self._lock:
            self._suspects.update(xids)

    def register(self, chunk: Chunk) -> None:
        with self._lock:
            self._chunks[chunk.token] = chunk

    def read(self, token: str, rows: Rows, xmax: int, xip: Iterable[int], lsn: int,
             progress: BackfillProgress, schema: tuple[bytes, ...]) -> None:
        """The chunk's rows (key order), its snapshot's xmax and in-progress xids (32-bit), the
        WAL insert position read in it, the progress it makes if stored (rows and chunks before
        it) and the table's Type/Relation messages. Capture judges it once its stream passed
        ``lsn``."""
        with self._lock:
            chunk = self._chunks.get(token)
            if chunk is not None:
                chunk.rows, chunk.xip, chunk.progress = rows, frozenset(xip), progress
                chunk.xmax, chunk.lsn, chunk.schema = xmax, lsn, schema

    def cancel(self, backfill_id: str | None = None, token: str | None = None) -> None:
        """Forget chunks (all of a backfill, or one): nothing of them will be stored."""
        def hit(chunk: Chunk) -> bool:
            return chunk.token == token or (token is None and (
                backfill_id is None or chunk.backfill_id == backfill_id))

        with self._lock:
            for t, chunk in list(self._chunks.items()):
                if hit(chunk):
                    del self._chunks[t]
                    chunk.finish("cancelled")
            for held in [h for h in self._held if hit(h.chunk)]:
                self._held.remove(held)
                held.chunk.finish("cancelled")
            if token is None:
                self._parts = {k: v for k, v in self._parts.items()
                               if backfill_id is not None and k[0] != backfill_id}

    # -- capture ----------------------------------------------------------------------------------
    def sync(self) -> None:
        """Capture's acknowledgement that it now remembers every watched table."""
        self.synced = self.generation

    def process(self, units: list[StoredTransaction], received: int) -> list[StoredTransaction]:
        """Capture's hook, for every batch of units in commit order (all pass unchanged), with
        the position its stream has passed (``received``, this batch included): chunks whose
        snapshot's position it passed are judged and held for ``release``."""
        self.synced = self.generation
        self._received_lsn = max(self._received_lsn, received)
        if not self._watched and not self._chunks and not self._held:
            if units:  # only the free positions follow the stream (a chunk may come next)
                self._passed(units[-1], received)
            return units
        with self._lock:
            for unit in units:
                if unit.xid:
                    if unit.change_count:
                        self._live_at = time.monotonic()
                        if len(self._received) >= _MAX_TIMED:
                            self._received.clear()
                        self._received[unit.commit_lsn] = self._live_at
                    if self._watched:
                        self._observe(unit)
            if units:
                self._passed(units[-1], received)
            else:
                following, limit = self._free
                self._free = (following, max(limit, received))
            if self._chunks:
                self._judge_passed(received)
        return units

    def _passed(self, unit: StoredTransaction, received: int) -> None:
        """``unit`` is the last passed on, the stream is past ``received``: the free positions
        are those inside its commit record and then up to ``received``."""
        self._free = (max(unit.commit_lsn + 1, self._low), max(unit.end_lsn, received))
        self._commit_ts = unit.commit_ts or self._commit_ts

    def release(self, head: int = 0) -> list[StoredTransaction]:
        """Capture's other hook, when the log's writer is idle, right after ``process``: the
        held chunks as read transactions positioned after everything passed on so far, minus
        the keys changed since their windows. With live transactions flowing, pieces of at
        most PIECE_BYTES each until they hold RELEASE_BYTES (one piece while live commits are
        slow to become durable); otherwise every held chunk, whole. Never at or below ``head``,
        the log's newest position (a unit the log holds that capture did not pass on)."""
        with self._lock:
            now = time.monotonic()
            live = now - self._live_at < LIVE_SECONDS
            # with live transactions flowing: bytes left this moment; one piece only while a live
            # commit was lately slow to become durable (``durable``: the log's disk is behind)
            budget = RELEASE_BYTES if now >= self._slow_until else 0
            out: list[StoredTransaction] = []
            while self._held and (not live or not out or budget > 0):
                held = self._held[0]
                if held.chunk.problem is not None:
                    self._drop(held)
                    continue
                position, end = self._free
                # (below its own snapshot's WAL position is right: no unit sits between, and
                # on an idle source the positions the stream passed are few)
                position = max(position, head + 1)
                self._starved = position >= end
                if self._starved:
                    break  # no free position until the stream moves on
                self._free = (position + 1, end)
                # stamped now (pgfeed's clock, as resync markers are), never before the last
                # unit passed on: a piece has no commit of its own, and the last unit's time
                # (0 when none passed this session, or days old on an idle source) would make
                # age retention drop it at once while its part's progress stayed
                commit_ts = max(self._commit_ts, pg_now_us())
                piece = self._piece(held, position, position + 1, commit_ts,
                                    PIECE_BYTES if live else None)
                out.append(piece)
                budget -= len(piece.payload)
            return out

    def durable(self, units: Sequence[StoredTransaction]) -> None:
        """Capture's hook once ``units`` are durable in the log (on its writer's thread or its
        own): a live commit slower than LIVE_LATENCY from receipt pauses the backfill."""
        if not self._received:
            return
        now = time.monotonic()
        with self._lock:
            for unit in units:
                received = self._received.pop(unit.commit_lsn, None)
                if received is not None and now - received > LIVE_LATENCY:
                    self._slow_until = now + PAUSE_SECONDS

    def pace(self, stop: threading.Event) -> None:
        """A worker's wait before its next chunk while live commits are slow to become durable
        (at most MAX_PAUSE, or until ``stop``)."""
        deadline = time.monotonic() + MAX_PAUSE
        while not stop.is_set():
            now = time.monotonic()
            wait = min(self._slow_until, deadline) - now
            if wait <= 0:
                return
            stop.wait(wait)
            self.paused += min(wait, time.monotonic() - now)

    def restart(self, head: int) -> None:
        """Capture starts a session, the log's newest position being ``head``: the stream replays
        from the confirmed position, so a held chunk could be positioned among units the log
        already has (and would skip). Held chunks are redone, and no chunk goes at or below
        ``head``."""
        with self._lock:
            while self._held:
                self._drop(self._held[0])
            self._low = head + 1
            self._free = (self._low, self._low)

    def _piece(self, held: _Held, position: int, end_lsn: int, commit_ts: int,
               limit: int | None) -> StoredTransaction:
        chunk, rows = held.chunk, held.rows
        first = held.next
        stop = len(rows) if limit is None else min(len(rows), rows.fitting(first, limit))
        held.next = stop
        final = stop == len(rows)
        excluded = held.excluded | chunk.changed
        lsn = _lsn8(position)
        if excluded:  # keys read from the frames only here: the stream changed some of the table
            kept = [i for i in range(first, stop) if rows.key(i) not in excluded]
            runs = _runs(kept)
            count = len(kept)
        else:
            runs, count = [(first, stop)], stop - first
        own = held.progress
        base = self._parts.get((own.backfill_id, own.part), own)
        last_key = own.last_key if final else json.dumps([v.decode() for v in rows.key(stop - 1)])
        progress = BackfillProgress(own.backfill_id, own.part, last_key, base.rows + count,
                                    base.chunks + 1,  # a piece counts: it is a chunk for resuming
                                    own.done and final)
        self._parts[(own.backfill_id, own.part)] = progress
        held.released = True
        chunk.stored_rows += count
        chunk.result = progress
        if final:
            self._held.popleft()
            chunk.finish("stored")
        schema = tuple(lsn + U32.pack(len(m)) + m for m in chunk.schema)
        payload = rows.stamp(b"".join(schema), runs, position)
        return StoredTransaction(0, position, end_lsn, commit_ts,
                                 f"{BACKFILL_ORIGIN}:{chunk.backfill_id}", count, payload,
                                 schema, progress=progress)

    def _drop(self, first: _Held) -> None:
        """A held chunk can no longer be stored exactly: it and the held chunks of its part after
        it are redone (from the last piece stored, which ``result`` keeps)."""
        key = (first.chunk.backfill_id, first.chunk.part)
        for held in [h for h in self._held if (h.chunk.backfill_id, h.chunk.part) == key]:
            self._held.remove(held)
            if held is not first:
                held.chunk.problem = "the chunk before it was not stored"
            if not held.released:
                held.chunk.result = None
            held.chunk.finish("redo")

    def _observe(self, unit: StoredTransaction) -> None:
        touched: dict[int, set[Key]] = {}
        truncated: set[int] = set()
        relations: list[RelationMessage] = []
        payload = unit.payload
        unknown = not isinstance(payload, (bytes, bytearray)) or not self._scan(
            payload, touched, truncated, relations)
        for rel in relations:
            self._relation_seen(rel)
        if not (touched or truncated or unknown or relations):
            return
        for held in self._held:  # passed on after the chunk was judged: newer than its snapshot
            chunk = held.chunk
            if unknown:
                chunk.problem = chunk.problem or "a transaction after its snapshot could not be scanned"
            elif chunk.relation_id in truncated:
                chunk.problem = chunk.problem or "its table was truncated after its snapshot"
            keys = touched.get(chunk.relation_id)
            if keys:
                chunk.changed |= keys
        self._remember(unit.xid, _Recent(unit.commit_lsn, touched, frozenset(truncated), unknown,
                                         tuple(relations)))

    def _scan(self, payload: bytes | bytearray, touched: dict[int, set[Key]], truncated: set[int],
              relations: list[RelationMessage]) -> bool:
        """Keys of watched tables changed by a payload; False when one was not sent whole."""
        view = memoryview(payload)
        watched = self._watched
        ok = True
        for _at, _lsn, start, pos in walk(view):
            tag = view[start]
            if tag in _ROW:
                relid = _u32(view, start + 1)[0]
                entry = watched.get(relid)
                if entry is None:
                    continue
                positions = entry[1]
                if positions is None:
                    ok = False
                    continue
                keys = touched.setdefault(relid, set())
                at = start + 5
                if tag == _INSERT:
                    key, _ = tuple_key(view, at + 1, positions)
                    ok = add_key(keys, key) and ok
                    continue
                kind = view[at]
                if tag == _UPDATE and kind == TUPLE_NEW:
                    key, _ = tuple_key(view, at + 1, positions)
                    ok = add_key(keys, key) and ok
                    continue
                key, after = tuple_key(view, at + 1, positions)  # 'K' or 'O': the old row's key
                ok = add_key(keys, key) and ok
                if tag == _UPDATE:  # then 'N' and the new row
                    key, _ = tuple_key(view, after + 1, positions)
                    ok = add_key(keys, key) and ok
            elif tag == _T:
                msg = decode(view[start:pos])
                assert isinstance(msg, TruncateMessage)
                truncated.update(r for r in msg.relation_ids if r in watched)
            elif tag == _R:
                rel = decode(view[start:pos])
                assert isinstance(rel, RelationMessage)
                if rel.relation_id in watched:
                    relations.append(rel)
        return ok

    def _relation_seen(self, rel: RelationMessage) -> None:
        names, _, refs = self._watched[rel.relation_id]
        self._watched[rel.relation_id] = (names, key_positions(rel, names), refs)
        for held in self._held:
            chunk = held.chunk
            if chunk.relation_id == rel.relation_id and not same_relation(chunk.schema, rel):
                chunk.problem = chunk.problem or "its table's schema changed after its snapshot"

    def _remember(self, xid: int, recent: _Recent) -> None:
        old = self._recent.pop(xid, None)
        if old is not None:
            self._remembered -= _size(old)
        self._recent[xid] = recent
        self._remembered += _size(recent)
        if self._remembered > self._max_keys:
            self._forget(keep=self._max_keys // 2)

    def _forget(self, keep: int) -> None:
        """Drop the oldest remembered xids until at most ``keep`` keys remain, and remember that
        xids below the newest dropped one may be missing."""
        base = next(iter(self._recent))
        for xid in sorted(self._recent, key=lambda x: (x - base + 0x80000000) & 0xFFFFFFFF):
            if self._remembered <= keep:
                break
            self._remembered -= _size(self._recent.pop(xid))
            bound = (xid + 1) & 0xFFFFFFFF
            if self._forgotten_below is None or precedes(self._forgotten_below, bound):
                self._forgotten_below = bound

    def _prune(self) -> None:
        """Forget xids older than every snapshot a chunk can still take (xmin only grows)."""
        floor = self._floor
        for chunk in self._chunks.values():
            if floor is None or precedes(chunk.floor, floor):
                floor = chunk.floor
        if floor is None:
            return
        for xid in [x for x in self._recent if precedes(x, floor)]:
            self._remembered -= _size(self._recent.pop(xid))
        self._suspects = {x for x in self._suspects if not precedes(x, floor)}

    def _judge_passed(self, received: int) -> None:
        """Judge the chunks read whose snapshot's position the stream has passed (in the order
        they were registered: a part's chunks in order)."""
        for token, chunk in list(self._chunks.items()):
            if chunk.rows is None or chunk.lsn > received:
                continue
            del self._chunks[token]
            self._floor = chunk.floor
            self._prune()
            excluded = self._judge(chunk)
            if excluded is None:
                chunk.finish("redo")
                continue
            assert chunk.rows is not None and chunk.progress is not None
            self._held.append(_Held(chunk, chunk.rows, excluded, chunk.progress))
            chunk.rows = None
            chunk.pred = None  # judged: no chain of chunks builds up

    def _judge(self, chunk: Chunk) -> set[Key] | None:
        """The keys changed by units passed on that the chunk's snapshot does not see (xid at or
        after its xmax, or in progress in it); None when it must be redone."""
        pred = chunk.pred
        if pred is not None and not any(h.chunk is pred for h in self._held) and (
                pred.outcome != "stored" or pred.result is None):
            chunk.problem = "the chunk before it was not stored"
            return None
        excluded: set[Key] = set()
        xmax, xip, relid = chunk.xmax, chunk.xip, chunk.relation_id
        for xid, recent in self._recent.items():
            if precedes(xid, xmax) and xid not in xip:
                continue  # visible in the snapshot: the chunk's rows include it
            if recent.unknown or relid in recent.truncated:
                chunk.problem = f"transaction {xid}, which its snapshot does not see, could not be judged"
            elif any(r.relation_id == relid and not same_relation(chunk.schema, r)
                     for r in recent.relations):
                chunk.problem = "its table's schema changed after its snapshot"
            excluded |= recent.keys.get(relid, set())
        forgotten = self._forgotten_below
        if forgotten is not None and precedes(xmax, forgotten):
            chunk.problem = "a transaction after its snapshot may have been forgotten"
        for xid in xip:
            if xid not in self._recent and (xid in self._suspects or (
                    forgotten is not None and precedes(xid, forgotten))):
                chunk.problem = f"transaction {xid} in its snapshot may have been missed"
        return None if chunk.problem is not None else excluded


def _runs(indexes: list[int]) -> list[tuple[int, int]]:
    """Ascending indexes -> ``[start, stop)`` runs of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for i in indexes:
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


def _size(recent: _Recent) -> int:
    return 1 + sum(len(k) for k in recent.keys.values())
