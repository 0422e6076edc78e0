"""Pure ASGI middleware: request latency by route template, and the last-resort error answer
(an unexpected exception becomes a 500 with the contract's JSON, never a stack trace)."""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pgfeed.http_api.errors import error_response
from pgfeed.metrics import Metrics

log = logging.getLogger("pgfeed.http")


class RouteLatency:
    """The request latency histogram, observed under each request's route template, and the
    answers counted by route template and status."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._children: dict[str, Any] = {}  # endpoint -> its histogram
        self._answers: dict[tuple[str, int], Any] = {}  # (endpoint, status) -> its counter

    def observe(self, scope: Scope, seconds: float, status: int) -> None:
        route = scope.get("route")
        endpoint = getattr(route, "path", None) or "unmatched"
        latency = self._children.get(endpoint)
        if latency is None:  # a ``labels`` lookup costs ~1.5 µs; label sets are never removed
            latency = self._children[endpoint] = self.metrics.request_latency.labels(
                surface="http", endpoint=endpoint)
        latency.observe(seconds)
        answers = self._answers.get((endpoint, status))
        if answers is None:
            answers = self._answers[(endpoint, status)] = self.metrics.requests.labels(
                surface="http", endpoint=endpoint, code=str(status))
        answers.inc()


class SentStatus:
    """``send``, remembering the status of the answer it began (0: none yet)."""

    __slots__ = ("send", "status")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.status = 0

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        await self.send(message)


async def answer_unexpected(scope: Scope, receive: Receive, send: Send, *, started: bool) -> None:
    """(In an ``except`` block.) Log the exception; answer 500 unless the answer has begun."""
    log.exception("unexpected error answering %s %s", scope.get("method"), scope.get("path"))
    if not started:
        response = error_response(500, "internal_error",
                                  "internal error; the service log has the details")
        await response(scope, receive, send)


class ObserveMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.latency = RouteLatency(metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        sent = SentStatus(send)
        try:
            await self.app(scope, receive, sent)
        except Exception:
            await answer_unexpected(scope, receive, send, started=sent.status != 0)
            sent.status = sent.status or 500
        finally:
            self.latency.observe(scope, time.perf_counter() - start, sent.status)
