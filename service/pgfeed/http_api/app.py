"""The FastAPI application: ``create_app(supervisor, settings, metrics)`` wires routers, token
checks, error handlers, metrics and the OpenAPI document; nothing is created at import time."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.types import Receive, Scope, Send

import pgfeed
from pgfeed.config import Settings
from pgfeed.encoding import JSON_MEDIA_TYPE
from pgfeed.feeds.history import History
from pgfeed.feeds.notify import StopSignal
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.http_api.auth import TokenAuth
from pgfeed.http_api.errors import install_handlers
from pgfeed.http_api.fastpath import TailFastPath
from pgfeed.http_api.middleware import ObserveMiddleware
from pgfeed.http_api.params import reject_unknown_query
from pgfeed.http_api.readahead import ReadAhead
from pgfeed.http_api.routes import (
    backfills,
    changes,
    consumers,
    feeds,
    history,
    ops,
    replicas,
    retention,
    sequences,
)
from pgfeed.http_api.routes.docs import install_docs
from pgfeed.http_api.routes.ui import install_ui
from pgfeed.http_api.schemas import ErrorBody
from pgfeed.metrics import Metrics
from pgfeed_client._headers import MAX_LIMIT

__all__ = ["create_app"]

_DESCRIPTION = """Change data capture for PostgreSQL: read feeds by LSN cursor (JSON or Arrow),
acknowledge named consumers, and administer feeds.

Cursors: `16/B374D848` (everything up to that commit), `16/B374D848:41` (changes 0..41 of it),
`earliest`, `latest`. Errors are `{"error": {"code", "message"}}`. When tokens are configured,
reading needs a read or admin bearer token and administration an admin token."""

_ERROR = {"model": ErrorBody}
_READ_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {**_ERROR, "description": "Malformed cursor or bad parameter"},
    401: {**_ERROR, "description": "Missing or invalid bearer token"},
    404: {**_ERROR, "description": "Unknown feed (or consumer)"},
    410: {**_ERROR, "description": "Cursor older than retention; `oldest` names the oldest position"},
}
_ADMIN_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {**_ERROR, "description": "Bad parameter"},
    401: {**_ERROR, "description": "Missing or invalid bearer token"},
    403: {**_ERROR, "description": "A read token on an admin endpoint"},
    404: {**_ERROR, "description": "Unknown feed"},
}


class _Api(FastAPI):
    """FastAPI that asks the caught-up long-poll fast path (``fastpath.py``) before its
    middleware stack: the stack's layers cost more than the answer, once per commit per
    subscriber."""

    tail_path: TailFastPath | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        fast = self.tail_path
        if fast is not None and scope["type"] == "http" and await fast(scope, receive, send):
            return
        await super().__call__(scope, receive, send)


def create_app(supervisor: Supervisor, settings: Settings, metrics: Metrics | None = None) -> FastAPI:
    app = _Api(title="pgfeed", version=pgfeed.__version__, description=_DESCRIPTION,
                  docs_url=None, redoc_url=None,  # served offline by install_docs
                  # operation ids are the route functions' names (`create_feed`, `list_changes`):
                  # what generated clients call their methods, not FastAPI's path-derived ids
                  generate_unique_id_function=lambda route: route.name,
                  dependencies=[Depends(reject_unknown_query)],  # a misspelled filter is a 422
                  openapi_tags=[
                      {"name": "reading", "description": "Pages of changes and transactions"},
                      {"name": "consumers", "description": "Acknowledged cursors"},
                      {"name": "admin", "description": "Feeds (admin token)"},
                      {"name": "operations", "description": "Health and metrics (open; metrics behind "
                                                                  "the read tokens with metrics_auth = read)"},
                  ])
    app.state.supervisor = supervisor
    app.state.settings = settings
    app.state.metrics = metrics if metrics is not None else Metrics(supervisor)
    app.state.auth = TokenAuth(settings)
    app.state.read_ahead = ReadAhead()
    app.state.query_params = {}  # id(route) -> its query parameters (http_api.params)
    app.state.history = History()  # the runtime's, sampled by its task, replaces this empty one
    app.state.stop = StopSignal()  # set by the runtime when shutdown begins: long-polls answer
    app.include_router(changes.router, responses=_READ_ERRORS)
    app.include_router(consumers.router, responses=_READ_ERRORS)  # PUT's 422: see _openapi
    app.include_router(feeds.router, responses=_ADMIN_ERRORS)
    app.include_router(history.router, responses=_ADMIN_ERRORS)
    app.include_router(retention.router, responses=_ADMIN_ERRORS)
    app.include_router(replicas.router, responses={k: _ADMIN_ERRORS[k] for k in (401, 403)})
    app.include_router(backfills.router, responses=_ADMIN_ERRORS)
    app.include_router(sequences.router, responses=_ADMIN_ERRORS)
    app.include_router(ops.router)
    install_docs(app)  # /docs, /redoc from packaged assets (no CDN)
    install_ui(app)  # /ui: the admin console
    install_handlers(app)
    changes_route = next(r for r in changes.router.routes if getattr(r, "path", None) == changes.CHANGES_PATH)
    app.tail_path = TailFastPath(app.state, route=changes_route, max_limit=MAX_LIMIT,
                                 max_wait=changes.MAX_WAIT)
    app.add_middleware(ObserveMiddleware, metrics=app.state.metrics)  # outermost

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


_VALIDATION_REF = "#/components/schemas/HTTPValidationError"


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, with its validation-error answers replaced by the contract's error
    body: query and path problems are 400, body problems 422, and so is a query parameter the
    endpoint does not take."""
    doc = get_openapi(title=app.title, version=app.version, description=app.description,
                      routes=app.routes, tags=app.openapi_tags)
    error_ref = {"$ref": "#/components/schemas/ErrorBody"}
    for path_item in doc.get("paths", {}).values():
        for operation in path_item.values():
            responses = operation.get("responses", {})
            default_422 = responses.get("422")
            if default_422 is not None and _VALIDATION_REF in str(default_422):
                del responses["422"]
            else:  # a 422 the route documents itself (DELETE: the source refused) stays
                default_422 = None
            if "requestBody" in operation:
                responses.setdefault("422", {"description": "Invalid request body",
                                             "content": {JSON_MEDIA_TYPE: {"schema": error_ref}}})
                responses.setdefault("400", {"description": "Malformed JSON body",
                                             "content": {JSON_MEDIA_TYPE: {"schema": error_ref}}})
            if default_422 is not None and operation.get("parameters"):
                responses.setdefault("400", {"description": "Bad parameter",
                                             "content": {JSON_MEDIA_TYPE: {"schema": error_ref}}})
    for path, path_item in doc.get("paths", {}).items():
        if not path.startswith("/v1/"):
            continue
        for operation in path_item.values():  # http_api.params: every /v1 route refuses them
            known = operation["responses"].setdefault("422", {
                "description": "", "content": {JSON_MEDIA_TYPE: {"schema": error_ref}}})
            known["description"] = "; ".join(filter(None, (
                known["description"], "`unknown_parameter`: a query parameter the endpoint does "
                                      "not take (named, with the nearest one it takes)")))
    schemas = doc.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    return doc
