"""PgChangeLog: one feed's change log in the PostgreSQL store, shared by every replica.

Layout mirrors the SQLite log (``service/pgfeed/changelog/sqlite.py``): a ``txn`` row per transaction
keyed by (feed, commit_lsn) with running totals, payload pieces of at most CHUNK_BYTES in
``chunk`` (cut on frame boundaries, written with binary COPY: a spilled 1 GB transaction goes in
bounded pieces, never as one parameter), schema frames apart and never trimmed, consumers, and a
``log_state`` row with head, confirmed position and totals.

Durability: an append is one transaction committed with the server's ``synchronous_commit``
before ``append`` returns, so capture confirms to the source only what the store holds.

Fencing: only the feed's lease holder writes. An append first COPYs its pieces (keyed by its
epoch, so they collide with no one's), then locks its ``log_state`` row FOR UPDATE and the lease
row FOR SHARE, checks that the lease still names this replica at this epoch and that the head did
not move, and only then writes the transaction rows. A takeover (which updates the lease row)
therefore waits for an append in flight, and every append after it sees the new epoch and fails
with LeaseLost. The lock is held for a few statements only: a holder paused inside them is cut
off by ``idle_in_transaction_session_timeout`` (see ``connections``).

Every commit that moves the head notifies the store's channel (``h <feed> <head>``), which the
replicas' listeners turn into wake-ups of their live readers (``store.PgStore``).
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from pgfeed.assembler.chunked import ChunkedPayload
from pgfeed.assembler.model import StoredTransaction, payload_pieces
from pgfeed.changelog.backfills import BackfillPart, BackfillRecord
from pgfeed.changelog.base import (
    CHUNK_BYTES,
    MAX_LSN,
    ChangeLogError,
    LeaseLost,
    LogStats,
    check_batch,
    check_lsn,
    read_selection,
    split_bounds,
    trimmed_while_read,
)
from pgfeed.pgstore.connections import ConnectionPool
from pgfeed.pgstore.retention import ConsumersAndRetention
from pgfeed.pgstore.schema import channel, table
from pgfeed_client._cursor import Cursor

__all__ = ["CHUNK_BYTES", "PgChangeLog"]

log = logging.getLogger("pgfeed.changelog")

_READ_BATCH = 256  # txn rows fetched at a time while a read looks for enough changes
_TXN_TYPES = ["text", "int8", "int8", "int8", "int8", "text", "int8", "int8", "int8", "int8", "int8",
              "int4", "int8"]  # the order of _insert_txns' columns
_SMALL_BATCH = 256  # transactions: up to this many small ones are appended with INSERTs, not COPY
_SMALL_PAYLOAD = 64 << 10
_CHUNK_TYPES = ["text", "int8", "int8", "int4", "bytea"]
_MAX_PIECES = (1 << 31) - 1  # chunk_count is an integer column


class _Torn(Exception):
    """A read outside a snapshot found pieces missing (a trim ran between its statements)."""


def _lsn(value: int) -> int:
    """Clamp a position to what a bigint holds (cursors may name LSNs up to 2**64-1)."""
    return max(-1, min(value, MAX_LSN))


class PgChangeLog(ConsumersAndRetention):
    """ChangeLog of feed ``feed`` in the store's ``schema``; writes need ``lead(epoch)`` first."""

    # Every read is a round trip to the store: callers on an event loop read it in a thread
    # (``FeedReader.page(block=False)`` says ReaderBusy).
    remote = True

    def __init__(self, pool: ConnectionPool, schema: str, feed: str, *, holder: str,
                 chunk_bytes: int = CHUNK_BYTES, owns_pool: bool = False) -> None:
        if chunk_bytes < 1:
            raise ValueError("chunk_bytes must be positive")
        self.feed = feed
        self.holder = holder
        self.chunk_bytes = chunk_bytes
        self._pool = pool
        self._owns_pool = owns_pool
        self._schema = schema
        self._channel = channel(schema)
        self._epoch: int | None = None
        self._head: int | None = None  # head after this instance's last append (while leading)
        self._closed = False
        self._write_lock = threading.Lock()
        t = {name: table(schema, name) for name in
             ("log_state", "lease", "txn", "chunk", "schema_frame", "consumer", "backfill",
              "backfill_part")}
        self._t = t
        # Schema frames (few, small) come with the transaction rows, in one statement.
        self._q_meta = sql.SQL(
            "SELECT commit_lsn, xid, end_lsn, commit_ts, origin, change_count, payload_bytes, epoch, "
            "chunk_count, CASE WHEN EXISTS (SELECT 1 FROM {f} f WHERE f.feed = t.feed AND "
            "f.commit_lsn = t.commit_lsn) THEN ARRAY(SELECT frame FROM {f} f WHERE f.feed = t.feed AND "
            "f.commit_lsn = t.commit_lsn ORDER BY n) END "
            "FROM {t} t WHERE feed = %s AND commit_lsn > %s AND commit_lsn <= %s "
            "ORDER BY commit_lsn LIMIT %s").format(t=t["txn"], f=t["schema_frame"])
        self._q_chunks = sql.SQL(
            "SELECT c.commit_lsn, c.data FROM {c} c JOIN {t} t ON t.feed = c.feed AND "
            "t.commit_lsn = c.commit_lsn AND t.epoch = c.epoch WHERE t.feed = %s AND "
            "t.commit_lsn BETWEEN %s AND %s AND t.chunk_count <= %s "
            "ORDER BY c.commit_lsn, c.piece").format(c=t["chunk"], t=t["txn"])
        # A payload read on demand (``read(lazy_chunks=...)``): its pieces' sizes (octet_length
        # does not fetch an out-of-line value), then one piece at a time.
        self._q_piece_sizes = sql.SQL(
            "SELECT octet_length(data) FROM {} WHERE feed = %s AND commit_lsn = %s AND epoch = %s "
            "ORDER BY piece").format(t["chunk"])
        self._q_piece = sql.SQL(
            "SELECT data FROM {} WHERE feed = %s AND commit_lsn = %s AND epoch = %s AND piece = %s"
        ).format(t["chunk"])
        with self._connection() as conn:
            conn.execute(sql.SQL("INSERT INTO {} (feed) VALUES (%s) ON CONFLICT DO NOTHING")
                         .format(t["log_state"]), (feed,))

    # -- connections and fencing -------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection]:
        if self._closed:
            raise ChangeLogError(f"change log of feed {self.feed!r} is closed")
        with self._pool.connection() as conn:
            yield conn

    @contextmanager
    def _snapshot(self) -> Iterator[psycopg.Cursor[Any]]:
        """A binary cursor inside one REPEATABLE READ read-only transaction: every query of a read
        sees the same committed appends and trims."""
        with self._connection() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                with conn.cursor(binary=True) as cur:
                    yield cur
            finally:
                if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.UNKNOWN:
                    conn.execute("COMMIT")

    def lead(self, epoch: int | None) -> None:
        """Write as the holder of the feed's lease at ``epoch`` (None: stop writing)."""
        self._epoch = epoch
        self._head = None

    @property
    def epoch(self) -> int | None:
        return self._epoch

    def _fenced(self, conn: psycopg.Connection, epoch: int | None) -> tuple[Any, ...]:
        """Lock this feed's log_state (FOR UPDATE) and lease (FOR SHARE) rows, and check the lease
        is still ours at ``epoch``; return the log_state row."""
        if epoch is None:
            raise LeaseLost(f"replica {self.holder!r} does not lead feed {self.feed!r}: it may not write")
        row = conn.execute(sql.SQL(
            "SELECT s.head, s.confirmed_lsn, s.txn_total, s.change_total, s.byte_total, l.holder, l.epoch "
            "FROM {s} s JOIN {l} l ON l.feed = s.feed WHERE s.feed = %s FOR UPDATE OF s FOR SHARE OF l")
            .format(s=self._t["log_state"], l=self._t["lease"]), (self.feed,)).fetchone()
        if row is None or row[5] != self.holder or row[6] != epoch:
            self._epoch = self._head = None
            holder = "nobody" if row is None else f"{row[5]!r} at epoch {row[6]}"
            raise LeaseLost(f"replica {self.holder!r} lost the lease of feed {self.feed!r} (epoch "
                            f"{epoch}); it is held by {holder}")
        return row

    # -- writing -----------------------------------------------------------------------------------

    def append(self, transactions: Sequence[StoredTransaction], confirmed_lsn: int | None = None, *,
               sync: bool = True) -> None:
        check_batch(transactions, confirmed_lsn)
        epoch = self._epoch
        with self._write_lock, self._connection() as conn, conn.transaction():
            head = self._head
            if head is None:  # the first append since this instance began to lead
                (head,) = conn.execute(sql.SQL("SELECT head FROM {} WHERE feed = %s")
                                       .format(self._t["log_state"]), (self.feed,)).fetchone() or (0,)
            fresh = [t for t in transactions if t.commit_lsn > head]  # replays are skipped
            # A live trickle of small commits goes in one INSERT per table (a round trip each);
            # bigger batches are streamed with COPY, spilled payloads piece by piece.
            small = (len(fresh) <= _SMALL_BATCH and all(
                type(t.payload) in (bytes, bytearray) and len(t.payload) <= min(_SMALL_PAYLOAD, self.chunk_bytes)
                for t in fresh))
            counts: list[int] = []
            if fresh and epoch is not None:
                counts = self._insert_chunks(conn, fresh, epoch) if small else self._copy_chunks(conn, fresh, epoch)
            state = self._fenced(conn, epoch)
            if state[0] != head:
                self._epoch = self._head = None
                raise LeaseLost(f"feed {self.feed!r}: another writer moved the head during an append")
            _, confirmed, txn_total, change_total, byte_total = state[:5]
            if fresh:
                rows = []
                schema_rows: list[tuple[str, int, int, bytes]] = []
                for t, n in zip(fresh, counts):
                    size = len(t.payload)
                    txn_total += 1
                    change_total += t.change_count
                    byte_total += size
                    rows.append((t.commit_lsn, t.xid, t.end_lsn, t.commit_ts, t.origin, t.change_count,
                                 size, txn_total, change_total, byte_total, n))
                    schema_rows.extend((self.feed, t.commit_lsn, i, f) for i, f in enumerate(t.schema_frames))
                self._insert_txns(conn, rows, epoch, small)  # type: ignore[arg-type]
                progress = [t.progress for t in fresh if t.progress is not None]
                if progress:  # a backfill chunk's progress, durable with the chunk
                    with conn.cursor() as cur:
                        cur.executemany(sql.SQL(
                            "UPDATE {} SET last_key = %s, rows = %s, chunks = %s, done = %s "
                            "WHERE feed = %s AND backfill_id = %s AND part = %s")
                            .format(self._t["backfill_part"]),
                            [(p.last_key, p.rows, p.chunks, p.done, self.feed, p.backfill_id, p.part)
                             for p in progress])
                if schema_rows:
                    with conn.cursor() as cur:
                        cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %b)")
                                        .format(self._t["schema_frame"]), schema_rows)
                head = fresh[-1].commit_lsn
            new_confirmed = confirmed if confirmed_lsn is None else max(confirmed, confirmed_lsn)
            if fresh or new_confirmed != confirmed:
                update = sql.SQL("UPDATE {} SET head = %s, confirmed_lsn = %s, txn_total = %s, change_total = %s, "
                                 "byte_total = %s WHERE feed = %s").format(self._t["log_state"])
                values: tuple[Any, ...] = (head, new_confirmed, txn_total, change_total, byte_total, self.feed)
                if fresh:  # one round trip: the update, and the notification sent at commit
                    update = sql.SQL("WITH u AS ({} RETURNING 1) SELECT pg_notify(%s, %s) FROM u").format(update)
                    values += (self._channel, f"h {self.feed} {head}")
                conn.execute(update, values)
        self._head = head

    def _copy_chunks(self, conn: psycopg.Connection, fresh: Sequence[StoredTransaction],
                     epoch: int) -> list[int]:
        """COPY the payload pieces of ``fresh`` (a spilled payload piece by piece, never whole);
        return each transaction's piece count."""
        counts = []
        with conn.cursor().copy(sql.SQL("COPY {} (feed, commit_lsn, epoch, piece, data) FROM STDIN "
                                        "(FORMAT BINARY)").format(self._t["chunk"])) as copy:
            copy.set_types(_CHUNK_TYPES)
            for t in fresh:
                n = 0
                for piece in payload_pieces(t.payload, self.chunk_bytes):
                    copy.write_row((self.feed, t.commit_lsn, epoch, n, piece))
                    n += 1
                counts.append(n)
        return counts

    def _insert_chunks(self, conn: psycopg.Connection, fresh: Sequence[StoredTransaction],
                       epoch: int) -> list[int]:
        """One piece per non-empty payload, in one INSERT (payloads at most chunk_bytes)."""
        with_data = [t for t in fresh if t.payload]
        if with_data:
            conn.execute(sql.SQL("INSERT INTO {} (feed, commit_lsn, epoch, piece, data) SELECT %s, x.l, %s, 0, x.d "
                                 "FROM unnest(%s::int8[], %s::bytea[]) AS x(l, d)").format(self._t["chunk"]),
                         (self.feed, epoch, [t.commit_lsn for t in with_data],
                          [bytes(t.payload) for t in with_data]))
        return [1 if t.payload else 0 for t in fresh]

    def _insert_txns(self, conn: psycopg.Connection, rows: list[tuple[Any, ...]], epoch: int,
                     small: bool) -> None:
        columns = sql.SQL("feed, commit_lsn, xid, end_lsn, commit_ts, origin, change_count, payload_bytes, "
                          "ordinal, cum_changes, cum_bytes, chunk_count, epoch")
        if small:
            conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT %s, x.*, %s FROM unnest(%s::int8[], %s::int8[], "
                                 "%s::int8[], %s::int8[], %s::text[], %s::int8[], %s::int8[], %s::int8[], "
                                 "%s::int8[], %s::int8[], %s::int4[]) AS x").format(self._t["txn"], columns),
                         (self.feed, epoch, *(list(col) for col in zip(*rows))))
            return
        with conn.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)")
                                .format(self._t["txn"], columns)) as copy:
            copy.set_types(_TXN_TYPES)
            for row in rows:
                copy.write_row((self.feed, *row, epoch))

    def save_backfill(self, record: BackfillRecord) -> None:
        with self._connection() as conn, conn.transaction():
            conn.execute(sql.SQL("INSERT INTO {} (feed, id, header) VALUES (%s, %s, %s) "
                                 "ON CONFLICT (feed, id) DO UPDATE SET header = excluded.header")
                         .format(self._t["backfill"]), (self.feed, record.id, record.header()))
            with conn.cursor() as cur:
                cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, "
                                        "%s, %s) ON CONFLICT DO NOTHING").format(self._t["backfill_part"]),
                                [(self.feed, record.id, p.part, p.table, p.lower, p.upper, p.estimate,
                                  p.last_key, p.rows, p.chunks, p.done) for p in record.parts])
            # A backfill started or cancelled on any replica: the leader's workers follow.
            conn.execute("SELECT pg_notify(%s, %s)", (self._channel, f"b {self.feed}"))

    def backfills(self) -> list[BackfillRecord]:
        with self._connection() as conn:
            headers = conn.execute(sql.SQL("SELECT id, header FROM {} WHERE feed = %s ORDER BY ordinal")
                                   .format(self._t["backfill"]), (self.feed,)).fetchall()
            parts: dict[str, list[BackfillPart]] = {}
            for row in conn.execute(sql.SQL(
                    "SELECT backfill_id, part, tbl, lower, upper, estimate, last_key, rows, chunks, "
                    "done FROM {} WHERE feed = %s ORDER BY backfill_id, part")
                    .format(self._t["backfill_part"]), (self.feed,)):
                parts.setdefault(row[0], []).append(BackfillPart(*row[1:]))
        return [BackfillRecord.from_header(header, tuple(parts.get(id_, ()))) for id_, header in headers]

    def set_confirmed_lsn(self, lsn: int) -> None:
        check_lsn(lsn, "confirmed lsn")
        epoch = self._epoch
        with self._write_lock, self._connection() as conn, conn.transaction():
            if self._fenced(conn, epoch)[1] < lsn:
                conn.execute(sql.SQL("UPDATE {} SET confirmed_lsn = %s WHERE feed = %s")
                             .format(self._t["log_state"]), (lsn, self.feed))

    # -- reading -----------------------------------------------------------------------------------

    def _state(self, column: str) -> int:
        with self._connection() as conn:
            row = conn.execute(sql.SQL("SELECT {} FROM {} WHERE feed = %s").format(
                sql.Identifier(column), self._t["log_state"]), (self.feed,)).fetchone()
        return 0 if row is None else int(row[0])

    def head(self) -> int:
        return self._state("head")

    def confirmed_lsn(self) -> int:
        return self._state("confirmed_lsn")

    def trimmed_lsn(self) -> int:
        return self._state("trimmed_lsn")

    def oldest(self) -> int:
        with self._connection() as conn:
            row = conn.execute(sql.SQL("SELECT min(commit_lsn) FROM {} WHERE feed = %s")
                               .format(self._t["txn"]), (self.feed,)).fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def read(self, after: Cursor, max_changes: int, upto_lsn: int | None = None, *,
             lazy_chunks: int | None = None) -> list[StoredTransaction]:
        if self._closed:
            raise ChangeLogError(f"change log of feed {self.feed!r} is closed")
        # Exclusive lower bound: the transaction at after.lsn is wanted while it has changes left.
        low = _lsn(after.lsn if after.seq is None else after.lsn - 1)
        high = MAX_LSN if upto_lsn is None else _lsn(upto_lsn)
        if max_changes <= 0 or high <= low:
            return []
        # Fast path: each statement on its own (autocommit), two round trips for a live tail. A
        # trim between them may remove pieces of what the first one listed: then again, in one
        # snapshot.
        with self._connection() as conn, conn.cursor(binary=True) as cur:
            try:
                return self._read(cur, after, max_changes, low, high, lazy_chunks)
            except _Torn:
                pass
        with self._snapshot() as cur:
            return self._read(cur, after, max_changes, low, high, lazy_chunks)

    def _read(self, cur: psycopg.Cursor[Any], after: Cursor, max_changes: int, low: int,
              high: int, lazy_chunks: int | None) -> list[StoredTransaction]:
        rows = read_selection(self._meta_rows(cur, low, high, max_changes), after, max_changes,
                              lambda row: (row[0], row[5]))
        return self._load(cur, rows, lazy_chunks) if rows else []

    def _meta_rows(self, cur: psycopg.Cursor[Any], low: int, high: int,
                   max_changes: int) -> Iterator[tuple[Any, ...]]:
        """txn rows with low < commit_lsn <= high in order, fetched a batch at a time."""
        batch = max(16, min(_READ_BATCH, max_changes + 1))
        while True:
            rows = cur.execute(self._q_meta, (self.feed, low, high, batch)).fetchall()
            yield from rows
            if len(rows) < batch:
                return
            low = rows[-1][0]
            batch = _READ_BATCH

    def _load(self, cur: psycopg.Cursor[Any], rows: list[tuple[Any, ...]],
              lazy_chunks: int | None = None) -> list[StoredTransaction]:
        """Payloads of ``rows`` (consecutive transactions), in one query; one of more than
        ``lazy_chunks`` pieces is read on demand (``_chunked``)."""
        first, last = rows[0][0], rows[-1][0]
        bound = _MAX_PIECES if lazy_chunks is None else lazy_chunks
        pieces: dict[int, list[bytes]] = defaultdict(list)
        for lsn, data in cur.execute(self._q_chunks, (self.feed, first, last, bound)):
            pieces[lsn].append(data)
        out = []
        for commit_lsn, xid, end_lsn, commit_ts, origin, count, size, epoch, n, frames in rows:
            if n > bound:
                out.append(StoredTransaction(xid, commit_lsn, end_lsn, commit_ts, origin, count,
                                             self._chunked(cur, commit_lsn, epoch, n),
                                             tuple(frames or ())))
                continue
            parts = pieces.get(commit_lsn, [])
            if len(parts) != n:
                self._torn(cur, commit_lsn, len(parts), n)
            if n == 1:
                payload: bytes | bytearray = parts[0]
            elif n == 0:
                payload = b""
            else:  # stays a bytearray: copying to bytes would double a big payload's peak memory
                payload = bytearray(size)
                pos = 0
                for part in parts:
                    payload[pos:pos + len(part)] = part
                    pos += len(part)
            out.append(StoredTransaction(xid, commit_lsn, end_lsn, commit_ts, origin, count, payload,
                                         tuple(frames or ())))
        return out

    def _torn(self, cur: psycopg.Cursor[Any], commit_lsn: int, found: int, n: int) -> None:
        if cur.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            raise _Torn  # not in a snapshot: trimmed meanwhile?
        raise ChangeLogError(f"change log of feed {self.feed!r}: transaction {commit_lsn:X} has "
                             f"{found} of its {n} payload pieces (the store is damaged)")

    def _chunked(self, cur: psycopg.Cursor[Any], commit_lsn: int, epoch: int,
                 n: int) -> ChunkedPayload:
        """The payload of transaction ``commit_lsn`` (written at ``epoch`` in ``n`` pieces) as
        pieces loaded when a reader reaches them, each in a query of its own; a piece gone
        meanwhile was trimmed (RetentionError), never replaced by other bytes (pieces are keyed
        by the writer's epoch and a trimmed position is never appended again)."""
        sizes = [size for (size,) in cur.execute(self._q_piece_sizes, (self.feed, commit_lsn, epoch))]
        if len(sizes) != n:
            self._torn(cur, commit_lsn, len(sizes), n)

        def load(i: int) -> bytes:
            with self._connection() as conn, conn.cursor(binary=True) as piece_cur:
                found = piece_cur.execute(self._q_piece, (self.feed, commit_lsn, epoch, i)).fetchone()
            if found is None:
                if self.trimmed_lsn() >= commit_lsn:
                    raise trimmed_while_read(commit_lsn, self.oldest())
                raise ChangeLogError(f"change log of feed {self.feed!r}: payload piece {i} of "
                                     f"transaction {commit_lsn:X} is missing (the store is damaged)")
            return bytes(found[0])

        return ChunkedPayload(sizes, load)

    def split_points(self, from_lsn: int, to_lsn: int, parts: int) -> list[int]:
        txn = self._t["txn"]
        with self._snapshot() as cur:
            first = cur.execute(sql.SQL("SELECT cum_changes - change_count FROM {} WHERE feed = %s AND "
                                        "commit_lsn > %s ORDER BY commit_lsn LIMIT 1").format(txn),
                                (self.feed, _lsn(from_lsn))).fetchone()
            last = cur.execute(sql.SQL("SELECT cum_changes FROM {} WHERE feed = %s AND commit_lsn <= %s "
                                       "ORDER BY commit_lsn DESC LIMIT 1").format(txn),
                               (self.feed, _lsn(to_lsn))).fetchone()
            base = first[0] if first else 0
            top = last[0] if last and first else base
            probe = sql.SQL("SELECT commit_lsn, cum_changes FROM {} WHERE feed = %s AND commit_lsn >= %s "
                            "ORDER BY commit_lsn LIMIT 1").format(txn)

            def first_reaching(n: int) -> int:
                # cum_changes grows with commit_lsn: bisect the LSN range with primary-key seeks.
                found, lo, hi = MAX_LSN, 0, MAX_LSN
                while lo < hi:
                    mid = (lo + hi) // 2
                    row = cur.execute(probe, (self.feed, mid)).fetchone()
                    if row is None:
                        hi = mid
                    elif row[1] >= n:
                        found, hi = int(row[0]), mid
                    else:
                        lo = int(row[0]) + 1
                return found

            return split_bounds(from_lsn, to_lsn, parts, base, top, first_reaching)

    def schema_history(self, after_lsn: int = 0) -> list[tuple[int, bytes]]:
        with self._connection() as conn, conn.cursor(binary=True) as cur:  # one statement: consistent
            return [(lsn, frame) for lsn, frame in cur.execute(sql.SQL(
                "SELECT commit_lsn, frame FROM {} WHERE feed = %s AND commit_lsn > %s ORDER BY commit_lsn, n")
                .format(self._t["schema_frame"]), (self.feed, _lsn(after_lsn)))]

    def stats(self) -> LogStats:
        txn = self._t["txn"]
        with self._snapshot() as cur:
            head, trimmed, forced = cur.execute(sql.SQL("SELECT head, trimmed_lsn, forced_trims FROM {} "
                                                        "WHERE feed = %s").format(self._t["log_state"]),
                                                (self.feed,)).fetchone() or (0, 0, 0)
            first = cur.execute(sql.SQL("SELECT commit_lsn, ordinal, cum_changes - change_count, "
                                        "cum_bytes - payload_bytes FROM {} WHERE feed = %s "
                                        "ORDER BY commit_lsn LIMIT 1").format(txn), (self.feed,)).fetchone()
            last = cur.execute(sql.SQL("SELECT ordinal, cum_changes, cum_bytes FROM {} WHERE feed = %s "
                                       "ORDER BY commit_lsn DESC LIMIT 1").format(txn), (self.feed,)).fetchone()
        if first is None or last is None:
            return LogStats(0, 0, 0, 0, head, trimmed, forced)
        return LogStats(last[0] - first[1] + 1, last[1] - first[2], last[2] - first[3], first[0], head,
                        trimmed, forced)

    def close(self) -> None:
        """Later calls fail with ChangeLogError; idempotent. The pool is shared unless owned."""
        self._closed = True
        self._epoch = None
        if self._owns_pool:
            self._pool.close()
