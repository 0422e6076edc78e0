"""SpillStore: append-only per-xid byte buffers for in-progress transactions that outgrow memory,
and SpilledPayload, a committed transaction read back from one without ever being held whole.

Files: ``pgfeed.changelog.spill_files.FileSpillStore``; ``MemorySpillStore`` is its twin for tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import chain, pairwise
from typing import Protocol

from pgfeed.assembler.framing import chunk_bounds


class SpillStore(Protocol):
    """Spilled frames of in-progress transactions, keyed by top-level xid.

    Not durable on purpose: after a crash the slot replays every unconfirmed transaction from its
    start, so spilled data is recomputable and a store may start empty.
    """

    def append(self, xid: int, data: bytes | bytearray) -> None:
        """Add ``data`` after what ``xid`` holds (the caller may reuse ``data`` afterwards)."""
        ...

    def read(self, xid: int) -> Iterator[bytes]:
        """Yield ``xid``'s bytes in append order, one item per ``append`` (nothing for an unknown
        xid), then forget ``xid``. The assembler appends whole frames, so every item is too."""
        ...

    def discard(self, xid: int) -> None:
        """Forget ``xid``; a no-op when it holds nothing."""
        ...

    def size(self, xid: int) -> int:
        """Bytes held for ``xid`` (0 when none)."""
        ...


class MemorySpillStore:
    """In-memory SpillStore (tests): keeps copies of the appended chunks."""

    def __init__(self) -> None:
        self._chunks: dict[int, list[bytes]] = {}

    def append(self, xid: int, data: bytes | bytearray) -> None:
        self._chunks.setdefault(xid, []).append(bytes(data))

    def read(self, xid: int) -> Iterator[bytes]:
        yield from list(self._chunks.get(xid, ()))
        self.discard(xid)

    def discard(self, xid: int) -> None:
        self._chunks.pop(xid, None)

    def size(self, xid: int) -> int:
        return sum(len(c) for c in self._chunks.get(xid, ()))

    def xids(self) -> list[int]:
        """The xids currently holding data (for tests)."""
        return sorted(self._chunks)


class SpilledPayload:
    """The framed payload of a committed transaction that went to the spill store: its spilled
    segments, then the ``tail`` still in memory. Read once, a segment at a time, so the change log
    writes a transaction of any size in bounded memory (the contract's "memory stays bounded
    whatever the transaction size").

    ``segments`` yields the spilled bytes in order, each ending on a frame boundary.
    """

    __slots__ = ("_segments", "_size", "_tail")

    def __init__(self, segments: Callable[[], Iterator[bytes]], size: int,
                 tail: bytes | bytearray) -> None:
        self._segments: Callable[[], Iterator[bytes]] | None = segments
        self._size = size
        self._tail = tail

    def __len__(self) -> int:
        return self._size

    def pieces(self, limit: int) -> Iterator[bytes | memoryview]:
        """The payload in order, in pieces of at most ``limit`` bytes cut on frame boundaries (a
        frame larger than ``limit`` is cut inside). Can be iterated once."""
        if self._segments is None:
            raise RuntimeError("a spilled payload can be read only once")
        segments, self._segments = self._segments, None
        for segment in chain(segments(), (self._tail,)):  # one segment in memory at a time
            view = memoryview(segment)
            for start, end in pairwise(chunk_bounds(view, limit)):
                yield view[start:end]

    def __bytes__(self) -> bytes:
        """The whole payload (for stores that keep payloads in memory)."""
        return b"".join(self.pieces(max(self._size, 1)))
