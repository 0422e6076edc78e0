"""What the sync and async HTTP clients share: query building, error mapping, retry policy, Arrow
decoding. No I/O here; ``_http_sync`` and ``_http_async`` do the requests.
"""

from __future__ import annotations

import gc
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from pgfeed_client._cursor import Cursor, parse_cursor
from pgfeed_client._headers import (
    DEFAULT_LIMIT,
    HAS_MORE_HEADER,
    HEAD_HEADER,
    MAX_LIMIT,
    NEXT_HEADER,
)
from pgfeed_client._json import loads_page
from pgfeed_client._models import TableInfo
from pgfeed_client.errors import ClientError, TransportFailed, error_from_response

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "DEFAULT_LIMIT",
    "NEXT_HEADER",
    "ArrowPage",
    "CursorLike",
    "RetryPolicy",
    "Skipping",
    "arrow_page",
    "changes_params",
    "check",
    "csv",
    "decode",
    "done_after",
    "feed_path",
    "is_retryable",
    "new_headers",
    "retry_delay",
]

CursorLike = str | Cursor
_RETRY_STATUSES = frozenset({502, 503, 504})


def csv(value: str | Iterable[str] | None) -> str | None:
    """``["public.a", "public.b"]`` -> ``"public.a,public.b"`` (a string passes through)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value or None
    joined = ",".join(value)
    return joined or None


def feed_path(feed: str, *rest: str) -> str:
    from urllib.parse import quote

    return "/".join(["/v1/feeds", quote(feed, safe=""), *(quote(r, safe="") for r in rest)])


def changes_params(after: CursorLike, *, limit: int | None = None,
                   tables: str | Iterable[str] | None = None,
                   ops: str | Iterable[str] | None = None, wait: float | None = None,
                   to: CursorLike | None = None, fmt: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"after": str(after)}
    if limit is not None:
        params["limit"] = int(limit)
    if (t := csv(tables)) is not None:
        params["tables"] = t
    if (o := csv(ops)) is not None:
        params["ops"] = o
    if wait:
        params["wait"] = f"{wait:g}"
    if to is not None:
        params["to"] = str(to)
    if fmt is not None:
        params["format"] = fmt
    return params


def new_headers(token: str | None, extra: dict[str, str] | None) -> dict[str, str]:
    headers = {"Accept": "application/json", "User-Agent": "pgfeed-client/0.1"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    headers.update(extra or {})
    return headers


def decode(content: bytes, build: Callable[[Any], Any] | None = None) -> Any:
    """A JSON body (numbers exact: ``_json.loads_page``), passed through ``build`` (a model's ``from_json``) if given; None for
    an empty body.

    CPython's cyclic GC is paused meanwhile: a 10,000-change page is ~150,000 new containers,
    enough to trigger a full collection every two or three pages, each rescanning the half-built
    page; that was a third of a paging reader's time (bench/serve.py). Parsed JSON and the models
    built from it hold no reference cycles, so the collector has nothing to find there."""
    if not content:
        return None
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        body = loads_page(content)
        return body if build is None else build(body)
    finally:
        if paused:
            gc.enable()


def check(response: httpx.Response) -> httpx.Response:
    """Return the response if it succeeded, else raise the typed error its body describes."""
    if response.is_success:
        return response
    try:
        body = response.json()
    except ValueError:
        body = None
    raise error_from_response(response.status_code, body, response.text[:500] if body is None else "")


def is_retryable(exc: BaseException) -> bool:
    """Transport failures and gateway/unavailable answers are worth a retry; the rest is final."""
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, ClientError) and exc.status in _RETRY_STATUSES


def retry_delay(exc: Exception, delays: Iterator[float], what: str) -> float:
    """How long to wait before sending ``what`` (``METHOD path``) again after ``exc``; raises when
    it is not to be sent again: ``exc`` itself when final, or when the retries are spent (a
    transport failure then as TransportFailed)."""
    if not is_retryable(exc):
        raise exc
    delay = next(delays, None)
    if delay is None:
        if isinstance(exc, httpx.TransportError):
            raise TransportFailed(f"{what}: {exc!r}", code="transport") from exc
        raise exc
    return delay


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded exponential backoff with jitter: ``retries`` attempts after the first, each delay
    ``initial * 2**n`` capped at ``maximum`` seconds."""

    retries: int = 8
    initial: float = 0.1
    maximum: float = 5.0

    def delays(self) -> Iterator[float]:
        for n in range(self.retries):
            base = min(self.maximum, self.initial * (2 ** n))
            yield base * (0.5 + random.random() / 2)


def done_after(next_cursor: str, to: Cursor | None) -> bool:
    """Has a reader at ``next_cursor`` consumed everything up to ``to``?"""
    if to is None:
        return False
    parsed = parse_cursor(next_cursor)
    return parsed != "latest" and parsed >= to


@dataclass(slots=True)
class ArrowPage:
    """One ``format=arrow`` answer: its batches, the cursor after it and the paging hints."""

    schema: pa.Schema
    batches: list[pa.RecordBatch]
    next: str
    head: str | None
    has_more: bool | None

    @property
    def num_rows(self) -> int:
        return sum(b.num_rows for b in self.batches)


def arrow_page(response: httpx.Response, after: str,
               body: bytes | memoryview | None = None) -> ArrowPage:
    """Decode an Arrow IPC stream answer (``body``, else the response's content) and its
    ``PgFeed-*`` headers."""
    import pyarrow as pa

    reader = pa.ipc.open_stream(response.content if body is None else body)
    batches = [b for b in reader if b.num_rows]
    more = response.headers.get(HAS_MORE_HEADER)
    return ArrowPage(
        schema=reader.schema, batches=batches,
        next=response.headers.get(NEXT_HEADER, after), head=response.headers.get(HEAD_HEADER),
        has_more=None if more is None else more.strip().lower() in ("1", "true", "yes"),
    )


def arrow_done(page: ArrowPage, after: str, to: Cursor | None) -> bool:
    """Stop paging an Arrow read: reached ``to``, told there is no more, or no progress."""
    if done_after(page.next, to):
        return True
    if page.has_more is False and to is None:
        return True
    return page.num_rows == 0 and page.next == after


@dataclass(slots=True)
class Skipping:
    """``cursor_after``'s walk over ``format=count`` pages: on from ``cursor`` until ``left``
    changes (those the filters keep) are passed, or the log or ``to`` ends first. A page holds
    at most ``limit`` kept changes, so it never passes more than are left."""

    cursor: str
    left: int
    to: CursorLike | None = None
    done: bool = False

    def params(self, tables: str | Iterable[str] | None,
               ops: str | Iterable[str] | None) -> dict[str, Any]:
        return changes_params(self.cursor, limit=min(self.left, MAX_LIMIT), tables=tables,
                              ops=ops, to=self.to, fmt="count")

    def take(self, body: dict[str, Any]) -> None:
        """One answer: ``{"count", "next", "has_more", ...}``."""
        nxt = str(body["next"])
        self.left -= int(body["count"])
        self.done = (self.left <= 0 or nxt == self.cursor or not body["has_more"]
                     or done_after(nxt, resolve_to(self.to)))
        self.cursor = nxt


def resolve_to(to: CursorLike | None) -> Cursor | None:
    if to is None:
        return None
    if isinstance(to, Cursor):
        return to
    parsed = parse_cursor(to)
    return None if parsed == "latest" else parsed


# -- answer shapes ---------------------------------------------------------------------------------

def split_boundaries(body: dict[str, Any]) -> list[str]:
    """``/splits`` answer (``{"boundaries": [...]}``) -> its ascending boundary cursors."""
    return [str(b) for b in body["boundaries"]]


def table_infos(body: dict[str, Any]) -> list[TableInfo]:
    """``/tables`` answer (``{"tables": [...]}``) -> each table's newest version."""
    return [TableInfo.from_json(t) for t in body["tables"]]


def schema_history(body: dict[str, Any]) -> list[TableInfo]:
    """``/schema/history`` answer -> every version, oldest first."""
    return [TableInfo.from_json({"schema": body["schema"], "table": body["table"], **v})
            for v in body["versions"]]


def consumer_cursor(body: dict[str, Any]) -> str:
    """A consumer's answer -> its acknowledged cursor."""
    return str(body["cursor"])


def is_missing_consumer(exc: ClientError) -> bool:
    """A 404 about the consumer (the feed exists) rather than about the feed."""
    return "consumer" in exc.code.lower() or "consumer" in exc.message.lower()


def feed_create_body(name: str, dsn: str, tables: Iterable[str] | None, all_tables: bool,
                     publication: str | None, slot: str | None,
                     options: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "dsn": dsn, "publication": publication, "slot": slot}
    if all_tables:
        body["all_tables"] = True
    else:
        body["tables"] = list(tables or ())
    if options:
        body["options"] = options
    return body


def feed_list(body: dict[str, Any]) -> list[dict[str, Any]]:
    """``GET /v1/feeds`` answer (``{"feeds": [...]}``) -> each feed's status."""
    return list(body["feeds"])
