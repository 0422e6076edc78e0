"""What only the SQLite log has to prove: persistence, chunked payloads, crash atomicity."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import tracemalloc
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgfeed.assembler.framing import FRAME, chunk_bounds, frame
from pgfeed.assembler.model import StoredTransaction
from pgfeed.assembler.transactions import TransactionAssembler
from pgfeed.changelog import ChangeLogError, open_changelog
from pgfeed.changelog.base import MAX_LSN, ConsumerState, LogStats
from pgfeed.changelog.memory import MemoryChangeLog
from pgfeed.changelog.spill_files import FileSpillStore
from pgfeed.changelog.sqlite import CHUNK_BYTES, SqliteChangeLog
from pgfeed.pgoutput.messages import pg_now_us
from pgfeed_client._cursor import EARLIEST, Cursor
from tests.unit.assembler import wire as w
from tests.unit.changelog.txns import lsns, txn

ROOT = Path(__file__).resolve().parents[3]
L = 10_000


def test_reopening_resumes_everything(tmp_path: Path) -> None:
    path = tmp_path / "feed" / "changelog.db"
    log = open_changelog("sqlite", path)
    stored = [txn(i * L, 4, schema=i == 2, ts=i) for i in range(1, 6)]
    log.append(stored, confirmed_lsn=5 * L + 8)
    log.set_confirmed_lsn(6 * L)
    log.set_consumer("app", Cursor(3 * L, 1), acked_us=7)
    log.set_consumer("spark", Cursor(L, 1), acked_us=8)
    log.set_consumer("idle", Cursor(2 * L), acked_us=9)
    log.trim(3 * L, force=True)  # drops what "spark" has not acknowledged: spark goes too
    before = log.stats()
    log.close()

    log = SqliteChangeLog(path)
    try:
        assert log.stats() == before == LogStats(3, 12, sum(len(t.payload) for t in stored[2:]),
                                                 3 * L, 5 * L, 2 * L, 1)
        assert (log.head(), log.confirmed_lsn(), log.trimmed_lsn()) == (5 * L, 6 * L, 2 * L)
        assert log.consumer_states() == {"app": ConsumerState(Cursor(3 * L, 1), 7),
                                         "idle": ConsumerState(Cursor(2 * L), 9)}
        assert log.schema_history() == [(2 * L, stored[1].schema_frames[0])]
        assert log.read(EARLIEST, 100) == stored[2:]
        log.append([txn(5 * L), txn(6 * L)])  # the head survived: the replay is skipped
        assert lsns(log.read(Cursor(4 * L), 100)) == [5 * L, 6 * L]
        assert log.split_points(0, 6 * L, 4) == [0, 3 * L, 4 * L, 5 * L, 6 * L]
    finally:
        log.close()


def test_a_second_instance_sees_what_the_first_committed(tmp_path: Path) -> None:
    writer, reader = SqliteChangeLog(tmp_path / "log.db"), None
    try:
        writer.append([txn(L)])
        reader = SqliteChangeLog(tmp_path / "log.db")  # e.g. a `capture=False` supervisor
        writer.append([txn(2 * L)], confirmed_lsn=7)
        assert lsns(reader.read(EARLIEST, 100)) == [L, 2 * L]
        assert reader.confirmed_lsn() == 7 and reader.stats().transaction_count == 2
    finally:
        writer.close()
        if reader is not None:
            reader.close()


def test_a_file_that_is_not_a_change_log_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(ChangeLogError, match="junk.db"):
        SqliteChangeLog(junk)
    future = tmp_path / "future.db"
    with sqlite3.connect(future) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(ChangeLogError, match="schema version 99"):
        SqliteChangeLog(future)


def test_a_failed_write_is_rolled_back_and_the_log_stays_usable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pgfeed.changelog.sqlite._BUSY_SECONDS", 0.05)
    log = SqliteChangeLog(tmp_path / "log.db")
    other = sqlite3.connect(tmp_path / "log.db", isolation_level=None)
    try:
        log.append([txn(L)])
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        with pytest.raises(ChangeLogError, match="locked"):
            log.append([txn(2 * L)], confirmed_lsn=5)
        other.execute("ROLLBACK")
        log.append([txn(2 * L)], confirmed_lsn=5)
        assert lsns(log.read(EARLIEST, 10)) == [L, 2 * L] and log.confirmed_lsn() == 5
    finally:
        other.close()
        log.close()


# -- chunked payloads ---------------------------------------------------------------------------


def _chunk_sizes(path: Path) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        return [n for (n,) in conn.execute("SELECT length(data) FROM chunk ORDER BY id")]
    finally:
        conn.close()


def _frame_starts(payload: bytes) -> set[int]:
    starts, pos = set(), 0
    while pos < len(payload):
        starts.add(pos)
        pos += FRAME.size + FRAME.unpack_from(payload, pos)[1]
    return starts


def test_chunk_bounds_cut_on_frame_boundaries() -> None:
    payload = txn(10**6, 200).payload  # ~110-byte frames
    bounds = chunk_bounds(memoryview(payload), 1000)
    assert bounds[0] == 0 and bounds[-1] == len(payload)
    assert all(0 < b - a <= 1000 for a, b in pairwise(bounds))
    assert set(bounds[:-1]) <= _frame_starts(payload)
    assert chunk_bounds(memoryview(b""), 10) == [0]
    assert chunk_bounds(memoryview(payload), len(payload)) == [0, len(payload)]


def test_chunk_bounds_cut_inside_a_frame_only_when_it_is_larger_than_a_chunk() -> None:
    big = frame(5, b"M" * 2500)
    small = frame(6, b"I" * 50)
    payload = small + big + small
    bounds = chunk_bounds(memoryview(payload), 1000)
    # The big frame's tail and the last small frame share the last chunk.
    assert bounds == [0, len(small), len(small) + 1000, len(small) + 2000, len(payload)]
    assert chunk_bounds(memoryview(b"\x01" * 2500), 1000) == [0, 1000, 2000, 2500]  # not framed


def test_chunked_payload_round_trips_byte_exact(tmp_path: Path) -> None:
    log = SqliteChangeLog(tmp_path / "log.db", chunk_bytes=4096)
    try:
        big = txn(10**7, 2000, schema=True)  # ~190 KB, ~50 chunks
        one_frame = StoredTransaction(1, 2 * 10**7, 2 * 10**7, 0, None, 1, frame(1, os.urandom(10_000)))
        small = txn(3 * 10**7, 2)
        empty = txn(4 * 10**7, 0)
        last = txn(5 * 10**7, 1)
        log.append([txn(L, 1), big, one_frame, small, empty, last])
        got = log.read(Cursor(L), 10**6)
        assert got[:4] == [big, one_frame, small, empty]
        assert bytes(got[0].payload) == big.payload and got[0].schema_frames == big.schema_frames
        sizes = _chunk_sizes(tmp_path / "log.db")
        assert len(sizes) > 50 and max(sizes) <= 4096
        assert lsns(log.read(Cursor(10**7, 1998), 1)) == [10**7]  # one change left
        log.trim(2 * 10**7)  # chunks of the dropped transactions go too
        assert _chunk_sizes(tmp_path / "log.db") == [4096, 4096, len(one_frame.payload) - 8192,
                                                     len(small.payload), len(last.payload)]
    finally:
        log.close()


def test_payload_larger_than_a_default_chunk(tmp_path: Path) -> None:
    message = b"I" + os.urandom(4000)
    count = (CHUNK_BYTES * 5 // 2) // (len(message) + FRAME.size)  # ~40 MB: 3 chunks
    payload = bytearray()
    for i in range(count):
        payload += frame(i, message)
    t = StoredTransaction(7, 10**9, 10**9 + 8, 0, None, count, payload)
    log = SqliteChangeLog(tmp_path / "log.db")
    try:
        log.append([t])
        assert len(_chunk_sizes(tmp_path / "log.db")) == 3
        (got,) = log.read(EARLIEST, 1)
        assert got.payload == payload and got.change_count == count
    finally:
        log.close()


def test_a_spilled_transaction_is_appended_without_being_held_whole(tmp_path: Path) -> None:
    rows, row = 200_000, "r" * 150  # ~36 MB of frames, spilled by the assembler
    asm = TransactionAssembler(spill=FileSpillStore(tmp_path / "spill"), memory_limit=1 << 20)
    asm.feed(1, w.begin(7, 10**9))
    for i in range(rows):
        asm.feed(2 + i, w.insert(1, f"{i}", row))
    log = SqliteChangeLog(tmp_path / "log.db")
    try:
        tracemalloc.start()  # from the commit (the assembler hands the transaction over) to durable
        [t] = asm.feed(10**9, w.commit(10**9, 10**9 + 8))
        log.append([t])
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        size = len(t.payload)
        # Python holds about one spill segment and one chunk, never the 36 MB payload.
        assert size > 30 << 20 and peak < 4 * CHUNK_BYTES, f"append peaked at {peak >> 20} MB"
        assert max(_chunk_sizes(tmp_path / "log.db")) <= CHUNK_BYTES
        assert list((tmp_path / "spill").iterdir()) == []
        (got,) = log.read(EARLIEST, 1)
        assert len(got.payload) == size and got.change_count == rows
        frames = list(got.frames())
        assert len(frames) == rows and frames[-1][0] == rows + 1 and bytes(frames[7][1]).startswith(b"I")
    finally:
        log.close()


# -- crash atomicity ----------------------------------------------------------------------------

_CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from pgfeed.changelog.sqlite import SqliteChangeLog
    from tests.unit.changelog.txns import txn

    log = SqliteChangeLog({path!r}, chunk_bytes=4096)
    kill_at = int(sys.argv[1])
    calls = 0

    def progress():
        global calls
        calls += 1
        if calls == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return 0

    log.append([txn(n * 10**6, 10) for n in range(1, 4)], confirmed_lsn=3 * 10**6)
    log._writer.set_progress_handler(progress, 1)  # a kill point at any SQLite VM step
    log.append([txn(n * 10**6, 500) for n in range(4, 9)], confirmed_lsn=8 * 10**6)
    log._writer.set_progress_handler(None, 1)
    print("appended", calls, flush=True)
    if len(sys.argv) > 2:  # keep appending until killed from outside
        n = 9
        while True:
            log.append([txn(k * 10**6, 300) for k in range(n, n + 4)], confirmed_lsn=(n + 3) * 10**6)
            print(n + 3, flush=True)
            n += 4
""")


def _child(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(root=str(ROOT), path=str(tmp_path / "log.db")))
    return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, text=True)


def _assert_whole_batches(tmp_path: Path, batch_ends: set[int]) -> int:
    """Reopen after the child died: whole batches only, intact; returns the head."""
    log = SqliteChangeLog(tmp_path / "log.db")
    try:
        stored = log.read(EARLIEST, 10**9)
        head, confirmed = log.head(), log.confirmed_lsn()
        assert lsns(stored) == [n * 10**6 for n in range(1, len(stored) + 1)]
        assert head == len(stored) * 10**6 == confirmed and head // 10**6 in batch_ends
        assert all(t == txn(t.commit_lsn, t.change_count) for t in stored)  # payloads intact
        assert log.stats().transaction_count == len(stored)
        return head
    finally:
        log.close()


def _fresh(tmp_path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"log.db{suffix}").unlink(missing_ok=True)


def test_killed_inside_append_leaves_all_or_nothing(tmp_path: Path) -> None:
    child = _child(tmp_path, str(10**9))  # first without a kill: how many VM steps it takes
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0 and out.startswith("appended"), out
    steps = int(out.split()[1])
    assert _assert_whole_batches(tmp_path, {3, 8}) == 8 * 10**6
    for kill_at in (1, steps // 4, steps // 2, steps - 50, steps - 10, steps):
        _fresh(tmp_path)
        child = _child(tmp_path, str(kill_at))
        out, _ = child.communicate(timeout=60)
        assert child.returncode == -signal.SIGKILL, (kill_at, steps, out)
        head = _assert_whole_batches(tmp_path, {3, 8})
        if kill_at < steps - 5:  # before COMMIT: nothing of the batch; in it: all or nothing
            assert head == 3 * 10**6, (kill_at, steps)


def test_sigkill_at_a_random_moment_keeps_whole_batches(tmp_path: Path) -> None:
    for delay in (0.0, 0.013, 0.031):
        child = _child(tmp_path, str(10**9), "loop")
        assert child.stdout is not None
        assert child.stdout.readline().startswith("appended")
        last = int(child.stdout.readline())  # one more batch is durable
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=60)
        assert _assert_whole_batches(tmp_path, {3, 8, *range(12, 10**4, 4)}) >= last * 10**6
        _fresh(tmp_path)


# -- the writer's in-memory tail ------------------------------------------------------------------


def _same_answers(writer: SqliteChangeLog, reader: SqliteChangeLog) -> None:
    """Every read the tail can answer gives what the file gives (``reader`` has never written, so
    it reads the file)."""
    head = reader.head()
    assert writer.head() == head and writer.trimmed_lsn() == reader.trimmed_lsn()
    points = sorted({0, *(t.commit_lsn for t in reader.read(EARLIEST, 10**9)), head, head + 1})
    for lsn in points[-40:]:
        assert writer.schema_history(lsn) == reader.schema_history(lsn)
        for seq in (None, 0, 1, 5):
            for limit in (1, 4, 1000):
                for upto in (None, head - 3 * L, lsn + 2 * L):
                    after = Cursor(lsn, seq)
                    assert writer.read(after, limit, upto) == reader.read(after, limit, upto), \
                        (after, limit, upto)


def test_the_writers_tail_answers_like_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Appends of every shape (schema frames, empty, large, bytearray, spilled-size), past the
    tail's caps, and trims: the instance that writes answers head, trimmed_lsn, read and
    schema_history from memory where it can, and always as the file does."""
    monkeypatch.setattr("pgfeed.changelog.sqlite._TAIL_TRANSACTIONS", 12)
    writer = SqliteChangeLog(tmp_path / "log.db")
    writer.append([txn(L)])  # before the first write here, the file was read
    reader = SqliteChangeLog(tmp_path / "log.db")
    try:
        lsn = L
        for step in range(40):
            lsn += L
            batch = [txn(lsn, step % 4, schema=step % 5 == 0)]
            if step == 17:
                batch.append(txn(lsn + L // 2, 2, row_bytes=300_000))  # too large for the tail
            if step == 23:
                big = batch[0]
                batch[0] = StoredTransaction(big.xid, big.commit_lsn, big.end_lsn, big.commit_ts,
                                             big.origin, big.change_count, bytearray(big.payload),
                                             big.schema_frames)
            writer.append(batch, confirmed_lsn=lsn)
            if step in (9, 30):
                writer.trim(lsn - 5 * L, force=True)
            if step == 35:
                writer.retain(None, 2_000, 0)
            _same_answers(writer, reader)
        # The live case is served from memory: no read transaction at all.
        monkeypatch.setattr(writer, "_reading", None)
        assert writer.head() == lsn and lsns(writer.read(Cursor(lsn - 2 * L), 100)) == [lsn - L, lsn]
    finally:
        reader.close()
        writer.close()
    with pytest.raises(ChangeLogError, match="closed"):
        writer.head()


def test_a_write_from_elsewhere_empties_the_tail_on_the_next_append(tmp_path: Path) -> None:
    writer = SqliteChangeLog(tmp_path / "log.db")
    other = SqliteChangeLog(tmp_path / "log.db")
    try:
        writer.append([txn(L)])
        other.append([txn(2 * L)])  # not a supported set-up, but the tail must not hide it for long
        writer.append([txn(3 * L)])
        assert lsns(writer.read(EARLIEST, 10)) == [L, 2 * L, 3 * L]
        assert lsns(writer.read(Cursor(L), 10)) == [2 * L, 3 * L]
    finally:
        other.close()
        writer.close()


def _blob_txn(commit_lsn: int, nbytes: int) -> StoredTransaction:
    body = frame(commit_lsn - 10, w.insert(16384, "1", "c", "x" * nbytes))
    return StoredTransaction(1, commit_lsn, commit_lsn + 8, 0, None, 1, body)


def _wait_until_checkpointed(path: Path, size: int) -> None:
    """Until the database file (not its WAL) holds ``size`` bytes: pages a checkpoint copied."""
    deadline = time.monotonic() + 10
    while path.stat().st_size < size:
        assert time.monotonic() < deadline, "no checkpoint"
        time.sleep(0.02)


def test_appends_never_checkpoint_on_their_own_commit(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """40 MB appended, past SQLite's automatic checkpoint (1,000 pages): the database file does
    not grow while the checkpoint thread is not due; the WAL holds it all."""
    monkeypatch.setattr("pgfeed.changelog.sqlite._CHECKPOINT_BYTES", 1 << 40)
    monkeypatch.setattr("pgfeed.changelog.sqlite._CHECKPOINT_SECONDS", 3600.0)
    path = tmp_path / "log.db"
    log = SqliteChangeLog(path)
    try:
        before = path.stat().st_size
        for i in range(1, 41):
            log.append([_blob_txn(i * L, 1 << 20)])
        assert path.stat().st_size == before
        assert Path(f"{path}-wal").stat().st_size > 40 << 20
    finally:
        log.close()


def test_the_checkpoint_thread_copies_the_wal_once_due(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pgfeed.changelog.sqlite._CHECKPOINT_BYTES", 4 << 20)
    path = tmp_path / "log.db"
    log = SqliteChangeLog(path)
    try:
        before = path.stat().st_size
        for i in range(1, 9):
            log.append([_blob_txn(i * L, 1 << 20)])
        _wait_until_checkpointed(path, before + (6 << 20))
        assert lsns(log.read(EARLIEST, 100)) == [i * L for i in range(1, 9)]
        thread = log._checkpointer._thread  # type: ignore[union-attr]
    finally:
        log.close()
    assert not thread.is_alive()  # close stops it


def test_a_last_write_is_checkpointed_a_moment_later(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The timer path: one append, far below the size trigger, then nothing."""
    monkeypatch.setattr("pgfeed.changelog.sqlite._CHECKPOINT_BYTES", 1 << 40)
    monkeypatch.setattr("pgfeed.changelog.sqlite._CHECKPOINT_SECONDS", 0.05)
    path = tmp_path / "log.db"
    log = SqliteChangeLog(path)
    try:
        before = path.stat().st_size
        log.append([_blob_txn(L, 2 << 20)])
        _wait_until_checkpointed(path, before + (1 << 20))
    finally:
        log.close()


# -- split points without an index --------------------------------------------------------------


def test_a_log_created_with_the_cum_changes_index_loses_it_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    log = SqliteChangeLog(path)
    log.append([txn(1000 * i, 2) for i in range(1, 6)])
    log.close()
    conn = sqlite3.connect(path)
    conn.execute("CREATE INDEX txn_cum_changes ON txn (cum_changes)")  # as logs were created before
    conn.commit()
    conn.close()
    log = SqliteChangeLog(path)
    try:
        conn = sqlite3.connect(path)
        indexes = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")]
        conn.close()
        assert "txn_cum_changes" not in indexes
        assert log.split_points(0, log.head(), 5) == [0, 1000, 2000, 3000, 4000, 5000]
    finally:
        log.close()


@settings(max_examples=60, deadline=None)
@given(counts=st.lists(st.integers(0, 50), min_size=1, max_size=40), parts=st.integers(1, 9),
       trim=st.integers(0, 20), lo=st.integers(0, 45), hi=st.integers(0, 45))
def test_split_points_match_the_memory_log(tmp_path_factory: pytest.TempPathFactory, counts: list[int],
                                           parts: int, trim: int, lo: int, hi: int) -> None:
    """The bisection over commit_lsn cuts where the memory log's scan does, trims included."""
    memory = MemoryChangeLog()
    sqlite = SqliteChangeLog(tmp_path_factory.mktemp("split") / "log.db")
    try:
        batch = [txn(1000 * i, n) for i, n in enumerate(counts, start=1)]
        for log in (memory, sqlite):
            log.append(batch)
            log.trim(1000 * trim)
        lo, hi = sorted((1000 * lo, 1000 * hi))
        assert sqlite.split_points(lo, hi, parts) == memory.split_points(lo, hi, parts)
    finally:
        sqlite.close()
        memory.close()


def test_a_version_1_log_is_upgraded_and_its_consumers_start_their_idle_time_then(tmp_path: Path) -> None:
    """Logs written before consumers' acknowledgement times were kept (schema version 1) open with
    every consumer counted as acknowledging at the upgrade: none expires at once."""
    path = tmp_path / "v1.db"
    log = SqliteChangeLog(path)
    log.append([txn(L), txn(2 * L)])
    log.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:  # what version 1 had
        conn.execute("DROP TABLE piece")  # (version 3's)
        conn.execute("DROP TABLE consumer")
        conn.execute("CREATE TABLE consumer (name TEXT PRIMARY KEY, lsn INTEGER NOT NULL, seq INTEGER) "
                     "WITHOUT ROWID")
        conn.execute("INSERT INTO consumer VALUES ('spark', ?, NULL)", (L,))
        conn.execute("PRAGMA user_version = 1")
        conn.commit()
    before = pg_now_us()
    log = SqliteChangeLog(path)
    try:
        states = log.consumer_states()
        assert list(states) == ["spark"] and states["spark"].cursor == Cursor(L)
        assert before <= states["spark"].acked_us <= pg_now_us()
        assert log.expire_consumers(before) == []
        assert lsns(log.read(EARLIEST, 10)) == [L, 2 * L]
    finally:
        log.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
        assert conn.execute("SELECT count(*) FROM piece").fetchone()[0] == 0


def test_an_unsynced_append_is_stored_and_the_next_commits_sync_again(tmp_path: Path) -> None:
    """``sync=False`` (a backfill's piece): synchronous=NORMAL for that COMMIT only."""
    log = SqliteChangeLog(tmp_path / "log.db")
    try:
        log.append([txn(100)], confirmed_lsn=50, sync=False)
        assert log._writer is not None
        assert log._writer.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL again
        log.append([txn(200)], confirmed_lsn=208)
    finally:
        log.close()
    reopened = SqliteChangeLog(tmp_path / "log.db")
    try:
        assert lsns(reopened.read(EARLIEST, 10)) == [100, 200] and reopened.confirmed_lsn() == 208
    finally:
        reopened.close()


def test_backfill_pieces_are_written_once_to_piece_files_and_removed_with_retention(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backfill piece's payload goes to a piece file beside the log, not to its chunk rows
    (SQLite writes a blob twice and every live fsync flushed it); readers in any instance read
    it back, whole or a chunk at a time; retention removes a file once no kept piece is in it,
    never the newest; a reader inside a piece whose file went gets the retention error, and a
    file lost otherwise is a clear error, never other bytes."""
    from pgfeed.assembler.chunked import ChunkedPayload
    from pgfeed.assembler.model import BackfillProgress
    from pgfeed.changelog import piece_files
    from pgfeed.errors import RetentionError

    monkeypatch.setattr(piece_files, "FILE_BYTES", 1)  # every piece starts a file of its own
    path = tmp_path / "log.db"
    log = SqliteChangeLog(path, chunk_bytes=1000)
    reader = SqliteChangeLog(path)  # another instance (no in-memory tail): reads the files
    pieces = [txn(i * L, 100, origin="pgfeed.backfill:b1") for i in range(1, 5)]
    for i, piece in enumerate(pieces, 1):
        piece.progress = BackfillProgress("b1", 0, f'["{i}"]', rows=100 * i, chunks=i, done=False)
    live = txn(5 * L, 2)
    try:
        log.append(pieces[:2])
        log.append([*pieces[2:], live], sync=False)
        directory = path.with_name("log.db-pieces")
        files = sorted(directory.iterdir())
        assert [f.read_bytes() for f in files] == [p.payload for p in pieces]
        with contextlib.closing(sqlite3.connect(path)) as conn:
            assert conn.execute("SELECT count(*) FROM chunk").fetchone()[0] == 1  # the live one's
            assert conn.execute("SELECT count(*) FROM piece").fetchone()[0] == 4
        assert [bytes(t.payload) for t in reader.read(EARLIEST, 10**6)] == \
            [p.payload for p in pieces] + [live.payload]
        (inside,) = reader.read(EARLIEST, 1, lazy_chunks=1)
        assert isinstance(inside.payload, ChunkedPayload) and inside.payload.chunks > 5
        assert bytes(inside.payload.chunk(0)) == pieces[0].payload[:len(inside.payload.chunk(0))]
        assert log.trim(3 * L) == 2
        assert sorted(directory.iterdir()) == files[2:]
        with pytest.raises(RetentionError, match="dropped by the feed's retention"):
            for i in range(inside.payload.chunks):
                inside.payload.chunk(i)
        files[2].unlink()  # lost by hand: not retention's doing
        with pytest.raises(ChangeLogError, match="piece file of transaction 7530 is missing"):
            reader.read(EARLIEST, 10**6)
        assert log.trim(MAX_LSN, force=True) == 3
        assert sorted(directory.iterdir()) == files[3:]  # the newest stays: it may be written
    finally:
        reader.close()
        log.close()
    reopened = SqliteChangeLog(path)  # a new writer starts a file of its own
    again = txn(6 * L, 3, origin="pgfeed.backfill:b1")
    again.progress = BackfillProgress("b1", 0, '["6"]', rows=403, chunks=5, done=True)
    try:
        reopened.append([again])
        assert [bytes(t.payload) for t in reopened.read(EARLIEST, 10**6)] == [again.payload]
        assert max(directory.iterdir()).read_bytes() == again.payload
    finally:
        reopened.close()


def test_a_piece_that_cannot_be_written_is_a_change_log_error_and_loses_nothing(tmp_path: Path) -> None:
    """A piece file that cannot be written (here its directory's name is taken by a file; a
    full disk alike) fails the append with the log's own error, rolled back whole; the log
    goes on (the next pieces start a new file once the cause is gone)."""
    from pgfeed.assembler.model import BackfillProgress

    path = tmp_path / "log.db"
    path.with_name("log.db-pieces").write_text("in the way")
    log = SqliteChangeLog(path)
    piece = txn(2 * L, 5, origin="pgfeed.backfill:b1")
    piece.progress = BackfillProgress("b1", 0, '["5"]', rows=5, chunks=1, done=False)
    try:
        log.append([txn(L)])
        with pytest.raises(ChangeLogError, match="log.db-pieces"):
            log.append([piece, txn(3 * L)])
        assert lsns(log.read(EARLIEST, 100)) == [L] and log.head() == L  # nothing of that batch
        path.with_name("log.db-pieces").unlink()
        log.append([piece, txn(3 * L)])
        assert [bytes(t.payload) for t in log.read(EARLIEST, 100)][1] == piece.payload
        assert lsns(log.read(EARLIEST, 100)) == [L, 2 * L, 3 * L]
    finally:
        log.close()
