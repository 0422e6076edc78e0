"""Synthetic feeds for HTTP tests: realistic pgoutput frames, stored as capture stores them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pgfeed.assembler.framing import frame
from pgfeed.assembler.model import StoredTransaction
from pgfeed.changelog.base import ChangeLog
from pgfeed.pgoutput.encode import encode
from pgfeed.pgoutput.encode import tuple_data as encode_tuple
from pgfeed.pgoutput.messages import (
    UNCHANGED_TOAST,
    DeleteMessage,
    InsertMessage,
    LogicalMessage,
    RelationColumn,
    RelationMessage,
    TruncateMessage,
    TupleData,
    UpdateMessage,
)

UNCHANGED = object()  # an unchanged TOAST datum ('u')
Value = str | None | object


def numeric_typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | scale) + 4


@dataclass(frozen=True)
class Col:
    name: str
    oid: int
    typmod: int = -1
    key: bool = False


@dataclass(frozen=True)
class Table:
    relid: int
    schema: str
    name: str
    columns: tuple[Col, ...]
    identity: bytes = b"d"


ORDERS = Table(16384, "public", "orders", (
    Col("id", 20, key=True), Col("customer", 25), Col("amount", 1700, numeric_typmod(12, 2)),
    Col("status", 25), Col("created_at", 1184), Col("paid", 16)))
ITEMS = Table(16390, "public", "items", (Col("id", 23, key=True), Col("sku", 25)))
TYPED = Table(16400, "public", "typed", (
    Col("id", 23, key=True), Col("i2", 21), Col("i8", 20), Col("n", 1700, numeric_typmod(10, 2)),
    Col("nu", 1700), Col("f4", 700), Col("f8", 701), Col("b", 16), Col("t", 25), Col("by", 17),
    Col("d", 1082), Col("ts", 1114), Col("tz", 1184), Col("j", 3802), Col("u", 2950),
    Col("arr", 1007), Col("tarr", 1009), Col("iv", 1186), Col("body", 25)))


def relation(table: Table) -> bytes:
    return encode(RelationMessage(None, table.relid, table.schema, table.name, table.identity[0], tuple(
        RelationColumn(1 if c.key else 0, c.name, c.oid, c.typmod) for c in table.columns)))


def _tuple(values: Sequence[Value]) -> TupleData:
    return TupleData(tuple(UNCHANGED_TOAST if v is UNCHANGED else v for v in values))  # type: ignore[misc]


def tuple_data(values: Sequence[Value]) -> bytes:
    return encode_tuple(_tuple(values))


def insert(table: Table, values: Sequence[Value]) -> bytes:
    return encode(InsertMessage(None, table.relid, _tuple(values)))


def update(table: Table, values: Sequence[Value], old: Sequence[Value] | None = None,
           old_kind: bytes = b"K") -> bytes:
    return encode(UpdateMessage(None, table.relid, None if old is None else old_kind[0],
                                None if old is None else _tuple(old), _tuple(values)))


def delete(table: Table, key: Sequence[Value], kind: bytes = b"K") -> bytes:
    return encode(DeleteMessage(None, table.relid, kind[0], _tuple(key)))


def message(prefix: str, content: bytes, lsn: int) -> bytes:
    return encode(LogicalMessage(None, 1, lsn, prefix, content))


def truncate(*tables: Table, options: int = 0) -> bytes:
    return encode(TruncateMessage(None, options, tuple(t.relid for t in tables)))


@dataclass
class LogWriter:
    """Appends transactions to a change log with ascending LSNs; the first use of a table in the
    log sends its Relation message (as pgoutput does), recorded as a schema frame."""

    log: ChangeLog
    lsn: int = 0x1_0000_0000
    xid: int = 1000
    ts: int = 830_000_000_000_000  # 2026-04-21, µs since 2000-01-01
    sent: set[int] = field(default_factory=set)

    def commit(self, *changes: tuple[Table | None, bytes], origin: str | None = None) -> StoredTransaction:
        frames: list[bytes] = []
        schema: list[bytes] = []
        count = 0
        for table, msg in changes:
            if table is not None and table.relid not in self.sent:
                self.sent.add(table.relid)
                self.lsn += 64
                rel = frame(self.lsn, relation(table))
                frames.append(rel)
                schema.append(rel)
            self.lsn += len(msg) + 24
            frames.append(frame(self.lsn, msg))
            count += 1
        self.lsn += 48
        self.xid += 1
        self.ts += 1000
        txn = StoredTransaction(self.xid, self.lsn, self.lsn + 8, self.ts, origin, count,
                                b"".join(frames), tuple(schema))
        self.lsn += 8
        self.log.append([txn], confirmed_lsn=txn.end_lsn)
        return txn


def order_row(i: int, status: str = "new") -> list[Value]:
    return [str(i), f"customer-{i % 977}", f"{i % 100000}.{i % 100:02d}", status,
            f"2026-05-{1 + i % 28:02d} 12:{i % 60:02d}:{(i * 7) % 60:02d}.{i % 1000000:06d}+00",
            "t" if i % 2 else "f"]


def orders_workload(writer: LogWriter, n_txns: int, per_txn: int, *, start: int = 0) -> int:
    """Transactions of inserts, updates and deletes on ``orders`` (and some ``items`` inserts);
    returns the number of changes written."""
    total = 0
    i = start
    for t in range(n_txns):
        changes: list[tuple[Table | None, bytes]] = []
        for k in range(per_txn):
            i += 1
            kind = (t + k) % 5
            if kind < 2:
                changes.append((ORDERS, insert(ORDERS, order_row(i))))
            elif kind < 4:
                changes.append((ORDERS, update(ORDERS, order_row(i - 1, "paid"))))
            elif k % 2:
                changes.append((ITEMS, insert(ITEMS, [str(i), f"sku-{i}"])))
            else:
                changes.append((ORDERS, delete(ORDERS, [str(i - 2), None, None, None, None, None])))
        writer.commit(*changes)
        total += len(changes)
    return total
