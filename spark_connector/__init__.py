"""pgfeed's PySpark 4 data source: ``spark.dataSource.register(PgFeedDataSource)``, then
``spark.read.format("pgfeed")`` or ``spark.readStream.format("pgfeed")``."""

from spark_connector._apply import apply_changes
from spark_connector._datasource import PgFeedDataSource
from spark_connector._mirror import latest_rows, mirror_writer, read_mirror
from spark_connector._options import FeedOptions
from spark_connector._schema import (
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
