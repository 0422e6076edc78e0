"""PgFeedDataSource: the ``pgfeed`` PySpark data source (batch and streaming reads of a feed)."""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from pgfeed_client import TableInfo
from pgfeed_spark._batch import PgFeedBatchReader
from pgfeed_spark._evolve import Lineage, versions_in
from pgfeed_spark._options import FeedOptions
from pgfeed_spark._schema import change_schema
from pgfeed_spark._streaming import PgFeedStreamReader

__all__ = ["PgFeedDataSource"]


class PgFeedDataSource(DataSource):
    """``spark.read.format("pgfeed")`` / ``spark.readStream.format("pgfeed")``.

    Without ``table`` rows follow the raw change schema (``change_schema()``); with
    ``table=schema.name`` they carry the table's typed columns plus ``_op``, ``_lsn``, ``_seq``,
    ``_commit_lsn``, ``_commit_ts``, ``_xid``, ``_unchanged_toast`` and, when the table has key
    columns, ``_key`` (a struct of them: the key before the change; see ``table_schema``). See
    ``FeedOptions`` for every option.
    """

    @classmethod
    def name(cls) -> str:
        return "pgfeed"

    def _opts(self) -> FeedOptions:
        opts = FeedOptions.parse(self.options)
        if opts.table:
            info = getattr(self, "_table_info", None) or self._fetch_table(opts)
            lineage = getattr(self, "_lineage", None) or self._fetch_lineage(opts)
            opts = replace(opts, columns=info.columns, lineage=lineage)
        return opts

    def _fetch_lineage(self, opts: FeedOptions) -> Lineage:
        """The table's versions that may be read (from the one in force at ``from`` to the one
        at ``to``; streaming: the newest now) as one schema (see ``pgfeed_spark._evolve``)."""
        assert opts.table is not None
        info = getattr(self, "_table_info", None) or self._fetch_table(opts)
        # ``/tables`` lists every version already (as ``/schema/history`` does): no second call
        history = [TableInfo.from_json({"schema": info.schema, "table": info.table, **v})
                   for v in info.versions]
        if not history:
            with opts.client() as client:
                history = client.table_schema_history(opts.feed, opts.table)
        versions = versions_in(history, opts.start, opts.end)
        self._lineage = Lineage.build(opts.table, versions,
                                      rescue=opts.schema_evolution == "rescue")
        return self._lineage

    def _fetch_table(self, opts: FeedOptions) -> TableInfo:
        with opts.client() as client:
            found = {t.qualified_name: t for t in client.tables(opts.feed)}
        if opts.table not in found:
            known = ", ".join(sorted(found)) or "none yet"
            raise ValueError(f"feed {opts.feed!r} has no table {opts.table!r} (tables seen: {known})")
        # Cached on the instance, which Spark pickles after schema(): executors need no lookup.
        self._table_info = found[opts.table]
        return self._table_info

    def schema(self) -> StructType:
        opts = FeedOptions.parse(self.options)
        if not opts.table:
            return change_schema()
        self._fetch_table(opts)  # a missing table's error names the tables there are
        return self._fetch_lineage(opts).schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        return PgFeedBatchReader(self._opts(), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return PgFeedStreamReader(self._opts(), schema)
