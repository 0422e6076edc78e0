"""Crash safety and memory of the real service process (``pgfeed serve``) on real PostgreSQL.

The service is SIGKILLed at random moments during a workload and restarted; afterwards its log must
hold exactly what test_decoding reports for the same WAL — nothing lost, nothing duplicated.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgfeed.feeds.model import FeedOptions, FeedSpec
from pgfeed.feeds.supervisor import Supervisor
from tests.checkout import PYTHONPATH
from tests.fixtures.fix_pg import Clusters, create_database, drop_slots
from tests.integration.capture_helpers import (
    MARKER_PREFIX,
    data_changes,
    emit_marker,
    read_all,
    wait_until,
)

pytestmark = [pytest.mark.pg, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
_TD_LINE = re.compile(r"table public\.c: (INSERT|UPDATE|DELETE): id\[integer\]:(\d+)(?: v\[integer\]:(\d+))?")


def start_service(data_dir: Path, http_port: int = 0) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    return subprocess.Popen([sys.executable, "-m", "pgfeed", "serve", "--data-dir", str(data_dir),
                             "--http-port", str(http_port), "--grpc-port", "0"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def log_contents(data_dir: Path, feed: str = "f") -> list:
    reader = Supervisor(data_dir, capture=False)
    reader.start()
    try:
        return read_all(reader, feed)
    finally:
        reader.stop()


def wait_marker_in_log(data_dir: Path, token: str, timeout: float = 90) -> list:
    def arrived():
        txns = log_contents(data_dir)
        return txns if any(c.op == "message" and c.prefix == MARKER_PREFIX and c.content == token.encode()
                           for t in txns for c in t.changes) else None

    return wait_until(arrived, timeout, "the service to catch up")


def create_feed(data_dir: Path, dsn: str, tables: tuple[str, ...]) -> None:
    setup = Supervisor(data_dir, capture=False)
    setup.start()
    setup.create(FeedSpec(name="f", dsn=dsn, tables=tables, options=FeedOptions(heartbeat_seconds=1, messages=True)))
    setup.stop()


def workload(dsn: str, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    next_id = 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            with conn.transaction():
                n = rng.choice([1, 5, 50, 500])
                conn.execute("INSERT INTO c SELECT g, 0 FROM generate_series(%s::int, %s::int) g", (next_id, next_id + n - 1))
                next_id += n
                conn.execute("UPDATE c SET v = v + 1 WHERE id %% 7 = %s", (rng.randrange(7),))
                conn.execute("DELETE FROM c WHERE id %% 13 = %s AND id < %s", (rng.randrange(13), next_id - 100))
            time.sleep(rng.uniform(0, 0.02))


def test_sigkill_at_random_points_loses_and_duplicates_nothing(pg_dsn, tmp_path):
    data_dir = tmp_path / "data"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE c (id int PRIMARY KEY, v int)")
        conn.execute("SELECT pg_create_logical_replication_slot('reference', 'test_decoding')")
    create_feed(data_dir, pg_dsn, ("public.c",))
    stop = threading.Event()
    worker = threading.Thread(target=workload, args=(pg_dsn, stop, 42))
    rng = random.Random(1)
    service = start_service(data_dir)
    worker.start()
    kills = 0
    try:
        for _ in range(4):
            time.sleep(rng.uniform(1.0, 3.0))
            service.send_signal(signal.SIGKILL)
            service.wait()
            kills += 1
            service = start_service(data_dir)
        time.sleep(1.0)
    finally:
        stop.set()
        worker.join()
    token = emit_marker(pg_dsn)
    try:
        txns = wait_marker_in_log(data_dir, token)
    finally:
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=60) == 0, service.stderr.read().decode()[-2000:]

    ours = []
    for _, c in data_changes(txns):
        if c.op == "insert":
            ours.append(("INSERT", c.after["id"], c.after["v"]))
        elif c.op == "update":
            ours.append(("UPDATE", c.after["id"], c.after["v"]))
        elif c.op == "delete":
            ours.append(("DELETE", c.key["id"], None))
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute("SELECT data FROM pg_logical_slot_peek_changes('reference', NULL, NULL)").fetchall()
    reference = []
    for (line,) in rows:
        m = _TD_LINE.match(line)
        if m:
            reference.append((m.group(1), int(m.group(2)), int(m.group(3)) if m.group(3) else None))
    assert kills == 4
    assert len(reference) > 1000
    assert ours == reference


def _vm_hwm_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.fixture
def newest_dsn(pg_clusters: Clusters) -> Iterator[str]:
    """A fresh database on the newest version only: one is enough for the 1M-row memory check."""
    cluster = pg_clusters.newest()
    dsn = create_database(cluster)
    yield dsn
    drop_slots(cluster, dsn)


def test_million_row_transaction_stays_under_200_mb(newest_dsn, tmp_path):
    pg_dsn = newest_dsn
    data_dir = tmp_path / "data"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id int PRIMARY KEY, v text)")
    create_feed(data_dir, pg_dsn, ("public.big",))
    service = start_service(data_dir)
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO big SELECT g, 'row ' || g FROM generate_series(1, 1000000) g")
        token = emit_marker(pg_dsn)
        setup = Supervisor(data_dir, capture=False)
        setup.start()
        try:
            def caught_up():
                log = setup.changelog("f")
                return log.stats().change_count >= 1_000_001 and log
            wait_until(caught_up, 300, "the 1M-row transaction")
        finally:
            setup.stop()
        peak_mb = _vm_hwm_kb(service.pid) / 1024
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(timeout=60)
    assert token
    print(f"service peak RSS {peak_mb:.0f} MB over a 1M-row transaction")  # for the bench notes
    assert peak_mb < 200, f"service peak RSS {peak_mb:.0f} MB"
