"""``pgfeed serve --log-format json`` as an operator runs it: every line is one JSON object; feed
state changes, a reconnect with its reason and retention trims each get a line; and neither a DSN
password nor a bearer token ever appears, whatever went wrong."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.checkout import PYTHONPATH
from tests.fixtures.fix_service import wait_until

pytestmark = pytest.mark.pg

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "Sup3r-S3cret-Pw"
TOKEN = "admin-T0ken-never-logged"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def test_json_logs_carry_the_events_that_matter_and_no_secret(pg_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    http_port = _free_port()
    base = f"http://127.0.0.1:{http_port}"
    log = tmp_path / "serve.log"
    env = {**os.environ, "PYTHONPATH": PYTHONPATH,
           "PGFEED_ADMIN_TOKENS": json.dumps([TOKEN]), "PGFEED_RETENTION_CHECK_SECONDS": "0.3"}
    with log.open("w") as sink:
        serve = subprocess.Popen(
            [sys.executable, "-m", "pgfeed", "serve", "--log-format", "json", "--data-dir",
             str(tmp_path / "data"), "--http-port", str(http_port), "--grpc-port", str(_free_port())],
            env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _ready(base), 30, "the service to be ready")
        # A source that refuses, with the password in a URI and in key=value form: 422s.
        for bad in (f"postgresql://cdc:{PASSWORD}@127.0.0.1:1/nowhere",
                    f"host=127.0.0.1 port=1 dbname=x user=cdc password={PASSWORD}"):
            answer = httpx.post(f"{base}/v1/feeds", headers=AUTH, timeout=60, json={
                "name": "bad", "dsn": bad, "tables": ["public.t"]})
            assert answer.status_code == 422 and PASSWORD not in answer.text
        answer = httpx.post(f"{base}/v1/feeds", headers=AUTH, timeout=60, json={
            "name": "shop", "dsn": f"{pg_dsn} password={PASSWORD}", "tables": ["public.t"],
            "options": {"heartbeat_seconds": 0.5, "retention": {"hours": None, "bytes": 1}}})
        assert answer.status_code == 201, answer.text
        wait_until(lambda: any(e.get("state") == "running" for e in _events(log)), 30, "running")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for i in range(5):
                conn.execute("INSERT INTO t VALUES (%s, 'x')", (i,))
            # A reconnect with a reason: end the feed's walsender.
            wait_until(lambda: conn.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                "WHERE slot_name = 'pgfeed_shop' AND active_pid IS NOT NULL").fetchall(), 10,
                "the walsender to end")
        httpx.post(f"{base}/v1/feeds/shop/pause", headers=AUTH, timeout=60).raise_for_status()
        wait_until(lambda: any(e.get("event") == "feed_state" and e.get("state") == "paused"
                               for e in _events(log)), 10, "a paused line")
        httpx.post(f"{base}/v1/feeds/shop/resume", headers=AUTH, timeout=60).raise_for_status()
        wait_until(lambda: [e.get("state") for e in _events(log)
                            if e.get("event") == "feed_state"][-1] == "running", 15, "resumed")
        wait_until(lambda: any(e.get("event") == "retention_trim" for e in _events(log)), 15,
                   "a retention line")
        wait_until(lambda: any(e.get("event") == "reconnect" for e in _events(log)), 15,
                   "a reconnect line")
        # A backfill logs its progress (the first stored chunk at once, then every 10 s).
        started = httpx.post(f"{base}/v1/feeds/shop/backfills", headers=AUTH, timeout=60,
                             json={"tables": ["public.t"], "chunk_rows": 2})
        assert started.status_code == 202, started.text
        wait_until(lambda: any(e.get("event") == "backfill_progress" for e in _events(log)), 30,
                   "a backfill progress line")
        # A forced trim by an admin, overriding a consumer.
        head = httpx.get(f"{base}/v1/feeds/shop", headers=AUTH, timeout=60).json()["head_lsn"]
        httpx.put(f"{base}/v1/feeds/shop/consumers/laggard", headers=AUTH, timeout=60,
                  json={"cursor": head}).raise_for_status()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO t VALUES (100, 'after the consumer')")
        wait_until(lambda: httpx.get(f"{base}/v1/feeds/shop", headers=AUTH,
                                     timeout=60).json()["head_lsn"] != head, 30, "a new commit")
        httpx.post(f"{base}/v1/feeds/shop/trim", headers=AUTH, timeout=60,
                   json={"before": "latest"}).raise_for_status()
        httpx.delete(f"{base}/v1/feeds/shop", headers=AUTH, timeout=60).raise_for_status()
        wait_until(lambda: any(e.get("state") == "deleted" for e in _events(log)), 10, "deleted")
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(60)
    text = log.read_text()
    events = _events(log)  # every line is JSON
    assert PASSWORD not in text and TOKEN not in text
    assert all({"ts", "level", "logger", "message"} <= set(e) for e in events)
    states = [e["state"] for e in events if e.get("event") == "feed_state" and e["feed"] == "shop"]
    assert states[0] in ("starting", "running") and "paused" in states and "deleted" in states
    assert states[states.index("paused") + 1] in ("starting", "running")  # the resume
    reconnect = next(e for e in events if e.get("event") == "reconnect")
    assert reconnect["feed"] == "shop" and reconnect["reason"] and reconnect["level"] == "WARNING"
    trim = next(e for e in events if e.get("event") == "retention_trim")
    assert trim["feed"] == "shop" and trim["dropped"] >= 1
    forced = next(e for e in events if e.get("event") == "forced_trim")
    progress = next(e for e in events if e.get("event") == "backfill_progress")
    assert progress["rows"] >= 1 and progress["chunks"] >= 1 and progress["backfill"].startswith("bf_")
    assert forced["feed"] == "shop" and forced["level"] == "WARNING"
    assert forced["removed_consumers"] == ["laggard"]
    assert any("password=***" in e["message"] for e in events)  # the feed's source, masked
    print(f"{len(events)} log lines; events: "
          f"{sorted({e['event'] for e in events if 'event' in e})}")


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _state(base: str) -> str:
    return httpx.get(f"{base}/v1/feeds/shop", headers=AUTH).json()["state"]
