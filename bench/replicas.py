"""Replicas benchmark: the PostgreSQL store against the embedded SQLite log, same run, same workload.

Throwaway PostgreSQL clusters with ``fsync=on`` (the store's commits are as durable as SQLite's
``synchronous=FULL``): one for the source, another for the store (``--store-on-source`` puts the
store in a second database of the source cluster instead: its writes then go through the source's
WAL, which the feed's walsender decodes and skips, and share its fsyncs). Two feeds
capture the same WAL: ``sq`` into a SQLite data dir, ``pg`` into the store. bench/capture.py's
workload (``--changes``, 10,000 rows a transaction at full scale) is loaded while neither server
runs, then:

1. Capture: each server alone, from its slot, until its log holds the whole workload; the rate
   counts from the moment the feed reports ``running`` (the PostgreSQL replica first takes the
   lease). Target: PostgreSQL store >= 0.7x SQLite.
2. Read: one HTTP client pages ``/changes`` (JSON, ``limit=10000``, each page parsed) from a fresh
   SQLite server, and from a fresh replica that does *not* lead the feed (the leader runs beside
   it). Target: >= 0.7x.
3. Latency: ``pgbench --rate`` (1,000 one-row commits/s) while a gRPC subscriber tails the feed
   from the non-leader replica: commit -> subscriber, as bench/serve.py measures it. Target: p99
   <= 50 ms.

Run: .venv/bin/python bench/replicas.py [--changes 300000] [--rate 1000] [--seconds 10] [--write]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import _checkout  # noqa: F401  (this checkout's packages first: sys.path, PYTHONPATH)
import _serve_phases as P
import _serve_servers as S
import psycopg
from _results import write_section
from _serve_servers import Server

from pgfeed.localpg import LocalCluster
from pgfeed_client._cursor import parse_lsn

CAPTURE_TARGET = READ_TARGET = 0.7
P99_TARGET_MS = 50.0


def serve(log: Path, *args: str) -> contextlib.AbstractContextManager[Server]:
    """``pgfeed serve`` with ``args`` on free ports (bench/serve.py's ``run_server``)."""
    return S.run_server(log, *args)


def status(server: Server, feed: str) -> dict[str, Any]:
    r = server.http.get(f"/v1/feeds/{feed}")
    r.raise_for_status()
    return r.json()  # type: ignore[no-any-return]


def wait_for(server: Server, feed: str, done: Any, timeout: float, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        server.check()
        st = status(server, feed)
        if st["state"] == "failed":
            raise RuntimeError(f"feed {feed} failed: {st['last_error']}")
        if done(st):
            return st
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not after {timeout:.0f} s: {st}")
        time.sleep(0.02)


def capture_rate(server: Server, feed: str, changes: int, before_last: int) -> tuple[float, float]:
    """(changes/s, seconds) from the feed's ``running`` until its log holds the workload."""
    wait_for(server, feed, lambda st: st["state"] == "running", 60, "capture running")
    t0 = time.perf_counter()
    wait_for(server, feed, lambda st: st["log"] and st["log"]["change_count"] >= changes
             and parse_lsn(st["head_lsn"]) >= before_last, 900, "the workload captured")
    seconds = time.perf_counter() - t0
    return changes / seconds, seconds


def http_rate(server: Server, feed: str, changes: int) -> float:
    S.FEED = feed
    rows, seconds = P.http_read(server.http, {"limit": 10_000}, False)
    if rows != changes:
        raise RuntimeError(f"read {rows:,} changes of feed {feed}, expected {changes:,}")
    return rows / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=300_000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--pg-version", default="18")
    parser.add_argument("--store-on-source", action="store_true",
                        help="the store in a database of the source cluster, not a cluster of its own")
    parser.add_argument("--write", action="store_true", help="record in bench/RESULTS.md")
    args = parser.parse_args()
    load = os.getloadavg()
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="pgfeed-bench-replicas-"))
        cluster = stack.enter_context(LocalCluster.start(args.pg_version, settings={"fsync": "on"}))
        store_cluster = cluster if args.store_on_source else stack.enter_context(
            LocalCluster.start(args.pg_version, settings={"fsync": "on"}))
        result = run(cluster, store_cluster, args, Path(tmp))
    text = section(args, result, load)
    print(text)
    if args.write:
        write_section("replicas", text)


def run(cluster: LocalCluster, store_cluster: LocalCluster, args: argparse.Namespace,
        work: Path) -> dict[str, Any]:
    from capture import SCHEMA, run_workload  # bench/capture.py: the 1M-change workload, scaled

    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench")
        server_text = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    with psycopg.connect(store_cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE store")
    dsn, store = cluster.dsn("bench"), store_cluster.dsn("store")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA.split("CREATE PUBLICATION")[0])
        conn.execute(P.TICKS)
    data = work / "data"
    sqlite_args = ("--data-dir", str(data))
    log = work / "serve.log"

    def pg_args(replica: str) -> tuple[str, ...]:
        return ("--store", store, "--replica-id", replica)

    for feed, server_args in (("sq", sqlite_args), ("pg", pg_args("leader"))):
        with serve(log, *server_args) as server:
            body = {"name": feed, "dsn": dsn, "tables": ["public.orders", "public.ticks"]}
            r = server.http.post("/v1/feeds", json=body)
            if r.status_code != 201:
                raise RuntimeError(f"POST /v1/feeds: {r.status_code} {r.text}")
            wait_for(server, feed, lambda st: st["state"] == "running", 30, "feed running")
    with psycopg.connect(dsn, autocommit=True) as conn:
        t = time.perf_counter()
        changes, before_last, _ = run_workload(conn, args.changes / 1_000_000)
        print(f"PostgreSQL {server_text}: {changes:,} changes loaded in {time.perf_counter() - t:.1f} s",
              flush=True)
    P.settle(dsn)
    out: dict[str, Any] = {"server": server_text, "changes": changes}
    with serve(log, *sqlite_args) as server:
        out["capture_sqlite"], secs = capture_rate(server, "sq", changes, before_last)
        print(f"capture into SQLite: {out['capture_sqlite']:,.0f} changes/s ({secs:.1f} s)", flush=True)
    with serve(log, *sqlite_args) as server:
        out["read_sqlite"] = http_rate(server, "sq", changes)
        print(f"HTTP read from SQLite: {out['read_sqlite']:,.0f} changes/s", flush=True)
    with serve(log, *pg_args("leader")) as leader:
        out["capture_pg"], secs = capture_rate(leader, "pg", changes, before_last)
        print(f"capture into the store: {out['capture_pg']:,.0f} changes/s ({secs:.1f} s)", flush=True)
        with serve(log, *pg_args("reader")) as reader:
            lead = status(reader, "pg")["leader"]
            if not lead or lead["replica"] != "leader":
                raise RuntimeError(f"the reader replica must not lead the feed: {lead}")
            out["read_pg"] = http_rate(reader, "pg", changes)
            print(f"HTTP read from a non-leader: {out['read_pg']:,.0f} changes/s", flush=True)
            S.FEED = "pg"
            out["latency"] = report("the non-leader", P.latency(
                reader, cluster.bindir, dsn, args.rate, args.seconds, args.connections, work))
            out["latency_leader"] = report("the leader", P.latency(
                leader, cluster.bindir, dsn, args.rate, args.seconds, args.connections, work))
    with serve(log, *sqlite_args) as server:  # last: the pg feed's slot would take its commits too
        with psycopg.connect(dsn, autocommit=True) as conn:  # first catch up on the phases above
            end = int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'").fetchone()[0])  # type: ignore[index]
        wait_for(server, "sq", lambda st: parse_lsn(st["confirmed_lsn"]) >= end, 300, "SQLite caught up")
        S.FEED = "sq"
        out["latency_sqlite"] = report("SQLite", P.latency(server, cluster.bindir, dsn, args.rate,
                                                           args.seconds, args.connections, work))
    return out


def report(where: str, lat: Any) -> Any:
    print(f"latency through {where} at {lat.rate:,.0f} commits/s: {latency_text(lat)}", flush=True)
    return lat


def latency_text(lat: Any) -> str:
    return (f"p50 {lat.pct(50):.1f} ms, p99 {lat.pct(99):.1f} ms, max {lat.worst:.1f} ms, "
            f"{lat.missing} missing")


def section(args: argparse.Namespace, r: dict[str, Any], load: tuple[float, float, float]) -> str:
    lat = r["latency"]
    cap, read = r["capture_pg"] / r["capture_sqlite"], r["read_pg"] / r["read_sqlite"]
    where = "another database of the source cluster" if args.store_on_source else "a cluster of its own"

    def ok(good: bool) -> str:
        return "met" if good else "**missed**"

    return "\n".join([
        "## Replicas: the PostgreSQL store vs SQLite (bench/replicas.py)",
        "",
        (f"{platform.machine()}, {os.cpu_count()} cores, load before the run "
        f"{load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}; PostgreSQL {r['server']} with `fsync=on` as the "
        f"source and as the store ({where}); {r['changes']:,} changes "
        "(bench/capture.py's workload, scaled)."),
        "",
        "| measure | SQLite | PostgreSQL store | ratio | target |",
        "| --- | --- | --- | --- | --- |",
        (f"| capture (changes/s) | {r['capture_sqlite']:,.0f} | {r['capture_pg']:,.0f} | {cap:.2f} | "
        f">= {CAPTURE_TARGET} ({ok(cap >= CAPTURE_TARGET)}) |"),
        (f"| one-client HTTP JSON read (changes/s; store: a non-leader replica) | {r['read_sqlite']:,.0f} | "
        f"{r['read_pg']:,.0f} | {read:.2f} | >= {READ_TARGET} ({ok(read >= READ_TARGET)}) |"),
        "",
        (f"Commit -> gRPC subscriber on the non-leader replica, pgbench at {args.rate:g} one-row "
        f"commits/s ({lat.rate:,.0f} measured over {lat.seconds:.1f} s, {args.connections} connections): "
        f"p50 {lat.pct(50):.1f} ms, p99 {lat.pct(99):.1f} ms, max {lat.worst:.1f} ms, "
        f"{lat.missing} missing; target p99 <= {P99_TARGET_MS:g} ms ({ok(lat.pct(99) <= P99_TARGET_MS)})."),
        (f"Same phase through the leader: {latency_text(r['latency_leader'])}; through a SQLite server "
        f"(alone): {latency_text(r['latency_sqlite'])}."),
    ])


if __name__ == "__main__":
    main()
