"""Backfill benchmark: rows/s reading a wide table into a feed, against COPY reading it at all.

One run starts a throwaway PostgreSQL cluster, loads ``public.wide`` (bigint key, text, numeric,
timestamptz, jsonb; ``--rows`` rows), VACUUM ANALYZEs and checkpoints it, then:

1. Reference: ``COPY (SELECT … FROM wide) TO STDOUT`` read by psycopg, written to /dev/null (the
   physical reference: reading the table at all, through a client), once a run.
2. Backfill alone: a ``pgfeed serve`` subprocess with a feed over ``wide`` and ``ticks``;
   ``POST /v1/feeds/bench/backfills`` (``--chunk-rows``, ``--parallel``) until ``done``; rows/s
   from the backfill's own created/finished times, right after that run's COPY; the headline
   ratio is the median over runs of each backfill against its own COPY; the source's extra load
   (postgres CPU, WAL written while it ran: the heartbeat only, chunks write nothing since 28.1).
3. Backfill with a live subscriber: a gRPC subscriber tails ``ticks`` from ``latest`` while
   ``pgbench --rate`` (``--live-rate``, 500/s) commits one-row inserts, and the table is backfilled
   again; commit -> subscriber latency (bench/serve.py's method: each row carries its INSERT's
   ``clock_timestamp()``) of the rows committed while the backfill ran; its rate against the
   median COPY.

Run: .venv/bin/python bench/backfill.py [--rows N] [--runs 2] [--pg-version 18] [--write]
``--write`` replaces bench/RESULTS.md between the backfill markers.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
import _checkout  # noqa: F401  (this checkout's packages first: sys.path, PYTHONPATH)

sys.path.insert(0, str(BENCH))

import psycopg
from _results import write_section
from _serve_cpu import Cpu, tree_cpu
from _serve_phases import TICKS, Subscriber, pgbench
from _serve_servers import FEED, Server, pgfeed_serve

from pgfeed.localpg import LocalCluster

# issue 28's targets: alone >= 0.9x COPY; beside live commits >= 0.5x COPY at live p99 <= 20 ms
TARGET_RATIO = 0.9
LIVE_TARGET_RATIO = 0.5
P99_TARGET_MS = 20.0
LOAD = """
INSERT INTO wide (id, name, amount, at, doc)
SELECT g, 'customer ' || g || ' ' || md5(g::text), (g %% 100000) * 1.37, '2026-01-01'::timestamptz
       + g * interval '1 second', jsonb_build_object('id', g, 'tags', jsonb_build_array('a', 'b'),
       'score', g %% 97, 'note', 'row number ' || g)
FROM generate_series(%s::bigint, %s::bigint) g
"""
COLUMNS = "id, name, amount, at, doc"


def load(dsn: str, rows: int) -> float:
    t = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE wide (id bigint PRIMARY KEY, name text, amount numeric(14,2), "
                     "at timestamptz, doc jsonb)")
        conn.execute(TICKS)
        step = 500_000
        for start in range(1, rows + 1, step):
            conn.execute(LOAD, (start, min(rows, start + step - 1)))
        conn.execute("VACUUM (ANALYZE) wide")
        conn.execute("CHECKPOINT")
    os.sync()
    return time.monotonic() - t


def copy_rate(dsn: str, rows: int) -> tuple[float, int]:
    """rows/s of COPY (SELECT …) TO STDOUT read by a psycopg client into /dev/null; bytes read."""
    nbytes = 0
    t = time.monotonic()
    with psycopg.connect(dsn) as conn, open(os.devnull, "wb") as sink, \
            conn.cursor().copy(f"COPY (SELECT {COLUMNS} FROM wide) TO STDOUT") as copy:
        for block in copy:
            sink.write(block)
            nbytes += len(block)
    return rows / (time.monotonic() - t), nbytes


def per_row(cpu: Cpu, rows: int) -> str:
    """CPU a row (comparable across loaded and quiet runs, unlike rates)."""
    return (f"server {cpu.server / rows * 1e6:.2f} µs a row, postgres "
            f"{cpu.postgres / rows * 1e6:.2f} µs a row")


def wal_lsn(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return int(row[0]) if row else 0


def backfill(server: Server, chunk_rows: int, parallel: int) -> dict[str, Any]:
    r = server.http.post(f"/v1/feeds/{FEED}/backfills", json={
        "tables": ["public.wide"], "chunk_rows": chunk_rows, "parallel": parallel})
    if r.status_code != 202:
        raise RuntimeError(f"POST backfills: {r.status_code} {r.text}")
    backfill_id = r.json()["id"]
    while True:
        server.check()
        b: dict[str, Any] = server.http.get(f"/v1/feeds/{FEED}/backfills/{backfill_id}").json()
        if b["state"] != "running":
            if b["state"] != "done":
                raise RuntimeError(f"backfill {b['state']}: {b['last_error']}")
            return b
        time.sleep(0.05)


def create_feed(server: Server, dsn: str) -> None:
    r = server.http.post("/v1/feeds", json={"name": FEED, "dsn": dsn,
                                            "tables": ["public.wide", "public.ticks"]})
    if r.status_code != 201:
        raise RuntimeError(f"POST /v1/feeds: {r.status_code} {r.text}")
    deadline = time.monotonic() + 30
    while server.http.get(f"/v1/feeds/{FEED}").json()["state"] != "running":
        if time.monotonic() > deadline:
            raise RuntimeError("feed not running after 30 s")
        time.sleep(0.1)


def pct(values: list[float], p: float) -> float:
    data = sorted(values)
    if not data:
        return float("nan")
    return data[min(len(data) - 1, max(0, round(p / 100 * len(data)) - 1))]


def live_phase(server: Server, cluster: LocalCluster, dsn: str, args: argparse.Namespace,
               seconds: float, work: Path, chunk_rows: int) -> dict[str, Any]:
    subscriber = Subscriber(server.grpc_target)
    result: dict[str, Any] = {}
    try:
        time.sleep(0.5)
        runner = threading.Thread(target=lambda: result.update(commit_ms=pgbench(
            cluster.bindir, dsn, args.live_rate, math.ceil(seconds), 2, work)), daemon=True)
        runner.start()
        time.sleep(1.0)  # warm-up commits, before the backfill starts
        t0 = time.time()
        done = backfill(server, chunk_rows, args.live_parallel or args.parallel)
        t1 = time.time()
        runner.join()
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute("SELECT id, sent FROM ticks WHERE sent BETWEEN %s AND %s",
                                (t0, t1)).fetchall()
        deadline = time.monotonic() + 30
        while any(i not in subscriber.received for i, _ in rows[-20:]) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        subscriber.close()
    received = subscriber.received
    samples = [(received[i] - sent) * 1000 for i, sent in rows if i in received]
    return {"seconds": t1 - t0, "rows_per_s": args.rows / (t1 - t0), "commits": len(rows),
            "missing": len(rows) - len(samples), "p50": pct(samples, 50), "p99": pct(samples, 99),
            "max": max(samples, default=float("nan")), "backfill": done}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--chunk-rows", type=int, default=10_000)
    parser.add_argument("--live-chunk-rows", type=int, default=0,
                        help="chunk_rows of the backfill run beside the live subscriber (0: "
                             "--chunk-rows; chunks are stored in pieces between live commits "
                             "whatever their size)")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--live-rate", type=float, default=500.0)
    parser.add_argument("--live-parallel", type=int, default=0,
                        help="parallel of the backfill beside the live subscriber (0: --parallel)")
    parser.add_argument("--pg-version", default="18")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    uptime = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    print(f"uptime before: {uptime}", flush=True)
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(LocalCluster.start(args.pg_version))
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pgfeed-bench-bf-")))
        dsn = cluster.dsn()
        loaded = load(dsn, args.rows)
        print(f"loaded {args.rows:,} rows in {loaded:.1f} s", flush=True)
        server = stack.enter_context(pgfeed_serve(work / "data"))
        with psycopg.connect(dsn, autocommit=True) as conn:
            postmaster = conn.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = "
                                      "'checkpointer'").fetchone()
        # the postmaster is the checkpointer's parent: measure the whole cluster's CPU
        ppid = int(Path(f"/proc/{postmaster[0]}/stat").read_text().split()[3]) if postmaster else 0
        server.postmaster = ppid
        create_feed(server, dsn)
        copies: list[tuple[float, int]] = []
        alone = []
        for _ in range(args.runs):  # COPY then backfill, in pairs: the machine's noise hits both
            copies.append(copy_rate(dsn, args.rows))
            print(f"COPY to /dev/null: {copies[-1][0]:,.0f} rows/s "
                  f"({copies[-1][1] / args.rows:.0f} B/row)", flush=True)
            w0 = wal_lsn(dsn)
            pg0 = tree_cpu(ppid)
            with Cpu.measure(server.proc.pid, ppid) as cpu:
                b = backfill(server, args.chunk_rows, args.parallel)
            seconds = b["finished_at"] - b["created_at"]
            alone.append({"rate": args.rows / seconds, "seconds": seconds, "chunks": b["chunks"],
                          "wal": wal_lsn(dsn) - w0, "cpu": cpu, "pg_cpu": tree_cpu(ppid) - pg0,
                          "copy": copies[-1][0]})
            print(f"backfill: {alone[-1]['rate']:,.0f} rows/s ({seconds:.1f} s, {b['chunks']} "
                  f"chunks, WAL {alone[-1]['wal'] / 1024:.0f} KiB); {cpu.text()}; "
                  f"{per_row(cpu, args.rows)}", flush=True)
        copy_best = max(r for r, _ in copies)
        best = max(alone, key=lambda a: a["rate"])
        args.live_chunk_rows = args.live_chunk_rows or args.chunk_rows
        live = live_phase(server, cluster, dsn, args, best["seconds"] * 4 + 5, work,
                          args.live_chunk_rows)
        print(f"with a live subscriber at {args.live_rate:.0f} commits/s: backfill "
              f"{live['rows_per_s']:,.0f} rows/s; latency p50 {live['p50']:.1f} ms, p99 "
              f"{live['p99']:.1f} ms, max {live['max']:.1f} ms over {live['commits']} commits "
              f"({live['missing']} missing)", flush=True)
    uptime_after = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    text = section(args, uptime, uptime_after, copy_best, copies[0][1], alone, best, live)
    print(text)
    if args.write:
        write_section("backfill", text)


def section(args: argparse.Namespace, uptime: str, uptime_after: str, copy_best: float,
            copy_bytes: int, alone: list[dict[str, Any]], best: dict[str, Any],
            live: dict[str, Any]) -> str:
    # Each run's backfill against the COPY measured just before it: on these noisy machines the
    # reference itself moves by up to a quarter between runs, and pairing the best COPY with the
    # best backfill compared two different moments.
    ratio = statistics.median(a["rate"] / a["copy"] for a in alone)
    copy_median = statistics.median(a["copy"] for a in alone)
    live_ratio = live["rows_per_s"] / copy_median
    pairs = ", ".join(f"{a['rate'] / a['copy']:.2f}x ({a['rate']:,.0f} / {a['copy']:,.0f})"
                      for a in alone)
    cpu: Cpu = best["cpu"]
    per_chunk = best["wal"] / max(1, best["chunks"])
    return f"""## Backfill (bench/backfill.py)

{args.rows:,} rows of `wide` (bigint key, text, numeric, timestamptz, jsonb; {copy_bytes / args.rows:.0f}
bytes a row in COPY text), PostgreSQL {args.pg_version} (throwaway cluster, fsync off), `pgfeed serve`
subprocess, SQLite log (backfill pieces in piece files), `chunk_rows` {args.chunk_rows:,}, `parallel` {args.parallel}, {args.runs} runs.
Machine: 2 cores shared with other work; `uptime` before: `{uptime}`; after: `{uptime_after}`.

| measurement | result | target |
| --- | --- | --- |
| `COPY (SELECT …) TO STDOUT` -> /dev/null (psycopg client) | {copy_median:,.0f} rows/s (median; best {copy_best:,.0f}) | reference |
| backfill into the feed, nothing else running | {best['rate']:,.0f} rows/s best ({best['seconds']:.1f} s, {best['chunks']} chunks); **{ratio:.2f}x** COPY (median of each run against its own COPY) | >= {TARGET_RATIO}x COPY: {"met" if ratio >= TARGET_RATIO else "NOT met"} |
| backfill with a live subscriber at {args.live_rate:.0f} commits/s (`chunk_rows` {args.live_chunk_rows:,}, `parallel` {args.live_parallel or args.parallel}) | {live['rows_per_s']:,.0f} rows/s (**{live_ratio:.2f}x** the median COPY; {live['rows_per_s'] / copy_best:.2f}x the best; chunks are stored in the writer's gaps between live commits) | >= {LIVE_TARGET_RATIO}x COPY: {"met" if live_ratio >= LIVE_TARGET_RATIO else "NOT met"} |
| commit -> subscriber latency during that backfill | p50 {live['p50']:.1f} ms, p99 {live['p99']:.1f} ms, max {live['max']:.1f} ms ({live['commits']:,} commits, {live['missing']} missing) | p99 <= {P99_TARGET_MS:.0f} ms: {"met" if live['p99'] <= P99_TARGET_MS else "NOT met"} |

Source's extra load while backfilling alone: postgres {best['pg_cpu']:.1f} CPU-s
({best['pg_cpu'] / best['seconds']:.0%} of a core; it runs the chunks' COPY and the walsender);
WAL written {best['wal'] / 1024:,.0f} KiB, about {per_chunk:,.0f} bytes a chunk (the chunks write
nothing since issue 28.1: pgfeed's heartbeat and the source's own). pgfeed: {cpu.text()};
{per_row(cpu, args.rows)}.
Each run measured COPY then the backfill, back to back (backfill / COPY): {pairs}.
"""


if __name__ == "__main__":
    main()
