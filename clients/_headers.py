"""PURE: the HTTP response headers of a page of changes, and the gRPC trailing metadata of an
expired cursor, named once for the server that sets them (``service/http_api``,
``service/grpc_api``) and the client that reads them."""

from __future__ import annotations

__all__ = ["HAS_MORE_HEADER", "HEAD_HEADER", "NEXT_HEADER", "OLDEST_METADATA"]

NEXT_HEADER = "PgFeed-Next"  # the cursor to continue from
HEAD_HEADER = "PgFeed-Head"  # the log's head when the page was read
HAS_MORE_HEADER = "PgFeed-Has-More"  # "true" when the log held more than the page
OLDEST_METADATA = "pgfeed-oldest"  # gRPC OUT_OF_RANGE's trailing metadata: the oldest position served
