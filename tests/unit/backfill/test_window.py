"""The watermark window logic on bytes alone: which rows of a chunk are stored, and where."""

from __future__ import annotations

import json
import struct

from service.assembler.framing import FRAME
from service.assembler.model import BackfillProgress, StoredTransaction
from service.assembler.spill import SpilledPayload
from service.backfill.schema import PublishedTable, relation_message
from service.backfill.window import Chunk, Entry, WindowTracker, precedes, tuple_key
from service.pgoutput.encode import encode
from service.pgoutput.messages import (
    DeleteMessage,
    InsertMessage,
    RelationColumn,
    RelationMessage,
    TruncateMessage,
    TupleData,
    UpdateMessage,
)

REL = 16400
TABLE = PublishedTable(REL, "public", "t", "d", (("id", 20, -1, True), ("v", 25, -1, False)), (), None)
SCHEMA = (relation_message(TABLE),)


def row(i: int, v: str = "x") -> TupleData:
    return TupleData((str(i), v))


def txn(xid: int, commit_lsn: int, *messages: object) -> StoredTransaction:
    payload = b"".join(FRAME.pack(commit_lsn - 1, len(m)) + m for m in map(encode, messages))  # type: ignore[arg-type]
    return StoredTransaction(xid, commit_lsn, commit_lsn + 8, 0, None, len(messages), payload)


def watermark(token: str, kind: str, commit_lsn: int) -> StoredTransaction:
    return StoredTransaction(7, commit_lsn, commit_lsn + 8, 5, None, 0, b"",
                             watermark=json.dumps({"t": token, "k": kind}).encode())


def entries(*ids: int) -> list[Entry]:
    out = []
    for i in ids:
        message = encode(InsertMessage(None, REL, row(i, "read")))
        out.append(((str(i).encode(),), struct.pack(">I", len(message)) + message))
    return out


def start(tracker: WindowTracker, token: str = "c1", floor: int = 100) -> Chunk:
    tracker.watch(REL, ("id",), (0,))
    chunk = Chunk(token, "bf_1", 0, REL, floor)
    tracker.register(chunk)
    return chunk


def read(tracker: WindowTracker, token: str, ids: tuple[int, ...], xip: tuple[int, ...] = ()) -> None:
    tracker.read(token, entries(*ids), xip, BackfillProgress("bf_1", 0, json.dumps([str(ids[-1])]),
                                                            10, 1, False), SCHEMA)


def stored_ids(unit: StoredTransaction) -> list[int]:
    from service.assembler.relations import RelationCatalog
    from service.decoding.changes import TransactionDecoder
    txn_ = TransactionDecoder(RelationCatalog()).decode(unit)
    assert all(c.op == "read" for c in txn_.changes) and txn_.origin == "pgfeed.backfill"
    assert txn_.backfill == "bf_1"
    return [c.after["id"] for c in txn_.changes]  # type: ignore[index]


def test_rows_changed_in_the_window_are_left_out_and_the_chunk_sits_at_the_high_watermark() -> None:
    tracker = WindowTracker()
    chunk = start(tracker)
    units = [
        txn(200, 900, InsertMessage(None, REL, row(9))),  # before the low watermark: no effect
        watermark("c1", "l", 1000),
        txn(201, 1100, UpdateMessage(None, REL, None, None, row(2))),
        txn(202, 1200, UpdateMessage(None, REL, ord("K"), TupleData(("3", None)), row(30))),  # key move
        txn(203, 1300, DeleteMessage(None, REL, ord("K"), TupleData(("4", None)))),
        txn(204, 1350, InsertMessage(None, REL + 1, row(5))),  # another table
    ]
    out = tracker.process(units)
    assert [u.commit_lsn for u in out] == [900, 1100, 1200, 1300, 1350]  # the low watermark goes
    read(tracker, "c1", (1, 2, 3, 4, 5, 30))
    (unit,) = tracker.process([watermark("c1", "h", 2000)])
    assert (unit.commit_lsn, unit.end_lsn, unit.commit_ts, unit.xid) == (2000, 2008, 5, 0)
    assert unit.origin == "pgfeed.backfill:bf_1" and unit.change_count == 2
    assert stored_ids(unit) == [1, 5]
    assert unit.progress == BackfillProgress("bf_1", 0, '["30"]', 12, 2, False)
    assert chunk.outcome == "stored" and chunk.stored_rows == 2 and chunk.done.is_set()
    assert not tracker.process([watermark("c1", "h", 3000)])  # a replay: nothing stored twice


def test_in_progress_transactions_committed_before_the_low_watermark_are_left_out() -> None:
    """FIELD-NOTES: a commit before the low watermark can still be invisible to the snapshot."""
    tracker = WindowTracker()
    start(tracker, floor=150)
    tracker.process([txn(160, 900, UpdateMessage(None, REL, None, None, row(1, "new"))),
                     txn(170, 950, UpdateMessage(None, REL, None, None, row(2, "new"))),
                     watermark("c1", "l", 1000)])
    read(tracker, "c1", (1, 2, 3), xip=(160,))  # 160 was in progress for the snapshot, 170 not
    (unit,) = tracker.process([watermark("c1", "h", 2000)])
    assert stored_ids(unit) == [2, 3]


def test_a_truncate_or_an_unscannable_transaction_in_the_window_redoes_the_chunk() -> None:
    for middle in (txn(201, 1100, TruncateMessage(None, 0, (REL,))),
                   StoredTransaction(202, 1100, 1108, 0, None, 1,
                                     SpilledPayload(lambda: iter(()), 0, b""))):
        tracker = WindowTracker()
        chunk = start(tracker)
        tracker.process([watermark("c1", "l", 1000), middle])
        read(tracker, "c1", (1,))
        assert tracker.process([watermark("c1", "h", 2000)]) == []
        assert chunk.outcome == "redo" and chunk.problem


def test_a_truncate_by_an_xip_transaction_before_the_window_redoes_the_chunk() -> None:
    tracker = WindowTracker()
    chunk = start(tracker)
    tracker.process([txn(150, 900, TruncateMessage(None, 0, (REL,))), watermark("c1", "l", 1000)])
    read(tracker, "c1", (1,), xip=(150,))
    assert tracker.process([watermark("c1", "h", 2000)]) == [] and chunk.outcome == "redo"


def test_a_schema_change_in_the_window_redoes_the_chunk() -> None:
    tracker = WindowTracker()
    chunk = start(tracker)
    wider = RelationMessage(None, REL, "public", "t", ord("d"), (
        RelationColumn(1, "id", 20, -1), RelationColumn(0, "v", 25, -1), RelationColumn(0, "w", 23, -1)))
    tracker.process([watermark("c1", "l", 1000),
                     txn(201, 1100, wider, InsertMessage(None, REL, TupleData(("7", "a", "1"))))])
    read(tracker, "c1", (1,))
    assert tracker.process([watermark("c1", "h", 2000)]) == [] and chunk.outcome == "redo"
    assert "schema" in (chunk.problem or "")


def test_suspects_and_forgotten_xids_redo_the_chunk_until_they_are_gone() -> None:
    tracker = WindowTracker(max_keys=4)
    chunk = start(tracker)
    tracker.suspect([140])
    tracker.process([watermark("c1", "l", 1000)])
    read(tracker, "c1", (1,), xip=(140,))
    assert tracker.process([watermark("c1", "h", 2000)]) == [] and chunk.outcome == "redo"
    # more remembered keys than allowed: the oldest xids are forgotten, and a snapshot naming one
    # of them can no longer be judged
    for xid in range(300, 306):
        tracker.process([txn(xid, 2100 + xid, InsertMessage(None, REL, row(xid)))])
    second = Chunk("c2", "bf_1", 0, REL, 290)
    tracker.register(second)
    tracker.process([watermark("c2", "l", 3000)])
    read(tracker, "c2", (1,), xip=(300,))
    assert tracker.process([watermark("c2", "h", 3100)]) == [] and second.outcome == "redo"
    third = Chunk("c3", "bf_1", 0, REL, 290)
    tracker.register(third)
    tracker.process([watermark("c3", "l", 3200)])
    read(tracker, "c3", (1, 305), xip=(305,))  # remembered: judged exactly
    (unit,) = tracker.process([watermark("c3", "h", 3300)])
    assert stored_ids(unit) == [1]


def test_cancel_finishes_the_chunk_and_its_watermark_stores_nothing() -> None:
    tracker = WindowTracker()
    chunk = start(tracker)
    tracker.process([watermark("c1", "l", 1000)])
    tracker.cancel(backfill_id="bf_1")
    assert chunk.outcome == "cancelled"
    assert tracker.process([watermark("c1", "h", 2000)]) == []


def test_watermarks_are_never_stored_even_when_nothing_is_watched() -> None:
    tracker = WindowTracker()
    plain = txn(5, 500, InsertMessage(None, REL, row(1)))
    assert tracker.process([watermark("zz", "l", 400), plain, watermark("zz", "h", 600)]) == [plain]


def test_tuple_key_and_xid_order() -> None:
    data = encode(UpdateMessage(None, REL, ord("O"), TupleData(("1", None)), TupleData(("2", "b"))))
    assert tuple_key(data, 6, (0,)) == ((b"1",), 6 + 2 + 6 + 1)
    assert tuple_key(data, 6, (1,))[0] is None  # a NULL key column: not a usable key
    assert precedes(1, 2) and not precedes(2, 1) and precedes(0xFFFFFFF0, 5)


def test_a_foreign_watermark_payload_is_dropped() -> None:
    tracker = WindowTracker()
    start(tracker)
    bad = StoredTransaction(7, 1000, 1008, 0, None, 0, b"", watermark=b"not json")
    assert tracker.process([bad]) == []


def test_the_assembler_takes_watermark_messages_out_of_their_transaction() -> None:
    from service.assembler.transactions import TransactionAssembler
    from service.pgoutput.messages import BeginMessage, CommitMessage, LogicalMessage

    assembler = TransactionAssembler()
    content = b'{"t": "c1", "k": "h"}'
    units = [u for lsn, m in [
        (100, BeginMessage(200, 5, 77)),
        (110, LogicalMessage(None, 1, 110, "pgfeed.watermark", content)),
        (200, CommitMessage(0, 200, 208, 5)),
        (300, BeginMessage(400, 6, 78)),
        (310, LogicalMessage(None, 1, 310, "pgfeed.watermarks", b"not ours")),
        (400, CommitMessage(0, 400, 408, 6)),
    ] for u in assembler.feed(lsn, encode(m))]  # type: ignore[arg-type]
    first, second = units
    assert (first.commit_lsn, first.end_lsn, first.change_count, first.payload) == (200, 208, 0, b"")
    assert first.watermark == content
    assert second.watermark is None and second.change_count == 1  # a user's message stays
    assert assembler.confirmable_lsn == 408


def test_a_chunk_read_before_the_previous_was_judged_follows_its_fate() -> None:
    tracker = WindowTracker()
    first = start(tracker)
    tracker.process([watermark("c1", "l", 1000)])
    read(tracker, "c1", (1, 2))
    second = Chunk("c2", "bf_1", 0, REL, 100, pred=first)
    tracker.register(second)
    tracker.process([watermark("c1", "h", 1100), watermark("c2", "l", 1200)])
    tracker.read("c2", entries(3, 4, 5), (), BackfillProgress("bf_1", 0, '["5"]', 0, 0, True), SCHEMA)
    (unit,) = tracker.process([watermark("c2", "h", 1300)])
    assert stored_ids(unit) == [3, 4, 5]
    assert unit.progress == BackfillProgress("bf_1", 0, '["5"]', 12 + 3, 2 + 1, True)

    redone = start(tracker, "c3")
    tracker.process([watermark("c3", "l", 2000), txn(300, 2050, TruncateMessage(None, 0, (REL,)))])
    read(tracker, "c3", (6,))
    after = Chunk("c4", "bf_1", 0, REL, 100, pred=redone)
    tracker.register(after)
    tracker.process([watermark("c3", "h", 2100), watermark("c4", "l", 2200)])
    read(tracker, "c4", (7,))
    assert tracker.process([watermark("c4", "h", 2300)]) == []
    assert (redone.outcome, after.outcome) == ("redo", "redo")
    assert after.problem == "the chunk before it was not stored"
