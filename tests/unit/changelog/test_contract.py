"""The ChangeLog contract, run against every store (memory, SQLite, and the PostgreSQL store on
each of the suite's clusters)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest

from pgfeed.assembler.model import BackfillProgress
from pgfeed.changelog import KINDS, ChangeLogError, open_changelog
from pgfeed.changelog.backfills import BackfillPart, BackfillRecord, TableStatus, derive_state
from pgfeed.changelog.base import ChangeLog, ConsumerState, LogStats
from pgfeed.errors import RetentionError
from pgfeed.pgoutput.messages import pg_now_us
from pgfeed_client._cursor import EARLIEST, Cursor
from tests.fixtures.fix_pg import PG_VERSIONS
from tests.unit.changelog.txns import SECOND, lsns, txn

L = 10_000  # commit LSNs below are multiples of L

STORES = [*KINDS, *(pytest.param(f"postgresql-{v}", marks=pytest.mark.pg, id=f"pgstore{v}")
                    for v in PG_VERSIONS)]


@pytest.fixture(params=STORES)
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChangeLog]:
    if request.param.startswith("postgresql-"):
        from tests.fixtures.fix_pgstore import leading_changelog

        clusters = request.getfixturevalue("pg_clusters")
        with leading_changelog(clusters.get(request.param.split("-")[1])) as store:
            yield store
        return
    store = open_changelog(request.param, tmp_path / "changelog.db")
    yield store
    store.close()


def fill(log: ChangeLog, count: int = 5, changes: int = 5) -> None:
    """Transactions at L, 2L, … count·L, each with ``changes`` changes."""
    log.append([txn(i * L, changes) for i in range(1, count + 1)])


# -- appending ----------------------------------------------------------------------------------


def test_empty_log(log: ChangeLog) -> None:
    assert (log.head(), log.oldest(), log.confirmed_lsn(), log.trimmed_lsn()) == (0, 0, 0, 0)
    assert log.read(EARLIEST, 100) == []
    assert log.stats() == LogStats(0, 0, 0, 0, 0, 0, 0)
    assert log.consumers() == {} and log.get_consumer("x") is None
    assert log.schema_history() == []
    assert log.trim(10**9) == 0 and log.retain(0, 0, 10**15) == 0


def test_append_then_read_round_trips_every_field(log: ChangeLog) -> None:
    a = txn(L, 3, ts=5 * SECOND, schema=True, origin="node1")
    b = txn(2 * L, 0, ts=6 * SECOND)  # schema-only / empty transactions are stored too
    c = txn(3 * L, 1, ts=7 * SECOND, xid=0)
    log.append([a, b, c], confirmed_lsn=3 * L + 8)
    assert log.read(EARLIEST, 100) == [a, b, c]
    assert (log.head(), log.oldest(), log.confirmed_lsn()) == (3 * L, L, 3 * L + 8)
    assert log.stats() == LogStats(3, 4, len(a.payload) + len(b.payload) + len(c.payload), L, 3 * L)


def test_append_is_idempotent_by_commit_lsn(log: ChangeLog) -> None:
    fill(log, 3)
    log.append([txn(2 * L, 9), txn(3 * L, 9), txn(4 * L, 5)])  # a replay overlapping the head
    log.append([txn(L, 9)])
    stored = log.read(EARLIEST, 10**6)
    assert lsns(stored) == [L, 2 * L, 3 * L, 4 * L]
    assert [t.change_count for t in stored] == [5, 5, 5, 5]  # the originals, not the replays
    assert log.stats().change_count == 20


def test_batch_out_of_order_is_rejected_whole(log: ChangeLog) -> None:
    fill(log, 1)
    for bad in ([txn(3 * L), txn(2 * L)], [txn(2 * L), txn(2 * L)]):
        with pytest.raises(ValueError, match="ascending"):
            log.append(bad, confirmed_lsn=10**6)
    with pytest.raises(ValueError):
        log.append([txn(1 << 63)])
    assert log.head() == L and log.confirmed_lsn() == 0


def test_bytearray_payload_is_copied_at_append(log: ChangeLog) -> None:
    t = txn(L, 4)
    original = bytes(t.payload)
    t.payload = bytearray(original)
    log.append([t])
    t.payload[:] = b"\0" * len(original)  # the caller reuses its buffer
    assert bytes(log.read(EARLIEST, 10)[0].payload) == original


def test_confirmed_lsn_never_moves_backward(log: ChangeLog) -> None:
    log.append([txn(L)], confirmed_lsn=100_000)
    log.append([txn(2 * L)], confirmed_lsn=50_000)
    assert log.confirmed_lsn() == 100_000
    log.set_confirmed_lsn(40_000)
    assert log.confirmed_lsn() == 100_000
    log.set_confirmed_lsn(200_000)
    log.append([], confirmed_lsn=300_000)  # an idle position, no transactions
    assert log.confirmed_lsn() == 300_000
    log.append([txn(L)], confirmed_lsn=None)
    assert log.confirmed_lsn() == 300_000


def test_head_survives_trimming_everything_so_replays_stay_skipped(log: ChangeLog) -> None:
    fill(log, 3)
    assert log.trim(10**9) == 3
    assert (log.head(), log.oldest(), log.trimmed_lsn()) == (3 * L, 0, 3 * L)
    log.append([txn(2 * L), txn(3 * L), txn(4 * L)])
    assert lsns(log.read(EARLIEST, 100)) == [4 * L]
    assert log.stats() == LogStats(1, 3, len(txn(4 * L).payload), 4 * L, 4 * L, 3 * L, 0)


# -- reading -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("after", "expected"), [
    (EARLIEST, [1, 2, 3, 4, 5]),
    (Cursor(2 * L), [3, 4, 5]),  # the whole transaction at 2L was consumed
    (Cursor(2 * L + 1), [3, 4, 5]),  # between transactions
    (Cursor(2 * L, 0), [2, 3, 4, 5]),  # changes 1..4 of 2L are still due
    (Cursor(2 * L, 3), [2, 3, 4, 5]),
    (Cursor(2 * L, 4), [3, 4, 5]),  # the last seq: nothing of 2L left
    (Cursor(2 * L, 99), [3, 4, 5]),
    (Cursor(2 * L + 1, 0), [3, 4, 5]),  # a seq cursor where no transaction is
    (Cursor(5 * L), []),
    (Cursor((1 << 64) - 1), []),
])
def test_read_after_each_cursor_form(log: ChangeLog, after: Cursor, expected: list[int]) -> None:
    fill(log)
    assert lsns(log.read(after, 10**6)) == [i * L for i in expected]


def test_read_stops_once_max_changes_are_reached_and_may_overshoot(log: ChangeLog) -> None:
    fill(log)  # 5 changes each
    assert lsns(log.read(EARLIEST, 1)) == [L]
    assert lsns(log.read(EARLIEST, 5)) == [L]
    assert lsns(log.read(EARLIEST, 6)) == [L, 2 * L]  # overshoots: the caller slices
    assert lsns(log.read(EARLIEST, 10)) == [L, 2 * L]
    # Mid-transaction: only the changes past the cursor count.
    assert lsns(log.read(Cursor(L, 2), 2)) == [L]
    assert lsns(log.read(Cursor(L, 2), 3)) == [L, 2 * L]
    assert log.read(EARLIEST, 0) == []


def test_empty_transactions_are_returned_but_count_no_changes(log: ChangeLog) -> None:
    log.append([txn(L, 0, schema=True), txn(2 * L, 2), txn(3 * L, 0), txn(4 * L, 2)])
    assert lsns(log.read(EARLIEST, 2)) == [L, 2 * L]
    assert lsns(log.read(Cursor(2 * L), 1)) == [3 * L, 4 * L]


def test_read_stops_at_upto_lsn_inclusive(log: ChangeLog) -> None:
    fill(log)
    assert lsns(log.read(EARLIEST, 10**6, upto_lsn=3 * L)) == [L, 2 * L, 3 * L]
    assert lsns(log.read(EARLIEST, 10**6, upto_lsn=3 * L - 1)) == [L, 2 * L]
    assert lsns(log.read(Cursor(3 * L, 1), 10**6, upto_lsn=3 * L)) == [3 * L]
    assert log.read(Cursor(3 * L), 10**6, upto_lsn=3 * L) == []
    assert log.read(EARLIEST, 10**6, upto_lsn=0) == []


# -- split points -----------------------------------------------------------------------------


def _part_changes(log: ChangeLog, bounds: list[int]) -> list[int]:
    stored = log.read(EARLIEST, 10**9)
    return [sum(t.change_count for t in stored if lo < t.commit_lsn <= hi)
            for lo, hi in pairwise(bounds)]


def test_split_points_cut_equal_change_counts(log: ChangeLog) -> None:
    fill(log, 20, changes=10)  # 200 changes
    bounds = log.split_points(0, log.head(), 4)
    assert bounds[0] == 0 and bounds[-1] == 20 * L and len(bounds) == 5
    assert bounds == sorted(set(bounds))
    assert _part_changes(log, bounds) == [50, 50, 50, 50]
    inner = log.split_points(5 * L, 15 * L, 2)  # a sub-range: 100 changes
    assert inner == [5 * L, 10 * L, 15 * L]
    assert log.split_points(0, 20 * L, 1) == [0, 20 * L]


def test_split_points_balance_uneven_transactions(log: ChangeLog) -> None:
    log.append([txn(i * L, c) for i, c in enumerate([40, 1, 1, 1, 30, 5, 5, 5, 5, 7], start=1)])
    bounds = log.split_points(0, log.head(), 3)
    assert bounds[0] == 0 and bounds[-1] == 10 * L and bounds == sorted(set(bounds))
    parts = _part_changes(log, bounds)
    assert sum(parts) == 100 and len(parts) == 3 and max(parts) <= 45


def test_split_points_with_fewer_transactions_than_parts(log: ChangeLog) -> None:
    fill(log, 3)
    bounds = log.split_points(0, 3 * L, 8)
    assert bounds == [0, L, 2 * L, 3 * L]
    assert log.split_points(L, 2 * L, 8) == [L, 2 * L]


def test_split_points_of_an_empty_range(log: ChangeLog) -> None:
    assert log.split_points(0, 0, 4) == [0]
    assert log.split_points(0, 5 * L, 4) == [0, 5 * L]
    fill(log, 3)
    assert log.split_points(3 * L, 9 * L, 4) == [3 * L, 9 * L]
    assert log.split_points(2 * L, 2 * L, 4) == [2 * L]
    with pytest.raises(ValueError, match="parts"):
        log.split_points(0, L, 0)
    with pytest.raises(ValueError, match="before it starts"):
        log.split_points(2 * L, L, 2)


# -- schema history and consumers ----------------------------------------------------------------


def test_schema_history_in_commit_order_never_trimmed(log: ChangeLog) -> None:
    a, b, c = txn(L, 1, schema=True), txn(2 * L, 1), txn(3 * L, 1, schema=True)
    log.append([a, b, c])
    log.append([txn(3 * L, 1, schema=True)])  # a replay adds nothing
    expected = [(L, a.schema_frames[0]), (3 * L, c.schema_frames[0])]
    assert log.schema_history() == expected
    assert log.schema_history(L) == expected[1:]
    log.trim(10**9)
    assert log.schema_history() == expected


def test_consumers_never_move_backward(log: ChangeLog) -> None:
    log.set_consumer("spark", Cursor(2 * L, 3))
    log.set_consumer("spark", Cursor(2 * L, 1))
    assert log.get_consumer("spark") == Cursor(2 * L, 3)
    log.set_consumer("spark", Cursor(2 * L))  # whole transaction: after every seq of it
    log.set_consumer("spark", Cursor(2 * L, 10**9))
    assert log.get_consumer("spark") == Cursor(2 * L)
    log.set_consumer("app", EARLIEST)
    assert log.consumers() == {"app": EARLIEST, "spark": Cursor(2 * L)}
    with pytest.raises(ValueError):
        log.set_consumer("", Cursor(1))


# -- retention ---------------------------------------------------------------------------------


def test_trim_stops_at_the_slowest_consumer(log: ChangeLog) -> None:
    fill(log)
    log.set_consumer("fast", Cursor(5 * L))
    log.set_consumer("slow", Cursor(2 * L, 3))  # 2L is not fully acknowledged
    assert log.trim(10**9) == 1
    assert (log.oldest(), log.trimmed_lsn()) == (2 * L, L)
    log.set_consumer("slow", Cursor(2 * L, 4))  # its last change: acknowledged
    assert log.trim(10**9) == 1
    log.set_consumer("slow", Cursor(3 * L + 1))  # between transactions
    assert log.trim(10**9) == 1
    assert log.oldest() == 4 * L and log.trim(4 * L) == 0
    assert log.stats().forced_trims == 0


def test_forced_trim_is_logged_and_counted(log: ChangeLog, caplog: pytest.LogCaptureFixture) -> None:
    fill(log)
    log.set_consumer("slow", Cursor(L))
    with caplog.at_level(logging.WARNING, logger="pgfeed.changelog"):
        assert log.trim(L + 1, force=True) == 1  # acknowledged anyway: not counted
        assert log.stats().forced_trims == 0 and not caplog.records
        assert log.trim(4 * L, force=True) == 2
    assert log.stats().forced_trims == 1 and log.trimmed_lsn() == 3 * L
    assert any("slow" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    log.set_consumer("slow", Cursor(4 * L, 3))  # 4L is not fully acknowledged
    assert log.trim(4 * L + 1, force=True) == 1
    assert log.stats().forced_trims == 2


def test_a_forced_trim_removes_the_consumers_it_overtook(log: ChangeLog) -> None:
    """Otherwise a consumer below the oldest retained position would hold every later trim."""
    fill(log)
    log.set_consumer("behind", Cursor(L), acked_us=1)
    log.set_consumer("mid", Cursor(3 * L, 1), acked_us=2)
    log.set_consumer("ahead", Cursor(3 * L), acked_us=3)
    assert log.trim(3 * L + 1, force=True) == 3
    assert log.consumer_states() == {"ahead": ConsumerState(Cursor(3 * L), 3)}
    assert log.retain(None, 0, 0) == 0  # "ahead" holds the rest ...
    log.set_consumer("ahead", Cursor(5 * L), acked_us=4)
    assert log.retain(None, 0, 0) == 2  # ... until it acknowledges


def test_a_consumer_is_never_created_below_what_was_dropped(log: ChangeLog) -> None:
    fill(log)
    log.trim(2 * L + 1)
    for cursor in (EARLIEST, Cursor(L), Cursor(2 * L, 4)):
        with pytest.raises(RetentionError) as refused:
            log.set_consumer("late", cursor)
        assert refused.value.oldest == str(Cursor(2 * L))
    assert log.consumers() == {}
    log.set_consumer("late", Cursor(2 * L))  # the oldest position still served
    log.set_consumer("late", EARLIEST)  # an existing consumer: an older cursor is ignored
    assert log.consumers() == {"late": Cursor(2 * L)}


def test_consumer_acknowledgement_times_move_forward_and_expire(log: ChangeLog,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    fill(log)
    log.set_consumer("spark", Cursor(2 * L), acked_us=100)
    log.set_consumer("spark", Cursor(L), acked_us=300)  # an older cursor still counts as activity
    log.set_consumer("spark", Cursor(3 * L), acked_us=200)
    log.set_consumer("app", Cursor(L), acked_us=250)
    assert log.consumer_states() == {"app": ConsumerState(Cursor(L), 250),
                                     "spark": ConsumerState(Cursor(3 * L), 300)}
    assert log.retain(None, 0, 0) == 1  # "app" holds the rest
    with caplog.at_level(logging.WARNING, logger="pgfeed.changelog"):
        assert log.expire_consumers(250) == []
        assert log.expire_consumers(251) == ["app"]
    assert any("app" in r.getMessage() and "expired" in r.getMessage() for r in caplog.records)
    assert log.consumers() == {"spark": Cursor(3 * L)}
    assert log.retain(None, 0, 0) == 2
    before = pg_now_us()
    log.set_consumer("now", Cursor(5 * L))  # default: acknowledged now
    assert before <= log.consumer_states()["now"].acked_us <= pg_now_us()


def test_deleting_a_consumer_releases_what_it_held(log: ChangeLog) -> None:
    fill(log)
    log.set_consumer("slow", Cursor(L))
    assert log.retain(None, 0, 0) == 1
    assert log.delete_consumer("slow") is True and log.delete_consumer("slow") is False
    assert log.get_consumer("slow") is None and log.consumer_states() == {}
    assert log.retain(None, 0, 0) == 4 and log.stats().forced_trims == 0


def test_forced_trim_without_consumers_is_not_counted(log: ChangeLog) -> None:
    fill(log)
    assert log.trim(1 << 63, force=True) == 5
    assert log.stats().forced_trims == 0


def test_trimmed_lsn_never_moves_backward(log: ChangeLog) -> None:
    fill(log)
    log.trim(3 * L + 1)
    assert log.trimmed_lsn() == 3 * L
    log.trim(2 * L)
    assert log.trimmed_lsn() == 3 * L
    assert lsns(log.read(EARLIEST, 100)) == [4 * L, 5 * L]
    assert lsns(log.read(Cursor(L), 100)) == [4 * L, 5 * L]


def test_retain_by_age(log: ChangeLog) -> None:
    now = 1000 * 3600 * SECOND
    hour = 3600 * SECOND
    log.append([txn(i * L, ts=now - (10 - i) * hour) for i in range(1, 6)])  # 9h … 5h old
    assert log.retain(None, None, now) == 0
    assert log.retain(7.5, None, now) == 2  # 9h and 8h old
    assert log.oldest() == 3 * L
    log.set_consumer("slow", Cursor(3 * L, 0))
    assert log.retain(0, None, now) == 0  # 3L not acknowledged yet
    log.set_consumer("slow", Cursor(4 * L))
    assert log.retain(0, None, now) == 2
    assert lsns(log.read(EARLIEST, 100)) == [5 * L]
    with pytest.raises(ValueError):
        log.retain(-1, None, now)


def test_retain_by_bytes(log: ChangeLog) -> None:
    fill(log)
    size = len(txn(L, 5).payload)  # every transaction has the same size
    assert log.retain(None, 5 * size, 0) == 0
    assert log.retain(None, 3 * size + 1, 0) == 2
    assert log.stats().payload_bytes == 3 * size
    assert log.retain(None, 3 * size, 0) == 0
    log.set_consumer("slow", Cursor(3 * L))
    assert log.retain(None, 0, 0) == 1  # only what "slow" has acknowledged
    assert log.stats().payload_bytes == 2 * size and log.trimmed_lsn() == 3 * L
    log.set_consumer("slow", Cursor(5 * L))
    assert log.retain(None, 0, 0) == 2
    assert log.stats() == LogStats(0, 0, 0, 0, 5 * L, 5 * L, 0)
    with pytest.raises(ValueError):
        log.retain(None, -1, 0)


def test_retain_takes_the_stricter_of_age_and_bytes(log: ChangeLog) -> None:
    now = 100 * 3600 * SECOND
    log.append([txn(i * L, ts=now - (10 - i) * 3600 * SECOND) for i in range(1, 6)])
    size = len(txn(L).payload)
    assert log.retain(8.5, 2 * size, now) == 3  # age alone drops 1, bytes alone 3
    assert log.retain(5.5, 10 * size, now) == 1


# -- lifecycle and threads ------------------------------------------------------------------------


def test_close_is_idempotent_and_later_calls_fail_clearly(log: ChangeLog) -> None:
    fill(log, 1)
    log.close()
    log.close()
    with pytest.raises(ChangeLogError, match="closed"):
        log.append([txn(2 * L)])
    with pytest.raises(ChangeLogError, match="closed"):
        log.read(EARLIEST, 10)


def test_open_changelog_names_the_accepted_kinds(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sqlite, memory"):
        open_changelog("postgres", tmp_path / "x.db")


def test_concurrent_readers_never_see_part_of_a_batch(log: ChangeLog) -> None:
    batch, batches = 3, 60
    failures: list[str] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            stored = log.read(EARLIEST, 10**9)
            stats = log.stats()
            if len(stored) % batch or stats.transaction_count % batch:
                failures.append(f"saw {len(stored)} / {stats.transaction_count} transactions")
            if lsns(stored) != sorted(lsns(stored)):
                failures.append("out of order")
            if any(t != txn(t.commit_lsn, 2) for t in stored):
                failures.append("damaged transaction")

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for b in range(batches):
            log.append([txn((b * batch + i + 1) * L, 2) for i in range(batch)], confirmed_lsn=b)
    finally:
        done.set()
        for t in threads:
            t.join()
    assert not failures, failures[:3]
    assert log.stats().transaction_count == batch * batches


# -- reading a big payload chunk by chunk (read(lazy_chunks=...), issue 29.2) ----------------------


def _small_chunks(log: ChangeLog, size: int = 1000) -> None:
    """Store payloads in chunks of ``size`` bytes (the memory store keeps payloads whole)."""
    if hasattr(log, "chunk_bytes"):
        log.chunk_bytes = size  # type: ignore[attr-defined]


def _walk_segments(payload: object) -> bytes:
    """The payload read segment by segment the decoder's way (a frame over a segment's end is
    asked for again at its start), joined: must be the payload's bytes."""
    from pgfeed.assembler.chunked import segments
    from pgfeed.assembler.framing import walk

    total = len(payload)  # type: ignore[arg-type]
    out = bytearray()
    pos = 0
    while pos < total:
        base, buf = segments(payload, pos)  # type: ignore[arg-type]
        nxt = base + len(buf)
        for at, _lsn, _start, stop in walk(buf, pos - base):
            if stop > len(buf):
                nxt = base + at
                break
            out += buf[at:stop]
        assert nxt > pos, "no progress"
        pos = nxt
    return bytes(out)


def test_a_big_payload_is_read_a_chunk_at_a_time(log: ChangeLog) -> None:
    from pgfeed.assembler.chunked import ChunkedPayload

    _small_chunks(log)
    # 3000 rows: more than the SQLite log's in-memory tail keeps, so it is read from the file
    small, big, wide = txn(L, 2), txn(2 * L, 3000, schema=True), txn(3 * L, 4, row_bytes=2500)
    tiny = txn(4 * L, 1)
    log.append([small, big, wide, tiny])
    eager = log.read(EARLIEST, 10**6)
    lazy = log.read(EARLIEST, 10**6, lazy_chunks=1)
    assert eager == [small, big, wide, tiny]
    assert [replace(t, payload=b"") for t in lazy] == [replace(t, payload=b"") for t in eager]
    for got, want in zip(lazy, eager, strict=True):
        assert len(got.payload) == len(want.payload)
        assert bytes(got.payload) == bytes(want.payload)
        assert _walk_segments(got.payload) == bytes(want.payload)  # frames over chunk ends too
    chunked = [t.commit_lsn for t in lazy if isinstance(t.payload, ChunkedPayload)]
    # Stores that keep chunks load the multi-chunk payloads on demand; the memory store holds
    # every payload already.
    assert chunked == ([] if not hasattr(log, "chunk_bytes") else [2 * L, 3 * L])
    # a page stopping inside the big one, and the next page's read from its cursor
    assert lsns(log.read(Cursor(2 * L, 2900), 10, lazy_chunks=1)) == [2 * L]
    assert bytes(log.read(Cursor(2 * L, 2900), 10, lazy_chunks=1)[0].payload) == big.payload


def test_a_chunk_trimmed_under_a_reader_is_a_retention_error_never_other_bytes(
        log: ChangeLog) -> None:
    _small_chunks(log)
    first, second = txn(L, 3000), txn(2 * L, 100)  # past the SQLite log's in-memory tail
    log.append([first, second])
    (reading,) = log.read(EARLIEST, 1, lazy_chunks=1)
    payload = reading.payload
    assert log.trim(2 * L) == 1  # retention drops it while the reader is inside it
    if isinstance(payload, (bytes, bytearray)):  # held whole (the memory store): still its bytes
        assert bytes(payload) == first.payload
        return
    from pgfeed.assembler.chunked import ChunkedPayload

    assert isinstance(payload, ChunkedPayload) and payload.chunks > 1
    with pytest.raises(RetentionError, match="dropped by the feed's retention while it was being "
                                             "read") as raised:
        for i in range(payload.chunks):
            payload.chunk(i)
    assert raised.value.oldest == "0/4E20"  # the next transaction, 2L
    assert bytes(log.read(EARLIEST, 10**6, lazy_chunks=1)[0].payload) == second.payload


@pytest.mark.parametrize("lazy", [None, 1])
def test_backfill_pieces_read_back_in_place_among_live_transactions(log: ChangeLog,
                                                                    lazy: int | None) -> None:
    """A backfill's pieces (transactions with progress; the SQLite log keeps their payloads in
    piece files) read back byte for byte in commit order with the live transactions around
    them, whole or a chunk at a time, synced or not, and their progress is the part's."""
    _small_chunks(log)
    log.save_backfill(_backfill())
    origin = "pgfeed.backfill:b1"
    live, small, big, later = txn(L, 2), txn(2 * L, 5, origin=origin), \
        txn(3 * L, 3000, schema=True, origin=origin), txn(4 * L, 1)
    small.progress = BackfillProgress("b1", 0, '["5"]', rows=5, chunks=1, done=False)
    big.progress = BackfillProgress("b1", 0, '["3005"]', rows=3005, chunks=2, done=True)
    log.append([live, small])
    log.append([big], sync=False)
    log.append([later])
    got = log.read(EARLIEST, 10**6, lazy_chunks=lazy)
    assert [(t.commit_lsn, t.origin, t.change_count, t.schema_frames, bytes(t.payload)) for t in got] == \
        [(t.commit_lsn, t.origin, t.change_count, t.schema_frames, t.payload) for t in (live, small, big, later)]
    assert _walk_segments(got[2].payload) == big.payload
    assert lsns(log.read(Cursor(3 * L, 2995), 10, lazy_chunks=lazy)) == [3 * L, 4 * L]
    part = log.backfills()[0].parts[0]
    assert (part.last_key, part.rows, part.chunks, part.done) == ('["3005"]', 3005, 2, True)
    assert log.stats().payload_bytes == sum(len(t.payload) for t in (live, small, big, later))


# -- backfills ----------------------------------------------------------------------------------


def _backfill(id_: str = "b1", parts: int = 2) -> BackfillRecord:
    return BackfillRecord(id_, ("public.t",), chunk_rows=10, parallel=2, created_at=1.0,
                          parts=tuple(BackfillPart(i, "public.t", estimate=5) for i in range(parts)))


def test_backfill_progress_is_stored_with_its_chunk(log: ChangeLog) -> None:
    record = _backfill()
    log.save_backfill(record)
    assert log.backfills() == [record]
    chunk = txn(L, 3)
    chunk.progress = BackfillProgress("b1", 1, '["7"]', rows=3, chunks=1, done=False)
    log.append([chunk])
    (stored,) = log.backfills()
    assert stored.parts[1] == BackfillPart(1, "public.t", estimate=5, last_key='["7"]', rows=3,
                                           chunks=1)
    assert stored.parts[0] == record.parts[0]
    replay = txn(L, 3)  # a replay of the same position is skipped, with its progress
    replay.progress = BackfillProgress("b1", 1, '["9"]', rows=9, chunks=9, done=True)
    log.append([replay])
    assert log.backfills()[0].parts[1].last_key == '["7"]'


def test_save_backfill_replaces_the_header_and_keeps_progress(log: ChangeLog) -> None:
    record = _backfill()
    log.save_backfill(record)
    chunk = txn(L, 1)
    chunk.progress = BackfillProgress("b1", 0, '["1"]', rows=1, chunks=1, done=True)
    log.append([chunk])
    log.save_backfill(record.with_state("failed", "boom", 2.0))  # parts as first planned
    log.save_backfill(_backfill("b2", 1))
    first, second = log.backfills()
    assert (first.id, first.state, first.error, first.finished_at) == ("b1", "failed", "boom", 2.0)
    assert first.parts[0].done and first.parts[0].rows == 1
    assert second.id == "b2" and len(second.parts) == 1


def test_a_tables_own_end_and_parts_planned_later_are_kept(log: ChangeLog) -> None:
    """Issue 28.3: a table failed or cancelled alone is in the header; a table refused at the
    start gets its parts when retried (parts are created once, by number)."""
    record = replace(_backfill(parts=1), tables=("public.t", "public.u"), ended=(
        TableStatus("public.u", "failed", "no key", 2.0),))
    log.save_backfill(record)
    (stored,) = log.backfills()
    assert stored.ended == record.ended
    assert stored.table_states() == {"public.t": "running", "public.u": "failed"}
    chunk = txn(L, 1)
    chunk.progress = BackfillProgress("b1", 0, '["1"]', rows=1, chunks=1, done=True)
    log.append([chunk])
    assert derive_state(log.backfills()[0].table_states()) == "failed"
    retried = replace(log.backfills()[0].with_table(None, "public.u"), parts=(
        *record.parts, BackfillPart(1, "public.u", estimate=3)))
    log.save_backfill(retried)
    (stored,) = log.backfills()
    assert stored.ended == () and [p.table for p in stored.parts] == ["public.t", "public.u"]
    assert stored.parts[0].done  # progress stays
    assert stored.table_states() == {"public.t": "done", "public.u": "running"}


def test_backfills_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "changelog.db"
    log = open_changelog("sqlite", path)
    log.save_backfill(_backfill())
    chunk = txn(L, 2)
    chunk.progress = BackfillProgress("b1", 0, '["2"]', rows=2, chunks=1, done=False)
    log.append([chunk])
    log.close()
    log = open_changelog("sqlite", path)
    try:
        assert log.backfills()[0].parts[0].last_key == '["2"]'
    finally:
        log.close()
