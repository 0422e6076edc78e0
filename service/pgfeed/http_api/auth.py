"""Bearer tokens on HTTP (scopes and the token check are ``pgfeed.access``'s, shared with gRPC).

With no token configured the API is open. Missing or unknown token: 401 with
``WWW-Authenticate: Bearer``; a read token on an admin endpoint: 403.
"""

from __future__ import annotations

from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from pgfeed.access import Scope, Tokens, grants
from pgfeed.config import Settings
from pgfeed.http_api.errors import ApiError

__all__ = ["TokenAuth", "bearer_scheme"]

# Documents the scheme in /openapi.json (the "Authorize" button of /docs); checks are ours.
bearer_scheme = HTTPBearer(auto_error=False, scheme_name="bearer",
                           description="A read or admin token (`PGFEED_READ_TOKENS`, "
                                       "`PGFEED_ADMIN_TOKENS`); not needed when none is configured")


class TokenAuth:
    def __init__(self, settings: Settings) -> None:
        self._tokens = Tokens(settings)

    @property
    def enabled(self) -> bool:
        return self._tokens.enabled

    def allows(self, authorization: str | None, needed: Scope) -> bool:
        """Does an ``Authorization`` header grant ``needed``? (The ASGI fast path's check; any
        other answer than yes goes through ``check`` to get its 401/403.)"""
        if not self.enabled:
            return True
        scheme, _, token = (authorization or "").partition(" ")
        scope = self._tokens.scope_of(token) if scheme.lower() == "bearer" and token else None
        return scope is not None and grants(scope, needed)

    def check(self, credentials: HTTPAuthorizationCredentials | None, needed: Scope) -> None:
        """Raise the 401/403 ApiError unless ``credentials`` grant ``needed``."""
        if not self.enabled:
            return
        if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
            raise ApiError(401, "unauthorized", "this endpoint needs a bearer token "
                           "(Authorization: Bearer <token>)",
                           headers={"WWW-Authenticate": 'Bearer realm="pgfeed"'})
        scope = self._tokens.scope_of(credentials.credentials)
        if scope is None:
            raise ApiError(401, "unauthorized", "the bearer token is not valid",
                           headers={"WWW-Authenticate": 'Bearer realm="pgfeed", error="invalid_token"'})
        if not grants(scope, needed):
            raise ApiError(403, "forbidden", "this endpoint needs an admin token; the token given "
                           "may only read")
