"""PieceFiles: the payloads of backfill pieces, in append-only files beside a SQLite change log.

Why not in the log's ``chunk`` table: SQLite writes every byte of a blob twice (its WAL, then the
checkpoint into the database file) and checksums it, and every live commit's fsync of the WAL
also flushes the pieces appended before it, so a backfill's bytes delayed live commits and
capped how much of it could go between them (bench/RESULTS.md, Backfill). Here a piece is
written once, to a file of its own kind, and the log keeps its place (``piece`` rows).

Durability: the pieces an append writes are fdatasync'd (``sync``, once an append) before the
log's transaction that names them commits, so a row the log has is always backed by durable
bytes, whatever the OS writes back first; the sync is short (what one append wrote; nothing else
in the files is dirty). A write whose transaction then rolls back leaves unnamed bytes at the file's
end, given back when the file is removed. Files are numbered in write order (a writer always
starts a new one) and rotated at FILE_BYTES; retention removes a file once no piece in it is kept
(``remove_unused``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path

__all__ = ["FILE_BYTES", "PieceFiles"]

log = logging.getLogger("pgfeed.changelog")

FILE_BYTES = 64 << 20  # a file takes no more pieces once it holds this much
_SUFFIX = ".pieces"


def directory_of(log_path: Path) -> Path:
    """Where the pieces of the log at ``log_path`` live."""
    return log_path.with_name(f"{log_path.name}-pieces")


class PieceFiles:
    """The piece files of one log: one writer (the log's), any number of readers (``read``
    opens the file each time: a file removed under a reader is then a clean FileNotFoundError)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._fd: int | None = None  # the file being written: number _current, _size bytes
        self._current = 0
        self._size = 0
        self._dirty: set[int] = set()  # descriptors written since the last sync
        self._retired: list[int] = []  # rotated out, closed once synced

    def path(self, number: int) -> Path:
        return self.directory / f"{number:016d}{_SUFFIX}"

    def numbers(self) -> list[int]:
        """The files there are, in write order."""
        if not self.directory.is_dir():
            return []
        return sorted(int(p.name[:-len(_SUFFIX)]) for p in self.directory.glob(f"*{_SUFFIX}")
                      if p.name[:-len(_SUFFIX)].isdigit())

    def write(self, parts: Iterable[bytes | bytearray | memoryview]) -> tuple[int, int, list[int]]:
        """Append ``parts`` (a payload's pieces, cut on frame boundaries): (file number, offset,
        each part's size). Not durable until ``sync``."""
        with self._lock:
            if self._fd is None or self._size >= FILE_BYTES:
                self._open_next()
            fd = self._fd
            assert fd is not None
            offset, sizes = self._size, []
            try:
                for part in parts:
                    view = memoryview(part)
                    written = 0
                    while written < len(view):
                        written += os.write(fd, view[written:])
                    sizes.append(written)
                    self._size += written
            except OSError:
                self._close()  # the file's end is unknown now: the next write starts a new file
                raise
            self._dirty.add(fd)
            return self._current, offset, sizes

    def sync(self) -> None:
        """Make everything written so far durable (before a row names it)."""
        with self._lock:
            for fd in self._dirty:
                os.fdatasync(fd)
            self._dirty.clear()
            for fd in self._retired:
                os.close(fd)
            self._retired.clear()

    def _open_next(self) -> None:
        self._close()
        self.directory.mkdir(parents=True, exist_ok=True)
        number = max(self.numbers(), default=0) + 1
        fd = os.open(self.path(number), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        # the new file's name must be durable before a row names it
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._fd, self._current, self._size = fd, number, 0

    def read(self, number: int, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset`` of file ``number``; FileNotFoundError when the file is
        gone, ValueError when it holds fewer bytes (damaged)."""
        fd = os.open(self.path(number), os.O_RDONLY)
        try:
            data = os.pread(fd, size, offset)
        finally:
            os.close(fd)
        if len(data) != size:
            raise ValueError(f"piece file {self.path(number)} holds {len(data)} of {size} bytes at "
                             f"offset {offset}")
        return data

    def remove_unused(self, oldest_kept: int | None) -> None:
        """Remove the files numbered below ``oldest_kept``, the oldest file a kept piece is in
        (None: no piece is kept), but never the newest file: it may be being written, by this
        instance or by the writer in another process (which always writes the newest)."""
        with self._lock:
            numbers = self.numbers()
            if not numbers:
                return
            bound = numbers[-1] if oldest_kept is None else min(oldest_kept, numbers[-1])
            for n in numbers:
                if n < bound:
                    try:
                        self.path(n).unlink(missing_ok=True)
                    except OSError as exc:  # left for the next trim: nothing reads it
                        log.warning("cannot remove piece file %s: %s", self.path(n), exc)

    def close(self) -> None:
        with self._lock:
            self._close()
            for fd in self._retired:
                os.close(fd)
            self._retired.clear()
            self._dirty.clear()

    def _close(self) -> None:
        if self._fd is not None:
            if self._fd in self._dirty:
                self._retired.append(self._fd)  # its bytes must still be synced
            else:
                os.close(self._fd)
            self._fd = None
