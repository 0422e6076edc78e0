"""SharedTail: what caught-up readers get is encoded once, covers its range without a gap, and
equals what each reader's own paging gives (JSON events and gRPC frames, byte for byte)."""

from __future__ import annotations

import asyncio

from pgfeed.assembler.model import StoredTransaction
from pgfeed.changelog.memory import MemoryChangeLog
from pgfeed.decoding.relations import RelationCatalog
from pgfeed.encoding.to_json import change_events
from pgfeed.encoding.to_proto import Framer
from pgfeed.feeds.reader import FeedReader
from pgfeed.feeds.tail import INLINE_WAL_BYTES, SharedTail
from pgfeed_client._cursor import Cursor
from tests.unit.changelog.txns import relation_frame, txn


def _feed(*transactions: StoredTransaction, **tail_options: int) -> tuple[MemoryChangeLog, SharedTail, FeedReader]:
    log = MemoryChangeLog()
    log.append([txn(0x1000, 2, schema=True), *transactions])
    catalog = RelationCatalog()
    catalog.add(0x100, relation_frame(0x100)[12:])
    reader = FeedReader(log, lambda: catalog)
    tail = SharedTail(FeedReader(log, lambda: catalog),
                      **tail_options)
    return log, tail, reader


def test_readers_at_different_cursors_get_the_bytes_their_own_paging_gives() -> None:
    log, tail, reader = _feed()

    async def main() -> None:
        assert await tail.after(Cursor(0x1000), log.head(), "json") is not None  # starts at 0x1000
        log.append([txn(0x2000, 3), txn(0x3000, 1), txn(0x4000, 2)])
        first = await tail.after(Cursor(0x1000), log.head(), "json")
        again = await tail.after(Cursor(0x2000), log.head(), "json")
        assert first is not None and again is not None
        assert [e.commit_lsn for e in first.entries] == [0x2000, 0x3000, 0x4000]
        assert first.next == Cursor(0x4000) and first.change_count == 6
        assert again.entries == first.entries[1:]  # the same objects: encoded once
        assert all(a is b for a, b in zip(again.entries, first.entries[1:], strict=True))
        page = reader.page(Cursor(0x1000), 100)
        assert b",".join(e.events for e in first.entries) == \
            b",".join(ev for t in page.transactions for ev in change_events(t))
        assert [f for e in first.entries for f in e.frames] == \
            Framer().frames(page.transactions, page.next)

    asyncio.run(main())


def test_a_reader_below_the_tail_or_inside_a_transaction_pages_the_log_itself() -> None:
    log, tail, _ = _feed(txn(0x2000, 2))

    async def main() -> None:
        assert await tail.after(Cursor(0x2000), log.head(), "json") is not None
        assert tail.covered == (0x2000, 0x2000)
        assert await tail.after(Cursor(0x1000), log.head(), "json") is None
        assert await tail.after(Cursor(0x2000, 0), log.head(), "json") is None

    asyncio.run(main())


def test_units_without_changes_move_the_cursor() -> None:
    log, tail, _ = _feed()

    async def main() -> None:
        await tail.after(Cursor(0x1000), log.head(), "json")
        log.append([StoredTransaction(0, 0x1800, 0x1808, 0, None, 0, b""), txn(0x2000, 1),
                    StoredTransaction(0, 0x2800, 0x2808, 0, None, 0, b"")])
        part = await tail.after(Cursor(0x1000), log.head(), "json")
        assert part is not None and [e.commit_lsn for e in part.entries] == [0x2000]
        assert part.next == Cursor(0x2800)

    asyncio.run(main())


def test_eviction_keeps_the_range_contiguous() -> None:
    log, tail, _ = _feed(max_entries=2)

    async def main() -> None:
        await tail.after(Cursor(0x1000), log.head(), "json")
        log.append([txn(0x2000, 1), txn(0x3000, 1), txn(0x4000, 1)])
        # Only the newest two are kept: a reader at 0x1000 is now below the tail.
        assert await tail.after(Cursor(0x1000), log.head(), "json") is None
        assert tail.covered == (0x2000, 0x4000)
        part = await tail.after(Cursor(0x2000), log.head(), "json")
        assert part is not None and [e.commit_lsn for e in part.entries] == [0x3000, 0x4000]

    asyncio.run(main())


def test_a_transaction_larger_than_a_fill_is_left_to_the_readers_paging() -> None:
    log, tail, _ = _feed(fill_changes=5)

    async def main() -> None:
        await tail.after(Cursor(0x1000), log.head(), "json")
        log.append([txn(0x2000, 8), txn(0x3000, 2)])
        assert await tail.after(Cursor(0x1000), log.head(), "json") is None
        # The tail starts again after the large transaction, and serves what follows.
        part = await tail.after(Cursor(0x2000), log.head(), "json")
        assert part is not None and [e.commit_lsn for e in part.entries] == [0x3000]

    asyncio.run(main())


def test_concurrent_readers_share_one_fill() -> None:
    log, tail, _ = _feed()
    calls = []
    read = tail._read

    def counting(after: Cursor, *, block: bool, **kw: object) -> object:
        calls.append(after)
        return read(after, block=block, **kw)  # type: ignore[arg-type]

    tail._read = counting  # type: ignore[method-assign,assignment]

    async def main() -> None:
        await tail.after(Cursor(0x1000), log.head(), "json")
        log.append([txn(0x2000, 2), txn(0x3000, 2)])
        parts = await asyncio.gather(*(tail.after(Cursor(0x1000), log.head(), "json") for _ in range(20)))
        assert all(p is not None and p.next == Cursor(0x3000) for p in parts)

    asyncio.run(main())
    assert calls == [Cursor(0x1000)]  # one fill for all twenty


def test_a_reader_past_the_top_fills_the_tail_forward_and_others_keep_their_coverage() -> None:
    log, tail, _ = _feed()

    async def main() -> None:
        await tail.after(Cursor(0x1000), log.head(), "json")
        log.append([txn(0x2000, 1), txn(0x3000, 1)])
        # A reader that paged the log to 0x3000 itself, while the tail still ends at 0x1000.
        part = await tail.after(Cursor(0x3000), log.head(), "json")
        assert part is not None and part.entries == () and part.next == Cursor(0x3000)
        assert tail.covered == (0x1000, 0x3000)
        behind = await tail.after(Cursor(0x1000), log.head(), "json")
        assert behind is not None and [e.commit_lsn for e in behind.entries] == [0x2000, 0x3000]

    asyncio.run(main())


def test_each_surface_is_encoded_when_a_reader_of_it_first_asks() -> None:
    log, tail, reader = _feed()

    async def main() -> None:
        await tail.after(Cursor(0x1000), log.head(), "grpc")
        log.append([txn(0x2000, 2), txn(0x3000, 1)])
        frames = await tail.after(Cursor(0x1000), log.head(), "grpc")
        assert frames is not None and len(frames.entries) == 2
        page = reader.page(Cursor(0x1000), 100)
        assert [f for e in frames.entries for f in e.frames] == Framer().frames(page.transactions, page.next)
        # followed over gRPC alone: no JSON encoded yet
        assert all(e._events is None for e in frames.entries)
        events = await tail.after(Cursor(0x1000), log.head(), "json")
        assert events is not None and events.entries == frames.entries
        assert b",".join(e.events for e in events.entries) == \
            b",".join(ev for t in page.transactions for ev in change_events(t))
        assert all(e._txn is None for e in events.entries)  # both encoded: the decoded rows go

    asyncio.run(main())


def test_a_fill_read_in_a_worker_thread_encodes_every_surface_asked_for_so_far() -> None:
    log, tail, _ = _feed()

    async def main() -> None:
        await tail.after(Cursor(0x1000), log.head(), "grpc")
        await tail.after(Cursor(0x1000), log.head(), "json")
        # more WAL than an inline fill spans: read (and encoded) off the loop
        log.append([txn(0x1000 + INLINE_WAL_BYTES + 0x1000, 2)])
        part = await tail.after(Cursor(0x1000), log.head(), "grpc")
        assert part is not None and len(part.entries) == 1
        entry = part.entries[0]
        assert entry._frames is not None and entry._events is not None

    asyncio.run(main())
