"""Wake async readers (long-poll, gRPC live tail) the moment a capture thread stores a commit."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

SWEPT_WAIT = 5.0  # seconds: a wait this long shares the loop's sweep instead of a timer
SWEEP_SECONDS = 0.1


class HeadNotifier:
    """The newest durable commit LSN of one feed, observable from asyncio code.

    The capture thread calls ``publish``; coroutines ``await wait_beyond(lsn, timeout)``. A
    publish makes one thread-safe call per event loop with waiters, not one per waiter, and none
    while the previous one has not run yet: commits that arrive while the loop is busy are
    coalesced into one wake-up, and the publishing thread's cost does not grow with the number
    of subscribers. The loop then resolves its waiters' futures itself.
    """

    def __init__(self, head: int = 0) -> None:
        self._head = head
        self._lock = threading.Lock()
        self._loops: dict[asyncio.AbstractEventLoop, _LoopWaiters] = {}
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
            due = self._due()
        for waiters in due:
            waiters.schedule()

    def close(self) -> None:
        """The feed is gone (deleted): wake every waiter now, and answer later waits at once, so
        that readers notice instead of waiting out their long-poll or tail timeout."""
        with self._lock:
            self._closed = True
            due = self._due()
        for waiters in due:
            waiters.schedule()

    def _due(self) -> list[_LoopWaiters]:
        """(Under the lock.) The loops to wake: those with waiters and no wake-up pending."""
        due = []
        for loop, waiters in list(self._loops.items()):
            if loop.is_closed():
                del self._loops[loop]
            elif waiters.futures and not waiters.pending:
                waiters.pending = True
                due.append(waiters)
        return due

    def waiting(self) -> int:
        """How many waits are registered (tests, and leak checks)."""
        return sum(len(w.futures) for w in list(self._loops.values()))

    async def wait_beyond(self, lsn: int, timeout: float,
                          stop: asyncio.Future[Any] | None = None) -> int:
        """Return the head as soon as it is > ``lsn`` (or the notifier is closed), or the current
        head after ``timeout`` seconds or once ``stop`` is done."""
        if self._head > lsn or timeout <= 0 or self._closed or (stop is not None and stop.done()):
            return self._head
        loop = asyncio.get_running_loop()
        waiters = self._loops.get(loop)
        if waiters is None:
            with self._lock:
                waiters = self._loops.setdefault(loop, _LoopWaiters(self, loop))
        if stop is not None:
            waiters.watch(stop)
        deadline = loop.time() + timeout
        while True:
            # Registered on the loop, after the head was read: a publish in between finds this
            # waiter (or a wake-up already pending) and wakes it.
            fut: asyncio.Future[bool] = loop.create_future()
            with self._lock:
                waiters.futures.append(fut)
                if self._head > lsn or self._closed:  # published meanwhile
                    waiters.futures.pop()
                    return self._head
            timer = None
            if timeout < SWEPT_WAIT:
                timer = loop.call_at(deadline, _time_out, fut)
            else:
                waiters.deadlines[fut] = deadline
                waiters.sweep_soon()
            try:
                await fut
            finally:
                if timer is not None:
                    timer.cancel()
                else:
                    del waiters.deadlines[fut]
                if fut.cancelled() or fut.result():
                    with self._lock, contextlib.suppress(ValueError):  # not woken: still listed
                        waiters.futures.remove(fut)
            if self._head > lsn or self._closed or (stop is not None and stop.done()) \
                    or loop.time() >= deadline:
                return self._head


class _LoopWaiters:
    """One event loop's waiters on a notifier: futures resolved together by one callback.

    A wait of ``SWEPT_WAIT`` seconds or more (a live stream's or a long-poll's) has no timer of
    its own (a uvloop timer costs ~2 µs to start and cancel, once per waiter per commit): a sweep
    every ``SWEEP_SECONDS`` ends those past their deadline, at most that late.
    """

    __slots__ = ("deadlines", "futures", "loop", "notifier", "pending", "stops", "sweeping")

    def __init__(self, notifier: HeadNotifier, loop: asyncio.AbstractEventLoop) -> None:
        self.notifier = notifier
        self.loop = loop
        self.futures: list[asyncio.Future[bool]] = []  # changed under the notifier's lock
        self.pending = False  # a wake-up is scheduled and has not run yet
        self.stops: set[asyncio.Future[Any]] = set()  # stop futures that wake every waiter
        self.deadlines: dict[asyncio.Future[bool], float] = {}  # swept waits (loop only)
        self.sweeping: asyncio.TimerHandle | None = None

    def sweep_soon(self) -> None:
        if self.sweeping is None:
            self.sweeping = self.loop.call_later(SWEEP_SECONDS, self.sweep)

    def sweep(self) -> None:
        """(On the loop.) End the swept waits whose deadline passed; again later while any wait."""
        self.sweeping = None
        now = self.loop.time()
        for fut, deadline in list(self.deadlines.items()):
            if deadline <= now:
                _time_out(fut)
        if self.deadlines:
            self.sweep_soon()

    def schedule(self) -> None:
        """(Any thread.) Run ``wake`` on the loop soon."""
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            self.loop.call_soon_threadsafe(self.wake)

    def wake(self, stop: object = None) -> None:
        """(On the loop.) Resolve every waiting future; each waiter checks what it waits for."""
        with self.notifier._lock:
            self.pending = False
            futures, self.futures = self.futures, []
        if stop is not None:
            self.stops.discard(stop)
        for fut in futures:
            if not fut.done():
                fut.set_result(False)

    def watch(self, stop: asyncio.Future[Any]) -> None:
        """Wake every waiter when ``stop`` is done (hooked once per stop future, not per wait)."""
        if stop not in self.stops:
            self.stops.add(stop)
            stop.add_done_callback(self.wake)


def _time_out(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(True)


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
