"""A page -> the bytes of its answer: JSON (``/changes``, ``/transactions``) or an Arrow IPC stream
(generic, or typed for a single-table read). Blocking CPU work: call it from a worker thread."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from pgfeed.decoding.model import Transaction
from pgfeed.decoding.relations import RelationCatalog
from pgfeed.decoding.runs import loaded
from pgfeed.encoding import ARROW_MEDIA_TYPE, JSON_MEDIA_TYPE
from pgfeed.encoding.to_json import change_events, transaction_json
from pgfeed.feeds.reader import Page
from pgfeed.http_api.errors import ApiError
from pgfeed_client._cursor import Cursor, format_lsn
from pgfeed_client._headers import HAS_MORE_HEADER, HEAD_HEADER, NEXT_HEADER

if TYPE_CHECKING:
    import pyarrow as pa

    from pgfeed.encoding.arrow_rows import ArrowSink
    from pgfeed.encoding.to_arrow import ArrowColumn

__all__ = ["Encoded", "arrow_page", "arrow_sink", "json_changes", "json_transactions",
           "sunk_arrow_page"]


@dataclass(slots=True)
class Encoded:
    """An encoded page. For JSON, ``body`` stops before the tail (``"next"``, ``"head"``,
    ``"has_more"``), which ``finish`` writes with the head current when the answer leaves, so a
    page read ahead never reports a stale head."""

    body: bytes | memoryview  # an Arrow stream: a view of the buffer it was written into
    media_type: str
    page: Page
    change_count: int

    def finish(self, head: int, to: Cursor | None) -> tuple[bytes | memoryview, dict[str, str]]:
        page = self.page
        head = max(head, page.head)
        bound = Cursor(head) if to is None else min(Cursor(head), to)
        has_more = page.next < bound
        next_text, head_text = str(page.next), format_lsn(head)
        headers = {NEXT_HEADER: next_text, HEAD_HEADER: head_text,
                   HAS_MORE_HEADER: "true" if has_more else "false"}
        if self.media_type != JSON_MEDIA_TYPE:
            return self.body, headers
        tail = (b'"next":' + orjson.dumps(next_text) + b',"head":' + orjson.dumps(head_text)
                + (b',"has_more":true}' if has_more else b',"has_more":false}'))
        return bytes(self.body) + tail, headers


def json_changes(page: Page) -> Encoded:
    events = [e for t in page.transactions for e in change_events(t)]
    return Encoded(b'{"changes":[' + b",".join(events) + b"],", JSON_MEDIA_TYPE, page,
                   len(events))


def count_page(page: Page) -> Encoded:
    """A page without its changes: how many it holds and (``finish``) where it ends, for a
    reader that skips ahead (Spark's ``maxRowsPerTrigger`` finding a micro-batch's end)."""
    count = page.change_count
    return Encoded(b'{"count":%d,' % count, JSON_MEDIA_TYPE, page, count)


def cursor_after(txn: Transaction[object]) -> str:
    """Where a reader resumes after this transaction (or after this slice of it)."""
    last = txn.last_seq
    if last is None or last >= txn.change_count - 1:
        return format_lsn(txn.commit_lsn)
    return f"{format_lsn(txn.commit_lsn)}:{last}"


def json_transactions(page: Page) -> Encoded:
    items = [transaction_json(txn, cursor_after(txn)) for txn in page.transactions]
    count = page.change_count
    return Encoded(b'{"transactions":[' + b",".join(items) + b"],", JSON_MEDIA_TYPE, page,
                   count)


def arrow_sink(catalog: RelationCatalog, typed_table: str) -> ArrowSink | None:
    """The compiled rows for a page of a typed read of ``typed_table`` (its newest shape in
    ``catalog``), or None: that page is the reference's (``to_arrow.typed_batch``)."""
    from pgfeed.encoding import arrow_rows, to_arrow

    columns = table_columns(catalog, typed_table)
    try:
        schema = to_arrow.typed_schema(columns)
    except ValueError:
        return None  # arrow_page answers 400
    return arrow_rows.sink_for(columns, schema)


def arrow_page(page: Page, typed_table: str | None,
               catalog: RelationCatalog | None) -> Encoded:
    """Generic change rows, or the typed rows of ``typed_table`` (its newest shape in
    ``catalog``): the reference encoders, on the page's runs loaded."""
    from pgfeed.encoding import to_arrow  # pyarrow only once someone asks for Arrow

    transactions = [loaded(t) for t in page.transactions]
    if typed_table is not None:
        assert catalog is not None
        columns = table_columns(catalog, typed_table)
        try:
            schema = to_arrow.typed_schema(columns)
        except ValueError as exc:
            raise ApiError(400, "unsupported_table", str(exc)) from None
        batches = [to_arrow.typed_batch(transactions, columns, schema)]
    else:
        schema = to_arrow.change_schema()
        batches = [to_arrow.generic_batch(transactions)]
    return _arrow(page, schema, batches)


def sunk_arrow_page(page: Page, sink: ArrowSink) -> Encoded:
    """The typed rows of a page written by ``sink`` (made for its table's newest shape, which
    the caller checked is still the newest after the read): its runs compiled straight from
    their frames where the sink's rules allow."""
    return _arrow(page, sink.schema, sink.batches(page.transactions))


def _arrow(page: Page, schema: pa.Schema, batches: list[pa.RecordBatch]) -> Encoded:
    from pgfeed.encoding import to_arrow

    return Encoded(to_arrow.ipc_stream(schema, batches), ARROW_MEDIA_TYPE, page,
                   sum(b.num_rows for b in batches))


def table_columns(catalog: RelationCatalog, table: str) -> Sequence[ArrowColumn]:
    """The newest shape of ``table`` (``schema.table``) the feed has seen, key flags included (they
    shape ``_key``); none yet: no columns. Read from the catalogue's versions as they are."""
    from pgfeed.encoding.to_arrow import ArrowColumn

    newest = catalog.newest(table)
    if newest is None:
        return []
    return [ArrowColumn(c.name, c.type_name, c.typmod, c.type_oid, c.is_key)
            for c in newest.columns]
