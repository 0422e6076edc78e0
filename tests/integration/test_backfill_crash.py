"""A backfill survives SIGKILLs of the real service process: it resumes at its next chunk, the feed
still builds exactly the table, and no chunk is stored twice."""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

import pytest

from pgfeed.changelog.backfills import BackfillRecord
from pgfeed.feeds.model import FeedOptions, FeedSpec
from pgfeed.feeds.supervisor import Supervisor
from tests.integration.capture_helpers import wait_until
from tests.integration.test_backfill import TABLE, apply, create_table, source_rows, writers
from tests.integration.test_crash import log_contents, start_service, wait_marker_in_log

pytestmark = [pytest.mark.pg, pytest.mark.slow]


def backfill_record(data_dir: Path) -> BackfillRecord:
    reader = Supervisor(data_dir, capture=False)
    reader.start()
    try:
        (record,) = reader.backfills("f").records()
        return record
    finally:
        reader.stop()


def test_sigkill_during_a_backfill_resumes_and_stores_every_chunk_once(pg_dsn: str, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    rows = 30_000
    create_table(pg_dsn, rows)
    setup = Supervisor(data_dir, capture=False)  # creates the feed and the backfill, starts nothing
    setup.start()
    setup.create(FeedSpec(name="f", dsn=pg_dsn, tables=(f"public.{TABLE}",),
                          options=FeedOptions(heartbeat_seconds=1)))
    setup.backfills("f").start([f"public.{TABLE}"], chunk_rows=250, parallel=2)
    setup.stop()

    stop = threading.Event()
    writer = writers(pg_dsn, stop, 7, rows + 1)
    rng = random.Random(3)
    service = start_service(data_dir)
    kills_mid_backfill = 0
    try:
        for _ in range(4):
            time.sleep(rng.uniform(0.5, 1.5))
            service.send_signal(signal.SIGKILL)
            service.wait()
            record = backfill_record(data_dir)
            if record.state == "running":
                kills_mid_backfill += 1
            service = start_service(data_dir)
        wait_until(lambda: backfill_record(data_dir).state != "running", 120, "the backfill to finish")
        stop.set()
        writer.join()
        from tests.integration.capture_helpers import emit_marker
        token = emit_marker(pg_dsn)
        wait_marker_in_log(data_dir, token)
    finally:
        stop.set()
        writer.join()
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=60) == 0, service.stderr.read().decode()[-2000:] if service.stderr else ""

    record = backfill_record(data_dir)
    assert record.state == "done", record
    assert kills_mid_backfill >= 2, "the backfill finished before the service was killed"
    txns = log_contents(data_dir)
    changes = [c for t in txns for c in t.changes]
    built, reads = apply(changes)
    assert built == source_rows(pg_dsn)
    chunks = [t for t in txns if t.backfill == record.id]
    read_keys = [c.key["id"] for t in chunks for c in t.changes]
    assert len(read_keys) == len(set(read_keys)) == reads  # no row, so no chunk, stored twice
    stored_chunks = sum(p.chunks for p in record.parts)
    assert len(chunks) == stored_chunks and sum(p.rows for p in record.parts) == reads
    assert [t.commit_lsn for t in txns] == sorted({t.commit_lsn for t in txns})
