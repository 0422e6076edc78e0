"""Who may do what, for HTTP and gRPC alike: the two token scopes, how a bearer token maps to one,
and the scope each kind of operation needs.

Read tokens read changes (and acknowledge them as named consumers); admin tokens also administer.
A feed's status (its masked source, slot, positions, errors, consumers) is administration on both
surfaces (``FEED_STATUS``): readers discover what a feed holds through its tables and changes.
With no token configured everything is open.
"""

from __future__ import annotations

import hmac
from typing import Literal

from pgfeed.config import Settings

__all__ = ["CHANGE_FEED_SCOPES", "FEED_STATUS", "Scope", "Tokens", "grants", "grpc_scope"]

Scope = Literal["read", "admin"]

FEED_STATUS: Scope = "admin"

# pgfeed.v1.ChangeFeed's methods; one not listed needs an admin token (closed by default).
CHANGE_FEED_SCOPES: dict[str, Scope] = {"Subscribe": "read", "ListFeeds": FEED_STATUS,
                                        "GetFeed": FEED_STATUS}
_CHANGE_FEED = "pgfeed.v1.ChangeFeed"


def grants(scope: Scope, needed: Scope) -> bool:
    """Admin tokens may do everything; read tokens only what needs ``read``."""
    return scope == "admin" or needed == "read"


def grpc_scope(method: str) -> Scope:
    """``/pgfeed.v1.ChangeFeed/GetFeed`` -> the scope it needs; other services (reflection) read."""
    service, _, name = method.lstrip("/").partition("/")
    if service == _CHANGE_FEED:
        return CHANGE_FEED_SCOPES.get(name, "admin")
    return "read"


class Tokens:
    """The configured tokens. A token is compared with ``hmac.compare_digest`` against every one
    (no early exit), so timing does not tell which part matched."""

    def __init__(self, settings: Settings) -> None:
        self._read = [t.get_secret_value().encode() for t in settings.read_tokens if t.get_secret_value()]
        self._admin = [t.get_secret_value().encode() for t in settings.admin_tokens if t.get_secret_value()]

    @property
    def enabled(self) -> bool:
        return bool(self._read or self._admin)

    def scope_of(self, token: str) -> Scope | None:
        given = token.encode()
        admin = read = False
        for known in self._admin:
            admin |= hmac.compare_digest(given, known)
        for known in self._read:
            read |= hmac.compare_digest(given, known)
        return "admin" if admin else ("read" if read else None)
