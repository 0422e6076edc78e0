"""A feed's recent history and per-table counts, as the console draws them (issue 30.1): kept in
this process's memory by ``pgfeed.feeds.history`` (status scope)."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from pgfeed.feeds.history import History
from pgfeed.http_api.deps import StatusScope, SupervisorDep
from pgfeed.http_api.routes.changes import FeedName
from pgfeed.http_api.routes.feeds import iso_time
from pgfeed_client._cursor import format_lsn

router = APIRouter(prefix="/v1/feeds", tags=["admin"], dependencies=[StatusScope])


class SampleOut(BaseModel):
    at: float = Field(description="When the sample was taken (Unix seconds)")
    state: str
    lag_bytes: int | None = None
    lag_seconds: float | None = None
    changes_per_second: float = Field(description="Live changes captured a second since the "
                                                  "previous sample")
    backfill_rows_per_second: float
    served_per_second: float = Field(description="Changes served to readers a second (HTTP "
                                                 "and gRPC)")
    retained_bytes: int | None = Field(None, description="WAL the slot retains on the source")
    safe_wal_size: int | None = Field(None, description="WAL the slot may still retain before "
                                                        "it is lost (null: unlimited or unknown)")
    consumers: dict[str, int] = Field(description="Named consumer -> bytes behind the head")


class HistoryOut(BaseModel):
    feed: str
    interval_seconds: float = Field(description="Seconds between samples")
    keep_hours: float = Field(description="Hours kept; samples live in the server's memory "
                                          "(a restart starts afresh)")
    samples: list[SampleOut]


class TableCountOut(BaseModel):
    table: str
    changes: int = Field(description="Live row changes (inserts, updates, deletes)")
    inserts: int
    updates: int
    deletes: int
    backfill_rows: int = Field(description="Rows backfills read into the feed")
    last_change_at: str | None = Field(None, description="Commit time of the newest live change "
                                                         "(ISO 8601 UTC)")


class TableCountsOut(BaseModel):
    feed: str
    counted_to: str | None = Field(None, description="The last transaction counted (behind the "
                                                     "head by at most one sample's worth)")
    counted_changes: int
    count_seconds: float = Field(description="Time this process spent counting")
    tables: list[TableCountOut]


def _history(request: Request) -> History:
    history: History = request.app.state.history
    return history


@router.get("/{feed}/history", response_model=HistoryOut, summary="A feed's recent history")
def feed_history(feed: FeedName, request: Request, supervisor: SupervisorDep,
                 since: float | None = Query(None, description="Only samples taken after this "
                                                               "time (Unix seconds)")) -> HistoryOut:
    """Samples of lag, live and backfill rates, changes served, retained and safe WAL, and each
    consumer's distance from the head, one every `interval_seconds` for the last `keep_hours`
    (a ring in this process's memory). 404 for an unknown feed."""
    supervisor.spec(feed)  # 404 when unknown
    history = _history(request)
    return HistoryOut(feed=feed, interval_seconds=history.interval, keep_hours=history.hours,
                      samples=[SampleOut(**{k: getattr(s, k) for k in s.__slots__})
                               for s in history.samples(feed, since)])


@router.get("/{feed}/table-counts", response_model=TableCountsOut,
            summary="Changes per table and the last change")
def table_counts(feed: FeedName, request: Request, supervisor: SupervisorDep) -> TableCountsOut:
    """Per table: live row changes (by op), backfill rows, and the commit time of the newest
    change, counted from the feed's log since this process started (what the log holds then
    included), one history sample behind the head. 404 for an unknown feed."""
    supervisor.spec(feed)
    tables, after, counted, seconds = _history(request).tables(feed)
    return TableCountsOut(
        feed=feed, counted_to=None if after is None else format_lsn(after.lsn),
        counted_changes=counted, count_seconds=round(seconds, 4),
        tables=[TableCountOut(table=name, changes=c.changes, inserts=c.inserts, updates=c.updates,
                              deletes=c.deletes, backfill_rows=c.backfill_rows,
                              last_change_at=None if c.last_change_at is None
                              else iso_time(c.last_change_at))
                for name, c in sorted(tables.items())])
