"""Backfills of a feed: start, list, show, cancel; one table cancelled or retried alone (admin
tokens only)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, status
from starlette.responses import Response

from pgfeed.backfill.manager import BackfillManager
from pgfeed.changelog.backfills import BackfillRecord
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.http_api.deps import AdminScope, SupervisorDep
from pgfeed.http_api.routes.changes import FeedName
from pgfeed.http_api.schemas import (
    BackfillCreate,
    BackfillList,
    BackfillOut,
    BackfillTableOut,
    ErrorBody,
)

log = logging.getLogger("pgfeed.http")

router = APIRouter(prefix="/v1/feeds/{feed}/backfills", tags=["admin"], dependencies=[AdminScope])


def backfill_out(manager: BackfillManager, record: BackfillRecord) -> BackfillOut:
    """A backfill as served: durable progress per table, this process's rate and ETA."""
    tables = []
    for table in record.tables:
        parts = [p for p in record.parts if p.table == table]
        rows = sum(p.rows for p in parts)
        state = record.table_state(table)
        ended = record.ended_table(table)
        tables.append(BackfillTableOut(
            table=table, parts=len(parts), rows=rows, chunks=sum(p.chunks for p in parts),
            estimate_left=0 if state != "running" else sum(
                0 if p.done else max(0, p.estimate - p.rows) for p in parts),
            done=state == "done", state=state, error=None if ended is None else ended.error))
    rate, redone, problem = manager.live(record.id) if record.state == "running" else (0.0, 0, None)
    left = sum(t.estimate_left for t in tables)
    return BackfillOut(
        id=record.id, state=record.state, tables=tables, rows=sum(t.rows for t in tables),
        chunks=sum(t.chunks for t in tables), estimate_left=left, rows_per_second=round(rate, 1),
        eta_seconds=round(left / rate, 1) if rate > 0 else None, chunk_rows=record.chunk_rows,
        parallel=record.parallel, initial=record.initial, redone_chunks=redone,
        last_error=record.error or problem, created_at=record.created_at,
        finished_at=record.finished_at)


def running(supervisor: Supervisor, feed: str) -> list[BackfillOut]:
    manager = supervisor.backfills(feed)
    return [backfill_out(manager, r) for r in manager.records()
            if r.state == "running" or (r.initial and r.state != "done")]


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=BackfillOut,
             summary="Start a backfill", responses={
                 404: {"model": ErrorBody, "description": "Unknown feed or table"},
                 409: {"model": ErrorBody, "description": "A backfill of one of the tables runs"},
                 422: {"model": ErrorBody, "description": "Invalid body, or the source refused"}})
def start_backfill(feed: FeedName, body: BackfillCreate, supervisor: SupervisorDep,
                   response: Response) -> BackfillOut:
    """Read the tables' current rows into the feed (op `read`) while it keeps streaming. Every
    table must be in the feed's publication and have a primary key (or replica identity index);
    nothing starts unless all of them can be backfilled."""
    manager = supervisor.backfills(feed)
    record = manager.start(body.tables, chunk_rows=body.chunk_rows, parallel=body.parallel)
    log.info("feed %s: backfill %s of %s", feed, record.id, ", ".join(record.tables))
    response.headers["Location"] = f"/v1/feeds/{feed}/backfills/{record.id}"
    return backfill_out(manager, record)


@router.get("", response_model=BackfillList, summary="A feed's backfills")
def list_backfills(feed: FeedName, supervisor: SupervisorDep) -> BackfillList:
    manager = supervisor.backfills(feed)
    return BackfillList(backfills=[backfill_out(manager, r) for r in manager.records()])


@router.get("/{backfill}", response_model=BackfillOut, summary="A backfill's progress",
            responses={404: {"model": ErrorBody, "description": "Unknown feed or backfill"}})
def get_backfill(feed: FeedName, backfill: str, supervisor: SupervisorDep) -> BackfillOut:
    manager = supervisor.backfills(feed)
    return backfill_out(manager, manager.get(backfill))


@router.delete("/{backfill}", response_model=BackfillOut, summary="Cancel a backfill",
               responses={404: {"model": ErrorBody, "description": "Unknown feed or backfill"}})
def cancel_backfill(feed: FeedName, backfill: str, supervisor: SupervisorDep) -> BackfillOut:
    """Stop reading (what was stored stays in the feed); a finished backfill is left as it is."""
    manager = supervisor.backfills(feed)
    return backfill_out(manager, manager.cancel(backfill))


@router.delete("/{backfill}/tables/{table}", response_model=BackfillOut,
               summary="Cancel one table of a backfill", responses={
                   404: {"model": ErrorBody,
                         "description": "Unknown feed or backfill, or a table it does not read"}})
def cancel_backfill_table(feed: FeedName, backfill: str, table: str,
                          supervisor: SupervisorDep) -> BackfillOut:
    """Stop reading `table` (`schema.table`; what was stored stays in the feed) while the
    backfill's other tables go on; it can be retried later. A table that already ended is left
    as it is. The backfill ends `cancelled` when no table runs and none failed."""
    manager = supervisor.backfills(feed)
    return backfill_out(manager, manager.cancel_table(backfill, table))


@router.post("/{backfill}/tables/{table}/retry", status_code=status.HTTP_202_ACCEPTED,
             response_model=BackfillOut, summary="Retry one table of a backfill", responses={
                 400: {"model": ErrorBody, "description": "The table still cannot be backfilled "
                                                          "(no key, not published, ...)"},
                 404: {"model": ErrorBody, "description": "Unknown feed or backfill, a table it "
                                                          "does not read, or a table gone from "
                                                          "the source"},
                 409: {"model": ErrorBody, "description": "The table is running or done, or "
                                                          "another backfill reads it"},
                 422: {"model": ErrorBody, "description": "The source refused the checks"}})
def retry_backfill_table(feed: FeedName, backfill: str, table: str,
                         supervisor: SupervisorDep) -> BackfillOut:
    """Read a `failed` or `cancelled` table again, from the last key stored for it (rows already
    in the feed are not read twice); the backfill is `running` again until its tables end. The
    table is checked first: if it still cannot be backfilled, nothing changes and the answer
    says why."""
    manager = supervisor.backfills(feed)
    record = manager.retry_table(backfill, table)
    log.info("feed %s: backfill %s table %s retried", feed, backfill, table)
    return backfill_out(manager, record)
