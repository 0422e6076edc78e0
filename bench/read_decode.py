"""Read-path benchmark: stored (wire-form) transactions -> decoded Changes -> contract JSON bytes.

1,000,000 synthetic changes (400k insert, 400k update, 200k delete; 10k rows a transaction), the
mix of FIELD-NOTES' reference table. Prints changes/s, in one process, for: decoding with values
loaded (``load``), that plus the reference JSON encoder (``load+JSON``), and the wire-form fast
paths to JSON and protobuf (``encoding/transcode.py``, the serving path).
Run: .venv/bin/python bench/read_decode.py [--changes N] [--repeat R]
"""

from __future__ import annotations

import argparse
import statistics
import time

import _checkout  # noqa: F401  (this checkout's packages first: sys.path, PYTHONPATH)

from pgfeed.assembler.framing import frame
from pgfeed.assembler.model import StoredTransaction
from pgfeed.decoding.changes import TransactionDecoder
from pgfeed.decoding.relations import RelationCatalog
from pgfeed.decoding.runs import change_total, loaded
from pgfeed.encoding.to_json import change_events, change_to_dict, dumps
from pgfeed.encoding.to_proto import transaction_frames
from pgfeed.pgoutput.encode import encode
from pgfeed.pgoutput.messages import (
    TUPLE_KEY,
    DeleteMessage,
    InsertMessage,
    RelationColumn,
    RelationMessage,
    TupleData,
    UpdateMessage,
)

RELID = 16384
# id int8 (key), customer text, amount numeric, status text, created_at timestamptz, paid bool
COLUMNS = (("id", 20, True), ("customer", 25, False), ("amount", 1700, False),
           ("status", 25, False), ("created_at", 1184, False), ("paid", 16, False))


def relation() -> bytes:
    columns = tuple(RelationColumn(1 if key else 0, name, oid, -1) for name, oid, key in COLUMNS)
    return encode(RelationMessage(None, RELID, "public", "orders", ord("d"), columns))


def row(i: int, status: str) -> tuple[str | None, ...]:
    # timestamptz as PostgreSQL writes it: trailing zeros of the fraction trimmed
    stamp = f"2026-05-{1 + i % 28:02d} 12:{i % 60:02d}:{(i * 7) % 60:02d}.{i % 1000000:06d}"
    return (str(i), f"customer-{i % 977}", f"{i % 100000}.{i % 100:02d}", status,
            stamp.rstrip("0").rstrip(".") + "+00", "t" if i % 2 else "f")


def build(n_changes: int, per_txn: int = 10_000) -> list[StoredTransaction]:
    inserts, updates = n_changes * 4 // 10, n_changes * 4 // 10
    ops = ["I"] * inserts + ["U"] * updates + ["D"] * (n_changes - inserts - updates)
    txns, lsn = [], 1 << 32
    for start in range(0, n_changes, per_txn):
        frames = []
        for k, op in enumerate(ops[start:start + per_txn]):
            i = start + k
            if op == "I":
                msg = encode(InsertMessage(None, RELID, TupleData(row(i, "new"))))
            elif op == "U":
                msg = encode(UpdateMessage(None, RELID, None, None, TupleData(row(i - inserts, "paid"))))
            else:
                key = TupleData((str(i), None, None, None, None, None))
                msg = encode(DeleteMessage(None, RELID, TUPLE_KEY, key))
            lsn += len(msg) + 30
            frames.append(frame(lsn, msg))
        lsn += 100
        txns.append(StoredTransaction(xid=1000 + start // per_txn, commit_lsn=lsn, end_lsn=lsn + 8,
                                      commit_ts=830_000_000_000_000, origin=None,
                                      change_count=len(frames), payload=b"".join(frames)))
    return txns


def run(txns: list[StoredTransaction], catalog: RelationCatalog, mode: str,
        page: int = 1000) -> tuple[float, int]:
    decoder = TransactionDecoder(catalog)
    total, nbytes = 0, 0
    lazy = mode.startswith("transcode")
    t0 = time.perf_counter()
    for stored in txns:
        for first in range(0, stored.change_count, page):  # pages, as the HTTP API serves them
            read = decoder.decode(stored, first_seq=first, max_changes=page)
            total += change_total(read.changes)
            if not lazy:
                txn = loaded(read)
            if mode == "load+JSON":
                nbytes += len(dumps({"changes": [change_to_dict(c, txn) for c in txn.changes]}))
            elif mode == "transcode JSON":
                nbytes += len(b",".join(change_events(read)))
            elif mode == "transcode proto":
                nbytes += sum(len(f) for f in transaction_frames(read))
    return total / (time.perf_counter() - t0), nbytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--changes", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    catalog = RelationCatalog()
    catalog.add(1, relation())
    txns = build(args.changes)
    print(f"{args.changes:,} changes in {len(txns)} transactions, "
          f"{sum(len(t.payload) for t in txns) / args.changes:.0f} payload bytes a change")
    for mode in ("load", "load+JSON", "transcode JSON", "transcode proto"):
        rates = []
        for _ in range(args.repeat):
            rate, nbytes = run(txns, catalog, mode)
            rates.append(rate)
        extra = f", {nbytes / args.changes:.0f} bytes a change" if nbytes else ""
        print(f"{mode:16s} median {statistics.median(rates) / 1000:7.1f}k changes/s "
              f"(runs: {', '.join(f'{r / 1000:.0f}k' for r in rates)}){extra}")


if __name__ == "__main__":
    main()
