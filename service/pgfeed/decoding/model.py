"""The served model: transactions and change events as readers get them (decoded from stored ones).

Field names follow the contract. What capture writes (``StoredTransaction``) stays on the write side
(``assembler.model``); this is the read side's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

__all__ = ["Change", "ChangeT_co", "Op", "Transaction"]


class Op(StrEnum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"
    TRUNCATE = "truncate"
    MESSAGE = "message"
    READ = "read"  # a row a backfill read from the table (stored as an Insert frame)
    DDL = "ddl"  # a DDL command captured on the source (option ddl "capture"; an Insert frame)


@dataclass(slots=True)
class Change:
    """One decoded change, shaped like the contract's change event.

    Row values are Python values (see ``decoding.values``); columns whose value was an unchanged
    TOAST datum are listed in ``unchanged_toast`` and handled per the feed's ``toast`` option.
    """

    lsn: int
    seq: int
    op: Op
    schema: str | None = None
    table: str | None = None
    key: dict[str, Any] | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    unchanged_toast: list[str] = field(default_factory=list)
    # op == "message"
    prefix: str | None = None
    content: bytes | None = None
    transactional: bool | None = None
    # op == "truncate"
    tables: list[str] | None = None
    options: dict[str, bool] | None = None
    # toast == "reselect": the unchanged_toast columns whose value was filled from an old image
    toast_filled: list[str] | None = None
    # row changes: the relation version (``/tables``' ``versions[].version``) it was decoded with
    table_version: int | None = None
    # row changes: per image ("key", "before", "after") the json/jsonb columns holding the JSON
    # document ``null`` (not SQL NULL); None when there are none
    json_null: dict[str, list[str]] | None = None
    # op == "ddl": the captured command (see ``decoding.changes.ddl_event``)
    ddl: dict[str, Any] | None = None


# What a served transaction's changes are: ``Change``s, or as a read returns them ``Change | RowRun``
# (``decoding.runs.Read``: runs of row changes still in wire form, loaded on demand).
ChangeT_co = TypeVar("ChangeT_co", covariant=True)
OtherT = TypeVar("OtherT")


@dataclass(slots=True)
class Transaction(Generic[ChangeT_co]):
    """A committed transaction as served: its metadata and decoded changes (possibly a slice).
    Covariant in its changes, which nobody alters once the transaction is built (a reference
    encoder of ``Transaction[Change]`` takes no read with runs, ``runs.loaded`` first; one of
    ``Transaction[Read]`` takes both)."""

    xid: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int  # microseconds since 2000-01-01 UTC
    origin: str | None
    changes: Sequence[ChangeT_co]
    change_count: int = 0  # changes in the whole transaction (a page may carry a slice)
    # seq of the last change the decoder scanned (filtered-out ones included), -1 if none: the
    # next cursor is commit_lsn:last_seq, or commit_lsn once last_seq == change_count - 1.
    last_seq: int | None = None
    backfill: str | None = None  # the backfill id of a backfill chunk (origin "pgfeed.backfill")

    def with_changes(self, changes: Sequence[OtherT]) -> Transaction[OtherT]:
        """The same transaction (or slice) holding ``changes`` instead."""
        return Transaction(self.xid, self.commit_lsn, self.end_lsn, self.commit_ts, self.origin,
                           changes, self.change_count, self.last_seq, self.backfill)
