"""What the change log keeps about a backfill: its request, state and per-part progress."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Literal

BackfillState = Literal["running", "done", "cancelled", "failed"]
STATES: tuple[BackfillState, ...] = ("running", "done", "cancelled", "failed")
# A table of a backfill: ``done`` is not stored (it is "running" with every part done).
TableState = Literal["running", "done", "cancelled", "failed"]
DEFAULT_CHUNK_ROWS = 10_000
DEFAULT_PARALLEL = 2  # source connections reading at once: a sane default for 2 cores
MAX_CHUNK_ROWS = 1_000_000
MAX_PARALLEL = 16


@dataclass(frozen=True, slots=True)
class BackfillPart:
    """A key range of one table, read chunk by chunk in key order by one worker at a time.

    ``lower`` (exclusive) and ``upper`` (inclusive) are JSON lists of the key's text values, None
    for an open end. Progress (``last_key``, ``rows``, ``chunks``, ``done``) is written only by the
    change log's ``append``, together with the chunk that made it.
    """

    part: int
    table: str  # "schema.name"
    lower: str | None = None
    upper: str | None = None
    estimate: int = 0  # rows expected in the part when planned (pg_class.reltuples share)
    last_key: str | None = None
    rows: int = 0
    chunks: int = 0
    done: bool = False

    def start_key(self) -> list[str] | None:
        """Where the next chunk starts (exclusive): the last key read, else the part's lower end."""
        text = self.last_key if self.last_key is not None else self.lower
        return None if text is None else json.loads(text)


@dataclass(frozen=True, slots=True)
class TableStatus:
    """One table's own end (issue 28.3): a table fails or is cancelled alone, the others go on.
    A table with no entry runs (or is done, when its parts are)."""

    table: str
    state: Literal["cancelled", "failed"]
    error: str | None = None
    finished_at: float | None = None


def derive_state(table_states: dict[str, TableState]) -> BackfillState:
    """A backfill's state from its tables': ``running`` while any runs; ``done`` when every
    table is done; else ``failed`` when one failed, ``cancelled`` when one was cancelled."""
    states = set(table_states.values())
    if "running" in states:
        return "running"
    if "failed" in states:
        return "failed"
    if "cancelled" in states:
        return "cancelled"
    return "done"


@dataclass(frozen=True, slots=True)
class BackfillRecord:
    """A backfill as the change log keeps it (``ChangeLog.save_backfill`` / ``backfills``)."""

    id: str
    tables: tuple[str, ...]
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    parallel: int = DEFAULT_PARALLEL
    state: BackfillState = "running"
    error: str | None = None
    created_at: float = 0.0  # Unix seconds
    finished_at: float | None = None
    initial: bool = False  # the feed's initial snapshot (option ``snapshot``)
    parts: tuple[BackfillPart, ...] = field(default_factory=tuple)
    ended: tuple[TableStatus, ...] = ()  # tables failed or cancelled alone (kept in the header)

    def ended_table(self, table: str) -> TableStatus | None:
        return next((t for t in self.ended if t.table == table), None)

    def table_state(self, table: str) -> TableState:
        """``failed``/``cancelled`` as recorded; else ``done`` when every part of the table is
        done (a table refused before any part was planned has an ``ended`` entry), or when
        the whole backfill is done (stores may keep no parts then); else ``running``."""
        ended = self.ended_table(table)
        if ended is not None:
            return ended.state
        if self.state == "done":
            return "done"
        parts = [p for p in self.parts if p.table == table]
        if parts and all(p.done for p in parts):
            return "done"
        return "cancelled" if self.state == "cancelled" else (
            "failed" if self.state == "failed" else "running")

    def table_states(self) -> dict[str, TableState]:
        return {t: self.table_state(t) for t in self.tables}

    def with_table(self, status: TableStatus | None, table: str) -> BackfillRecord:
        """The record with ``table``'s own end replaced (None: the table runs again)."""
        ended = tuple(t for t in self.ended if t.table != table)
        return replace(self, ended=ended if status is None else (*ended, status))

    def header(self) -> str:
        """The record without its parts, as JSON (what stores keep in one column)."""
        data: dict[str, Any] = {
            "id": self.id, "tables": list(self.tables), "chunk_rows": self.chunk_rows,
            "parallel": self.parallel, "state": self.state, "error": self.error,
            "created_at": self.created_at, "finished_at": self.finished_at,
            "initial": self.initial}
        if self.ended:
            data["ended"] = [{"table": t.table, "state": t.state, "error": t.error,
                              "finished_at": t.finished_at} for t in self.ended]
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_header(cls, text: str, parts: tuple[BackfillPart, ...] = ()) -> BackfillRecord:
        data = json.loads(text)
        data["tables"] = tuple(data["tables"])
        data["ended"] = tuple(TableStatus(**t) for t in data.get("ended", ()))
        return cls(**data, parts=parts)

    def with_state(self, state: BackfillState, error: str | None = None,
                   finished_at: float | None = None) -> BackfillRecord:
        return replace(self, state=state, error=error, finished_at=finished_at)
