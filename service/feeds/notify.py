"""Wake async readers (long-poll, gRPC live tail) the moment a capture thread stores a commit."""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class HeadNotifier:
    """The newest durable commit LSN of one feed, observable from asyncio code.

    The capture thread calls ``publish``; coroutines ``await wait_beyond(lsn, timeout)``.
    Thread-safe: futures are resolved on their own loop with ``call_soon_threadsafe``.
    """

    def __init__(self, head: int = 0) -> None:
        self._head = head
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[int | None]]] = []
        self._closed = False

    @property
    def head(self) -> int:
        return self._head

    @property
    def closed(self) -> bool:
        """The feed was deleted: readers should find out from its (closed) log."""
        return self._closed

    def publish(self, head: int) -> None:
        with self._lock:
            if head <= self._head:
                return
            self._head = head
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, fut, head)

    def close(self) -> None:
        """The feed is gone (deleted): wake every waiter now, and answer later waits at once, so
        that readers notice instead of waiting out their long-poll or tail timeout."""
        with self._lock:
            self._closed = True
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, fut, self._head)

    async def wait_beyond(self, lsn: int, timeout: float,
                          stop: asyncio.Future[Any] | None = None) -> int:
        """Return the head as soon as it is > ``lsn`` (or the notifier is closed), or the current
        head after ``timeout`` seconds or once ``stop`` is done.

        One future and one timer a wait: a live subscriber waits once per commit it follows."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._head > lsn or timeout <= 0 or self._closed or (stop is not None and stop.done()):
                return self._head
            fut: asyncio.Future[int | None] = loop.create_future()
            self._waiters.append((loop, fut))
        timer = loop.call_later(timeout, _resolve, fut, None)
        wake = None
        if stop is not None:
            def wake(_: object) -> None:
                _resolve(fut, None)
            stop.add_done_callback(wake)
        try:
            woken = await fut
        finally:
            timer.cancel()
            if wake is not None:
                stop.remove_done_callback(wake)  # type: ignore[union-attr]
            if not fut.done() or fut.cancelled() or fut.result() is None:
                with self._lock:  # not woken by publish: still listed
                    self._waiters = [(lp, f) for lp, f in self._waiters if f is not fut]
        return self._head if woken is None else max(woken, self._head)


def _resolve(fut: asyncio.Future[int | None], head: int | None) -> None:
    if not fut.done():
        fut.set_result(head)


class StopSignal:
    """Set once the server begins to stop, so that waits end at once (long-polls answer with what
    they have) instead of holding the shutdown for their full ``wait``. Used on one event loop."""

    def __init__(self) -> None:
        self._future: asyncio.Future[None] | None = None
        self._set = False

    def future(self) -> asyncio.Future[None]:
        """A future done once ``set`` was called (for ``HeadNotifier.wait_beyond``'s ``stop``)."""
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
            if self._set:
                self._future.set_result(None)
        return self._future

    def set(self) -> None:
        self._set = True
        if self._future is not None and not self._future.done():
            self._future.set_result(None)

    @property
    def is_set(self) -> bool:
        return self._set
