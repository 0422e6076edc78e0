"""Executor side: read one LsnRange from the service as Arrow batches of the declared schema."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

from pgfeed_client import Change, Cursor, FeedClient, parse_cursor, parse_lsn
from pgfeed_client._json import dumps_exact
from pgfeed_spark._arrow import arrow_schema, conform, rows_to_batch
from pgfeed_spark._evolve import Lineage, SchemaChangedError, Version, describe_change
from pgfeed_spark._options import FeedOptions
from pgfeed_spark._partition import LsnRange
from pgfeed_spark._readahead import read_ahead
from pgfeed_spark._schema import KEY_COLUMN, raw_row

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
        versions = _Versions(c, opts)
        if opts.wire == "arrow":
            yield from _read_arrow(c, opts, part, schema, target, versions)
        else:
            yield from _read_json(c, opts, part, schema, target, versions)


class _Versions:
    """The query's lineage, extended (once a read) with the versions the server has that it
    did not know when the query was planned."""

    def __init__(self, client: FeedClient, opts: FeedOptions) -> None:
        self.client, self.opts = client, opts
        self.lineage = opts.lineage
        self._exact: dict[tuple[int, pa.Schema], bool] = {}

    def arrow_exact(self, lineage: Lineage, number: int, page_schema: pa.Schema) -> bool:
        """``Lineage.arrow_exact``, once per version and page shape."""
        key = (number, page_schema)
        if key not in self._exact:
            types = {f.name: f.type for f in page_schema}
            self._exact[key] = lineage.arrow_exact(number, types)
        return self._exact[key]

    def knowing(self, numbers: set[int]) -> Lineage:
        assert self.lineage is not None and self.opts.table is not None
        if numbers <= self.lineage.numbers:
            return self.lineage
        history = [Version.of(t) for t in
                   self.client.table_schema_history(self.opts.feed, self.opts.table)]
        if not self.lineage.rescue:
            # a version newer than the plan (the table changed while this read was planned):
            # read only if the schema holds it, never losing a column silently
            lineage, previous = self.lineage, self.lineage.newest
            for version in history:
                if version.number in numbers and version.number not in lineage.numbers:
                    if not lineage.holds_version(version):
                        raise SchemaChangedError(
                            f"pgfeed: table {self.opts.table} changed at "
                            f"{Cursor(version.valid_from)} while this read ran "
                            f"({describe_change(previous, version)}): read it again")
                    lineage, previous = lineage.extended([version]), version
        self.lineage = self.lineage.extended(history)
        unknown = numbers - self.lineage.numbers
        if unknown:
            raise SchemaChangedError(f"pgfeed: table {self.opts.table} has no schema version "
                                     f"{sorted(unknown)} on the server")
        return self.lineage


def _read_arrow(client: FeedClient, opts: FeedOptions, part: LsnRange, schema: StructType,
                target: pa.Schema, versions: _Versions) -> Iterator[pa.RecordBatch]:
    aliases = _ALIASES if opts.table else None
    stop = parse_cursor(part.to)
    assert stop != "latest"
    lsn_col, seq_col = ("_commit_lsn", "_seq") if opts.table else ("commit_lsn", "seq")
    pages = client.iter_arrow_pages(opts.feed, part.after, part.to, table=opts.table,
                                    tables=opts.tables, ops=opts.ops, limit=opts.page_size,
                                    first_limit=max(opts.page_size // FIRST_PAGE_SHARE, 1))
    after = part.after
    for page in read_ahead(pages, opts.read_ahead):
        nxt = parse_cursor(page.next)
        overshot = nxt != "latest" and nxt > stop  # a server that ignored ``to``
        if opts.lineage is not None and not _arrow_exact(page.schema, page.batches, versions):
            # rows of a version the server's (newest) typed shape does not hold exactly: this
            # page's range again through JSON, each row with its own version's columns
            upto = part.to if overshot or nxt == "latest" else page.next
            yield from _read_json(client, opts, LsnRange(part.index, after, upto), schema,
                                  target, versions)
            after = page.next
            continue
        after = page.next
        for batch in page.batches:
            batch = conform(batch, target, aliases)
            if overshot:
                batch = _cut(batch, stop, lsn_col, seq_col)
            if batch.num_rows:
                yield batch


def _arrow_exact(page_schema: pa.Schema, batches: list[pa.RecordBatch],
                 versions: _Versions) -> bool:
    """Whether every row of a typed page reads into the query's columns by name exactly (the
    server writes every row in the table's newest shape, by name)."""
    column = "_table_version" if "_table_version" in page_schema.names else "table_version"
    numbers: set[int] = set()
    for batch in batches:
        if column not in batch.schema.names:
            return False
        numbers.update(v for v in pc.unique(batch.column(column)).to_pylist() if v)
    if not numbers:
        return True
    lineage = versions.knowing(numbers)
    return all(versions.arrow_exact(lineage, n, page_schema) for n in numbers)


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
               target: pa.Schema, versions: _Versions) -> Iterator[pa.RecordBatch]:
    if opts.table:
        assert opts.lineage is not None
        has_key = KEY_COLUMN in schema.fieldNames()
        for changes in _changes(client, opts, part):
            lineage = versions.knowing({c.table_version for c in changes if c.table_version})
            yield rows_to_batch([evolved_row(c, lineage, has_key) for c in changes
                                 if c.op != "ddl"], target)  # DDL events are no rows
    else:
        for changes in _changes(client, opts, part):
            yield rows_to_batch([raw_row(c) for c in changes], target)


def evolved_row(change: Change, lineage: Lineage, has_key: bool) -> tuple[object, ...]:
    """One change -> a row of ``lineage.schema()``: each value of the change's version in its
    logical column (converted to that column's type), the others NULL; under ``rescue`` the
    values no column holds in ``_rescued_data``. Images, ``_unchanged_toast`` and ``_key`` are as
    ``pgfeed_spark._schema.typed_row`` makes them, with logical names."""
    op = change.op
    image = (change.after if op in ("insert", "update", "read") else change.before or change.key) or {}
    values: list[object] = [None] * len(lineage.columns)
    mapping = lineage.mapping(change.table_version) if change.table_version else None
    toast = change.unchanged_toast
    hidden = set(toast).difference(change.toast_filled or ()) if toast else set()
    logical_of: dict[str, str] = {}
    for i, name, convert in mapping or ():
        logical_of[name] = lineage.columns[i].name
        if name not in hidden:
            values[i] = convert(image.get(name))
    rescued: tuple[object, ...] = ()
    if lineage.rescue:
        extra = {c.name: image[c.name] for c in lineage.rescued(change.table_version or 0)
                 if c.name in image and c.name not in hidden}
        rescued = (dumps_exact(extra) if extra else None,)
    row = (*values, *rescued, op, parse_lsn(change.lsn), change.seq, parse_lsn(change.commit_lsn),
           change.commit_ts, change.xid, [logical_of.get(n, n) for n in toast],
           change.table_version)
    if not has_key:
        return row
    old = change.key
    if old is None:
        return (*row, None)
    key = []
    for i, lg in enumerate(lineage.columns):
        if not lg.key:
            continue
        found = next(((n, conv) for j, n, conv in mapping or () if j == i), None)
        key.append(None if found is None else found[1](old.get(found[0])))
    return (*row, tuple(key))
