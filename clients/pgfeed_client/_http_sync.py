"""FeedClient: the synchronous HTTP client (httpx), with paging, long-poll tailing and resume."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Self, TypeVar, overload

import httpx

from pgfeed_client import _http_base as base
from pgfeed_client._bulk import BulkReader
from pgfeed_client._debezium import DebeziumPage
from pgfeed_client._http_base import DEFAULT_LIMIT, CursorLike, RetryPolicy
from pgfeed_client._models import Change, Page, TableInfo, TransactionPage
from pgfeed_client._tls import ClientCert, PathLike, http_verify
from pgfeed_client.errors import TransportFailed

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FeedClient"]

Names = str | Iterable[str] | None


_T = TypeVar("_T")


class FeedClient:
    """Read and administer pgfeed feeds over HTTP.

    ``transport`` is any ``httpx.BaseTransport`` (``httpx.MockTransport`` in tests). Reads retry
    transport errors and 502/503/504 with bounded backoff (``retry``) and resume from the last
    cursor they reached, so a restarted server costs neither a gap nor a duplicate.
    """

    def __init__(self, base_url: str, *, token: str | None = None,
                 transport: httpx.BaseTransport | None = None, timeout: float = 30.0,
                 retry: RetryPolicy | None = None, headers: dict[str, str] | None = None,
                 ca_bundle: PathLike | None = None, client_cert: ClientCert | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        # ca_bundle: PEM CAs to trust for https (a private CA); client_cert: (cert, key) PEM
        self._verify = http_verify(ca_bundle, client_cert)
        self._http = httpx.Client(base_url=self.base_url, transport=transport, timeout=timeout,
                                  headers=base.new_headers(token, headers), verify=self._verify)
        self._bulk = BulkReader.usable(self.base_url, custom_transport=transport is not None)

    # -- plumbing ---------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, method: str, path: str, *, params: dict[str, Any] | None = None,
              json: Any = None, timeout: float | None = None, retry: bool = True) -> httpx.Response:
        return self._retrying(f"{method} {path}", lambda: base.check(self._http.request(
            method, path, params=params, json=json,
            timeout=self.timeout if timeout is None else timeout)), retry)

    def _retrying(self, what: str, call: Callable[[], _T], retry: bool = True) -> _T:
        """``call()``, again after transport errors and 502/503/504 (``self.retry``)."""
        delays = self.retry.delays() if retry else iter(())
        while True:
            try:
                return call()
            except Exception as exc:  # noqa: BLE001 - retry_delay raises what is not retried
                time.sleep(base.retry_delay(exc, delays, what))

    @overload
    def _json(self, method: str, path: str, build: Callable[[Any], _T], **kw: Any) -> _T: ...

    @overload
    def _json(self, method: str, path: str, build: None = None, **kw: Any) -> Any: ...

    def _json(self, method: str, path: str, build: Callable[[Any], Any] | None = None,
              **kw: Any) -> Any:
        return base.decode(self._send(method, path, **kw).content, build)

    # -- reading ----------------------------------------------------------------------------

    def page(self, feed: str, after: CursorLike = "earliest", *, limit: int | None = DEFAULT_LIMIT,
             tables: Names = None, ops: Names = None, wait: float | None = None,
             to: CursorLike | None = None) -> Page:
        """One page of ``/changes`` after ``after`` (long-polling up to ``wait`` seconds)."""
        params = base.changes_params(after, limit=limit, tables=tables, ops=ops, wait=wait, to=to)
        timeout = self.timeout + (wait or 0)
        return self._json("GET", base.feed_path(feed, "changes"), Page.from_json, params=params,
                          timeout=timeout)

    def iter_changes(self, feed: str, after: CursorLike = "earliest", *, tables: Names = None,
                     ops: Names = None, follow: bool = False, limit: int = DEFAULT_LIMIT,
                     wait: float = 30.0) -> Iterator[Change]:
        """Every change after ``after``, page by page. Stops when caught up unless ``follow``,
        which then long-polls (``wait`` seconds a request) forever. Transport errors are
        retried with backoff, resuming from the last cursor reached."""
        cursor = str(after)
        while True:
            page = self.page(feed, cursor, limit=limit, tables=tables, ops=ops,
                             wait=wait if follow else None)
            yield from page.changes
            cursor = page.next
            if not page.has_more and not follow:
                return

    def debezium_page(self, feed: str, after: CursorLike = "earliest", *,
                      limit: int | None = DEFAULT_LIMIT, tables: Names = None, ops: Names = None,
                      wait: float | None = None, to: CursorLike | None = None) -> DebeziumPage:
        """One page of ``/changes?format=debezium``: Debezium envelopes (docs/debezium.md)."""
        params = base.changes_params(after, limit=limit, tables=tables, ops=ops, wait=wait, to=to,
                                     fmt="debezium")
        return self._json("GET", base.feed_path(feed, "changes"), DebeziumPage.from_json,
                          params=params, timeout=self.timeout + (wait or 0))

    def iter_debezium(self, feed: str, after: CursorLike = "earliest", *,
                      to: CursorLike | None = None, tables: Names = None, ops: Names = None,
                      follow: bool = False, limit: int = DEFAULT_LIMIT,
                      wait: float = 30.0) -> Iterator[dict[str, Any]]:
        """Every change after ``after`` (up to ``to``) as Debezium envelopes; ``follow`` as in
        ``iter_changes``."""
        cursor = str(after)
        while True:
            page = self.debezium_page(feed, cursor, limit=limit, tables=tables, ops=ops, to=to,
                                      wait=wait if follow else None)
            yield from page.envelopes
            cursor = page.next
            if not page.has_more and (not follow or to is not None):
                return

    def transactions(self, feed: str, after: CursorLike = "earliest", *,
                     limit: int | None = DEFAULT_LIMIT) -> TransactionPage:
        """One page of whole transactions after ``after``."""
        params = base.changes_params(after, limit=limit)
        return self._json("GET", base.feed_path(feed, "transactions"), TransactionPage.from_json,
                          params=params)

    def head(self, feed: str) -> str:
        """The commit LSN of the newest durable transaction (``0/0`` when the log is empty)."""
        page = self.page(feed, "latest", limit=1)
        return page.head or page.next

    def cursor_after(self, feed: str, after: CursorLike, changes: int, *, tables: Names = None,
                     ops: Names = None, to: CursorLike | None = None) -> str:
        """The cursor after the next ``changes`` changes past ``after`` (those ``tables`` and
        ``ops`` keep), or where the log or ``to`` ends first, without reading the changes
        (``format=count`` pages: the server loads no values)."""
        walk = base.Skipping(str(after), changes, to, done=changes <= 0)
        while not walk.done:
            walk.take(self._json("GET", base.feed_path(feed, "changes"),
                                 params=walk.params(tables, ops)))
        return walk.cursor

    def splits(self, feed: str, after: CursorLike = "earliest", to: CursorLike = "latest",
               n: int = 2) -> list[str]:
        """LSN boundaries cutting ``(after, to]`` into about ``n`` parts of equal change counts:
        ``n + 1`` ascending cursors (fewer when the range holds fewer transactions)."""
        body = self._json("GET", base.feed_path(feed, "splits"),
                          params={"from": str(after), "to": str(to), "n": int(n)})
        return base.split_boundaries(body)

    def tables(self, feed: str) -> list[TableInfo]:
        """The relations the feed has seen, newest schema version of each."""
        return base.table_infos(self._json("GET", base.feed_path(feed, "tables")))

    def table_schema(self, feed: str, table: str, at: CursorLike = "latest") -> TableInfo:
        """The version of ``table``'s schema in force at ``at`` (``change.cursor``: the version
        that change was decoded with, ``change.table_version``), types with their modifiers."""
        return TableInfo.from_json(self._json(
            "GET", base.feed_path(feed, "tables", table, "schema"), params={"at": str(at)}))

    def table_schema_history(self, feed: str, table: str) -> list[TableInfo]:
        """Every version of ``table``'s schema, oldest first (``/schema/history``): each with its
        ``version``, ``valid_from`` and columns (with ``previous_name``/``missing_value`` where
        the server knows them)."""
        return base.schema_history(self._json(
            "GET", base.feed_path(feed, "tables", table, "schema", "history")))

    def read_arrow(self, feed: str, after: CursorLike = "earliest", to: CursorLike = "latest", *,
                   table: str | None = None, tables: Names = None, ops: Names = None,
                   limit: int | None = None) -> pa.Table:
        """All changes in ``(after, to]`` as one Arrow table (typed columns when ``table`` names
        a single table), following ``PgFeed-Next`` from page to page."""
        import pyarrow as pa

        schema = None
        batches: list[pa.RecordBatch] = []
        for page in self.iter_arrow_pages(feed, after, to, table=table, tables=tables, ops=ops,
                                          limit=limit):
            schema = page.schema
            batches.extend(page.batches)
        if schema is None:
            raise TransportFailed("no Arrow answer", code="empty")
        return pa.Table.from_batches(batches, schema=schema)

    def iter_arrow_pages(self, feed: str, after: CursorLike = "earliest",
                         to: CursorLike | None = "latest", *, table: str | None = None,
                         tables: Names = None, ops: Names = None,
                         limit: int | None = None,
                         first_limit: int | None = None) -> Iterator[base.ArrowPage]:
        """The ``format=arrow`` pages covering ``(after, to]``; ``to="latest"`` is resolved to the
        head first, so the read ends even while the feed keeps growing. ``first_limit``: the
        first page asks for that many changes, each next one for twice as many, up to ``limit``
        (a reader has rows to work on soon, while the server reads the larger pages)."""
        if to is not None and str(to) == "latest":
            to = self.head(feed)
        stop = base.resolve_to(to)
        cursor = str(after)
        path = base.feed_path(feed, "changes")
        page_limit = limit if first_limit is None or limit is None else min(first_limit, limit)
        bulk = BulkReader(self.base_url, self._http.headers, self._verify, self.timeout) \
            if self._bulk else None
        try:
            while True:
                params = base.changes_params(cursor, limit=page_limit, tables=table or tables,
                                             ops=ops, to=to, fmt="arrow")
                if bulk is None:
                    page = base.arrow_page(self._send("GET", path, params=params), cursor)
                else:
                    response, body = self._retrying(
                        f"GET {path}", lambda: _checked(bulk.get(path, params)))
                    page = base.arrow_page(response, cursor, body)
                if page_limit is not None and limit is not None:
                    page_limit = min(2 * page_limit, limit)
                yield page
                if base.arrow_done(page, cursor, stop):
                    return
                cursor = page.next
        finally:
            if bulk is not None:
                bulk.close()

    # -- consumers --------------------------------------------------------------------------

    def ack(self, feed: str, consumer: str, cursor: CursorLike) -> None:
        """Acknowledge everything up to ``cursor`` for the named consumer (retention moves on)."""
        self._send("PUT", base.feed_path(feed, "consumers", consumer), json={"cursor": str(cursor)})

    def consumer(self, feed: str, name: str) -> str | None:
        """The named consumer's acknowledged cursor, or None if it has never acknowledged."""
        from pgfeed_client.errors import FeedNotFound

        try:
            body = self._json("GET", base.feed_path(feed, "consumers", name))
        except FeedNotFound as exc:
            if base.is_missing_consumer(exc):
                return None
            raise
        return base.consumer_cursor(body)

    # -- admin ------------------------------------------------------------------------------

    def create_feed(self, name: str, dsn: str, *, tables: Iterable[str] | None = None,
                    all_tables: bool = False, publication: str | None = None,
                    slot: str | None = None, options: dict[str, Any] | None = None) -> dict[str, Any]:
        body = base.feed_create_body(name, dsn, tables, all_tables, publication, slot, options)
        result: dict[str, Any] = self._json("POST", "/v1/feeds", json=body, retry=False)
        return result

    def list_feeds(self) -> list[dict[str, Any]]:
        return base.feed_list(self._json("GET", "/v1/feeds"))

    def get_feed(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", base.feed_path(name))
        return result

    def sequences(self, feed: str, *, emit: bool = False) -> dict[str, Any]:
        """``GET /v1/feeds/{feed}/sequences``: the feed's tables' sequences with ``read_at``,
        the position they cover (for a cutover to a mirror); ``emit``: ``POST``, which also
        writes them into the feed as a ``pgfeed.sequences`` message (admin)."""
        result: dict[str, Any] = self._json("POST" if emit else "GET",
                                            base.feed_path(feed, "sequences"), retry=not emit)
        return result

    def pause(self, name: str) -> dict[str, Any]:
        return self._json("POST", base.feed_path(name, "pause"), retry=False) or {}

    def resume(self, name: str) -> dict[str, Any]:
        return self._json("POST", base.feed_path(name, "resume"), retry=False) or {}

    def delete_feed(self, name: str) -> None:
        self._send("DELETE", base.feed_path(name), retry=False)

    def start_backfill(self, feed: str, tables: Iterable[str], *, chunk_rows: int | None = None,
                       parallel: int | None = None) -> dict[str, Any]:
        """``POST /v1/feeds/{feed}/backfills`` (admin): the started backfill, with its ``id``."""
        body: dict[str, Any] = {"tables": list(tables)}
        if chunk_rows is not None:
            body["chunk_rows"] = chunk_rows
        if parallel is not None:
            body["parallel"] = parallel
        result: dict[str, Any] = self._json("POST", base.feed_path(feed, "backfills"), json=body,
                                            retry=False)
        return result

    def backfills(self, feed: str) -> list[dict[str, Any]]:
        result: dict[str, Any] = self._json("GET", base.feed_path(feed, "backfills"))
        return list(result["backfills"])

    def backfill(self, feed: str, backfill_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("GET", base.feed_path(feed, "backfills", backfill_id))
        return result

    def cancel_backfill(self, feed: str, backfill_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._json("DELETE", base.feed_path(feed, "backfills", backfill_id),
                                            retry=False)
        return result

    def cancel_backfill_table(self, feed: str, backfill_id: str, table: str) -> dict[str, Any]:
        """``DELETE /v1/feeds/{feed}/backfills/{id}/tables/{table}``: stop one table; the
        backfill's other tables go on."""
        result: dict[str, Any] = self._json(
            "DELETE", base.feed_path(feed, "backfills", backfill_id, "tables", table), retry=False)
        return result

    def retry_backfill_table(self, feed: str, backfill_id: str, table: str) -> dict[str, Any]:
        """``POST /v1/feeds/{feed}/backfills/{id}/tables/{table}/retry``: read a failed or
        cancelled table again from its last stored key."""
        result: dict[str, Any] = self._json(
            "POST", base.feed_path(feed, "backfills", backfill_id, "tables", table, "retry"),
            retry=False)
        return result


def _checked(answer: tuple[httpx.Response, memoryview]) -> tuple[httpx.Response, memoryview]:
    base.check(answer[0])
    return answer
