"""Issue 26, item 5: a source that refuses connections makes capture ``reconnecting`` (not
``starting``) with the reason and the next attempt, retried about every second, and logged once,
not at every attempt. The source is a loopback port nobody listens on (a real refusal)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path

import pytest

from pgfeed.changelog.memory import MemoryChangeLog
from pgfeed.replication.capture import BACKOFF, Capture, CaptureConfig, CaptureStats


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refusing_source_reads_reconnecting_and_is_logged_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert BACKOFF[-1] <= 1.0  # the source answering again is noticed within about a second
    caplog.set_level(logging.INFO, logger="pgfeed.capture")
    config = CaptureConfig(name="down", dsn=f"host=127.0.0.1 port={_closed_port()} dbname=x "
                           "user=u password=secret-pw", slot="s", publication="p")
    stats = CaptureStats()
    stop = threading.Event()
    thread = threading.Thread(target=Capture(config, MemoryChangeLog(), stats,
                                             spill_dir=tmp_path).run, args=(stop,))
    thread.start()
    try:
        time.sleep(2.6)  # attempts at 0, 0.25, 0.75, 1.75 s (and perhaps 2.75)
        assert stats.state == "reconnecting"
        assert stats.last_error and "cannot open a replication connection" in stats.last_error
        assert "secret-pw" not in stats.last_error
        assert stats.next_attempt is not None and 0 < stats.next_attempt - time.time() <= 1.0
        assert stats.reconnects >= 4
    finally:
        stop.set()
        thread.join(5)
    lines = [r for r in caplog.records if r.name == "pgfeed.capture"]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert getattr(lines[0], "event", None) == "reconnect"
    assert stats.state == "paused"
