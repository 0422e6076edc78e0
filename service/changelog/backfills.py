"""What the change log keeps about a backfill: its request, state and per-part progress."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Literal

BackfillState = Literal["running", "done", "cancelled", "failed"]
STATES: tuple[BackfillState, ...] = ("running", "done", "cancelled", "failed")
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

    def header(self) -> str:
        """The record without its parts, as JSON (what stores keep in one column)."""
        data: dict[str, Any] = {
            "id": self.id, "tables": list(self.tables), "chunk_rows": self.chunk_rows,
            "parallel": self.parallel, "state": self.state, "error": self.error,
            "created_at": self.created_at, "finished_at": self.finished_at,
            "initial": self.initial}
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_header(cls, text: str, parts: tuple[BackfillPart, ...] = ()) -> BackfillRecord:
        data = json.loads(text)
        data["tables"] = tuple(data["tables"])
        return cls(**data, parts=parts)

    def with_state(self, state: BackfillState, error: str | None = None,
                   finished_at: float | None = None) -> BackfillRecord:
        return replace(self, state=state, error=error, finished_at=finished_at)
