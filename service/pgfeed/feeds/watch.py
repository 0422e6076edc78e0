"""One log line per feed state change (``running -> paused``, ``starting -> failed`` with its
reason), whoever made it: the captures, the supervisor, an admin call. It watches the feeds'
status from outside, so no capture code needs to know about logging; a flap shorter than one
interval can be missed, but reconnects are logged by the capture itself, with their reason.

It also runs the slot check (issue 26): every SLOT_CHECK_SECONDS the supervisor probes each
feed's slot, paused ones included, so a slot dropped or invalidated is reported within seconds
(``failed``, an ERROR line saying changes were lost) even when no capture is running to notice.
At the same pace it lists the partitions of the feeds' published tables (issue 28.5): one
attached with rows is backfilled (``Supervisor.check_partitions``)."""

from __future__ import annotations

import asyncio
import logging

from pgfeed.errors import PgfeedError
from pgfeed.feeds.supervisor import Supervisor

__all__ = ["StateWatcher"]

log = logging.getLogger("pgfeed.feeds")

SLOT_CHECK_SECONDS = 3.0


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
            extra: dict[str, object] = {"feed": name, "event": "feed_state", "state": state,
                                        "previous": before}
            lost = state == "failed" and self._lost(name)
            if lost:
                extra["reason"] = last_error or ""
                extra["slot_lost"] = True
                log.error("feed %s: %s -> %s: %s", name, before or "new", state, last_error,
                          extra=extra)
            elif state in ("failed", "starting", "reconnecting") and last_error:
                extra["reason"] = last_error
                log.warning("feed %s: %s -> %s: %s", name, before or "new", state, last_error,
                            extra=extra)
            else:
                log.info("feed %s: %s -> %s", name, before or "new", state, extra=extra)
        for gone in set(self._states) - names:
            del self._states[gone]
            log.info("feed %s: removed", gone, extra={"feed": gone, "event": "feed_state",
                                                      "state": "deleted"})

    def _lost(self, name: str) -> bool:
        try:
            return self.supervisor.slot_lost(name) is not None
        except PgfeedError:
            return False

    async def run(self, interval: float = 0.25, slot_check: float = SLOT_CHECK_SECONDS) -> None:
        slots = asyncio.create_task(self._check_slots(slot_check))
        # its own task: a check waiting on the source never delays the slot check
        parts = asyncio.create_task(self._check_partitions(slot_check))
        try:
            while True:
                await asyncio.to_thread(self.check)
                await asyncio.sleep(interval)
        finally:
            slots.cancel()
            parts.cancel()

    async def _check_slots(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(self.supervisor.check_slots)
            except Exception:  # a check that failed is tried again: keep watching
                log.exception("slot check failed")

    async def _check_partitions(self, interval: float) -> None:
        """Partitions attached with rows (issue 28.5), at the slot check's pace."""
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(self.supervisor.check_partitions)
            except Exception:  # tried again at the next check
                log.exception("partition check failed")
