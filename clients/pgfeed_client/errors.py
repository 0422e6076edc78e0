"""Typed client errors: each carries the service's error code, message and HTTP status."""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "ClientError",
    "CursorExpired",
    "FeedNotFound",
    "InvalidCursor",
    "TransportFailed",
    "Unauthorized",
    "error_from_response",
    "oldest_in_text",
]

_LSN_IN_TEXT = re.compile(r"\b([0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8})\b")


class ClientError(Exception):
    """An error answered by the service (``{"error": {"code", "message"}}``) or met on the way."""

    def __init__(self, message: str, *, code: str = "error", status: int | None = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.details: dict[str, Any] = details or {}

    def __str__(self) -> str:
        where = f" (HTTP {self.status})" if self.status is not None else ""
        return f"{self.code}: {self.message}{where}"


class FeedNotFound(ClientError):
    """404: no feed (or consumer) of that name."""


class CursorExpired(ClientError):
    """410: the cursor is older than retention; ``oldest`` is the oldest position still served."""

    def __init__(self, message: str, *, oldest: str | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.oldest = oldest


class InvalidCursor(ClientError):
    """400: a malformed cursor or bad request parameter; the message says the expected form."""


class Unauthorized(ClientError):
    """401/403: missing or rejected credentials."""


class TransportFailed(ClientError):
    """The service could not be reached (or kept failing with 5xx) after the allowed retries."""


def oldest_in_text(message: str) -> str | None:
    """The oldest available position named in an error message: the first LSN after the word
    "oldest", else the last LSN mentioned."""
    at = message.lower().find("oldest")
    found = _LSN_IN_TEXT.search(message, at) if at >= 0 else None
    if found is None:
        every = _LSN_IN_TEXT.findall(message)
        return every[-1] if every else None
    return found.group(1)


def error_from_response(status: int, body: Any, fallback_text: str = "") -> ClientError:
    """Map an HTTP error status and its JSON body to the typed error."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        code = str(err.get("code") or f"http_{status}")
        message = str(err.get("message") or fallback_text or f"HTTP {status}")
        details = {k: v for k, v in err.items() if k not in ("code", "message")}
    elif isinstance(body, dict) and "detail" in body:  # a framework-level error (e.g. validation)
        code, message, details = f"http_{status}", str(body["detail"]), {}
    else:
        code, message, details = f"http_{status}", fallback_text or f"HTTP {status}", {}
    kwargs: dict[str, Any] = {"code": code, "status": status, "details": details}
    if status == 404:
        return FeedNotFound(message, **kwargs)
    if status == 410:
        oldest = details.get("oldest")
        if oldest is None:
            oldest = oldest_in_text(message)
        return CursorExpired(message, oldest=None if oldest is None else str(oldest), **kwargs)
    if status in (401, 403):
        return Unauthorized(message, **kwargs)
    if status == 400:
        return InvalidCursor(message, **kwargs)
    return ClientError(message, **kwargs)
