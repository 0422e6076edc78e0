"""Serving benchmark: the real ``pgfeed serve`` over one captured workload, read three ways.

One run starts a throwaway PostgreSQL cluster and a ``pgfeed serve`` subprocess with its own data
dir (so no client shares its GIL), creates a feed over ``public.orders`` and ``public.ticks``
(``POST /v1/feeds``), loads bench/capture.py's workload (1,000,000 changes by default: 400k
insert, 400k update, 200k delete, 10,000 rows a transaction) and waits until the feed's log holds
all of it. Then, each read best of ``--runs``, one client at a time, each read (and the latency
phase) against a freshly started server process on the same data dir, so that nothing the HTTP
read-ahead kept from an earlier read is reused:

1. HTTP read: one httpx client pages ``/v1/feeds/bench/changes`` from ``earliest`` to the end:
   JSON at ``limit=10000`` (the page size of the target), each page parsed as pgfeed's client
   library parses it (``pgfeed_client._http_base.decode``: ``orjson``, the cyclic GC paused meanwhile);
   and Arrow (``format=arrow``, typed: ``tables=public.orders``) at ``limit=100000``, each page
   read with ``pyarrow``.
2. gRPC read: one client ``Subscribe``s from ``earliest`` with the raw ``pgfeed.v1`` stubs (each
   frame parsed into a ``Transaction``) until it has counted every change.
3. Live latency: a gRPC subscriber tails from ``latest`` (``tables=public.ticks``) while
   ``pgbench --rate`` (PostgreSQL's own load generator in C: Poisson arrivals, little CPU)
   commits one-row INSERT transactions at ``--rate`` (2,000/s) over ``--connections``
   connections for ``--seconds``, after 1 s of warm-up; each row carries ``clock_timestamp()``
   taken inside its INSERT, so latency = the subscriber's receive time (``time.time``, the same
   clock) minus a moment before the commit: the commit itself counts. ``--sweep`` measures lower
   rates first. Afterwards a gRPC replay of those one-row transactions (from the log, nothing
   live) gives the Subscribe path's rate in transactions/s.

CPU seconds of the server, of the cluster, of this script's processes and of everything else on
the machine are recorded for every measurement (shared machines are noisy). ``--py-spy DIR``
records the server with py-spy during each phase and prints where the samples went.

Run: .venv/bin/python bench/serve.py [--changes N] [--runs 3] [--pg-version 18] [--write]
``--write`` replaces bench/RESULTS.md between the serve markers; without it, results are printed.
Everything it starts (cluster, server, pgbench) is stopped on exit, on errors and on SIGTERM too.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
import _checkout  # noqa: F401  (this checkout's packages first: sys.path, PYTHONPATH)

sys.path.insert(0, str(BENCH))

import psycopg
from _results import write_section
from _serve_cpu import load_text
from _serve_phases import TICKS, Rate, grpc_read, http_read, latency, reference_reads, settle
from _serve_report import _print_latency, _section
from _serve_servers import Profiler, Server, Service, create_feed, feed_status, wait_captured

from pgfeed.localpg import LocalCluster
from pgfeed_client._cursor import format_lsn, parse_lsn

RESULTS = BENCH / "RESULTS.md"


# -- main --------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--changes", type=int, default=1_000_000, help="size of the workload")
    ap.add_argument("--runs", type=int, default=3, help="runs of each read (the best is reported)")
    ap.add_argument("--pg-version", default="18", help="PostgreSQL major (18 or 15)")
    ap.add_argument("--json-limit", type=int, default=10_000, help="changes a JSON page")
    ap.add_argument("--arrow-limit", type=int, default=100_000, help="changes an Arrow page")
    ap.add_argument("--rate", type=float, default=2000, help="transactions/s pgbench commits in the latency phase")
    ap.add_argument("--seconds", type=float, default=10, help="measured seconds at --rate")
    ap.add_argument("--sweep", type=lambda t: [float(x) for x in t.split(",") if x],
                    default=[500.0, 1000.0], metavar="RATES",
                    help="measure latency at these rates first (default 500,1000; '' for none)")
    ap.add_argument("--sweep-seconds", type=float, default=5, help="measured seconds per sweep rate")
    ap.add_argument("--connections", type=int, default=4, help="pgbench connections")
    ap.add_argument("--py-spy", type=Path, metavar="DIR",
                    help="record the server with py-spy ($PY_SPY or on PATH) during each phase's "
                         "first run into DIR and print where the samples went")
    ap.add_argument("--write", action="store_true", help="update bench/RESULTS.md (serve section)")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    # SIGTERM unwinds like Ctrl-C, so the server, pgbench and the cluster are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t0 = time.monotonic()
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="pgfeed-bench-serve-"))
    try:
        with LocalCluster.start(args.pg_version) as cluster:
            result = _bench(cluster, args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["wall"] = time.monotonic() - t0
    result["load"] = (load_before, os.getloadavg())
    print(f"whole run {result['wall']:.0f} s; load average (1/5/15 min) before "
          f"{load_text(load_before)}, after {load_text(os.getloadavg())}")
    if args.write:
        write_section("serve", _section(args, result))
        print(f"wrote {RESULTS.relative_to(ROOT)}")


def _bench(cluster: LocalCluster, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from capture import SCHEMA, run_workload  # bench/capture.py: the same 1M-change workload

    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench")
    dsn = cluster.dsn("bench")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA.split("CREATE PUBLICATION")[0])  # pgfeed makes its own publication
        conn.execute(TICKS)
        server_text = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    profiler = Profiler(args.py_spy)
    postmaster = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
    service = Service(work / "data", postmaster)
    try:
        server = service.server
        create_feed(server, dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            t0 = time.perf_counter()
            changes, before_last, end = run_workload(conn, args.changes / 1_000_000)
            load_seconds = time.perf_counter() - t0
        per_txn = max(1, int(10_000 * min(args.changes / 1_000_000, 1.0)))  # as run_workload
        waited = wait_captured(server, changes, before_last, timeout=600)
        print(f"PostgreSQL {server_text}: workload of {changes:,} changes in {load_seconds:.1f} s, "
              f"all in the feed's log {waited:.1f} s later (WAL end {format_lsn(end)})", flush=True)

        rates = {
            "http_json": Rate(f"HTTP JSON `/changes`, `limit={args.json_limit}`, each page "
                              "parsed (orjson, GC paused)", changes),
            "http_arrow": Rate(f"HTTP Arrow `/changes?format=arrow` (typed, "
                               f"`tables=public.orders`), `limit={args.arrow_limit}`", changes),
            "grpc": Rate("gRPC `Subscribe` from `earliest`, raw stubs (each frame parsed)", changes),
        }
        readers: dict[str, Callable[[Server], int]] = {
            "http_json": lambda srv: http_read(srv.http, {"limit": args.json_limit}, False)[0],
            "http_arrow": lambda srv: http_read(srv.http, {"limit": args.arrow_limit, "format": "arrow",
                                                           "tables": "public.orders"}, True)[0],
            "grpc": lambda srv: grpc_read(srv.grpc_target, "earliest",
                                          lambda n, _f, _t: n >= changes)[0],
        }
        for run in range(args.runs):
            for name, rate in rates.items():
                rate.name = name.replace("_", " ").replace("http", "HTTP").replace("grpc", "gRPC read")
                if rate.seconds or name != "http_json":
                    server = service.restart()  # a fresh server process for every read
                with (profiler.phase(server, name) if run == 0 else contextlib.nullcontext(),
                      server.cpu() as cpu):
                    t = time.perf_counter()
                    rows = readers[name](server)
                    seconds = time.perf_counter() - t
                server.check()
                if rows != changes:
                    raise RuntimeError(f"{rate.label}: read {rows:,} changes, expected {changes:,}")
                rate.seconds.append(seconds)
                rate.cpu.append(cpu)
                print(f"run {run + 1} {name:10s} {seconds:6.2f} s {changes / seconds:10,.0f} "
                      f"changes/s  {cpu.text()}", flush=True)

        reference_reads(rates, args, server, work, postmaster)
        settled = settle(dsn)
        print(f"settled the source before the latency phases: {settled}", flush=True)
        server = service.restart()
        ticks_from = feed_status(server)["head_lsn"]
        latencies = []
        for i, tx_rate in enumerate([*args.sweep, args.rate]):
            last = i == len(args.sweep)
            with profiler.phase(server, "latency") if last else contextlib.nullcontext():
                latencies.append(latency(server, cluster.bindir, dsn, tx_rate, args.seconds if last else
                                         args.sweep_seconds, args.connections, work))
            server.check()
            _print_latency(latencies[-1])

        # The Subscribe path's rate for one-row transactions, replayed from the log.
        ticks_to = parse_lsn(feed_status(server)["head_lsn"])
        with psycopg.connect(dsn, autocommit=True) as conn:
            ticks = int(conn.execute("SELECT count(*) FROM ticks").fetchone()[0])  # type: ignore[index]
        replay = Rate("gRPC `Subscribe` replay of the latency phases' one-row transactions "
                      "(from the log)", ticks, "transactions/s", "gRPC replay")
        for _ in range(args.runs):
            with server.cpu() as cpu:
                rows, frames, seconds = grpc_read(
                    server.grpc_target, ticks_from,
                    lambda _n, _f, txn: txn.commit_lsn >= ticks_to and txn.final)
            if rows != ticks or frames != ticks:
                raise RuntimeError(f"replay: {rows:,} changes in {frames:,} frames, expected {ticks:,}")
            replay.seconds.append(seconds)
            replay.cpu.append(cpu)
        print(f"replay of {ticks:,} one-row transactions: best {replay.best:,.0f} transactions/s "
              f"({replay.best_cpu().text()})", flush=True)
        server.check()
    finally:
        service.close()
    for rate in rates.values():
        print(f"{rate.label}: best {rate.best:,.0f} changes/s, {rate.server_us():.1f} µs of server "
              f"CPU a change")
    return {"server": server_text, "changes": changes, "per_txn": per_txn,
            "load_seconds": load_seconds,
            "capture_wait": waited, "rates": rates, "latencies": latencies, "replay": replay,
            "settled": settled}


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
