"""Structured Streaming with the pgfeed data source against a real ``pgfeed serve``, beside Spark's
own floor, in one run and one SparkSession (local[2], the suite's settings).

Setup: a throwaway PostgreSQL, ``pgfeed serve``, a feed over ``orders`` and ``ticks``, and
bench/capture.py's workload on ``orders`` (``--changes``: insert, update, delete; 10k rows a
transaction), captured before anything is timed.

1. Throughput: a typed read of ``orders`` over ``(earliest, head]`` to the ``noop`` sink, as a batch
   (``spark.read``) and as a streaming query with ``trigger(availableNow=True)`` (a fresh
   checkpoint each run). Both use the warm session (its start is in neither); the streaming
   figure is wall time from ``start()`` to termination (query start, planning, checkpoint
   writes and commits included), and, as "in batches", the sum of its micro-batches'
   ``triggerExecution`` times.
2. Small micro-batches: a writer commits ``--small`` rows into ``ticks`` every ``--interval``
   seconds while a query with ``trigger(processingTime=interval)`` streams ``ticks`` to ``noop``;
   the same trigger and sink over Spark's built-in ``rate`` source (``--small`` rows an interval)
   is the floor. Reported: per-trigger time (``triggerExecution``) of batches with rows and its
   parts (``durationMs``), and for pgfeed the end-to-end time from a transaction's COMMIT
   returning to the end of the micro-batch that wrote it.

Run: flock /work/wt/_notes/bench.lock .venv/bin/python bench/spark_streaming.py [--write]
Results go to bench/RESULTS.md between the spark-streaming markers.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
import _checkout  # noqa: F401  (this checkout's packages first: sys.path, PYTHONPATH)

sys.path.insert(0, str(BENCH))

import psycopg
from _results import write_section
from _serve_phases import TICKS
from _serve_servers import FEED, create_feed, pgfeed_serve, wait_captured
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from pgfeed.localpg import LocalCluster
from pgfeed_client import FeedClient, parse_cursor
from pgfeed_client._cursor import parse_lsn

THROUGHPUT_TARGET = 0.8  # streaming availableNow / batch, same range, same sink
LATENCY_TARGET = 2.0  # pgfeed small-batch trigger time / the rate source's
PARTS = ("latestOffset", "queryPlanning", "getBatch", "addBatch", "walCommit", "commitOffsets")


def _source(spark: Any, url: str, table: str, stream: bool, **options: Any) -> Any:
    reader = spark.readStream if stream else spark.read
    r = reader.format("pgfeed").option("url", url).option("feed", FEED).option("table", table)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _progress(query: Any) -> list[dict[str, Any]]:
    return [p if isinstance(p, dict) else p.jsonValue() for p in query.recentProgress]


# -- 1. throughput ------------------------------------------------------------------------------

def _available_now(sdf: Any, checkpoint: Path) -> dict[str, Any]:
    """One availableNow run to noop: wall time start() to end, start() to the first trigger
    (the query's own start), time in micro-batches (and in planning their ends:
    ``latestOffset``) and rows."""
    t0, t_wall = time.perf_counter(), time.time()
    q = (sdf.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    wall = time.perf_counter() - t0
    every = _progress(q)
    shutil.rmtree(checkpoint, ignore_errors=True)
    first = datetime.fromisoformat(every[0]["timestamp"]).timestamp() if every else t_wall
    progress = [p for p in every if p["numInputRows"]]
    return {"wall": wall, "start": first - t_wall, "batches": len(progress),
            "in_batches": sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000,
            "planning_ends": sum(p["durationMs"].get("latestOffset", 0) for p in progress) / 1000,
            "rows": sum(p["numInputRows"] for p in progress)}


def throughput(spark: Any, url: str, head: str, repeat: int, partitions: int,
               work: Path, max_rows: int) -> dict[str, Any]:
    opts = {"partitions": partitions}
    rows = _source(spark, url, "public.orders", False, to=head, **opts).count()  # warm-up
    batch, runs, capped, rate_start = [], [], [], []
    for run in range(repeat):
        df = _source(spark, url, "public.orders", False, to=head, **opts)
        t0 = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        batch.append(time.perf_counter() - t0)
        r = _available_now(_source(spark, url, "public.orders", True, **opts),
                           work / f"tp-{run}")
        if r["rows"] != rows:
            raise RuntimeError(f"availableNow read {r['rows']} rows, the batch read {rows}")
        runs.append(r)
        # the same with maxRowsPerTrigger: several micro-batches, each end found on the driver
        c = _available_now(_source(spark, url, "public.orders", True, maxRowsPerTrigger=max_rows,
                                   **opts), work / f"capped-{run}")
        if c["rows"] != rows:
            raise RuntimeError(f"availableNow (capped) read {c['rows']} rows, the batch read {rows}")
        capped.append(c)
        # Spark's own query start, for reference: the rate source, availableNow, same sink.
        rate = spark.readStream.format("rate").option("rowsPerSecond", 1).load()
        rate_start.append(_available_now(rate, work / f"rate-{run}")["start"])
        print(f"  run {run}: batch {batch[-1]:.2f} s, availableNow {r['wall']:.2f} s (query start "
              f"{r['start']:.2f} s, rate source's {rate_start[-1]:.2f} s; {r['in_batches']:.2f} s "
              f"in {r['batches']} micro-batch(es)), {rows:,} rows; maxRowsPerTrigger={max_rows:,}: "
              f"{c['wall']:.2f} s, {c['in_batches']:.2f} s in {c['batches']} micro-batches, "
              f"{c['planning_ends']:.2f} s of it planning their ends")
    return {"rows": rows, "batch": batch, "stream": [r["wall"] for r in runs],
            "capped": capped, "max_rows": max_rows,
            "in_batches": [r["in_batches"] for r in runs], "batches": [r["batches"] for r in runs],
            "start": [r["start"] for r in runs], "rate_start": rate_start}


# -- 2. small micro-batches ---------------------------------------------------------------------

class _Tick(InputPartition):
    def __init__(self, first: int, end: int) -> None:
        self.first, self.end = first, end


class _TrivialReader(DataSourceStreamReader):
    """``rows`` made-up rows an ``interval``, no I/O: what any Python streaming source pays."""

    def __init__(self, rows: int, interval: float) -> None:
        self.rows, self.interval, self.t0 = rows, interval, time.time()

    def initialOffset(self) -> dict[str, int]:
        return {"n": 0}

    def latestOffset(self) -> dict[str, int]:
        return {"n": int((time.time() - self.t0) / self.interval)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [_Tick(start["n"] * self.rows, end["n"] * self.rows)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        assert isinstance(partition, _Tick)
        return ((i,) for i in range(partition.first, partition.end))


class TrivialSource(DataSource):
    """Spark's floor for a Python data source (defined here, so pickled by value to workers)."""

    @classmethod
    def name(cls) -> str:
        return "pgfeed_bench_trivial"

    def schema(self) -> str:
        return "n long"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _TrivialReader(int(self.options["rows"]), float(self.options["interval"]))


class Writer:
    """Commits ``rows`` ticks every ``interval`` s; remembers, per transaction, an LSN just before
    its commit record and the wall time its COMMIT returned."""

    def __init__(self, dsn: str, rows: int, interval: float) -> None:
        self.txns: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(dsn, rows, interval), daemon=True)
        self._thread.start()

    def _run(self, dsn: str, rows: int, interval: float) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            nxt = time.monotonic()
            while not self._stop.is_set():
                with conn.transaction():
                    conn.execute("INSERT INTO ticks (sent) SELECT extract(epoch FROM "
                                 "clock_timestamp()) FROM generate_series(1, %s)", (rows,))
                    row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
                self.txns.append((parse_lsn(row[0]), time.time()))  # type: ignore[index]
                nxt += interval
                self._stop.wait(max(0.0, nxt - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _run_query(df: Any, interval: float, seconds: float, work: Path, name: str,
               during: Any = None) -> list[dict[str, Any]]:
    q = (df.writeStream.format("noop").option("checkpointLocation", str(work / name))
         .trigger(processingTime=f"{int(interval * 1000)} milliseconds").start())
    try:
        time.sleep(seconds)
        if during is not None:
            during()
        time.sleep(interval * 4)  # the last commits reach the sink
    finally:
        q.stop()
    return _progress(q)


def _end_lsn(progress: dict[str, Any]) -> int:
    offset = progress["sources"][0]["endOffset"]
    if isinstance(offset, str):
        import json

        offset = json.loads(offset)
    cursor = parse_cursor(offset["cursor"])
    assert cursor != "latest"
    return cursor.lsn


def _done_at(progress: dict[str, Any]) -> float:
    started = datetime.fromisoformat(progress["timestamp"]).timestamp()
    return started + progress["durationMs"]["triggerExecution"] / 1000


def small_batches(spark: Any, url: str, dsn: str, rows: int, interval: float, seconds: float,
                  warmup: int, work: Path) -> dict[str, Any]:
    rate = spark.readStream.format("rate").option("rowsPerSecond", max(1, int(rows / interval))) \
        .option("numPartitions", 2).load()
    rate_p = [p for p in _run_query(rate, interval, seconds, work, "rate") if p["numInputRows"]]
    spark.dataSource.register(TrivialSource)
    trivial = spark.readStream.format(TrivialSource.name()).option("rows", rows) \
        .option("interval", interval).load()
    trivial_p = [p for p in _run_query(trivial, interval, seconds, work, "trivial")
                 if p["numInputRows"]]

    ticks = _source(spark, url, "public.ticks", True, **{"from": "latest", "partitions": 2})
    writer: Writer | None = None

    def start_writer() -> None:
        nonlocal writer
        writer = Writer(dsn, rows, interval)

    # The query starts first (pinning "latest"), then the writer runs for ``seconds``.
    q = (ticks.writeStream.format("noop").option("checkpointLocation", str(work / "ticks"))
         .trigger(processingTime=f"{int(interval * 1000)} milliseconds").start())
    try:
        while not q.recentProgress:
            time.sleep(0.05)
        start_writer()
        time.sleep(seconds)
        assert writer is not None
        writer.stop()
        time.sleep(max(2.0, interval * 8))
    finally:
        q.stop()
    feed_p = [p for p in _progress(q) if p["numInputRows"]]
    assert writer is not None
    e2e = []
    batches = sorted((_end_lsn(p), _done_at(p)) for p in feed_p)
    for before, committed in writer.txns:
        done = next((t for end, t in batches if end >= before), None)
        if done is None:
            raise RuntimeError("a committed transaction never reached the sink")
        e2e.append(done - committed)
    got = sum(p["numInputRows"] for p in feed_p)
    if got != rows * len(writer.txns):
        raise RuntimeError(f"streamed {got} ticks, committed {rows * len(writer.txns)}")
    return {"rate": rate_p[warmup:], "trivial": trivial_p[warmup:], "pgfeed": feed_p[warmup:],
            "e2e": e2e[warmup:]}


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def _parts(progress: list[dict[str, Any]]) -> dict[str, float]:
    out = {k: _med([p["durationMs"].get(k, 0) for p in progress]) for k in PARTS}
    out["triggerExecution"] = _med([p["durationMs"]["triggerExecution"] for p in progress])
    out["rows"] = _med([p["numInputRows"] for p in progress])
    return out


# -- the run ------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pg-version", default="18")
    ap.add_argument("--changes", type=int, default=300_000, help="orders workload size")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--max-rows", type=int, default=100_000,
                    help="maxRowsPerTrigger of the capped availableNow runs")
    ap.add_argument("--small", type=int, default=20, help="rows a small transaction / trigger")
    ap.add_argument("--interval", type=float, default=0.5, help="trigger interval (s)")
    ap.add_argument("--seconds", type=float, default=20, help="seconds of small batches")
    ap.add_argument("--warmup", type=int, default=3, help="first small batches not counted")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    args = ap.parse_args()
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="pgfeed-bench-sparkstream-"))
    try:
        with LocalCluster.start(args.pg_version) as cluster:
            result = _bench(cluster, args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["load"] = (load_before, os.getloadavg())
    text = _section(args, result)
    print(text)
    if args.write:
        write_section("spark-streaming", text)
        print("wrote bench/RESULTS.md")


def _bench(cluster: LocalCluster, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from capture import SCHEMA, run_workload

    from tests.fixtures.fix_spark import build_session

    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench")
    dsn = cluster.dsn("bench")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA.split("CREATE PUBLICATION")[0])
        conn.execute(TICKS)
    with pgfeed_serve(work / "data") as server:
        create_feed(server, dsn)
        print(f"workload: {args.changes:,} changes into orders ...")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO ticks (sent) VALUES (0)")  # the feed knows the table
            changes, before_last, _ = run_workload(conn, args.changes / 1_000_000)
        wait_captured(server, changes + 1, before_last, 600)
        url = str(server.http.base_url).rstrip("/")
        with FeedClient(url) as client:
            head = client.head(FEED)
        spark = build_session("pgfeed-bench-streaming")
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "10000")
        try:
            tp = None
            if not args.skip_throughput:
                print("throughput: batch vs availableNow, noop sink")
                tp = throughput(spark, url, head, args.repeat, args.partitions, work,
                                args.max_rows)
            print(f"small batches: {args.small} rows every {args.interval} s, noop sink")
            sb = small_batches(spark, url, dsn, args.small, args.interval, args.seconds,
                               args.warmup, work)
        finally:
            spark.stop()
    import pyspark

    return {"tp": tp, "sb": sb, "changes": changes, "pyspark": pyspark.__version__,
            "pg": args.pg_version}


def _section(args: argparse.Namespace, r: dict[str, Any]) -> str:
    lines = ["## Spark Structured Streaming (`bench/spark_streaming.py`)\n",
             (f"Measured {datetime.now().date().isoformat()} on CPython {platform.python_version()}, "
             f"PySpark {r['pyspark']}, `local[2]` (2 shared cores), PostgreSQL {r['pg']}, a real "
             f"`pgfeed serve`; load average before {r['load'][0][0]:.2f}, after "
             f"{r['load'][1][0]:.2f} (`uptime`, 1 min).\n")]
    tp = r["tp"]
    if tp:
        b, s, ib = min(tp["batch"]), min(tp["stream"]), min(tp["in_batches"])
        ratio = b / s
        capped = min(tp["capped"], key=lambda c: c["wall"])
        capped_runs = ", ".join(f"{c['wall']:.2f}" for c in tp["capped"])
        capped_in = [c["in_batches"] for c in tp["capped"]]
        lines += [
            "### availableNow throughput vs a batch read\n",
            (f"Typed read of `orders` ({tp['rows']:,} changes, bench/capture.py's workload), "
            f"`partitions={args.partitions}`, `noop` sink, warm session, best of {args.repeat}.\n"),
            "| read | seconds (best) | rows/s | runs (s) |",
            "| --- | --- | --- | --- |",
            (f"| batch (`spark.read`) | {b:.2f} | {tp['rows'] / b:,.0f} | "
            f"{', '.join(f'{t:.2f}' for t in tp['batch'])} |"),
            (f"| streaming `availableNow`, start() to end | {s:.2f} | {tp['rows'] / s:,.0f} | "
            f"{', '.join(f'{t:.2f}' for t in tp['stream'])} |"),
            (f"| same, time in micro-batches ({tp['batches'][0]} a run) | {ib:.2f} | "
            f"{tp['rows'] / ib:,.0f} | {', '.join(f'{t:.2f}' for t in tp['in_batches'])} |"),
            (f"| streaming `availableNow`, `maxRowsPerTrigger={tp['max_rows']:,}`, start() to end | "
            f"{capped['wall']:.2f} | {tp['rows'] / capped['wall']:,.0f} | {capped_runs} |"),
            (f"| same, time in micro-batches ({capped['batches']} a run; planning their ends: "
            f"{capped['planning_ends']:.2f} s) | {capped['in_batches']:.2f} | "
            f"{tp['rows'] / capped['in_batches']:,.0f} | "
            f"{', '.join(f'{c:.2f}' for c in capped_in)} |"),
            "",
            (f"Steady state (the micro-batches, like the batch read's job): {b / ib:.2f}x the batch "
             f"rate ({'meets' if b / ib >= THROUGHPUT_TARGET else 'misses'} the "
             f"{THROUGHPUT_TARGET}x target). Start to end: {ratio:.2f}x; the difference is the "
             f"query's start, {min(tp['start']):.2f} s against the `rate` source's "
             f"{min(tp['rate_start']):.2f} s: Spark launches a fresh Python process for a Python "
             "streaming source's driver side at every query start (`createSimpleWorker`, not the "
             "forked daemon), paid once per query, not per micro-batch. With "
             f"`maxRowsPerTrigger` the driver plans each micro-batch's end with `format=count` "
             f"pages (the server counts, no change is read on the driver): "
             f"{capped['planning_ends']:.2f} s for {capped['batches']} micro-batches; the rest "
             "is Spark's cost of a micro-batch (its commit log and offsets, a job each).\n")]
    sb = r["sb"]
    rate, trivial, feed = _parts(sb["rate"]), _parts(sb["trivial"]), _parts(sb["pgfeed"])
    ratio = feed["triggerExecution"] / rate["triggerExecution"]
    head = "| source | batches | rows (median) | " + " | ".join(
        ["trigger (median ms)", "p90 ms", *PARTS]) + " |"
    lines += [
        "### Small micro-batches vs the `rate` source\n",
        (f"{args.small} rows every {args.interval} s, `trigger(processingTime="
        f"\"{int(args.interval * 1000)} milliseconds\")`, `noop` sink, {args.seconds:.0f} s, the "
        f"first {args.warmup} batches with rows not counted; medians of `durationMs` (ms) over "
        "batches with rows.\n"),
        head, "|" + " --- |" * (len(PARTS) + 5)]
    for name, prog, parts in (("`rate`", sb["rate"], rate),
                              ("a Python source, no I/O", sb["trivial"], trivial),
                              ("pgfeed (`ticks`)", sb["pgfeed"], feed)):
        p90 = _pct([p["durationMs"]["triggerExecution"] for p in prog], 0.9)
        lines.append(f"| {name} | {len(prog)} | {parts['rows']:.0f} | "
                     f"{parts['triggerExecution']:.0f} | {p90:.0f} | "
                     + " | ".join(f"{parts[k]:.0f}" for k in PARTS) + " |")
    e2e = sb["e2e"]
    lines += [
        "",
        (f"pgfeed's small micro-batch takes {ratio:.2f}x the `rate` source's "
        f"({'meets' if ratio <= LATENCY_TARGET else 'misses'} the {LATENCY_TARGET}x target), "
        f"{feed['triggerExecution'] / trivial['triggerExecution']:.2f}x that of a Python data "
        "source that makes its rows up (no I/O, defined in this script): what is left above "
        "`rate` is Spark's cost of a Python source (a task handed to a Python worker, Arrow "
        "back), not pgfeed's. "
        f"End to end, COMMIT returning on PostgreSQL to the end of the micro-batch that wrote the "
        f"row: median {_med(e2e) * 1000:.0f} ms, p90 {_pct(e2e, 0.9) * 1000:.0f} ms, max "
        f"{max(e2e) * 1000 if e2e else float('nan'):.0f} ms over {len(e2e)} transactions (this "
        f"includes capture and waiting for the next trigger, up to {args.interval * 1000:.0f} ms).\n")]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
