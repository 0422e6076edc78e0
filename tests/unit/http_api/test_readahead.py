"""The server's read-ahead (``http_api/readahead.py``): a page read ahead answers the request for
it, and one with a smaller limit of at least half answers a request with a larger limit (a
reader doubling its page size, as the Spark connector's first pages do, is not read twice);
never a larger limit's page for a smaller request, nor a page of less than half."""

from __future__ import annotations

import asyncio
import threading

from pgfeed.feeds.reader import Page
from pgfeed.http_api.encode import Encoded
from pgfeed.http_api.readahead import PageKey, ReadAhead
from pgfeed_client import Cursor

PARAMS = ("reader", 0, Cursor(0x10), None, None, None, "arrow", None)


def _page(limit: int) -> Encoded:
    return Encoded(memoryview(b"%d" % limit), "application/vnd.apache.arrow.stream",
                   Page([], Cursor(0x20), 0x30, True), limit)


def test_a_page_read_ahead_at_a_smaller_limit_answers_up_to_twice_that() -> None:
    reads: list[int] = []
    lock = threading.Lock()

    def read(limit: int) -> Encoded:
        with lock:
            reads.append(limit)
        return _page(limit)

    async def main() -> list[int]:
        ahead = ReadAhead()
        await ahead.start(PageKey(PARAMS, 100), lambda: read(100))
        answers = []
        for limit in (100, 200, 150, 201, 50):
            out = await ahead.read(PageKey(PARAMS, limit), lambda limit=limit: read(limit))
            answers.append(out.change_count)
        other = await ahead.read(PageKey((*PARAMS[:2], Cursor(0x11), *PARAMS[3:]), 200),
                                 lambda: read(7))
        answers.append(other.change_count)
        return answers

    answers = asyncio.run(main())
    # 100, 200 (twice 100) and 150 take the page read ahead at 100; 201 (more than twice) is
    # read at its own limit; 50 never takes a larger limit's page; another position is its own
    assert answers == [100, 100, 100, 201, 50, 7]
    assert reads == [100, 201, 50, 7]
