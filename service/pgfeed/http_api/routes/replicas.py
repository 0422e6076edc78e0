"""Replicas sharing the store: ``GET /v1/replicas`` (admin), each with its last heartbeat."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter

from pgfeed.http_api.deps import AdminScope, SupervisorDep
from pgfeed.http_api.routes.feeds import iso_time
from pgfeed.http_api.schemas import ReplicaList, ReplicaOut

router = APIRouter(prefix="/v1/replicas", tags=["admin"], dependencies=[AdminScope])


@router.get("", response_model=ReplicaList, summary="Replicas and their heartbeats")
async def list_replicas(supervisor: SupervisorDep) -> ReplicaList:
    """Every replica that has used the store, its last heartbeat (``alive`` while recent) and the
    feeds it leads; with the embedded store, this process alone."""
    replicas = await asyncio.to_thread(supervisor.replicas)
    return ReplicaList(replicas=[
        ReplicaOut(id=r.id, started_at=iso_time(r.started_at), heartbeat_at=iso_time(r.heartbeat_at),
                   age_seconds=round(r.age_seconds, 3), alive=r.alive, leads=r.leads) for r in replicas])
