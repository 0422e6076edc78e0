"""What a feed with ``messages`` pays for not streaming: one big transaction captured live with the
walsender streaming it (``messages: false``) and with the walsender sending it whole at commit
(``messages: true``, opt-in since issue 28.2: a streamed message can outlive its rolled-back
subtransaction; docs/design.md, "Logical messages turn streaming off").

Per mode and round, on a throwaway PostgreSQL with the default ``logical_decoding_work_mem``
(64MB): a fresh database and slot, pgfeed's ``Capture`` running, then one ``--rows``-row INSERT
transaction (about 150 bytes a row). Measured: the transaction's time on the source, the time
from its COMMIT returning to the transaction being durable in pgfeed's log (what a reader waits
for), end-to-end throughput (rows / (INSERT start -> durable)), the walsender's and pgfeed's CPU,
the slot's ``pg_stat_replication_slots`` spill and stream counters, and the peak size of the
slot's spill directory on the source (``pg_ls_replslotdir``, sampled every 50 ms).

Run: .venv/bin/python bench/streaming.py [--pg 18] [--rows 1000000] [--rounds 2] [--no-results]
Results go to bench/RESULTS.md between the streaming markers.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
import _checkout  # noqa: F401  (this checkout's packages first: sys.path, PYTHONPATH)

sys.path.insert(0, str(ROOT / "bench"))

import psycopg
from _results import write_section
from capture import INSERT_SQL, SCHEMA, WalsenderCpu

from pgfeed.changelog import open_changelog
from pgfeed.feeds.model import FeedOptions, FeedSpec
from pgfeed.feeds.notify import HeadNotifier
from pgfeed.feeds.source import capture_config
from pgfeed.localpg import LocalCluster
from pgfeed.replication.capture import Capture, CaptureStats
from pgfeed.replication.stream import create_slot
from pgfeed_client._cursor import parse_lsn

MODES = {"streamed (messages off)": False, "whole at commit (messages on)": True}


class SpillWatch:
    """Peak bytes in a slot's directory on the source (its spill files), sampled until stopped."""

    def __init__(self, dsn: str, slot: str) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(dsn, slot), daemon=True)
        self._thread.start()

    def _run(self, dsn: str, slot: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not self._stop.wait(0.05):
                row = conn.execute("SELECT coalesce(sum(size), 0) FROM pg_ls_replslotdir(%s)",
                                   (slot,)).fetchone()
                self.peak = max(self.peak, int(row[0]) if row else 0)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.peak


def one_run(cluster: LocalCluster, db: str, messages: bool, rows: int, workdir: Path) -> dict[str, float]:
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')  # generated name
    dsn = cluster.dsn(db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    create_slot(dsn, "s", snapshot="nothing")
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    spec = FeedSpec(name="bench", dsn=dsn, publication="pub", slot="s", owns_slot=False,
                    owns_publication=False,
                    options=FeedOptions(messages=messages, streaming=True, heartbeat_seconds=0))
    changelog = open_changelog("sqlite", workdir / "changelog.db")
    stats = CaptureStats()
    cap = Capture(capture_config(spec), changelog, stats, spill_dir=workdir / "spill",
                  on_durable=HeadNotifier(changelog.head()).publish)
    stop = threading.Event()
    thread = threading.Thread(target=cap.run, args=(stop,), name="capture-bench")
    thread.start()
    try:
        while stats.streaming_in_use is None:
            time.sleep(0.01)
        wal_cpu = WalsenderCpu(cluster.dsn(), "s")
        spill = SpillWatch(cluster.dsn(db), "s")
        c0 = time.process_time()
        with psycopg.connect(dsn, autocommit=True) as conn:
            t0 = time.perf_counter()
            with conn.transaction():
                conn.execute(INSERT_SQL, (1, rows))
                before = parse_lsn(conn.execute("SELECT pg_current_wal_insert_lsn()::text")
                                   .fetchone()[0])  # type: ignore[index]
            committed = time.perf_counter()
            while changelog.head() < before:
                if stats.state == "failed" or not thread.is_alive():
                    raise RuntimeError(f"capture stopped: {stats.last_error}")
                time.sleep(0.005)
            durable = time.perf_counter()
            counters = conn.execute(
                "SELECT spill_txns, spill_count, spill_bytes, stream_txns, stream_count, stream_bytes "
                "FROM pg_stat_replication_slots WHERE slot_name = 's'").fetchone()
        cpu = time.process_time() - c0
        peak_spill = spill.stop()
        walsender = wal_cpu.stop()
    finally:
        stop.set()
        thread.join(60)
        stored = changelog.stats()
        changelog.close()
    if stored.change_count != rows:
        raise RuntimeError(f"the log holds {stored.change_count} changes, expected {rows}")
    assert counters is not None
    spill_txns, spill_count, spill_bytes, stream_txns, stream_count, stream_bytes = counters
    return {"streaming_in_use": float(bool(stats.streaming_in_use)), "spill_txns": spill_txns,
            "stream_txns": stream_txns,
            "txn_seconds": committed - t0, "commit_to_durable": durable - committed,
            "rows_per_second": rows / (durable - t0), "pgfeed_cpu": cpu,
            "walsender_cpu": walsender or 0.0, "spill_mb": spill_bytes / 2**20,
            "spill_count": spill_count, "stream_mb": stream_bytes / 2**20,
            "stream_count": stream_count, "peak_spill_dir_mb": peak_spill / 2**20,
            "payload_mb": stored.payload_bytes / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pg", default="18")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-results", action="store_true")
    args = ap.parse_args()
    load = Path("/proc/loadavg").read_text().split()[:3]
    work = Path(tempfile.mkdtemp(prefix="pgfeed-bench-streaming-"))
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    try:
        with LocalCluster.start(args.pg) as cluster:
            with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
                server = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
            n = 0
            for r in range(args.rounds):
                for mode, messages in MODES.items():
                    n += 1
                    res = one_run(cluster, f"b{n}", messages, args.rows, work / f"run{n}")
                    results[mode].append(res)
                    print(f"round {r + 1} {mode}: " + ", ".join(f"{k} {v:,.2f}" for k, v in res.items()),
                          flush=True)
                    with psycopg.connect(cluster.dsn(f"b{n}"), autocommit=True) as conn:
                        conn.execute("SELECT pg_drop_replication_slot('s')")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def cell(mode: str, key: str, fmt: str) -> str:
        values = [r[key] for r in results[mode]]
        low, high = fmt.format(min(values)), fmt.format(max(values))
        spread = "" if low == high else f" ({low}–{high})"
        return fmt.format(statistics.median(values)) + spread

    lines = [
        "## Streaming on vs off for one big transaction (`bench/streaming.py`)", "",
        (f"PostgreSQL {server}, one {args.rows:,}-row INSERT transaction (default "
         f"logical_decoding_work_mem 64MB), captured live by pgfeed's Capture; median (and range) "
         f"of {args.rounds} rounds; {platform.machine()}, load average before the run "
         f"{' '.join(load)} (shared 2-core machine)."), "",
        "| | streamed (messages off) | whole at commit (messages on) |", "|---|---:|---:|"]
    rows_out = [("transaction on the source (s)", "txn_seconds", "{:.1f}"),
                ("COMMIT -> durable in pgfeed's log (s)", "commit_to_durable", "{:.2f}"),
                ("end to end (rows/s, INSERT start -> durable)", "rows_per_second", "{:,.0f}"),
                ("walsender CPU (s)", "walsender_cpu", "{:.1f}"),
                ("pgfeed process CPU (s)", "pgfeed_cpu", "{:.1f}"),
                ("source spill written (MB, spill_bytes)", "spill_mb", "{:.0f}"),
                ("source spill directory peak (MB)", "peak_spill_dir_mb", "{:.0f}"),
                ("streamed to pgfeed before commit (MB, stream_bytes)", "stream_mb", "{:.0f}")]
    names = list(MODES)
    for label, key, fmt in rows_out:
        lines.append(f"| {label} | {cell(names[0], key, fmt)} | {cell(names[1], key, fmt)} |")
    text = "\n".join(lines)
    print(text)
    if not args.no_results:
        write_section("streaming", text)


if __name__ == "__main__":
    main()
