"""Committed transactions as stored (wire-form changes): what capture writes and a change log keeps.

Stored form keeps each change as the pgoutput message it arrived as, so capture does no per-row
decoding; decoding happens on read (``decoding``: the served model lives there, ``decoding.model``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, TypeAlias

from pgfeed.assembler.framing import chunk_bounds, walk

if TYPE_CHECKING:
    from pgfeed.assembler.chunked import ChunkedPayload
    from pgfeed.assembler.spill import SpilledPayload

# In memory; or (a transaction that outgrew the assembler's memory) read back from the spill
# store; or (a big transaction a feed's reader pages through) read from the log's chunks on demand.
Payload: TypeAlias = "bytes | bytearray | SpilledPayload | ChunkedPayload"


# Origin of a backfill's transactions as served; the log stores ``BACKFILL_ORIGIN + ":" + id``
# (the id rides in the origin column, so no store needs another column), split on read.
BACKFILL_ORIGIN = "pgfeed.backfill"


def backfill_id_of(origin: str | None) -> str | None:
    """The backfill id of a stored origin (``pgfeed.backfill:<id>``), None for any other origin."""
    if origin is not None and origin.startswith(BACKFILL_ORIGIN + ":"):
        return origin[len(BACKFILL_ORIGIN) + 1:]
    return None


@dataclass(frozen=True, slots=True)
class BackfillProgress:
    """Where one part of a backfill stands after a chunk, carried by that chunk's transaction so
    the log stores it in the same atomic append (see ``ChangeLog.append``). Values are absolute
    (not increments), so applying one twice is harmless."""

    backfill_id: str
    part: int
    last_key: str | None  # JSON list of the key's text values of the last row read; None: none yet
    rows: int  # rows stored for this part so far (this chunk included)
    chunks: int  # chunks stored for this part so far
    done: bool  # the part has no rows left


@dataclass(slots=True)
class StoredTransaction:
    """A committed transaction as the change log keeps it.

    ``payload`` is the concatenation of frames ``FRAME.pack(lsn, len(msg)) + msg`` for every
    pgoutput message of the transaction that matters on read, in arrival order: Relation and Type
    messages (so a transaction decodes on its own) and the changes (Insert, Update, Delete,
    Truncate, transactional Message). ``change_count`` counts only the changes; change ``seq``
    numbers are their 0-based order. A non-transactional logical message is stored as a unit of
    its own with ``xid = 0``, ``end_lsn`` its LSN and ``commit_lsn = end_position(end_lsn)``.
    """

    xid: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int  # microseconds since 2000-01-01 UTC
    origin: str | None
    change_count: int
    payload: Payload
    # Relation ('R') and Type ('Y') message frames that arrived in this transaction. They are in
    # ``payload`` too; the log also keeps them in its schema history so that a transaction which
    # relies on a schema sent earlier (pgoutput sends a Relation once per invalidation) decodes
    # on its own: schema in force for T = latest version from transactions with commit_lsn < T's,
    # then the Relation frames inside T's payload as they come.
    schema_frames: tuple[bytes, ...] = ()
    # A backfill chunk's transaction: the part's progress, stored atomically with it.
    progress: BackfillProgress | None = None

    def buffer(self) -> bytes | bytearray:
        """The payload in memory, as every change log reads it back by default. A spilled payload
        (only on the way from the assembler to a log) or a chunked one (``ChangeLog.read``'s
        ``lazy_chunks``) is read in first, and kept: for readers and tests, never on the capture
        path nor in the feed reader's decoding of a big transaction."""
        payload = self.payload
        if not isinstance(payload, (bytes, bytearray)):
            payload = self.payload = bytes(payload)
        return payload

    def frames(self) -> Iterator[tuple[int, memoryview]]:
        """Yield ``(lsn, message)`` for each framed message of the payload (``buffer``)."""
        view = memoryview(self.buffer())
        for _at, lsn, start, stop in walk(view):
            yield lsn, view[start:stop]


def end_position(end_lsn: int) -> int:
    """The position of a unit that PostgreSQL reports at the *end* of its WAL record (a
    non-transactional logical message; the schema-only unit of a PREPARE): one byte before it.

    The record's end is where the next record starts, which may be another transaction's commit
    record, i.e. that transaction's ``commit_lsn``. One byte earlier lies inside the unit's own
    record, where no record starts and no other record ends: the position can collide with no
    other unit's, and it sorts after every commit before the record and before the next one.
    """
    return end_lsn - 1


def payload_pieces(payload: Payload, limit: int) -> Iterator[bytes | bytearray | memoryview]:
    """A stored payload in order, in pieces of at most ``limit`` bytes cut on frame boundaries:
    how a store writes any payload, whether in memory or spilled."""
    if isinstance(payload, (bytes, bytearray)):
        if len(payload) <= limit:  # the common case: one piece, no frame walk
            if payload:
                yield payload
            return
        view = memoryview(payload).cast("B")
        for start, end in pairwise(chunk_bounds(view, limit)):
            yield view[start:end]
    else:
        yield from payload.pieces(limit)
