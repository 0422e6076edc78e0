"""Batch reads: partitions from ``/splits`` on the driver, ranges read on executors."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pgfeed_spark._options import FeedOptions
from pgfeed_spark._partition import LsnRange, plan_ranges
from pgfeed_spark._read import read_range

__all__ = ["PgFeedBatchReader", "plan_batch"]


def plan_batch(opts: FeedOptions) -> list[LsnRange]:
    """Resolve ``from``/``to`` against the service and cut the range into ``partitions`` parts."""
    with opts.client() as client:
        end = client.head(opts.feed) if opts.end == "latest" else opts.end
        start = client.head(opts.feed) if opts.start == "latest" else opts.start
        ranges = plan_ranges(start, end, []) if opts.partitions == 1 else plan_ranges(
            start, end, client.splits(opts.feed, start, end, opts.partitions))
    # Spark needs at least one partition; an empty range reads nothing.
    return ranges or [LsnRange(0, end, end)]


class PgFeedBatchReader(DataSourceReader):
    """Holds only plain data, so it pickles to executors; each read opens its own client."""

    def __init__(self, opts: FeedOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        return plan_batch(self.opts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LsnRange)
        if partition.after == partition.to:
            return iter(())
        return read_range(self.opts, partition, self.schema)
