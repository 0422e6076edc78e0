"""FileSpillStore: one append-only file per in-progress xid under a feed's spill directory.

No fsync: spilled data is recomputable (the slot re-sends unconfirmed transactions after a crash).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

_SUFFIX = ".spill"
_READ_CHUNK = 1 << 20


class FileSpillStore:
    """SpillStore on files ``<directory>/<xid>.spill``; stale ones are removed on start."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob(f"*{_SUFFIX}"):  # left by a previous run: never valid now
            stale.unlink(missing_ok=True)
        self._sizes: dict[int, int] = {}

    def _path(self, xid: int) -> Path:
        return self.directory / f"{xid}{_SUFFIX}"

    def append(self, xid: int, data: bytes | bytearray) -> None:
        # Appends are large (the assembler spills whole buffers), so open-per-append is cheap and
        # keeps no file handle per in-progress xid.
        with open(self._path(xid), "ab") as f:
            f.write(data)
        self._sizes[xid] = self._sizes.get(xid, 0) + len(data)

    def read(self, xid: int) -> Iterator[bytes]:
        """Yield the xid's bytes in chunks; the file is deleted once it has been read to the end."""
        if xid not in self._sizes:
            return
        path = self._path(xid)
        with open(path, "rb") as f:
            while chunk := f.read(_READ_CHUNK):
                yield chunk
        self.discard(xid)

    def discard(self, xid: int) -> None:
        if self._sizes.pop(xid, None) is not None:
            self._path(xid).unlink(missing_ok=True)

    def size(self, xid: int) -> int:
        return self._sizes.get(xid, 0)
