"""A feed's fill index for ``toast=reselect``: the fill rule applied to its log once, in log order.

``decoding.toastfill`` decides what an unchanged TOAST column of the change at position P is from
the log up to P. This module runs that rule over the log exactly once per position and keeps the
answers, so every reader at P gets the same value whatever it or anyone else read before, and
after a restart (docs/design.md "Unchanged TOAST"). It is built lazily: a reader about to decode
the transaction at commit_lsn C first brings the index up to C.

One SQLite file per feed (``toast.db`` beside the log, so its writes never wait for capture's):

- ``state``: ``watermark``, the commit_lsn up to which every transaction was applied;
- ``image``: the newest image of each row, ``(relation, key digest) -> {column: [oid, text,
  source lsn, source seq]}``;
- ``fill``: ``(commit_lsn, seq, column) -> source position`` for each filled column;
- ``value``: ``(source position, column) -> text``: one copy of a value however many changes
  are filled from it.

A batch of transactions, its images, fills and the new watermark are one SQLite transaction, so a
crash leaves the index at a batch boundary and the next read goes on from there. Transactions
trimmed from the log before the index applied them are a gap: every image is dropped then (a
later fill is unknown rather than taken from an image the gap may have outdated).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

import orjson

from pgfeed.assembler.model import StoredTransaction
from pgfeed.changelog.base import ChangeLog
from pgfeed.decoding.changes import TransactionDecoder
from pgfeed.decoding.relations import RelationCatalog
from pgfeed.decoding.toastfill import (
    Held,
    Image,
    apply_relation,
    apply_row,
    apply_truncate,
)
from pgfeed.pgoutput.decode import decode
from pgfeed.pgoutput.messages import (
    TAG_RELATION,
    TAG_TRUNCATE,
    DeleteMessage,
    InsertMessage,
    TruncateMessage,
    UpdateMessage,
)
from pgfeed_client._cursor import Cursor

__all__ = ["INDEX_FILE", "ToastIndex"]

INDEX_FILE = "toast.db"  # a feed's index file, in the directory its store gives it

_SCHEMA = (
    ("CREATE TABLE IF NOT EXISTS state (id INTEGER PRIMARY KEY CHECK (id = 1), "
     "watermark INTEGER NOT NULL, forgotten INTEGER NOT NULL)"),
    "INSERT OR IGNORE INTO state VALUES (1, 0, 0)",
    ("CREATE TABLE IF NOT EXISTS image (rel INTEGER NOT NULL, ident BLOB NOT NULL, "
     "data BLOB NOT NULL, PRIMARY KEY (rel, ident)) WITHOUT ROWID"),
    ("CREATE TABLE IF NOT EXISTS fill (commit_lsn INTEGER NOT NULL, seq INTEGER NOT NULL, "
     "name TEXT NOT NULL, src_lsn INTEGER NOT NULL, src_seq INTEGER NOT NULL, "
     "PRIMARY KEY (commit_lsn, seq, name)) WITHOUT ROWID"),
    "CREATE INDEX IF NOT EXISTS fill_source ON fill (src_lsn, src_seq, name)",
    ("CREATE TABLE IF NOT EXISTS value (src_lsn INTEGER NOT NULL, src_seq INTEGER NOT NULL, "
     "name TEXT NOT NULL, oid INTEGER NOT NULL, text TEXT, "
     "PRIMARY KEY (src_lsn, src_seq, name)) WITHOUT ROWID"),
)
_BATCH_CHANGES = 5_000  # changes applied per SQLite transaction
_BUSY_SECONDS = 30


class _Images:
    """The ``ImageStore`` of one batch: reads through to ``image``, writes kept until ``flush``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.pending: dict[tuple[int, bytes], Image | None] = {}

    def get(self, relation_id: int, ident: bytes) -> Image | None:
        key = (relation_id, ident)
        if key in self.pending:
            return self.pending[key]
        row = self.conn.execute("SELECT data FROM image WHERE rel = ? AND ident = ?", key).fetchone()
        if row is None:
            return None
        return {name: tuple(held) for name, held in orjson.loads(row[0]).items()}

    def put(self, relation_id: int, ident: bytes, image: Image) -> None:
        self.pending[(relation_id, ident)] = image

    def drop(self, relation_id: int, ident: bytes) -> None:
        self.pending[(relation_id, ident)] = None

    def drop_relations(self, relation_ids: Iterable[int]) -> None:
        gone = set(relation_ids)
        self.flush()
        self.conn.executemany("DELETE FROM image WHERE rel = ?", [(r,) for r in gone])

    def drop_all(self) -> None:
        self.pending.clear()
        self.conn.execute("DELETE FROM image")

    def flush(self) -> None:
        puts = [(r, i, orjson.dumps(img)) for (r, i), img in self.pending.items()
                if img is not None]
        drops = [(r, i) for (r, i), img in self.pending.items() if img is None]
        self.conn.executemany("DELETE FROM image WHERE rel = ? AND ident = ?", drops)
        self.conn.executemany("INSERT OR REPLACE INTO image VALUES (?, ?, ?)", puts)
        self.pending.clear()


class ToastIndex:
    """The fill index of one feed (thread-safe; several processes may share the file: each batch
    re-reads the watermark inside its write transaction, and the rule's answers are the same
    whoever applies them)."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        self._lock = threading.Lock()  # the writer connection: one batch at a time
        self._conn = self._connect()
        if self.path != ":memory:":
            self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")  # an answer once given survives a crash
        for statement in _SCHEMA:
            self._conn.execute(statement)
        # Lookups use a connection of their own (WAL: they never wait for a batch being applied);
        # an in-memory index has one connection, shared under the lock.
        self._read_lock = threading.Lock() if self.path != ":memory:" else self._lock
        self._read = self._connect() if self.path != ":memory:" else self._conn
        self.watermark = self._state()[0]
        self._cached: tuple[int, dict[int, dict[str, tuple[int, str | None]]]] | None = None

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=_BUSY_SECONDS, isolation_level=None,
                               check_same_thread=False)

    def _state(self) -> tuple[int, int]:
        row = self._conn.execute("SELECT watermark, forgotten FROM state").fetchone()
        return int(row[0]), int(row[1])

    def close(self) -> None:
        with self._lock, self._read_lock:
            self._conn.close()
            self._read.close()

    # -- reading ---------------------------------------------------------------------------------
    def fills(self, commit_lsn: int, seq: int) -> Mapping[str, tuple[int, str | None]]:
        """What the index filled at change ``(commit_lsn, seq)``: ``{column: (value oid, text)}``.
        The caller has brought the index up to ``commit_lsn`` (``advance``)."""
        cached = self._cached
        if cached is None or cached[0] != commit_lsn:
            by_seq: dict[int, dict[str, tuple[int, str | None]]] = {}
            with self._read_lock:
                rows = self._read.execute(
                    "SELECT f.seq, f.name, v.oid, v.text FROM fill f JOIN value v ON "
                    "v.src_lsn = f.src_lsn AND v.src_seq = f.src_seq AND v.name = f.name "
                    "WHERE f.commit_lsn = ?", (commit_lsn,)).fetchall()
            for s, name, oid, text in rows:
                by_seq.setdefault(s, {})[name] = (oid, text)
            cached = self._cached = (commit_lsn, by_seq)
        return cached[1].get(seq, {})

    # -- building --------------------------------------------------------------------------------
    def advance(self, changelog: ChangeLog, catalog: RelationCatalog, upto: int, *,
                block: bool = True) -> bool:
        """Apply every transaction of ``changelog`` with commit_lsn <= ``upto`` not applied yet.
        With ``block=False`` returns False at once when another thread is applying some."""
        if upto <= self.watermark:
            return True
        if not self._lock.acquire(blocking=block):
            return False
        try:
            decoder = TransactionDecoder(catalog)
            while self.watermark < upto:
                if not self._batch(changelog, decoder, upto):
                    break
        finally:
            self._lock.release()
        return True

    def _batch(self, changelog: ChangeLog, decoder: TransactionDecoder, upto: int) -> bool:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            watermark, forgotten = self._state()
            if watermark >= upto:
                conn.execute("COMMIT")
                self.watermark = watermark
                return False
            batch = changelog.read(Cursor(watermark), _BATCH_CHANGES, upto)
            images = _Images(conn)
            trimmed = changelog.trimmed_lsn()
            # The transaction at ``trimmed`` is gone: if it came after the watermark and the
            # batch (read before or after the trim) does not hold it, it was never applied.
            if trimmed > watermark and (not batch or batch[0].commit_lsn > trimmed):
                images.drop_all()
            fills: list[tuple[int, int, str, int, int]] = []
            values: dict[tuple[int, int, str], tuple[int, str | None]] = {}
            for stored in batch:
                self._apply(stored, decoder, images, fills, values)
            images.flush()
            conn.executemany("INSERT OR IGNORE INTO value VALUES (?, ?, ?, ?, ?)",
                             [(*k, *v) for k, v in values.items()])
            conn.executemany("INSERT OR REPLACE INTO fill VALUES (?, ?, ?, ?, ?)", fills)
            new_mark = batch[-1].commit_lsn if batch else max(watermark, min(upto, changelog.head()))
            if trimmed > forgotten:
                # Fills of positions no reader can ask for any more: those trimmed by the trim
                # seen before this one (a reader that loaded a transaction just before a trim
                # still finds its fills).
                conn.execute("DELETE FROM fill WHERE commit_lsn <= ?", (forgotten,))
                conn.execute("DELETE FROM value WHERE NOT EXISTS (SELECT 1 FROM fill f WHERE "
                             "f.src_lsn = value.src_lsn AND f.src_seq = value.src_seq AND "
                             "f.name = value.name)")
            conn.execute("UPDATE state SET watermark = ?, forgotten = max(forgotten, ?)",
                         (max(new_mark, watermark), trimmed))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._cached = None
        moved = max(new_mark, watermark) > self.watermark
        self.watermark = max(new_mark, watermark)
        return moved and bool(batch)

    @staticmethod
    def _apply(stored: StoredTransaction, decoder: TransactionDecoder, images: _Images,
               fills: list[tuple[int, int, str, int, int]],
               values: dict[tuple[int, int, str], tuple[int, str | None]]) -> None:
        commit_lsn = stored.commit_lsn
        for seq, tag, buf, schema, previous in decoder.wire_changes(stored):
            if tag == TAG_RELATION:
                assert schema is not None
                apply_relation(images, previous, schema)
            elif tag == TAG_TRUNCATE:
                msg = decode(buf)
                assert isinstance(msg, TruncateMessage)
                apply_truncate(images, msg.relation_ids)
            elif schema is not None:
                row = decode(buf)
                assert isinstance(row, (InsertMessage, UpdateMessage, DeleteMessage))
                filled: dict[str, Held] = apply_row(images, (commit_lsn, seq), row, schema)
                for name, (oid, text, src_lsn, src_seq) in filled.items():
                    fills.append((commit_lsn, seq, name, src_lsn, src_seq))
                    values[(src_lsn, src_seq, name)] = (oid, text)
