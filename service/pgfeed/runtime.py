"""Composition root: the supervisor, the HTTP and gRPC servers and retention, started and stopped in order.

Shutdown order on SIGTERM/SIGINT: stop accepting (HTTP, gRPC graceful), then stop captures (final
feedback, slots' connections closed), then close the change logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import uvicorn

from pgfeed.changelog.base import ChangeLogError, age_cutoff
from pgfeed.config import Settings
from pgfeed.errors import StartupError
from pgfeed.feeds.notify import StopSignal
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.metrics import Metrics
from pgfeed.ownership import DataDirLock, bind_listener, check_port_free
from pgfeed.pgoutput.messages import pg_now_us

if TYPE_CHECKING:
    from pgfeed.grpc_api.server import FeedServer
    from pgfeed.tls import TlsFiles

log = logging.getLogger("pgfeed")

# Readers build ~10 objects a change (decoded rows, change events); with CPython's default
# generation-0 threshold (700) the cyclic GC runs every ~70 changes and rescans the page being
# built, costing ~30% of a page's time. Decoded values hold no cycles, so collect less often.
GC_THRESHOLDS = (50_000, 20, 100)


# The event loop (every HTTP and gRPC answer) shares the GIL with the capture and writer threads;
# a thread that wants the GIL from a busy one waits out the switch interval (5 ms by default), on
# every hand-over: 1 ms keeps that wait well inside a live subscriber's latency budget.
SWITCH_INTERVAL = 0.001


def new_event_loop(kind: str = "auto") -> asyncio.AbstractEventLoop:
    """The event loop ``pgfeed serve`` runs on: uvloop unless ``kind`` is "asyncio" (or uvloop is
    not installed and ``kind`` is "auto"). A live subscriber costs one gRPC message a transaction,
    and grpc.aio's per-message callbacks run on this loop: with uvloop the loop's CPU a message was
    ~45% lower (bench/RESULTS.md)."""
    if kind == "asyncio":
        return asyncio.new_event_loop()
    try:
        import uvloop
    except ImportError:
        if kind == "uvloop":
            raise RuntimeError("event_loop = 'uvloop' but uvloop is not installed "
                               "(pip install uvloop, or set event_loop = 'auto' or 'asyncio')") from None
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def tune_interpreter() -> None:
    """Process-wide interpreter settings for serving (called once by ``Runtime.serve``): GC
    thresholds, and the GIL switch interval."""
    gc.set_threshold(*GC_THRESHOLDS)
    sys.setswitchinterval(SWITCH_INTERVAL)


class _HttpServer(uvicorn.Server):
    """uvicorn without signal handling of its own: it would re-raise SIGTERM once HTTP is down,
    killing the process before gRPC and the captures shut down (final feedback unsent)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def build_supervisor(settings: Settings) -> Supervisor:
    """The supervisor over the configured store: the data dir, or a PostgreSQL store shared with
    other replicas (then no data dir is needed: spill files go to a temporary directory). On the
    store this process claims its replica id (``PgStore.claim_replica``): StartupError when
    another live process has it, or when the store cannot be reached."""
    if settings.store is None:
        return Supervisor(settings.data_dir, changelog_kind=settings.changelog)
    from pgfeed.pgstore.store import PgStore

    replica_id = settings.replica_id or default_replica_id(settings.http_port)
    try:
        store = PgStore(settings.store.get_secret_value(), replica_id=replica_id,
                        schema=settings.store_schema)
    except ChangeLogError as exc:  # its message masks the password
        raise StartupError(f"{exc} (check --store / PGFEED_STORE)") from None
    try:
        store.claim_replica()
    except BaseException:
        store.close()
        raise
    log.info("store: %r as replica %s", store, replica_id)
    return Supervisor(store=store, replica_id=replica_id)


def default_replica_id(http_port: int) -> str:
    """Host name and HTTP port (the process id when the port is picked by the system)."""
    return f"{socket.gethostname()}:{http_port or os.getpid()}"


class Runtime:
    def __init__(self, settings: Settings, supervisor: Supervisor | None = None) -> None:
        self.settings = settings
        # One process per data dir (ownership.py): locked before anything in it is read.
        self.data_lock = (DataDirLock.acquire(settings.data_dir)
                          if supervisor is None and settings.store is None else None)
        try:
            self.supervisor = supervisor or build_supervisor(settings)
        except BaseException:
            self.release()
            raise
        # One set of metrics for both front ends (its own registry: no global state).
        self.metrics = Metrics(self.supervisor)
        self.http: uvicorn.Server | None = None
        self.stop_signal = StopSignal()  # long-polls answer at once once shutdown begins
        self.grpc_port: int | None = None
        self.started = asyncio.Event()
        from pgfeed.feeds.history import History

        self.history = History(settings.history_seconds, settings.history_hours)

    async def serve(self) -> None:
        """Bind both listeners (StartupError, before anything starts, when a port is taken), start
        the supervisor, serve until asked to stop, then shut down in order."""
        try:
            await self._serve()
        finally:
            self.release()

    async def _serve(self) -> None:
        from pgfeed.http_api.app import create_app
        from pgfeed.tls import uvicorn_options

        settings = self.settings
        try:
            tls, http_sockets, grpc_server = self._listen()
        except BaseException:
            await asyncio.to_thread(self.supervisor.stop)  # closes a store (and its replica claim)
            raise
        tune_interpreter()
        await asyncio.to_thread(self.supervisor.start)
        app = create_app(self.supervisor, settings, self.metrics)
        app.state.stop = self.stop_signal
        app.state.history = self.history
        self.http = _HttpServer(uvicorn.Config(app, host=settings.http_host, port=settings.http_port,
                                                  log_level=settings.log_level.lower(), access_log=False,
                                                  lifespan="on", log_config=None,  # our handlers
                                                  **uvicorn_options(tls)))
        await grpc_server.start()
        retention = asyncio.create_task(self._retention_loop())
        history = asyncio.create_task(self._history_loop())
        from pgfeed.feeds.watch import StateWatcher

        watcher = asyncio.create_task(StateWatcher(self.supervisor).run())  # state-change lines
        log.info("gRPC on %s:%s%s", settings.grpc_host, self.grpc_port,
                 "" if tls is None else " (TLS)" + (" with client certificates" if tls.client_ca else ""))
        signals = self._handle_signals()
        try:
            http_task = asyncio.create_task(self.http.serve(sockets=http_sockets))
            while not self.http.started and not http_task.done():
                await asyncio.sleep(0.02)
            self.started.set()
            await http_task
        finally:
            for task in (retention, history, watcher):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await grpc_server.stop(grace=2.0)
            await asyncio.to_thread(self.supervisor.stop)
            loop = asyncio.get_running_loop()
            for sig in signals:
                loop.remove_signal_handler(sig)

    def _listen(self) -> tuple[TlsFiles | None, list[socket.socket], FeedServer]:
        """TLS files loaded, the HTTP sockets bound and the gRPC port added, before anything
        starts: StartupError (one line) when a file is missing or a port is taken."""
        from pgfeed.grpc_api.server import build_server
        from pgfeed.tls import grpc_credentials, tls_files

        settings = self.settings
        try:
            tls = tls_files(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)
        except ValueError as exc:
            raise StartupError(f"{exc} (check --tls-cert, --tls-key and --tls-client-ca)") from None
        self._warn_about_settings()
        http_sockets = bind_listener("HTTP", settings.http_host, settings.http_port, "--http-port")
        try:
            check_port_free("gRPC", settings.grpc_host, settings.grpc_port, "--grpc-port")
            grpc_server = build_server(self.supervisor, settings, self.metrics)
            address = f"{settings.grpc_host}:{settings.grpc_port}"
            try:
                self.grpc_port = (grpc_server.add_insecure_port(address) if tls is None
                                  else grpc_server.add_secure_port(address, grpc_credentials(tls)))
            except RuntimeError:  # grpcio: "Failed to bind to address …"
                raise StartupError(f"gRPC port {settings.grpc_port} on {settings.grpc_host} cannot "
                                   "be bound (in use?); stop the process holding it, or give this "
                                   "one another --grpc-port") from None
        except BaseException:
            for sock in http_sockets:
                sock.close()
            raise
        return tls, http_sockets, grpc_server

    def _warn_about_settings(self) -> None:
        """Loud lines for settings that look like a store or a lock but are not."""
        settings = self.settings
        if settings.changelog == "memory" and settings.store is None:
            log.warning("changelog = memory: every feed's changes live in this process's memory "
                        "and are LOST when it stops; for tests only (drop --changelog / "
                        "PGFEED_CHANGELOG to keep them in %s)", settings.data_dir)
        if settings.metrics_auth == "read" and not (settings.read_tokens or settings.admin_tokens):
            log.warning("metrics_auth = read, but no read or admin token is configured: /metrics "
                        "stays open")

    def release(self) -> None:
        """Give up the data directory (the supervisor's stop closes the store and its claim)."""
        if self.data_lock is not None:
            self.data_lock.release()
            self.data_lock = None

    def request_stop(self) -> None:
        """Begin the ordered shutdown; a second request stops HTTP without waiting for its clients."""
        self.stop_signal.set()
        if self.http is not None:
            if self.http.should_exit:
                self.http.force_exit = True
            self.http.should_exit = True

    def _handle_signals(self) -> tuple[signal.Signals, ...]:
        """SIGTERM/SIGINT start the ordered shutdown (only the main thread may own signals)."""
        if threading.current_thread() is not threading.main_thread():
            return ()
        loop = asyncio.get_running_loop()
        handled = (signal.SIGTERM, signal.SIGINT)
        for sig in handled:
            loop.add_signal_handler(sig, self.request_stop)
        return handled

    @property
    def http_port(self) -> int | None:
        """The bound HTTP port (useful with ``http_port=0``)."""
        if self.http is None or not self.http.servers:
            return None
        return int(self.http.servers[0].sockets[0].getsockname()[1])

    async def _history_loop(self) -> None:
        """The console's history: a sample of every feed each history_seconds, on a worker thread
        (never a capture thread)."""
        while True:
            await asyncio.to_thread(self.history.sample, self.supervisor, self.metrics.served_total)
            await asyncio.sleep(self.settings.history_seconds)

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.retention_check_seconds)
            await asyncio.to_thread(self.apply_retention)

    def apply_retention(self) -> None:
        """Each feed's retention: first expire the consumers idle past its bound (logged by the
        log), then drop what its age and byte limits allow and no remaining consumer holds."""
        now_us = pg_now_us()
        for name in self.supervisor.names():
            retention = self.supervisor.spec(name).options.retention
            try:
                self.supervisor.prepare_trim(name)
                changelog = self.supervisor.changelog(name)
                idle = age_cutoff(retention.consumer_max_idle_hours, now_us)
                if idle is not None:
                    changelog.expire_consumers(idle)
                dropped = changelog.retain(retention.hours, retention.bytes, now_us)
            except Exception:
                log.exception("retention of feed %s failed", name)
                continue
            if dropped:
                log.info("feed %s: retention dropped %d transactions", name, dropped,
                         extra={"feed": name, "event": "retention_trim", "dropped": dropped})
