"""AsyncFeedClient: the asyncio twin of FeedClient (same methods, awaited; iterators are async)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, Any, Self, TypeVar, overload

import httpx

from pgfeed_client import _http_base as base
from pgfeed_client._debezium import DebeziumPage
from pgfeed_client._http_base import DEFAULT_LIMIT, CursorLike, RetryPolicy
from pgfeed_client._models import Change, Page, TableInfo, TransactionPage
from pgfeed_client._tls import ClientCert, PathLike, http_verify
from pgfeed_client.errors import FeedNotFound

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["AsyncFeedClient"]

Names = str | Iterable[str] | None


_T = TypeVar("_T")


class AsyncFeedClient:
    """Read and administer pgfeed feeds over HTTP from asyncio code; see ``FeedClient``.

    ``transport`` is any ``httpx.AsyncBaseTransport`` (``httpx.MockTransport`` in tests).
    """

    def __init__(self, base_url: str, *, token: str | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, timeout: float = 30.0,
                 retry: RetryPolicy | None = None, headers: dict[str, str] | None = None,
                 ca_bundle: PathLike | None = None, client_cert: ClientCert | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(base_url=self.base_url, transport=transport,
                                       timeout=timeout, headers=base.new_headers(token, headers),
                                       verify=http_verify(ca_bundle, client_cert))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                    json: Any = None, timeout: float | None = None,
                    retry: bool = True) -> httpx.Response:
        delays = self.retry.delays() if retry else iter(())
        while True:
            try:
                return base.check(await self._http.request(
                    method, path, params=params, json=json,
                    timeout=self.timeout if timeout is None else timeout))
            except Exception as exc:  # noqa: BLE001 - retry_delay raises what is not retried
                await asyncio.sleep(base.retry_delay(exc, delays, f"{method} {path}"))

    @overload
    async def _json(self, method: str, path: str, build: Callable[[Any], _T], **kw: Any) -> _T: ...

    @overload
    async def _json(self, method: str, path: str, build: None = None, **kw: Any) -> Any: ...

    async def _json(self, method: str, path: str, build: Callable[[Any], Any] | None = None,
                    **kw: Any) -> Any:
        return base.decode((await self._send(method, path, **kw)).content, build)

    async def page(self, feed: str, after: CursorLike = "earliest", *,
                   limit: int | None = DEFAULT_LIMIT, tables: Names = None, ops: Names = None,
                   wait: float | None = None, to: CursorLike | None = None) -> Page:
        params = base.changes_params(after, limit=limit, tables=tables, ops=ops, wait=wait, to=to)
        return await self._json("GET", base.feed_path(feed, "changes"), Page.from_json,
                                params=params, timeout=self.timeout + (wait or 0))

    async def iter_changes(self, feed: str, after: CursorLike = "earliest", *,
                           tables: Names = None, ops: Names = None, follow: bool = False,
                           limit: int = DEFAULT_LIMIT, wait: float = 30.0) -> AsyncIterator[Change]:
        """Every change after ``after``; see ``FeedClient.iter_changes``."""
        cursor = str(after)
        while True:
            page = await self.page(feed, cursor, limit=limit, tables=tables, ops=ops,
                                   wait=wait if follow else None)
            for change in page.changes:
                yield change
            cursor = page.next
            if not page.has_more and not follow:
                return

    async def debezium_page(self, feed: str, after: CursorLike = "earliest", *,
                            limit: int | None = DEFAULT_LIMIT, tables: Names = None,
                            ops: Names = None, wait: float | None = None,
                            to: CursorLike | None = None) -> DebeziumPage:
        """See ``FeedClient.debezium_page``."""
        params = base.changes_params(after, limit=limit, tables=tables, ops=ops, wait=wait, to=to,
                                     fmt="debezium")
        return await self._json("GET", base.feed_path(feed, "changes"), DebeziumPage.from_json,
                                params=params, timeout=self.timeout + (wait or 0))

    async def transactions(self, feed: str, after: CursorLike = "earliest", *,
                           limit: int | None = DEFAULT_LIMIT) -> TransactionPage:
        params = base.changes_params(after, limit=limit)
        return await self._json("GET", base.feed_path(feed, "transactions"),
                                TransactionPage.from_json, params=params)

    async def head(self, feed: str) -> str:
        page = await self.page(feed, "latest", limit=1)
        return page.head or page.next

    async def cursor_after(self, feed: str, after: CursorLike, changes: int, *,
                           tables: Names = None, ops: Names = None,
                           to: CursorLike | None = None) -> str:
        """See ``FeedClient.cursor_after``."""
        walk = base.Skipping(str(after), changes, to, done=changes <= 0)
        while not walk.done:
            walk.take(await self._json("GET", base.feed_path(feed, "changes"),
                                       params=walk.params(tables, ops)))
        return walk.cursor

    async def splits(self, feed: str, after: CursorLike = "earliest", to: CursorLike = "latest",
                     n: int = 2) -> list[str]:
        body = await self._json("GET", base.feed_path(feed, "splits"),
                                params={"from": str(after), "to": str(to), "n": int(n)})
        return base.split_boundaries(body)

    async def tables(self, feed: str) -> list[TableInfo]:
        return base.table_infos(await self._json("GET", base.feed_path(feed, "tables")))

    async def table_schema(self, feed: str, table: str, at: CursorLike = "latest") -> TableInfo:
        """See ``FeedClient.table_schema``."""
        return TableInfo.from_json(await self._json(
            "GET", base.feed_path(feed, "tables", table, "schema"), params={"at": str(at)}))

    async def table_schema_history(self, feed: str, table: str) -> list[TableInfo]:
        """See ``FeedClient.table_schema_history``."""
        return base.schema_history(await self._json(
            "GET", base.feed_path(feed, "tables", table, "schema", "history")))

    async def read_arrow(self, feed: str, after: CursorLike = "earliest",
                         to: CursorLike = "latest", *, table: str | None = None,
                         tables: Names = None, ops: Names = None,
                         limit: int | None = None) -> pa.Table:
        import pyarrow as pa

        if str(to) == "latest":
            to = await self.head(feed)
        stop = base.resolve_to(to)
        cursor, schema = str(after), None
        batches: list[pa.RecordBatch] = []
        path = base.feed_path(feed, "changes")
        while True:
            params = base.changes_params(cursor, limit=limit, tables=table or tables, ops=ops,
                                         to=to, fmt="arrow")
            page = base.arrow_page(await self._send("GET", path, params=params), cursor)
            schema = page.schema
            batches.extend(page.batches)
            if base.arrow_done(page, cursor, stop):
                return pa.Table.from_batches(batches, schema=schema)
            cursor = page.next

    async def ack(self, feed: str, consumer: str, cursor: CursorLike) -> None:
        await self._send("PUT", base.feed_path(feed, "consumers", consumer),
                         json={"cursor": str(cursor)})

    async def consumer(self, feed: str, name: str) -> str | None:
        try:
            body = await self._json("GET", base.feed_path(feed, "consumers", name))
        except FeedNotFound as exc:
            if base.is_missing_consumer(exc):
                return None
            raise
        return base.consumer_cursor(body)

    async def create_feed(self, name: str, dsn: str, *, tables: Iterable[str] | None = None,
                          all_tables: bool = False, publication: str | None = None,
                          slot: str | None = None,
                          options: dict[str, Any] | None = None) -> dict[str, Any]:
        body = base.feed_create_body(name, dsn, tables, all_tables, publication, slot, options)
        result: dict[str, Any] = await self._json("POST", "/v1/feeds", json=body, retry=False)
        return result

    async def list_feeds(self) -> list[dict[str, Any]]:
        return base.feed_list(await self._json("GET", "/v1/feeds"))

    async def get_feed(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._json("GET", base.feed_path(name))
        return result

    async def sequences(self, feed: str, *, emit: bool = False) -> dict[str, Any]:
        """``FeedClient.sequences``, awaited."""
        result: dict[str, Any] = await self._json("POST" if emit else "GET",
                                                  base.feed_path(feed, "sequences"), retry=not emit)
        return result

    async def pause(self, name: str) -> dict[str, Any]:
        return await self._json("POST", base.feed_path(name, "pause"), retry=False) or {}

    async def resume(self, name: str) -> dict[str, Any]:
        return await self._json("POST", base.feed_path(name, "resume"), retry=False) or {}

    async def delete_feed(self, name: str) -> None:
        await self._send("DELETE", base.feed_path(name), retry=False)
