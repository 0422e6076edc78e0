"""A Structured Streaming query whose driver is killed (SIGKILL, JVM and all) in the middle of a
micro-batch, then restarted from its checkpoint with availableNow: the parquet sink ends with
every change of the feed exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pgfeed_client import FeedClient, parse_cursor
from tests.checkout import PYTHONPATH

pytestmark = [pytest.mark.spark, pytest.mark.pg, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

# The driver: its own process (and process group, so the JVM dies with it), the test suite's
# Spark settings, a parquet sink with a checkpoint.
DRIVER = textwrap.dedent("""
    import sys
    from tests.fixtures.fix_spark import build_session

    url, feed, out, checkpoint, mode = sys.argv[1:6]
    spark = build_session("pgfeed-driver")
    stream = (spark.readStream.format("pgfeed").option("url", url).option("feed", feed)
              .option("partitions", 2).option("maxRowsPerTrigger", 200)
              .option("consumer", "killed-driver").load())
    writer = (stream.writeStream.format("parquet").option("path", out)
              .option("checkpointLocation", checkpoint))
    if mode == "slow":  # one batch at a time, with time between them to be killed in
        query = writer.trigger(processingTime="2 seconds").start()
    else:
        query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    print("DRIVER-DONE", flush=True)
""")


def _batches(checkpoint: Path, kind: str) -> set[int]:
    folder = checkpoint / kind
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.exists() else set()


def test_a_killed_driver_resumes_with_every_change_exactly_once(
        served_feed: tuple[str, str], spark_session: SparkSession, tmp_path: Path) -> None:
    base_url, feed = served_feed
    with FeedClient(base_url) as client:
        expected = sorted((parse_cursor(c.commit_lsn).lsn, c.seq) for c in client.iter_changes(feed))
    script, out, checkpoint = tmp_path / "driver.py", tmp_path / "out", tmp_path / "checkpoint"
    script.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}

    def driver(mode: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, str(script), base_url, feed, str(out), str(checkpoint), mode],
                                cwd=ROOT, env=env, start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    first = driver("slow")
    try:
        deadline = time.monotonic() + 180
        # Kill once a batch has been committed and the next one is planned but not committed:
        # its offsets are logged, its files may be half written.
        while not (_batches(checkpoint, "commits") and
                   _batches(checkpoint, "offsets") - _batches(checkpoint, "commits")):
            assert first.poll() is None, first.stdout.read().decode()[-3000:] if first.stdout else ""
            assert time.monotonic() < deadline, "no micro-batch in flight within 180 s"
            time.sleep(0.05)
        in_flight = _batches(checkpoint, "offsets") - _batches(checkpoint, "commits")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM, mid-batch
        first.wait()
    assert in_flight and first.returncode == -signal.SIGKILL

    second = driver("drain")
    output, _ = second.communicate(timeout=300)
    assert second.returncode == 0 and b"DRIVER-DONE" in output, output.decode()[-3000:]
    assert _batches(checkpoint, "commits") >= in_flight  # the interrupted batch was redone

    written = spark_session.read.parquet(str(out))
    got = sorted((r[0], r[1]) for r in written.select("commit_lsn", "seq").collect())
    assert got == expected  # nothing lost, nothing twice
    with FeedClient(base_url) as client:  # commit() acknowledged the consumer as it went
        assert client.consumer(feed, "killed-driver") is not None
