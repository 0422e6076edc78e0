"""Fetching a partition's next pages while Spark converts the current one.

A page is a request: without read-ahead the server encodes and sends page k+1 only after the
executor has handed page k to Spark, so the two sides take turns. A background thread that stays
``depth`` pages ahead lets them overlap (the memory cost is ``depth`` pages a partition).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar, cast

__all__ = ["read_ahead"]

T = TypeVar("T")

_END = object()


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def read_ahead(items: Iterator[T], depth: int) -> Iterator[T]:
    """``items`` in order, produced up to ``depth`` ahead in a background thread; an error in
    the producer is raised here, at the item it stopped at. Closing the result early stops the
    producer after the item it is on (``depth`` 0: ``items`` unchanged)."""
    if depth <= 0:
        yield from items
        return
    buffer: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                buffer.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put(_Failed(exc))
            return
        put(_END)

    thread = threading.Thread(target=produce, name="pgfeed-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = buffer.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.exc
            yield cast(T, item)  # everything else came from ``items``
    finally:
        stop.set()
        thread.join(timeout=5)
