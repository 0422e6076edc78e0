"""Caught-up long-polls answered before FastAPI.

A subscriber that follows a feed's head asks for ``/changes`` once per commit, and FastAPI's
work for each of those requests (its middleware stack, routing through every route, dependency
injection, query validation, the Response object) costs more than the page, which the shared
tail already holds encoded. The application (``app.py``) asks this fast path first, ahead of its
middleware; it recognises the one request shape the tail serves — ``GET
/v1/feeds/{feed}/changes`` with only ``after`` (an LSN), ``limit``, ``wait`` and ``format=json``, a
granted token, and a cursor the tail covers — and answers it with ``serve_page``, the function
the route calls, so the bytes and headers are the route's. Everything else, including every
request it has the least doubt about (an unusual spelling of a number, a repeated parameter, a
missing token), goes to the application untouched, which gives the contract's answer or error.
"""

from __future__ import annotations

import re
import time
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from pgfeed.errors import PgfeedError
from pgfeed.http_api.errors import ApiError, answer_for
from pgfeed.http_api.middleware import RouteLatency, SentStatus, answer_unexpected
from pgfeed.http_api.paging import MAX_CURSOR_LENGTH, Answer, PageRequest, serve_page
from pgfeed.metrics import Metrics
from pgfeed_client._cursor import Cursor, CursorError, parse_cursor
from pgfeed_client._headers import DEFAULT_LIMIT

__all__ = ["TailFastPath"]

_PATH = re.compile(r"/v1/feeds/([^/]{1,200})/changes")
_INT = re.compile(r"[0-9]{1,6}")
_SECONDS = re.compile(r"[0-9]{1,2}(\.[0-9]{1,6})?")


class TailFastPath:
    """Asked by the application before its middleware stack; measures what it answers itself,
    under the route's template, and answers an unexpected error as the middleware would."""

    def __init__(self, state: Any, *, route: object, max_limit: int, max_wait: float) -> None:
        self.state = state  # the application's state: supervisor, auth, metrics, stop signal
        self.route = route  # the /changes route, for the latency metric's label
        self.max_limit = max_limit
        self.max_wait = max_wait
        self._counters_of: dict[str, tuple[Any, Any]] = {}
        self._latency = RouteLatency(state.metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Answer an HTTP request if it is a caught-up long-poll the tail covers (True); leave
        anything else to the application (False)."""
        if scope["method"] != "GET":
            return False
        match = _PATH.fullmatch(scope["path"])
        if match is None:
            return False
        start = time.perf_counter()
        sent = SentStatus(send)
        try:
            answer = await self._page(scope, match[1])
            if answer is None:
                return False
            await answer(scope, receive, sent)
        except Exception:
            await answer_unexpected(scope, receive, send, started=sent.status != 0)
            sent.status = sent.status or 500
        scope["route"] = self.route
        self._latency.observe(scope, time.perf_counter() - start, sent.status)
        return True

    async def _page(self, scope: Scope, feed: str) -> ASGIApp | None:
        """The answer to the request if it is a caught-up long-poll the tail covers; None
        otherwise."""
        request = self._request(scope["query_string"])
        if request is None:
            return None
        state = self.state
        if not state.auth.allows(_header(scope, b"authorization"), "read"):
            return None
        try:
            served = state.supervisor.served(feed)
        except PgfeedError:  # unknown feed: the route's 404
            return None
        assert isinstance(request.after, Cursor)
        if not served.tail().may_answer(request.after):
            return None
        try:
            out = await serve_page(served, request, state.read_ahead, state.stop)
        except (ApiError, PgfeedError, CursorError) as exc:
            return answer_for(exc)
        answers, served = self._counters(feed)
        answers.inc()
        if out.change_count:
            served.inc(out.change_count)
        return _Sent(out)

    def _counters(self, feed: str) -> tuple[Any, Any]:
        """The feed's answer and served-changes counters (a ``labels`` lookup costs ~1.5 µs,
        twice a request; label sets are never removed, so keeping them is safe)."""
        counters = self._counters_of.get(feed)
        if counters is None:
            metrics: Metrics = self.state.metrics
            counters = self._counters_of[feed] = (
                metrics.tail_answers.labels(feed=feed),
                metrics.served_changes.labels(feed=feed, surface="http"))
        return counters

    def _request(self, query: bytes) -> PageRequest | None:
        """The page request, when the query is one the fast path takes in its plainest spelling."""
        params: dict[str, str] = {}
        for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            if name in params or name not in ("after", "limit", "wait", "format"):
                return None
            params[name] = value
        if params.get("format", "json") != "json":
            return None
        limit, wait = params.get("limit", str(DEFAULT_LIMIT)), params.get("wait", "0")
        after = params.get("after")
        if after is None or len(after) > MAX_CURSOR_LENGTH or not _INT.fullmatch(limit) \
                or not _SECONDS.fullmatch(wait):
            return None
        try:
            cursor = parse_cursor(after)
        except CursorError:
            return None
        if not isinstance(cursor, Cursor) or cursor.seq is not None:
            return None
        count, seconds = int(limit), float(wait)
        if not (1 <= count <= self.max_limit and seconds <= self.max_wait):
            return None
        return PageRequest(after=cursor, limit=count, wait=seconds)


class _Sent:
    """A page as the route's Response would send it: its headers, then length and type."""

    __slots__ = ("out",)

    def __init__(self, out: Answer) -> None:
        self.out = out

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        out = self.out
        headers = [(k.lower().encode(), v.encode()) for k, v in out.headers.items()]
        headers += [(b"content-length", str(len(out.body)).encode()),
                    (b"content-type", out.media_type.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": out.body})
        if out.read_next is not None:
            await out.read_next()


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None
