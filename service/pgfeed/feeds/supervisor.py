"""Feed supervisor: the catalogue's feeds, one capture thread each, their logs, status and lifecycle."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from pgfeed.backfill.manager import BackfillManager
from pgfeed.backfill.window import WindowTracker
from pgfeed.changelog.backfills import DEFAULT_CHUNK_ROWS, DEFAULT_PARALLEL
from pgfeed.changelog.base import ChangeLog, ChangeLogError, LeaseLost
from pgfeed.decoding.relations import RelationCatalog
from pgfeed.dsn import mask_dsn
from pgfeed.errors import (
    BackfillError,
    FeedExists,
    FeedNotFound,
    FeedStateConflict,
    SourceError,
    SourceRefused,
)
from pgfeed.feeds import partitions, source
from pgfeed.feeds import resync as resyncing
from pgfeed.feeds.leadership import Leadership, SupervisorEvents, merge_report, replica_infos
from pgfeed.feeds.model import (
    ADOPTED_TABLES,
    NAME_RE,
    FeedSpec,
    FeedState,
    FeedStatus,
    Gap,
    Leader,
    ReplicaInfo,
    SlotLost,
    SlotRisk,
)
from pgfeed.feeds.notify import HeadNotifier
from pgfeed.feeds.reader import FeedReader
from pgfeed.feeds.serving import ServedFeed
from pgfeed.feeds.store import FeedStore, LocalStore
from pgfeed.feeds.tail import SharedTail
from pgfeed.feeds.toastindex import ToastIndex
from pgfeed.replication.capture import Capture, CaptureStats
from pgfeed.replication.lost import LostSlot, describe
from pgfeed.replication.preflight import Finding
from pgfeed.replication.sequences import SequenceSnapshot
from pgfeed.replication.slots import PublishedTable
from pgfeed_client._cursor import format_lsn

log = logging.getLogger("pgfeed.supervisor")

_T = TypeVar("_T")
_S = TypeVar("_S")


@dataclass
class _Feed:
    spec: FeedSpec
    changelog: ChangeLog
    notifier: HeadNotifier
    stats: CaptureStats
    paused: bool = False
    catalog: RelationCatalog = field(default_factory=RelationCatalog)
    catalog_lsn: int = 0
    catalog_lock: threading.RLock = field(default_factory=threading.RLock)
    thread: threading.Thread | None = None
    reader: FeedReader | None = None
    tail: SharedTail | None = None
    served: ServedFeed | None = None
    toast_index: ToastIndex | None = None
    stop_event: threading.Event = field(default_factory=threading.Event)
    tracker: WindowTracker = field(default_factory=WindowTracker)
    backfills: BackfillManager | None = None
    generation: int = 0  # a resync moves it: a slot check begun before it reports nothing


@dataclass(frozen=True, slots=True)
class ResyncResult:
    """What ``Supervisor.resync`` did (the API's answer)."""

    feed: str
    slot: str
    dropped_slot: bool  # the dead slot still existed and was dropped
    gap: Gap
    tables: tuple[str, ...]  # truncated by the marker and backfilled
    backfill: str | None  # the backfill's id; None when none could start (``backfill_error``)
    backfill_error: str | None


def lost_message(spec: FeedSpec) -> str | None:
    """``last_error`` of a feed whose slot is lost (None otherwise)."""
    lost = spec.slot_lost
    if lost is None:
        return None
    return describe(LostSlot(lost.slot or spec.slot_name, lost.reason), format_lsn(lost.last_lsn),
                    spec.name)


class Supervisor:
    """Owns every feed of one service process. Thread-safe; API handlers call it directly.

    Errors: FeedNotFound (unknown name), FeedExists (create twice), SourceError (the source refused).
    With ``capture=False`` feeds are served from their logs but nothing is captured (read replicas of
    a copied data dir, tests of the serving layer).

    ``store`` (default: the data dir) keeps the catalogue and the logs. A shared store
    (``pgfeed.pgstore``) is used by several replicas: every replica serves every feed, the
    holder of a feed's lease captures it (``leadership``), and changes any replica makes to the
    catalogue reach the others through the store.
    """

    def __init__(self, data_dir: Path | None = None, *, changelog_kind: str = "sqlite",
                 capture: bool = True, store: FeedStore | None = None,
                 replica_id: str | None = None) -> None:
        if store is None:
            if data_dir is None:
                raise ValueError("a supervisor needs a data dir or a store")
            store = LocalStore(Path(data_dir), changelog_kind)
        self._store = store
        self.replica_id = replica_id or socket.gethostname()
        self._capture = capture
        self._lock = threading.RLock()
        self._feeds: dict[str, _Feed] = {}
        self._started = False
        self._started_at = time.time()
        self._leadership = Leadership(self, store) if store.shared and capture else None  # type: ignore[arg-type]

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Load the catalogue and start capturing every feed that is not paused (with a shared
        store: the feeds whose lease this replica gets)."""
        with self._lock:
            for spec, paused in self._store.feeds():
                if spec.name not in self._feeds:
                    self._feeds[spec.name] = self._open(spec, paused)
                if not paused and not self._store.shared:
                    self._start_capture(self._feeds[spec.name])
            self._started = True
        if self._store.shared:
            self._store.listen(SupervisorEvents(self))  # type: ignore[attr-defined]
        if self._leadership is not None:
            self._leadership.start()

    def stop(self) -> None:
        """Stop every capture (final feedback sent, connections closed; leases released) and close
        the logs and the store."""
        if self._leadership is not None:
            self._leadership.stop()
        with self._lock:
            feeds = list(self._feeds.values())
            for feed in feeds:
                feed.stop_event.set()
        for feed in feeds:
            self._join(feed)
            feed.changelog.close()
            _close_index(feed)
        with self._lock:
            self._feeds.clear()
            self._started = False
        self._store.close()

    @property
    def ready(self) -> bool:
        return self._started

    def _open(self, spec: FeedSpec, paused: bool) -> _Feed:
        changelog = self._store.open_log(spec.name)
        stats = CaptureStats(state="paused" if paused else "starting")
        if spec.slot_lost is not None:  # found before a restart: still failed
            stats.state, stats.last_error = "failed", lost_message(spec)
        feed = _Feed(spec, changelog, HeadNotifier(changelog.head()), stats, paused)
        feed.backfills = BackfillManager(lambda: source.backfill_source(feed.spec), changelog,
                                         feed.tracker)
        return feed

    def _start_capture(self, feed: _Feed) -> None:
        if not self._capture or (feed.thread and feed.thread.is_alive()):
            return
        if feed.spec.slot_lost is not None:  # never captured again without a resync
            feed.stats.state, feed.stats.last_error = "failed", lost_message(feed.spec)
            return
        feed.stop_event = threading.Event()
        feed.stats.state = "starting"
        generation = feed.generation
        capture = Capture(source.capture_config(feed.spec), feed.changelog, feed.stats,
                          spill_dir=self._store.spill_dir(feed.spec.name),
                          on_durable=feed.notifier.publish,
                          before_start=(lambda: self._take_slot(feed)) if self._store.shared else None,
                          hook=feed.tracker,
                          on_lost=lambda lost: self._mark_lost(feed, lost, generation))
        feed.thread = threading.Thread(target=capture.run, args=(feed.stop_event,),
                                       name=f"capture-{feed.spec.name}", daemon=True)
        feed.thread.start()
        assert feed.backfills is not None
        feed.backfills.start_workers()

    @staticmethod
    def _join(feed: _Feed) -> None:
        if feed.backfills is not None:  # before capture: a worker waits on capture's verdicts
            feed.backfills.stop_workers()
        feed.stop_event.set()
        if feed.thread is not None:
            feed.thread.join(timeout=30)
            if feed.thread.is_alive():
                log.warning("capture of feed %s did not stop within 30 s", feed.spec.name)
            feed.thread = None

    def _get(self, name: str) -> _Feed:
        with self._lock:
            feed = self._feeds.get(name)
        if feed is None:
            raise FeedNotFound(f"feed {name!r} does not exist")
        return feed

    # -- admin -----------------------------------------------------------------------------------
    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._feeds)

    def spec(self, name: str) -> FeedSpec:
        return self._get(name).spec

    def create(self, spec: FeedSpec) -> FeedStatus:
        """Set up the source (publication, slot) and start capturing; persisted before returning."""
        if not NAME_RE.fullmatch(spec.name):
            raise ValueError(f"invalid feed name {spec.name!r}: expected lowercase letters, digits and "
                             "underscores, starting with a letter, at most 48 characters")
        if not spec.all_tables and not spec.tables and spec.publication is None:
            raise ValueError("a feed needs 'tables', 'all_tables': true, or an existing 'publication'")
        if spec.publication is not None and (spec.tables or spec.all_tables):
            raise ValueError(ADOPTED_TABLES)
        with self._lock:
            if spec.name in self._feeds or any(s.name == spec.name for s, _ in self._store.feeds()):
                raise FeedExists(f"feed {spec.name!r} already exists")
            spec = source.prepare(spec)
            try:
                self._store.add(spec)
            except Exception as exc:  # noqa: BLE001 - whatever it was, nothing may stay on the source
                raise SourceRefused(f"recording feed {spec.name!r} in the catalogue failed: {exc}"
                                    + source.undo(spec), code="catalogue_error") from None
            feed = self._open(spec, paused=False)
            self._feeds[spec.name] = feed
            if self._leadership is not None:
                self._leadership.kick()
            elif not self._store.shared:
                self._start_capture(feed)
        if spec.options.snapshot != "never":
            self._initial_backfill(feed)
        return self.status(spec.name)

    def check(self, spec: FeedSpec) -> list[Finding]:
        """What creating ``spec`` would find (``POST /v1/feeds?dry_run=true``): the source's
        preflight, plus a name the catalogue already holds. Nothing is created."""
        taken = spec.name in self._feeds or any(s.name == spec.name for s, _ in self._store.feeds())
        name = [Finding("feed_name", "error", f"feed {spec.name!r} already exists",
                        "choose another name")] if taken else []
        return name + source.check(spec)

    def _initial_backfill(self, feed: _Feed) -> None:
        """Option ``snapshot``: backfill every table of the new feed's publication. A table that
        cannot be backfilled (no key, ...) does not undo the feed (issue 28.3): the backfill
        records it ``failed`` with the reason (the feed's status lists the initial backfill) and
        reads the others; it can be retried alone once fixed. Only a backfill that cannot start
        at all (the source refuses) undoes the feed: nothing is left half made."""
        assert feed.backfills is not None
        spec = feed.spec
        try:
            tables = source.published_tables(spec)
            if tables:
                feed.backfills.start(tables, chunk_rows=DEFAULT_CHUNK_ROWS,
                                     parallel=DEFAULT_PARALLEL, initial=True, skip_refused=True)
        except (BackfillError, SourceError) as exc:
            self.delete(spec.name, force=True)
            reason = str(exc).strip()  # both scrub the DSN's password
            raise ValueError(f"feed {spec.name!r} not created: its initial snapshot (option "
                             f"snapshot) cannot run: {reason}") from None

    def sequences(self, name: str, *, emit: bool = False) -> tuple[SequenceSnapshot, int | None]:
        """The sequences of the feed's tables with the WAL position they cover (for a cutover to
        a mirror); with ``emit``, also as a message in the feed. SourceError when the source
        cannot answer; ValueError when ``emit`` asks a feed that does not capture messages."""
        spec = self._get(name).spec
        if emit and not spec.options.messages:
            raise ValueError(f"feed {name!r} does not capture messages (option messages is off): "
                             "an emitted snapshot would never reach it")
        return source.sequences(spec, emit=emit)

    def backfills(self, name: str) -> BackfillManager:
        manager = self._get(name).backfills
        assert manager is not None
        return manager

    def delete(self, name: str, *, force: bool = False) -> None:
        """Stop the feed, drop the slot and publication pgfeed owns, and remove its log.

        A slot left on the source keeps retaining WAL until the disk fills, so when the source
        cannot drop them the feed is kept (and resumed) and SourceError says why, unless
        ``force``: then the feed goes and the slot's name is logged for the operator to drop.
        """
        was_paused = self._get(name).paused
        if self._store.shared:  # the leader, wherever it runs, stops; nobody takes over
            self._hold(name)
        with self._lock:
            feed = self._get(name)
            spec = feed.spec
            self._join(feed)
            try:
                source.drop(spec)
            except SourceError as exc:
                reason = str(exc).strip()
                if not force:
                    if self._store.shared:
                        feed.paused = was_paused
                        self._store.put(spec, paused=was_paused)
                        if self._leadership is not None:
                            self._leadership.kick()
                    elif not feed.paused:
                        self._start_capture(feed)
                    raise SourceError(
                        f"feed {name!r} was not deleted: its slot {spec.slot_name!r} and publication "
                        f"{spec.publication_name!r} could not be dropped on the source ({reason}); a "
                        "slot left behind retains WAL. Retry when the source is reachable, or delete "
                        "with force to leave them for an operator to drop") from None
                log.warning("feed %s deleted with force: slot %r / publication %r left on the source "
                            "(%s); drop them there", name, spec.slot_name, spec.publication_name, reason)
            feed.changelog.close()
            _close_index(feed)
            del self._feeds[name]
            self._store.remove(name)
            self._store.discard_log(name, feed.changelog)
            feed.notifier.close()  # long-polls and live streams on it answer "not found" now

    def set_tables(self, name: str, tables: Sequence[str], *, backfill: bool = False,
                   filters: Sequence[PublishedTable] = ()) -> FeedStatus:
        """Replace what a feed captures (``ALTER PUBLICATION ... SET TABLE`` on the publication it
        owns). Changes committed after the ALTER follow the new list; capture goes on. With
        ``backfill``, the tables it adds are backfilled."""
        feed = self._get(name)
        spec = feed.spec
        if spec.all_tables:
            raise ValueError(f"feed {name!r} captures all tables: its table list cannot be set")
        if not spec.owns_publication:
            raise ValueError(f"feed {name!r} adopted publication {spec.publication_name!r}: change "
                             "its tables on the source (ALTER PUBLICATION), not through pgfeed")
        names = tuple(dict.fromkeys(t.strip() for t in tables))
        if not names:
            raise ValueError("a feed needs at least one table")
        kept = tuple(f for f in filters if f.table.strip() in names)
        full = source.set_tables(spec, names, kept)
        with self._lock:
            feed.spec = replace(spec, tables=names, table_filters=kept,
                                identity_full=tuple(dict.fromkeys(spec.identity_full + full)))
            self._store.put(feed.spec, feed.paused)
        added = [t for t in names if t not in spec.tables]
        if backfill and added:
            assert feed.backfills is not None
            feed.backfills.start(added, chunk_rows=DEFAULT_CHUNK_ROWS, parallel=DEFAULT_PARALLEL)
        return self.status(name)

    def pause(self, name: str) -> FeedStatus:
        """Stop capturing (on whichever replica leads it) until resumed."""
        feed = self._get(name)
        if self._store.shared:
            self._hold(name)
        with self._lock:
            if not self._store.shared:
                self._store.put(feed.spec, True)
            feed.paused = True
            self._join(feed)
            feed.stats.state = "paused"
        return self.status(name)

    def _hold(self, name: str) -> None:
        """Pause a feed cluster-wide and give up its lease here. Leadership calls into the
        supervisor under its own lock, so this runs without the supervisor's (no lock cycle); the
        local paused flag goes first so that no tick takes the lease again meanwhile."""
        feed = self._get(name)
        feed.paused = True
        self._store.put(feed.spec, True)
        if self._leadership is not None:
            self._leadership.drop(name)

    def resume(self, name: str) -> FeedStatus:
        feed = self._get(name)
        if feed.spec.slot_lost is not None:
            raise FeedStateConflict(f"feed {name!r} cannot resume: {lost_message(feed.spec)}")
        if self._leadership is not None:
            self._leadership.forgive(name)
        with self._lock:
            feed.paused = False
            self._store.put(feed.spec, False)
            if self._leadership is not None:
                self._leadership.kick()
            elif not self._store.shared:
                self._start_capture(feed)
            if self._store.shared:
                feed.stats.state = "starting"
        return self.status(name)

    # -- replicas (shared store) -----------------------------------------------------------------
    def feed_flags(self) -> list[tuple[str, bool]]:
        """``(name, paused)`` of every feed known here."""
        with self._lock:
            return [(name, feed.paused) for name, feed in sorted(self._feeds.items())]

    def sync(self) -> None:
        """Bring this replica's feeds in line with the store's catalogue (another replica created,
        deleted, paused, resumed or altered one)."""
        wanted = {spec.name: (spec, paused) for spec, paused in self._store.feeds()}
        held: list[str] = []  # paused elsewhere: stop capturing here
        with self._lock:
            gone = [self._feeds.pop(n) for n in [n for n in self._feeds if n not in wanted]]
            for name, (spec, paused) in wanted.items():
                feed = self._feeds.get(name)
                if feed is None:
                    self._feeds[name] = self._open(spec, paused)
                    continue
                feed.spec = spec
                if paused != feed.paused:
                    feed.paused = paused
                    feed.stats.state = "paused" if paused else "starting"
                    if paused:
                        held.append(name)
        # Outside the supervisor's lock (see _hold): leases given up, deleted feeds closed.
        for name in held + [feed.spec.name for feed in gone]:
            if self._leadership is not None:
                self._leadership.drop(name)
        for feed in list(self._feeds.values()):  # backfills started elsewhere (lost notifications)
            if feed.backfills is not None:
                feed.backfills.refresh()
        for feed in gone:  # deleted by another replica: no source work here
            self._join(feed)
            feed.changelog.close()
            feed.notifier.close()

    @property
    def leadership(self) -> Leadership | None:
        return self._leadership

    def wake(self, name: str, head: int) -> None:
        """The store says feed ``name`` holds transactions up to ``head``: wake its readers here.
        No lock (a dict read): a supervisor busy stopping a capture never delays readers."""
        feed = self._feeds.get(name)
        if feed is not None:
            feed.notifier.publish(head)

    def lead(self, name: str, epoch: int) -> None:
        """This replica took the feed's lease at ``epoch``: capture it, writing under that epoch."""
        feed = self._get(name)
        with self._lock:
            feed.changelog.lead(epoch)  # type: ignore[attr-defined]
            if not feed.paused:
                self._start_capture(feed)

    def stand_down(self, name: str) -> None:
        """Stop capturing the feed here (its lease is gone or being given up)."""
        with self._lock:
            feed = self._feeds.get(name)
        if feed is None:
            return
        self._join(feed)
        lead = getattr(feed.changelog, "lead", None)
        if lead is not None:
            lead(None)
        if not feed.paused:
            feed.stats.state = "starting"

    def ensure_capture(self, name: str) -> None:
        """Restart the capture of a feed this replica leads if its thread ended (not on failure)."""
        with self._lock:
            feed = self._feeds.get(name)
            if (feed is not None and not feed.paused and feed.stats.state != "failed"
                    and (feed.thread is None or not feed.thread.is_alive())):
                self._start_capture(feed)

    def failed(self, name: str) -> bool:
        """The feed's capture here ended in state ``failed`` (leadership gives its lease up)."""
        with self._lock:
            feed = self._feeds.get(name)
        return (feed is not None and feed.stats.state == "failed"
                and (feed.thread is None or not feed.thread.is_alive()))

    def capture_report(self, name: str) -> dict[str, Any] | None:
        """This replica's capture counters of ``name``, for the store (leadership renewals)."""
        feed = self._feeds.get(name)
        return None if feed is None else feed.stats.report(self.replica_id)

    def backfills_changed(self, name: str) -> None:
        """A backfill of ``name`` was started or cancelled somewhere: follow it if capturing."""
        feed = self._feeds.get(name)
        if feed is not None and feed.backfills is not None:
            feed.backfills.refresh()

    def _take_slot(self, feed: _Feed) -> None:
        """Before START_REPLICATION on a shared store: check the lease is still ours, then end a
        previous leader's walsender, which would hold the slot until wal_sender_timeout."""
        epoch = self._leadership.epoch(feed.spec.name) if self._leadership is not None else None
        store = self._store
        if epoch is None or store.renew(feed.spec.name, epoch, self._leadership.lease_seconds) is None:  # type: ignore[attr-defined,union-attr]
            raise LeaseLost(f"feed {feed.spec.name!r}: this replica no longer holds its lease")
        source.free_slot(feed.spec)

    def leaders(self) -> dict[str, Leader]:
        """Each feed's current leader (shared store; empty for the embedded one)."""
        if not self._store.shared:
            return {}
        return {name: Leader(lease.holder, lease.epoch, lease.since.timestamp())
                for name, lease in self._store.leases().items() if lease.live}  # type: ignore[attr-defined]

    def replicas(self) -> list[ReplicaInfo]:
        """The replicas sharing the store, with their last heartbeat (just this one when embedded)."""
        if not self._store.shared:
            leading = [n for n, f in sorted(self._feeds.items()) if f.thread and f.thread.is_alive()]
            return [ReplicaInfo(self.replica_id, self._started_at, time.time(), 0.0, True, leading)]
        return replica_infos(self._store, self.leaders())  # type: ignore[arg-type]

    # -- reading ---------------------------------------------------------------------------------
    def changelog(self, name: str) -> ChangeLog:
        return self._get(name).changelog

    def notifier(self, name: str) -> HeadNotifier:
        return self._get(name).notifier

    def reader(self, name: str) -> FeedReader:
        """The feed's reader (one per feed: it holds the decode caches)."""
        feed = self._get(name)
        with feed.catalog_lock:
            if feed.reader is None:
                feed.reader = self._new_reader(feed)
        return feed.reader

    def _new_reader(self, feed: _Feed) -> FeedReader:
        name = feed.spec.name
        return FeedReader(feed.changelog, lambda: self.catalog(name), toast=feed.spec.options.toast,
                          toast_index=self._toast_index(feed), ddl_table=feed.spec.ddl_table)

    def prepare_trim(self, name: str) -> None:
        """Before retention trims feed ``name``: a ``toast=reselect`` feed's index takes in what
        is about to go, so fills after it stay what they would have been."""
        if self.spec(name).options.toast == "reselect":
            self.reader(name).index_toast()

    def served(self, name: str) -> ServedFeed:
        """Everything serving feed ``name`` needs (reader, tail, notifier, catalogue, spec),
        looked up once a request: the handle the serving loop (``feeds/serving.py``) reads."""
        feed = self._get(name)
        served = feed.served
        if served is None:
            reader = self.reader(name)
            with feed.catalog_lock:
                if feed.served is None:
                    feed.served = ServedFeed(
                        name, lambda: feed.spec, reader, feed.notifier,
                        lambda: self._tail_of(feed), lambda: self._catalog_of(feed),
                        lambda r: self.check_reader(name, r))
                served = feed.served
        return served

    def tail(self, name: str) -> SharedTail:
        """The feed's shared live tail (one per feed, with a reader of its own): what caught-up
        subscribers read, decoded and encoded once for all of them."""
        return self._tail_of(self._get(name))

    def _tail_of(self, feed: _Feed) -> SharedTail:
        if feed.tail is not None:
            return feed.tail
        with feed.catalog_lock:
            if feed.tail is None:
                feed.tail = SharedTail(self._new_reader(feed))
        return feed.tail

    def _toast_index(self, feed: _Feed) -> ToastIndex | None:
        """The feed's toast index (``toast=reselect`` only), shared by its readers."""
        if feed.spec.options.toast != "reselect":
            return None
        with feed.catalog_lock:
            if feed.toast_index is None:
                feed.toast_index = ToastIndex(self._store.toast_index_path(feed.spec.name))
            return feed.toast_index

    def check_reader(self, name: str, reader: FeedReader) -> None:
        """Raise FeedNotFound unless ``reader`` is still feed ``name``'s reader: the feed was
        deleted (and perhaps created again) since the reader was handed out, so its log is
        closed. Readers call it when a read of the log fails."""
        if self.reader(name) is not reader:
            raise FeedNotFound(f"feed {name!r} was deleted while it was being read")

    def catalog(self, name: str) -> RelationCatalog:
        """The feed's relation catalogue, up to date with the log's schema history."""
        return self._catalog_of(self._get(name))

    def _catalog_of(self, feed: _Feed) -> RelationCatalog:
        with feed.catalog_lock:
            # Every frame up to the head read first is in the history read after it, so the next
            # call asks only for what is newer than that head (from the log's in-memory tail,
            # for a reader following the head), not for everything since the last schema change.
            head = feed.changelog.head()
            for commit_lsn, frame in feed.changelog.schema_history(feed.catalog_lsn):
                feed.catalog.add(commit_lsn, frame)
                feed.catalog_lsn = max(feed.catalog_lsn, commit_lsn)
            feed.catalog_lsn = max(feed.catalog_lsn, head)
        return feed.catalog

    # -- status ----------------------------------------------------------------------------------
    def statuses(self) -> list[FeedStatus]:
        """Every feed's status (feeds deleted meanwhile left out). Sources are probed in
        parallel: N unreachable sources cost one connect timeout, not N."""
        return [s for s in parallel(self.names(), self._status_if_present) if s is not None]

    def _status_if_present(self, name: str) -> FeedStatus | None:
        try:
            return self.status(name)
        except FeedNotFound:
            return None

    def state(self, name: str) -> tuple[FeedState, str | None]:
        """A feed's state and last error, from memory: what ``status`` says of them, without
        reading its log or probing its source (the state watcher asks four times a second)."""
        feed = self._get(name)
        return self._state(feed), lost_message(feed.spec) or feed.stats.last_error

    def slot_lost(self, name: str) -> SlotLost | None:
        return self._get(name).spec.slot_lost

    @staticmethod
    def _state(feed: _Feed) -> FeedState:
        state: FeedState = feed.stats.state
        if feed.spec.slot_lost is not None:
            return "failed"
        if state in ("starting", "running") and feed.backfills is not None \
                and feed.backfills.initial_running():
            state = "snapshotting"
        return state

    def status(self, name: str, *, probe_source: bool = True) -> FeedStatus:
        feed = self._get(name)
        spec, stats = feed.spec, feed.stats
        state = self._state(feed)
        status = FeedStatus(
            name=spec.name, state=state, slot=spec.slot_name, publication=spec.publication_name,
            tables=list(spec.tables), all_tables=spec.all_tables,
            confirmed_lsn=feed.changelog.confirmed_lsn(), head_lsn=feed.changelog.head(),
            changes_per_second=round(stats.rate(), 1), changes_captured=stats.changes,
            bytes_captured=stats.bytes, backfill_rows_captured=stats.backfill_rows,
            reconnects=stats.reconnects, last_error=stats.last_error,
            proto_version=stats.proto_version, streaming_in_use=stats.streaming_in_use,
            source=mask_dsn(spec.dsn), slot_lost=spec.slot_lost, gaps=spec.gaps,
            next_attempt_at=stats.next_attempt if state == "reconnecting" else None,
        )
        last_commit = stats.last_commit_unix() if stats.last_commit_ts else None
        if self._store.shared:
            capturing = feed.thread is not None and feed.thread.is_alive()
            status.counters_from = self.replica_id if capturing else None
            try:
                lease = self._store.leases().get(name)  # type: ignore[attr-defined]
            except ChangeLogError as exc:
                lease = None
                status.last_error = status.last_error or str(exc)
            if lease is not None and lease.live:
                status.leader = Leader(lease.holder, lease.epoch, lease.since.timestamp())
            if lease is not None and not capturing:  # the leader's counters, as last reported
                last_commit = merge_report(status, lease.stats, live=lease.live, paused=feed.paused)
        if spec.slot_lost is not None:  # whatever a leader last reported: failed, and why
            status.state, status.last_error, status.next_attempt_at = "failed", lost_message(spec), None
        if probe_source:
            try:
                info, held, status.failover, status.unprotected_tables, detail = source.probe(spec)
                if detail is not None:
                    status.published, status.publish_generated_columns = detail
            except SourceError as exc:
                info = held = None
                status.last_error = status.last_error or str(exc)
            if held is not None:  # an adopted publication changes on the source, not through pgfeed
                status.all_tables, status.tables = held[0], list(held[1])
            if info:
                status.server_lsn = info.get("server_lsn")
                status.slot_risk = SlotRisk(info.get("wal_status"), info.get("safe_wal_size"),
                                            info.get("retained_bytes"))
                if status.server_lsn is not None:
                    status.lag_bytes = max(0, status.server_lsn - status.confirmed_lsn)
        if last_commit:
            caught_up = status.lag_bytes is not None and status.lag_bytes < 64 * 1024
            status.lag_seconds = 0.0 if caught_up else max(0.0, time.time() - last_commit)
        return status

    # -- lost slots and resync (issue 26) --------------------------------------------------------
    def check_slots(self) -> list[str]:
        """Probe every feed's slot (running and paused ones; one admin connection each, in
        parallel) and fail those whose slot is gone. Returns the feeds found lost now."""
        if not self._capture:
            return []
        with self._lock:
            feeds = [f for f in self._feeds.values() if f.spec.slot_lost is None]
        found = []
        for feed, lost in zip(feeds, parallel(feeds, lambda f: (f.generation, resyncing.check_loss(f.spec)))):
            generation, loss = lost
            if loss is not None and self._mark_lost(feed, loss, generation):
                found.append(feed.spec.name)
        return found

    # -- partitions attached with rows (issue 28.5) ------------------------------------------------
    def check_partitions(self) -> list[str]:
        """List the published leaf partitions of every capturing feed with option
        ``backfill_attached`` (this replica's captures only: a leader's work) and backfill the
        new ones holding rows. Returns the ids of the backfills started."""
        if not self._capture:
            return []
        with self._lock:
            feeds = [f for f in self._feeds.values()
                     if f.spec.slot_lost is None and not f.paused and f.spec.options.backfill_attached
                     and f.thread is not None and f.thread.is_alive()]
        return [b for found in parallel(feeds, self._check_partitions) for b in found]

    def _check_partitions(self, feed: _Feed) -> list[str]:
        spec = feed.spec
        try:
            leaves = partitions.list_leaves(spec.dsn, spec.publication_name, spec.partitions)
        except SourceError as exc:  # tried again at the next check
            log.debug("feed %s: partition check failed: %s", spec.name, exc)
            return []
        started = []
        if leaves.attached:
            assert feed.backfills is not None
            try:
                record = feed.backfills.start(leaves.attached, chunk_rows=DEFAULT_CHUNK_ROWS,
                                              parallel=DEFAULT_PARALLEL, skip_refused=True)
                started.append(record.id)
                log.info("feed %s: partition %s attached with rows: backfill %s reads them",
                         spec.name, ", ".join(record.tables), record.id,
                         extra={"feed": spec.name, "event": "partition_attached",
                                "backfill": record.id, "tables": list(record.tables)})
            except BackfillError as exc:
                if exc.code == "source_error":  # tried again at the next check
                    return []
                log.warning("feed %s: partition %s attached with rows, not backfilled: %s",
                            spec.name, ", ".join(leaves.attached), exc,
                            extra={"feed": spec.name, "event": "partition_attached"})
        if leaves.oids != spec.partitions:
            with self._lock:
                if self._feeds.get(spec.name) is feed:
                    feed.spec = replace(feed.spec, partitions=leaves.oids)
                    self._store.put(feed.spec, feed.paused)
        return started

    def _mark_lost(self, feed: _Feed, lost: LostSlot, generation: int) -> bool:
        """Record that the feed's slot is gone (persisted: a restart keeps it failed), fail the
        feed and stop its capture. From a capture thread or a slot check; a check begun before
        a resync, or a feed deleted meanwhile, changes nothing (False)."""
        own = feed.thread is threading.current_thread()
        while not self._lock.acquire(timeout=0.1):
            if own and feed.stop_event.is_set():  # being stopped by a holder of the lock
                return False
        try:
            name = feed.spec.name
            if (self._feeds.get(name) is not feed or feed.generation != generation
                    or feed.spec.slot_lost is not None):
                return False
            last = feed.changelog.confirmed_lsn()
            feed.spec = replace(feed.spec, slot_lost=SlotLost(time.time(), lost.reason, last, lost.slot))
            self._store.put(feed.spec, feed.paused)
            feed.stats.last_error = lost_message(feed.spec)
            feed.stats.next_attempt = None
            feed.stats.state = "failed"
        finally:
            self._lock.release()
        if feed.thread is not None and not own:
            self._join(feed)
        elif feed.backfills is not None:
            feed.backfills.stop_workers()
        return True

    def resync(self, name: str, *, force: bool = False) -> ResyncResult:
        """The way back from a lost slot: drop the dead slot if it is still there, create a new
        one, write the gap marker into the feed (``feeds.resync``), record the gap, resume
        capture and backfill the feed's tables. FeedStateConflict unless the slot is lost (or
        ``force``); SourceError (nothing changed but a dropped dead slot) when the source
        refuses."""
        if self._store.shared:
            raise FeedStateConflict("resync is not available with a shared (PostgreSQL) store yet: "
                                    "delete the feed and create it again")
        with self._lock:
            feed = self._get(name)
            spec = feed.spec
            if spec.slot_lost is None and not force:
                raise FeedStateConflict(
                    f"feed {name!r} has not lost its slot {spec.slot_name!r}: a resync would drop "
                    "a working slot and mark a gap; pass force to do it anyway")
            self._join(feed)
            feed.generation += 1
            try:
                made = resyncing.new_slot(spec)
            except SourceError:
                if spec.slot_lost is None and not feed.paused:
                    self._start_capture(feed)
                raise
            confirmed, head = feed.changelog.confirmed_lsn(), feed.changelog.head()
            position = made.consistent_point - 1
            if position <= head or made.consistent_point < confirmed:
                resyncing.drop_new_slot(spec)
                raise SourceError(
                    f"resync of feed {name!r}: the new slot starts at {format_lsn(made.consistent_point)}, "
                    f"not after the feed's log (head {format_lsn(head)}): the source's WAL is behind "
                    "what the feed holds (a restored or different server?); create a new feed")
            feed.changelog.append([resyncing.marker(position, made.consistent_point, made.relations)],
                                  made.consistent_point)
            feed.notifier.publish(position)
            lost = spec.slot_lost
            gap = Gap(lost.last_lsn if lost else confirmed, made.consistent_point,
                      lost.reason if lost else "forced resync", time.time(), position)
            assert feed.backfills is not None
            for record in feed.backfills.records():  # superseded by the resync's backfill
                if record.state == "running":
                    feed.backfills.cancel(record.id)
            feed.spec = replace(spec, slot_lost=None, gaps=(*spec.gaps, gap))
            feed.paused = False
            self._store.put(feed.spec, False)
            feed.stats.last_error = None
            self._start_capture(feed)
        tables = tuple(r.quoted for r in made.relations)
        backfill_id = backfill_error = None
        if tables:
            try:
                backfill_id = feed.backfills.start(tables, chunk_rows=DEFAULT_CHUNK_ROWS,
                                                   parallel=DEFAULT_PARALLEL).id
            except BackfillError as exc:
                backfill_error = str(exc)
        log.warning("feed %s resynced: slot %s %s, gap after %s marked at %s, %s", name,
                    spec.slot_name, "dropped and created" if made.dropped else "created",
                    format_lsn(gap.lost_after), format_lsn(position),
                    f"backfill {backfill_id}" if backfill_id else f"no backfill ({backfill_error})",
                    extra={"feed": name, "event": "resync"})
        return ResyncResult(name, spec.slot_name, made.dropped, gap, tables, backfill_id,
                            backfill_error)


def parallel(names: Sequence[_S], fn: Callable[[_S], _T]) -> list[_T]:
    """``[fn(name) for name in names]`` on up to 8 threads: for calls that wait on sources."""
    if len(names) < 2:
        return [fn(name) for name in names]
    with ThreadPoolExecutor(max_workers=min(8, len(names)), thread_name_prefix="pgfeed-probe") as pool:
        return list(pool.map(fn, names))


def _close_index(feed: _Feed) -> None:
    if feed.toast_index is not None:
        feed.toast_index.close()
