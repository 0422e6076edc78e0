"""The ChangeLog protocol: the durable, ordered store of committed transactions of one feed.

Implementations: ``memory.MemoryChangeLog`` (tests, demo) and ``sqlite.SqliteChangeLog`` (default).
A PostgreSQL-backed store for several service replicas can implement the same protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from clients._cursor import Cursor
from service.assembler.model import StoredTransaction


@dataclass(frozen=True, slots=True)
class LogStats:
    transaction_count: int
    change_count: int
    payload_bytes: int
    oldest_lsn: int  # commit_lsn of the oldest retained transaction, 0 when empty
    head_lsn: int  # commit_lsn of the newest, 0 when empty


class ChangeLog(Protocol):
    """Invariants every implementation keeps:

    - ``append`` is durable when it returns (fsync'd for on-disk stores) and atomic per call:
      a crash leaves either the whole batch or none of it.
    - ``append`` is idempotent by ``commit_lsn``: transactions at or below ``head()`` are skipped,
      so a slot replaying from its last confirmed position never duplicates anything.
    - Transactions are kept and read in ``commit_lsn`` order; ``head()`` never moves backward.
    - ``confirmed_lsn`` (the position safe to report to PostgreSQL as flushed) never moves backward.
    - ``trim`` never removes a transaction a registered consumer has not acknowledged
      unless ``force`` is given.
    """

    def append(self, transactions: Sequence[StoredTransaction], confirmed_lsn: int | None = None) -> None:
        """Store committed transactions (ascending commit_lsn) and optionally advance confirmed_lsn."""
        ...

    def head(self) -> int:
        """commit_lsn of the newest stored transaction; 0 when empty."""
        ...

    def confirmed_lsn(self) -> int:
        """The highest position recorded as durable (commit end LSNs and idle keepalive positions)."""
        ...

    def set_confirmed_lsn(self, lsn: int) -> None:
        """Record an idle position (outside any transaction) as durable; ignored if not higher."""
        ...

    def read(self, after: Cursor, max_changes: int, upto_lsn: int | None = None) -> list[StoredTransaction]:
        """Transactions that still hold changes after ``after``, in commit order.

        Stops once the returned transactions hold at least ``max_changes`` changes past the
        cursor (so the last one may overshoot; callers slice), or at ``upto_lsn`` inclusive.
        """
        ...

    def oldest(self) -> int:
        """commit_lsn of the oldest retained transaction; 0 when empty."""
        ...

    def stats(self) -> LogStats: ...

    def trim(self, before_lsn: int, *, force: bool = False) -> int:
        """Drop transactions with commit_lsn < before_lsn, but not past the slowest consumer
        unless ``force``. Returns the number of transactions dropped."""
        ...

    def split_points(self, from_lsn: int, to_lsn: int, parts: int) -> list[int]:
        """Commit LSNs cutting (from_lsn, to_lsn] into ``parts`` ranges of about equal change counts.

        Returns ``parts + 1`` ascending boundaries, first ``from_lsn`` and last ``to_lsn``
        (fewer when the range holds fewer transactions than parts)."""
        ...

    def schema_history(self, after_lsn: int = 0) -> list[tuple[int, bytes]]:
        """``(commit_lsn, frame)`` of every stored schema frame (Relation/Type) of transactions with
        commit_lsn > after_lsn, in commit order; never trimmed, so any retained transaction decodes."""
        ...

    def set_consumer(self, name: str, cursor: Cursor) -> None:
        """Record a named consumer's acknowledged cursor (never moves backward)."""
        ...

    def get_consumer(self, name: str) -> Cursor | None: ...

    def consumers(self) -> dict[str, Cursor]: ...

    def close(self) -> None: ...
