"""SqliteChangeLog: the default durable change log, one SQLite file per feed.

Durability: WAL journal with ``synchronous=FULL``. An append is one write transaction whose COMMIT
fsyncs the WAL once, so it is durable when ``append`` returns, and a crash at any point leaves the
whole batch or none of it (recovery ignores a WAL tail without a commit record). Measured with
``bench/changelog.py`` (bench/RESULTS.md): ~4.9M changes/s for 10k-change transactions and ~5,900
single-transaction appends/s. The alternatives lose: ``synchronous=NORMAL`` (~2.5x the single
appends/s) may forget the last commits on power loss, which would break "confirm to PostgreSQL
only what is durable"; a rollback journal (DELETE) writes big appends once instead of twice
(~+30%) but needs more fsyncs per commit (~4x fewer single appends/s) and blocks readers while
the writer commits. WAL gives each reader a stable snapshot alongside the writer, so a reader
never waits for capture and never sees part of a batch.

Layout: ``txn`` holds one small row per transaction keyed by commit_lsn (the rowid: paging is a
b-tree range scan that never touches payloads) with running totals of transactions, changes and
bytes, so ``split_points`` and ``stats`` are index lookups and retention reads only the rows it
drops. Payloads live in ``chunk`` rows of at most 4 MiB cut on frame boundaries (a single frame
larger than that is cut inside), numbered consecutively in commit order: a page of transactions
loads its payloads with one range query, a trim deletes a prefix of ids, a transaction past
SQLite's 1 GB blob limit still fits, and appending or reading a 100 MB transaction takes ~10-20 MB
beyond the payload itself (16 MiB chunks took 30-60 MB, at no gain in speed). Freed pages are
reused by later appends (the file does not shrink).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

from pgfeed.assembler.chunked import ChunkedPayload
from pgfeed.assembler.model import Payload, StoredTransaction, payload_pieces
from pgfeed.changelog.backfills import BackfillPart, BackfillRecord
from pgfeed.changelog.base import (
    CHUNK_BYTES,
    MAX_LSN,
    ChangeLogError,
    ConsumerState,
    LogStats,
    age_cutoff,
    check_batch,
    check_consumer,
    check_lsn,
    check_new_consumer,
    log_expired,
    overtaken,
    read_selection,
    release_bound,
    slowest,
    split_bounds,
    stored_position,
    trimmed_while_read,
)
from pgfeed.changelog.piece_files import PieceFiles, directory_of
from pgfeed.netorder import U32
from pgfeed.pgoutput.messages import pg_now_us
from pgfeed_client._cursor import Cursor

__all__ = ["CHUNK_BYTES", "SqliteChangeLog"]

log = logging.getLogger("pgfeed.changelog")

_SCHEMA_VERSION = 3  # 2: consumer.acked_at; 3: piece (see _MIGRATIONS)
_PAGE_SIZE = 16384  # big appends ~1.5x faster than with 4 KiB pages (fewer overflow pages); creation only
_BUSY_SECONDS = 30.0  # another process (e.g. `pgfeed` tooling) may hold the write lock briefly
_WAL_LIMIT = 64 << 20  # truncate the WAL back to this after a checkpoint
# Checkpoints run on a thread of their own (``_Checkpointer``) once this much was appended, or
# every CHECKPOINT_SECONDS after a write: SQLite's automatic checkpoint ran inside the COMMIT of
# whichever append crossed 1,000 WAL pages, copying pages and fsyncing the database file on the
# path of a live commit (p99 commit -> subscriber 93-126 ms with it, 36 ms without, at 2,000
# commits/s: bench/RESULTS.md).
_CHECKPOINT_BYTES = 16 << 20
_CHECKPOINT_SECONDS = 0.5
_MAX_IDLE_READERS = 8

# A backfill piece's payload is in a piece file (piece_files.py), not in chunk rows: its txn row
# has chunk_count 0 (and payload_bytes > 0), and this row says where. ``sizes``: the payload's
# parts as written (>I each, cut on frame boundaries like chunks), so it can be read a part at a
# time as chunks are.
_PIECE_TABLE = """CREATE TABLE piece (
        commit_lsn INTEGER PRIMARY KEY,
        file_no INTEGER NOT NULL,
        file_at INTEGER NOT NULL,
        sizes BLOB NOT NULL)"""

_SCHEMA = (
    """CREATE TABLE state (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        head INTEGER NOT NULL,          -- newest commit_lsn ever stored
        confirmed_lsn INTEGER NOT NULL,
        trimmed_lsn INTEGER NOT NULL,   -- newest commit_lsn ever removed
        forced_trims INTEGER NOT NULL,
        next_chunk INTEGER NOT NULL,    -- id of the next payload chunk (never reused)
        txn_total INTEGER NOT NULL,     -- running totals over everything ever appended
        change_total INTEGER NOT NULL,
        byte_total INTEGER NOT NULL)""",
    "INSERT INTO state VALUES (1, 0, 0, 0, 0, 1, 0, 0, 0)",
    """CREATE TABLE txn (
        commit_lsn INTEGER PRIMARY KEY,
        xid INTEGER NOT NULL,
        end_lsn INTEGER NOT NULL,
        commit_ts INTEGER NOT NULL,
        origin TEXT,
        change_count INTEGER NOT NULL,
        payload_bytes INTEGER NOT NULL,
        ordinal INTEGER NOT NULL,       -- running totals including this transaction
        cum_changes INTEGER NOT NULL,
        cum_bytes INTEGER NOT NULL,
        first_chunk INTEGER NOT NULL,   -- its chunks are first_chunk .. first_chunk+chunk_count-1
        chunk_count INTEGER NOT NULL)""",
    "CREATE TABLE chunk (id INTEGER PRIMARY KEY, data BLOB NOT NULL)",
    _PIECE_TABLE,
    """CREATE TABLE schema_frame (
        id INTEGER PRIMARY KEY,
        commit_lsn INTEGER NOT NULL,
        frame BLOB NOT NULL)""",
    "CREATE INDEX schema_frame_lsn ON schema_frame (commit_lsn)",
    """CREATE TABLE consumer (
        name TEXT PRIMARY KEY,
        lsn INTEGER NOT NULL,
        seq INTEGER,
        acked_at INTEGER NOT NULL)      -- last acknowledgement, µs since 2000-01-01
        WITHOUT ROWID""",
    f"PRAGMA user_version = {_SCHEMA_VERSION}",
)

# Backfills (service/pgfeed/backfill): a header per backfill, progress per part, written by ``append``
# in the same transaction as the chunk that made it.
_BACKFILL_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS backfill (
        id TEXT PRIMARY KEY,
        ordinal INTEGER NOT NULL,       -- creation order
        header TEXT NOT NULL)           -- BackfillRecord.header(): JSON""",
    """CREATE TABLE IF NOT EXISTS backfill_part (
        backfill_id TEXT NOT NULL,
        part INTEGER NOT NULL,
        tbl TEXT NOT NULL,
        lower TEXT,
        upper TEXT,
        estimate INTEGER NOT NULL,
        last_key TEXT,
        rows INTEGER NOT NULL,
        chunks INTEGER NOT NULL,
        done INTEGER NOT NULL,
        PRIMARY KEY (backfill_id, part)) WITHOUT ROWID""",
)

# Statements that bring a log of version ``v`` to ``v + 1``, run in the transaction that opens it.
# A consumer of a version-1 log never recorded when it acknowledged: it counts as acknowledging
# at the upgrade, so its idle expiry starts from there (``?`` is that time).
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE consumer ADD COLUMN acked_at INTEGER NOT NULL DEFAULT 0",
        "UPDATE consumer SET acked_at = ?"),
    2: (_PIECE_TABLE,),
}

_META = ("SELECT commit_lsn, xid, end_lsn, commit_ts, origin, change_count, payload_bytes, "
         "first_chunk, chunk_count FROM txn")

# The newest transactions this log appended are also kept in memory (see ``_Tail``), up to:
_TAIL_TRANSACTIONS = 512
_TAIL_BYTES = 8 << 20
_TAIL_TRANSACTION_BYTES = 256 << 10  # a bigger transaction empties the tail (read from the file)


@dataclass(frozen=True, slots=True)
class _Tail:
    """What this log instance last wrote, for the readers that follow the head (live tails,
    long-polls): they then read memory instead of four SQLite read transactions a wake-up
    (~60 µs of the event loop's time here).

    Every transaction with ``floor < commit_lsn <= head`` is in ``txns``, in commit order;
    ``trimmed`` is the state's trimmed_lsn. Only the instance that writes the log has a tail (a
    feed's log has one writer, its capture in this process); instances that only read it, such
    as tools in other processes, always read the file.
    """

    floor: int
    head: int
    trimmed: int
    txns: tuple[StoredTransaction, ...] = ()
    nbytes: int = 0

    def grown(self, fresh: Sequence[StoredTransaction]) -> _Tail:
        """The tail after ``fresh`` (newer than ``head``, in order) was appended."""
        if not fresh:
            return self
        head = fresh[-1].commit_lsn
        if any(type(t.payload) is not bytes or len(t.payload) > _TAIL_TRANSACTION_BYTES for t in fresh):
            return _Tail(head, head, self.trimmed)  # spilled or large: readers go to the file
        txns = self.txns + tuple(fresh)
        nbytes = self.nbytes + sum(len(t.payload) for t in fresh)
        drop = 0
        while len(txns) - drop > _TAIL_TRANSACTIONS or nbytes > _TAIL_BYTES:
            nbytes -= len(txns[drop].payload)
            drop += 1
        floor = txns[drop - 1].commit_lsn if drop else self.floor
        return _Tail(floor, head, self.trimmed, txns[drop:], nbytes)

    def trimmed_to(self, last_lsn: int) -> _Tail:
        """The tail after every transaction up to ``last_lsn`` was removed from the log."""
        keep = [t for t in self.txns if t.commit_lsn > last_lsn]
        return _Tail(max(self.floor, last_lsn), self.head, max(self.trimmed, last_lsn), tuple(keep),
                     sum(len(t.payload) for t in keep))

    def after(self, low: int, high: int) -> Iterator[StoredTransaction]:
        """Transactions with ``low < commit_lsn <= high`` (``low >= floor``)."""
        txns = self.txns
        for i in range(bisect_right(txns, low, key=_commit_lsn), len(txns)):
            if txns[i].commit_lsn > high:
                return
            yield txns[i]


class _Checkpointer:
    """Copies the WAL back into the database file (``PRAGMA wal_checkpoint(PASSIVE)``, which
    never blocks the writer or readers) on a thread and connection of its own: once
    _CHECKPOINT_BYTES were appended, or _CHECKPOINT_SECONDS after the first write since the last
    checkpoint; an idle log's thread sleeps until the next write. The WAL is fsync'd before its
    pages are copied, and restarts (truncated to _WAL_LIMIT) at the next append after a complete
    checkpoint."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], name: str) -> None:
        self._connect = connect
        self._written = threading.Event()  # something to checkpoint (or closing)
        self._due = threading.Event()  # checkpoint now (or closing)
        self._stop = False
        self._pending = 0  # bytes appended since the last checkpoint began
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def wrote(self, nbytes: int) -> None:
        self._pending += nbytes + 1
        # Set only when clear: Event.set takes a lock and notifies even when already set, and
        # this runs on every append's path.
        if not self._written.is_set():
            self._written.set()
        if self._pending >= _CHECKPOINT_BYTES and not self._due.is_set():
            self._due.set()

    def close(self) -> None:
        self._stop = True
        self._written.set()
        self._due.set()
        self._thread.join()

    def _run(self) -> None:
        conn = None
        try:
            while True:
                self._written.wait()
                self._due.wait(_CHECKPOINT_SECONDS)  # let a trickle of writes gather
                if self._stop:
                    return
                self._written.clear()
                self._due.clear()
                self._pending = 0
                try:
                    if conn is None:
                        conn = self._connect()
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except (sqlite3.Error, ChangeLogError) as exc:  # the next one tries again
                    log.warning("change log checkpoint failed: %s", exc)
        finally:
            if conn is not None:
                conn.close()


def _commit_lsn(txn: StoredTransaction) -> int:
    return txn.commit_lsn


def _lsn(value: int) -> int:
    """Clamp a position to what SQLite stores (cursors may name LSNs up to 2**64-1)."""
    return max(-1, min(value, MAX_LSN))


class SqliteChangeLog:
    """ChangeLog on a SQLite file: one writer connection behind a lock, a small pool of reader
    connections, each read in one snapshot."""

    def __init__(self, path: Path | str, *, chunk_bytes: int = CHUNK_BYTES) -> None:
        if chunk_bytes < 1:
            raise ValueError("chunk_bytes must be positive")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.chunk_bytes = chunk_bytes
        self._write_lock = threading.Lock()
        self._pool_lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._closed = False
        self._tail: _Tail | None = None  # once this instance has written (see _Tail)
        self._tail_next: _Tail | None = None  # the tail once the write transaction commits
        self._checkpointer: _Checkpointer | None = None  # started by the first write
        self._pieces = PieceFiles(directory_of(self.path))
        self._unused_pieces: tuple[int | None] | None = None  # set by a trim: files to remove
        self._writer: sqlite3.Connection | None = None
        self._writer = self._open()

    # -- connections -----------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=_BUSY_SECONDS, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise ChangeLogError(f"cannot open change log {self.path}: {exc}") from exc
        return conn

    def _open(self) -> sqlite3.Connection:
        conn = self._connect()
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
                conn.execute(f"PRAGMA page_size = {_PAGE_SIZE}")  # no-op once the file has pages
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if mode != "wal":
                    raise ChangeLogError(f"change log {self.path}: cannot use WAL mode (got {mode})")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute(f"PRAGMA journal_size_limit = {_WAL_LIMIT}")
            conn.execute("PRAGMA wal_autocheckpoint = 0")  # see _Checkpointer
            conn.execute("BEGIN IMMEDIATE")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                for statement in _SCHEMA:
                    conn.execute(statement)
                version = _SCHEMA_VERSION
            while version in _MIGRATIONS:
                for statement in _MIGRATIONS[version]:
                    conn.execute(statement, (pg_now_us(),) if "?" in statement else ())
                version += 1
                conn.execute(f"PRAGMA user_version = {version}")
                log.info("change log %s upgraded to schema version %d", self.path, version)
            if version != _SCHEMA_VERSION:
                raise ChangeLogError(f"change log {self.path} has schema version {version}; this "
                                     f"pgfeed understands version {_SCHEMA_VERSION}")
            # Logs created before 2026-11-23 carry an index on cum_changes: one more 16 KiB page
            # written by every append (a quarter of a one-row append's WAL), for split_points,
            # which searches by commit_lsn instead.
            conn.execute("DROP INDEX IF EXISTS txn_cum_changes")
            for statement in _BACKFILL_SCHEMA:  # added 2026-11-24; older logs get them here
                conn.execute(statement)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            conn.close()
            raise ChangeLogError(f"cannot open change log {self.path}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def _writing(self, nbytes: int = 0, sync: bool = True) -> Iterator[sqlite3.Connection]:
        """The writer connection inside BEGIN IMMEDIATE … COMMIT (rolled back on any error); once
        committed, the checkpoint thread hears of it (``nbytes``: about what it added to the WAL).
        ``sync=False``: that COMMIT does not fsync the WAL (``synchronous=NORMAL`` for it alone;
        the next synced COMMIT's fsync covers it, WAL frames being written in order)."""
        with self._write_lock:
            conn = self._writer
            if conn is None:
                raise ChangeLogError(f"change log {self.path} is closed")
            if self._checkpointer is None:  # the first write here (read-only instances never)
                self._checkpointer = _Checkpointer(self._connect, f"{self.path.name}-checkpoint")
            self._tail_next = None
            self._unused_pieces = None
            try:
                if not sync:
                    conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute("BEGIN IMMEDIATE")
                yield conn
                conn.execute("COMMIT")
                if not sync:
                    conn.execute("PRAGMA synchronous = FULL")
                if self._tail_next is not None:
                    self._tail, self._tail_next = self._tail_next, None
                if self._unused_pieces is not None:  # a trim let go of pieces: once committed
                    self._pieces.remove_unused(self._unused_pieces[0])
                self._checkpointer.wrote(nbytes)
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if not sync:
                    conn.execute("PRAGMA synchronous = FULL")
                # disk full, I/O error, lock timeout … (OSError: a piece file's write or sync)
                if isinstance(exc, (sqlite3.Error, OSError)):
                    raise ChangeLogError(f"change log {self.path}: {exc}") from exc
                raise

    @contextmanager
    def _reading(self, snapshot: bool = True) -> Iterator[sqlite3.Connection]:
        """A pooled reader connection; with ``snapshot`` its queries share one read transaction,
        so they see the same set of committed batches."""
        with self._pool_lock:
            if self._closed:
                raise ChangeLogError(f"change log {self.path} is closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._connect()
        try:
            if snapshot:
                conn.execute("BEGIN")
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")  # read-only: only ends the snapshot
            with self._pool_lock:
                keep = not self._closed and len(self._idle) < _MAX_IDLE_READERS
                if keep:
                    self._idle.append(conn)
            if not keep:
                conn.close()

    def _value(self, sql: str, default: int = 0) -> int:
        with self._reading(snapshot=False) as conn:
            row = conn.execute(sql).fetchone()
        return default if row is None or row[0] is None else int(row[0])

    # -- writing -----------------------------------------------------------------------------------

    def append(self, transactions: Sequence[StoredTransaction], confirmed_lsn: int | None = None, *,
               sync: bool = True) -> None:
        check_batch(transactions, confirmed_lsn)
        with self._writing(sum(len(t.payload) for t in transactions), sync=sync) as conn:
            head, confirmed, next_chunk, txn_total, change_total, byte_total, trimmed = conn.execute(
                "SELECT head, confirmed_lsn, next_chunk, txn_total, change_total, byte_total, "
                "trimmed_lsn FROM state").fetchone()
            fresh = [t for t in transactions if t.commit_lsn > head]  # replays are skipped
            tail = self._tail
            if tail is None or tail.head != head or tail.trimmed != trimmed:
                tail = _Tail(head, head, trimmed)  # the first write here (or the file changed)
            self._tail_next = tail.grown(fresh)
            txn_rows: list[tuple[Any, ...]] = []
            schema_rows: list[tuple[int, bytes]] = []
            insert_chunk = "INSERT INTO chunk (id, data) VALUES (?, ?)"
            pieces = False
            for t in fresh:
                size = len(t.payload)
                first = next_chunk
                if t.progress is not None and size:  # a backfill piece: in a piece file
                    number, at, sizes = self._pieces.write(payload_pieces(t.payload, self.chunk_bytes))
                    pieces = True
                    conn.execute("INSERT INTO piece VALUES (?, ?, ?, ?)",
                                 (t.commit_lsn, number, at, b"".join(map(U32.pack, sizes))))
                else:
                    # One row per chunk as it comes: a spilled payload is read from disk piece
                    # by piece and never held whole.
                    for piece in payload_pieces(t.payload, self.chunk_bytes):
                        conn.execute(insert_chunk, (next_chunk, piece))
                        next_chunk += 1
                txn_total += 1
                change_total += t.change_count
                byte_total += size
                txn_rows.append((t.commit_lsn, t.xid, t.end_lsn, t.commit_ts, t.origin, t.change_count,
                                 size, txn_total, change_total, byte_total, first, next_chunk - first))
                if t.schema_frames:
                    schema_rows.extend((t.commit_lsn, f) for f in t.schema_frames)
                if t.progress is not None:
                    p = t.progress
                    conn.execute("UPDATE backfill_part SET last_key = ?, rows = ?, chunks = ?, "
                                 "done = ? WHERE backfill_id = ? AND part = ?",
                                 (p.last_key, p.rows, p.chunks, int(p.done), p.backfill_id, p.part))
            if pieces:
                self._pieces.sync()  # before the rows naming them commit
            if fresh:
                conn.executemany("INSERT INTO txn VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", txn_rows)
                if schema_rows:
                    conn.executemany("INSERT INTO schema_frame (commit_lsn, frame) VALUES (?, ?)", schema_rows)
                head = fresh[-1].commit_lsn
            new_confirmed = confirmed if confirmed_lsn is None else max(confirmed, confirmed_lsn)
            if fresh or new_confirmed != confirmed:
                conn.execute("UPDATE state SET head = ?, confirmed_lsn = ?, next_chunk = ?, txn_total = ?, "
                             "change_total = ?, byte_total = ?",
                             (head, new_confirmed, next_chunk, txn_total, change_total, byte_total))

    def save_backfill(self, record: BackfillRecord) -> None:
        with self._writing() as conn:
            conn.execute("INSERT INTO backfill (id, ordinal, header) VALUES (?, "
                         "(SELECT COALESCE(MAX(ordinal), 0) + 1 FROM backfill), ?) "
                         "ON CONFLICT (id) DO UPDATE SET header = excluded.header",
                         (record.id, record.header()))
            conn.executemany(
                "INSERT OR IGNORE INTO backfill_part VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(record.id, p.part, p.table, p.lower, p.upper, p.estimate, p.last_key, p.rows,
                  p.chunks, int(p.done)) for p in record.parts])

    def backfills(self) -> list[BackfillRecord]:
        with self._reading() as conn:
            headers = conn.execute("SELECT id, header FROM backfill ORDER BY ordinal").fetchall()
            parts: dict[str, list[BackfillPart]] = {}
            for row in conn.execute("SELECT backfill_id, part, tbl, lower, upper, estimate, last_key, "
                                    "rows, chunks, done FROM backfill_part ORDER BY backfill_id, part"):
                parts.setdefault(row[0], []).append(
                    BackfillPart(row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8],
                                 bool(row[9])))
        return [BackfillRecord.from_header(header, tuple(parts.get(id_, ()))) for id_, header in headers]

    def set_confirmed_lsn(self, lsn: int) -> None:
        check_lsn(lsn, "confirmed lsn")
        with self._writing() as conn:
            conn.execute("UPDATE state SET confirmed_lsn = ? WHERE confirmed_lsn < ?", (lsn, lsn))

    def set_consumer(self, name: str, cursor: Cursor, acked_us: int | None = None) -> None:
        check_consumer(name, cursor)
        now = pg_now_us() if acked_us is None else acked_us
        with self._writing() as conn:
            row = conn.execute("SELECT lsn, seq, acked_at FROM consumer WHERE name = ?", (name,)).fetchone()
            if row is None:
                check_new_consumer(name, cursor, conn.execute("SELECT trimmed_lsn FROM state").fetchone()[0])
            else:
                kept = Cursor(row[0], row[1])
                cursor, now = max(kept, cursor), max(now, row[2])  # kept when equal
            conn.execute("INSERT OR REPLACE INTO consumer VALUES (?, ?, ?, ?)",
                         (name, cursor.lsn, cursor.seq, now))

    def delete_consumer(self, name: str) -> bool:
        with self._writing() as conn:
            return conn.execute("DELETE FROM consumer WHERE name = ?", (name,)).rowcount > 0

    def expire_consumers(self, acked_before_us: int) -> list[str]:
        with self._writing() as conn:
            names = [n for (n,) in conn.execute("SELECT name FROM consumer WHERE acked_at < ? ORDER BY name",
                                                (acked_before_us,))]
            conn.executemany("DELETE FROM consumer WHERE name = ?", [(n,) for n in names])
        log_expired(f"change log {self.path}", names, acked_before_us)
        return names

    def trim(self, before_lsn: int, *, force: bool = False) -> int:
        with self._writing() as conn:
            return self._trim(conn, before_lsn, force)

    def retain(self, hours: float | None, max_bytes: int | None, now_us: int) -> int:
        if max_bytes is not None and max_bytes < 0:
            raise ValueError(f"retention bytes must be >= 0, got {max_bytes}")
        cutoff = age_cutoff(hours, now_us)
        with self._writing() as conn:
            before = 0  # drop commit_lsn < before
            if cutoff is not None:  # the oldest run of transactions committed before the cutoff
                row = conn.execute("SELECT commit_lsn FROM txn WHERE commit_ts >= ? ORDER BY commit_lsn "
                                   "LIMIT 1", (cutoff,)).fetchone()
                before = MAX_LSN if row is None else row[0]
            if max_bytes is not None:
                last = conn.execute("SELECT cum_bytes FROM txn ORDER BY commit_lsn DESC LIMIT 1").fetchone()
                if last is not None:  # keep from the first transaction with <= max_bytes from it on
                    row = conn.execute("SELECT commit_lsn FROM txn WHERE cum_bytes - payload_bytes >= ? "
                                       "ORDER BY commit_lsn LIMIT 1", (last[0] - max_bytes,)).fetchone()
                    before = max(before, MAX_LSN if row is None else row[0])
            return self._trim(conn, before, force=False) if before else 0

    def _trim(self, conn: sqlite3.Connection, before_lsn: int, force: bool) -> int:
        bound = self._release_bound(conn)
        before_lsn = _lsn(before_lsn if force else min(before_lsn, bound))
        last = conn.execute("SELECT commit_lsn, ordinal FROM txn WHERE commit_lsn < ? "
                            "ORDER BY commit_lsn DESC LIMIT 1", (before_lsn,)).fetchone()
        if last is None:
            return 0
        last_lsn, last_ordinal = last
        first_ordinal = conn.execute("SELECT ordinal FROM txn ORDER BY commit_lsn LIMIT 1").fetchone()[0]
        conn.execute("DELETE FROM txn WHERE commit_lsn <= ?", (last_lsn,))
        keep = conn.execute("SELECT first_chunk FROM txn ORDER BY commit_lsn LIMIT 1").fetchone()
        conn.execute("DELETE FROM chunk WHERE id < coalesce(?, (SELECT next_chunk FROM state))",
                     (None if keep is None else keep[0],))
        conn.execute("DELETE FROM piece WHERE commit_lsn <= ?", (last_lsn,))
        self._unused_pieces = (conn.execute("SELECT min(file_no) FROM piece").fetchone()[0],)
        forced = force and last_lsn >= bound
        conn.execute("UPDATE state SET trimmed_lsn = max(trimmed_lsn, ?), forced_trims = forced_trims + ?",
                     (last_lsn, int(forced)))
        if self._tail is not None:
            self._tail_next = self._tail.trimmed_to(last_lsn)
        if forced:
            trimmed = conn.execute("SELECT trimmed_lsn FROM state").fetchone()[0]
            gone = overtaken(self._states(conn), trimmed)
            conn.executemany("DELETE FROM consumer WHERE name = ?", [(n,) for n in gone])
            log.warning("change log %s: forced trim dropped transactions up to %X that consumer(s) %s "
                        "had not acknowledged; they were removed", self.path, last_lsn, ", ".join(gone))
        return int(last_ordinal - first_ordinal + 1)

    @staticmethod
    def _release_bound(conn: sqlite3.Connection) -> int:
        consumer = slowest(Cursor(lsn, seq) for lsn, seq in conn.execute("SELECT lsn, seq FROM consumer"))
        if consumer is None:
            return release_bound(None, None)
        row = conn.execute("SELECT change_count FROM txn WHERE commit_lsn = ?", (consumer.lsn,)).fetchone()
        return release_bound(consumer, None if row is None else row[0])

    # -- reading -----------------------------------------------------------------------------------

    def _live_tail(self) -> _Tail | None:
        tail = self._tail
        if tail is not None and self._closed:
            raise ChangeLogError(f"change log {self.path} is closed")
        return tail

    def head(self) -> int:
        tail = self._live_tail()
        return tail.head if tail is not None else self._value("SELECT head FROM state")

    def confirmed_lsn(self) -> int:
        return self._value("SELECT confirmed_lsn FROM state")

    def trimmed_lsn(self) -> int:
        tail = self._live_tail()
        return tail.trimmed if tail is not None else self._value("SELECT trimmed_lsn FROM state")

    def oldest(self) -> int:
        return self._value("SELECT min(commit_lsn) FROM txn")

    def read(self, after: Cursor, max_changes: int, upto_lsn: int | None = None, *,
             lazy_chunks: int | None = None) -> list[StoredTransaction]:
        if max_changes <= 0:
            return []
        # Exclusive lower bound: the transaction at after.lsn is wanted while it has changes left.
        low = _lsn(after.lsn if after.seq is None else after.lsn - 1)
        high = MAX_LSN if upto_lsn is None else _lsn(upto_lsn)
        if high <= low:
            return []
        tail = self._live_tail()
        if tail is not None and low >= tail.floor:  # small payloads only: none is chunked
            return read_selection(tail.after(low, high), after, max_changes, stored_position)
        with self._reading() as conn:
            cursor = conn.execute(_META + " WHERE commit_lsn > ? AND commit_lsn <= ? ORDER BY commit_lsn",
                                  (low, high))
            try:
                rows = read_selection(cursor, after, max_changes, lambda row: (row[0], row[5]))
            finally:
                cursor.close()
            return self._load(conn, rows, lazy_chunks) if rows else []

    def _load(self, conn: sqlite3.Connection, rows: list[tuple[Any, ...]],
              lazy_chunks: int | None = None) -> list[StoredTransaction]:
        """Payloads and schema frames of ``rows`` (consecutive transactions): one query for the
        schema frames and one for the chunks of each stretch of payloads read whole; a payload
        of more than ``lazy_chunks`` chunks is read on demand (``_chunked``)."""
        frames: dict[int, list[bytes]] = defaultdict(list)
        for lsn, frame in conn.execute("SELECT commit_lsn, frame FROM schema_frame WHERE commit_lsn "
                                       "BETWEEN ? AND ? ORDER BY id", (rows[0][0], rows[-1][0])):
            frames[lsn].append(frame)
        pieces: dict[int, tuple[int, int, bytes]] = {}
        if any(row[8] == 0 and row[6] for row in rows):
            pieces = {lsn: (number, at, sizes) for lsn, number, at, sizes in conn.execute(
                "SELECT commit_lsn, file_no, file_at, sizes FROM piece WHERE commit_lsn BETWEEN ? AND ?",
                (rows[0][0], rows[-1][0]))}
        payloads: list[Payload] = []
        i = 0
        while i < len(rows):
            if lazy_chunks is not None and rows[i][8] > lazy_chunks:
                payloads.append(self._chunked(conn, rows[i]))
                i += 1
                continue
            j = i
            while j < len(rows) and (lazy_chunks is None or rows[j][8] <= lazy_chunks):
                j += 1
            first_id, last_id = rows[i][7], rows[j - 1][7] + rows[j - 1][8] - 1
            chunks = conn.execute("SELECT id, data FROM chunk WHERE id BETWEEN ? AND ? ORDER BY id",
                                  (first_id, last_id))
            try:
                # A multi-chunk payload stays the bytearray it was assembled in: copying it to
                # bytes would double a 100 MB transaction's peak memory.
                payloads.extend(self._payload(chunks, row[0], row[7], row[8], row[6]) if row[8] else
                                self._piece(row, pieces, lazy_chunks) if row[6] else b""
                                for row in rows[i:j])
            finally:
                chunks.close()
            i = j
        return [StoredTransaction(xid, commit_lsn, end_lsn, commit_ts, origin, count, payload,
                                  tuple(frames.get(commit_lsn, ())))
                for (commit_lsn, xid, end_lsn, commit_ts, origin, count, _size, _first, _n), payload
                in zip(rows, payloads, strict=True)]

    def _piece(self, row: tuple[Any, ...], pieces: dict[int, tuple[int, int, bytes]],
               lazy_chunks: int | None) -> Payload:
        """The payload of ``row`` (a ``txn`` row of a backfill piece) from its piece file: whole,
        or part by part when it has more than ``lazy_chunks`` parts (as ``_chunked``)."""
        commit_lsn = row[0]
        where = pieces.get(commit_lsn)
        if where is None:
            raise ChangeLogError(f"change log {self.path}: transaction {commit_lsn:X} has no payload "
                                 "chunks and no piece (the file is damaged)")
        number, at, packed = where
        sizes = [size for (size,) in U32.iter_unpack(packed)]

        def load(offset: int, size: int) -> bytes:
            try:
                return self._pieces.read(number, offset, size)
            except FileNotFoundError:
                if self.trimmed_lsn() >= commit_lsn:
                    raise trimmed_while_read(commit_lsn, self.oldest()) from None
                raise ChangeLogError(f"change log {self.path}: the piece file of transaction "
                                     f"{commit_lsn:X} is missing") from None
            except ValueError as exc:
                raise ChangeLogError(f"change log {self.path}: transaction {commit_lsn:X}: {exc}") from None

        if lazy_chunks is None or len(sizes) <= lazy_chunks:
            return load(at, sum(sizes))
        starts = list(accumulate(sizes, initial=at))
        return ChunkedPayload(sizes, lambda i: load(starts[i], sizes[i]))

    def _chunked(self, conn: sqlite3.Connection, row: tuple[Any, ...]) -> ChunkedPayload:
        """The payload of ``row`` (a ``txn`` row) as chunks loaded when a reader reaches them,
        each in a read of its own: chunk ids are never reused, so a chunk found is this
        payload's, and one missing was trimmed (RetentionError) or the file is damaged."""
        commit_lsn, first, n = row[0], row[7], row[8]
        sizes = [size for (size,) in conn.execute(  # length() does not read a blob's pages
            "SELECT length(data) FROM chunk WHERE id BETWEEN ? AND ? ORDER BY id",
            (first, first + n - 1))]
        if len(sizes) != n:
            raise ChangeLogError(f"change log {self.path}: transaction {commit_lsn:X} has {len(sizes)} "
                                 f"of its {n} payload chunks (the file is damaged)")

        def load(i: int) -> bytes:
            with self._reading(snapshot=False) as reader:
                found = reader.execute("SELECT data FROM chunk WHERE id = ?", (first + i,)).fetchone()
            if found is None:
                if self.trimmed_lsn() >= commit_lsn:
                    raise trimmed_while_read(commit_lsn, self.oldest())
                raise ChangeLogError(f"change log {self.path}: payload chunk {first + i} of transaction "
                                     f"{commit_lsn:X} is missing (the file is damaged)")
            return found[0]  # type: ignore[no-any-return]

        return ChunkedPayload(sizes, load)

    def _payload(self, chunks: sqlite3.Cursor, commit_lsn: int, first: int, n: int,
                 size: int) -> bytes | bytearray:
        buf = bytearray(size) if n > 1 else None
        pos = 0
        for expected in range(first, first + n):
            row = chunks.fetchone()
            if row is None or row[0] != expected:
                raise ChangeLogError(f"change log {self.path}: payload chunk {expected} of transaction "
                                     f"{commit_lsn:X} is missing (the file is damaged)")
            data = row[1]
            if buf is None:
                return data  # type: ignore[no-any-return]
            buf[pos:pos + len(data)] = data
            pos += len(data)
        return buf if buf is not None else b""

    def split_points(self, from_lsn: int, to_lsn: int, parts: int) -> list[int]:
        with self._reading() as conn:
            first = conn.execute("SELECT cum_changes - change_count FROM txn WHERE commit_lsn > ? "
                                 "ORDER BY commit_lsn LIMIT 1", (_lsn(from_lsn),)).fetchone()
            last = conn.execute("SELECT cum_changes FROM txn WHERE commit_lsn <= ? "
                                "ORDER BY commit_lsn DESC LIMIT 1", (_lsn(to_lsn),)).fetchone()
            base = first[0] if first else 0
            top = last[0] if last and first else base

            def first_reaching(n: int) -> int:
                # The first transaction whose running total reaches n: cum_changes grows with
                # commit_lsn, so bisect the LSN range with primary-key seeks (<= ~64 of them).
                found, lo, hi = MAX_LSN, 0, MAX_LSN
                while lo < hi:
                    mid = (lo + hi) // 2
                    row = conn.execute("SELECT commit_lsn, cum_changes FROM txn WHERE commit_lsn >= ? "
                                       "ORDER BY commit_lsn LIMIT 1", (mid,)).fetchone()
                    if row is None:
                        hi = mid
                    elif row[1] >= n:
                        found, hi = int(row[0]), mid  # nothing lies between mid and row[0]
                    else:
                        lo = int(row[0]) + 1
                return found

            return split_bounds(from_lsn, to_lsn, parts, base, top, first_reaching)

    def schema_history(self, after_lsn: int = 0) -> list[tuple[int, bytes]]:
        tail = self._live_tail()
        if tail is not None and after_lsn >= tail.floor:
            return [(t.commit_lsn, f) for t in tail.after(after_lsn, MAX_LSN) for f in t.schema_frames]
        with self._reading(snapshot=False) as conn:
            return [(lsn, frame) for lsn, frame in conn.execute(
                "SELECT commit_lsn, frame FROM schema_frame WHERE commit_lsn > ? ORDER BY id",
                (_lsn(after_lsn),))]

    def get_consumer(self, name: str) -> Cursor | None:
        with self._reading(snapshot=False) as conn:
            row = conn.execute("SELECT lsn, seq FROM consumer WHERE name = ?", (name,)).fetchone()
        return None if row is None else Cursor(row[0], row[1])

    def consumers(self) -> dict[str, Cursor]:
        return {name: state.cursor for name, state in self.consumer_states().items()}

    def consumer_states(self) -> dict[str, ConsumerState]:
        with self._reading(snapshot=False) as conn:
            return self._states(conn)

    @staticmethod
    def _states(conn: sqlite3.Connection) -> dict[str, ConsumerState]:
        return {name: ConsumerState(Cursor(lsn, seq), acked) for name, lsn, seq, acked in
                conn.execute("SELECT name, lsn, seq, acked_at FROM consumer ORDER BY name")}

    def stats(self) -> LogStats:
        with self._reading() as conn:
            head, trimmed, forced = conn.execute(
                "SELECT head, trimmed_lsn, forced_trims FROM state").fetchone()
            first = conn.execute("SELECT commit_lsn, ordinal, cum_changes - change_count, "
                                 "cum_bytes - payload_bytes FROM txn ORDER BY commit_lsn LIMIT 1").fetchone()
            last = conn.execute("SELECT ordinal, cum_changes, cum_bytes FROM txn "
                                "ORDER BY commit_lsn DESC LIMIT 1").fetchone()
        if first is None or last is None:
            return LogStats(0, 0, 0, 0, head, trimmed, forced)
        return LogStats(last[0] - first[1] + 1, last[1] - first[2], last[2] - first[3], first[0], head,
                        trimmed, forced)

    def close(self) -> None:
        """Close every connection; idempotent. Reads still running finish on their own connection."""
        with self._pool_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        with self._write_lock:
            writer, self._writer = self._writer, None
            checkpointer, self._checkpointer = self._checkpointer, None
        if checkpointer is not None:
            checkpointer.close()
        if writer is not None:
            writer.close()
        self._pieces.close()
