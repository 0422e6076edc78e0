"""Spilling: bounded memory whatever the transaction size; MemorySpillStore and FileSpillStore."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from pgfeed.assembler.framing import FRAME
from pgfeed.assembler.model import StoredTransaction
from pgfeed.assembler.spill import MemorySpillStore, SpilledPayload, SpillStore
from pgfeed.assembler.transactions import TransactionAssembler
from pgfeed.changelog.spill_files import FileSpillStore
from pgfeed.pgoutput.decode import decode
from pgfeed.pgoutput.messages import InsertMessage
from tests.unit.assembler import wire as w


@pytest.fixture(params=["memory", "files"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SpillStore:
    return MemorySpillStore() if request.param == "memory" else FileSpillStore(tmp_path / "spill")


def test_store_appends_reads_in_order_and_discards(store: SpillStore) -> None:
    assert store.size(1) == 0 and list(store.read(1)) == []
    store.append(1, b"ab")
    buf = bytearray(b"cd")
    store.append(1, buf)
    buf[:] = b"zz"  # the caller reuses its buffer
    store.append(2, b"x")
    assert store.size(1) == 4 and b"".join(store.read(1)) == b"abcd"
    store.discard(2)
    store.discard(2)
    assert store.size(2) == 0 and list(store.read(2)) == []


def test_file_store_cleans_its_directory_on_start_and_deletes_after_read(tmp_path: Path) -> None:
    (tmp_path / "7.spill").write_bytes(b"stale")
    (tmp_path / "keep.txt").write_text("not ours")
    store = FileSpillStore(tmp_path)
    assert not (tmp_path / "7.spill").exists() and (tmp_path / "keep.txt").exists()
    store.append(7, b"a" * 3_000_000)
    assert (tmp_path / "7.spill").stat().st_size == 3_000_000
    assert b"".join(store.read(7)) == b"a" * 3_000_000
    assert not (tmp_path / "7.spill").exists() and store.size(7) == 0
    store.append(8, b"b")
    store.discard(8)
    assert not (tmp_path / "8.spill").exists()


def _values(txn: StoredTransaction) -> list[object]:
    return [m.new_tuple.values[0] for _, m in ((lsn, decode(b)) for lsn, b in txn.frames())
            if isinstance(m, InsertMessage)]


@pytest.mark.parametrize("kind", ["memory", "files"])
def test_memory_stays_bounded_while_streamed_and_plain_transactions_spill(kind: str,
                                                                          tmp_path: Path) -> None:
    store: SpillStore = MemorySpillStore() if kind == "memory" else FileSpillStore(tmp_path)
    limit = 1000
    asm = TransactionAssembler(spill=store, memory_limit=limit)
    biggest_message = 0
    out: list[StoredTransaction] = []
    lsn = 0

    def feed(msg: bytes) -> None:
        nonlocal lsn, biggest_message
        lsn += 1
        biggest_message = max(biggest_message, len(msg) + 12)
        out.extend(asm.feed(lsn, msg))
        assert asm.buffered_bytes <= limit  # spilled down to the limit after every message

    # Two streamed xids interleaved in several blocks (with a subxid abort), and a big plain txn.
    for block in range(6):
        for xid in (100, 200):
            feed(w.stream_start(xid, block == 0))
            if block == 0:
                feed(w.relation(1, xid=xid))
            for i in range(40):
                sub = xid + 1 if (xid == 100 and block == 2) else xid
                feed(w.insert(1, f"{xid}-{block}-{i}-" + "x" * 30, xid=sub))
            feed(w.stream_stop())
    feed(w.stream_abort(100, 101))
    feed(w.begin(300, 999_000))
    for i in range(300):
        feed(w.insert(1, f"plain-{i}"))
    feed(w.commit(999_000, 999_008))
    assert store.size(100) > 0 and store.size(200) > 0
    feed(w.stream_commit(200, 999_100, 999_108))
    feed(w.stream_commit(100, 999_200, 999_208))
    plain, b, a = out
    assert _values(plain) == [f"plain-{i}" for i in range(300)]
    assert _values(b) == [f"200-{blk}-{i}-" + "x" * 30 for blk in range(6) for i in range(40)]
    assert _values(a) == [f"100-{blk}-{i}-" + "x" * 30 for blk in range(6) if blk != 2
                          for i in range(40)]
    assert (a.change_count, b.change_count) == (200, 240)
    assert [lsn for lsn, _ in a.frames()] == sorted(lsn for lsn, _ in a.frames())
    assert store.size(100) == store.size(200) == store.size(300) == 0
    assert asm.buffered_bytes == 0 and biggest_message < limit
    if kind == "files":
        assert list(tmp_path.iterdir()) == []


def _whole_frames(piece: bytes) -> int:
    """How many frames ``piece`` holds; fails unless it is whole frames."""
    pos = count = 0
    while pos < len(piece):
        pos += FRAME.size + FRAME.unpack_from(piece, pos)[1]
        count += 1
    assert pos == len(piece), "a piece ends inside a frame"
    return count


def test_a_spilled_transaction_stays_on_disk_and_is_read_once_in_frame_aligned_pieces(
        tmp_path: Path) -> None:
    asm = TransactionAssembler(spill=FileSpillStore(tmp_path), memory_limit=2000)
    asm.feed(1, w.begin(7, 90_000))
    for i in range(1000):
        asm.feed(2 + i, w.insert(1, f"row-{i:04}"))
    [t] = asm.feed(90_000, w.commit(90_000, 90_008))
    payload = t.payload
    assert isinstance(payload, SpilledPayload) and list(tmp_path.iterdir())  # not read yet
    pieces = [bytes(p) for p in payload.pieces(4096)]
    assert len(b"".join(pieces)) == len(payload) and all(len(p) <= 4096 for p in pieces)
    assert sum(_whole_frames(p) for p in pieces) == t.change_count == 1000
    assert list(tmp_path.iterdir()) == []  # read to the end: the spill file is gone
    with pytest.raises(RuntimeError, match="only once"):
        next(payload.pieces(4096))


def test_a_frame_larger_than_a_piece_is_cut_inside() -> None:
    asm = TransactionAssembler(spill=MemorySpillStore(), memory_limit=100)
    asm.feed(1, w.begin(7, 9000))
    asm.feed(2, w.insert(1, "x" * 5000))
    asm.feed(3, w.insert(1, "y"))
    [t] = asm.feed(9000, w.commit(9000, 9008))
    pieces = [bytes(p) for p in t.payload.pieces(1024)]
    assert all(len(p) <= 1024 for p in pieces) and len(pieces) >= 5
    assert _values(StoredTransaction(7, 9000, 9008, 0, None, 2, b"".join(pieces))) == ["x" * 5000, "y"]


def test_a_spilled_stream_whose_changes_all_aborted_leaves_nothing(tmp_path: Path) -> None:
    asm = TransactionAssembler(spill=FileSpillStore(tmp_path), memory_limit=300)
    asm.feed(1, w.stream_start(50, True))
    for i in range(40):
        asm.feed(2 + i, w.insert(1, f"gone-{i}", xid=51))
    asm.feed(50, w.stream_stop())
    asm.feed(51, w.stream_abort(50, 51))
    assert asm.feed(60, w.stream_commit(50, 60, 68)) == []
    assert list(tmp_path.iterdir()) == []


def test_without_a_spill_store_everything_stays_in_memory() -> None:
    asm = TransactionAssembler(memory_limit=10)
    asm.feed(1, w.begin(1, 500))
    for i in range(50):
        asm.feed(2 + i, w.insert(1, str(i)))
    assert asm.buffered_bytes > 10
    [t] = asm.feed(508, w.commit(500, 508))
    assert t.change_count == 50 and asm.buffered_bytes == 0


def test_prepared_transactions_spill_too() -> None:
    store = MemorySpillStore()
    asm = TransactionAssembler(spill=store, memory_limit=200)
    asm.feed(1, w.begin_prepare(9, "g", 500, 508))
    for i in range(30):
        asm.feed(2 + i, w.insert(1, str(i)))
    asm.feed(508, w.prepare(9, "g", 500, 508))
    assert store.size(9) > 0 and asm.buffered_bytes <= 200
    [t] = asm.feed(600, w.commit_prepared(9, "g", 600, 608))
    assert _values(t) == [str(i) for i in range(30)] and store.xids() == []


ALLOWED_ROOTS = {"pgfeed"}  # the import name of service/


@pytest.mark.parametrize("module", ["transactions.py", "spill.py"])
def test_assembler_modules_import_only_the_standard_library_and_service(module: str) -> None:
    path = Path(__file__).resolve().parents[3] / "service" / "pgfeed" / "assembler" / module
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        for name in names:
            root = name.split(".")[0]
            assert root in sys.stdlib_module_names or root in ALLOWED_ROOTS or root == "__future__", name
