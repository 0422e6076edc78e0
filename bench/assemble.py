"""Micro-benchmark of the capture-time assembler: 1M synthetic Insert messages, 10k per transaction.

Run: .venv/bin/python bench/assemble.py [--streamed]   (prints messages/s; target well above 1M/s)
"""

from __future__ import annotations

import argparse
import time

import _checkout  # noqa: F401  (this checkout's packages first: sys.path, PYTHONPATH)

from pgfeed.assembler.spill import MemorySpillStore
from pgfeed.assembler.transactions import TransactionAssembler
from pgfeed.pgoutput.encode import encode
from pgfeed.pgoutput.messages import (
    BeginMessage,
    CommitMessage,
    InsertMessage,
    StreamCommitMessage,
    StreamStartMessage,
    StreamStopMessage,
    TupleData,
)

TOTAL, PER_TXN = 1_000_000, 10_000


def _insert(i: int, xid: int | None) -> bytes:
    # ~100 bytes like a real insert: relation id, 'N', 3 text columns.
    row = TupleData((str(i), f"customer-{i:08d}", "x" * 60))
    return encode(InsertMessage(xid, 16384, row), in_stream=xid is not None)


def run(streamed: bool) -> float:
    asm = TransactionAssembler(spill=MemorySpillStore())
    feed = asm.feed
    txns = TOTAL // PER_TXN
    row_plain = [_insert(i, None) for i in range(PER_TXN)]
    row_streamed = [_insert(i, 1) for i in range(PER_TXN)]  # the (sub)xid is not checked
    lsn = 1 << 32
    emitted = changes = 0
    t0 = time.perf_counter()
    for t in range(txns):
        xid = 1000 + t
        if streamed:
            feed(lsn, encode(StreamStartMessage(xid, True)))
            rows = row_streamed
        else:
            commit_lsn = lsn + PER_TXN * 100
            feed(lsn, encode(BeginMessage(commit_lsn, 0, xid)))
            rows = row_plain
        for m in rows:
            lsn += 100
            feed(lsn, m)
        if streamed:
            feed(lsn, encode(StreamStopMessage()))
            done = feed(lsn + 8, encode(StreamCommitMessage(xid, 0, lsn, lsn + 8, 0)))
        else:
            done = feed(lsn + 8, encode(CommitMessage(0, commit_lsn, commit_lsn + 8, 0)))
            lsn = commit_lsn
        lsn += 8
        emitted += len(done)
        changes += sum(d.change_count for d in done)
    elapsed = time.perf_counter() - t0
    assert emitted == txns and changes == TOTAL, (emitted, changes)
    return TOTAL / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--streamed", action="store_true", help="stream blocks + Stream Commit instead")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rates = sorted(run(args.streamed) for _ in range(args.repeat))
    kind = "streamed" if args.streamed else "plain"
    median = rates[len(rates) // 2]
    print(f"{kind}: {TOTAL:,} inserts, {PER_TXN:,}/txn: median {median:,.0f} messages/s "
          f"(best {rates[-1]:,.0f})")


if __name__ == "__main__":
    main()
