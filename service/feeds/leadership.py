"""Leadership: which feeds this replica captures, decided by leases in a shared store.

A thread ticks every TICK_SECONDS (sooner when kicked by a store notification): it heartbeats
the replica, brings the supervisor's feeds in line with the catalogue when it changed, renews the
leases it holds (a lease it lost stops that capture at once), and takes expired or free leases of
running feeds while it leads fewer than its fair share, so feeds spread over the live replicas;
one leading more than its share gives a lease up (every REBALANCE_SECONDS at most) while another
live replica leads less.

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
from typing import Protocol

from service.changelog.base import ChangeLogError
from service.errors import PgfeedError
from service.feeds.model import Leader, ReplicaInfo

__all__ = ["LEASE_SECONDS", "Leadership", "LeaseStore", "Led", "SupervisorEvents", "fair_share",
           "replica_infos"]

log = logging.getLogger("pgfeed.leadership")

LEASE_SECONDS = 5.0
TICK_SECONDS = 1.0
SYNC_SECONDS = 5.0  # the catalogue is re-read at least this often (notifications may be lost)
REPLICA_ALIVE_SECONDS = 3 * LEASE_SECONDS  # a replica whose heartbeat is older counts as gone
REBALANCE_SECONDS = 10.0


class Lease(Protocol):
    """A feed's lease as the shared store reads it (``pgstore.leases.Lease``)."""

    @property
    def holder(self) -> str: ...
    @property
    def epoch(self) -> int: ...
    @property
    def live(self) -> bool: ...


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
    def renew(self, feed: str, epoch: int, ttl: float) -> Lease | None: ...
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


def fair_share(feeds: int, live_replicas: int) -> int:
    """How many feeds one replica should lead: leases spread the feeds over the live replicas."""
    return math.ceil(feeds / max(1, live_replicas))


class Leadership:
    def __init__(self, supervisor: Led, store: LeaseStore, *, lease_seconds: float = LEASE_SECONDS,
                 tick_seconds: float = TICK_SECONDS) -> None:
        self._supervisor = supervisor
        self._store = store
        self.lease_seconds = lease_seconds
        self.tick_seconds = tick_seconds
        self._held: dict[str, int] = {}  # feed -> epoch of the lease this replica holds
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

    def drop(self, name: str) -> None:
        """Stop capturing ``name`` here and release its lease (pause, delete, shutdown)."""
        with self._lock:
            epoch = self._held.pop(name, None)
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
                if store.renew(name, epoch, self.lease_seconds) is None:
                    del self._held[name]
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
                if name in self._held or len(self._held) >= share:
                    continue
                lease = current.get(name)
                if lease is not None and lease.live and lease.holder != store.replica_id:
                    continue
                got = store.acquire(name, self.lease_seconds)
                if got is not None:
                    self._held[name] = got.epoch
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


def replica_infos(store: LeaseStore, leaders: dict[str, Leader]) -> list[ReplicaInfo]:
    """Every replica that has used the store, alive while its heartbeat is recent, with the
    feeds it leads."""
    return [ReplicaInfo(r.id, r.started_at.timestamp(), r.heartbeat_at.timestamp(), r.age_seconds,
                        r.age_seconds < REPLICA_ALIVE_SECONDS,
                        sorted(n for n, lead in leaders.items() if lead.replica == r.id))
            for r in store.replicas()]
