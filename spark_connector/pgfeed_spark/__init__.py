"""pgfeed's PySpark 4 data source: ``spark.dataSource.register(PgFeedDataSource)``, then
``spark.read.format("pgfeed")`` or ``spark.readStream.format("pgfeed")``."""

from pgfeed_spark._apply import apply_changes
from pgfeed_spark._datasource import PgFeedDataSource
from pgfeed_spark._mirror import latest_rows, mirror_writer, read_mirror
from pgfeed_spark._options import FeedOptions
from pgfeed_spark._schema import (
    KEY_COLUMN,
    METADATA_COLUMNS,
    change_schema,
    spark_type,
    table_schema,
)

__all__ = [
    "KEY_COLUMN",
    "METADATA_COLUMNS",
    "FeedOptions",
    "PgFeedDataSource",
    "apply_changes",
    "change_schema",
    "latest_rows",
    "mirror_writer",
    "read_mirror",
    "spark_type",
    "table_schema",
]
