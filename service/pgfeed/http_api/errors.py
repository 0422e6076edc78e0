"""Every failure -> the contract's ``{"error": {"code", "message"}}`` with the right status.

Client input never yields a 5xx; nothing answers with a stack trace (the last-resort handler lives
in ``middleware.py``, outside FastAPI's own exception handling).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from pgfeed.changelog.base import ChangeLogError
from pgfeed.encoding import JSON_MEDIA_TYPE
from pgfeed.errors import (
    BackfillError,
    CursorAhead,
    FeedExists,
    FeedNotFound,
    FeedStateConflict,
    PgfeedError,
    RetentionError,
    SourceError,
)
from pgfeed_client._cursor import CursorError

__all__ = ["ApiError", "answer_for", "error_response", "install_handlers"]

log = logging.getLogger("pgfeed.http")

_STATUS_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                 405: "method_not_allowed", 406: "not_acceptable", 409: "conflict",
                 413: "payload_too_large", 415: "unsupported_media_type", 422: "unprocessable",
                 429: "too_many_requests", 500: "internal_error", 503: "unavailable"}


class ApiError(Exception):
    """An error answer decided by a route: status, code, message and extra fields."""

    def __init__(self, status: int, code: str, message: str, *,
                 headers: Mapping[str, str] | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})
        self.extra = extra


def error_response(status: int, code: str, message: str, *,
                   headers: Mapping[str, str] | None = None, **extra: Any) -> Response:
    body = orjson.dumps({"error": {"code": code, "message": message, **extra}})
    return Response(body, status_code=status, media_type=JSON_MEDIA_TYPE,
                    headers=dict(headers or {}))


def bad_parameter(name: str, message: str) -> ApiError:
    return ApiError(400, "invalid_parameter", f"query parameter {name!r}: {message}")


# -- PgfeedError and friends ------------------------------------------------------------------------

def _pgfeed_error(exc: Exception) -> Response:
    if isinstance(exc, RetentionError):
        return error_response(410, exc.code, str(exc), oldest=exc.oldest)
    if isinstance(exc, FeedNotFound):
        return error_response(404, exc.code, str(exc))
    if isinstance(exc, CursorAhead):
        return error_response(400, exc.code, str(exc))
    if isinstance(exc, (FeedExists, FeedStateConflict)):
        return error_response(409, exc.code, str(exc))
    if isinstance(exc, BackfillError):
        return error_response(exc.status, exc.code, str(exc))
    if isinstance(exc, SourceError):
        # The request was well formed but the source refused it (unreachable, bad credentials, a
        # table or slot that does not exist): the caller must change the request or the source.
        return error_response(422, exc.code, str(exc))
    if isinstance(exc, ChangeLogError):
        return error_response(503, exc.code, str(exc))
    assert isinstance(exc, PgfeedError)
    # Decode/schema/assembly errors: the stored data, not the request, is at fault.
    log.error("serving failed: %s: %s", type(exc).__name__, exc)
    return error_response(500, exc.code, str(exc))


def _cursor_error(exc: CursorError) -> Response:
    message = str(exc)
    if CursorError.expected not in message:
        message = f"{message}; expected {CursorError.expected}"
    return error_response(400, "invalid_cursor", message)


def answer_for(exc: ApiError | PgfeedError | CursorError) -> Response:
    """The answer to an error a route raised (what the handlers below give FastAPI)."""
    if isinstance(exc, ApiError):
        return error_response(exc.status, exc.code, exc.message, headers=exc.headers, **exc.extra)
    if isinstance(exc, CursorError):
        return _cursor_error(exc)
    return _pgfeed_error(exc)


async def _on_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError | PgfeedError | CursorError)
    return answer_for(exc)


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    if status == 404:
        message = f"no route {request.method} {request.url.path}"
    elif status == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
    else:
        message = str(exc.detail)
    return error_response(status, _STATUS_CODES.get(status, f"http_{status}"), message,
                          headers=exc.headers)


def describe_validation(errors: Sequence[Any]) -> tuple[int, str, str]:
    """FastAPI validation errors -> (status, code, readable message). Values the client sent are
    never echoed (a DSN may hold a password)."""
    parts = []
    status, code = 400, "invalid_parameter"
    for err in errors:
        loc = [str(p) for p in err.get("loc", ())]
        where = loc[0] if loc else "request"
        field = ".".join(loc[1:])
        kind = err.get("type", "")
        if kind == "json_invalid":
            detail = (err.get("ctx") or {}).get("error", "")
            return 400, "invalid_json", f"the request body is not valid JSON: {detail}".rstrip(": ")
        msg = str(err.get("msg", "invalid"))
        if where == "body" and not field and kind in ("model_attributes_type", "dict_type"):
            msg = "expected a JSON object (sent with Content-Type: application/json)"
        if where == "body":
            status, code = 422, "invalid_body"
            parts.append(f"body field {field!r}: {msg}" if field else f"body: {msg}")
        elif where in ("query", "path", "header", "cookie"):
            parts.append(f"{where} parameter {field!r}: {msg}")
        else:
            parts.append(msg)
    return status, code, "; ".join(parts) or "invalid request"


async def _on_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    status, code, message = describe_validation(exc.errors())
    return error_response(status, code, message)


def install_handlers(app: FastAPI) -> None:
    for kind in (ApiError, PgfeedError, CursorError):
        app.add_exception_handler(kind, _on_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
