"""Acknowledging a streaming query's progress to a named consumer, off the trigger's path.

An acknowledgement only lets the server's retention move on; exactly-once rests on Spark's
checkpoint. So it need not hold up a micro-batch: cursors are handed to one background thread
that sends the newest one it has, and ``close`` waits (bounded) for the last one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pgfeed_client import Cursor, FeedClient, parse_cursor

__all__ = ["Acknowledger"]

log = logging.getLogger("pgfeed_spark")


def _key(cursor: str) -> Cursor:
    parsed = parse_cursor(cursor)
    assert parsed != "latest"
    return parsed


class Acknowledger:
    """``submit`` never blocks; cursors only move forward; a failed acknowledgement is logged
    and superseded by the next one (the query does not fail over retention). ``client`` is
    called in the background thread for each acknowledgement."""

    def __init__(self, client: Callable[[], FeedClient], feed: str, consumer: str) -> None:
        self._client = client  # the caller's (httpx clients are thread-safe); not closed here
        self._feed, self._consumer = feed, consumer
        self._cond = threading.Condition()
        self._pending: str | None = None  # newest cursor not yet sent
        self._busy = False
        self._inflight: str | None = None  # the cursor being sent
        self._closed = False
        self.acked: str | None = None  # the newest cursor the server accepted
        self._thread: threading.Thread | None = None

    def submit(self, cursor: str) -> None:
        if _key(cursor) == Cursor(0):
            return
        with self._cond:
            known = [c for c in (self._pending, self._inflight, self.acked) if c is not None]
            if self._closed or any(_key(cursor) <= _key(c) for c in known):
                return
            self._pending = cursor
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pgfeed-ack", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything submitted has been sent (or failed); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout)

    def close(self, timeout: float = 10.0) -> None:
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                cursor, self._pending, self._busy = self._pending, None, True
                self._inflight = cursor
            try:
                self._client().ack(self._feed, self._consumer, cursor)
                accepted = True
            except Exception as exc:  # noqa: BLE001 - logged; the next cursor supersedes it
                accepted = False
                log.warning("pgfeed: could not acknowledge %s for consumer %s: %s",
                            cursor, self._consumer, exc)
            with self._cond:
                if accepted and (self.acked is None or _key(cursor) > _key(self.acked)):
                    self.acked = cursor
                self._busy, self._inflight = False, None
                self._cond.notify_all()
