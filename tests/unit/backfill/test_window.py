"""Chunk judging on bytes alone (no watermark: the snapshot and the stream's position): which
rows of a chunk are stored, and where."""

from __future__ import annotations

import json

from pgfeed.assembler.framing import FRAME
from pgfeed.assembler.model import BackfillProgress, StoredTransaction
from pgfeed.assembler.spill import SpilledPayload
from pgfeed.backfill.rows import Rows
from pgfeed.backfill.schema import PublishedTable, relation_message
from pgfeed.backfill.window import Chunk, WindowTracker, precedes, tuple_key
from pgfeed.changelog.memory import MemoryChangeLog
from pgfeed.pgoutput.encode import encode
from pgfeed.pgoutput.messages import (
    DeleteMessage,
    InsertMessage,
    RelationColumn,
    RelationMessage,
    TruncateMessage,
    TupleData,
    UpdateMessage,
    pg_now_us,
)
from pgfeed_client._cursor import Cursor

REL = 16400
TABLE = PublishedTable(REL, "public", "t", "d", (("id", 20, -1, True), ("v", 25, -1, False)), (), None)
SCHEMA = (relation_message(TABLE),)


def row(i: int, v: str = "x") -> TupleData:
    return TupleData((str(i), v))


def txn(xid: int, commit_lsn: int, *messages: object) -> StoredTransaction:
    payload = b"".join(FRAME.pack(commit_lsn - 1, len(m)) + m for m in map(encode, messages))  # type: ignore[arg-type]
    return StoredTransaction(xid, commit_lsn, commit_lsn + 8, 0, None, len(messages), payload)


def other(xid: int, commit_lsn: int) -> StoredTransaction:
    """A live commit of another table: gives held chunks a position."""
    return txn(xid, commit_lsn, InsertMessage(None, REL + 1, row(1)))


def entries(*ids: int) -> Rows:
    return Rows.of([encode(InsertMessage(None, REL, row(i, "read"))) for i in ids], (0,))


def start(tracker: WindowTracker, token: str = "c1", floor: int = 100) -> Chunk:
    tracker.watch(REL, ("id",), (0,))
    chunk = Chunk(token, "bf_1", 0, REL, floor)
    tracker.register(chunk)
    return chunk


def read(tracker: WindowTracker, token: str, ids: tuple[int, ...], xip: tuple[int, ...] = (),
         xmax: int = 200, lsn: int = 1000) -> None:
    """The chunk's rows, read in a snapshot (``xmax``, ``xip``) at WAL insert position ``lsn``."""
    tracker.read(token, entries(*ids), xmax, xip, lsn,
                 BackfillProgress("bf_1", 0, json.dumps([str(ids[-1])]), 10, 1, False), SCHEMA)


def step(tracker: WindowTracker, units: list[StoredTransaction],
         received: int = 0) -> list[StoredTransaction]:
    """What capture does with a batch while its writer is idle: pass it on (its stream past
    ``received``), then release."""
    return tracker.process(units, received) + tracker.release()


def stored_ids(unit: StoredTransaction) -> list[int]:
    from pgfeed.decoding.changes import TransactionDecoder
    from pgfeed.decoding.relations import RelationCatalog
    txn_ = TransactionDecoder(RelationCatalog()).load(unit)
    assert all(c.op == "read" for c in txn_.changes) and txn_.origin == "pgfeed.backfill"
    assert txn_.backfill == "bf_1"
    return [c.after["id"] for c in txn_.changes]  # type: ignore[index]


def test_rows_changed_by_transactions_the_snapshot_does_not_see_are_left_out() -> None:
    tracker = WindowTracker()
    chunk = start(tracker)
    read(tracker, "c1", (1, 2, 3, 4, 5, 6, 30), xip=(160,), xmax=200, lsn=1000)
    units = [
        txn(150, 900, UpdateMessage(None, REL, None, None, row(1))),  # seen by the snapshot
        txn(160, 950, UpdateMessage(None, REL, None, None, row(6))),  # in progress for it
        txn(201, 990, UpdateMessage(None, REL, None, None, row(2))),  # began after it
        txn(202, 1200, UpdateMessage(None, REL, ord("K"), TupleData(("3", None)), row(30))),
        txn(203, 1300, DeleteMessage(None, REL, ord("K"), TupleData(("4", None)))),
        txn(204, 1350, InsertMessage(None, REL + 1, row(5))),  # another table
    ]
    out = step(tracker, units[:3], received=990)  # the stream has not passed the snapshot's position
    assert out == units[:3] and not chunk.done.is_set()
    (*passed, unit) = step(tracker, units[3:], received=1350)
    assert passed == units[3:]
    assert unit.xid == 0 and 1350 < unit.commit_lsn < 1358
    assert unit.origin == "pgfeed.backfill:bf_1" and unit.change_count == 2
    assert stored_ids(unit) == [1, 5]
    assert unit.progress == BackfillProgress("bf_1", 0, '["30"]', 12, 2, False)
    assert chunk.outcome == "stored" and chunk.stored_rows == 2 and chunk.done.is_set()


def test_xids_compare_across_wraparound() -> None:
    """pgoutput's 32-bit xids against the snapshot's xmax, modulo 2^32."""
    tracker = WindowTracker()
    start(tracker, floor=0xFFFFFF00)
    read(tracker, "c1", (1, 2, 3), xip=(0xFFFFFFF0,), xmax=5, lsn=1000)
    units = [txn(0xFFFFFFE0, 900, UpdateMessage(None, REL, None, None, row(1))),  # seen
             txn(0xFFFFFFF0, 950, UpdateMessage(None, REL, None, None, row(2))),  # in progress
             txn(3, 960, UpdateMessage(None, REL, None, None, row(3, "seen")))]  # seen (< xmax)
    assert stored_ids(step(tracker, units, received=1000)[-1]) == [1, 3]


def test_a_keepalive_past_the_position_judges_the_chunk_without_a_unit() -> None:
    tracker = WindowTracker()
    chunk = start(tracker)
    step(tracker, [other(150, 500)], received=500)
    read(tracker, "c1", (1,), lsn=1000)
    assert step(tracker, [], received=999) == [] and not chunk.done.is_set()
    (unit,) = step(tracker, [], received=1000)
    # inside the last unit's commit record: nothing passed on sits between it and the chunk's
    # own position (a chunk read on an idle source takes any position the stream passed)
    assert stored_ids(unit) == [1] and 500 < unit.commit_lsn < 508


def test_a_truncate_or_an_unscannable_transaction_the_snapshot_does_not_see_redoes_the_chunk() -> None:
    for middle in (txn(201, 1100, TruncateMessage(None, 0, (REL,))),
                   StoredTransaction(202, 1100, 1108, 0, None, 1,
                                     SpilledPayload(lambda: iter(()), 0, b""))):
        tracker = WindowTracker()
        chunk = start(tracker)
        read(tracker, "c1", (1,))
        assert step(tracker, [middle], received=1108) == [middle]
        assert chunk.outcome == "redo" and chunk.problem
    tracker = WindowTracker()  # one the snapshot sees is in the chunk already
    chunk = start(tracker)
    read(tracker, "c1", (1,))
    seen = txn(150, 900, TruncateMessage(None, 0, (REL,)))
    assert len(step(tracker, [seen], received=1000)) == 2 and chunk.outcome == "stored"


def test_a_truncate_by_an_in_progress_transaction_redoes_the_chunk() -> None:
    tracker = WindowTracker()
    chunk = start(tracker)
    step(tracker, [txn(150, 900, TruncateMessage(None, 0, (REL,)))])
    read(tracker, "c1", (1,), xip=(150,))
    step(tracker, [], received=1000)
    assert chunk.outcome == "redo"


def test_a_schema_change_the_snapshot_does_not_see_redoes_the_chunk() -> None:
    tracker = WindowTracker()
    chunk = start(tracker)
    wider = RelationMessage(None, REL, "public", "t", ord("d"), (
        RelationColumn(1, "id", 20, -1), RelationColumn(0, "v", 25, -1), RelationColumn(0, "w", 23, -1)))
    step(tracker, [txn(201, 1100, wider, InsertMessage(None, REL, TupleData(("7", "a", "1"))))])
    read(tracker, "c1", (1,))
    step(tracker, [], received=1100)
    assert chunk.outcome == "redo" and "schema" in (chunk.problem or "")


def test_suspects_and_forgotten_xids_redo_the_chunk_until_they_are_gone() -> None:
    tracker = WindowTracker(max_keys=4)
    chunk = start(tracker)
    tracker.suspect([140])
    read(tracker, "c1", (1,), xip=(140,))
    step(tracker, [], received=1000)
    assert chunk.outcome == "redo"
    # more remembered keys than allowed: the oldest xids are forgotten, and a snapshot naming one
    # of them can no longer be judged
    for xid in range(300, 306):
        step(tracker, [txn(xid, 2100 + xid, InsertMessage(None, REL, row(xid)))])
    second = Chunk("c2", "bf_1", 0, REL, 290)
    tracker.register(second)
    read(tracker, "c2", (1,), xip=(300,), xmax=306, lsn=3000)
    step(tracker, [], received=3000)
    assert second.outcome == "redo"
    third = Chunk("c3", "bf_1", 0, REL, 290)
    tracker.register(third)
    read(tracker, "c3", (1, 305), xip=(305,), xmax=306, lsn=3200)  # remembered: judged exactly
    (unit,) = step(tracker, [], received=3200)
    assert stored_ids(unit) == [1]
    fourth = Chunk("c4", "bf_1", 0, REL, 290)
    tracker.register(fourth)
    read(tracker, "c4", (1,), xmax=302, lsn=3300)  # 302.. not seen: may have been forgotten
    step(tracker, [], received=3300)
    assert fourth.outcome == "redo" and "forgotten" in (fourth.problem or "")


def test_cancel_finishes_the_chunk_and_stores_nothing() -> None:
    tracker = WindowTracker()
    chunk = start(tracker)
    read(tracker, "c1", (1,))
    tracker.cancel(backfill_id="bf_1")
    assert chunk.outcome == "cancelled"
    assert step(tracker, [other(150, 900)], received=2000) == [other(150, 900)]


def test_tuple_key_and_xid_order() -> None:
    data = encode(UpdateMessage(None, REL, ord("O"), TupleData(("1", None)), TupleData(("2", "b"))))
    assert tuple_key(data, 6, (0,)) == ((b"1",), 6 + 2 + 6 + 1)
    assert tuple_key(data, 6, (1,))[0] is None  # a NULL key column: not a usable key
    assert precedes(1, 2) and not precedes(2, 1) and precedes(0xFFFFFFF0, 5)


def test_the_assembler_serves_a_users_message_with_its_transaction() -> None:
    """No message is pgfeed's own any more: every transactional message stays in its unit."""
    from pgfeed.assembler.transactions import TransactionAssembler
    from pgfeed.pgoutput.messages import BeginMessage, CommitMessage, LogicalMessage

    assembler = TransactionAssembler()
    units = [u for lsn, m in [
        (100, BeginMessage(200, 5, 77)),
        (110, LogicalMessage(None, 1, 110, "pgfeed.watermark", b'{"t": "c1", "k": "h"}')),
        (200, CommitMessage(0, 200, 208, 5)),
    ] for u in assembler.feed(lsn, encode(m))]  # type: ignore[arg-type]
    (first,) = units
    assert (first.commit_lsn, first.end_lsn, first.change_count) == (200, 208, 1)
    assert assembler.confirmable_lsn == 208


def test_a_chunk_read_before_the_previous_was_judged_follows_its_fate() -> None:
    tracker = WindowTracker()
    first = start(tracker)
    step(tracker, [other(150, 900)])
    read(tracker, "c1", (1, 2))
    second = Chunk("c2", "bf_1", 0, REL, 100, pred=first)
    tracker.register(second)
    tracker.read("c2", entries(3, 4, 5), 200, (), 1100,
                 BackfillProgress("bf_1", 0, '["5"]', 0, 0, True), SCHEMA)
    units = step(tracker, [], received=1100) + tracker.release()  # live: a piece per release
    assert [stored_ids(u) for u in units] == [[1, 2], [3, 4, 5]]
    assert units[1].progress == BackfillProgress("bf_1", 0, '["5"]', 12 + 3, 2 + 1, True)

    redone = start(tracker, "c3")
    step(tracker, [txn(300, 2050, TruncateMessage(None, 0, (REL,)))])
    read(tracker, "c3", (6,), xmax=300, lsn=2000)
    after = Chunk("c4", "bf_1", 0, REL, 100, pred=redone)
    tracker.register(after)
    read(tracker, "c4", (7,), xmax=301, lsn=2100)
    assert step(tracker, [], received=2100) == []
    assert (redone.outcome, after.outcome) == ("redo", "redo")
    assert after.problem == "the chunk before it was not stored"


def test_a_held_chunk_goes_after_the_live_commits_that_came_meanwhile_minus_their_keys() -> None:
    """Capture's writer was busy when the chunk was judged: the chunk waits, and the live commits
    after it are stored first; the chunk then sits inside the last one's commit record."""
    tracker = WindowTracker()
    chunk = start(tracker)
    read(tracker, "c1", (1, 2, 3))
    assert tracker.process([other(150, 900)], 1000) == [other(150, 900)] and tracker.holding
    live = [txn(300, 2100, UpdateMessage(None, REL, None, None, row(2, "live"))),
            txn(301, 2200, DeleteMessage(None, REL, ord("K"), TupleData(("3", None))))]
    assert tracker.process(live, 2200) == live and not chunk.done.is_set()
    (unit,) = tracker.release()
    assert 2200 < unit.commit_lsn < 2208 and unit.end_lsn == unit.commit_lsn + 1  # after both
    assert stored_ids(unit) == [1]  # 2 and 3 changed after the snapshot, before this position
    assert chunk.outcome == "stored" and chunk.stored_rows == 1 and tracker.release() == []
    assert tracker.holding  # the table is still watched: capture keeps polling for the next chunk
    tracker.unwatch(REL)
    assert not tracker.holding
    assert unit.progress == BackfillProgress("bf_1", 0, '["3"]', 11, 2, False)


def test_a_non_transactional_unit_leaves_no_position_free_until_the_next_commit() -> None:
    tracker = WindowTracker()
    start(tracker)
    read(tracker, "c1", (1,))
    message = StoredTransaction(0, 2099, 2100, 0, None, 1, b"")  # end_position: end_lsn - 1
    tracker.process([message], 2100)
    assert tracker.release() == [] and tracker.holding
    (unit,) = step(tracker, [other(302, 2200)])[1:]
    assert 2200 < unit.commit_lsn < 2208


def test_while_live_commits_flow_a_chunk_is_stored_in_pieces_each_with_its_progress() -> None:
    from pgfeed.backfill import window

    tracker = WindowTracker()
    chunk = start(tracker)
    ids = tuple(range(10, 40))  # rows of one size: ten to a piece
    read(tracker, "c1", ids)
    piece = len(entries(*ids).frames) // 3  # rows' frames: each its bytes and LSN
    original = window.PIECE_BYTES, window.RELEASE_BYTES
    window.PIECE_BYTES = window.RELEASE_BYTES = piece  # one piece a release
    try:
        tracker.process([other(303, 2100)], 2100)
        first = tracker.release()
        assert len(first) == 1 and not chunk.done.is_set()
        tracker.process([txn(304, 2200, UpdateMessage(None, REL, None, None, row(39, "live")))], 2200)
        rest = tracker.release() + tracker.release() + tracker.release()
    finally:
        window.PIECE_BYTES, window.RELEASE_BYTES = original
    units = first + rest
    assert len(units) == 3 and chunk.outcome == "stored"
    assert [stored_ids(u) for u in units] == [  # 39 changed before the last pieces: left out
        list(range(10, 20)), list(range(20, 30)), list(range(30, 39))]
    assert [u.progress.last_key for u in units] == ['["19"]', '["29"]', '["39"]']  # type: ignore[union-attr]
    assert [u.progress.chunks for u in units] == [2, 3, 4]  # type: ignore[union-attr]
    assert [u.progress.rows for u in units] == [20, 30, 39]  # type: ignore[union-attr]
    assert [u.commit_lsn for u in units] == sorted({u.commit_lsn for u in units})


def test_one_idle_moment_of_the_writer_takes_several_pieces_up_to_the_release_budget() -> None:
    """While live commits flow, a release hands back pieces of at most PIECE_BYTES each, and
    goes on with the next while RELEASE_BYTES are not spent and free positions remain (one piece
    a release held the backfill to 0.23x COPY beside 500 commits/s)."""
    from pgfeed.backfill import window

    tracker = WindowTracker()
    chunk = start(tracker)
    ids = tuple(range(10, 70))  # rows of one size: ten to a piece
    read(tracker, "c1", ids)
    piece = len(entries(*ids).frames) // 6
    original = window.PIECE_BYTES, window.RELEASE_BYTES
    schema = FRAME.size + len(SCHEMA[0])  # each piece starts with the table's Relation
    # spent after two pieces: one byte short of the budget, so a third piece goes too
    window.PIECE_BYTES, window.RELEASE_BYTES = piece, 2 * (schema + piece) + 1
    try:
        tracker.process([other(303, 2100)], 2100)
        first = tracker.release()
        assert len(first) == 3 and not chunk.done.is_set()
        tracker.process([other(304, 2200)], 2200)
        rest = tracker.release()
    finally:
        window.PIECE_BYTES, window.RELEASE_BYTES = original
    units = first + rest
    assert [len(stored_ids(u)) for u in units] == [10] * 6 and chunk.outcome == "stored"
    assert [stored_ids(u)[0] for u in units] == list(range(10, 70, 10))
    assert [u.progress.last_key for u in units][-1] == '["69"]'  # type: ignore[union-attr]
    # each piece its own free position inside the commit record it follows
    assert [u.commit_lsn for u in units] == [2101, 2102, 2103, 2201, 2202, 2203]


def test_pieces_of_one_release_stop_where_the_free_positions_end() -> None:
    from pgfeed.backfill import window

    tracker = WindowTracker()
    chunk = start(tracker)
    read(tracker, "c1", tuple(range(1, 21)))
    original = window.PIECE_BYTES, window.RELEASE_BYTES
    window.PIECE_BYTES, window.RELEASE_BYTES = 1, 1 << 20  # one row a piece, many a release
    try:
        tracker.process([other(305, 2100)], 2100)  # positions 2101..2107 are free
        units = tracker.release()
        assert [u.commit_lsn for u in units] == list(range(2101, 2108)) and tracker.starved
        assert tracker.release() == []  # none left until the stream moves on
        units += tracker.release() + step(tracker, [other(306, 2200)])[1:]
    finally:
        window.PIECE_BYTES, window.RELEASE_BYTES = original
    assert [stored_ids(u) for u in units] == [[i] for i in range(1, 15)]
    assert not chunk.done.is_set()


def test_a_release_takes_pieces_up_to_its_budget_and_one_while_live_commits_are_slow() -> None:
    """RELEASE_BYTES (2 MiB by default, since pieces are written to piece files and not
    through the log's WAL) a release, and one piece while a live commit was lately slow to
    become durable."""
    import time

    from pgfeed.backfill import window

    assert window.RELEASE_BYTES == 2 << 20
    tracker = WindowTracker()
    start(tracker)
    read(tracker, "c1", tuple(range(1, 21)))
    original = window.PIECE_BYTES, window.RELEASE_BYTES
    window.PIECE_BYTES = 1  # one row a piece
    try:
        window.RELEASE_BYTES = 0
        tracker.process([other(305, 2100)], 2100)
        assert len(tracker.release()) == 1  # no budget: one piece
        window.RELEASE_BYTES = original[1]
        tracker.process([other(306, 2200)], 2200)
        tracker.durable([other(306, 2200)])  # not slow: the budget applies
        assert len(tracker.release()) == 7  # every free position of the commit record
        tracker.process([other(307, 2300)], 2300)
        time.sleep(window.LIVE_LATENCY * 1.5)
        tracker.durable([other(307, 2300)])  # slow: one piece a release for PAUSE_SECONDS
        assert len(tracker.release()) == 1
    finally:
        window.PIECE_BYTES, window.RELEASE_BYTES = original


def test_a_truncate_while_a_chunk_is_held_redoes_it_from_its_last_stored_piece() -> None:
    from pgfeed.backfill import window

    tracker = WindowTracker()
    chunk = start(tracker)
    read(tracker, "c1", tuple(range(1, 21)))
    original = window.PIECE_BYTES, window.RELEASE_BYTES
    window.PIECE_BYTES = window.RELEASE_BYTES = 1  # one row a piece, one piece a release
    try:
        tracker.process([other(305, 2100)], 2100)
        (piece,) = tracker.release()
        tracker.process([txn(306, 2200, TruncateMessage(None, 0, (REL,)))], 2200)
        assert tracker.release() == []
    finally:
        window.PIECE_BYTES, window.RELEASE_BYTES = original
    assert stored_ids(piece) == [1]
    assert chunk.outcome == "redo" and chunk.result == piece.progress  # the worker goes on after it
    assert piece.progress == BackfillProgress("bf_1", 0, '["1"]', 11, 2, False)


def test_a_chunk_goes_after_the_log_head_and_before_what_the_stream_has_not_passed() -> None:
    """Idle source: the positions a keepalive passed are free; after a restart, never at or
    below the log's head (replayed units are skipped by the log)."""
    tracker = WindowTracker()
    tracker.restart(5000)
    start(tracker)
    read(tracker, "c1", (1,), lsn=1000)
    assert step(tracker, [other(150, 4000)], received=5000) == [other(150, 4000)]  # a replay
    (unit,) = step(tracker, [], received=5003)
    assert unit.commit_lsn == 5001


def test_units_passed_while_nothing_is_watched_still_move_the_free_positions() -> None:
    tracker = WindowTracker()
    assert step(tracker, [other(150, 5000)], received=5008) == [other(150, 5000)]
    start(tracker)
    read(tracker, "c1", (1,), lsn=1000)
    (unit,) = step(tracker, [], received=5010)
    assert unit.commit_lsn == 5001


def test_a_new_capture_session_redoes_held_chunks() -> None:
    """The stream replays from the confirmed position: a held chunk placed among replayed units
    would sit below the log's head (and be skipped), so it is redone."""
    tracker = WindowTracker()
    chunk = start(tracker)
    read(tracker, "c1", (1,))
    tracker.process([], 1000)
    assert tracker.holding
    tracker.restart(0)
    assert chunk.outcome == "redo" and chunk.result is None and tracker.release() == []
    assert step(tracker, [other(300, 1500)])[1:] == []


def test_a_live_commit_slow_to_become_durable_holds_the_next_chunks_back() -> None:
    import threading
    import time

    from pgfeed.backfill import window

    tracker = WindowTracker()
    start(tracker)
    stop = threading.Event()
    fast = txn(301, 2100, InsertMessage(None, REL + 1, row(1)))
    slow = txn(302, 2200, InsertMessage(None, REL + 1, row(2)))
    tracker.process([fast, slow], 0)
    tracker.durable([fast])  # at once: no pause
    t = time.monotonic()
    tracker.pace(stop)
    assert time.monotonic() - t < 0.05 and tracker.paused == 0
    original = window.PAUSE_SECONDS, window.LIVE_LATENCY
    window.PAUSE_SECONDS, window.LIVE_LATENCY = 0.2, 0.01
    try:
        time.sleep(0.02)
        tracker.durable([slow])  # received 20 ms ago: slower than LIVE_LATENCY
        t = time.monotonic()
        tracker.pace(stop)
        assert 0.15 < time.monotonic() - t < 1.0 and tracker.paused > 0.1
        tracker.process([txn(303, 2300, InsertMessage(None, REL + 1, row(3)))], 0)
        time.sleep(0.02)
        tracker.durable([txn(303, 2300)])
        stop.set()  # a stopping worker does not wait
        t = time.monotonic()
        tracker.pace(stop)
        assert time.monotonic() - t < 0.05
    finally:
        window.PAUSE_SECONDS, window.LIVE_LATENCY = original


def test_pacing_costs_nothing_while_no_backfill_is_watched() -> None:
    tracker = WindowTracker()
    unit = txn(301, 2100, InsertMessage(None, REL, row(1)))
    assert tracker.process([unit], 0) == [unit]
    tracker.durable([unit])
    assert not tracker._received and tracker._slow_until == float("-inf")


def test_a_chunk_stored_on_an_idle_source_is_stamped_now_so_age_retention_keeps_it() -> None:
    """Issue 28.1's lost chunks: a piece has no commit of its own. Stamped with the last unit's
    commit_ts, the first chunks of a session (none passed yet: 0, i.e. 2000-01-01) or of a feed
    whose source was idle for days were older than any age retention, so the log's next
    ``retain`` dropped them while the part's progress (never trimmed) went on past them: the
    backfill said done with those rows missing."""

    week = 7 * 24 * 3_600_000_000
    for last_ts in (None, pg_now_us() - 2 * week):  # no unit this session; one two weeks old
        tracker = WindowTracker()
        tracker.restart(head=0)
        log = MemoryChangeLog()
        if last_ts is not None:
            old = other(150, 400)
            old = StoredTransaction(old.xid, old.commit_lsn, old.end_lsn, last_ts, None,
                                    old.change_count, old.payload)
            log.append(tracker.process([old], 408))
        start(tracker)
        read(tracker, "c1", (1, 2), lsn=1000)
        before = pg_now_us()
        (unit,) = step(tracker, [], received=1000)  # a keepalive judges it: no unit to sit in
        assert unit.commit_ts >= before
        log.append([unit])
        assert log.retain(168.0, None, pg_now_us()) == (0 if last_ts is None else 1)
        (kept,) = log.read(Cursor(unit.commit_lsn - 1), 10)
        assert kept.commit_lsn == unit.commit_lsn and stored_ids(kept) == [1, 2]


def test_chunks_waiting_for_wal_say_so_until_the_stream_moves_on() -> None:
    """A chunk is judged once the stream passes its position and stored at a position the
    stream has passed; on an idle source both wait for WAL (``starved``: capture sends its
    heartbeat early; bench/backfill.py ran at ~15,000 rows/s without it)."""
    tracker = WindowTracker()
    tracker.restart(head=0)
    start(tracker, "c1")
    tracker.register(Chunk("c2", "bf_1", 1, REL, 100))
    read(tracker, "c1", (1,), lsn=1000)
    tracker.read("c2", entries(5), 200, (), 1000,
                 BackfillProgress("bf_1", 1, json.dumps(["5"]), 0, 0, False), SCHEMA)
    assert tracker.holding and tracker.starved  # read past the stream's position: wait for WAL
    tracker.process([], 999)
    assert tracker.starved
    (first,) = tracker.process([], 1000) + tracker.release(head=998)  # one position left: 999
    assert first.commit_lsn == 999 and tracker.holding and tracker.starved
    assert tracker.release(head=999) == [] and tracker.starved
    (second,) = tracker.process([], 1060) + tracker.release(head=999)  # the heartbeat's record
    assert second.commit_lsn == 1000 and not tracker.starved and tracker.release() == []
