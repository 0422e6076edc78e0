"""ChunkedPayload: a stored transaction's payload read back from its change log's chunks on
demand, so a reader of a transaction of any size holds O(chunk) of it, not O(transaction).

A store writes a payload in chunks cut on frame boundaries (``model.payload_pieces``); only a
single frame larger than a chunk is cut inside. A reader asks for the payload a segment at a time
(``segment``): one chunk, whose frames are whole, or, where a frame runs over a chunk's end, that
frame joined with the chunks it runs into. Only the last chunk loaded is kept, so the chunks
behind a reader are let go.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate, pairwise

from pgfeed.assembler.framing import FRAME, chunk_bounds

__all__ = ["ChunkedPayload", "segments"]

# load(i) -> chunk i's bytes; a store raises its retention error when the chunk is gone (trimmed
# while a reader was inside the transaction), never returns other bytes.
ChunkLoader = Callable[[int], bytes | bytearray]


class ChunkedPayload:
    """A payload of ``len(sizes)`` chunks (``sizes``: their byte lengths, in order), each loaded by
    ``load`` when a reader reaches it."""

    __slots__ = ("_cached", "_load", "_starts", "_total")

    def __init__(self, sizes: Sequence[int], load: ChunkLoader) -> None:
        self._starts = [0, *accumulate(sizes)]  # chunk i covers starts[i] .. starts[i+1]
        self._total = self._starts[-1]
        self._load = load
        self._cached: tuple[int, bytes | bytearray] | None = None

    def __len__(self) -> int:
        return self._total

    @property
    def chunks(self) -> int:
        return len(self._starts) - 1

    def chunk(self, i: int) -> bytes | bytearray:
        """Chunk ``i``'s bytes (kept until another chunk is loaded)."""
        cached = self._cached
        if cached is not None and cached[0] == i:
            return cached[1]
        data = self._load(i)
        if len(data) != self._starts[i + 1] - self._starts[i]:
            raise ValueError(f"payload chunk {i} holds {len(data)} bytes, not "
                             f"{self._starts[i + 1] - self._starts[i]}")
        self._cached = (i, data)
        return data

    def segment(self, pos: int) -> tuple[int, bytes | bytearray]:
        """``(base, buffer)``: bytes of the payload from offset ``base`` (<= ``pos``) to a chunk's
        end, holding the whole frame that starts at ``pos`` (a frame's start). A later frame
        that runs over the buffer's end (one larger than a chunk) is had by asking again at its
        start."""
        if not 0 <= pos < self._total:
            raise IndexError(f"offset {pos} is outside the payload (0..{self._total})")
        starts = self._starts
        i = bisect_right(starts, pos) - 1
        base = starts[i]
        buf = self.chunk(i)
        off = pos - base
        if off + FRAME.size <= len(buf) and \
                off + FRAME.size + FRAME.unpack_from(buf, off)[1] <= len(buf):
            return base, buf
        # A frame larger than a chunk: joined with the chunks it runs into (the last of them ends
        # on a frame boundary, as every chunk does but those a big frame was cut in).
        parts = [memoryview(buf)[off:]]
        have = len(buf) - off
        j = i
        while True:
            if have >= FRAME.size:
                head = parts[0] if len(parts[0]) >= FRAME.size else b"".join(parts)
                if have >= FRAME.size + FRAME.unpack_from(head, 0)[1]:
                    break
            j += 1
            if j >= self.chunks:
                raise ValueError(f"the frame at offset {pos} runs past the payload's end")
            parts.append(memoryview(self._load(j)))
            have += len(parts[-1])
        return pos, b"".join(parts)

    def pieces(self, limit: int) -> Iterator[bytes | bytearray | memoryview]:
        """The payload in order, in pieces of at most ``limit`` bytes cut on frame boundaries
        where a frame allows it (``model.payload_pieces``: copying a log to another store)."""
        for i in range(self.chunks):
            data = self._load(i)
            if len(data) <= limit:
                yield data
                continue
            view = memoryview(data)
            for start, end in pairwise(chunk_bounds(view, limit)):
                yield view[start:end]

    def __bytes__(self) -> bytes:
        """The whole payload (for readers that want it in memory after all)."""
        return b"".join(self._load(i) for i in range(self.chunks))


def segments(payload: bytes | bytearray | ChunkedPayload,
             pos: int = 0) -> tuple[int, bytes | bytearray]:
    """``payload``'s segment holding the frame at ``pos`` (see ``ChunkedPayload.segment``): an
    in-memory payload is one segment."""
    if isinstance(payload, ChunkedPayload):
        return payload.segment(pos)
    return 0, payload
