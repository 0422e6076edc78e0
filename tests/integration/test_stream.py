"""ReplicationStream, create_slot and exported_slot against real PostgreSQL 15 and 18."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest
from psycopg import sql

from pgfeed.assembler.framing import walk
from pgfeed.errors import SourceError
from pgfeed.pgoutput import decode
from pgfeed.pgoutput.messages import (
    BeginMessage,
    CommitMessage,
    DeleteMessage,
    InsertMessage,
    LogicalMessage,
    Message,
    RelationMessage,
    StreamStartMessage,
    StreamStopMessage,
    UpdateMessage,
)
from pgfeed.replication import slots
from pgfeed.replication.commands import max_proto_version
from pgfeed.replication.stream import ReplicationStream, create_slot, exported_slot

pytestmark = pytest.mark.pg

PASSWORD = "hunter2-not-for-logs"


def setup_table(dsn: str, publication: str = "pub") -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE t").format(sql.Identifier(publication)))


def run(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for s in statements:
            conn.execute(s)  # type: ignore[arg-type]


def start(dsn: str, slot: str = "s", start_lsn: int = 0, publications: tuple[str, ...] = ("pub",),
          **options: object) -> ReplicationStream:
    stream = ReplicationStream(dsn)
    kwargs: dict[str, object] = {"proto_version": max_proto_version(stream.server_version),
                                 "streaming": "on", "messages": True, **options}
    try:
        stream.start(slot, start_lsn, publications=list(publications), **kwargs)  # type: ignore[arg-type]
    except BaseException:
        stream.close()
        raise
    return stream


def read_until(stream: ReplicationStream, done: Callable[[list[tuple[int, Message]]], bool],
               timeout: float = 30) -> list[tuple[int, Message]]:
    """Decoded (dataStart, message) pairs until ``done`` says so (stream blocks tracked)."""
    out: list[tuple[int, Message]] = []
    in_stream = False
    deadline = time.monotonic() + timeout
    while not done(out):
        assert time.monotonic() < deadline, f"timed out; got {[type(m).__name__ for _, m in out]}"
        frames, _ = stream.read_batch(1000, timeout=0.5)
        for lsn, payload in frames:
            msg = decode(payload, in_stream=in_stream)
            if isinstance(msg, StreamStartMessage):
                in_stream = True
            elif isinstance(msg, StreamStopMessage):
                in_stream = False
            out.append((lsn, msg))
    return out


def commits(n: int) -> Callable[[list[tuple[int, Message]]], bool]:
    return lambda got: sum(isinstance(m, CommitMessage) for _, m in got) >= n


def confirmed_flush(dsn: str, slot: str = "s") -> int | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        info = slots.slot_info(conn, slot)
    assert info is not None
    return info["confirmed_flush_lsn"]


def wait_for(predicate: Callable[[], object], timeout: float = 15, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def test_protocol_version_negotiated_per_server(any_pg_cluster, any_pg_dsn):
    setup_table(any_pg_dsn)
    create_slot(any_pg_dsn, "s")
    with ReplicationStream(any_pg_dsn) as stream:
        assert stream.server_version // 10000 == int(any_pg_cluster.version)
        proto = max_proto_version(stream.server_version)
        assert proto == {"14": 2, "15": 3, "18": 4}[any_pg_cluster.version]
        system_id, timeline, xlogpos, dbname = stream.identify_system()
        assert system_id.isdigit() and timeline >= 1 and xlogpos > 0
        assert dbname == psycopg.conninfo.conninfo_to_dict(any_pg_dsn)["dbname"]
    # The highest version is accepted; one more is refused by the server, as a SourceError
    # (PostgreSQL 18's 4 is the newest there is: the builder refuses 5 itself).
    start(any_pg_dsn, proto_version=proto).close()
    with ReplicationStream(any_pg_dsn) as stream:
        if proto < 4:
            # 14 refuses the option v3 brings (two_phase) before the version itself
            with pytest.raises(SourceError, match="proto|option: two_phase"):
                stream.start("s", 0, proto_version=proto + 1, publications=["pub"])
        else:
            with pytest.raises(ValueError, match="proto_version"):
                stream.start("s", 0, proto_version=proto + 1, publications=["pub"])


def test_reads_real_messages_and_decodes_them(any_pg_dsn):
    setup_table(any_pg_dsn)
    create_slot(any_pg_dsn, "s")
    run(any_pg_dsn, "INSERT INTO t VALUES (1, 'one'), (2, 'two')",
        "UPDATE t SET v = 'uno' WHERE id = 1",
        "DELETE FROM t WHERE id = 2",
        "SELECT pg_logical_emit_message(true, 'app', 'hello')")
    with start(any_pg_dsn) as stream:
        got = read_until(stream, commits(4))
    messages = [m for _, m in got]
    kinds = [type(m).__name__ for m in messages]
    assert kinds[:5] == ["BeginMessage", "RelationMessage", "InsertMessage", "InsertMessage",
                         "CommitMessage"]
    rel = next(m for m in messages if isinstance(m, RelationMessage))
    assert (rel.namespace, rel.relation_name, [c.name for c in rel.columns]) == ("public", "t", ["id", "v"])
    inserts = [m.new_tuple.values for m in messages if isinstance(m, InsertMessage)]
    assert inserts == [("1", "one"), ("2", "two")]
    (update,) = [m for m in messages if isinstance(m, UpdateMessage)]
    assert update.new_tuple.values == ("1", "uno")
    (delete,) = [m for m in messages if isinstance(m, DeleteMessage)]
    assert delete.old_tuple.values == ("2", None)
    (message,) = [m for m in messages if isinstance(m, LogicalMessage)]
    assert (message.prefix, message.content, message.flags) == ("app", b"hello", 1)
    # A Commit arrives with dataStart == its end LSN (what capture confirms); Begin with final_lsn.
    for (lsn, msg) in got:
        if isinstance(msg, CommitMessage):
            assert lsn == msg.end_lsn and msg.commit_lsn < msg.end_lsn
    begins = [m for m in messages if isinstance(m, BeginMessage)]
    ends = [m for m in messages if isinstance(m, CommitMessage)]
    assert [b.final_lsn for b in begins] == [c.commit_lsn for c in ends]


def test_streaming_on_sends_big_transactions_in_blocks(any_pg_cluster, any_pg_dsn):
    dbname = psycopg.conninfo.conninfo_to_dict(any_pg_dsn)["dbname"]
    setup_table(any_pg_dsn)
    run(any_pg_dsn, f"ALTER DATABASE \"{dbname}\" SET logical_decoding_work_mem = '64kB'")
    create_slot(any_pg_dsn, "s")
    run(any_pg_dsn, "INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, 5000) g")
    with start(any_pg_dsn) as stream:
        got = read_until(stream, lambda out: any(type(m).__name__ == "StreamCommitMessage" for _, m in out))
    assert any(isinstance(m, StreamStartMessage) for _, m in got)
    inserts = [m for _, m in got if isinstance(m, InsertMessage)]
    assert len(inserts) == 5000 and all(m.xid is not None for m in inserts)


def test_feedback_moves_confirmed_flush_exactly_and_resume_from_start_lsn(pg_dsn):
    setup_table(pg_dsn)
    created, _ = create_slot(pg_dsn, "s")
    run(pg_dsn, "INSERT INTO t VALUES (1, 'a')", "INSERT INTO t VALUES (2, 'b')",
        "INSERT INTO t VALUES (3, 'c')")
    stream = start(pg_dsn)
    try:
        got = read_until(stream, commits(3))
        ends = [lsn for lsn, m in got if isinstance(m, CommitMessage)]
        assert confirmed_flush(pg_dsn) == created
        stream.send_feedback(ends[0], ends[0], ends[0])
        wait_for(lambda: confirmed_flush(pg_dsn) == ends[0], what="confirmed_flush_lsn == first commit")
        stream.send_feedback(ends[0] - 1, ends[0] - 1, ends[0] - 1)  # never moves backward
        stream.send_feedback(ends[0], ends[0], ends[0], reply=True)
        # A reply request is answered with a keepalive.
        deadline = time.monotonic() + 10
        keepalives: list[tuple[int, bool]] = []
        while not keepalives and time.monotonic() < deadline:
            keepalives = stream.read_batch(100, timeout=0.5)[1]
        assert keepalives and keepalives[0][0] >= ends[-1]
        assert confirmed_flush(pg_dsn) == ends[0]
    finally:
        stream.close()
    # Restart from the confirmed position: the first transaction is not sent again.
    with start(pg_dsn) as again:
        values = [m.new_tuple.values[0] for _, m in read_until(again, commits(2))
                  if isinstance(m, InsertMessage)]
    assert values == ["2", "3"]
    # An explicit start LSN past the confirmed one skips what committed before it.
    with start(pg_dsn, start_lsn=ends[1]) as later:
        values = [m.new_tuple.values[0] for _, m in read_until(later, commits(1))
                  if isinstance(m, InsertMessage)]
    assert values == ["3"]


def test_keepalives_answered_keep_an_idle_stream_alive(pg_dsn):
    setup_table(pg_dsn)
    create_slot(pg_dsn, "s")
    # wal_sender_timeout is per connection (PostgreSQL 12+): 1 s, so the walsender pings at 0.5 s.
    dsn = f"{pg_dsn} options='-c wal_sender_timeout=1000'"
    with start(dsn) as stream:
        requested = 0
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            frames, keepalives = stream.read_batch(100, timeout=0.2)
            assert frames == []
            for wal_end, reply in keepalives:
                if reply:
                    requested += 1
                    stream.send_feedback(wal_end, 0, 0)
        assert requested >= 2  # the walsender asked, and was answered each time: still streaming
        run(pg_dsn, "INSERT INTO t VALUES (1, 'after idle')")
        got = read_until(stream, commits(1))
    assert any(isinstance(m, InsertMessage) for _, m in got)


def test_unanswered_stream_times_out_as_source_error(pg_dsn):
    setup_table(pg_dsn)
    create_slot(pg_dsn, "s")
    dsn = f"{pg_dsn} options='-c wal_sender_timeout=500'"
    with start(dsn) as stream:
        with pytest.raises(SourceError) as info:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                stream.read_batch(100, timeout=0.2)  # never answers
        # The walsender logs its timeout but only closes the socket: libpq says so.
        assert "closed" in str(info.value) or "timeout" in str(info.value)
        assert "\n" not in str(info.value)


def test_terminated_walsender_is_a_source_error_without_the_password(pg_dsn):
    setup_table(pg_dsn)
    create_slot(pg_dsn, "s")
    dsn = f"{pg_dsn} password={PASSWORD}"
    stream = start(dsn)
    try:
        pid = wait_for(lambda: _active_pid(pg_dsn), what="the walsender")
        run(pg_dsn, f"SELECT pg_terminate_backend({int(pid)})")  # type: ignore[call-overload]
        with pytest.raises(SourceError) as info:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                stream.read_batch(100, timeout=0.2)
        assert PASSWORD not in str(info.value)
        assert "terminat" in str(info.value) or "closed" in str(info.value)
        with pytest.raises(SourceError):  # a dead stream stays dead
            stream.read_batch(10, timeout=0)
    finally:
        stream.close()
        stream.close()


def test_connection_failures_hide_the_password(pg_cluster):
    dsn = f"host=127.0.0.1 port=1 dbname=x user=u password={PASSWORD} connect_timeout=2"
    with pytest.raises(SourceError) as info:
        ReplicationStream(dsn)
    assert PASSWORD not in str(info.value)


def test_missing_slot_is_a_source_error(pg_dsn):
    setup_table(pg_dsn)
    with pytest.raises(SourceError, match="nope"):
        start(pg_dsn, slot="nope")


def test_hostile_publication_names_reach_pgoutput_intact(pg_dsn):
    names = ('a"b,c', "Mixed Case", "back\\slash", "quote'd")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE u (id int PRIMARY KEY)")
        conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE t").format(sql.Identifier(names[0])))
        for name in names[1:]:
            conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE u").format(sql.Identifier(name)))
    create_slot(pg_dsn, "s")
    run(pg_dsn, "INSERT INTO t VALUES (1, 'x')")
    for subset, expected in ((names[:1], 1), (names[1:], 0)):
        # Slots re-decode from their start each time (nothing confirmed), so each subset sees it.
        with start(pg_dsn, publications=subset) as stream:
            run(pg_dsn, "SELECT pg_logical_emit_message(true, 'end', '')")
            got = read_until(stream, lambda out: any(isinstance(m, LogicalMessage) for _, m in out))
        assert sum(isinstance(m, InsertMessage) for _, m in got) == expected


def test_create_slot_without_snapshot(pg_dsn):
    lsn, name = create_slot(pg_dsn, "plain")
    assert lsn > 0 and name is None
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        info = slots.slot_info(conn, "plain")
        assert info is not None and info["plugin"] == "pgoutput" and info["two_phase"] is False
        assert info["confirmed_flush_lsn"] == lsn
    with pytest.raises(SourceError, match="already exists"):
        create_slot(pg_dsn, "plain")


def test_create_two_phase_slot(pg_dsn):
    create_slot(pg_dsn, "tp", two_phase=True)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert slots.slot_info(conn, "tp")["two_phase"] is True  # type: ignore[index]


def test_exported_snapshot_is_importable_while_the_block_runs(any_pg_dsn):
    setup_table(any_pg_dsn)
    run(any_pg_dsn, "INSERT INTO t VALUES (1, 'before')")
    with exported_slot(any_pg_dsn, "s") as (lsn, snapshot):
        assert lsn > 0 and snapshot
        run(any_pg_dsn, "INSERT INTO t VALUES (2, 'after')")  # committed after the consistent point
        with psycopg.connect(any_pg_dsn) as reader:
            reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            reader.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
            rows = reader.execute("SELECT id, v FROM t ORDER BY id").fetchall()
        assert rows == [(1, "before")]
    # Gone with its connection (once its backend has exited: the server ends it after the
    # client closes); the slot stays and streams exactly what the snapshot lacks.
    deadline = time.monotonic() + 10
    while True:
        with psycopg.connect(any_pg_dsn) as reader:
            reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            try:
                reader.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
            except psycopg.Error:
                break
        assert time.monotonic() < deadline, "the exported snapshot outlived its connection"
        time.sleep(0.05)
    with start(any_pg_dsn) as stream:
        got = read_until(stream, commits(1))
    assert [m.new_tuple.values for _, m in got if isinstance(m, InsertMessage)] == [("2", "after")]


def test_create_slot_export_returns_the_consistent_point(any_pg_dsn):
    lsn, name = create_slot(any_pg_dsn, "exp", snapshot="export")
    assert lsn > 0 and name  # the name is informational: the snapshot ended with the connection


def _active_pid(dsn: str) -> int | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        info = slots.slot_info(conn, "s")
    return info["active_pid"] if info else None


ROW_TAGS = (b"I", b"U", b"D", b"T")


def _received_frames(stream: ReplicationStream, rows: int) -> list[tuple[int, bytes, bool]]:
    """Every frame up to the commit after the ``rows``-th row change, as (dataStart, message, in a run of row changes), with each
    batch's runs checked: a row run holds exactly ``rows`` frames, all row changes; another run
    one frame, not a row change inside Begin..Commit's fast path."""
    out: list[tuple[int, bytes, bool]] = []
    deadline = time.monotonic() + 30
    seen = 0
    while seen < rows or out[-1][1][:1] not in (b"C", b"c"):
        assert time.monotonic() < deadline, "timed out reading the copied slot"
        got = stream.receive(700, timeout=0.5)  # small batches: runs cut at batch ends too
        view = memoryview(got.data)
        assert sum(stop - start for start, stop, _ in got.runs) == len(got.data)
        for start, stop, count in got.runs:
            frames = [(lsn, bytes(view[a:b])) for _, lsn, a, b in walk(view, start, stop)]
            assert len(frames) == max(count, 1)
            assert all(m[:1] in ROW_TAGS for _, m in frames) or not count
            out.extend((lsn, m, bool(count)) for lsn, m in frames)
            seen += sum(m[:1] in ROW_TAGS for _, m in frames)
        if got.runs:
            assert got.last_lsn == out[-1][0]
        if got.keepalives:
            stream.send_feedback(out[-1][0] if out else 0, 0, 0)
    return out


def test_the_compiled_receive_loop_reads_what_the_python_loop_reads(pg_dsn):
    """``ReplicationStream.receive`` in C (``_receive.c``, the GIL released) and in Python
    (``_receive_py``) on copies of one slot: the same frames, positions and runs, over row
    changes, a truncate, messages, a streamed transaction and batches cut mid-run."""
    from pgfeed.replication import stream as stream_module

    assert stream_module._compiled is not None  # the compiled loop is what capture runs here
    dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    setup_table(pg_dsn)
    run(pg_dsn, f"ALTER DATABASE \"{dbname}\" SET logical_decoding_work_mem = '256kB'")
    create_slot(pg_dsn, "s")
    run(pg_dsn, "INSERT INTO t SELECT g, repeat('x', g % 300) FROM generate_series(1, 3000) g",
        "UPDATE t SET v = 'y' WHERE id % 3 = 0", "DELETE FROM t WHERE id % 5 = 0",
        "SELECT pg_logical_emit_message(true, 'p', 'in a transaction')",
        "SELECT pg_logical_emit_message(false, 'p', 'alone')", "TRUNCATE t",
        "INSERT INTO t SELECT g, repeat('z', 200) FROM generate_series(1, 5000) g")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_copy_logical_replication_slot('s', 's2')")
    reads = []
    for slot, native in (("s", True), ("s2", False)):
        stream = start(pg_dsn, slot)
        try:
            if not native:
                stream._native = None
            assert (stream._native is not None) == native
            reads.append(_received_frames(stream, 3000 + 1000 + 600 + 1 + 5000))
        finally:
            stream.close()
    compiled, python = reads
    assert compiled == python
    assert sum(m[:1] in ROW_TAGS for _, m, _ in compiled) == 9_601
    assert sum(in_run for *_, in_run in compiled) == 9_601  # every row change came in a run
    assert {m[:1] for _, m, _ in compiled} >= {b"B", b"C", b"I", b"U", b"D", b"T", b"M", b"S", b"E"}
