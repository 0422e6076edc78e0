"""Reading a feed: ``/changes`` and ``/transactions`` pages, ``/splits``, ``/tables`` and a
table's schema at a position (``/tables/{table}/schema``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query
from starlette.background import BackgroundTask
from starlette.responses import Response

from pgfeed.decoding.model import Op
from pgfeed.decoding.values import load_value
from pgfeed.encoding import ARROW_MEDIA_TYPE, JSON_MEDIA_TYPE
from pgfeed.encoding.to_json import dumps
from pgfeed.feeds.notify import StopSignal
from pgfeed.feeds.reader import FeedReader
from pgfeed.feeds.serving import SCAN_CHANGES
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.http_api.deps import MetricsDep, ReadAheadDep, ReadScope, StopDep, SupervisorDep
from pgfeed.http_api.errors import ApiError
from pgfeed.http_api.paging import (
    MAX_CURSOR_LENGTH,
    Answer,
    PageRequest,
    parse_cursor_param,
    parse_ops_param,
    parse_tables,
    serve_page,
    within_head,
)
from pgfeed.http_api.readahead import ReadAhead
from pgfeed.http_api.schemas import (
    ChangesCount,
    ChangesPage,
    ErrorBody,
    SplitsOut,
    TableSchemaHistoryOut,
    TableSchemaOut,
    TablesOut,
    TransactionsPage,
)
from pgfeed.http_api.schemas_debezium import DebeziumChangesPage
from pgfeed.metrics import Metrics
from pgfeed_client._cursor import CURSOR_PATTERN, Cursor, format_lsn
from pgfeed_client._headers import (
    DEFAULT_LIMIT,
    HAS_MORE_HEADER,
    HEAD_HEADER,
    MAX_LIMIT,
    NEXT_HEADER,
)

router = APIRouter(prefix="/v1/feeds", tags=["reading"], dependencies=[ReadScope])

MAX_WAIT = 60.0
MAX_TRANSACTIONS = 10_000
MAX_SPLITS = 1000
CHANGES_PATH = "/v1/feeds/{feed}/changes"  # also answered by http_api.fastpath (caught-up polls)

FeedName = Annotated[str, Path(min_length=1, max_length=200, description="The feed's name")]
# Cursor parameters document their grammar and length; parse_cursor_param checks both, so that a
# malformed cursor of any length is answered with the expected form (not a generic length error).
_CURSOR_DOC = {"pattern": CURSOR_PATTERN, "maxLength": MAX_CURSOR_LENGTH}
_OP_NAMES = [op.value for op in Op]  # every op a filter takes, `read` (backfills) included
_OP = f"({'|'.join(_OP_NAMES)})"
_OPS_DOC = {"items": {"type": "string", "pattern": f"^{_OP}(,{_OP})*$"}}
# A name needs a character Python's ``str.strip`` keeps: ECMAScript's ``\s`` (what clients and
# schemathesis read the pattern with) leaves out \x1c-\x1f and \x85, which ``strip`` removes.
_NAME_CHAR = r"[^,\s\x1c-\x1f\x85]"
_TABLES_DOC = {"items": {"type": "string", "maxLength": 200,
                         "pattern": rf"^[^,]*{_NAME_CHAR}[^,]*(,[^,]*{_NAME_CHAR}[^,]*)*$"}}
After = Annotated[str, Query(json_schema_extra=_CURSOR_DOC, description="Cursor: `16/B374D848`, "
                             "`16/B374D848:41`, `earliest` or `latest`; the page starts after it")]
Wait = Annotated[float, Query(ge=0, le=MAX_WAIT, allow_inf_nan=False,
                              description="Long-poll: when nothing is there yet, wait up to this "
                                          "many seconds for a commit")]
_ARROW_DOC = f"`arrow`: an Arrow IPC stream; the cursor comes in `{NEXT_HEADER}`"
FormatParam = Annotated[Literal["json", "arrow"], Query(alias="format", description=_ARROW_DOC)]
# `debezium` and `count` stay accepted here for clients written before they had operations of
# their own; the document names only the formats whose answer this operation types.
ChangesFormatParam = Annotated[Literal["json", "arrow", "debezium", "count"], Query(
    alias="format", json_schema_extra={"enum": ["json", "arrow"]},
    description=f"{_ARROW_DOC}. (`debezium` and `count` are accepted too; their typed answers "
                "are `list_debezium_changes` and `count_changes`)")]

_PAGE_HEADERS = {
    NEXT_HEADER: {"description": "Cursor to continue from", "schema": {"type": "string"}},
    HEAD_HEADER: {"description": "Commit LSN of the newest durable transaction",
                  "schema": {"type": "string"}},
    HAS_MORE_HEADER: {"description": "`true` when the log already holds more past the cursor",
                      "schema": {"type": "string", "enum": ["true", "false"]}},
}
_ARROW_CONTENT = {ARROW_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}}


def _answer(out: Answer, metrics: Metrics, feed: str, served: bool = True) -> Response:
    if out.change_count and served:
        metrics.served_changes.labels(feed=feed, surface="http").inc(out.change_count)
    background = None if out.read_next is None else BackgroundTask(out.read_next)
    return Response(out.body, media_type=out.media_type, headers=out.headers, background=background)


_LIMIT_DOC = (f"Changes a page holds at most: those the filters keep (`tables`, `ops`). A page "
              f"scans at most {SCAN_CHANGES:,} changes (or `limit`, when larger); a filter that "
              "keeps few of them may end a page before `limit` with `has_more` true and `next` "
              "past everything scanned, so that a request always returns")


def _changes_query(
    after: After = "earliest",
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description=_LIMIT_DOC)] = DEFAULT_LIMIT,
    tables: Annotated[list[str] | None, Query(json_schema_extra=_TABLES_DOC, description="Only these "
                                              "tables (`schema.table`, comma-separated or repeated)")] = None,
    ops: Annotated[list[str] | None, Query(json_schema_extra=_OPS_DOC, description="Only these ops: "
                                           f"{', '.join(_OP_NAMES)} (comma-separated or repeated)")] = None,
    wait: Wait = 0.0,
    to: Annotated[str | None, Query(json_schema_extra=_CURSOR_DOC, description="Stop at this cursor "
                                    "(inclusive); `latest` is the head when the request arrives")] = None,
) -> PageRequest:
    """The query every `/changes` operation takes (a page request, JSON until told otherwise)."""
    return PageRequest(
        after=parse_cursor_param("after", after), limit=limit, tables=parse_tables(tables),
        ops=parse_ops_param(ops), to=None if to is None else parse_cursor_param("to", to),
        wait=wait)


ChangesQuery = Annotated[PageRequest, Depends(_changes_query)]
async def _changes(supervisor: Supervisor, metrics: Metrics, read_ahead: ReadAhead, stop: StopSignal,
                   feed: str, request: PageRequest) -> Response:
    out = await serve_page(supervisor.served(feed), request, read_ahead, stop)
    return _answer(out, metrics, feed, served=request.fmt != "count")


@router.get(CHANGES_PATH.removeprefix(router.prefix), response_model=ChangesPage,
            summary="A page of changes",
            responses={200: {"content": _ARROW_CONTENT, "headers": _PAGE_HEADERS}})
async def list_changes(
    feed: FeedName, supervisor: SupervisorDep, metrics: MetricsDep, read_ahead: ReadAheadDep,
    stop: StopDep, query: ChangesQuery, fmt: ChangesFormatParam = "json",
) -> Response:
    """Changes after the cursor `after`, in commit order, at most `limit` of them (those the
    filters keep). Filters never break cursor continuity: `next` advances past filtered-out
    changes too. With `format=arrow` and a single table in `tables`, rows have the table's
    columns with Arrow types plus `_op`, `_lsn`, `_seq`, `_commit_lsn`, `_commit_ts`, `_xid`,
    `_unchanged_toast`, `_table_version` (and `_key` when the table has key columns). Debezium
    envelopes and counts have operations of their own (`list_debezium_changes`,
    `count_changes`), each with its typed answer."""
    return await _changes(supervisor, metrics, read_ahead, stop, feed, replace(query, fmt=fmt))


@router.get(CHANGES_PATH.removeprefix(router.prefix) + "/debezium", response_model=DebeziumChangesPage,
            summary="A page of changes as Debezium envelopes",
            responses={200: {"headers": _PAGE_HEADERS}})
async def list_debezium_changes(
    feed: FeedName, supervisor: SupervisorDep, metrics: MetricsDep, read_ahead: ReadAheadDep,
    stop: StopDep, query: ChangesQuery,
) -> Response:
    """The page `list_changes` answers, each change as a Debezium envelope (docs/debezium.md);
    also `/changes?format=debezium`."""
    return await _changes(supervisor, metrics, read_ahead, stop, feed, replace(query, fmt="debezium"))


@router.get(CHANGES_PATH.removeprefix(router.prefix) + "/count", response_model=ChangesCount,
            summary="How many changes a page holds, and where it ends",
            responses={200: {"headers": _PAGE_HEADERS}})
async def count_changes(
    feed: FeedName, supervisor: SupervisorDep, metrics: MetricsDep, read_ahead: ReadAheadDep,
    stop: StopDep, query: ChangesQuery,
) -> Response:
    """The envelope of the page `list_changes` answers, without its changes: how many it holds
    (`count`) and where it ends (`next`), for a reader skipping ahead; also
    `/changes?format=count`."""
    return await _changes(supervisor, metrics, read_ahead, stop, feed, replace(query, fmt="count"))


@router.get("/{feed}/transactions", response_model=TransactionsPage, summary="A page of transactions",
            responses={200: {"content": _ARROW_CONTENT, "headers": _PAGE_HEADERS}})
async def list_transactions(
    feed: FeedName, supervisor: SupervisorDep, metrics: MetricsDep, read_ahead: ReadAheadDep,
    stop: StopDep,
    after: After = "earliest",
    limit: Annotated[int, Query(ge=1, le=MAX_TRANSACTIONS, description="Transactions a page at "
                                "most")] = 100,
    max_changes: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Changes a page at most: a "
                                      "larger transaction comes in slices, each with an "
                                      "`LSN:seq` cursor")] = 10_000,
    wait: Wait = 0.0,
    fmt: FormatParam = "json",
) -> Response:
    """Whole transactions after `after`, in commit order. A page ends before a transaction that
    would not fit in `max_changes`; only a transaction larger than that on its own is sliced."""
    request = PageRequest(after=parse_cursor_param("after", after), limit=max_changes, wait=wait,
                          fmt=fmt, transactions=limit)
    return _answer(await serve_page(supervisor.served(feed), request, read_ahead, stop), metrics, feed)


@router.get("/{feed}/splits", response_model=SplitsOut, summary="Cut a range into parts")
def get_splits(
    feed: FeedName, supervisor: SupervisorDep,
    start: Annotated[str, Query(alias="from", json_schema_extra=_CURSOR_DOC,
                                description="Cursor the range starts "
                                "after")] = "earliest",
    to: Annotated[str, Query(json_schema_extra=_CURSOR_DOC,
                             description="Cursor the range ends at (inclusive)")] = "latest",
    n: Annotated[int, Query(ge=1, le=MAX_SPLITS, description="Number of parts")] = 2,
) -> Response:
    """Boundaries cutting `(from, to]` into about `n` parts of equal change counts (at
    transaction boundaries; fewer parts when the range holds fewer transactions)."""
    first, last = parse_cursor_param("from", start), parse_cursor_param("to", to)
    reader = supervisor.reader(feed)
    low = reader.resolve(first)
    high = reader.resolve(last) if last == "latest" else last
    if high < low:
        raise ApiError(400, "invalid_range", f"the range ends ({high}) before it starts ({low})")
    boundaries = [str(low)]
    if high > low:
        points = reader.changelog.split_points(low.lsn, high.lsn, n) if high.lsn > low.lsn else []
        boundaries += [format_lsn(p) for p in points if low < Cursor(p) < high]
        boundaries.append(str(high))
    return Response(dumps({"boundaries": boundaries}), media_type=JSON_MEDIA_TYPE)


@router.get("/{feed}/tables", response_model=TablesOut, summary="Relations and their schemas")
def list_tables(feed: FeedName, supervisor: SupervisorDep) -> Response:
    """Every relation the feed has seen: columns (name, type OID, type name, typmod, key flag) of
    its newest version first, then every version with the LSN it took effect at."""
    tables: list[dict[str, Any]] = supervisor.catalog(feed).tables(load_value)
    return Response(dumps({"tables": tables}), media_type=JSON_MEDIA_TYPE)


TableName = Annotated[str, Path(min_length=1, max_length=200,
                                description="`schema.table`, or a table name only one schema has")]
_SCHEMA_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {
    "model": ErrorBody, "description": "Unknown feed or table, or no version of the table at that "
                                       "position (`table_not_found`, `schema_not_found`)"}}


def _relations(supervisor: Supervisor, feed: str, table: str) -> tuple[FeedReader, list[int]]:
    reader = supervisor.reader(feed)
    relation_ids = reader.relation_ids(table)
    if not relation_ids:
        raise ApiError(404, "table_not_found", f"feed {feed!r} has seen no table {table!r}")
    return reader, relation_ids


@router.get("/{feed}/tables/{table}/schema", response_model=TableSchemaOut,
            summary="A table's schema at a position", responses=_SCHEMA_NOT_FOUND)
def get_table_schema(
    feed: FeedName, table: TableName, supervisor: SupervisorDep,
    at: Annotated[str, Query(json_schema_extra=_CURSOR_DOC, description="Cursor: the version "
                             "change `LSN:seq` was decoded with (every change event names it in "
                             "`table_version`), or for `LSN` the one after that transaction; "
                             "`latest` (the default) is the newest")] = "latest",
) -> Response:
    """The columns (types with their modifiers, as PostgreSQL's `format_type` writes them), key
    columns, version number and `valid_from` of the table's schema in force at `at`."""
    position = parse_cursor_param("at", at)
    reader, relation_ids = _relations(supervisor, feed, table)
    cursor = within_head(position, reader.changelog.head())
    for relation_id in relation_ids:
        found = reader.schema_at(relation_id, cursor)
        if found is not None:
            return Response(dumps(found.schema_at(load_value)), media_type=JSON_MEDIA_TYPE)
    raise ApiError(404, "schema_not_found", f"feed {feed!r}: table {table!r} has no schema "
                   f"version at {cursor}: its first change comes later")


@router.get("/{feed}/tables/{table}/schema/history", response_model=TableSchemaHistoryOut,
            summary="Every schema version of a table", responses=_SCHEMA_NOT_FOUND)
def get_table_schema_history(feed: FeedName, table: TableName, supervisor: SupervisorDep,
                             ) -> Response:
    """Every version of the table's schema, oldest first, each with its columns, key columns and
    the commit LSN it took effect at (`valid_from`)."""
    _reader, relation_ids = _relations(supervisor, feed, table)
    versions = supervisor.catalog(feed).versions(relation_ids[0])
    latest = versions[-1]
    body = {"relation_id": latest.relation_id, "schema": latest.schema, "table": latest.table,
            "name": latest.qualified_name, "versions": [v.schema_at(load_value) for v in versions]}
    return Response(dumps(body), media_type=JSON_MEDIA_TYPE)
