"""Builders of StoredTransactions with realistic pgoutput frames for change log tests."""

from __future__ import annotations

from pgfeed.assembler.framing import frame
from pgfeed.assembler.model import StoredTransaction
from tests.unit.assembler import wire as w

RELID = 16384
SECOND = 1_000_000  # commit_ts unit: µs


def relation_frame(lsn: int, relid: int = RELID) -> bytes:
    return frame(lsn, w.relation(relid, "orders", ("id", "customer", "note")))


def txn(commit_lsn: int, changes: int = 3, *, ts: int = 0, schema: bool = False, row_bytes: int = 60,
        xid: int | None = None, origin: str | None = None) -> StoredTransaction:
    """``changes`` inserts (~``row_bytes`` + 30 bytes each), positioned below ``commit_lsn``;
    with ``schema`` a Relation frame first (also listed in ``schema_frames``)."""
    first = max(0, commit_lsn - 100 * (changes + 1))
    schema_frames = (relation_frame(first),) if schema else ()
    parts = list(schema_frames)
    for i in range(changes):
        message = w.insert(RELID, str(commit_lsn * 1000 + i), f"customer-{i:08d}", "x" * row_bytes)
        parts.append(frame(first + 100 * (i + 1), message))
    return StoredTransaction(xid=commit_lsn % 100_000 if xid is None else xid, commit_lsn=commit_lsn,
                             end_lsn=commit_lsn + 8, commit_ts=ts, origin=origin, change_count=changes,
                             payload=b"".join(parts), schema_frames=schema_frames)


def lsns(transactions: list[StoredTransaction]) -> list[int]:
    return [t.commit_lsn for t in transactions]
