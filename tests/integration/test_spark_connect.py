"""The pgfeed data source from a Spark Connect session (``SparkSession.builder.remote("local[2]")``,
PySpark 4's local Connect server): registered through the Connect client, a batch read (raw and
typed) and a streaming ``availableNow`` read of a real feed return exactly the feed's changes.

The Connect session runs in a subprocess: ``remote("local[...]")`` starts its server inside a
classic SparkContext of the calling process, which cannot share a process with the suite's
SparkSession (tests/fixtures/fix_spark.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pgfeed_client import FeedClient, parse_cursor
from tests.checkout import PYTHONPATH

pytestmark = [pytest.mark.spark, pytest.mark.pg, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

DRIVER = textwrap.dedent("""
    import json, sys
    from tests.fixtures.fix_spark import spark_environment

    spark_environment()  # PYSPARK_PYTHON, loopback, PYTHONPATH for the server's Python workers
    from pyspark.sql import SparkSession
    from pgfeed_spark import PgFeedDataSource

    url, feed, table, out, checkpoint = sys.argv[1:6]
    spark = (SparkSession.builder.remote("local[2]")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    kind = type(spark).__module__
    spark.dataSource.register(PgFeedDataSource)

    def positions(df, lsn="commit_lsn", seq="seq"):
        return sorted([r[0], r[1]] for r in df.select(lsn, seq).collect())

    raw = (spark.read.format("pgfeed").option("url", url).option("feed", feed)
           .option("partitions", 2).load())
    typed = (spark.read.format("pgfeed").option("url", url).option("feed", feed)
             .option("table", table).load())
    typed_rows = sorted([r["id"], r["_op"]] for r in typed.select("id", "_op").collect())
    query = (spark.readStream.format("pgfeed").option("url", url).option("feed", feed)
             .option("partitions", 2).load()
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    streamed = spark.read.parquet(out)
    print("RESULT " + json.dumps({
        "session": kind, "batch": positions(raw), "typed": typed_rows,
        "typed_types": {f.name: f.dataType.simpleString() for f in typed.schema.fields},
        "streamed": positions(streamed)}), flush=True)
    spark.stop()
""")


def test_a_spark_connect_session_reads_a_feed(served_feed: tuple[str, str], tmp_path: Path) -> None:
    base_url, feed = served_feed
    table = "public.served_b"
    with FeedClient(base_url) as client:
        changes = list(client.iter_changes(feed))
    expected = sorted([parse_cursor(c.commit_lsn).lsn, c.seq] for c in changes)  # type: ignore[union-attr]
    expected_typed = sorted([(c.after or c.key or {})["id"], c.op] for c in changes
                            if f"{c.schema}.{c.table}" == table
                            and c.op in ("insert", "update", "delete", "read"))
    assert expected and expected_typed

    script = tmp_path / "connect_driver.py"
    script.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    proc = subprocess.run([sys.executable, str(script), base_url, feed, table,
                           str(tmp_path / "out"), str(tmp_path / "checkpoint")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=480, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (proc.stdout[-3000:], proc.stderr[-5000:])
    result = json.loads(lines[-1].removeprefix("RESULT "))

    assert result["session"].startswith("pyspark.sql.connect")  # really a Connect client session
    assert result["batch"] == expected  # every change once, through the Connect server
    assert result["streamed"] == expected  # availableNow over Connect, to a parquet sink
    assert result["typed"] == expected_typed
    assert result["typed_types"]["id"] == "int" and result["typed_types"]["at"] == "timestamp"
