"""Framing of a stored transaction's payload: each pgoutput message behind its WAL position and
length (``FRAME``), and cutting a framed payload into bounded pieces on frame boundaries."""

from __future__ import annotations

import struct

__all__ = ["FRAME", "chunk_bounds", "frame"]

# One framed message inside StoredTransaction.payload: WAL position (XLogData dataStart), length.
FRAME = struct.Struct(">QI")

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
