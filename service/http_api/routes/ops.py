"""Operations endpoints, open without a token: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

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


@router.get("/metrics", summary="Prometheus metrics", response_class=Response,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}})
def metrics(metrics: MetricsDep) -> Response:
    return Response(metrics.render(), media_type=CONTENT_TYPE)
