"""Structured Streaming: offsets are ``{"cursor": ...}``; a micro-batch is ``(start, end]``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pgfeed_client import Cursor, FeedClient, parse_cursor
from pgfeed_spark._ack import Acknowledger
from pgfeed_spark._clients import shared_client
from pgfeed_spark._evolve import SchemaChangedError, Version, describe_change
from pgfeed_spark._options import FeedOptions
from pgfeed_spark._partition import LsnRange, plan_ranges
from pgfeed_spark._read import read_range

__all__ = ["PgFeedStreamReader"]


def _key(cursor: str) -> Cursor:
    parsed = parse_cursor(cursor)
    assert parsed != "latest"
    return parsed


def _offset(cursor: str) -> dict[str, str]:
    return {"cursor": cursor}


class PgFeedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Lives in one driver-side Python process for the query's life; ``read`` runs on executors.

    ``initialOffset`` honours ``from`` (``latest`` is pinned to the head when the query first
    starts); ``latestOffset`` honours ``maxRowsPerTrigger`` and the availableNow target;
    ``commit`` (and the start of each new plan) acknowledges to the named ``consumer`` so
    retention can move on.

    A trigger costs the server one call (the head, in ``latestOffset``; none in availableNow
    mode, whose target is fixed) plus ``/splits`` when the range spans transactions and
    ``partitions > 1``; acknowledgements go from a background thread (``Acknowledger``) and
    ``reportLatestOffset`` answers with the head ``latestOffset`` saw.
    """

    def __init__(self, opts: FeedOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._target: str | None = None  # availableNow: never plan past this cursor
        self._client: FeedClient | None = None
        self._acker: Acknowledger | None = None
        self._head: str | None = None  # the newest head seen, for reportLatestOffset

    @property
    def client(self) -> FeedClient:
        if self._client is None:
            self._client = self.opts.client()
        return self._client

    def _fetch_head(self) -> str:
        self._head = self.client.head(self.opts.feed)
        return self._head

    def initialOffset(self) -> dict[str, str]:
        start = self.opts.start
        if start == "latest":
            start = self._target or self._fetch_head()
        return _offset(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_rows_per_trigger:
            return ReadMaxRows(self.opts.max_rows_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._fetch_head()

    def latestOffset(self, start: dict[str, str], limit: ReadLimit) -> dict[str, str]:
        cursor = start["cursor"]
        # Spark plans a batch only after the previous one is in its commit log, so ``start`` is
        # durable downstream: acknowledge it now (commit() comes only when a batch has data,
        # which would leave the last batch of an availableNow run unacknowledged).
        self._acknowledge(cursor)
        end = self._target or self._fetch_head()
        if _key(end) > _key(cursor):
            end = self._schema_boundary(cursor, end)
        if _key(end) <= _key(cursor):
            if self._target is not None and self._acker is not None:
                # availableNow has reached its target: the query ends now, and Spark calls
                # commit() only when it plans another batch, nor always stop(): land the last
                # acknowledgement here
                self._acker.flush()
            return start
        if isinstance(limit, ReadMaxRows):
            end = self._after_rows(cursor, end, limit.max_rows)
        return _offset(end)

    def _schema_boundary(self, cursor: str, end: str) -> str:
        """``end``, or the position just before the first transaction holding a table version
        the query must stop at (``schemaEvolution``): ``fail``, every version it did not know;
        ``addNewColumns``, one its schema cannot hold. Raises ``SchemaChangedError`` when the
        query is already there. One ``/schema/history`` call a trigger (typed reads only)."""
        lineage, table = self.opts.lineage, self.opts.table
        if lineage is None or table is None or self.opts.schema_evolution == "rescue":
            return end
        history = [Version.of(t) for t in self.client.table_schema_history(self.opts.feed, table)]
        previous = lineage.newest
        for version in history:
            if version.number in lineage.numbers:
                previous = version
                continue
            if version.valid_from > _key(end).lsn:
                break
            if self.opts.schema_evolution == "addNewColumns" and lineage.holds_version(version):
                lineage, previous = lineage.extended([version]), version
                continue
            boundary = str(Cursor(version.valid_from - 1))
            if _key(boundary) <= _key(cursor):
                raise SchemaChangedError(
                    f"pgfeed: table {table} changed at {Cursor(version.valid_from)} "
                    f"({describe_change(previous, version)}); this query (schemaEvolution="
                    f"{self.opts.schema_evolution}) read everything before it: restart it to "
                    "continue with a schema that holds the new version")
            return boundary if _key(boundary) < _key(end) else end
        return end

    def _after_rows(self, cursor: str, end: str, rows: int) -> str:
        """The cursor after at most ``rows`` (filtered) changes past ``cursor``, not past ``end``:
        counted by the server (``format=count``), none of the changes read on the driver."""
        after = self.client.cursor_after(self.opts.feed, cursor, rows, tables=self.opts.tables,
                                         ops=self.opts.ops, to=end)
        return end if _key(after) >= _key(end) else after

    def reportLatestOffset(self) -> dict[str, str] | None:
        # Only a metric (the query's lag): the head latestOffset just saw is recent enough.
        return _offset(self._head or self._fetch_head())

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> Sequence[InputPartition]:
        after, to = start["cursor"], end["cursor"]
        if _key(to) <= _key(after):
            return []
        boundaries: list[str] = []
        if self.opts.partitions > 1 and _key(after).lsn < _key(to).lsn:  # else one transaction
            # /splits works on whole transactions: ask with the LSN parts of the cursors.
            lo, hi = _key(after), _key(to)
            boundaries = self.client.splits(self.opts.feed, str(Cursor(lo.lsn)) if lo.lsn
                                            else "earliest", str(Cursor(hi.lsn)),
                                            self.opts.partitions)
        return plan_ranges(after, to, boundaries)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LsnRange)
        return read_range(self.opts, partition, self.schema,
                          client=shared_client(self.opts, partition.index))

    def commit(self, end: dict[str, str]) -> None:
        self._acknowledge(end.get("cursor"))

    def _acknowledge(self, cursor: str | None) -> None:
        if not self.opts.consumer or not cursor:
            return
        if self._acker is None:
            client = self.client  # made here, not raced for by the acknowledging thread
            self._acker = Acknowledger(lambda: client, self.opts.feed, self.opts.consumer)
        self._acker.submit(cursor)

    def stop(self) -> None:
        if self._acker is not None:  # the last acknowledgement lands before the query ends
            self._acker.close()
            self._acker = None
        if self._client is not None:
            self._client.close()
            self._client = None
