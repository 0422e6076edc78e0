"""Domain -> wire formats (JSON, Arrow, protobuf); pure, no I/O.

``to_arrow`` imports pyarrow (~30 MB): import it where an Arrow answer is built, not at start-up.
"""

ARROW_MEDIA_TYPE = "application/vnd.apache.arrow.stream"
JSON_MEDIA_TYPE = "application/json"
