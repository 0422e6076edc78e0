"""Feed administration: create, list, show, change tables, pause, resume, delete (admin tokens only)."""

from __future__ import annotations

import logging
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Query, status
from starlette.responses import JSONResponse, Response

from pgfeed.dsn import mask_dsn, scrub
from pgfeed.errors import PgfeedError, SourceError, SourceRefused
from pgfeed.feeds.model import FeedOptions, FeedSpec, FeedStatus, Gap, Retention
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.http_api.deps import AdminScope, StatusScope, SupervisorDep
from pgfeed.http_api.errors import ApiError
from pgfeed.http_api.routes.changes import FeedName
from pgfeed.http_api.routes.consumers import consumers_of
from pgfeed.http_api.schemas import (
    BackfillOut,
    CheckOut,
    ErrorBody,
    FailoverOut,
    FeedCreate,
    FeedList,
    FeedOptionsOut,
    FeedPublic,
    FeedUpdate,
    FindingOut,
    GapOut,
    LeaderOut,
    LogOut,
    PublishedOut,
    ResyncOut,
    SlotLostOut,
    SlotRiskOut,
    StandbySlotOut,
    table_names,
)
from pgfeed.replication.slots import SlotFailover
from pgfeed_client._cursor import format_lsn

log = logging.getLogger("pgfeed.http")

# Status routes need the status scope (pgfeed.access, shared with gRPC); the others need admin.
router = APIRouter(prefix="/v1/feeds", tags=["admin"])


def feed_public(supervisor: Supervisor, status_: FeedStatus) -> FeedPublic:
    """A feed's status for the API: the DSN masked, every error message scrubbed of it."""
    spec = supervisor.spec(status_.name)
    changelog = supervisor.changelog(status_.name)
    try:
        stats = changelog.stats()
        log_out: LogOut | None = LogOut(
            transaction_count=stats.transaction_count, change_count=stats.change_count,
            payload_bytes=stats.payload_bytes, oldest_lsn=format_lsn(stats.oldest_lsn),
            trimmed_lsn=format_lsn(stats.trimmed_lsn), forced_trims=stats.forced_trims)
        consumers = consumers_of(supervisor, status_.name)
    except PgfeedError:  # the log is closing (feed being deleted): status without it
        log_out, consumers = None, []
    risk = status_.slot_risk
    return FeedPublic(
        name=status_.name, state=status_.state, source=mask_dsn(spec.dsn), slot=status_.slot,
        publication=status_.publication, owns_slot=spec.owns_slot,
        owns_publication=spec.owns_publication, tables=status_.tables,
        all_tables=status_.all_tables, options=FeedOptionsOut.model_validate(asdict(spec.options)),
        confirmed_lsn=format_lsn(status_.confirmed_lsn), head_lsn=format_lsn(status_.head_lsn),
        server_lsn=None if status_.server_lsn is None else format_lsn(status_.server_lsn),
        lag_bytes=status_.lag_bytes, lag_seconds=status_.lag_seconds,
        changes_per_second=status_.changes_per_second, changes_captured=status_.changes_captured,
        bytes_captured=status_.bytes_captured,
        backfill_rows_captured=status_.backfill_rows_captured,
        last_error=None if status_.last_error is None else scrub(status_.last_error, spec.dsn),
        proto_version=status_.proto_version, streaming_in_use=status_.streaming_in_use,
        slot_risk=SlotRiskOut(wal_status=risk.wal_status, safe_wal_size=risk.safe_wal_size,
                              retained_bytes=risk.retained_bytes),
        failover=_failover_out(status_.failover), counters_from=status_.counters_from,
        counters_at=None if status_.counters_at is None else iso_time(status_.counters_at),
        log=log_out, consumers=consumers, backfills=_running_backfills(supervisor, status_.name),
        unprotected_tables=status_.unprotected_tables, identity_full=list(spec.identity_full),
        keyless_guard=spec.keyless_guard,
        published=None if status_.published is None else [
            PublishedOut(table=p.table, where=p.where,
                         columns=None if p.columns is None else list(p.columns))
            for p in status_.published],
        publish_generated_columns=status_.publish_generated_columns,
        leader=None if status_.leader is None else LeaderOut(
            replica=status_.leader.replica, epoch=status_.leader.epoch, since=iso_time(status_.leader.since)),
        slot_lost=None if status_.slot_lost is None else SlotLostOut(
            at=iso_time(status_.slot_lost.at), slot=status_.slot_lost.slot or status_.slot,
            reason=status_.slot_lost.reason, last_lsn=format_lsn(status_.slot_lost.last_lsn)),
        gaps=[gap_out(g) for g in status_.gaps],
        next_attempt_at=None if status_.next_attempt_at is None else iso_time(status_.next_attempt_at))


def gap_out(gap: Gap) -> GapOut:
    return GapOut(lost_after=format_lsn(gap.lost_after), resumed_at=format_lsn(gap.resumed_at),
                  marker=format_lsn(gap.marker_lsn), reason=gap.reason, at=iso_time(gap.at))


def _failover_out(failover: SlotFailover | None) -> FailoverOut | None:
    if failover is None:
        return None
    return FailoverOut(
        enabled=failover.enabled, synced=failover.synced, ready=failover.ready, note=failover.note,
        standby_slots=[StandbySlotOut(
            name=s.name, exists=s.exists, active=s.active, caught_up=s.caught_up,
            restart_lsn=None if s.restart_lsn is None else format_lsn(s.restart_lsn))
            for s in failover.standby_slots])


def iso_time(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat()


def _running_backfills(supervisor: Supervisor, name: str) -> list[BackfillOut]:
    from pgfeed.http_api.routes.backfills import running
    try:
        return running(supervisor, name)
    except PgfeedError:  # the log is closing (feed being deleted)
        return []


def _spec(body: FeedCreate) -> FeedSpec:
    o = body.options
    options = FeedOptions(toast=o.toast, snapshot=o.snapshot, messages=o.messages,
                          two_phase=o.two_phase, streaming=o.streaming,
                          partition_root=o.partition_root, heartbeat_seconds=o.heartbeat_seconds,
                          retention=Retention(**o.retention.model_dump()), failover=o.failover,
                          keyless=o.keyless, publish_generated_columns=o.publish_generated_columns,
                          backfill_attached=o.backfill_attached, ddl=o.ddl)
    try:
        names, filters = table_names(body.tables)
    except ValueError as exc:
        raise ApiError(422, "invalid_feed", str(exc)) from None
    return FeedSpec(name=body.name, dsn=body.dsn, tables=names, table_filters=filters,
                    all_tables=body.all_tables, publication=body.publication, slot=body.slot,
                    options=options)


@router.post("", dependencies=[AdminScope], status_code=status.HTTP_201_CREATED,
             response_model=FeedPublic, summary="Create a feed", responses={
                 200: {"model": CheckOut, "description": "`dry_run`: what creating it would find"},
                 409: {"model": ErrorBody, "description": "A feed of that name exists"},
                 422: {"model": ErrorBody, "description": "Invalid request body, or the source "
                                                          "refused the feed"}})
def create_feed(body: FeedCreate, supervisor: SupervisorDep, response: Response,
                dry_run: bool = Query(False, description="Check the source and answer what "
                                                         "creating the feed would find (200); "
                                                         "create nothing")) -> Any:
    """Check the source, set it up (a publication and a slot pgfeed creates and owns, unless
    existing ones are named) and start capturing; all or nothing. 409 if the name is taken; 422
    if the request is inconsistent or the source refuses it (unreachable, bad credentials,
    missing tables, no REPLICATION, `wal_level`, a table whose UPDATE/DELETE publishing would
    make PostgreSQL refuse: `table_without_replica_identity`), with the failing step or the
    findings and their fixes. With `dry_run`, 200 and the findings; nothing is created."""
    spec = _spec(body)
    if dry_run:
        try:
            findings = supervisor.check(spec)
        except SourceError as exc:
            raise ApiError(422, exc.code, scrub(str(exc), spec.dsn)) from None
        out = CheckOut(ok=not any(f.level == "error" for f in findings),
                       findings=[FindingOut(**asdict(f)) for f in findings])
        return JSONResponse(out.model_dump(), status_code=200)
    try:
        created = supervisor.create(spec)
    except SourceRefused as exc:
        raise ApiError(422, exc.code, scrub(str(exc), spec.dsn), findings=[
            {k: scrub(v, spec.dsn) if isinstance(v, str) else v for k, v in f.items()}
            for f in exc.findings]) from None
    except SourceError as exc:
        raise ApiError(422, exc.code, scrub(str(exc), spec.dsn)) from None
    except ValueError as exc:
        raise ApiError(422, "invalid_feed", scrub(str(exc), spec.dsn)) from None
    log.info("feed %s created (source %s)", spec.name, mask_dsn(spec.dsn))
    response.headers["Location"] = f"/v1/feeds/{spec.name}"
    return feed_public(supervisor, created)


@router.get("", dependencies=[StatusScope], response_model=FeedList, summary="Every feed")
def list_feeds(supervisor: SupervisorDep) -> FeedList:
    """Every feed with its state and positions (the source is not probed: see a single feed for
    lag and slot risk)."""
    feeds = []
    for name in supervisor.names():
        try:
            feeds.append(feed_public(supervisor, supervisor.status(name, probe_source=False)))
        except PgfeedError:  # deleted meanwhile
            continue
    return FeedList(feeds=feeds)


@router.get("/{feed}", dependencies=[StatusScope], response_model=FeedPublic,
            summary="A feed's status")
def get_feed(feed: FeedName, supervisor: SupervisorDep) -> FeedPublic:
    """State, confirmed flush LSN, lag in bytes and seconds, throughput, last error and the
    slot's risk (`wal_status`, `safe_wal_size`, WAL retained), probed on the source."""
    return feed_public(supervisor, supervisor.status(feed))


@router.post("/{feed}/pause", dependencies=[AdminScope], response_model=FeedPublic,
             summary="Pause capture")
def pause_feed(feed: FeedName, supervisor: SupervisorDep) -> FeedPublic:
    """Stop capturing (the slot keeps WAL meanwhile); the log stays readable."""
    return feed_public(supervisor, supervisor.pause(feed))


@router.post("/{feed}/resume", dependencies=[AdminScope], response_model=FeedPublic,
             summary="Resume capture", responses={
                 409: {"model": ErrorBody, "description": "The feed's slot was lost: resync it"}})
def resume_feed(feed: FeedName, supervisor: SupervisorDep) -> FeedPublic:
    return feed_public(supervisor, supervisor.resume(feed))


@router.post("/{feed}/resync", dependencies=[AdminScope], response_model=ResyncOut,
             summary="Recover a feed whose slot was lost", responses={
                 409: {"model": ErrorBody, "description": "The feed's slot is not lost (pass "
                                                          "`force` to resync anyway)"},
                 422: {"model": ErrorBody, "description": "The source refused (unreachable, "
                                                          "no slot could be created, ...)"}})
def resync_feed(feed: FeedName, supervisor: SupervisorDep,
                force: bool = Query(False, description="Resync even though the slot is not "
                                                       "lost (drops a working slot: a gap)")) -> ResyncOut:
    """The way back after `slot_lost` (issue 26): drops the dead slot if it still exists,
    creates a new one, writes a gap marker into the feed (a transaction with origin
    `pgfeed.resync` holding one `truncate` of the feed's tables, positioned after everything the
    feed holds and before anything the new slot delivers), records the gap in the feed's
    `gaps`, resumes capture and starts a backfill of the tables, whose `read`s rebuild what the
    marker discarded. A reader or mirror applying the feed in order ends equal to the source."""
    result = supervisor.resync(feed, force=force)
    gap = gap_out(result.gap)
    message = (f"slot {result.slot!r} {'dropped and ' if result.dropped_slot else ''}created anew; "
               f"changes after {gap.lost_after} up to {gap.resumed_at} are lost and marked by a "
               f"truncate at {gap.marker}; "
               + (f"backfill {result.backfill} rebuilds {', '.join(result.tables)}"
                  if result.backfill else
                  f"no backfill started: {result.backfill_error or 'the feed has no tables'}"))
    log.info("feed %s: resync: %s", feed, message)
    return ResyncOut(feed=result.feed, slot=result.slot, dropped_slot=result.dropped_slot, gap=gap,
                     tables=list(result.tables), backfill=result.backfill,
                     backfill_error=result.backfill_error, message=message)


@router.patch("/{feed}", dependencies=[AdminScope], response_model=FeedPublic,
              summary="Change what a feed captures")
def update_feed(feed: FeedName, body: FeedUpdate, supervisor: SupervisorDep) -> FeedPublic:
    """Replace the table list (`ALTER PUBLICATION ... SET TABLE` on the publication pgfeed owns);
    changes committed after it follow the new list, and capture goes on. 422 for a feed of all
    tables or an adopted publication, or when the source refuses (unknown tables)."""
    try:
        names, filters = table_names(body.tables)
        updated = supervisor.set_tables(feed, names, backfill=body.backfill, filters=filters)
    except ValueError as exc:
        raise ApiError(422, "invalid_feed", str(exc)) from None
    log.info("feed %s now captures %s", feed, ", ".join(updated.tables))
    return feed_public(supervisor, updated)


@router.delete("/{feed}", dependencies=[AdminScope], status_code=status.HTTP_204_NO_CONTENT,
               response_class=Response, summary="Delete a feed", responses={
                   422: {"model": ErrorBody, "description": "The source cannot drop the slot or "
                                                            "publication (the feed is kept)"}})
def delete_feed(feed: FeedName, supervisor: SupervisorDep,
                force: bool = Query(False, description="Delete even if the source cannot drop the "
                                                        "slot and publication (they are left behind)"),
                ) -> Response:
    """Stop the feed, drop the slot and publication it owns, and remove its log. When the source
    cannot drop them (a slot left behind retains WAL), 422 and the feed is kept, unless `force`."""
    supervisor.delete(feed, force=force)
    log.info("feed %s deleted", feed)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
