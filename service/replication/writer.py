"""LogWriter: a capture's change log appends, on a thread of their own.

The receive loop hands over each batch of committed transactions together with the position it
makes confirmable; the writer appends them (fsync'd) and only then advances ``durable_lsn``, the one
position capture may report to PostgreSQL as flushed. So receiving the next batch overlaps the
write and fsync of this one (sqlite3 releases the GIL while it works), and a bounded queue keeps
memory bounded when the disk is slower than the source.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence

from service.assembler.model import StoredTransaction
from service.changelog.base import ChangeLog

__all__ = ["LogWriter"]

_Batch = tuple[Sequence[StoredTransaction], int]


class LogWriter:
    """Appends submitted batches in order; ``durable_lsn`` never runs ahead of what is stored.

    After a failed append nothing more is written or made durable: the error is raised by the
    next ``submit`` or ``raise_if_failed``, and the slot stays where ``durable_lsn`` stopped.
    """

    def __init__(self, changelog: ChangeLog, on_durable: Callable[[Sequence[StoredTransaction]], None],
                 *, depth: int = 4, name: str = "pgfeed-writer") -> None:
        self._changelog = changelog
        self._on_durable = on_durable
        self._queue: queue.Queue[_Batch | None] = queue.Queue(maxsize=depth)
        self._durable = changelog.confirmed_lsn()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def durable_lsn(self) -> int:
        """The highest position whose transactions are all durable in the change log."""
        return self._durable

    def submit(self, transactions: Sequence[StoredTransaction], confirmed_lsn: int) -> None:
        """Queue ``transactions`` (possibly none) to be stored and ``confirmed_lsn`` recorded with
        them; blocks while ``depth`` batches are already waiting."""
        self.raise_if_failed()
        self._queue.put((transactions, confirmed_lsn))

    def raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Store everything submitted, then stop the thread (idempotent)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        changelog = self._changelog
        while (batch := self._queue.get()) is not None:
            if self._error is not None:
                continue  # keep draining so a blocked submit wakes up; nothing is stored now
            transactions, confirmed = batch
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
            try:
                if transactions:
                    changelog.append(transactions, confirmed_lsn=confirmed)
                    self._on_durable(transactions)
                else:
                    changelog.set_confirmed_lsn(confirmed)
            except BaseException as exc:  # noqa: BLE001 - re-raised on the capture thread
                self._error = exc
            else:
                self._durable = max(self._durable, confirmed)
            if stop:
                break
