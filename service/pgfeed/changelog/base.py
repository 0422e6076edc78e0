"""The ChangeLog protocol: the durable, ordered store of committed transactions of one feed.

Implementations: ``memory.MemoryChangeLog`` (tests, demo), ``sqlite.SqliteChangeLog`` (default) and
``pgfeed.pgstore.changelog.PgChangeLog`` (a PostgreSQL store shared by several replicas). The pure
rules every store shares (batch checks, retention bounds, split points) live here too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, TypeVar

from pgfeed.assembler.model import BackfillProgress, StoredTransaction
from pgfeed.changelog.backfills import BackfillPart, BackfillRecord
from pgfeed.errors import PgfeedError, RetentionError
from pgfeed.pgoutput.messages import PG_EPOCH_UNIX
from pgfeed_client._cursor import Cursor, format_lsn

log = logging.getLogger("pgfeed.changelog")

# LSNs are stored as SQLite's signed 64-bit integers; PostgreSQL never gets near 2**63.
MAX_LSN = (1 << 63) - 1
# The largest piece a store writes a payload in (cut on frame boundaries, ``payload_pieces``).
CHUNK_BYTES = 4 << 20


class ChangeLogError(PgfeedError):
    """The change log cannot serve a call: closed, or its file is not a pgfeed log it understands."""

    code = "changelog_error"


class StoreUnavailable(ChangeLogError):
    """A shared store could not answer now (connection lost, lock or statement timeout): retry."""

    code = "store_unavailable"


class LeaseLost(ChangeLogError):
    """This replica no longer holds the feed's lease (another one took over): it must not write."""

    code = "lease_lost"


@dataclass(frozen=True, slots=True)
class LogStats:
    transaction_count: int
    change_count: int
    payload_bytes: int
    oldest_lsn: int  # commit_lsn of the oldest retained transaction, 0 when empty
    head_lsn: int  # commit_lsn of the newest ever stored (kept when retention empties the log), 0 if none
    trimmed_lsn: int = 0  # highest commit_lsn ever removed; cursors below it are expired (410)
    forced_trims: int = 0  # trims that dropped what a named consumer had not acknowledged


@dataclass(frozen=True, slots=True)
class ConsumerState:
    """A named consumer: its acknowledged cursor and when it last acknowledged (µs since
    2000-01-01, PostgreSQL's epoch, like ``commit_ts``), which its idle expiry counts from."""

    cursor: Cursor
    acked_us: int




class ChangeLog(Protocol):
    """Invariants every implementation keeps:

    - ``append`` is durable when it returns (fsync'd for on-disk stores) and atomic per call:
      a crash leaves either the whole batch or none of it.
    - ``append`` is idempotent by ``commit_lsn``: transactions at or below ``head()`` are skipped,
      so a slot replaying from its last confirmed position never duplicates anything.
    - Transactions are kept and read in ``commit_lsn`` order; ``head()`` never moves backward.
    - ``confirmed_lsn`` (the position safe to report to PostgreSQL as flushed) never moves backward.
    - ``trim`` and ``retain`` only ever remove a prefix (the oldest transactions) and never one a
      named consumer has not acknowledged, unless ``force`` is given; a forced trim that does is
      logged (``pgfeed.changelog``) and counted in ``LogStats.forced_trims``.
    - ``trimmed_lsn`` (highest commit_lsn removed) never moves backward; ``head`` is kept when
      retention empties the log, so replays below it are still skipped.
    - Schema history is never trimmed.
    - A consumer is never created below ``Cursor(trimmed_lsn)`` (RetentionError); a forced
      trim removes the consumers it overtook (their cursors name positions that are gone), so
      no consumer ever holds retention at a position the log no longer has.
    - Consumers' acknowledgement times are durable with them: idle expiry survives restarts.
    - Backfill progress is stored atomically with the chunk that made it: a transaction that
      ``append`` stores and whose ``progress`` is set also sets that backfill part's ``last_key``,
      ``rows``, ``chunks`` and ``done`` (absolute values) in the same atomic write; a skipped
      replay changes nothing. Backfill records are never trimmed with transactions.
    """

    def append(self, transactions: Sequence[StoredTransaction], confirmed_lsn: int | None = None, *,
               sync: bool = True) -> None:
        """Store committed transactions (ascending commit_lsn) and optionally advance confirmed_lsn;
        apply the ``progress`` of every stored one (see the class docstring). ``sync=False``: the
        append need not reach the disk before returning (it does with the next synced one; a
        power failure may lose it whole): for what is safe to lose, a backfill's pieces, which
        are read again with the progress they carried."""
        ...

    def save_backfill(self, record: BackfillRecord) -> None:
        """Create or update a backfill: its header (tables, options, state, error, timestamps) is
        replaced; its parts are created when the log does not hold them yet, and a part the log
        holds keeps its stored progress (only ``append`` moves progress)."""
        ...

    def backfills(self) -> list[BackfillRecord]:
        """Every backfill with its parts and their durable progress, oldest first."""
        ...

    def head(self) -> int:
        """commit_lsn of the newest transaction ever stored (retained or trimmed); 0 when none."""
        ...

    def confirmed_lsn(self) -> int:
        """The highest position recorded as durable (commit end LSNs and idle keepalive positions)."""
        ...

    def set_confirmed_lsn(self, lsn: int) -> None:
        """Record an idle position (outside any transaction) as durable; ignored if not higher."""
        ...

    def read(self, after: Cursor, max_changes: int, upto_lsn: int | None = None, *,
             lazy_chunks: int | None = None) -> list[StoredTransaction]:
        """Transactions that still hold changes after ``after``, in commit order.

        Stops once the returned transactions hold at least ``max_changes`` changes past the
        cursor (so the last one may overshoot; callers slice), or at ``upto_lsn`` inclusive.
        With ``lazy_chunks``, a payload the store keeps in more chunks than that comes as an
        ``assembler.chunked.ChunkedPayload`` that loads each chunk when a reader reaches it (a
        big transaction is paged in O(chunk) memory); a chunk retention removed meanwhile
        raises RetentionError. A store holding payloads in memory may return them as they are.
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

    def retain(self, hours: float | None, max_bytes: int | None, now_us: int) -> int:
        """Apply a retention policy: drop transactions committed more than ``hours`` before
        ``now_us`` (µs since 2000-01-01), then the oldest until payload bytes <= ``max_bytes``,
        never past what the slowest named consumer acknowledged. ``None`` disables a limit.
        Returns the number of transactions dropped."""
        ...

    def trimmed_lsn(self) -> int:
        """Highest commit_lsn ever removed (0 if none): a cursor below ``Cursor(trimmed_lsn)``
        may have missed changes, so readers answer 410."""
        ...

    def split_points(self, from_lsn: int, to_lsn: int, parts: int) -> list[int]:
        """Commit LSNs cutting (from_lsn, to_lsn] into ``parts`` ranges of about equal change counts.

        Returns ``parts + 1`` ascending boundaries, first ``from_lsn`` and last ``to_lsn``
        (fewer when the range holds fewer transactions than parts; ``[from_lsn]`` when the range
        is empty because ``from_lsn == to_lsn``)."""
        ...

    def schema_history(self, after_lsn: int = 0) -> list[tuple[int, bytes]]:
        """``(commit_lsn, frame)`` of every stored schema frame (Relation/Type) of transactions with
        commit_lsn > after_lsn, in commit order; never trimmed, so any retained transaction decodes."""
        ...

    def set_consumer(self, name: str, cursor: Cursor, acked_us: int | None = None) -> None:
        """Record a named consumer's acknowledged cursor (never moves backward) and that it
        acknowledged at ``acked_us`` (default now; never moves backward either). Creating a
        consumer below ``Cursor(trimmed_lsn())`` raises RetentionError."""
        ...

    def get_consumer(self, name: str) -> Cursor | None: ...

    def consumers(self) -> dict[str, Cursor]: ...

    def consumer_states(self) -> dict[str, ConsumerState]:
        """Every consumer with its cursor and last acknowledgement time."""
        ...

    def delete_consumer(self, name: str) -> bool:
        """Forget a consumer (retention stops waiting for it); False if there was none."""
        ...

    def expire_consumers(self, acked_before_us: int) -> list[str]:
        """Delete the consumers that last acknowledged before ``acked_before_us`` (logged at
        WARNING on ``pgfeed.changelog``); returns their names."""
        ...

    def close(self) -> None: ...


def apply_progress(part: BackfillPart, progress: BackfillProgress) -> BackfillPart:
    """``part`` with a chunk's progress applied (for stores that keep parts as records)."""
    from dataclasses import replace
    return replace(part, last_key=progress.last_key, rows=progress.rows, chunks=progress.chunks,
                   done=progress.done)


def slowest(cursors: Iterable[Cursor]) -> Cursor | None:
    """The consumer cursor retention must wait for; None when there are no consumers."""
    return min(cursors, default=None, key=lambda c: c.sort_key)


def release_bound(consumer: Cursor | None, change_count_at: int | None) -> int:
    """Transactions with commit_lsn below the returned bound are acknowledged by ``consumer``.

    ``change_count_at`` is the change count of the transaction at ``consumer.lsn`` (None if the
    log holds none there): a mid-transaction cursor acknowledges it only once it names its last
    change. No consumer: everything is released.
    """
    if consumer is None:
        return MAX_LSN
    if change_count_at is None or consumer.includes(consumer.lsn, change_count_at - 1):
        return consumer.lsn + 1
    return consumer.lsn


def consumed_bound(log: ChangeLog, cursor: Cursor) -> int:
    """``trim``'s bound that drops exactly what a reader at ``cursor`` has consumed: every
    transaction before it, and the one at it once the cursor names its last change."""
    if cursor.seq is None:
        return cursor.lsn + 1
    rest = log.read(cursor, 1, upto_lsn=cursor.lsn)  # the transaction at it, if changes are left
    return cursor.lsn if rest else cursor.lsn + 1


def trimmed_while_read(commit_lsn: int, oldest: int) -> RetentionError:
    """What a reader inside transaction ``commit_lsn`` gets when retention removed the rest of
    its payload under it (``read(lazy_chunks=...)``): never bytes of something else."""
    oldest_text = format_lsn(oldest or commit_lsn)
    return RetentionError(f"transaction {format_lsn(commit_lsn)} was dropped by the feed's retention "
                          "while it was being read; resume from 'earliest' (oldest retained "
                          f"transaction {oldest_text})", oldest=oldest_text)


def age_cutoff(hours: float | None, now_us: int) -> int | None:
    """commit_ts below which a transaction is older than ``hours`` (None: no age limit)."""
    if hours is None:
        return None
    if hours < 0:
        raise ValueError(f"retention hours must be >= 0, got {hours}")
    return now_us - int(hours * 3_600_000_000)


def idle_expiry(acked_us: int, max_idle_hours: float | None) -> int | None:
    """When a consumer that last acknowledged at ``acked_us`` expires (None: never); it does once
    ``age_cutoff(max_idle_hours, now)`` passes ``acked_us``."""
    return None if max_idle_hours is None else acked_us + int(max_idle_hours * 3_600_000_000)


def check_lsn(lsn: int, what: str) -> None:
    if not 0 <= lsn <= MAX_LSN:
        raise ValueError(f"{what} {lsn} is outside 0..2**63-1")


def check_consumer(name: str, cursor: Cursor) -> None:
    if not name:
        raise ValueError("a consumer needs a non-empty name")
    check_lsn(cursor.lsn, f"consumer {name!r} cursor lsn")


def check_new_consumer(name: str, cursor: Cursor, trimmed_lsn: int) -> None:
    """Raise RetentionError (410) when a new consumer's cursor names a position retention dropped."""
    if cursor < Cursor(trimmed_lsn):
        raise RetentionError(f"consumer {name!r} cannot start at {cursor}: the log no longer holds "
                             f"changes up to {Cursor(trimmed_lsn)}; acknowledge {Cursor(trimmed_lsn)} "
                             "or later", str(Cursor(trimmed_lsn)))


def overtaken(states: dict[str, ConsumerState], trimmed_lsn: int) -> list[str]:
    """Consumers whose cursor lies below what a (forced) trim removed, in name order."""
    return sorted(n for n, s in states.items() if s.cursor < Cursor(trimmed_lsn))


def log_expired(where: str, names: list[str], acked_before_us: int) -> None:
    if names:
        log.warning("%s: consumer(s) %s expired: no acknowledgement since before %s", where,
                    ", ".join(names), format_pg_time(acked_before_us))


def format_pg_time(us: int) -> str:
    """µs since 2000-01-01 -> ISO 8601 UTC."""
    return datetime.fromtimestamp(PG_EPOCH_UNIX + us / 1_000_000, tz=UTC).isoformat()


def check_batch(transactions: Sequence[StoredTransaction], confirmed_lsn: int | None) -> None:
    """Reject a batch no store may keep (before anything is written): LSNs out of range, a
    negative change count, commit LSNs not strictly ascending."""
    previous = -1
    for t in transactions:
        check_lsn(t.commit_lsn, "commit_lsn")
        if t.commit_lsn <= previous:
            raise ValueError(f"transactions must come in ascending commit_lsn order: "
                             f"{t.commit_lsn:X} follows {previous:X}")
        if t.change_count < 0:
            raise ValueError(f"transaction {t.commit_lsn:X} has a negative change_count")
        previous = t.commit_lsn
    if confirmed_lsn is not None:
        check_lsn(confirmed_lsn, "confirmed_lsn")


def split_bounds(from_lsn: int, to_lsn: int, parts: int, base: int, top: int,
                 first_reaching: Callable[[int], int]) -> list[int]:
    """The ``split_points`` answer, shared by the stores.

    ``base``/``top`` are the cumulative change counts just before and at the end of the range;
    ``first_reaching(n)`` is the commit_lsn of the first transaction whose cumulative count is
    >= n. Boundary i is the transaction that completes the i-th ``total/parts`` share.
    """
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    if to_lsn < from_lsn:
        raise ValueError(f"split range ends ({to_lsn:X}) before it starts ({from_lsn:X})")
    total = top - base
    inner: list[int] = []
    for i in range(1, parts):
        if total <= 0:
            break
        lsn = first_reaching(base + -(-total * i // parts))
        if from_lsn < lsn < to_lsn and (not inner or lsn > inner[-1]):
            inner.append(lsn)
    return [from_lsn, *inner, to_lsn] if to_lsn > from_lsn else [from_lsn]


_T = TypeVar("_T")


def stored_position(txn: StoredTransaction) -> tuple[int, int]:
    """``read_selection``'s key for StoredTransactions."""
    return txn.commit_lsn, txn.change_count


def read_selection(candidates: Iterable[_T], after: Cursor, max_changes: int,
                   key: Callable[[_T], tuple[int, int]]) -> list[_T]:
    """What ``read`` returns, from the candidates after ``after`` in commit order (``key``: a
    candidate's commit_lsn and change count): the transaction at ``after`` only while it has
    changes past ``after.seq``, then until they hold ``max_changes`` changes past the cursor."""
    out = []
    taken = 0
    for item in candidates:
        commit_lsn, left = key(item)
        if after.seq is not None and commit_lsn == after.lsn:
            left -= after.seq + 1
            if left <= 0:
                continue
        out.append(item)
        taken += left
        if taken >= max_changes:
            break
    return out
