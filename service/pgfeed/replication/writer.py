"""LogWriter: a capture's change log appends, on a thread of their own.

The receive loop hands over each batch of committed transactions together with the position it
makes confirmable; the writer appends them (fsync'd) and only then advances ``durable_lsn``, the one
position capture may report to PostgreSQL as flushed. So receiving the next batch overlaps the
write and fsync of this one (sqlite3 releases the GIL while it works), and a bounded queue keeps
memory bounded when the disk is slower than the source. A small batch that finds the thread idle
is appended by the caller itself (``inline_bytes``): a live trickle of commits has nothing to
overlap, and each hand-over is a thread wake-up on its way to the subscribers.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence

from pgfeed.assembler.model import StoredTransaction
from pgfeed.changelog.base import ChangeLog

__all__ = ["LogWriter"]

_Batch = tuple[Sequence[StoredTransaction], int, bool]  # transactions, confirmed_lsn, sync


class LogWriter:
    """Appends submitted batches in order; ``durable_lsn`` never runs ahead of what is stored.

    After a failed append nothing more is written or made durable: the error is raised by the
    next ``submit`` or ``raise_if_failed``, and the slot stays where ``durable_lsn`` stopped.
    """

    def __init__(self, changelog: ChangeLog, on_durable: Callable[[Sequence[StoredTransaction]], None],
                 *, depth: int = 4, name: str = "pgfeed-writer", inline_bytes: int = 0) -> None:
        """``inline_bytes``: transactions whose payloads total at most this many bytes are
        appended on the submitting thread when the writer thread has nothing queued (0, the
        default: everything goes through the thread)."""
        self._changelog = changelog
        self._on_durable = on_durable
        self._queue: queue.Queue[_Batch | None] = queue.Queue(maxsize=depth)
        self._durable = changelog.confirmed_lsn()
        self._error: BaseException | None = None
        self._inline_bytes = inline_bytes
        # Batches handed to the thread and batches it has stored: each counter has one writer.
        self._queued = self._stored = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def durable_lsn(self) -> int:
        """The highest position whose transactions are all durable in the change log."""
        return self._durable

    @property
    def idle(self) -> bool:
        """Nothing submitted is waiting or being stored (by the thread)."""
        return self._queued == self._stored

    def submit(self, transactions: Sequence[StoredTransaction], confirmed_lsn: int, *,
               background: bool = False, sync: bool = True) -> None:
        """Queue ``transactions`` (possibly none) to be stored and ``confirmed_lsn`` recorded with
        them; blocks while ``depth`` batches are already waiting. ``background``: always on the
        thread (a backfill's piece: the caller goes on receiving meanwhile). ``sync=False``: the
        append is not flushed to disk by itself (``ChangeLog.append``) and moves ``durable_lsn``
        no further; a synced append stored with or after it flushes it."""
        self.raise_if_failed()
        # A small batch while the thread is idle is stored right here: handing it over would cost
        # a thread wake-up (0.3-3 ms at 2,000 commits/s on two busy cores) with nothing to overlap.
        # Order is kept: nothing submitted earlier is still waiting or being stored.
        if (self._inline_bytes and transactions and not background and self._queued == self._stored
                and sum(len(t.payload) for t in transactions) <= self._inline_bytes):
            self._store(transactions, confirmed_lsn)
            self.raise_if_failed()
            return
        self._queued += 1
        self._queue.put((transactions, confirmed_lsn, sync))

    def raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Store everything submitted, then stop the thread (idempotent)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        while (batch := self._queue.get()) is not None:
            if self._error is not None:
                continue  # keep draining so a blocked submit wakes up; nothing is stored now
            transactions, confirmed, sync = batch
            taken = 1
            # Group commit: whatever queued up during the last fsync goes into this append, so
            # under load one fsync covers many commits and nothing waits behind a queue of them.
            stop = False
            while not stop:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                else:
                    transactions = [*transactions, *more[0]]
                    confirmed = max(confirmed, more[1])
                    sync = sync or more[2]
                    taken += 1
            self._store(transactions, confirmed, sync)
            self._stored += taken
            if stop:
                break

    def _store(self, transactions: Sequence[StoredTransaction], confirmed: int,
               sync: bool = True) -> None:
        try:
            if transactions:
                if sync:
                    self._changelog.append(transactions, confirmed_lsn=confirmed)
                else:
                    self._changelog.append(transactions, confirmed_lsn=confirmed, sync=False)
                self._on_durable(transactions)
            else:
                self._changelog.set_confirmed_lsn(confirmed)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the capture thread
            self._error = exc
        else:
            if sync:
                self._durable = max(self._durable, confirmed)
