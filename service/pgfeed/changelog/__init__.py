"""The durable change log of a feed: the ``ChangeLog`` protocol and its stores, picked by name."""

from __future__ import annotations

from pathlib import Path

from pgfeed.changelog.base import ChangeLog, ChangeLogError, LogStats
from pgfeed.changelog.memory import MemoryChangeLog
from pgfeed.changelog.sqlite import SqliteChangeLog

__all__ = ["KINDS", "ChangeLog", "ChangeLogError", "LogStats", "MemoryChangeLog", "SqliteChangeLog",
           "open_changelog"]

KINDS = ("sqlite", "memory")


def open_changelog(kind: str, path: Path) -> ChangeLog:
    """``"sqlite"`` -> the durable log at ``path``; ``"memory"`` -> a throwaway one (``path`` unused)."""
    if kind == "sqlite":
        return SqliteChangeLog(path)
    if kind == "memory":
        return MemoryChangeLog()
    raise ValueError(f"unknown change log kind {kind!r}: expected one of {', '.join(KINDS)}")
