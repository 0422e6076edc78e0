"""FeedReader.page without blocking: the event loop's inline tail read never waits for another
reader's decode; it gets ReaderBusy, or a page that ends early with a cursor that loses nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pgfeed.changelog.base import ChangeLog
from pgfeed.changelog.memory import MemoryChangeLog
from pgfeed.decoding.model import Op
from pgfeed.decoding.relations import RelationCatalog
from pgfeed.errors import RetentionError
from pgfeed.feeds.reader import FeedReader, ReaderBusy
from pgfeed_client._cursor import EARLIEST, Cursor
from tests.fixtures.fix_pg import PG_VERSIONS
from tests.unit.changelog.txns import relation_frame, txn


def _reader() -> FeedReader:
    log = MemoryChangeLog()
    log.append([txn(0x1000, 2, schema=True), txn(0x2000, 2), txn(0x3000, 2)])
    catalog = RelationCatalog()
    catalog.add(0x100, relation_frame(0x100)[12:])  # the frame's message, past lsn and length
    return FeedReader(log, lambda: catalog)


def test_a_busy_reader_is_reported_not_waited_for() -> None:
    reader = _reader()
    # another thread decoding this feed's page (its lock held here, for the test)
    with reader._lock, pytest.raises(ReaderBusy):
        reader.page(EARLIEST, 10, block=False)
    page = reader.page(EARLIEST, 10, block=False)
    assert [t.commit_lsn for t in page.transactions] == [0x1000, 0x2000, 0x3000]
    assert page.next == Cursor(0x3000) and not page.has_more


class _FreeFor:
    """A lock that another reader takes after ``free`` acquisitions (non-blocking ones then fail)."""

    def __init__(self, free: int) -> None:
        self.free = free

    def acquire(self, blocking: bool = True) -> bool:
        if self.free:
            self.free -= 1
            return True
        assert not blocking, "a blocking page would wait here"
        return False

    def release(self) -> None:
        pass


def test_a_page_that_meets_a_busy_reader_ends_with_a_cursor_that_loses_nothing() -> None:
    reader = _reader()
    reader._lock = _FreeFor(1)  # type: ignore[assignment]
    first = reader.page(EARLIEST, 10, block=False)
    assert [t.commit_lsn for t in first.transactions] == [0x1000]
    assert first.next == Cursor(0x1000) and first.has_more
    reader._lock = _FreeFor(10)  # type: ignore[assignment]
    rest = reader.page(first.next, 10, block=False)
    assert [t.commit_lsn for t in rest.transactions] == [0x2000, 0x3000] and not rest.has_more


def test_a_page_names_the_last_whole_transaction_its_filters_left_out() -> None:
    reader = _reader()
    deletes = frozenset({Op.DELETE})  # every change in the log is an insert
    page = reader.page(EARLIEST, 10, ops=deletes)
    assert page.transactions == [] and page.next == Cursor(0x3000)
    assert page.passed is not None and (page.passed.commit_lsn, page.passed.changes) == (0x3000, [])
    # A page ending inside a transaction names the last one it passed over whole.
    sliced = reader.page(EARLIEST, 3, ops=deletes)
    assert sliced.next == Cursor(0x2000, 0) and sliced.passed.commit_lsn == 0x1000  # type: ignore[union-attr]
    # The rest of a transaction begun on an earlier page is not named (its frames close it).
    rest = reader.page(sliced.next, 1, ops=deletes)
    assert rest.next == Cursor(0x2000) and rest.passed is None
    # Nothing is named when a transaction that is served comes after it.
    served = reader.page(EARLIEST, 10, tables={"public.orders"})
    assert [t.commit_lsn for t in served.transactions] == [0x1000, 0x2000, 0x3000]
    assert served.passed is None


def test_resolve_decides_on_the_positions_its_caller_read() -> None:
    """A request that read the log's positions for its own decisions (the read-ahead key, ``to``)
    resolves on those same values: an append or a trim since cannot make the two disagree."""
    reader = _reader()
    reader.changelog.trim(0x2000, force=True)  # 0/1000 dropped
    assert reader.resolve(Cursor(0x2000)) == Cursor(0x2000)
    with pytest.raises(RetentionError) as caught:  # the caller read 0/3000 (a trim since then)
        reader.resolve(Cursor(0x2000), trimmed=0x3000)
    assert "0/3000 were dropped" in str(caught.value)
    with pytest.raises(RetentionError):
        reader.resolve(Cursor(0x800))  # no position given: the log's own, read now
    assert reader.resolve("latest") == Cursor(0x3000)
    assert reader.resolve("latest", head=0x2000) == Cursor(0x2000)


def _paged(reader: FeedReader, after: Cursor, limit: int) -> tuple[list[object], list[Cursor]]:
    from pgfeed.decoding.runs import loaded

    changes: list[object] = []
    cursors = []
    while True:
        page = reader.page(after, limit)
        for t in page.transactions:
            changes.extend(loaded(t).changes)
        cursors.append(page.next)
        after = page.next
        if not page.has_more:
            return changes, cursors


@pytest.fixture(params=["sqlite", *(pytest.param(f"postgresql-{v}", marks=pytest.mark.pg,
                                                 id=f"pgstore{v}") for v in PG_VERSIONS)])
def chunked_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChangeLog]:
    """A durable change log writing payloads in 500-byte chunks."""
    if request.param == "sqlite":
        from pgfeed.changelog.sqlite import SqliteChangeLog

        log = SqliteChangeLog(tmp_path / "log.db", chunk_bytes=500)
        yield log
        log.close()
        return
    from tests.fixtures.fix_pgstore import leading_changelog

    with leading_changelog(request.getfixturevalue("pg_clusters").get(
            request.param.split("-")[1])) as store:
        store.chunk_bytes = 500
        yield store


def test_a_big_transaction_read_a_chunk_at_a_time_pages_as_if_read_whole(
        chunked_log: ChangeLog) -> None:
    from pgfeed.assembler.chunked import ChunkedPayload

    log = chunked_log
    big, wide = 1_000_000, 2_000_000
    # 3000 rows in ~600 chunks; then rows larger than a chunk (cut inside their frames)
    log.append([txn(big, 3000, schema=True), txn(wide, 40, row_bytes=1700), txn(wide + 100, 2)])
    catalog = RelationCatalog()
    catalog.add(0x100, relation_frame(0x100)[12:])
    (stored,) = log.read(Cursor(0), 1, lazy_chunks=1)
    assert isinstance(stored.payload, ChunkedPayload) and stored.payload.chunks > 500
    for limit in (7, 333, 5000):
        whole = FeedReader(log, lambda: catalog)
        whole.lazy_chunks = None
        expected = _paged(whole, EARLIEST, limit)
        chunked = _paged(FeedReader(log, lambda: catalog), EARLIEST, limit)
        assert chunked == expected
        assert len(expected[0]) == 3042
    # a reader resuming at a cursor no page stopped at walks the chunks before it
    resumed, _ = _paged(FeedReader(log, lambda: catalog), Cursor(big, 1234), 100)
    assert resumed == _paged(FeedReader(log, lambda: catalog), EARLIEST, 5000)[0][1235:]
