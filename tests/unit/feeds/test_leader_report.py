"""A replica that does not capture a feed shows its leader's counters as reported to the store."""

from __future__ import annotations

import time

from pgfeed.feeds.leadership import merge_report
from pgfeed.feeds.model import FeedStatus
from pgfeed.replication.capture import CaptureStats


def _status(state: str = "starting") -> FeedStatus:
    return FeedStatus(name="f", state=state, slot="s", publication="p", tables=[], all_tables=True)  # type: ignore[arg-type]


def _report(**changes: object) -> dict[str, object]:
    stats = CaptureStats(state="running", proto_version=4, streaming_in_use=False)
    stats.count(10, 1000)
    stats.count(5, 500)
    stats.last_commit_ts = 123_000_000
    return {**stats.report("a"), **changes}


def test_a_live_leaders_report_fills_the_status() -> None:
    status = _status()
    last = merge_report(status, _report(), live=True, paused=False)
    assert (status.state, status.counters_from, status.changes_captured, status.bytes_captured) == \
        ("running", "a", 15, 1500)
    assert status.proto_version == 4 and status.streaming_in_use is False
    assert status.counters_at is not None and abs(status.counters_at - time.time()) < 5
    assert last == 946_684_800 + 123.0


def test_a_stale_or_dead_report_keeps_totals_but_no_rate() -> None:
    status = _status()
    merge_report(status, _report(changes_per_second=50.0, at=time.time() - 60), live=True, paused=False)
    assert status.changes_per_second == 0.0 and status.changes_captured == 15
    status = _status()
    merge_report(status, _report(changes_per_second=50.0), live=False, paused=False)
    assert status.changes_per_second == 0.0 and status.state == "starting"  # nobody captures now


def test_a_failure_shows_until_another_replica_takes_over() -> None:
    status = _status()
    merge_report(status, _report(state="failed", last_error="boom"), live=False, paused=False)
    assert (status.state, status.last_error) == ("failed", "boom")
    paused = _status("paused")
    merge_report(paused, _report(state="failed", last_error="boom"), live=False, paused=True)
    assert (paused.state, paused.last_error) == ("paused", None)


def test_without_a_report_a_live_lease_means_running() -> None:
    status = _status()
    assert merge_report(status, None, live=True, paused=False) is None
    assert status.state == "running" and status.counters_from is None
