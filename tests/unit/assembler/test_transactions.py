"""TransactionAssembler: pgoutput bytes in arrival order in, committed StoredTransactions out."""

from __future__ import annotations

import struct

import pytest

from pgfeed.assembler.framing import frame, walk
from pgfeed.assembler.model import StoredTransaction
from pgfeed.assembler.spill import MemorySpillStore
from pgfeed.assembler.transactions import TransactionAssembler
from pgfeed.errors import AssemblyError, PgfeedError
from pgfeed.pgoutput.decode import decode
from pgfeed.pgoutput.messages import (
    InsertMessage,
    LogicalMessage,
    RelationMessage,
    TruncateMessage,
    TypeMessage,
)
from tests.unit.assembler import wire as w


def run(asm: TransactionAssembler, *steps: tuple[int, bytes]) -> list[StoredTransaction]:
    out: list[StoredTransaction] = []
    for lsn, msg in steps:
        out.extend(asm.feed(lsn, msg))
    return out


def decoded(txn: StoredTransaction) -> list[tuple[int, object]]:
    """Stored payloads are in the non-stream layout, so they decode with in_stream=False."""
    return [(lsn, decode(m)) for lsn, m in txn.frames()]


def rows(txn: StoredTransaction) -> list[tuple[str | bytes | None, ...]]:
    return [m.new_tuple.values for _, m in decoded(txn) if isinstance(m, InsertMessage)]


# -- plain transactions ---------------------------------------------------------------------------

def test_plain_transaction_frames_every_change_in_order() -> None:
    asm = TransactionAssembler()
    ins, upd, dele, trunc = w.insert(1, "1"), w.update(1, "2"), w.delete(1, "1"), w.truncate(1)
    assert run(asm, (100, w.begin(7, 500, ts=42)), (110, ins), (120, upd), (130, dele)) == []
    assert asm.in_transaction and asm.confirmable_lsn == 0
    [txn] = run(asm, (140, trunc), (508, w.commit(500, 508, ts=43)))
    assert (txn.xid, txn.commit_lsn, txn.end_lsn, txn.commit_ts, txn.origin) == (7, 500, 508, 43, None)
    assert txn.change_count == 4 and txn.schema_frames == ()
    assert txn.payload == frame(110, ins) + frame(120, upd) + frame(130, dele) + frame(140, trunc)
    assert isinstance(decoded(txn)[3][1], TruncateMessage)
    assert not asm.in_transaction and asm.confirmable_lsn == 508 and asm.hold_lsn is None


def test_memoryview_input_is_copied() -> None:
    asm = TransactionAssembler()
    buf = bytearray(w.insert(1, "x"))
    run(asm, (1, w.begin(1, 50)))
    asm.feed(2, memoryview(buf))
    buf[-1:] = b"y"  # the caller's buffer is reused
    [txn] = run(asm, (58, w.commit(50, 58)))
    assert rows(txn) == [("x",)]


def test_empty_transaction_is_not_emitted_but_advances_confirmable() -> None:
    asm = TransactionAssembler()
    assert run(asm, (100, w.begin(7, 200)), (208, w.commit(200, 208))) == []
    assert asm.confirmable_lsn == 208 and not asm.in_transaction


def test_origin_names_the_transaction() -> None:
    asm = TransactionAssembler()
    [txn] = run(asm, (1, w.begin(7, 200)), (2, w.origin("node_b", 99)), (3, w.insert(1, "1")),
                (208, w.commit(200, 208)))
    assert txn.origin == "node_b" and txn.change_count == 1


def test_relation_and_type_frames_go_to_payload_and_schema_frames() -> None:
    asm = TransactionAssembler()
    rel, typ, ins = w.relation(16384, "orders", ("id", "mood")), w.type_(90001), w.insert(16384, "1", "ok")
    [txn] = run(asm, (1, w.begin(7, 200)), (2, typ), (3, rel), (4, ins), (208, w.commit(200, 208)))
    assert txn.schema_frames == (frame(2, typ), frame(3, rel))
    assert txn.payload == frame(2, typ) + frame(3, rel) + frame(4, ins)
    assert txn.change_count == 1
    kinds = [type(m) for _, m in decoded(txn)]
    assert kinds == [TypeMessage, RelationMessage, InsertMessage]


def test_transactional_message_is_a_change() -> None:
    asm = TransactionAssembler()
    msg = w.message("app", b"hello", transactional=True, lsn=3)
    [txn] = run(asm, (1, w.begin(7, 200)), (3, msg), (208, w.commit(200, 208)))
    assert txn.change_count == 1 and txn.payload == frame(3, msg)


# -- non-transactional messages -------------------------------------------------------------------

def test_non_transactional_message_is_a_unit_of_its_own() -> None:
    asm = TransactionAssembler()
    msg = w.message("audit", b"\x00\x01", transactional=False, lsn=300)
    [unit] = run(asm, (300, msg))
    # Positioned one byte before its record's end (where another commit record may start).
    assert unit == StoredTransaction(0, 299, 300, 0, None, 1, frame(300, msg), ())
    assert asm.confirmable_lsn == 300


def test_message_and_the_commit_right_after_it_get_distinct_ordered_positions() -> None:
    """PostgreSQL reports a non-transactional message at its record's end, which is the commit
    LSN of a transaction whose commit record comes right after it (issue 13, item 1)."""
    asm = TransactionAssembler()
    msg = w.message("audit", b"x", transactional=False, lsn=300)
    units = run(asm, (100, w.begin(7, 300)), (300, msg), (120, w.insert(1, "a")),
                (308, w.commit(300, 308)))
    assert [(u.xid, u.commit_lsn, u.end_lsn) for u in units] == [(0, 299, 300), (7, 300, 308)]


def test_heartbeat_is_dropped_and_advances_confirmable_outside_transactions() -> None:
    asm = TransactionAssembler()
    hb = w.message("pgfeed.heartbeat", b"", transactional=False, lsn=400)
    assert run(asm, (400, hb)) == [] and asm.confirmable_lsn == 400
    # Inside a transaction it is dropped but the position is not confirmable yet.
    hb2 = w.message("pgfeed.heartbeat", b"", transactional=False, lsn=600)
    assert run(asm, (500, w.begin(9, 700)), (600, hb2)) == [] and asm.confirmable_lsn == 400
    unit = w.message("other", b"", transactional=False, lsn=650)
    assert len(run(asm, (650, unit))) == 1 and asm.confirmable_lsn == 400
    run(asm, (708, w.commit(700, 708)))
    assert asm.confirmable_lsn == 708


def test_custom_heartbeat_prefix() -> None:
    asm = TransactionAssembler(heartbeat_prefix="hb")
    assert run(asm, (5, w.message("hb", b"", transactional=False, lsn=5))) == []
    assert len(run(asm, (6, w.message("pgfeed.heartbeat", b"", transactional=False, lsn=6)))) == 1


# -- streaming (protocol v2+) ---------------------------------------------------------------------

def test_streamed_transaction_across_blocks_interleaved_with_another_xid_and_a_plain_txn() -> None:
    asm = TransactionAssembler()
    steps = [
        (10, w.stream_start(100, True)), (11, w.relation(1, xid=100)), (12, w.insert(1, "a1", xid=100)),
        (13, w.insert(1, "a2", xid=101)), (14, w.stream_stop()),
        (20, w.stream_start(200, True)), (21, w.relation(1, xid=200)), (22, w.insert(1, "b1", xid=200)),
        (23, w.stream_stop()),
        (30, w.begin(300, 38)), (31, w.relation(1)), (32, w.insert(1, "plain")),
    ]
    assert run(asm, *steps) == []
    [plain] = run(asm, (38, w.commit(38, 40)))
    assert rows(plain) == [("plain",)] and asm.confirmable_lsn == 40
    assert run(asm, (50, w.stream_start(100, False)), (51, w.update(1, "a3", xid=100)),
               (52, w.message("m", b"x", transactional=True, lsn=52, xid=101)),
               (53, w.stream_stop())) == []
    assert asm.in_transaction is False
    [a] = run(asm, (60, w.stream_commit(100, 59, 61, ts=77)))
    assert (a.xid, a.commit_lsn, a.end_lsn, a.commit_ts, a.change_count) == (100, 59, 61, 77, 4)
    assert [lsn for lsn, _ in a.frames()] == [11, 12, 13, 51, 52]
    msgs = [m for _, m in decoded(a)]
    assert [type(m) for m in msgs][:3] == [RelationMessage, InsertMessage, InsertMessage]
    assert all(getattr(m, "xid", None) is None for m in msgs)  # stream xid stripped
    assert isinstance(msgs[4], LogicalMessage) and msgs[4].content == b"x"
    assert a.schema_frames == (frame(11, w.relation(1)),)
    [b] = run(asm, (70, w.stream_commit(200, 69, 71)))
    assert rows(b) == [("b1",)] and asm.confirmable_lsn == 71


def test_stream_block_counts_as_in_transaction_and_origin_inside_block() -> None:
    asm = TransactionAssembler()
    run(asm, (10, w.stream_start(5, True)))
    assert asm.in_transaction
    run(asm, (11, w.origin("up")), (12, w.insert(1, "x", xid=5)), (13, w.stream_stop()))
    assert not asm.in_transaction
    [t] = run(asm, (20, w.stream_commit(5, 19, 21)))
    assert t.origin == "up"


def test_stream_commit_of_unknown_xid_is_an_empty_transaction() -> None:
    asm = TransactionAssembler()
    assert run(asm, (20, w.stream_commit(5, 19, 21))) == [] and asm.confirmable_lsn == 21


def test_stream_abort_of_the_whole_xid_discards_it_and_its_spill() -> None:
    spill = MemorySpillStore()
    asm = TransactionAssembler(spill=spill, memory_limit=64)
    run(asm, (10, w.stream_start(5, True)), *[(11 + i, w.insert(1, "v" * 20, xid=5)) for i in range(5)],
        (20, w.stream_stop()))
    assert spill.size(5) > 0
    assert run(asm, (30, w.stream_abort(5, 5))) == []
    assert spill.xids() == [] and asm.buffered_bytes == 0 and asm.confirmable_lsn == 0
    assert run(asm, (40, w.stream_commit(5, 39, 41))) == []  # nothing left of it
    assert run(asm, (50, w.stream_abort(6, 6))) == []  # unknown xid: nothing to drop


def test_stream_abort_of_a_subxid_keeps_the_rest_and_schema_frames() -> None:
    asm = TransactionAssembler()
    run(asm, (10, w.stream_start(5, True)), (11, w.insert(1, "top1", xid=5)),
        (12, w.relation(1, xid=6)), (13, w.insert(1, "sub1", xid=6)), (14, w.insert(1, "sub2", xid=7)),
        (15, w.stream_stop()), (16, w.stream_abort(5, 6)),
        (20, w.stream_start(5, False)), (21, w.insert(1, "top2", xid=5)), (22, w.stream_stop()))
    [t] = run(asm, (30, w.stream_commit(5, 29, 31)))
    assert rows(t) == [("top1",), ("sub2",), ("top2",)] and t.change_count == 3
    assert t.schema_frames == (frame(12, w.relation(1)),)
    assert [lsn for lsn, _ in t.frames()] == [11, 12, 14, 21]


def test_all_changes_aborted_but_schema_kept_emits_a_changeless_transaction() -> None:
    asm = TransactionAssembler()
    run(asm, (10, w.stream_start(5, True)), (12, w.relation(1, xid=6)), (13, w.insert(1, "s", xid=6)),
        (15, w.stream_stop()), (16, w.stream_abort(5, 6)))
    [t] = run(asm, (30, w.stream_commit(5, 29, 31)))
    assert t.change_count == 0 and t.payload == frame(12, w.relation(1))


# -- two-phase (protocol v3+) ---------------------------------------------------------------------

def test_two_phase_commit_prepared() -> None:
    asm = TransactionAssembler()
    run(asm, (100, w.begin_prepare(9, "g1", 150, 158)))
    assert asm.in_transaction and asm.hold_lsn is None
    run(asm, (110, w.insert(1, "p")))
    assert run(asm, (158, w.prepare(9, "g1", 150, 158))) == []
    assert not asm.in_transaction and asm.hold_lsn == 100 and asm.confirmable_lsn == 0
    # A later plain transaction is emitted but the slot must not be confirmed past the prepare.
    [plain] = run(asm, (200, w.begin(10, 250)), (210, w.insert(1, "x")), (258, w.commit(250, 258)))
    assert plain.commit_lsn == 250 and asm.confirmable_lsn == 99
    [t] = run(asm, (300, w.commit_prepared(9, "g1", 300, 308, ts=4444)))
    assert (t.xid, t.commit_lsn, t.end_lsn, t.commit_ts, t.change_count) == (9, 300, 308, 4444, 1)
    assert rows(t) == [("p",)]
    assert asm.hold_lsn is None and asm.confirmable_lsn == 308


def test_two_phase_rollback_prepared_discards() -> None:
    asm = TransactionAssembler()
    run(asm, (100, w.begin_prepare(9, "g1", 150, 158)), (110, w.insert(1, "p")),
        (158, w.prepare(9, "g1", 150, 158)))
    assert run(asm, (300, w.rollback_prepared(9, "g1", 158, 308))) == []
    assert asm.hold_lsn is None and asm.confirmable_lsn == 308 and asm.buffered_bytes == 0


def test_rollback_prepared_of_unknown_gid_is_ignored_like_postgres_does() -> None:
    # PostgreSQL sends ROLLBACK PREPARED for a transaction prepared before the slot's two_phase
    # point without ever sending its PREPARE; the apply worker skips it, so do we.
    asm = TransactionAssembler()
    assert run(asm, (300, w.rollback_prepared(9, "never", 158, 308))) == []
    assert asm.confirmable_lsn == 308


def test_prepare_publishes_its_schema_frames_at_once() -> None:
    asm = TransactionAssembler()
    rel = w.relation(1)
    [unit] = run(asm, (100, w.begin_prepare(9, "g1", 150, 158)), (105, rel), (110, w.insert(1, "p")),
                 (158, w.prepare(9, "g1", 150, 158, ts=5)))
    assert unit == StoredTransaction(0, 157, 158, 5, None, 0, frame(105, rel), (frame(105, rel),))
    [t] = run(asm, (300, w.commit_prepared(9, "g1", 300, 308)))
    assert t.schema_frames == () and t.payload.startswith(frame(105, rel))  # decodes on its own


def test_empty_prepared_transaction_advances_on_commit_prepared() -> None:
    asm = TransactionAssembler()
    run(asm, (100, w.begin_prepare(9, "g", 150, 158)), (158, w.prepare(9, "g", 150, 158)))
    assert run(asm, (300, w.commit_prepared(9, "g", 300, 308))) == [] and asm.confirmable_lsn == 308


def test_stream_prepare_then_commit_prepared() -> None:
    spill = MemorySpillStore()
    asm = TransactionAssembler(spill=spill, memory_limit=100)
    run(asm, (10, w.stream_start(5, True)), *[(11 + i, w.insert(1, str(i), xid=5)) for i in range(8)],
        (20, w.stream_stop()))
    assert run(asm, (30, w.stream_prepare(5, "gs", 29, 31))) == []
    assert asm.hold_lsn == 10 and asm.confirmable_lsn == 0
    run(asm, (40, w.stream_start(6, True)), (41, w.insert(1, "other", xid=6)), (42, w.stream_stop()))
    [t] = run(asm, (50, w.commit_prepared(5, "gs", 50, 58)))
    assert rows(t) == [(str(i),) for i in range(8)] and (t.xid, t.commit_lsn) == (5, 50)
    assert spill.size(5) == 0 and asm.hold_lsn is None and asm.confirmable_lsn == 58


def test_stream_prepare_of_unknown_xid_parks_an_empty_transaction() -> None:
    asm = TransactionAssembler()
    run(asm, (30, w.stream_prepare(5, "gs", 29, 31)))
    assert asm.hold_lsn == 30
    assert run(asm, (50, w.commit_prepared(5, "gs", 50, 58))) == [] and asm.hold_lsn is None


def test_two_pending_prepares_hold_at_the_oldest() -> None:
    asm = TransactionAssembler()
    run(asm, (100, w.begin_prepare(1, "a", 110, 118)), (118, w.prepare(1, "a", 110, 118)),
        (200, w.begin_prepare(2, "b", 210, 218)), (218, w.prepare(2, "b", 210, 218)))
    assert asm.hold_lsn == 100
    run(asm, (300, w.commit_prepared(1, "a", 300, 308)))
    assert asm.hold_lsn == 200 and asm.confirmable_lsn == 199
    run(asm, (400, w.rollback_prepared(2, "b", 218, 408)))
    assert asm.hold_lsn is None and asm.confirmable_lsn == 408


# -- reset ----------------------------------------------------------------------------------------

def test_reset_drops_in_flight_state_and_keeps_confirmable_below_dropped_holds() -> None:
    spill = MemorySpillStore()
    asm = TransactionAssembler(spill=spill, memory_limit=32)
    run(asm, (100, w.begin_prepare(9, "g", 150, 158)), (110, w.insert(1, "p" * 40)),
        (158, w.prepare(9, "g", 150, 158)),
        (200, w.begin(10, 250)), (210, w.insert(1, "x")), (258, w.commit(250, 258)),
        (300, w.stream_start(11, True)), (301, w.insert(1, "s" * 40, xid=11)), (302, w.stream_stop()),
        (400, w.begin(12, 450)), (410, w.insert(1, "y" * 40)))
    assert spill.xids() and asm.in_transaction and asm.confirmable_lsn == 99
    asm.reset()
    assert not asm.in_transaction and asm.hold_lsn is None and asm.buffered_bytes == 0
    assert spill.xids() == [] and asm.confirmable_lsn == 99
    # The slot replays: the same transactions come again from their start.
    run(asm, (100, w.begin_prepare(9, "g", 150, 158)), (158, w.prepare(9, "g", 150, 158)),
        (300, w.stream_start(11, True)), (302, w.stream_stop()))
    assert asm.hold_lsn == 100


# -- protocol violations --------------------------------------------------------------------------

VIOLATIONS = {
    "commit without begin": ([], (5, w.commit(5, 8)), "Commit without Begin"),
    "commit after begin prepare": ([(1, w.begin_prepare(1, "g", 5, 8))], (5, w.commit(5, 8)),
                                   "Commit without Begin"),
    "commit lsn mismatch": ([(1, w.begin(1, 5))], (6, w.commit(6, 8)), "differs from Begin"),
    "insert outside": ([], (5, w.insert(1, "x")), "outside a transaction"),
    "relation outside": ([], (5, w.relation(1)), "outside a transaction"),
    "transactional message outside": ([], (5, w.message("p", b"", transactional=True, lsn=5)),
                                      "outside a transaction"),
    "origin outside": ([], (5, w.origin("o")), "outside a transaction"),
    "nested begin": ([(1, w.begin(1, 5))], (2, w.begin(2, 9)), "inside transaction 1"),
    "begin in stream block": ([(1, w.stream_start(3, True))], (2, w.begin(2, 9)),
                              "inside the stream block of xid 3"),
    "begin prepare nested": ([(1, w.begin(1, 5))], (2, w.begin_prepare(2, "g", 8, 9)), "inside"),
    "prepare without begin prepare": ([], (5, w.prepare(1, "g", 5, 8)), "without Begin Prepare"),
    "prepare after begin": ([(1, w.begin(1, 5))], (5, w.prepare(1, "g", 5, 8)),
                            "without Begin Prepare"),
    "prepare gid mismatch": ([(1, w.begin_prepare(1, "g", 5, 8))], (5, w.prepare(1, "h", 5, 8)),
                             "differ from Begin Prepare"),
    "duplicate gid": ([(1, w.begin_prepare(1, "g", 5, 8)), (8, w.prepare(1, "g", 5, 8)),
                       (9, w.begin_prepare(2, "g", 15, 18))], (18, w.prepare(2, "g", 15, 18)),
                      "already prepared"),
    "commit prepared unknown gid": ([], (5, w.commit_prepared(1, "nope", 5, 8)), "unknown gid 'nope'"),
    "commit prepared inside txn": ([(1, w.begin(1, 5))], (2, w.commit_prepared(1, "g", 5, 8)), "inside"),
    "stream start nested": ([(1, w.stream_start(3, True))], (2, w.stream_start(4, True)), "inside"),
    "stream start inside txn": ([(1, w.begin(1, 5))], (2, w.stream_start(4, True)), "inside"),
    "stream start repeats first segment": ([(1, w.stream_start(3, True)), (2, w.stream_stop())],
                                           (3, w.stream_start(3, True)), "already streaming"),
    "stream continues unknown xid": ([], (3, w.stream_start(3, False)), "never received"),
    "stream stop without start": ([], (3, w.stream_stop()), "without Stream Start"),
    "stream commit in block": ([(1, w.stream_start(3, True))], (2, w.stream_commit(3, 5, 8)), "inside"),
    "stream abort in block": ([(1, w.stream_start(3, True))], (2, w.stream_abort(3, 3)), "inside"),
    "stream prepare in txn": ([(1, w.begin(1, 5))], (2, w.stream_prepare(3, "g", 5, 8)), "inside"),
    "rollback prepared in txn": ([(1, w.begin(1, 5))], (2, w.rollback_prepared(3, "g", 5, 8)), "inside"),
    "short streamed change": ([(1, w.stream_start(3, True))], (2, b"I\0\0"), "too short"),
    "short message": ([(1, w.begin(1, 5))], (2, b"M"), "too short"),
    "unknown tag": ([], (2, b"Z123"), "not a pgoutput message tag"),
}


@pytest.mark.parametrize("name", sorted(VIOLATIONS))
def test_protocol_violation_raises_assembly_error_naming_message_and_lsn(name: str) -> None:
    before, (lsn, bad), text = VIOLATIONS[name]
    asm = TransactionAssembler()
    run(asm, *before)
    with pytest.raises(AssemblyError, match=text) as info:
        asm.feed(lsn, bad)
    assert f"0/{lsn:X}" in str(info.value)
    assert isinstance(info.value, PgfeedError) and info.value.code == "assembly_error"


def test_empty_message_raises() -> None:
    with pytest.raises(AssemblyError, match="empty pgoutput message at 1/2"):
        TransactionAssembler().feed((1 << 32) + 2, b"")


def test_malformed_control_message_raises_a_pgfeed_error() -> None:
    asm = TransactionAssembler()
    with pytest.raises(PgfeedError):
        asm.feed(1, b"B\0\0")


def test_memoryview_messages_everywhere_give_the_same_result() -> None:
    # psycopg's get_copy_data hands out memoryviews; every path must accept them.
    steps = [
        (10, w.stream_start(5, True)), (11, w.relation(1, xid=5)), (12, w.insert(1, "a", xid=5)),
        (13, w.message("m", b"t", transactional=True, lsn=13, xid=6)),
        (14, w.message("n", b"u", transactional=False, lsn=14, xid=5)), (15, w.stream_stop()),
        (16, w.stream_abort(5, 6)), (20, w.stream_commit(5, 19, 21)),
        (30, w.begin(8, 38)), (31, w.origin("o")), (32, w.relation(1)), (33, w.delete(1, "a")),
        (34, w.message("m", b"t", transactional=True, lsn=34)), (38, w.commit(38, 40)),
        (50, w.begin_prepare(9, "g", 55, 58)), (51, w.insert(1, "p")), (58, w.prepare(9, "g", 55, 58)),
        (60, w.commit_prepared(9, "g", 60, 68)),
    ]
    as_bytes = run(TransactionAssembler(), *steps)
    as_views = run(TransactionAssembler(), *[(lsn, memoryview(bytearray(m))) for lsn, m in steps])
    assert as_views == as_bytes and len(as_bytes) == 4
    assert [t.change_count for t in as_bytes] == [1, 1, 2, 1]


def _mixed_stream() -> list[tuple[int, bytes | memoryview]]:
    """Every path of the assembler in one arrival order: plain, streamed (with a subtransaction
    abort), a non-transactional message, a prepared transaction, row changes as memoryviews."""
    steps: list[bytes] = [w.begin(10, 900), w.relation(1), w.insert(1, "1"), w.update(1, "1"),
                          w.message("p", b"x", transactional=False, lsn=0), w.delete(1, "1"),
                          w.truncate(1), w.commit(900, 908)]
    steps += [w.stream_start(20, True), w.relation(1, xid=20), w.insert(1, "2", xid=20),
              w.insert(1, "3", xid=21), w.stream_stop(), w.stream_start(20, False),
              w.insert(1, "4", xid=20), w.stream_stop(), w.stream_abort(20, 21)]
    steps += [w.begin_prepare(30, "g", 1200, 1208), w.insert(1, "5"), w.prepare(30, "g", 1200, 1208),
              w.stream_commit(20, 1300, 1308), w.commit_prepared(30, "g", 1400, 1408)]
    steps += [w.begin(40, 1500)] + [w.insert(1, str(i)) for i in range(200)] + [w.commit(1500, 1508)]
    return [(100 + 10 * i, memoryview(m) if m[:1] in b"IUD" else m) for i, m in enumerate(steps)]


@pytest.mark.parametrize("batch", [1, 2, 7, 1000])
def test_feed_batch_is_feed_in_order(batch: int) -> None:
    steps = _mixed_stream()
    one = TransactionAssembler(spill=MemorySpillStore(), memory_limit=500)
    expected = run(one, *steps)
    many = TransactionAssembler(spill=MemorySpillStore(), memory_limit=500)
    got: list[StoredTransaction] = []
    for i in range(0, len(steps), batch):
        got.extend(many.feed_batch(steps[i:i + batch]))
    assert [(t.commit_lsn, t.change_count, bytes(t.payload), t.schema_frames) for t in got] == \
        [(t.commit_lsn, t.change_count, bytes(t.payload), t.schema_frames) for t in expected]
    assert len(got) == 5 and got[-1].change_count == 200  # the four units and the message
    assert many.confirmable_lsn == one.confirmable_lsn and many.buffered_bytes == 0


class _Arrived:
    """Just enough of a libpq connection for ``stream._receive_py``: XLogData frames, then none."""

    def __init__(self, steps: list[tuple[int, bytes | memoryview]]) -> None:
        self.frames = [b"w" + struct.pack(">QQq", lsn, lsn, 0) + bytes(m) for lsn, m in steps]

    def get_copy_data(self, async_: int) -> tuple[int, memoryview]:
        if not self.frames:
            return 0, memoryview(b"")
        frame = self.frames.pop(0)
        return len(frame), memoryview(frame)

    def consume_input(self) -> None:
        return None


@pytest.mark.parametrize("batch", [1, 2, 7, 1000])
def test_feed_framed_is_feed_batch_over_what_the_receive_loop_frames(batch: int) -> None:
    """Capture's path (the stream's receive loop frames a batch and marks runs of row changes;
    the assembler appends a run as it is) assembles what ``feed_batch`` does, whatever the
    batch boundaries (a run cut by one, a run outside Begin..Commit or in a stream block)."""
    from pgfeed.replication.stream import _receive_py

    steps = _mixed_stream()
    one = TransactionAssembler(spill=MemorySpillStore(), memory_limit=500)
    expected = one.feed_batch(steps)
    framed = TransactionAssembler(spill=MemorySpillStore(), memory_limit=500)
    pg = _Arrived(steps)
    got: list[StoredTransaction] = []
    while True:
        _status, data, runs, keepalives, last, bad = _receive_py(pg, batch)  # type: ignore[arg-type]
        assert bad is None and not keepalives
        if not runs:
            break
        assert last == [lsn for _, lsn, _, _ in walk(data)][-1]
        got.extend(framed.feed_framed(data, runs))
    assert [(t.commit_lsn, t.change_count, bytes(t.payload), t.schema_frames) for t in got] == \
        [(t.commit_lsn, t.change_count, bytes(t.payload), t.schema_frames) for t in expected]
    assert framed.confirmable_lsn == one.confirmable_lsn and framed.buffered_bytes == 0
