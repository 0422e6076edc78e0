"""What the PostgreSQL store adds to the change log contract (real servers, PG 15 and 18): payloads
in bounded pieces (COPY, spilled transactions never held whole), fencing by lease epoch, leases,
and a paused writer that never blocks a takeover for long."""

from __future__ import annotations

import threading
import time
import tracemalloc
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgfeed.assembler.transactions import TransactionAssembler
from pgfeed.changelog.base import LeaseLost
from pgfeed.changelog.spill_files import FileSpillStore
from pgfeed.feeds.leadership import fair_share
from pgfeed.pgstore import leases
from pgfeed.pgstore.changelog import CHUNK_BYTES, PgChangeLog
from pgfeed.pgstore.connections import ConnectionPool, connect
from pgfeed_client._cursor import EARLIEST
from tests.fixtures.fix_pgstore import SCHEMA, leading_changelog, store_dsn
from tests.unit.assembler import wire as w
from tests.unit.changelog.txns import lsns, txn

pytestmark = pytest.mark.pg
L = 10_000


def pieces(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [n for (n,) in conn.execute(sql.SQL("SELECT length(data) FROM {}.chunk ORDER BY commit_lsn, piece")
                                           .format(sql.Identifier(SCHEMA)))]


def test_large_payloads_go_in_pieces_and_read_back_whole(pg_cluster):
    dsn = store_dsn(pg_cluster)
    pool = ConnectionPool(dsn)
    log = PgChangeLog(pool, SCHEMA, "f", holder="me", chunk_bytes=1000, owns_pool=True)
    with connect(dsn) as conn:
        log.lead(leases.acquire(conn, SCHEMA, "f", "me", 60).epoch)  # type: ignore[union-attr]
    try:
        big = [txn(i * L, 40, schema=i == 1) for i in range(1, 4)]  # ~4 KB each: COPY, pieces
        small = txn(4 * L, 2)  # one INSERT
        log.append(big)
        log.append([small])
        assert log.read(EARLIEST, 10**6) == [*big, small]
        sizes = pieces(dsn)
        assert max(sizes) <= 1000 and len(sizes) > 12
    finally:
        log.close()


def test_a_spilled_transaction_is_appended_without_being_held_whole(pg_cluster, tmp_path: Path):
    rows, row = 100_000, "r" * 150  # ~18 MB of frames, spilled by the assembler
    asm = TransactionAssembler(spill=FileSpillStore(tmp_path / "spill"), memory_limit=1 << 20)
    asm.feed(1, w.begin(7, 10**9))
    for i in range(rows):
        asm.feed(2 + i, w.insert(1, f"{i}", row))
    with leading_changelog(pg_cluster) as log:
        tracemalloc.start()
        [t] = asm.feed(10**9, w.commit(10**9, 10**9 + 8))
        log.append([t])
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        size = len(t.payload)
        assert size > 15 << 20 and peak < 4 * CHUNK_BYTES, f"append peaked at {peak >> 20} MB"
        (got,) = log.read(EARLIEST, 1)
        assert len(got.payload) == size and got.change_count == rows


def test_a_deposed_leader_can_never_write_again(pg_cluster):
    dsn = store_dsn(pg_cluster)
    pool = ConnectionPool(dsn)
    old = PgChangeLog(pool, SCHEMA, "f", holder="old")
    new = PgChangeLog(pool, SCHEMA, "f", holder="new")
    try:
        with connect(dsn) as conn:
            first = leases.acquire(conn, SCHEMA, "f", "old", ttl=0.2)
            assert first is not None and leases.acquire(conn, SCHEMA, "f", "new", ttl=5) is None
            old.lead(first.epoch)
            old.append([txn(L)], confirmed_lsn=L + 8)
            time.sleep(0.3)  # expired
            second = leases.acquire(conn, SCHEMA, "f", "new", ttl=5)
            assert second is not None and second.epoch == first.epoch + 1
            assert leases.renew(conn, SCHEMA, "f", "old", first.epoch, 5) is None
        new.lead(second.epoch)
        for write in (lambda: old.append([txn(2 * L)]), lambda: old.set_confirmed_lsn(10**6)):
            old.lead(first.epoch)  # still believes it leads
            with pytest.raises(LeaseLost, match="held by 'new'"):
                write()
        new.append([txn(2 * L)], confirmed_lsn=2 * L + 8)
        assert lsns(new.read(EARLIEST, 100)) == [L, 2 * L] and new.confirmed_lsn() == 2 * L + 8
        with pytest.raises(LeaseLost):
            PgChangeLog(pool, SCHEMA, "f", holder="x").append([txn(3 * L)])  # never led
    finally:
        pool.close()


def test_a_writer_stalled_inside_its_append_delays_a_takeover_only_briefly(pg_cluster):
    """A leader paused between the lease check and its commit holds the lease row FOR SHARE: the
    session's idle_in_transaction_session_timeout ends it, so the takeover waits seconds, not
    until the paused process wakes up."""
    dsn = store_dsn(pg_cluster)
    with connect(dsn) as stalled, connect(dsn) as taker:
        lease = leases.acquire(stalled, SCHEMA, "f", "old", ttl=0.5)
        assert lease is not None
        PgChangeLog(ConnectionPool(dsn), SCHEMA, "f", holder="old").close()  # its log_state row
        stalled.execute("BEGIN")
        stalled.execute(sql.SQL("SELECT 1 FROM {}.lease WHERE feed = 'f' FOR SHARE").format(sql.Identifier(SCHEMA)))
        time.sleep(0.6)  # the lease expired; the stalled session still holds its row lock
        t0 = time.monotonic()
        got = None
        while got is None and time.monotonic() - t0 < 15:
            try:
                got = leases.acquire(taker, SCHEMA, "f", "new", ttl=5)
            except psycopg.errors.LockNotAvailable:  # lock_timeout: the leadership tick retries
                pass
        took = time.monotonic() - t0
        assert got is not None and got.holder == "new" and took < 9, took
        with pytest.raises(psycopg.Error, match="idle-in-transaction"):
            stalled.execute("SELECT 1")  # its session was ended


def test_leases_spread_and_heartbeats(pg_cluster):
    dsn = store_dsn(pg_cluster)
    with connect(dsn) as conn:
        leases.heartbeat(conn, SCHEMA, "a")
        leases.heartbeat(conn, SCHEMA, "b")
        assert [r.id for r in leases.replicas(conn, SCHEMA)] == ["a", "b"]
        assert all(r.age_seconds < 5 for r in leases.replicas(conn, SCHEMA))
    assert fair_share(3, 2) == 2 and fair_share(1, 3) == 1 and fair_share(0, 0) == 0


def test_concurrent_appends_and_reads_share_the_pool(pg_cluster):
    with leading_changelog(pg_cluster) as log:
        errors: list[BaseException] = []

        def read() -> None:
            try:
                for _ in range(50):
                    got = log.read(EARLIEST, 10**6)
                    assert lsns(got) == sorted(lsns(got))
            except BaseException as exc:
                errors.append(exc)

        readers = [threading.Thread(target=read) for _ in range(3)]
        for t in readers:
            t.start()
        for i in range(1, 101):
            log.append([txn(i * L, 2)], confirmed_lsn=i * L)
        for t in readers:
            t.join()
        assert not errors and log.stats().transaction_count == 100
