"""The feed catalogue: feed definitions and their paused flag, persisted atomically in the data dir.

The file holds source DSNs (passwords included, to reconnect), so it is written with mode 0600.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from pgfeed.feeds.model import FeedSpec


class Catalogue:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._feeds: dict[str, tuple[FeedSpec, bool]] = {}
        if path.exists():
            data = json.loads(path.read_text())
            for entry in data.get("feeds", []):
                self._feeds[entry["spec"]["name"]] = (FeedSpec.from_dict(entry["spec"]), entry.get("paused", False))

    def items(self) -> list[tuple[FeedSpec, bool]]:
        with self._lock:
            return list(self._feeds.values())

    def put(self, spec: FeedSpec, *, paused: bool = False) -> None:
        with self._lock:
            self._feeds[spec.name] = (spec, paused)
            self._save()

    def set_paused(self, name: str, paused: bool) -> None:
        with self._lock:
            spec, _ = self._feeds[name]
            self._feeds[name] = (spec, paused)
            self._save()

    def remove(self, name: str) -> None:
        with self._lock:
            self._feeds.pop(name, None)
            self._save()

    def _save(self) -> None:
        """Write-then-rename with fsync, so a crash leaves the old or the new catalogue, never half."""
        data = {"feeds": [{"spec": s.to_dict(), "paused": p} for s, p in self._feeds.values()]}
        tmp = self._path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        dir_fd = os.open(self._path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
