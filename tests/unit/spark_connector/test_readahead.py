"""read_ahead: the pages of a partition fetched in the background, in order, errors kept."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from pgfeed_spark._readahead import read_ahead


def _counting(n: int, produced: list[int]) -> Iterator[int]:
    for i in range(n):
        produced.append(i)
        yield i


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_items_come_in_order(depth: int) -> None:
    assert list(read_ahead(iter(range(50)), depth)) == list(range(50))


def test_the_producer_runs_ahead_by_depth_only() -> None:
    produced: list[int] = []
    items = read_ahead(_counting(100, produced), 2)
    assert next(items) == 0
    time.sleep(0.3)
    # one handed out, two queued, and one more held by the producer waiting for room
    assert len(produced) == 4
    items.close()


def test_a_producer_error_is_raised_at_the_item_it_stopped_at() -> None:
    def failing() -> Iterator[int]:
        yield 1
        yield 2
        raise ConnectionError("server went away")

    got = []
    with pytest.raises(ConnectionError, match="went away"):
        for item in read_ahead(failing(), 1):
            got.append(item)
    assert got == [1, 2]


def test_closing_early_stops_the_producer() -> None:
    produced: list[int] = []
    items = read_ahead(_counting(10_000, produced), 1)
    assert [next(items), next(items)] == [0, 1]
    items.close()
    time.sleep(0.3)
    assert len(produced) < 10
    assert not [t for t in threading.enumerate() if t.name == "pgfeed-read-ahead"]
