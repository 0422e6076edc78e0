"""Composition root: the supervisor, the HTTP and gRPC servers and retention, started and stopped in order.

Shutdown order on SIGTERM/SIGINT: stop accepting (HTTP, gRPC graceful), then stop captures (final
feedback, slots' connections closed), then close the change logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import uvicorn

from service.config import Settings
from service.feeds.supervisor import Supervisor

log = logging.getLogger("pgfeed")


class Runtime:
    def __init__(self, settings: Settings, supervisor: Supervisor | None = None) -> None:
        self.settings = settings
        self.supervisor = supervisor or Supervisor(settings.data_dir, changelog_kind=settings.changelog)
        self.http: uvicorn.Server | None = None
        self.grpc_port: int | None = None
        self.started = asyncio.Event()

    async def serve(self) -> None:
        from service.grpc_api.server import build_server
        from service.http_api.app import create_app

        settings = self.settings
        await asyncio.to_thread(self.supervisor.start)
        app = create_app(self.supervisor, settings)
        self.http = uvicorn.Server(uvicorn.Config(app, host=settings.http_host, port=settings.http_port,
                                                  log_level=settings.log_level.lower(), access_log=False,
                                                  lifespan="on"))
        grpc_server = build_server(self.supervisor, settings)
        self.grpc_port = grpc_server.add_insecure_port(f"{settings.grpc_host}:{settings.grpc_port}")
        await grpc_server.start()
        retention = asyncio.create_task(self._retention_loop())
        log.info("gRPC on %s:%s", settings.grpc_host, self.grpc_port)
        try:
            http_task = asyncio.create_task(self.http.serve())
            while not self.http.started and not http_task.done():
                await asyncio.sleep(0.02)
            self.started.set()
            await http_task
        finally:
            retention.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await retention
            await grpc_server.stop(grace=2.0)
            await asyncio.to_thread(self.supervisor.stop)

    def request_stop(self) -> None:
        if self.http is not None:
            self.http.should_exit = True

    @property
    def http_port(self) -> int | None:
        """The bound HTTP port (useful with ``http_port=0``)."""
        if self.http is None or not self.http.servers:
            return None
        return int(self.http.servers[0].sockets[0].getsockname()[1])

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.retention_check_seconds)
            await asyncio.to_thread(self.apply_retention)

    def apply_retention(self) -> None:
        now_us = int((time.time() - 946_684_800) * 1e6)
        for name in self.supervisor.names():
            retention = self.supervisor.spec(name).options.retention
            try:
                dropped = self.supervisor.changelog(name).retain(retention.hours, retention.bytes, now_us)
            except Exception:
                log.exception("retention of feed %s failed", name)
                continue
            if dropped:
                log.info("feed %s: retention dropped %d transactions", name, dropped)
