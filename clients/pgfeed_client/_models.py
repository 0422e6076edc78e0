"""Client-side models of the contract's JSON: Change, Transaction, pages and table descriptions.

Independent of ``service`` (Spark executors install only ``clients`` and ``spark_connector``).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pgfeed_client._cursor import Cursor, parse_lsn
from pgfeed_client._json import mark_json_null

__all__ = ["Change", "ColumnInfo", "Page", "TableInfo", "Transaction", "TransactionPage"]


def _ts(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value)


@dataclass(slots=True)
class Change:
    """One change event. LSNs stay in PostgreSQL's text form; row values as the JSON gives them
    (numeric as exact strings, bytea as base64, times as ISO 8601 strings; json/jsonb documents
    parsed with exact numbers: int of any size, float when it holds the number exactly, else
    Decimal; a document nested past 500 levels as its text; the document ``null`` as
    ``pgfeed_client.JSON_NULL``, SQL NULL as None)."""

    lsn: str
    seq: int
    commit_lsn: str
    xid: int
    commit_ts: datetime | None
    op: str
    schema: str | None = None
    table: str | None = None
    key: dict[str, Any] | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    unchanged_toast: list[str] = field(default_factory=list)
    origin: str | None = None
    prefix: str | None = None
    content: bytes | None = None
    transactional: bool | None = None
    tables: list[str] | None = None
    options: dict[str, bool] | None = None
    toast_filled: list[str] | None = None
    # row changes: the table's schema version the server decoded the change with (``/tables``'
    # ``versions[].version``; ``FeedClient.table_schema(feed, table, at=change.cursor)`` describes it)
    table_version: int | None = None
    # per image ("key", "before", "after"): the json/jsonb columns holding the JSON document
    # ``null``, which the image holds as ``pgfeed_client.JSON_NULL`` (None is SQL NULL)
    json_null: dict[str, list[str]] | None = None
    # op "ddl" (feed option ddl "capture"): the captured DDL command, as the JSON event's ``ddl``
    # object: command, object_type, object, table, old_name/new_name (renames only), columns
    ddl: dict[str, Any] | None = None

    @property
    def cursor(self) -> Cursor:
        """The cursor naming this change: resuming from it continues with the next one."""
        return Cursor(parse_lsn(self.commit_lsn), self.seq)

    @property
    def qualified_table(self) -> str | None:
        return None if self.table is None else f"{self.schema}.{self.table}"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Change:
        # Positional, in field order: a page builds 10,000 of these, and keyword arguments made
        # this ~1 µs a change slower (of ~2.5).
        get = d.get
        content = get("content")
        change = cls(
            d["lsn"], d["seq"], d["commit_lsn"], get("xid", 0), _ts(get("commit_ts")), d["op"],
            get("schema"), get("table"), get("key"), get("before"), get("after"),
            list(get("unchanged_toast") or ()), get("origin"), get("prefix"),
            None if content is None else base64.b64decode(content),
            get("transactional"), get("tables"), get("options"), get("toast_filled"),
            get("table_version"), get("json_null"), get("ddl"),
        )
        nulls = change.json_null
        if nulls:  # the JSON document null, which the event can only name (its value is null)
            mark_json_null(change.key, nulls.get("key"))
            mark_json_null(change.before, nulls.get("before"))
            mark_json_null(change.after, nulls.get("after"))
        return change


@dataclass(slots=True)
class Transaction:
    """A committed transaction (or, on a page, a slice of one) with its changes in ``seq`` order."""

    xid: int
    commit_lsn: str
    end_lsn: str | None
    commit_ts: datetime | None
    origin: str | None
    changes: list[Change]
    change_count: int = 0
    cursor: str | None = None  # where to resume after this transaction (gRPC and pages)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Transaction:
        changes = [Change.from_json(c) for c in d.get("changes") or ()]
        return cls(
            xid=d.get("xid", 0), commit_lsn=d["commit_lsn"], end_lsn=d.get("end_lsn"),
            commit_ts=_ts(d.get("commit_ts")), origin=d.get("origin"), changes=changes,
            change_count=d.get("change_count", len(changes)), cursor=d.get("cursor"),
        )


@dataclass(slots=True)
class Page:
    """One page of ``/changes``: ``next`` is the cursor to continue from (past filtered-out changes
    too); ``head`` the newest durable commit LSN; ``has_more`` whether more is already there."""

    changes: list[Change]
    next: str
    head: str | None
    has_more: bool

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Page:
        return cls([Change.from_json(c) for c in d.get("changes") or ()], d["next"],
                   d.get("head"), bool(d.get("has_more", False)))


@dataclass(slots=True)
class TransactionPage:
    """One page of ``/transactions``."""

    transactions: list[Transaction]
    next: str
    head: str | None
    has_more: bool

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TransactionPage:
        return cls([Transaction.from_json(t) for t in d.get("transactions") or ()], d["next"],
                   d.get("head"), bool(d.get("has_more", False)))


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    """A column as ``/tables`` describes it; ``typmod`` is PostgreSQL's atttypmod (-1: none)."""

    name: str
    type_oid: int
    type_name: str | None
    typmod: int = -1
    key: bool = False
    type: str | None = None  # with its modifiers, as PostgreSQL's format_type: numeric(12,2)
    # schema history (DDL capture): the column's name in the previous version when it was
    # renamed, and the value PostgreSQL gives rows older than the column (attmissingval, as a
    # JSON event's new image writes it; ``has_missing_value`` says whether there is one)
    previous_name: str | None = None
    missing_value: Any = None
    has_missing_value: bool = False

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ColumnInfo:
        return cls(d["name"], int(d["type_oid"]), d["type_name"], int(d["typmod"]), bool(d["key"]),
                   d.get("type"), d.get("previous_name"), d.get("missing_value"),
                   "missing_value" in d)


@dataclass(frozen=True, slots=True)
class TableInfo:
    """The newest schema version of one relation seen by a feed."""

    schema: str
    table: str
    columns: tuple[ColumnInfo, ...]
    version: int = 1
    replica_identity: str | None = None
    versions: tuple[dict[str, Any], ...] = ()  # every version as served, oldest first
    valid_from: str | None = None  # commit LSN of the transaction that introduced this version

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.key)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TableInfo:
        """A table as ``/tables`` serves it: its newest version's fields, and every version; or
        one version as ``/tables/{table}/schema`` serves it (``versions`` empty)."""
        return cls(
            schema=str(d["schema"]), table=str(d["table"]),
            columns=tuple(ColumnInfo.from_json(c) for c in d["columns"]),
            version=int(d["version"]), replica_identity=d["replica_identity"],
            versions=tuple(d.get("versions") or ()), valid_from=d.get("valid_from"),
        )
