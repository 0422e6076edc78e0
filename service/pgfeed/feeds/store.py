"""Where a supervisor keeps its feeds: the catalogue, each feed's change log and spill directory.

``LocalStore`` is the embedded default (the data dir: ``catalogue.json`` and a SQLite log per
feed, one process). ``pgfeed.pgstore.store.PgStore`` keeps the same in a PostgreSQL database
shared by several replicas (``shared``: feeds are captured by the holder of their lease).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Protocol

from pgfeed.changelog import open_changelog
from pgfeed.changelog.base import ChangeLog
from pgfeed.errors import FeedExists
from pgfeed.feeds.catalogue import Catalogue
from pgfeed.feeds.model import FeedSpec
from pgfeed.feeds.toastindex import INDEX_FILE

__all__ = ["FeedStore", "LocalStore"]


class FeedStore(Protocol):
    shared: bool  # several replicas use it: capture follows leases

    def feeds(self) -> list[tuple[FeedSpec, bool]]:
        """Every feed with its paused flag."""
        ...

    def add(self, spec: FeedSpec) -> None:
        """Record a new feed; FeedExists if the name is taken (by any replica)."""
        ...

    def put(self, spec: FeedSpec, paused: bool) -> None: ...

    def remove(self, name: str) -> None: ...

    def open_log(self, name: str) -> ChangeLog: ...

    def discard_log(self, name: str, changelog: ChangeLog) -> None:
        """Delete a (closed) feed's log and files for good."""
        ...

    def spill_dir(self, name: str) -> Path: ...

    def toast_index_path(self, name: str) -> Path | str:
        """Where a ``toast=reselect`` feed's fill index lives (``feeds.toastindex``)."""
        ...

    def close(self) -> None: ...


class LocalStore:
    """The data dir of one process: catalogue.json, feeds/<name>/changelog.db and spill/."""

    shared = False

    def __init__(self, data_dir: Path, changelog_kind: str = "sqlite") -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._kind = changelog_kind
        self._catalogue = Catalogue(self.data_dir / "catalogue.json")

    def _feed_dir(self, name: str) -> Path:
        return self.data_dir / "feeds" / name

    def feeds(self) -> list[tuple[FeedSpec, bool]]:
        return self._catalogue.items()

    def add(self, spec: FeedSpec) -> None:
        if any(s.name == spec.name for s, _ in self._catalogue.items()):
            raise FeedExists(f"feed {spec.name!r} already exists")
        self._catalogue.put(spec)

    def put(self, spec: FeedSpec, paused: bool) -> None:
        self._catalogue.put(spec, paused=paused)

    def remove(self, name: str) -> None:
        self._catalogue.remove(name)

    def open_log(self, name: str) -> ChangeLog:
        directory = self._feed_dir(name)
        directory.mkdir(parents=True, exist_ok=True)
        return open_changelog(self._kind, directory / "changelog.db")

    def discard_log(self, name: str, changelog: ChangeLog) -> None:
        shutil.rmtree(self._feed_dir(name), ignore_errors=True)

    def spill_dir(self, name: str) -> Path:
        return self._feed_dir(name) / "spill"

    def toast_index_path(self, name: str) -> Path | str:
        return self._feed_dir(name) / INDEX_FILE if self._kind == "sqlite" else ":memory:"

    def close(self) -> None:
        pass
