"""Append and read rates of the SQLite change log, against the capture target of ~300k changes/s.

Run: .venv/bin/python bench/changelog.py [--dir DIR] [--repeat 3] [--no-results]
1M changes of ~100-byte pgoutput inserts (framed: +12 bytes), 10k changes a transaction, appended in
batches of 1 and 10 transactions (fsync'd, as capture does); then paged back with ``read``. Also
times the log in other journal/synchronous modes: the evidence for its WAL + synchronous=FULL.
Results go to bench/RESULTS.md between the changelog markers.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
import _checkout  # noqa: F401  (this checkout's packages first: sys.path, PYTHONPATH)

sys.path.insert(0, str(BENCH))

from _results import write_section

from pgfeed.assembler.framing import FRAME
from pgfeed.assembler.model import StoredTransaction
from pgfeed.changelog.sqlite import SqliteChangeLog
from pgfeed.pgoutput.encode import encode
from pgfeed.pgoutput.messages import InsertMessage, TupleData
from pgfeed_client._cursor import EARLIEST, Cursor

RESULTS = BENCH / "RESULTS.md"
TARGET = 300_000  # changes/s the capture path must sustain
TOTAL, PER_TXN = 1_000_000, 10_000
SMALL_TOTAL, SMALL_BATCH = 100_000, 100  # one-change transactions, 100 per append
MODE_SINGLES = 3000  # one-change transactions appended one by one, per mode


def _insert(i: int) -> bytes:
    # ~100 bytes like a real insert (as bench/assemble.py): relation id, 'N', 3 text columns.
    return encode(InsertMessage(None, 16384, TupleData((str(i), f"customer-{i:08d}", "x" * 60))))


def _payload(changes: int, first_lsn: int) -> bytes:
    parts = []
    for i in range(changes):
        message = _insert(i)
        parts.append(FRAME.pack(first_lsn + 100 * i, len(message)) + message)
    return b"".join(parts)


def _transactions(total: int, per_txn: int) -> list[StoredTransaction]:
    payload = _payload(per_txn, 1 << 32)  # shared: the log copies it like any other
    step = per_txn * 100 + 100
    return [StoredTransaction(1000 + t, (1 << 32) + step * (t + 1), (1 << 32) + step * (t + 1) + 8,
                              t * 1000, None, per_txn, payload) for t in range(total // per_txn)]


def _fresh(directory: Path) -> Path:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory / "changelog.db"


def bench_append(directory: Path, txns: list[StoredTransaction], batch: int) -> float:
    """Seconds to append ``txns`` in batches of ``batch`` to a new log (each append fsync'd)."""
    log = SqliteChangeLog(_fresh(directory))
    try:
        t0 = time.perf_counter()
        for i in range(0, len(txns), batch):
            chunk = txns[i:i + batch]
            log.append(chunk, confirmed_lsn=chunk[-1].end_lsn)
        return time.perf_counter() - t0
    finally:
        log.close()


def bench_read(directory: Path, page: int) -> tuple[float, int, int]:
    """Seconds to page the whole log with ``read(cursor, page)``; changes and bytes read."""
    log = SqliteChangeLog(directory / "changelog.db")
    try:
        cursor, changes, size = EARLIEST, 0, 0
        t0 = time.perf_counter()
        while txns := log.read(cursor, page):
            changes += sum(t.change_count for t in txns)
            size += sum(len(t.payload) for t in txns)
            cursor = Cursor(txns[-1].commit_lsn)
        return time.perf_counter() - t0, changes, size
    finally:
        log.close()


def bench_mode(directory: Path, txns: list[StoredTransaction], batch: int, journal: str,
               synchronous: str) -> float:
    """``bench_append`` with the log's writer switched to another journal/synchronous mode (the
    evidence for the default; reaches into the writer connection, fine for a bench)."""
    log = SqliteChangeLog(_fresh(directory))
    try:
        writer = log._writer
        assert writer is not None
        writer.execute(f"PRAGMA journal_mode = {journal}")
        writer.execute(f"PRAGMA synchronous = {synchronous}")
        t0 = time.perf_counter()
        for i in range(0, len(txns), batch):
            log.append(txns[i:i + batch], confirmed_lsn=txns[i].end_lsn)
        return time.perf_counter() - t0
    finally:
        log.close()


MODES = (("WAL", "FULL"), ("WAL", "NORMAL"), ("DELETE", "FULL"))


def best(repeat: int, run: Callable[[], float]) -> tuple[float, list[float]]:
    times = [run() for _ in range(repeat)]
    return min(times), times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", type=Path, help="where to put the bench logs (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-results", action="store_true", help="do not write bench/RESULTS.md")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="pgfeed-changelog-bench-", dir=args.dir))
    try:
        run(base, args.repeat, not args.no_results)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(base: Path, repeat: int, record: bool) -> None:
    txns = _transactions(TOTAL, PER_TXN)
    size = sum(len(t.payload) for t in txns)
    print(f"{TOTAL:,} changes in {len(txns)} transactions, {size / 1e6:.1f} MB framed "
          f"({size / TOTAL:.0f} B a change), in {base}")
    rows = []
    for batch in (1, 10):
        seconds, times = best(repeat, lambda b=batch: bench_append(base / "log", txns, b))  # type: ignore[misc]
        rows.append((f"append, 10k-change transactions, {batch} per append", TOTAL / seconds,
                     size / seconds / 1e6, times))
        print(f"  {rows[-1][0]}: {rows[-1][1]:,.0f} changes/s, {rows[-1][2]:.0f} MB/s")
    small = _transactions(SMALL_TOTAL, 1)
    small_size = sum(len(t.payload) for t in small)
    seconds, times = best(repeat, lambda: bench_append(base / "small", small, SMALL_BATCH))
    rows.append((f"append, 1-change transactions, {SMALL_BATCH} per append", SMALL_TOTAL / seconds,
                 small_size / seconds / 1e6, times))
    print(f"  {rows[-1][0]}: {rows[-1][1]:,.0f} changes/s, {rows[-1][2]:.0f} MB/s")
    bench_append(base / "log", txns, 10)  # the log to read back
    for page in (10_000, 100_000):
        reads = [bench_read(base / "log", page) for _ in range(repeat)]
        seconds = min(r[0] for r in reads)
        assert all(r[1] == TOTAL for r in reads), reads
        rows.append((f"read, pages of {page:,} changes", TOTAL / seconds, size / seconds / 1e6,
                     [r[0] for r in reads]))
        print(f"  {rows[-1][0]}: {rows[-1][1]:,.0f} changes/s, {rows[-1][2]:.0f} MB/s")
    modes = []
    singles = small[:MODE_SINGLES]
    for journal, sync in MODES:
        big = min(bench_mode(base / "mode", txns, 1, journal, sync) for _ in range(repeat))
        one = min(bench_mode(base / "mode", singles, 1, journal, sync) for _ in range(repeat))
        modes.append((f"{journal}, synchronous={sync}", TOTAL / big, len(singles) / one))
        print(f"  {modes[-1][0]}: {modes[-1][1]:,.0f} changes/s (10k-change transactions), "
              f"{modes[-1][2]:,.0f} appends/s (one 1-change transaction each)")
    if record:
        write_results(section(rows, modes, size))
        print(f"wrote {RESULTS.relative_to(ROOT)}")


def section(rows: list[tuple[str, float, float, list[float]]], modes: list[tuple[str, float, float]],
            size: int) -> str:
    table = "\n".join(f"| {name} | {rate:,.0f} | {mb:.0f} | {rate / TARGET:.1f}x | "
                      f"{', '.join(f'{t:.2f}' for t in times)} |" for name, rate, mb, times in rows)
    mode_table = "\n".join(f"| {name} | {big:,.0f} | {one:,.0f} |" for name, big, one in modes)
    batch1, batch10, small = rows[0][1], rows[1][1], rows[2][1]
    single = modes[0][2]
    per_change = 1e6 / batch10
    return f"""## Change log (SQLite) (`bench/changelog.py`)

Measured {time.strftime('%Y-%m-%d')} on CPython {platform.python_version()}, SQLite \
{sqlite3.sqlite_version} ({platform.machine()}, 2 shared cores, local disk), best of the runs
shown. {TOTAL:,} changes of ~100-byte pgoutput inserts ({size / TOTAL:.0f} bytes framed, \
{size / 1e6:.0f} MB), {PER_TXN:,} changes a transaction,
appended to a new log (WAL, `synchronous=FULL`: every append is fsync'd, as capture needs), then
paged back with `read(cursor, page)` (payloads reassembled, not decoded). The 1-change row appends
{SMALL_TOTAL:,} one-change transactions, {SMALL_BATCH} per append.

| operation | changes/s | MB/s | vs {TARGET:,}/s | runs (s) |
| --- | --- | --- | --- | --- |
{table}

The same log in other SQLite modes (10k-change transactions one per append; and one-change
transactions one per append, where the commit's fsyncs dominate):

| mode | changes/s, 10k-change transactions | appends/s, 1-change transactions |
| --- | --- | --- |
{mode_table}

**What it means.** At {TARGET:,} changes/s the capture path spends about {TARGET / batch10:.0%} of
its time in the log (~{per_change:.2f} µs a change: SQLite writing pages to the WAL, then
checkpointing them into the file), whether ~10 transactions complete per read batch or each is
appended alone: {batch10 / TARGET:.1f}x / {batch1 / TARGET:.1f}x headroom for transactions of many
changes. One-change transactions cost a fixed ~{1e6 / small:.0f} µs each (a row, an index entry, a
chunk) when batched, so a stream of single-row commits tops out near {small:,.0f} changes/s in the
log alone ({small / TARGET:.1f}x of the target; each such change also brings a Begin and a Commit
through the walsender, so the source delivers fewer changes/s than in bulk), and an append of a single transaction costs one
fsync (~{1e6 / single:.0f} µs here) — capture stays fast under load because a read batch then
holds many transactions, which one append commits together. Reading back (payloads reassembled
from the page cache, not decoded) is far faster than decoding, so readers are bound by the decoder.
Mode choice: a rollback journal (DELETE) writes a large append once instead of twice (WAL, then
checkpoint), hence its higher rate for big transactions, but it needs more fsyncs per commit
(fewer small appends/s) and blocks readers while the writer commits; `synchronous=NORMAL` skips
the per-commit fsync, so a power loss could undo appends already confirmed to PostgreSQL. WAL with
`synchronous=FULL` is the fastest mode that is durable per append and lets readers run alongside.
Runs vary with the other jobs on these shared cores and disk.
"""


def write_results(text: str) -> None:
    write_section("changelog", text)


if __name__ == "__main__":
    main()
