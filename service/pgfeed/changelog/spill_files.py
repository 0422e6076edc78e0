"""FileSpillStore: one append-only file per in-progress xid under a feed's spill directory.

No fsync: spilled data is recomputable (the slot re-sends unconfirmed transactions after a crash).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

_SUFFIX = ".spill"


class FileSpillStore:
    """SpillStore on files ``<directory>/<xid>.spill``; stale ones are removed on start."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob(f"*{_SUFFIX}"):  # left by a previous run: never valid now
            stale.unlink(missing_ok=True)
        self._segments: dict[int, list[int]] = {}  # xid -> size of each append, in order

    def _path(self, xid: int) -> Path:
        return self.directory / f"{xid}{_SUFFIX}"

    def append(self, xid: int, data: bytes | bytearray) -> None:
        # Appends are large (the assembler spills whole buffers), so open-per-append is cheap and
        # keeps no file handle per in-progress xid.
        with open(self._path(xid), "ab") as f:
            f.write(data)
        self._segments.setdefault(xid, []).append(len(data))

    def read(self, xid: int) -> Iterator[bytes]:
        """Yield the xid's appends one by one; the file is deleted once read to the end."""
        sizes = self._segments.get(xid)
        if sizes is None:
            return
        with open(self._path(xid), "rb") as f:
            for size in sizes:
                yield f.read(size)
        self.discard(xid)

    def discard(self, xid: int) -> None:
        if self._segments.pop(xid, None) is not None:
            self._path(xid).unlink(missing_ok=True)

    def size(self, xid: int) -> int:
        return sum(self._segments.get(xid, ()))
