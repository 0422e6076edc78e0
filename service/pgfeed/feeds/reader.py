"""Reading a feed by cursor: the one paging algorithm behind HTTP pages, Arrow pages and gRPC streams.

Decode happens here, on read (capture stores wire bytes, see docs/design.md). A page scans at most
``limit`` changes past the cursor; table/op filters drop changes from the answer but never from
the scan, so ``next`` always advances past what was skipped and a reader resuming from it sees no
gap and no duplicate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from pgfeed.assembler.chunked import ChunkedPayload, segments
from pgfeed.assembler.framing import walk
from pgfeed.assembler.model import BACKFILL_ORIGIN, StoredTransaction, backfill_id_of
from pgfeed.changelog.base import ChangeLog
from pgfeed.decoding.changes import DEFAULT_PLACEHOLDER, ToastMode, TransactionDecoder
from pgfeed.decoding.model import Op, Transaction
from pgfeed.decoding.relations import RelationCatalog, RelationSchema, served_schema
from pgfeed.decoding.runs import Read, change_total
from pgfeed.errors import CursorAhead, RetentionError
from pgfeed.feeds.toastindex import ToastIndex
from pgfeed.pgoutput.decode import decode
from pgfeed.pgoutput.messages import TAG_RELATION, TAG_TYPE, RelationMessage
from pgfeed_client._cursor import EARLIEST, Cursor, format_lsn

__all__ = ["FeedReader", "Page", "ReaderBusy", "parse_ops"]

_OPS = {op.value: op for op in Op}
# A stored payload of more chunks than this (each at most ``changelog.base.CHUNK_BYTES``) is
# read on demand, a chunk at a time; smaller ones are read whole, in the page's one query.
LAZY_CHUNKS = 1


def parse_ops(names: Collection[str] | None) -> frozenset[Op] | None:
    """``["insert", "delete"]`` -> ops; None or empty means every op. Unknown names raise ValueError."""
    if not names:
        return None
    unknown = [n for n in names if n not in _OPS]
    if unknown:
        raise ValueError(f"unknown op {unknown[0]!r}: expected some of {', '.join(_OPS)}")
    return frozenset(_OPS[n] for n in names)


class ReaderBusy(Exception):
    """``page(..., block=False)`` found another reader of the feed decoding."""


@dataclass(slots=True)
class Page:
    """Decoded transactions (sliced when a page ends inside one, empty ones left out), the cursor
    after everything scanned, the log's head and whether the log holds more past ``next``.
    ``passed`` is the last transaction this page read whole and the filters left out entirely,
    when none of ``transactions`` comes after it (a stream can report that it got that far).
    Row changes come as runs of wire-form frames (``decoding.runs.RowRun``), loaded on demand by
    the encoders (``TransactionDecoder.decode``)."""

    transactions: Sequence[Transaction[Read]]
    next: Cursor
    head: int
    has_more: bool
    passed: Transaction[Read] | None = None

    @property
    def change_count(self) -> int:
        return sum(change_total(t.changes) for t in self.transactions)


class FeedReader:
    """Pages one feed's change log. Thread-safe: decoding is serialised (the decoder's caches are
    per feed), log reads are not.

    ``toast_index`` (required with ``toast="reselect"``) is where unchanged TOAST values come
    from: a page first brings it up to the transactions it decodes, so what a reader is served
    depends only on positions, never on what was read before."""

    def __init__(self, changelog: ChangeLog, catalog: Callable[[], RelationCatalog], *,
                 toast: ToastMode = "placeholder", placeholder: str = DEFAULT_PLACEHOLDER,
                 toast_index: ToastIndex | None = None, ddl_table: str | None = None) -> None:
        if toast == "reselect" and toast_index is None:
            raise ValueError("toast 'reselect' needs the feed's toast index")
        self.changelog = changelog
        self._catalog = catalog
        self.toast_index = toast_index if toast == "reselect" else None
        self._decoder = TransactionDecoder(
            catalog(), toast=toast, placeholder=placeholder,
            fills=self.toast_index.fills if self.toast_index is not None else None,
            ddl_table=ddl_table)
        self._lock = threading.Lock()
        # The transaction a reader is paging through by seq: large ones are read from the log
        # once, not once per page (a chunked payload keeps only its last chunk loaded).
        self._current: StoredTransaction | None = None
        # payloads of more chunks than this are read on demand (``_stored``); None: all whole
        self.lazy_chunks: int | None = LAZY_CHUNKS

    def resolve(self, cursor: Cursor | Literal["latest"], *, head: int | None = None,
                trimmed: int | None = None, start: bool = False) -> Cursor:
        """``latest`` -> the head; a cursor before what retention dropped -> RetentionError (410);
        with ``start`` (a reader's first cursor), one past the head -> CursorAhead.

        ``head`` and ``trimmed`` are the log's positions when the caller has read them already
        (to take other decisions on them): resolved on the same values, not read again, so that
        an append or a trim in between cannot make the two disagree."""
        if cursor == "latest" or start:
            head = self.changelog.head() if head is None else head
        if cursor == "latest":
            return Cursor(head)  # type: ignore[arg-type]
        if start and head is not None and cursor.lsn > head:
            raise CursorAhead(f"cursor {cursor} is past the feed's head {Cursor(head)}: nothing "
                              "there was ever in this feed's log (was the feed deleted and "
                              "created again?); resume from 'earliest' or 'latest'")
        if trimmed is None:
            trimmed = self.changelog.trimmed_lsn()
        if cursor != EARLIEST and trimmed and cursor < Cursor(trimmed):
            oldest = self.changelog.oldest()
            oldest_text = format_lsn(oldest) if oldest else format_lsn(trimmed)
            raise RetentionError(
                f"cursor {cursor} is older than the feed's retention: changes up to "
                f"{format_lsn(trimmed)} were dropped; resume from 'earliest' (oldest retained "
                f"transaction {oldest_text})", oldest=oldest_text)
        return cursor

    def page(self, after: Cursor, limit: int, *, tables: Collection[str] | None = None,
             ops: Collection[Op] | None = None, to: Cursor | None = None,
             max_transactions: int | None = None, whole_transactions: bool = False,
             block: bool = True) -> Page:
        """Up to ``limit`` changes scanned after ``after`` (and up to ``to`` inclusive).

        ``max_transactions`` additionally stops after that many transactions (the
        ``/transactions`` endpoint); a transaction is still sliced at ``limit`` changes.
        ``whole_transactions`` ends the page before a transaction that would not fit in what is
        left of ``limit``, so only a page's first transaction is ever sliced. Row changes stay
        in wire form, in runs the encoders write or load (``TransactionDecoder.decode``).
        Transactions are decoded one at a time per feed; with ``block=False`` a page that would
        wait for another reader's transaction ends there instead, or raises ReaderBusy before
        its first one (an event loop reading a small page inline must not stall).
        """
        if not block and getattr(self.changelog, "remote", False):  # round trips: not on the loop
            raise ReaderBusy("a shared store's log is read off the event loop")
        if limit < 1:
            raise ValueError("limit must be at least 1")
        table_set = set(tables) if tables else None
        op_set = set(ops) if ops else None
        head = self.changelog.head()
        upto = None if to is None else to.lsn
        next_cursor = after
        out: list[Transaction[Read]] = []
        passed: Transaction[Read] | None = None
        remaining = limit
        count = 0
        batch = self._stored(after, limit, upto)
        # Schema frames are appended with their transactions, so one catalogue refresh after the
        # log read covers the whole page (not a schema_history query per transaction).
        catalog = self._catalog() if batch else self._decoder.catalog
        index = self.toast_index
        if index is not None and batch:
            # An inline read (``block=False``) brings the index up to its own page only: one
            # that is behind the cursor has more to apply than an event loop may spend.
            if not block and index.watermark < after.lsn:
                raise ReaderBusy("the feed's toast index is behind this cursor")
            if not index.advance(self.changelog, catalog, batch[-1].commit_lsn, block=block):
                raise ReaderBusy("another reader of this feed is applying its toast index")
        for stored in batch:
            if remaining <= 0 or (max_transactions is not None and count >= max_transactions):
                break
            if stored.change_count == 0:
                next_cursor = Cursor(stored.commit_lsn)
                continue
            first = after.seq + 1 if stored.commit_lsn == after.lsn and after.seq is not None else 0
            if first >= stored.change_count:  # a cursor naming its last change (or past it)
                next_cursor = Cursor(stored.commit_lsn)
                continue
            if whole_transactions and count and stored.change_count - first > remaining:
                break
            if (table_set is not None or op_set is not None) and (
                    to is None or to.lsn > stored.commit_lsn) and _filtered_chunk(
                    stored, table_set, op_set):
                # A backfill chunk the filters leave out whole: passed without decoding its rows
                # (a live reader of other tables would otherwise scan every row read).
                remaining -= 1
                count += 1
                next_cursor = Cursor(stored.commit_lsn)
                self._current = None
                if first == 0:
                    passed = Transaction(stored.xid, stored.commit_lsn, stored.end_lsn,
                                         stored.commit_ts, BACKFILL_ORIGIN, [],
                                         stored.change_count, stored.change_count - 1,
                                         backfill_id_of(stored.origin))
                continue
            last_wanted = stored.change_count - 1
            if to is not None and to.lsn == stored.commit_lsn and to.seq is not None:
                last_wanted = min(last_wanted, to.seq)
            budget = min(remaining, last_wanted - first + 1)
            if budget <= 0:  # the reader already holds everything up to ``to``
                break
            if not self._lock.acquire(blocking=block):
                if count:
                    break  # the page ends here: ``next`` covers what was scanned
                raise ReaderBusy("another reader of this feed is decoding")
            try:
                self._decoder.catalog = catalog
                txn = self._decoder.decode(stored, first_seq=first, max_changes=budget,
                                           tables=table_set, ops=op_set)
            finally:
                self._lock.release()
            last_seq = txn.last_seq
            assert last_seq is not None  # decode() always says where it stopped
            scanned = last_seq - first + 1
            remaining -= scanned
            count += 1
            whole = last_seq >= stored.change_count - 1
            next_cursor = Cursor(stored.commit_lsn) if whole else Cursor(stored.commit_lsn, last_seq)
            self._current = None if whole else stored
            if txn.changes:
                out.append(txn)
                passed = None
            elif whole and first == 0:  # begun on an earlier page: its frames close it
                passed = txn
        bound = Cursor(head) if to is None else min(Cursor(head), to)
        return Page(out, next_cursor, head, next_cursor < bound, passed)

    def relation_ids(self, name: str) -> list[int]:
        """The relations named ``name`` (``schema.table``, or a bare table name when only one
        schema has it) in any of their versions, newest first."""
        catalog = self._catalog()
        found: dict[int, int] = {}  # relation id -> its newest valid_from
        bare: dict[int, int] = {}
        for relation_id, versions in catalog.relations():
            for v in versions:
                if v.qualified_name == name:
                    found[relation_id] = versions[-1].valid_from
                elif v.table == name:
                    bare[relation_id] = versions[-1].valid_from
        if not found and len({v.schema for r in bare for v in catalog.versions(r)
                              if v.table == name}) == 1:
            found = bare
        return sorted(found, key=lambda r: found[r], reverse=True)

    def schema_at(self, relation_id: int, at: Cursor) -> RelationSchema | None:
        """The version of relation ``relation_id`` in force at ``at``: for ``LSN:seq`` the one
        change ``seq`` of that transaction is decoded with (a Relation frame earlier in the same
        transaction counts), for a whole transaction the one after it; None before the first."""
        catalog = self._catalog()
        if at.seq is None or not any(v.valid_from == at.lsn for v in catalog.versions(relation_id)):
            return catalog.find(relation_id, at.lsn + (1 if at.seq is None else 0))
        found = self.changelog.read(Cursor(at.lsn - 1), 1) if at.lsn else []
        if not found or found[0].commit_lsn != at.lsn:  # trimmed: the version after it
            return catalog.find(relation_id, at.lsn + 1)
        current = catalog.find(relation_id, at.lsn)
        for seq, _tag, _buf, schema, _previous in TransactionDecoder(catalog).wire_changes(found[0]):
            if seq == -1:
                if schema is not None and schema.relation_id == relation_id:
                    current = schema
            elif seq >= at.seq:
                break
        return current

    def index_toast(self) -> None:
        """Bring the toast index up to the log's head (before retention trims what it needs)."""
        if self.toast_index is not None:
            self.toast_index.advance(self.changelog, self._catalog(), self.changelog.head())

    def _stored(self, after: Cursor, limit: int, upto: int | None) -> list[StoredTransaction]:
        """The transactions a page scans: a payload of more than LAZY_CHUNKS of the log's chunks
        comes loading its chunks as the decoder reaches them (``assembler.chunked``), so paging
        through a big transaction holds a chunk or two of it, not all of it."""
        current = self._current
        lazy = self.lazy_chunks
        if current is not None and after.seq is not None and current.commit_lsn == after.lsn:
            rest = self.changelog.read(Cursor(after.lsn), limit, upto, lazy_chunks=lazy) \
                if after.seq + limit >= current.change_count - 1 else []
            return [current, *rest]
        return self.changelog.read(after, limit, upto, lazy_chunks=lazy)


def _filtered_chunk(stored: StoredTransaction, tables: set[str] | None,
                    ops: set[Op] | None) -> bool:
    """A backfill chunk (its changes are all reads of the one table its Relation frame names)
    that the ``tables``/``ops`` filters leave out entirely."""
    if backfill_id_of(stored.origin) is None:
        return False
    if ops is not None and Op.READ not in ops:
        return True
    if tables is None:
        return False
    whole = stored.payload
    if not isinstance(whole, (bytes, bytearray, ChunkedPayload)) or not len(whole):
        return False
    _base, payload = segments(whole)  # its Relation frame comes first: its first chunk says
    for _at, _lsn, start, stop in walk(payload):
        if stop > len(payload):  # a frame larger than a chunk: decode it to know
            return False
        tag = payload[start]
        if tag == TAG_RELATION:
            rel = decode(bytes(payload[start:stop]))
            assert isinstance(rel, RelationMessage)
            return f"{served_schema(rel.namespace)}.{rel.relation_name}" not in tables
        if tag != TAG_TYPE:
            return False
    return False
