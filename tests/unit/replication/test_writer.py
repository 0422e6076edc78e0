"""LogWriter: appends on their own thread, and a durable position that never runs ahead of them."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from pgfeed.assembler.model import StoredTransaction
from pgfeed.changelog.base import ChangeLogError
from pgfeed.changelog.memory import MemoryChangeLog
from pgfeed.replication.writer import LogWriter
from pgfeed_client._cursor import EARLIEST
from tests.unit.changelog.txns import lsns, txn


class GatedLog(MemoryChangeLog):
    """A real in-memory log whose appends wait for the test to open a gate, or fail on demand."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail: Exception | None = None

    def append(self, transactions: Sequence[StoredTransaction], confirmed_lsn: int | None = None) -> None:
        self.entered.set()
        self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        super().append(transactions, confirmed_lsn)


def test_durable_moves_only_once_the_append_has_returned() -> None:
    log, seen = GatedLog(), []
    writer = LogWriter(log, seen.append)
    try:
        writer.submit([txn(100), txn(200)], 210)
        assert log.entered.wait(5)
        assert writer.durable_lsn == 0 and seen == []  # appending, not yet durable
        log.gate.set()
        writer.submit([], 300)  # a keepalive position: recorded after the batch before it
        writer.close()
        assert writer.durable_lsn == 300 and log.confirmed_lsn() == 300
        assert lsns(log.read(EARLIEST, 10)) == [100, 200] and [lsns(list(b)) for b in seen] == [[100, 200]]
    finally:
        writer.close()


def test_batches_are_stored_in_submission_order_and_close_drains_them() -> None:
    log = MemoryChangeLog()
    writer = LogWriter(log, lambda _: None, depth=2)
    for i in range(1, 51):
        writer.submit([txn(i * 100)], i * 100 + 8)
    writer.close()
    assert lsns(log.read(EARLIEST, 1000)) == [i * 100 for i in range(1, 51)]
    assert writer.durable_lsn == log.confirmed_lsn() == 5008


def test_a_failed_append_stops_durability_and_is_raised_on_the_capture_side() -> None:
    log, failure = GatedLog(), ChangeLogError("disk full")
    log.fail = failure
    log.gate.set()
    writer = LogWriter(log, lambda _: None, depth=1)
    writer.submit([txn(100)], 108)
    writer.close()
    with pytest.raises(ChangeLogError, match="disk full"):
        writer.raise_if_failed()
    with pytest.raises(ChangeLogError):
        writer.submit([txn(200)], 208)
    assert writer.durable_lsn == 0 and log.confirmed_lsn() == 0 and log.read(EARLIEST, 10) == []


def test_the_starting_durable_position_is_the_logs() -> None:
    log = MemoryChangeLog()
    log.append([txn(500)], confirmed_lsn=508)
    writer = LogWriter(log, lambda _: None)
    writer.close()
    assert writer.durable_lsn == 508


def test_batches_queued_during_an_append_share_the_next_one() -> None:
    """Group commit: what arrives while an fsync runs goes into one append, in order."""
    log = GatedLog()
    appends: list[list[int]] = []
    writer = LogWriter(log, lambda stored: appends.append(lsns(list(stored))), depth=8)
    try:
        writer.submit([txn(100)], 108)
        assert log.entered.wait(5)  # the first append is under way (held at the gate)
        for i in range(2, 6):
            writer.submit([txn(i * 100)], i * 100 + 8)
        log.gate.set()
        writer.close()
        assert appends == [[100], [200, 300, 400, 500]]
        assert lsns(log.read(EARLIEST, 100)) == [100, 200, 300, 400, 500]
        assert writer.durable_lsn == log.confirmed_lsn() == 508
    finally:
        writer.close()


def test_a_small_batch_is_stored_on_the_caller_when_the_thread_is_idle() -> None:
    """Inline appends: durable when submit returns, on the submitting thread, in order."""
    log = MemoryChangeLog()
    threads: list[str] = []
    writer = LogWriter(log, lambda _: threads.append(threading.current_thread().name),
                       name="writer-thread", inline_bytes=1 << 20)
    try:
        writer.submit([txn(100)], 108)
        assert writer.durable_lsn == 108 and lsns(log.read(EARLIEST, 10)) == [100]  # no wait
        writer.submit([], 150)  # a keepalive position still goes through the thread
        writer.submit([txn(200)], 208)  # queued behind it: stored by the thread, after it
        writer.close()
        assert threads[0] == threading.current_thread().name and threads[1] == "writer-thread"
        assert lsns(log.read(EARLIEST, 10)) == [100, 200] and writer.durable_lsn == 208
    finally:
        writer.close()


def test_a_batch_over_the_inline_size_or_behind_queued_ones_goes_through_the_thread() -> None:
    log = GatedLog()
    threads: list[str] = []
    writer = LogWriter(log, lambda _: threads.append(threading.current_thread().name),
                       name="writer-thread", inline_bytes=1)
    try:
        writer.submit([txn(100)], 108)  # larger than one byte: handed over (held at the gate)
        assert log.entered.wait(5) and writer.durable_lsn == 0
        log.gate.set()
        writer.close()
        assert threads == ["writer-thread"] and writer.durable_lsn == 108
    finally:
        writer.close()


def test_an_inline_append_that_fails_is_raised_by_submit_and_stops_durability() -> None:
    log = GatedLog()
    log.fail = ChangeLogError("disk full")
    log.gate.set()
    writer = LogWriter(log, lambda _: None, inline_bytes=1 << 20)
    try:
        with pytest.raises(ChangeLogError, match="disk full"):
            writer.submit([txn(100)], 108)
        log.fail = None
        with pytest.raises(ChangeLogError, match="disk full"):
            writer.submit([txn(200)], 208)  # nothing after a failure is stored
        assert writer.durable_lsn == 0 and log.read(EARLIEST, 10) == []
    finally:
        writer.close()


class SyncRecordingLog(MemoryChangeLog):
    def __init__(self) -> None:
        super().__init__()
        self.syncs: list[bool] = []

    def append(self, transactions: Sequence[StoredTransaction], confirmed_lsn: int | None = None, *,
               sync: bool = True) -> None:
        self.syncs.append(sync)
        super().append(transactions, confirmed_lsn)


def test_an_unsynced_batch_is_stored_but_moves_the_durable_position_no_further() -> None:
    """A backfill's pieces: not flushed by themselves, so never reported to PostgreSQL as such."""
    log, seen = SyncRecordingLog(), []
    writer = LogWriter(log, seen.append)
    try:
        writer.submit([txn(100)], 108)
        writer.close()
        writer = LogWriter(log, seen.append)
        writer.submit([txn(200)], 208, background=True, sync=False)
        writer.close()
        assert log.syncs == [True, False] and lsns(log.read(EARLIEST, 10)) == [100, 200]
        assert writer.durable_lsn == 108 and [lsns(list(b)) for b in seen] == [[100], [200]]
    finally:
        writer.close()


def test_a_synced_batch_grouped_with_an_unsynced_one_flushes_both() -> None:
    log = SyncRecordingLog()
    writer = LogWriter(log, lambda _: None)
    try:
        writer.submit([txn(100)], 108, background=True, sync=False)
        writer.submit([txn(200)], 208, background=True)
        writer.close()
        assert writer.durable_lsn == 208 and lsns(log.read(EARLIEST, 10)) == [100, 200]
        assert log.syncs[-1] is True
    finally:
        writer.close()
