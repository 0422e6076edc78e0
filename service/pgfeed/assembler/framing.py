"""Framing of a stored transaction's payload: each pgoutput message behind its WAL position and
length (``FRAME``), and cutting a framed payload into bounded pieces on frame boundaries."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from pgfeed.compiled import optional

__all__ = ["FRAME", "Payloadlike", "chunk_bounds", "extent", "frame", "walk"]

# One framed message inside StoredTransaction.payload: WAL position (XLogData dataStart), length.
FRAME = struct.Struct(">QI")

Payloadlike = bytes | bytearray | memoryview


def walk(payload: Payloadlike, pos: int = 0, end: int | None = None,
         ) -> Iterator[tuple[int, int, int, int]]:
    """The frames of a stored payload from ``pos`` (a frame's start) to ``end`` (default: the
    payload's end): ``(at, lsn, start, stop)``, the frame's offset, its WAL position and its
    message's bounds (``payload[start]`` is the message's tag). The one walk of stored frames:
    the decoder, the fill index, the backfill window and the log's readers all use it."""
    if end is None:
        end = len(payload)
    unpack, size = FRAME.unpack_from, FRAME.size
    while pos < end:
        lsn, length = unpack(payload, pos)
        start = pos + size
        stop = start + length
        yield pos, lsn, start, stop
        pos = stop


def _extent(payload: Payloadlike, pos: int, end: int, relation_id: int, limit: int,
            tags: bytes) -> tuple[int, int]:
    """``extent`` without the compiled module: the same walk, a Python step a frame."""
    count = 0
    for at, _lsn, start, stop in walk(payload, pos, end):
        if count >= limit or stop > end or stop - start < 5 or payload[start] not in tags \
                or int.from_bytes(payload[start + 1:start + 5], "big") != relation_id:
            return at, count
        count += 1
        pos = stop
    return pos, count


_framing: Any = optional("pgfeed.assembler._framing")
# extent(payload, pos, end, relation_id, limit, tags) -> (pos after, count): from ``pos`` (a
# frame's start), how many frames before ``end`` (at most ``limit``) are row changes (a tag in
# ``tags``) of ``relation_id``: how far a run of rows goes (the decoder's common case, without a
# Python step a frame when the compiled module is there).
extent = _framing.extent if _framing is not None else _extent


def frame(lsn: int, message: bytes | memoryview) -> bytes:
    return FRAME.pack(lsn, len(message)) + bytes(message)


def chunk_bounds(payload: memoryview, limit: int) -> list[int]:
    """Offsets cutting a framed payload into pieces of at most ``limit`` bytes, on frame boundaries
    where a frame allows it: ``[0, ..., len(payload)]`` (``[0]`` for an empty payload)."""
    size = len(payload)
    if size <= limit:
        return [0, size] if size else [0]
    bounds = [0]
    start = pos = 0
    header, unpack = FRAME.size, FRAME.unpack_from
    while size - start > limit:
        if size - pos >= header:
            nxt = min(pos + header + unpack(payload, pos)[1], size)
        else:
            nxt = size  # not a frame: keep the tail bytes as they are
        if nxt - start > limit:
            if pos > start:
                bounds.append(pos)
                start = pos
            while nxt - start > limit:  # one frame larger than a chunk
                start += limit
                bounds.append(start)
        pos = nxt
    bounds.append(size)
    return bounds
