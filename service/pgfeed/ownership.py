"""What one ``pgfeed serve`` owns alone: its data directory (an OS lock held for the process's
life) and its listening ports (bound without ``SO_REUSEPORT``, checked before anything starts).

A second process on the same data directory or port gets a ``StartupError`` naming it, instead
of starting and fighting the first over slots or answering half of its calls. The data-directory
lock is ``flock`` on ``<data dir>/pgfeed.lock``: the kernel drops it with the process, however it
ends (SIGKILL included), so no crash leaves a stale lock behind.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from pathlib import Path

from pgfeed.errors import StartupError

__all__ = ["LOCK_FILE", "DataDirLock", "bind_listener", "check_port_free"]

LOCK_FILE = "pgfeed.lock"


class DataDirLock:
    """An exclusive lock on a data directory, created if missing; the file holds the owner's pid
    (read by the process it refuses, to name the owner)."""

    def __init__(self, data_dir: Path, fd: int) -> None:
        self.data_dir = data_dir
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: Path) -> DataDirLock:
        """Create ``data_dir`` if needed and lock it; StartupError when it cannot be created or
        written, or when another process holds it."""
        data_dir = Path(data_dir)
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StartupError(f"cannot create the data directory {data_dir}: {_reason(exc)}; "
                               "choose another --data-dir (PGFEED_DATA_DIR) or fix its "
                               "permissions") from None
        path = data_dir / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StartupError(f"cannot write to the data directory {data_dir}: {_reason(exc)}; "
                               "choose another --data-dir (PGFEED_DATA_DIR) or fix its "
                               "permissions") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StartupError(f"cannot lock the data directory {data_dir}: "
                                   f"{_reason(exc)}") from None
            holder = _holder(path)
            raise StartupError(f"data directory {data_dir} is in use by another pgfeed serve "
                               f"({holder}); stop that one, or give this one another "
                               "--data-dir") from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as exc:
            os.close(fd)
            raise StartupError(f"cannot write to the data directory {data_dir}: {_reason(exc)}; "
                               "free some space or fix its permissions") from None
        return cls(data_dir, fd)

    def release(self) -> None:
        """Unlock (closing the file is enough; the file stays, harmless to the next owner)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _holder(path: Path) -> str:
    try:
        pid = path.read_text().strip()
    except OSError:
        pid = ""
    return f"pid {pid}" if pid.isdigit() else "a process that is still starting"


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _addresses(host: str, port: int) -> list[tuple[int, tuple[object, ...]]]:
    """The (family, address) pairs a listener on ``host`` binds, as asyncio's ``create_server``
    resolves them (every address of a name; all interfaces for "" or "0.0.0.0")."""
    host = host.strip("[]") or None  # type: ignore[assignment]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(f"cannot listen on {host}:{port}: the host does not resolve "
                           f"({exc.strerror})") from None
    seen: list[tuple[int, tuple[object, ...]]] = []
    for family, _, _, _, address in infos:
        if (family, address) not in seen and family in (socket.AF_INET, socket.AF_INET6):
            seen.append((family, address))
    return seen


def _bound(family: int, address: tuple[object, ...]) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT only; never REUSEPORT
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def _in_use(what: str, host: str, port: int, flag: str, exc: OSError) -> StartupError:
    if exc.errno == errno.EADDRINUSE:
        return StartupError(f"{what} port {port} on {host} is already in use (another pgfeed serve?); "
                            f"stop that process, or give this one another {flag}")
    return StartupError(f"cannot listen for {what} on {host}:{port}: {_reason(exc)}; "
                        f"check --{what.lower()}-host and {flag}")


def bind_listener(what: str, host: str, port: int, flag: str) -> list[socket.socket]:
    """Listening-ready sockets for ``host:port`` (each resolved address; with port 0 they share
    the port the first one got); StartupError naming ``flag`` when the port is taken."""
    sockets: list[socket.socket] = []
    try:
        for family, address in _addresses(host, port):
            if sockets and port == 0:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sockets.append(_bound(family, address))
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise _in_use(what, host, port, flag, exc) from None
    if not sockets:
        raise StartupError(f"cannot listen for {what} on {host}:{port}: no IPv4 or IPv6 address")
    for sock in sockets:
        sock.listen(2048)
    return sockets


def check_port_free(what: str, host: str, port: int, flag: str) -> None:
    """StartupError if another socket listens on ``host:port`` (for a listener the caller binds
    itself right after: gRPC's; its own bind failure would only say "Failed to bind")."""
    if port == 0:
        return
    for sock in bind_listener(what, host, port, flag):
        sock.close()
