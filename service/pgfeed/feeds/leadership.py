"""Leadership: which feeds this replica captures, decided by leases in a shared store.

A thread ticks every TICK_SECONDS (sooner when kicked by a store notification): it heartbeats
the replica, brings the supervisor's feeds in line with the catalogue when it changed, renews the
leases it holds (a lease it lost stops that capture at once), and takes expired or free leases of
running feeds while it leads fewer than its fair share, so feeds spread over the live replicas;
one leading more than its share gives a lease up (every REBALANCE_SECONDS at most) while another
live replica leads less.

A capture that fails here (state ``failed``) gives its lease up so another replica can try, and
this replica does not take that feed again for FAILED_BACKOFF seconds (doubling at each failure
in a row, up to FAILED_BACKOFF_MAX): a feed that fails everywhere is retried slowly instead of
bouncing between replicas. The leader's capture counters go to the store at each renewal, so
every replica's status shows them (``merge_report``).

Timing (a leader SIGKILLed): its lease expires at most LEASE_SECONDS after its last renewal, the
next tick of another replica (<= TICK_SECONDS) takes it, ends the old walsender and starts
streaming from the confirmed position: ~LEASE_SECONDS + TICK_SECONDS + a connection.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from pgfeed.changelog.base import ChangeLogError
from pgfeed.errors import PgfeedError
from pgfeed.feeds.model import FeedStatus, Leader, ReplicaInfo

__all__ = ["LEASE_SECONDS", "Leadership", "LeaseStore", "Led", "SupervisorEvents", "fair_share",
           "merge_report", "replica_infos"]

log = logging.getLogger("pgfeed.leadership")

LEASE_SECONDS = 5.0
TICK_SECONDS = 1.0
SYNC_SECONDS = 5.0  # the catalogue is re-read at least this often (notifications may be lost)
REPLICA_ALIVE_SECONDS = 3 * LEASE_SECONDS  # a replica whose heartbeat is older counts as gone
REBALANCE_SECONDS = 10.0
FAILED_BACKOFF = 10.0  # seconds a replica leaves a feed alone after its capture failed there
FAILED_BACKOFF_MAX = 600.0
HEALTHY_SECONDS = 60.0  # a lease held this long without a failure resets the backoff


class Lease(Protocol):
    """A feed's lease as the shared store reads it (``pgstore.leases.Lease``)."""

    @property
    def holder(self) -> str: ...
    @property
    def epoch(self) -> int: ...
    @property
    def live(self) -> bool: ...
    @property
    def stats(self) -> dict[str, Any] | None: ...


class ReplicaBeat(Protocol):
    """A replica's heartbeat as the shared store reads it (``pgstore.leases.ReplicaBeat``)."""

    @property
    def id(self) -> str: ...
    @property
    def started_at(self) -> datetime: ...
    @property
    def heartbeat_at(self) -> datetime: ...
    @property
    def age_seconds(self) -> float: ...


class LeaseStore(Protocol):
    """What leadership asks of a shared store (``pgstore.store.PgStore``): leases, heartbeats."""

    @property
    def replica_id(self) -> str: ...
    def heartbeat(self) -> None: ...
    def acquire(self, feed: str, ttl: float) -> Lease | None: ...
    def renew(self, feed: str, epoch: int, ttl: float,
              stats: dict[str, Any] | None = None) -> Lease | None: ...
    def release(self, feed: str, epoch: int) -> None: ...
    def leases(self) -> Mapping[str, Lease]: ...
    def replicas(self) -> Sequence[ReplicaBeat]: ...


class Led(Protocol):
    """What leadership asks of the supervisor whose feeds it leads (``feeds.supervisor``)."""

    @property
    def leadership(self) -> Leadership | None: ...
    def sync(self) -> None: ...
    def feed_flags(self) -> list[tuple[str, bool]]: ...
    def lead(self, name: str, epoch: int) -> None: ...
    def stand_down(self, name: str) -> None: ...
    def ensure_capture(self, name: str) -> None: ...
    def wake(self, name: str, head: int) -> None: ...
    def failed(self, name: str) -> bool: ...
    def capture_report(self, name: str) -> dict[str, Any] | None: ...
    def backfills_changed(self, name: str) -> None: ...


def fair_share(feeds: int, live_replicas: int) -> int:
    """How many feeds one replica should lead: leases spread the feeds over the live replicas."""
    return math.ceil(feeds / max(1, live_replicas))


class Leadership:
    def __init__(self, supervisor: Led, store: LeaseStore, *, lease_seconds: float = LEASE_SECONDS,
                 tick_seconds: float = TICK_SECONDS, failed_backoff: float = FAILED_BACKOFF) -> None:
        self._supervisor = supervisor
        self._store = store
        self.lease_seconds = lease_seconds
        self.tick_seconds = tick_seconds
        self._held: dict[str, int] = {}  # feed -> epoch of the lease this replica holds
        self._taken: dict[str, float] = {}  # feed -> when this replica took its lease (monotonic)
        self.failed_backoff = failed_backoff
        self._failures: dict[str, int] = {}  # feed -> failures here in a row
        self._benched: dict[str, float] = {}  # feed -> monotonic time before which it is not taken
        self._lock = threading.RLock()  # ticks and drops (pause, delete) one at a time
        self._kick = threading.Event()
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._last_sync = 0.0
        self._last_rebalance = time.monotonic()  # not in the first seconds: replicas still arrive
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pgfeed-leadership", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop ticking, stop captures and give up every lease (others take over at once)."""
        self._stop.set()
        self._kick.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            for name in list(self._held):
                self.drop(name)

    def kick(self, catalogue: bool = False) -> None:
        """Tick now (a lease changed hands; with ``catalogue``, the feeds changed)."""
        if catalogue:
            self._dirty.set()
        self._kick.set()

    def epoch(self, name: str) -> int | None:
        return self._held.get(name)

    def held(self) -> dict[str, int]:
        return dict(self._held)

    def benched(self, name: str) -> float:
        """Seconds before this replica may lead ``name`` again after its capture failed here."""
        return max(0.0, self._benched.get(name, 0.0) - time.monotonic())

    def forgive(self, name: str) -> None:
        """An admin resumed the feed: take it again at once, failures forgotten."""
        self._benched.pop(name, None)
        self._failures.pop(name, None)

    def _failed(self, name: str) -> None:
        """The capture failed here: report it, give the lease up, stay away a while."""
        failures = self._failures.get(name, 0) + 1
        self._failures[name] = failures
        delay = min(FAILED_BACKOFF_MAX, self.failed_backoff * 2 ** (failures - 1))
        self._benched[name] = time.monotonic() + delay
        epoch = self._held.get(name)
        if epoch is not None:
            self._store.renew(name, epoch, self.lease_seconds, self._supervisor.capture_report(name))
        log.warning("feed %s: capture failed here; lease given up for another replica, not taken "
                    "again here for %.0f s", name, delay,
                    extra={"feed": name, "event": "lease_given_up", "delay": delay})
        self.drop(name)

    def drop(self, name: str) -> None:
        """Stop capturing ``name`` here and release its lease (pause, delete, shutdown)."""
        with self._lock:
            epoch = self._held.pop(name, None)
            self._taken.pop(name, None)
            self._supervisor.stand_down(name)
            if epoch is not None:
                try:
                    self._store.release(name, epoch)
                except ChangeLogError as exc:  # it expires on its own
                    log.warning("feed %s: could not release the lease: %s", name, exc)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except PgfeedError as exc:
                log.warning("leadership tick failed: %s", exc)
            except Exception:
                log.exception("leadership tick failed")
            self._kick.wait(self.tick_seconds)
            self._kick.clear()

    def tick(self) -> None:
        store, supervisor = self._store, self._supervisor
        store.heartbeat()
        if self._dirty.is_set() or time.monotonic() - self._last_sync >= SYNC_SECONDS:
            self._dirty.clear()
            self._last_sync = time.monotonic()
            supervisor.sync()
        with self._lock:
            if self._stop.is_set():
                return
            active = [name for name, paused in supervisor.feed_flags() if not paused]
            for name in [n for n in self._held if n not in active]:
                self.drop(name)
            for name, epoch in list(self._held.items()):
                if supervisor.failed(name):
                    self._failed(name)
                    continue
                if time.monotonic() - self._taken.get(name, time.monotonic()) > HEALTHY_SECONDS:
                    self._failures.pop(name, None)
                if store.renew(name, epoch, self.lease_seconds, supervisor.capture_report(name)) is None:
                    del self._held[name]
                    self._taken.pop(name, None)
                    log.warning("feed %s: lease (epoch %d) taken over by another replica; standing by",
                                name, epoch)
                    supervisor.stand_down(name)
                else:
                    supervisor.ensure_capture(name)
            current = store.leases()
            beats = store.replicas()
            live = sum(1 for r in beats if r.age_seconds < REPLICA_ALIVE_SECONDS)
            share = fair_share(len(active), live)
            for name in active:
                if name in self._held or len(self._held) >= share or self.benched(name):
                    continue
                lease = current.get(name)
                if lease is not None and lease.live and lease.holder != store.replica_id:
                    continue
                got = store.acquire(name, self.lease_seconds)
                if got is not None:
                    self._held[name] = got.epoch
                    self._taken[name] = time.monotonic()
                    log.info("feed %s: this replica leads it now (epoch %d)", name, got.epoch)
                    supervisor.lead(name, got.epoch)
            self._rebalance(current, {r.id for r in beats if r.age_seconds < REPLICA_ALIVE_SECONDS}, share)

    def _rebalance(self, current: Mapping[str, Lease], live: set[str], share: int) -> None:
        """Give one lease up (at most every REBALANCE_SECONDS) while this replica leads more than
        its share and another live replica leads less: feeds spread over replicas that joined
        late. The other replica takes it at its next tick (the release is notified)."""
        if len(self._held) <= share or time.monotonic() - self._last_rebalance < REBALANCE_SECONDS:
            return
        counts = {replica: 0 for replica in live if replica != self._store.replica_id}
        for lease in current.values():
            if lease.live and lease.holder in counts:
                counts[lease.holder] += 1
        if counts and min(counts.values()) < share:
            self._last_rebalance = time.monotonic()
            name = max(self._held, key=lambda n: self._held[n])  # the most recently taken
            log.info("feed %s: lease given up to spread feeds over replicas", name)
            self.drop(name)


class SupervisorEvents:
    """What a shared store's listener reports, turned into this supervisor's actions."""

    def __init__(self, supervisor: Led) -> None:
        self._supervisor = supervisor

    def head(self, feed: str, head: int) -> None:
        """Another replica (or this one) stored up to ``head``: wake this replica's readers. No
        lock: a dict read, so a supervisor busy stopping a capture never delays readers."""
        self._supervisor.wake(feed, head)

    def catalogue(self, feed: str) -> None:
        leadership = self._supervisor.leadership
        if leadership is not None:
            leadership.kick(catalogue=True)
        else:
            self._supervisor.sync()

    def lease(self, feed: str) -> None:
        leadership = self._supervisor.leadership
        if leadership is not None:
            leadership.kick()

    def backfill(self, feed: str) -> None:
        """A backfill of ``feed`` was started or cancelled (perhaps on another replica)."""
        self._supervisor.backfills_changed(feed)


def merge_report(status: FeedStatus, report: dict[str, Any] | None, *, live: bool,
                 paused: bool) -> float | None:
    """Fill the status of a feed this replica does not capture with its leader's counters, as
    last reported to the store (``CaptureStats.report``; ``counters_from``/``counters_at`` say
    whose, and when). The state is the leader's while its lease is live; a capture that failed
    and gave its lease up shows ``failed`` until another replica takes it. Returns the newest
    commit's time (Unix s)."""
    if not paused and live:
        status.state = "running"  # captured by the replica named in ``leader``
    if report is None:
        return None
    status.counters_from, status.counters_at = report.get("replica"), report.get("at")
    status.changes_captured = int(report.get("changes_captured") or 0)
    status.bytes_captured = int(report.get("bytes_captured") or 0)
    status.backfill_rows_captured = int(report.get("backfill_rows") or 0)
    status.proto_version = report.get("proto_version")
    status.streaming_in_use = report.get("streaming_in_use")
    fresh = live and time.time() - float(report.get("at") or 0) < REPLICA_ALIVE_SECONDS
    status.changes_per_second = float(report.get("changes_per_second") or 0.0) if fresh else 0.0
    if not paused and (live or report.get("state") == "failed"):
        state = report.get("state")
        if state in ("starting", "running", "reconnecting", "failed"):
            status.state = state
        status.last_error = report.get("last_error")
        if state == "reconnecting":
            status.next_attempt_at = report.get("next_attempt")
    last: float | None = report.get("last_commit_unix")
    return last


def replica_infos(store: LeaseStore, leaders: dict[str, Leader]) -> list[ReplicaInfo]:
    """Every replica that has used the store, alive while its heartbeat is recent, with the
    feeds it leads."""
    return [ReplicaInfo(r.id, r.started_at.timestamp(), r.heartbeat_at.timestamp(), r.age_seconds,
                        r.age_seconds < REPLICA_ALIVE_SECONDS,
                        sorted(n for n, lead in leaders.items() if lead.replica == r.id))
            for r in store.replicas()]
