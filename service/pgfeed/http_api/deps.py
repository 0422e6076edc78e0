"""Typed dependencies of the routes: the supervisor and metrics the app was built with,
and the two token scopes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials

from pgfeed.access import FEED_STATUS
from pgfeed.feeds.notify import StopSignal
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.http_api.auth import TokenAuth, bearer_scheme
from pgfeed.http_api.readahead import ReadAhead
from pgfeed.metrics import Metrics

__all__ = ["AdminScope", "MetricsDep", "ReadAheadDep", "ReadScope", "StatusScope",
           "StopDep", "SupervisorDep"]


def _supervisor(request: Request) -> Supervisor:
    supervisor: Supervisor = request.app.state.supervisor
    return supervisor


def _read_ahead(request: Request) -> ReadAhead:
    read_ahead: ReadAhead = request.app.state.read_ahead
    return read_ahead


def _stop(request: Request) -> StopSignal:
    stop: StopSignal = request.app.state.stop
    return stop


def _metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


SupervisorDep = Annotated[Supervisor, Depends(_supervisor)]
MetricsDep = Annotated[Metrics, Depends(_metrics)]
ReadAheadDep = Annotated[ReadAhead, Depends(_read_ahead)]
StopDep = Annotated[StopSignal, Depends(_stop)]

Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)]


def require_read(request: Request, credentials: Credentials) -> None:
    auth: TokenAuth = request.app.state.auth
    auth.check(credentials, "read")


def require_admin(request: Request, credentials: Credentials) -> None:
    auth: TokenAuth = request.app.state.auth
    auth.check(credentials, "admin")


def require_status(request: Request, credentials: Credentials) -> None:
    auth: TokenAuth = request.app.state.auth
    auth.check(credentials, FEED_STATUS)


ReadScope = Depends(require_read)
AdminScope = Depends(require_admin)
StatusScope = Depends(require_status)  # a feed's status: the scope gRPC's ListFeeds/GetFeed need too
