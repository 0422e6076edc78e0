"""Executor side: read one LsnRange from the service as Arrow batches of the declared schema."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

from pgfeed_client import Change, Cursor, FeedClient, parse_cursor
from pgfeed_spark._arrow import arrow_schema, conform, rows_to_batch
from pgfeed_spark._options import FeedOptions
from pgfeed_spark._partition import LsnRange
from pgfeed_spark._readahead import read_ahead
from pgfeed_spark._schema import KEY_COLUMN, METADATA_NAMES, json_converter, raw_row, typed_row

__all__ = ["read_range"]

# The first page of a partition asks for pageSize / FIRST_PAGE_SHARE changes, the next ones twice
# as many each, up to pageSize: the server reads both partitions' first pages in one process, so
# a whole first page each kept Spark waiting ~0.13 s (of a 1 s read of 1M rows), and a server
# answers a doubled limit with the page it read ahead at the previous one (http_api/readahead.py).
FIRST_PAGE_SHARE = 8

# Where a typed column may also be found in the server's Arrow answer.
_ALIASES = {"_op": ("op",), "_lsn": ("lsn",), "_seq": ("seq",), "_commit_lsn": ("commit_lsn",),
            "_commit_ts": ("commit_ts",), "_xid": ("xid",),
            "_unchanged_toast": ("unchanged_toast",), "_table_version": ("table_version",)}


def read_range(opts: FeedOptions, part: LsnRange, schema: StructType,
               client: FeedClient | None = None) -> Iterator[pa.RecordBatch]:
    """All changes of ``part`` as RecordBatches matching ``schema`` exactly, through ``client``
    (kept open) or a client of its own (closed at the end)."""
    target = arrow_schema(schema)
    # partitions go round robin over the replicas
    with opts.client(part.index) if client is None else contextlib.nullcontext(client) as c:
        if opts.wire == "arrow":
            yield from _read_arrow(c, opts, part, target)
        else:
            yield from _read_json(c, opts, part, schema, target)


def _read_arrow(client: FeedClient, opts: FeedOptions, part: LsnRange,
                target: pa.Schema) -> Iterator[pa.RecordBatch]:
    aliases = _ALIASES if opts.table else None
    stop = parse_cursor(part.to)
    assert stop != "latest"
    lsn_col, seq_col = ("_commit_lsn", "_seq") if opts.table else ("commit_lsn", "seq")
    pages = client.iter_arrow_pages(opts.feed, part.after, part.to, table=opts.table,
                                    tables=opts.tables, ops=opts.ops, limit=opts.page_size,
                                    first_limit=max(opts.page_size // FIRST_PAGE_SHARE, 1))
    for page in read_ahead(pages, opts.read_ahead):
        nxt = parse_cursor(page.next)
        overshot = nxt != "latest" and nxt > stop  # a server that ignored ``to``
        for batch in page.batches:
            batch = conform(batch, target, aliases)
            if overshot:
                batch = _cut(batch, stop, lsn_col, seq_col)
            if batch.num_rows:
                yield batch


def _cut(batch: pa.RecordBatch, stop: Cursor, lsn_col: str, seq_col: str) -> pa.RecordBatch:
    """Rows at or before ``stop`` only, so neighbouring partitions never overlap."""
    lsn, seq = batch.column(lsn_col), batch.column(seq_col)
    keep = pc.less(lsn, stop.lsn)
    if stop.seq is None:
        keep = pc.or_(keep, pc.equal(lsn, stop.lsn))
    else:
        keep = pc.or_(keep, pc.and_(pc.equal(lsn, stop.lsn), pc.less_equal(seq, stop.seq)))
    return batch.filter(keep)


def _changes(client: FeedClient, opts: FeedOptions, part: LsnRange) -> Iterator[list[Change]]:
    """Pages of changes in ``(after, to]``, cut at ``to`` whatever the server sends past it."""
    stop = parse_cursor(part.to)
    assert stop != "latest"
    cursor = part.after
    while True:
        page = client.page(opts.feed, cursor, limit=opts.page_size, tables=opts.tables,
                           ops=opts.ops, to=part.to)
        changes = [c for c in page.changes if stop.includes(c.cursor.lsn, c.seq)]
        if changes:
            yield changes
        nxt = parse_cursor(page.next)
        if len(changes) < len(page.changes) or (nxt != "latest" and nxt >= stop) \
                or not page.has_more or page.next == cursor:
            return
        cursor = page.next


def _read_json(client: FeedClient, opts: FeedOptions, part: LsnRange, schema: StructType,
               target: pa.Schema) -> Iterator[pa.RecordBatch]:
    if opts.table:
        by_name = {c.name: c for c in opts.columns}
        names = [f.name for f in schema.fields if f.name not in METADATA_NAMES]
        converters = [json_converter(by_name[n].type_name, by_name[n].typmod, by_name[n].type_oid)
                      if n in by_name else _same for n in names]
        convert = dict(zip(names, converters))
        key_type = schema[KEY_COLUMN].dataType if KEY_COLUMN in schema.fieldNames() else None
        key = ([(f.name, convert.get(f.name, _same)) for f in key_type.fields]
               if isinstance(key_type, StructType) else None)
        for changes in _changes(client, opts, part):
            yield rows_to_batch([typed_row(c, names, converters, key) for c in changes
                                 if c.op != "ddl"], target)  # DDL events are no rows
    else:
        for changes in _changes(client, opts, part):
            yield rows_to_batch([raw_row(c) for c in changes], target)


def _same(v: object) -> object:
    return v
