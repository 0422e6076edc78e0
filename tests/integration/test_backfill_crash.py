"""A backfill survives SIGKILLs of the real service process: it resumes at its next chunk, the feed
still builds exactly the table, and no chunk is stored twice. The feed's role cannot write
(issue 28.1: only SELECT and REPLICATION; an admin made the publication the feed adopts)."""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from pgfeed.changelog.backfills import BackfillRecord
from pgfeed.feeds.model import FeedOptions, FeedSpec
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.localpg import free_port
from tests.integration.capture_helpers import wait_until
from tests.integration.test_backfill import TABLE, apply, create_table, source_rows, writers
from tests.integration.test_backfill_readonly import read_only_role
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


def progress(port: int) -> tuple[str, int] | None:
    """The backfill's state and chunks stored so far, as the running service reports them (None
    until it answers)."""
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/v1/feeds/f/backfills", timeout=5)
    except httpx.TransportError:
        return None
    if answer.status_code != 200:  # still starting
        return None
    (backfill,) = answer.json()["backfills"]
    return backfill["state"], int(backfill["chunks"])


def test_sigkill_during_a_backfill_resumes_and_stores_every_chunk_once(pg_dsn: str, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    rows = 30_000
    create_table(pg_dsn, rows)
    import psycopg
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE PUBLICATION crash_pub FOR TABLE {TABLE}")
    dsn = read_only_role(pg_dsn, (TABLE,))
    setup = Supervisor(data_dir, capture=False)  # creates the feed and the backfill, starts nothing
    setup.start()
    setup.create(FeedSpec(name="f", dsn=dsn, publication="crash_pub",  # markers are messages
                          options=FeedOptions(heartbeat_seconds=1, messages=True)))
    setup.backfills("f").start([f"public.{TABLE}"], chunk_rows=250, parallel=2)
    setup.stop()

    stop = threading.Event()
    writer = writers(pg_dsn, stop, 7, rows + 1)
    rng = random.Random(3)
    port = free_port()
    service = start_service(data_dir, port)
    kills_mid_backfill, killed_at = 0, 0
    try:
        for _ in range(4):
            # killed once a few more chunks are stored, however fast this machine backfills
            target = killed_at + rng.randint(2, 8)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and service.poll() is None:
                now = progress(port)
                if now is not None and (now[0] != "running" or now[1] >= target):
                    break
                time.sleep(0.02)
            service.send_signal(signal.SIGKILL)
            service.wait()
            record = backfill_record(data_dir)
            if record.state == "running":
                kills_mid_backfill += 1
                killed_at = sum(p.chunks for p in record.parts)
            service = start_service(data_dir, port)
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
