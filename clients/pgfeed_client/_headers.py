"""PURE: what the server and its clients both rely on, named once for the server that sets it
(``service/pgfeed/http_api``, ``service/pgfeed/grpc_api``) and the clients that read it: the HTTP response
headers of a page of changes, the limits of a page request and how it names tables, and the
gRPC trailing metadata of an expired cursor."""

from __future__ import annotations

__all__ = ["DEFAULT_LIMIT", "HAS_MORE_HEADER", "HEAD_HEADER", "MAX_LIMIT", "NEXT_HEADER",
           "OLDEST_METADATA", "qualified_table"]

NEXT_HEADER = "PgFeed-Next"  # the cursor to continue from
HEAD_HEADER = "PgFeed-Head"  # the log's head when the page was read
HAS_MORE_HEADER = "PgFeed-Has-More"  # "true" when the log held more than the page
DEFAULT_LIMIT = 1000  # changes a page holds at most when the request names no limit
MAX_LIMIT = 100_000  # the largest limit a page request may name (a larger one is refused)
# gRPC OUT_OF_RANGE's trailing metadata: the oldest position served
OLDEST_METADATA = "pgfeed-oldest"


def qualified_table(name: str) -> str:
    """A table as filters name it, ``schema.table``: a bare ``orders`` is ``public.orders``."""
    return name if "." in name else f"public.{name}"
