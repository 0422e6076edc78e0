"""CaptureStats: the changes/s a feed's status reports, from a bounded window of samples."""

from __future__ import annotations

import pytest

from pgfeed.replication import capture
from pgfeed.replication.capture import CaptureStats


def test_rate_over_the_last_ten_seconds_from_a_bounded_window(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(capture.time, "monotonic", lambda: clock[0])
    stats = CaptureStats()
    for _ in range(30_000):  # 30 s of appends of 3 changes each, 1,000 appends a second
        stats.count(3, 300)
        clock[0] += 0.001
    assert stats.changes == 90_000 and stats.bytes == 9_000_000
    assert stats.rate() == pytest.approx(3_000, rel=0.02)
    assert len(stats._window) <= 102  # one sample per 0.1 s, not one per append
    clock[0] += 11  # idle for longer than the window
    assert stats.rate() == 0.0


def test_a_burst_then_a_slower_pace_shows_the_recent_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(capture.time, "monotonic", lambda: clock[0])
    stats = CaptureStats()
    for _ in range(200):  # 20 s at 100 changes every 0.1 s (1,000/s) ...
        stats.count(100, 1)
        clock[0] += 0.1
    for _ in range(200):  # ... then 20 s at 10 every 0.1 s (100/s)
        stats.count(10, 1)
        clock[0] += 0.1
    assert stats.rate() == pytest.approx(100, rel=0.05)


def test_two_appends_milliseconds_apart_are_not_a_burst(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30.1: 41 changes in two appends 200 ms apart read as 41/s at most (over at least a
    second), not 200/s."""
    clock = [0.0]
    monkeypatch.setattr(capture.time, "monotonic", lambda: clock[0])
    stats = CaptureStats()
    stats.count(1, 1)
    clock[0] += 0.2
    stats.count(40, 1)
    assert stats.rate() <= 41.0


def test_the_first_batch_and_a_batch_after_a_pause_show_a_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A feed's first batch (several commits appended at once) is a rate, not 0 for want of a
    second sample; after a pause the rate is the new batch's, not diluted over the pause."""
    clock = [0.0]
    monkeypatch.setattr(capture.time, "monotonic", lambda: clock[0])
    stats = CaptureStats()
    stats.count(44, 1)
    assert stats.rate() == 44.0  # over at least a second
    clock[0] += 100.0
    assert stats.rate() == 0.0  # idle
    stats.count(20, 1)
    assert stats.rate() == 20.0
