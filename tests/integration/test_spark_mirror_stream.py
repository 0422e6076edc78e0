"""The streaming mirror (``mirror_writer`` in ``foreachBatch``) in a Spark driver of its own,
SIGKILLed between a micro-batch's data files and its manifest, then restarted from its checkpoint:
the mirror equals ``SELECT *`` and its SCD2 history the table at earlier positions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pgfeed_spark import read_mirror
from pgfeed_spark._mirror import committed
from tests.checkout import PYTHONPATH
from tests.integration import mirror_workload
from tests.integration.test_spark_apply import COLUMNS, as_of, assert_no_overlaps

pytestmark = [pytest.mark.spark, pytest.mark.pg, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

# Its own process group, so the JVM dies with it. ``flag``: on the first run, micro-batch 1 stops
# after writing its data (before its manifest) and says so by creating the file.
DRIVER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tests.fixtures.fix_spark import build_session
    from pgfeed_spark import mirror_writer

    url, feed, table, out, checkpoint, flag = sys.argv[1:7]
    spark = build_session("pgfeed-mirror-driver")

    def pause(batch_id):
        if flag != "-" and batch_id == 1:
            Path(flag).write_text("in flight")
            time.sleep(600)

    latest = mirror_writer(out + "/latest", ["id"], buckets=4, before_commit=pause)
    history = mirror_writer(out + "/history", ["id"], buckets=4, stored_as_scd_type=2)

    def both(df, batch_id):
        latest(df, batch_id)
        history(df, batch_id)

    stream = (spark.readStream.format("pgfeed").option("url", url).option("feed", feed)
              .option("table", table).option("partitions", 2).option("maxRowsPerTrigger", 250)
              .load())
    writer = stream.writeStream.foreachBatch(both).option("checkpointLocation", checkpoint)
    query = (writer.start() if flag != "-" else writer.trigger(availableNow=True).start())
    query.awaitTermination()
    print("DRIVER-DONE", flush=True)
""")


def test_the_streaming_mirror_survives_a_driver_kill_mid_batch(
        newest_pg_dsn: str, make_served_feed: Any, spark_session: SparkSession,
        tmp_path: Path) -> None:
    pg_dsn = newest_pg_dsn  # minutes a run: once, on the newest source
    feed = make_served_feed(pg_dsn, all_tables=True, toast="placeholder")
    name = f"smirror_{uuid.uuid4().hex[:8]}"
    base_url = make_served_feed.service.http_url
    shots = mirror_workload.run(pg_dsn, name, base_url, feed)
    make_served_feed.caught_up(feed, pg_dsn)

    script, out, checkpoint, flag = (tmp_path / "driver.py", tmp_path / "mirror",
                                     tmp_path / "checkpoint", tmp_path / "in-flight")
    script.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}

    log = tmp_path / "driver.log"

    def driver(mark: str) -> subprocess.Popen[bytes]:
        with open(log, "ab") as sink:  # a file, not a pipe nobody drains
            return subprocess.Popen(
                [sys.executable, str(script), base_url, feed, f"public.{name}", str(out),
                 str(checkpoint), mark], cwd=ROOT, env=env, start_new_session=True,
                stdout=sink, stderr=subprocess.STDOUT)

    def tail() -> str:
        return log.read_text(errors="replace")[-3000:]

    first = driver(str(flag))
    try:
        deadline = time.monotonic() + 900  # a loaded 2-core machine: minutes
        while not flag.exists():
            assert first.poll() is None, tail()
            assert time.monotonic() < deadline, f"micro-batch 1 never reached its commit: {tail()}"
            time.sleep(0.1)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM, data written, no manifest
        first.wait()
    assert first.returncode == -signal.SIGKILL
    latest_dir = out / "latest"
    assert list((latest_dir / "data" / "1").glob("_bucket=*/*.parquet")), "batch 1 wrote no data"
    state = committed(str(latest_dir))
    assert state is not None and state.batch_id == 0  # batch 1's manifest never written

    second = driver("-")
    second.wait(timeout=900)
    assert second.returncode == 0 and "DRIVER-DONE" in tail(), tail()
    state = committed(str(latest_dir))
    assert state is not None and state.batch_id >= 1  # batch 1 replayed (and any after it)

    mirror = read_mirror(spark_session, str(latest_dir)).collect()
    assert sorted(tuple(r[c] for c in COLUMNS) for r in mirror) == shots[-1].rows
    assert all(r["_unchanged_toast"] == [] for r in mirror)
    history = read_mirror(spark_session, str(out / "history")).collect()
    assert_no_overlaps(history)
    for shot in shots:
        assert as_of(history, shot.lsn) == shot.rows
