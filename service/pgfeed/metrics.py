"""Prometheus metrics of one service process: its own registry, per-feed figures read from the
supervisor at scrape time, and the serving counters the HTTP and gRPC front ends update.

No global state: ``Metrics`` owns a ``CollectorRegistry``; the runtime makes one and hands it to
both front ends. Metric names are the constants below.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

import pgfeed
from pgfeed.errors import FeedNotFound
from pgfeed.feeds.supervisor import parallel
from pgfeed.pgoutput.messages import PG_EPOCH_UNIX

if TYPE_CHECKING:
    from pgfeed.feeds.model import FeedStatus
    from pgfeed.feeds.supervisor import Supervisor

__all__ = ["CONTENT_TYPE", "Metrics"]

log = logging.getLogger("pgfeed.metrics")

CONTENT_TYPE = CONTENT_TYPE_LATEST

REQUEST_LATENCY = "pgfeed_request_duration_seconds"
SERVED_CHANGES = "pgfeed_served_changes"  # exposed as pgfeed_served_changes_total
SUBSCRIBERS = "pgfeed_subscribers"
TAIL_ANSWERS = "pgfeed_http_tail_answers"  # exposed as pgfeed_http_tail_answers_total
FEED_CHANGES = "pgfeed_feed_changes_captured"
FEED_BYTES = "pgfeed_feed_bytes_captured"
FEED_CONFIRMED = "pgfeed_feed_confirmed_lsn"
FEED_HEAD = "pgfeed_feed_head_lsn"
FEED_LAG_BYTES = "pgfeed_feed_lag_bytes"
FEED_LAG_SECONDS = "pgfeed_feed_lag_seconds"
FEED_RATE = "pgfeed_feed_changes_per_second"
FEED_STATE = "pgfeed_feed_state"
FEED_RETAINED_BYTES = "pgfeed_feed_slot_retained_bytes"
FEED_SLOT_LOST = "pgfeed_feed_slot_lost"  # 1: the slot is gone, changes were lost (issue 26)
FEED_GAPS = "pgfeed_feed_gaps"
LOG_TRANSACTIONS = "pgfeed_log_transactions"
LOG_CHANGES = "pgfeed_log_changes"
LOG_BYTES = "pgfeed_log_payload_bytes"
LOG_FORCED_TRIMS = "pgfeed_log_forced_trims"
BACKFILL_ROWS = "pgfeed_backfill_rows"
BACKFILL_CHUNKS = "pgfeed_backfill_chunks"
BACKFILL_REDONE = "pgfeed_backfill_chunks_redone"
BACKFILLS_RUNNING = "pgfeed_backfills_running"
REQUESTS = "pgfeed_requests"  # exposed as pgfeed_requests_total
BUILD_INFO = "pgfeed_build"  # exposed as pgfeed_build_info
FEED_RECONNECTS = "pgfeed_feed_reconnects"  # exposed as pgfeed_feed_reconnects_total
FEED_SAFE_WAL = "pgfeed_feed_slot_safe_wal_bytes"
FEED_WAL_STATUS = "pgfeed_feed_slot_wal_status"
CONSUMER_LAG = "pgfeed_consumer_lag_bytes"
CONSUMER_ACK_AGE = "pgfeed_consumer_ack_age_seconds"
WAL_STATUSES = ("reserved", "extended", "unreserved", "lost")

STATES = ("starting", "snapshotting", "running", "reconnecting", "paused", "failed")
# Seconds; long-polls (up to 60 s) land in the top buckets.
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            60.0)


class Metrics:
    """The process's metrics.

    - ``request_latency``: Histogram, labels ``surface`` (``http``/``grpc``) and ``endpoint``
      (the route template, e.g. ``/v1/feeds/{feed}/changes``).
    - ``served_changes``: Counter, labels ``feed`` and ``surface``; incremented by the number of
      changes each answer (page, stream frame) carried.
    - ``subscribers``: Gauge, label ``feed``; live gRPC subscriptions.
    - ``tail_answers``: Counter, label ``feed``; caught-up long-polls answered from the shared
      tail ahead of routing (``http_api.fastpath``).
    - ``requests``: Counter, labels ``surface``, ``endpoint`` and ``code`` (the HTTP status, or
      the gRPC status code's name); every answer, errors included.
    - ``build``: Info: pgfeed's and Python's versions.
    - per-feed capture and log figures, collected from ``supervisor`` when scraped.
    """

    def __init__(self, supervisor: Supervisor | None = None, *, probe_ttl: float = 10.0) -> None:
        self.registry = CollectorRegistry()
        self.request_latency = Histogram(REQUEST_LATENCY, "Time to answer a request, by surface "
                                         "and endpoint (long-polls include their wait)",
                                         ["surface", "endpoint"], registry=self.registry,
                                         buckets=_BUCKETS)
        self.served_changes = Counter(SERVED_CHANGES, "Changes served to readers",
                                      ["feed", "surface"], registry=self.registry)
        self.subscribers = Gauge(SUBSCRIBERS, "Live streaming subscribers", ["feed"],
                                 registry=self.registry)
        self.tail_answers = Counter(TAIL_ANSWERS, "Caught-up HTTP long-polls answered from the "
                                    "shared tail ahead of routing", ["feed"], registry=self.registry)
        self.requests = Counter(REQUESTS, "Answers by surface, endpoint and status code (HTTP "
                                "status, or gRPC code name)", ["surface", "endpoint", "code"],
                                registry=self.registry)
        Info(BUILD_INFO, "The running pgfeed", registry=self.registry).info(
            {"version": pgfeed.__version__, "python": platform.python_version()})
        self.feeds: FeedCollector | None = None
        if supervisor is not None:
            self.feeds = FeedCollector(supervisor, probe_ttl=probe_ttl)
            self.registry.register(self.feeds)

    def served_total(self, feed: str) -> float:
        """Changes served to readers of ``feed`` so far, every surface (the console's history)."""
        return sum(s.value for metric in self.served_changes.collect() for s in metric.samples
                   if s.name.endswith("_total") and s.labels.get("feed") == feed)

    def render(self) -> bytes:
        """The text exposition format of everything in the registry (blocking: reads the logs and
        may probe sources; call it from a worker thread)."""
        return generate_latest(self.registry)


class FeedCollector(Collector):
    """Per-feed gauges and counters, read from the supervisor at each scrape.

    Lag and slot figures need a query on the source; those statuses are cached for
    ``probe_ttl`` seconds so frequent scrapes do not open a connection each time.
    """

    def __init__(self, supervisor: Supervisor, *, probe_ttl: float = 10.0) -> None:
        self.supervisor = supervisor
        self.probe_ttl = probe_ttl
        self._probed: dict[str, tuple[float, FeedStatus]] = {}
        self._lock = threading.Lock()

    def _status(self, name: str) -> FeedStatus:
        now = time.monotonic()
        with self._lock:
            cached = self._probed.get(name)
        if cached is not None and now - cached[0] < self.probe_ttl:
            fresh = self.supervisor.status(name, probe_source=False)
            probed = cached[1]
            fresh.server_lsn, fresh.slot_risk = probed.server_lsn, probed.slot_risk
            if probed.server_lsn is not None:
                fresh.lag_bytes = max(0, probed.server_lsn - fresh.confirmed_lsn)
            return fresh
        status = self.supervisor.status(name, probe_source=True)
        with self._lock:
            self._probed = {n: v for n, v in self._probed.items() if now - v[0] < self.probe_ttl}
            self._probed[name] = (now, status)
        return status

    def _figures(self, name: str) -> tuple[FeedStatus, Any, dict[str, Any]] | None:
        try:
            changelog = self.supervisor.changelog(name)
            return self._status(name), changelog.stats(), changelog.consumer_states()
        except Exception as exc:  # noqa: BLE001 - a feed deleted mid-scrape, a closed log: skip it
            log.debug("metrics: feed %s skipped: %s", name, exc)
            return None

    def collect(self) -> Iterator[Any]:
        changes = CounterMetricFamily(FEED_CHANGES, "Changes captured since the service started",
                                      labels=["feed"])
        nbytes = CounterMetricFamily(FEED_BYTES, "pgoutput bytes captured since the service "
                                     "started", labels=["feed"])
        confirmed = GaugeMetricFamily(FEED_CONFIRMED, "Confirmed flush position (LSN as a number)",
                                      labels=["feed"])
        head = GaugeMetricFamily(FEED_HEAD, "Commit LSN of the newest durable transaction",
                                 labels=["feed"])
        lag_bytes = GaugeMetricFamily(FEED_LAG_BYTES, "Source WAL bytes not yet confirmed",
                                      labels=["feed"])
        lag_seconds = GaugeMetricFamily(FEED_LAG_SECONDS, "Seconds behind the source's commits",
                                        labels=["feed"])
        rate = GaugeMetricFamily(FEED_RATE, "Capture rate over the last ~10 s", labels=["feed"])
        state = GaugeMetricFamily(FEED_STATE, "1 for the feed's current state", labels=["feed", "state"])
        retained = GaugeMetricFamily(FEED_RETAINED_BYTES, "Source WAL the slot retains "
                                     "(restart_lsn to the current LSN)", labels=["feed"])
        slot_lost = GaugeMetricFamily(FEED_SLOT_LOST, "1 when the feed's slot was dropped or "
                                      "invalidated: changes were lost (resync to go on)",
                                      labels=["feed"])
        gaps = GaugeMetricFamily(FEED_GAPS, "Gaps resyncs marked in the feed", labels=["feed"])
        reconnects = CounterMetricFamily(FEED_RECONNECTS, "Times capture lost its source and "
                                         "connected again since the service started",
                                         labels=["feed"])
        safe_wal = GaugeMetricFamily(FEED_SAFE_WAL, "WAL the source may still write before the "
                                     "slot is invalidated (max_slot_wal_keep_size; absent when "
                                     "unlimited)", labels=["feed"])
        wal_status = GaugeMetricFamily(FEED_WAL_STATUS, "1 for the slot's wal_status (reserved, "
                                       "extended, unreserved, lost)", labels=["feed", "wal_status"])
        consumer_lag = GaugeMetricFamily(CONSUMER_LAG, "WAL between a named consumer's cursor and "
                                         "the feed's head", labels=["feed", "consumer"])
        consumer_age = GaugeMetricFamily(CONSUMER_ACK_AGE, "Seconds since a named consumer last "
                                         "acknowledged", labels=["feed", "consumer"])
        log_txns = GaugeMetricFamily(LOG_TRANSACTIONS, "Transactions retained in the change log",
                                     labels=["feed"])
        log_changes = GaugeMetricFamily(LOG_CHANGES, "Changes retained in the change log",
                                        labels=["feed"])
        log_bytes = GaugeMetricFamily(LOG_BYTES, "Payload bytes retained in the change log",
                                      labels=["feed"])
        forced = CounterMetricFamily(LOG_FORCED_TRIMS, "Trims that dropped changes a consumer had "
                                     "not acknowledged", labels=["feed"])
        bf_rows = CounterMetricFamily(BACKFILL_ROWS, "Rows stored by backfills since the service "
                                      "started", labels=["feed"])
        bf_chunks = CounterMetricFamily(BACKFILL_CHUNKS, "Backfill chunks stored since the service "
                                        "started", labels=["feed"])
        bf_redone = CounterMetricFamily(BACKFILL_REDONE, "Backfill chunks read again (a TRUNCATE "
                                        "or schema change in their window, ...)", labels=["feed"])
        bf_running = GaugeMetricFamily(BACKFILLS_RUNNING, "Backfills running in this process",
                                       labels=["feed"])
        names = self.supervisor.names()
        for name, figures in zip(names, parallel(names, self._figures)):  # sources probed at once
            if figures is None:
                continue
            status, stats, consumers = figures
            labels = [name]
            changes.add_metric(labels, status.changes_captured)
            nbytes.add_metric(labels, status.bytes_captured)
            confirmed.add_metric(labels, status.confirmed_lsn)
            head.add_metric(labels, status.head_lsn)
            if status.lag_bytes is not None:
                lag_bytes.add_metric(labels, status.lag_bytes)
            if status.lag_seconds is not None:
                lag_seconds.add_metric(labels, status.lag_seconds)
            rate.add_metric(labels, status.changes_per_second)
            for s in STATES:
                state.add_metric([name, s], 1.0 if status.state == s else 0.0)
            slot_lost.add_metric(labels, 0.0 if status.slot_lost is None else 1.0)
            gaps.add_metric(labels, len(status.gaps))
            reconnects.add_metric(labels, status.reconnects)
            risk = status.slot_risk
            if risk.safe_wal_size is not None:
                safe_wal.add_metric(labels, risk.safe_wal_size)
            if risk.wal_status is not None:
                for w in WAL_STATUSES:
                    wal_status.add_metric([name, w], 1.0 if risk.wal_status == w else 0.0)
            now_us = (time.time() - PG_EPOCH_UNIX) * 1e6
            for consumer, cstate in consumers.items():
                consumer_lag.add_metric([name, consumer], max(0, status.head_lsn - cstate.cursor.lsn))
                consumer_age.add_metric([name, consumer], max(0.0, (now_us - cstate.acked_us) / 1e6))
            if status.slot_risk.retained_bytes is not None:
                retained.add_metric(labels, status.slot_risk.retained_bytes)
            log_txns.add_metric(labels, stats.transaction_count)
            log_changes.add_metric(labels, stats.change_count)
            log_bytes.add_metric(labels, stats.payload_bytes)
            forced.add_metric(labels, stats.forced_trims)
            try:
                backfills = self.supervisor.backfills(name)
            except FeedNotFound:  # deleted mid-scrape
                continue
            bf_rows.add_metric(labels, backfills.rows_stored)
            bf_chunks.add_metric(labels, backfills.chunks_stored)
            bf_redone.add_metric(labels, backfills.chunks_redone)
            bf_running.add_metric(labels, backfills.running_count())
        yield from (changes, nbytes, confirmed, head, lag_bytes, lag_seconds, rate, state,
                    retained, slot_lost, gaps, reconnects, safe_wal, wal_status, consumer_lag,
                    consumer_age, log_txns, log_changes, log_bytes, forced, bf_rows, bf_chunks,
                    bf_redone, bf_running)

    def describe(self) -> Iterator[Any]:
        return iter(())  # families are dynamic: do not collect at registration
