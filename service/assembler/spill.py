"""SpillStore: append-only per-xid byte buffers for in-progress transactions that outgrow memory.

Files: ``service.changelog.spill_files.FileSpillStore``; ``MemorySpillStore`` is its twin for tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol


class SpillStore(Protocol):
    """Spilled frames of in-progress transactions, keyed by top-level xid.

    Not durable on purpose: after a crash the slot replays every unconfirmed transaction from its
    start, so spilled data is recomputable and a store may start empty.
    """

    def append(self, xid: int, data: bytes | bytearray) -> None:
        """Add ``data`` after what ``xid`` holds (the caller may reuse ``data`` afterwards)."""
        ...

    def read(self, xid: int) -> Iterator[bytes]:
        """Yield ``xid``'s bytes in append order, in chunks (nothing for an unknown xid)."""
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

    def discard(self, xid: int) -> None:
        self._chunks.pop(xid, None)

    def size(self, xid: int) -> int:
        return sum(len(c) for c in self._chunks.get(xid, ()))

    def xids(self) -> list[int]:
        """The xids currently holding data (for tests)."""
        return sorted(self._chunks)
