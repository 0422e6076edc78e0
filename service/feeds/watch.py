"""One log line per feed state change (``running -> paused``, ``starting -> failed`` with its
reason), whoever made it: the captures, the supervisor, an admin call. It watches the feeds'
status from outside, so no capture code needs to know about logging; a flap shorter than one
interval can be missed, but reconnects are logged by the capture itself, with their reason."""

from __future__ import annotations

import asyncio
import logging

from pgfeed.errors import PgfeedError
from pgfeed.feeds.supervisor import Supervisor

__all__ = ["StateWatcher"]

log = logging.getLogger("pgfeed.feeds")


class StateWatcher:
    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self._states: dict[str, str] = {}

    def check(self) -> None:
        """Log what changed since the last check (from memory; the supervisor's lock may wait)."""
        names = set(self.supervisor.names())
        for name in sorted(names):
            try:
                state, last_error = self.supervisor.state(name)
            except PgfeedError:  # deleted meanwhile
                continue
            before = self._states.get(name)
            if before == state:
                continue
            self._states[name] = state
            extra = {"feed": name, "event": "feed_state", "state": state, "previous": before}
            if state in ("failed", "starting") and last_error:
                extra["reason"] = last_error
                log.warning("feed %s: %s -> %s: %s", name, before or "new", state, last_error,
                            extra=extra)
            else:
                log.info("feed %s: %s -> %s", name, before or "new", state, extra=extra)
        for gone in set(self._states) - names:
            del self._states[gone]
            log.info("feed %s: removed", gone, extra={"feed": gone, "event": "feed_state",
                                                      "state": "deleted"})

    async def run(self, interval: float = 0.25) -> None:
        while True:
            await asyncio.to_thread(self.check)
            await asyncio.sleep(interval)
