"""Wake async readers (long-poll, gRPC live tail) the moment a capture thread stores a commit."""

from __future__ import annotations

import asyncio
import threading


class HeadNotifier:
    """The newest durable commit LSN of one feed, observable from asyncio code.

    The capture thread calls ``publish``; coroutines ``await wait_beyond(lsn, timeout)``.
    Thread-safe: futures are resolved on their own loop with ``call_soon_threadsafe``.
    """

    def __init__(self, head: int = 0) -> None:
        self._head = head
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[int]]] = []
        self._closed = False

    @property
    def head(self) -> int:
        return self._head

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

    async def wait_beyond(self, lsn: int, timeout: float) -> int:
        """Return the head as soon as it is > ``lsn`` (or the notifier is closed), or the current
        head after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._head > lsn or timeout <= 0 or self._closed:
                return self._head
            fut: asyncio.Future[int] = loop.create_future()
            self._waiters.append((loop, fut))
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            return self._head
        finally:
            with self._lock:
                self._waiters = [(lp, f) for lp, f in self._waiters if f is not fut]


def _resolve(fut: asyncio.Future[int], head: int) -> None:
    if not fut.done():
        fut.set_result(head)
