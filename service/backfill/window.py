"""Watermark windows on the capture side (pure): which rows of a chunk may be stored, and where.

A chunk is read between a low and a high watermark, each a transactional logical message in a
transaction of its own (``pgfeed.watermark``), so each has a commit position of its own in the
stream. When the high watermark arrives, the chunk's rows are stored as one transaction of
``read`` changes at that watermark's commit position (the watermark itself is never stored, so
the position is free and cannot collide with anything), minus every key that may be newer in the
stream than in the chunk's snapshot:

- keys changed by transactions committed between the two watermarks (the window), and
- keys changed by transactions that were in progress when the chunk's snapshot was taken
  (its ``xip``) but committed before the low watermark (FIELD-NOTES: a commit record written
  before the low watermark can still be invisible to a snapshot taken after it). For those the
  tracker keeps, per xid, the keys recent transactions changed in watched tables, pruned below
  the oldest snapshot ``xmin`` a chunk can still have.

A chunk is redone (outcome ``redo``) when it cannot be judged exactly: a TRUNCATE of its table
in the window or by such an xip transaction, a transaction too large to scan (spilled), a key the
stream did not send whole, a schema change in the window, or an xip transaction the tracker may
have forgotten. Redoing is always safe: nothing of the chunk was stored.
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from service.assembler.framing import FRAME
from service.assembler.model import BACKFILL_ORIGIN, BackfillProgress, StoredTransaction
from service.assembler.spill import SpilledPayload
from service.pgoutput.decode import decode
from service.pgoutput.messages import (
    TAG_DELETE,
    TAG_INSERT,
    TAG_RELATION,
    TAG_TRUNCATE,
    TAG_UPDATE,
    TUPLE_NEW,
    RelationMessage,
    TruncateMessage,
)

Key = tuple[bytes, ...]
# One row of a chunk as the reader hands it over: its key, and ``>I`` length + Insert message.
Entry = tuple[Key, bytes]

# Keys remembered for xip lookups across all watched tables; past it the oldest xids are
# forgotten and a chunk whose snapshot names one of them is redone.
MAX_REMEMBERED_KEYS = 1_000_000

_u32 = struct.Struct(">I").unpack_from
_u16 = struct.Struct(">H").unpack_from
_lsn8 = struct.Struct(">Q").pack
_ROW = frozenset({TAG_INSERT, TAG_UPDATE, TAG_DELETE})
_T, _R = TAG_TRUNCATE, TAG_RELATION
_INSERT, _UPDATE = TAG_INSERT, TAG_UPDATE


def precedes(a: int, b: int) -> bool:
    """32-bit xid ``a`` is older than ``b`` (PostgreSQL's modulo-2^32 comparison)."""
    return a != b and ((a - b) & 0xFFFFFFFF) >= 0x80000000


def key_positions(relation: RelationMessage, key_names: Sequence[str]) -> tuple[int, ...] | None:
    """Where the key columns sit in the relation's TupleData (None when one is missing)."""
    names = [c.name for c in relation.columns]
    try:
        return tuple(names.index(k) for k in key_names)
    except ValueError:
        return None


def tuple_key(buf: bytes | memoryview, pos: int, positions: tuple[int, ...]) -> tuple[Key | None, int]:
    """The key values of the TupleData at ``pos`` (None when a key column is not sent whole) and
    the position after the tuple."""
    count = _u16(buf, pos)[0]
    pos += 2
    values: list[bytes | None] = [None] * count
    for i in range(count):
        kind = buf[pos]
        pos += 1
        if kind in (116, 98):  # 't', 'b'
            n = _u32(buf, pos)[0]
            values[i] = bytes(buf[pos + 4:pos + 4 + n])
            pos += 4 + n
    key = []
    for p in positions:
        v = values[p] if p < count else None
        if v is None:
            return None, pos
        key.append(v)
    return tuple(key), pos


@dataclass(slots=True)
class Chunk:
    """One chunk of a backfill part, from registration (before its low watermark) to outcome."""

    token: str
    backfill_id: str
    part: int
    relation_id: int
    floor: int  # snapshot xmin (32-bit) read before the low watermark: no xip member is older
    schema: tuple[bytes, ...] = ()  # Type/Relation messages for the read transaction (reader's)
    # The chunk of the same part read just before this one while it was not yet judged: this one
    # is stored only if that one was, and counts its rows and chunks from that one's result.
    pred: Chunk | None = None
    # set by the reader once the chunk is read (before the high watermark is written)
    entries: list[Entry] | None = None
    xip: frozenset[int] = frozenset()
    progress: BackfillProgress | None = None  # rows/chunks before this chunk; completed at store
    # capture side
    low_lsn: int | None = None
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
        self.entries = None
        self.pred = None  # judged: nothing needs the chunk before it any more (no chain builds up)
        self.done.set()


@dataclass(slots=True)
class _Recent:
    commit_lsn: int
    keys: dict[int, set[Key]]  # relation id -> keys changed
    truncated: frozenset[int]
    unknown: bool  # not scanned (spilled) or a key not sent whole: may have changed anything


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
        self.generation = 0  # bumped by watch(); capture acknowledges in ``synced``
        self.synced = 0

    # -- workers ----------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return bool(self._watched) or bool(self._chunks)

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

    def read(self, token: str, entries: list[Entry], xip: Iterable[int],
             progress: BackfillProgress, schema: tuple[bytes, ...]) -> None:
        """The chunk's rows (key order), its snapshot's in-progress xids (32-bit), the progress
        it makes if stored (rows and chunks before it) and the table's Type/Relation messages."""
        with self._lock:
            chunk = self._chunks.get(token)
            if chunk is not None:
                chunk.entries, chunk.xip, chunk.progress = entries, frozenset(xip), progress
                chunk.schema = schema

    def cancel(self, backfill_id: str | None = None, token: str | None = None) -> None:
        """Forget chunks (all of a backfill, or one): their high watermarks will store nothing."""
        with self._lock:
            for t, chunk in list(self._chunks.items()):
                if t == token or (token is None and (backfill_id is None or chunk.backfill_id == backfill_id)):
                    del self._chunks[t]
                    chunk.finish("cancelled")

    # -- capture ----------------------------------------------------------------------------------
    def sync(self) -> None:
        """Capture's acknowledgement that it now remembers every watched table."""
        self.synced = self.generation

    def process(self, units: list[StoredTransaction]) -> list[StoredTransaction]:
        """Capture's hook, for every batch of units in commit order: watermark units become the
        chunk's read transaction (or go), everything else passes unchanged."""
        self.synced = self.generation
        if not self._watched and not self._chunks:
            if any(u.watermark is not None for u in units):
                return [u for u in units if u.watermark is None or _keep(u)]
            return units
        out: list[StoredTransaction] = []
        with self._lock:
            for unit in units:
                if unit.watermark is not None:
                    read = self._watermark(unit)
                    if _keep(unit):
                        unit.watermark = None
                        out.append(unit)
                    elif read is not None:
                        out.append(read)
                elif unit.xid and self._watched:
                    self._observe(unit)
                    out.append(unit)
                else:
                    out.append(unit)
        return out

    def _observe(self, unit: StoredTransaction) -> None:
        touched: dict[int, set[Key]] = {}
        truncated: set[int] = set()
        relations: list[RelationMessage] = []
        unknown = isinstance(unit.payload, SpilledPayload) or not self._scan(
            unit.payload, touched, truncated, relations)
        for rel in relations:
            self._relation_seen(rel)
        if not (touched or truncated or unknown):
            return
        for chunk in self._chunks.values():
            if chunk.low_lsn is None or chunk.outcome is not None:
                continue
            if unknown:
                chunk.problem = chunk.problem or "a transaction in its window could not be scanned"
            elif chunk.relation_id in truncated:
                chunk.problem = chunk.problem or "its table was truncated in its window"
            keys = touched.get(chunk.relation_id)
            if keys:
                chunk.changed |= keys
        self._remember(unit.xid, _Recent(unit.commit_lsn, touched, frozenset(truncated), unknown))

    def _scan(self, payload: bytes | bytearray, touched: dict[int, set[Key]], truncated: set[int],
              relations: list[RelationMessage]) -> bool:
        """Keys of watched tables changed by a payload; False when one was not sent whole."""
        view = memoryview(payload)
        pos, end = 0, len(view)
        header = FRAME.size
        watched = self._watched
        ok = True
        while pos < end:
            length = _u32(view, pos + 8)[0]
            start = pos + header
            pos = start + length
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
                    ok = _add(keys, key) and ok
                    continue
                kind = view[at]
                if tag == _UPDATE and kind == TUPLE_NEW:
                    key, _ = tuple_key(view, at + 1, positions)
                    ok = _add(keys, key) and ok
                    continue
                key, after = tuple_key(view, at + 1, positions)  # 'K' or 'O': the old row's key
                ok = _add(keys, key) and ok
                if tag == _UPDATE:  # then 'N' and the new row
                    key, _ = tuple_key(view, after + 1, positions)
                    ok = _add(keys, key) and ok
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
        for chunk in self._chunks.values():
            if (chunk.relation_id == rel.relation_id and chunk.low_lsn is not None
                    and chunk.outcome is None and not _same_relation(chunk.schema, rel)):
                chunk.problem = chunk.problem or "its table's schema changed in its window"

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

    def _watermark(self, unit: StoredTransaction) -> StoredTransaction | None:
        try:
            data = json.loads(unit.watermark or b"")
            token, kind = data["t"], data["k"]
        except (ValueError, KeyError, TypeError):
            return None  # not one of ours (or from an older pgfeed): never stored
        chunk = self._chunks.get(token)
        if chunk is None:
            return None  # a replay from before a restart, or a cancelled chunk
        if kind == "l":
            chunk.low_lsn = unit.commit_lsn
            chunk.changed = set()
            chunk.problem = None
            self._floor = chunk.floor
            return None
        del self._chunks[token]
        self._prune()
        read = self._judge(chunk, unit)
        if read is None:
            chunk.finish("redo")
        return read

    def _judge(self, chunk: Chunk, unit: StoredTransaction) -> StoredTransaction | None:
        if chunk.low_lsn is None or chunk.entries is None or chunk.progress is None:
            chunk.problem = "its low watermark or rows were missing"
            return None
        if _keep(unit):
            chunk.problem = "its high watermark's transaction held other changes"
            return None
        pred = chunk.pred
        if pred is not None and (pred.outcome != "stored" or pred.result is None):
            chunk.problem = "the chunk before it was not stored"
            return None
        excluded = set(chunk.changed)
        for xid in chunk.xip:
            recent = self._recent.get(xid)
            if recent is None:
                if xid in self._suspects or (self._forgotten_below is not None
                                             and precedes(xid, self._forgotten_below)):
                    chunk.problem = f"transaction {xid} in its snapshot may have been missed"
                continue
            if recent.commit_lsn >= chunk.low_lsn:
                continue  # in the window: counted as it came
            if recent.unknown or chunk.relation_id in recent.truncated:
                chunk.problem = f"transaction {xid} in its snapshot could not be judged"
            excluded |= recent.keys.get(chunk.relation_id, set())
        if chunk.problem is not None:
            return None
        entries = chunk.entries
        bodies = [body for key, body in entries if key not in excluded] if excluded else \
            [body for _, body in entries]
        lsn = _lsn8(unit.commit_lsn)
        schema = tuple(lsn + struct.pack(">I", len(m)) + m for m in chunk.schema)
        payload = b"".join(schema) + (lsn + lsn.join(bodies) if bodies else b"")
        own = chunk.progress
        base = pred.result if pred is not None and pred.result is not None else own
        progress = BackfillProgress(own.backfill_id, own.part, own.last_key,
                                    base.rows + len(bodies), base.chunks + 1, own.done)
        chunk.stored_rows = len(bodies)
        chunk.result = progress
        chunk.finish("stored")
        return StoredTransaction(0, unit.commit_lsn, unit.end_lsn, unit.commit_ts,
                                 f"{BACKFILL_ORIGIN}:{chunk.backfill_id}", len(bodies), payload,
                                 schema, progress=progress)


def _keep(unit: StoredTransaction) -> bool:
    """A watermark's transaction that also holds something to store (not pgfeed's own)."""
    return bool(unit.change_count or unit.schema_frames)


def _add(keys: set[Key], key: Key | None) -> bool:
    if key is None:
        return False
    keys.add(key)
    return True


def _size(recent: _Recent) -> int:
    return 1 + sum(len(k) for k in recent.keys.values())


def _same_relation(schema: tuple[bytes, ...], rel: RelationMessage) -> bool:
    for message in schema:
        if message[:1] == b"R":
            ours = decode(message)
            assert isinstance(ours, RelationMessage)
            if ours.relation_id == rel.relation_id:
                return (ours.columns == rel.columns and ours.replica_identity == rel.replica_identity
                        and (ours.namespace, ours.relation_name) == (rel.namespace, rel.relation_name))
    return False
