"""``pgfeed demo``, the README's first command, run as a user runs it: changes flow, its HTTP API
serves them while it runs, and Ctrl-C stops everything it started."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.checkout import PYTHONPATH

pytestmark = [pytest.mark.pg, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


def test_demo_shows_changes_flowing_and_ctrl_c_stops_everything() -> None:
    http_port, grpc_port = _free_port(), _free_port()
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "COLUMNS": "200", "TERM": "dumb"}
    demo = subprocess.Popen([sys.executable, "-m", "pgfeed", "demo", "--http-port", str(http_port),
                             "--grpc-port", str(grpc_port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{http_port}/v1/feeds/shop/changes"
        deadline = time.monotonic() + 60
        changes: list[dict] = []
        # the seeded customers' backfill (20 reads), then the live workload, read through the
        # demo's own API
        while len(changes) < 20 or not any(c["op"] == "insert" for c in changes):
            assert time.monotonic() < deadline, "the demo served no changes within 60 s"
            assert demo.poll() is None, demo.stdout.read().decode() if demo.stdout else ""
            try:
                changes = httpx.get(url, params={"after": "earliest", "limit": 100}, timeout=5).json()["changes"]
            except (httpx.TransportError, KeyError):
                pass
            time.sleep(0.2)
        assert {c["op"] for c in changes} >= {"insert"}
        # the seeded customers, backfilled when the demo's feed was created (option snapshot)
        reads = {c["key"]["id"] for c in changes if c["op"] == "read" and c["table"] == "customers"}
        assert reads == set(range(1, 21)), changes
        assert {f"{c['schema']}.{c['table']}" for c in changes} <= {"public.orders", "public.customers"}
        demo.send_signal(signal.SIGINT)  # Ctrl-C
        out, _ = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    text = out.decode()
    assert demo.returncode == 0, text[-3000:]
    received = re.search(r"demo stopped: (\d+) changes received", text)
    assert received and int(received.group(1)) > 0, text[-3000:]
    assert f"http://127.0.0.1:{http_port}/docs" in text and f"127.0.0.1:{grpc_port}" in text
    # Everything it started is gone: its PostgreSQL (named by its socket directory) and its ports.
    cluster_dir = re.search(r"host=(/\S+)/sock", text)
    assert cluster_dir, text[-3000:]
    assert not Path(cluster_dir.group(1)).exists()
    assert _processes_mentioning(cluster_dir.group(1)) == []
    for port in (http_port, grpc_port):
        with socket.socket() as s, pytest.raises(ConnectionRefusedError):
            s.connect(("127.0.0.1", port))
