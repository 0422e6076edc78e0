"""One big transaction committed while a backfill runs, with a feed's default options (issue 28).

What a production source sees from a default feed when an application commits a batch job's
transaction in the middle of a backfill: one throwaway PostgreSQL cluster, ``public.wide``
(``--backfill-rows`` rows, bench/backfill.py's table) and ``public.orders`` (empty), a
``pgfeed serve`` subprocess with a feed over both created with no option set, then:

1. ``POST /v1/feeds/bench/backfills`` for ``wide``;
2. while it runs, one ``--rows``-row INSERT into ``orders`` in a single transaction;
3. until the transaction is durable in pgfeed's log and the backfill is done.

Measured: the slot's ``pg_stat_replication_slots`` counters (``spill_bytes`` is what the
walsender wrote to the source's disk for this slot; ``stream_bytes`` what it streamed before the
commit), pgfeed's peak RSS (``VmHWM``) when the transaction is durable and after it was read
(``format=count`` pages of 10,000), the peak while a reader counts it and while one pages it
as JSON (pages of 1,000; each peak from the RSS before it, ``clear_refs``), COMMIT -> durable, whether any of the transaction's
changes were served before its COMMIT returned (polled during the INSERT), and that every one of
its changes is served after, under one commit position (``format=count`` pages).

Run: .venv/bin/python bench/big_txn.py [--rows 1000000] [--backfill-rows 2000000] [--pg-version 18] [--write]
``--write`` replaces bench/RESULTS.md between the big-txn markers.
"""

from __future__ import annotations

import argparse
import contextlib
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
from _serve_servers import FEED, Server, pgfeed_serve
from _workload import INSERT_SQL
from backfill import load

from pgfeed.localpg import LocalCluster
from pgfeed_client._cursor import parse_lsn

ORDERS = """
CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL, amount numeric(12,2) NOT NULL,
                     status text NOT NULL, note text, created_at timestamptz NOT NULL)
"""
RSS_LIMIT_MB = 200


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak(pid: int) -> None:
    """Start VmHWM again from the current RSS (``clear_refs`` 5), so a peak is one phase's."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def read_json(server: Server, cursor: str, limit: int) -> tuple[int, float]:
    """Page through everything after ``cursor`` as JSON changes of ``orders`` (``limit`` a page),
    as a client reading the transaction does: changes read, seconds."""
    total, nxt = 0, cursor
    t0 = time.perf_counter()
    while True:
        r = server.http.get(f"/v1/feeds/{FEED}/changes", params={
            "tables": "public.orders", "limit": limit, "after": nxt})
        total += r.content.count(b'"op":')
        nxt = r.headers["PgFeed-Next"]
        if r.headers["PgFeed-Has-More"] == "false":
            return total, time.perf_counter() - t0


def served(server: Server, cursor: str) -> tuple[int, str]:
    """How many changes of ``orders`` the feed serves after ``cursor`` (``format=count`` pages,
    no change read), and the last page's ``next``."""
    total, nxt = 0, cursor
    while True:
        page = server.http.get(f"/v1/feeds/{FEED}/changes", params={
            "tables": "public.orders", "format": "count", "limit": 10_000, "after": nxt}).json()
        total += page["count"]
        nxt = page["next"]
        if not page["has_more"]:
            return total, nxt


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(LocalCluster.start(args.pg_version))
        dsn = cluster.dsn()
        load(dsn, args.backfill_rows)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(ORDERS)
        server = stack.enter_context(pgfeed_serve(work / "data"))
        r = server.http.post("/v1/feeds", json={"name": FEED, "dsn": dsn,
                                                "tables": ["public.wide", "public.orders"]})
        if r.status_code != 201:
            raise RuntimeError(f"POST /v1/feeds: {r.status_code} {r.text}")
        while (feed := server.http.get(f"/v1/feeds/{FEED}").json())["state"] != "running":
            server.check()
            time.sleep(0.1)
        options = feed.get("options", {})
        before = server.http.get(f"/v1/feeds/{FEED}/changes", params={
            "format": "count", "after": "latest"}).json()["next"]
        r = server.http.post(f"/v1/feeds/{FEED}/backfills", json={"tables": ["public.wide"]})
        if r.status_code != 202:
            raise RuntimeError(f"POST backfills: {r.status_code} {r.text}")
        backfill_id = r.json()["id"]
        early: list[int] = []
        stop = threading.Event()

        def watch() -> None:  # anything of the transaction served before its COMMIT returned
            while not stop.is_set():
                early.append(served(server, before)[0])
                time.sleep(0.2)

        watcher = threading.Thread(target=watch, daemon=True)
        with psycopg.connect(dsn, autocommit=True) as conn:
            watcher.start()
            t0 = time.perf_counter()
            with conn.transaction():
                conn.execute(INSERT_SQL, (1, args.rows))
                end = parse_lsn(conn.execute("SELECT pg_current_wal_insert_lsn()::text")
                                .fetchone()[0])  # type: ignore[index]
            committed = time.perf_counter()
            stop.set()
            watcher.join()
            backfill_running = server.http.get(
                f"/v1/feeds/{FEED}/backfills/{backfill_id}").json()["state"] == "running"
            while parse_lsn(server.http.get(f"/v1/feeds/{FEED}").json()["head_lsn"]) < end:
                server.check()
                time.sleep(0.01)
            durable = time.perf_counter()
            rss_durable = peak_rss_mb(server.proc.pid)  # capture's peak, before any read of it
            slot = conn.execute(
                "SELECT spill_txns, spill_bytes, stream_txns, stream_bytes FROM "
                "pg_stat_replication_slots WHERE slot_name = %s",
                (feed["slot"],)).fetchone()
        while (b := server.http.get(f"/v1/feeds/{FEED}/backfills/{backfill_id}").json())["state"] \
                == "running":
            server.check()
            time.sleep(0.1)
        rss_before_read = rss_mb(server.proc.pid)
        reset_peak(server.proc.pid)
        count, _ = served(server, before)
        rss_count_read = peak_rss_mb(server.proc.pid)
        reset_peak(server.proc.pid)
        json_rows, json_s = read_json(server, before, 1000)
        rss_json_read = peak_rss_mb(server.proc.pid)
        assert slot is not None
        return {"options": options, "txn_s": committed - t0, "commit_to_durable_s": durable - committed,
                "backfill_running_at_commit": backfill_running, "backfill": b["state"],
                "backfill_rows": b.get("rows", b.get("rows_read")),
                "served_before_commit": max(early, default=0), "served_after": count,
                "spill_txns": slot[0], "spill_mb": slot[1] / 2**20, "stream_txns": slot[2],
                "stream_mb": slot[3] / 2**20, "rss_capture_mb": rss_durable,
                "rss_read_mb": max(rss_count_read, rss_json_read, rss_durable),
                "rss_before_read_mb": rss_before_read, "rss_count_read_mb": rss_count_read,
                "rss_json_read_mb": rss_json_read, "json_rows": json_rows, "json_s": json_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--backfill-rows", type=int, default=2_000_000)
    parser.add_argument("--pg-version", default="18")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    uptime = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    print(f"uptime before: {uptime}", flush=True)
    with tempfile.TemporaryDirectory(prefix="pgfeed-bench-bigtxn-") as work:
        res = run(args, Path(work))
    print(res, flush=True)
    ok = (res["spill_mb"] == 0 and res["rss_capture_mb"] <= RSS_LIMIT_MB
          and res["served_before_commit"] == 0 and res["served_after"] == args.rows
          and res["json_rows"] == args.rows)
    text = "\n".join([
        "## One big transaction beside a backfill, default options (`bench/big_txn.py`)", "",
        (f"PostgreSQL {args.pg_version} (throwaway cluster, default `logical_decoding_work_mem` "
         f"64MB), `pgfeed serve` with a feed created with no option set; a backfill of "
         f"{args.backfill_rows:,} rows of `wide` started, then one {args.rows:,}-row INSERT "
         f"transaction into `orders`. Load before: `{uptime}`."), "",
        "| | measured | target |", "|---|---:|---:|",
        f"| backfill still running at the COMMIT | {res['backfill_running_at_commit']} | yes |",
        f"| source spill written by the slot (MB, `spill_bytes`) | {res['spill_mb']:.0f} | 0 |",
        f"| streamed to pgfeed before the commit (MB, `stream_bytes`) | {res['stream_mb']:.0f} | |",
        (f"| pgfeed peak RSS until the transaction is durable (MB, VmHWM) "
         f"| {res['rss_capture_mb']:.0f} | ≤ {RSS_LIMIT_MB} |"),
        f"| pgfeed peak RSS after reading all of it (MB, VmHWM) | {res['rss_read_mb']:.0f} | |",
        f"| pgfeed RSS before the reads (MB, VmRSS) | {res['rss_before_read_mb']:.0f} | |",
        (f"| pgfeed peak RSS while a reader counts it, pages of 10,000 (MB, VmHWM from there) "
         f"| {res['rss_count_read_mb']:.0f} | |"),
        (f"| pgfeed peak RSS while a reader pages it as JSON, pages of 1,000 (MB) "
         f"| {res['rss_json_read_mb']:.0f} | |"),
        (f"| JSON read of it: changes, s | {res['json_rows']:,}, {res['json_s']:.1f} "
         f"| {args.rows:,} |"),
        f"| transaction on the source (s) | {res['txn_s']:.1f} | |",
        f"| COMMIT -> durable in pgfeed's log (s) | {res['commit_to_durable_s']:.2f} | |",
        f"| changes served before the COMMIT returned | {res['served_before_commit']:,} | 0 |",
        f"| changes served after | {res['served_after']:,} | {args.rows:,} |",
        f"| backfill | {res['backfill']} | done |", "",
        f"Targets met: {'yes' if ok and res['backfill'] == 'done' else 'NO'}."])
    print(text)
    if args.write:
        write_section("big-txn", text)


if __name__ == "__main__":
    main()
