"""A page of changes as Debezium envelopes (``GET …/changes?format=debezium``): the same page
object as the native JSON (``changes``, ``next``, ``head``, ``has_more``), so cursors, filters
and long-polls work unchanged; each native event becomes one or more envelopes
(``pgfeed.encoding.to_debezium``)."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict

import pgfeed
from pgfeed.decoding.runs import loaded
from pgfeed.encoding import JSON_MEDIA_TYPE
from pgfeed.encoding.to_debezium import DebeziumSource, envelopes
from pgfeed.encoding.to_json import change_to_dict, dumps
from pgfeed.feeds.reader import Page
from pgfeed.http_api.encode import Encoded

__all__ = ["debezium_changes", "debezium_source"]


def debezium_source(feed: str, dsn: str) -> DebeziumSource:
    """The ``source`` block's fixed part: the feed's name and its database (never the DSN)."""
    try:
        db = conninfo_to_dict(dsn).get("dbname")
    except psycopg.ProgrammingError:  # unparsable: never here (the feed was created with it)
        db = None
    return DebeziumSource(name=feed, db=None if db is None else str(db), version=pgfeed.__version__)


def debezium_changes(page: Page, source: DebeziumSource) -> Encoded:
    """Envelopes of a page, its runs loaded: each from its native event."""
    items: list[bytes] = []
    count = 0
    for read in page.transactions:
        txn = loaded(read)
        for change in txn.changes:
            count += 1
            items.extend(dumps(e) for e in envelopes(change_to_dict(change, txn), source))
    return Encoded(b'{"changes":[' + b",".join(items) + b"],", JSON_MEDIA_TYPE, page, count)
