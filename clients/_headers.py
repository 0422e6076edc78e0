"""PURE: the HTTP response headers of a page of changes, named once for the server that sets
them (``service/http_api``) and the client that reads them."""

from __future__ import annotations

__all__ = ["HAS_MORE_HEADER", "HEAD_HEADER", "NEXT_HEADER"]

NEXT_HEADER = "PgFeed-Next"  # the cursor to continue from
HEAD_HEADER = "PgFeed-Head"  # the log's head when the page was read
HAS_MORE_HEADER = "PgFeed-Has-More"  # "true" when the log held more than the page
