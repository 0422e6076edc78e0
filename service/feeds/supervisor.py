"""Feed supervisor: the catalogue's feeds, one capture thread each, their logs, status and lifecycle."""

from __future__ import annotations

from pathlib import Path

from service.assembler.relations import RelationCatalog
from service.changelog.base import ChangeLog
from service.feeds.model import FeedSpec, FeedStatus
from service.feeds.notify import HeadNotifier


class Supervisor:
    """Owns every feed of one service process. Thread-safe; API handlers call it directly.

    Errors: FeedNotFound (unknown name), FeedExists (create twice), SourceError (the source refused).
    """

    def __init__(self, data_dir: Path, *, changelog_kind: str = "sqlite", capture: bool = True) -> None:
        raise NotImplementedError

    def start(self) -> None:
        """Load the catalogue and start capturing every feed that is not paused."""

    def stop(self) -> None:
        """Stop every capture (final feedback sent, connections closed) and close the logs."""

    def names(self) -> list[str]: ...
    def spec(self, name: str) -> FeedSpec: ...
    def status(self, name: str) -> FeedStatus: ...
    def statuses(self) -> list[FeedStatus]: ...
    def create(self, spec: FeedSpec) -> FeedStatus: ...
    def delete(self, name: str) -> None: ...
    def pause(self, name: str) -> FeedStatus: ...
    def resume(self, name: str) -> FeedStatus: ...
    def changelog(self, name: str) -> ChangeLog: ...
    def notifier(self, name: str) -> HeadNotifier: ...
    def catalog(self, name: str) -> RelationCatalog:
        """The feed's relation catalogue, up to date with the log's schema history."""
        ...
