"""Bearer tokens with two scopes: read tokens read, admin tokens read and administer.

With no token configured the API is open. Tokens are compared with ``hmac.compare_digest``
against every configured token (no early exit). Missing or unknown token: 401 with
``WWW-Authenticate: Bearer``; a read token on an admin endpoint: 403.
"""

from __future__ import annotations

import hmac
from typing import Literal

from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.config import Settings
from service.http_api.errors import ApiError

__all__ = ["TokenAuth", "bearer_scheme"]

Scope = Literal["read", "admin"]

# Documents the scheme in /openapi.json (the "Authorize" button of /docs); checks are ours.
bearer_scheme = HTTPBearer(auto_error=False, scheme_name="bearer",
                           description="A read or admin token (`PGFEED_READ_TOKENS`, "
                                       "`PGFEED_ADMIN_TOKENS`); not needed when none is configured")


class TokenAuth:
    def __init__(self, settings: Settings) -> None:
        self._read = [t.get_secret_value().encode() for t in settings.read_tokens
                      if t.get_secret_value()]
        self._admin = [t.get_secret_value().encode() for t in settings.admin_tokens
                       if t.get_secret_value()]

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

    def check(self, credentials: HTTPAuthorizationCredentials | None, needed: Scope) -> None:
        """Raise the 401/403 ApiError unless ``credentials`` grant ``needed``."""
        if not self.enabled:
            return
        if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
            raise ApiError(401, "unauthorized", "this endpoint needs a bearer token "
                           "(Authorization: Bearer <token>)",
                           headers={"WWW-Authenticate": 'Bearer realm="pgfeed"'})
        scope = self.scope_of(credentials.credentials)
        if scope is None:
            raise ApiError(401, "unauthorized", "the bearer token is not valid",
                           headers={"WWW-Authenticate": 'Bearer realm="pgfeed", error="invalid_token"'})
        if needed == "admin" and scope != "admin":
            raise ApiError(403, "forbidden", "this endpoint needs an admin token; the token given "
                           "may only read")
