"""Operations endpoints: liveness and readiness, open without a token; Prometheus metrics, open
unless ``metrics_auth = "read"`` puts them behind the read tokens (issue 26)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from pgfeed.http_api.auth import TokenAuth, bearer_scheme
from pgfeed.http_api.deps import MetricsDep, SupervisorDep
from pgfeed.http_api.errors import error_response
from pgfeed.http_api.schemas import ErrorBody, Health
from pgfeed.metrics import CONTENT_TYPE

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, summary="Liveness")
async def healthz() -> Health:
    return Health(status="ok")


@router.get("/readyz", response_model=Health, summary="Readiness",
            responses={503: {"model": ErrorBody, "description": "Feeds not loaded yet"}})
async def readyz(supervisor: SupervisorDep) -> Response | Health:
    """200 once the supervisor has loaded the catalogue and started its feeds, else 503."""
    if not supervisor.ready:
        return error_response(503, "not_ready", "the service is starting: feeds are not loaded yet")
    return Health(status="ready")


async def _metrics_scope(request: Request) -> None:
    """A read (or admin) token when ``metrics_auth`` is "read" and tokens are configured. The
    header is read here rather than declared (``Security``): the document would otherwise say
    /metrics always needs a token, which the default ("open") does not."""
    if request.app.state.settings.metrics_auth == "read":
        auth: TokenAuth = request.app.state.auth
        auth.check(await bearer_scheme(request), "read")


@router.get("/metrics", summary="Prometheus metrics", response_class=Response,
            dependencies=[Depends(_metrics_scope)],
            description='Open by default; behind the read tokens with `metrics_auth = "read"` '
                        "(`--metrics-auth read`, `PGFEED_METRICS_AUTH`).",
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
                       401: {"model": ErrorBody, "description": "Missing or invalid bearer token "
                                                                '(metrics_auth = "read")'}})
def metrics(metrics: MetricsDep) -> Response:
    return Response(metrics.render(), media_type=CONTENT_TYPE)
