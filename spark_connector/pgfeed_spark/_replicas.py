"""Several pgfeed replicas behind one data source: which base URL a partition talks to."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

__all__ = ["parse_urls", "reachable_first"]

PROBE_SECONDS = 2.0


def parse_urls(url: str | None, urls: str | None) -> tuple[str, ...]:
    """``url`` and ``urls`` (each possibly comma-separated) -> distinct base URLs, in order."""
    found: list[str] = []
    for text in (url, urls):
        for part in (text or "").split(","):
            part = part.strip().rstrip("/")
            if part and part not in found:
                found.append(part)
    return tuple(found)


def _accepts(url: str) -> bool:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "localhost", port), PROBE_SECONDS):
            return True
    except OSError:
        return False


def reachable_first(urls: tuple[str, ...], index: int) -> str:
    """``urls[index % n]`` if it accepts a TCP connection, else the next one that does (in
    order, wrapping); if none does, the preferred one (its client reports the failure)."""
    order = [urls[(index + i) % len(urls)] for i in range(len(urls))]
    return next((u for u in order if _accepts(u)), order[0])
