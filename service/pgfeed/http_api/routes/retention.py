"""Forced trims (admin): drop what a cursor has consumed, whatever consumers still wait for."""

from __future__ import annotations

import logging

from fastapi import APIRouter

from pgfeed.changelog.base import consumed_bound
from pgfeed.http_api.deps import AdminScope, SupervisorDep
from pgfeed.http_api.paging import parse_cursor_param, within_head
from pgfeed.http_api.routes.changes import FeedName
from pgfeed.http_api.schemas import TrimOut, TrimRequest
from pgfeed_client._cursor import format_lsn

log = logging.getLogger("pgfeed.http")

router = APIRouter(prefix="/v1/feeds", tags=["admin"], dependencies=[AdminScope])


@router.post("/{feed}/trim", response_model=TrimOut, summary="Force a trim (admin)")
def trim_feed(feed: FeedName, body: TrimRequest, supervisor: SupervisorDep) -> TrimOut:
    """Drop every transaction a reader at `before` has consumed, even what named consumers have
    not acknowledged: those consumers are deleted (their readers get 410 from then on). Logged,
    and counted in the feed's status (`log.forced_trims`) when it overrode a consumer. Readers
    at or after `before` lose nothing."""
    parsed = parse_cursor_param("before", body.before, where="body field")
    changelog = supervisor.changelog(feed)
    cursor = within_head(parsed, changelog.head())
    known = set(changelog.consumers())
    supervisor.prepare_trim(feed)  # a toast=reselect index takes in what is about to go
    dropped = changelog.trim(consumed_bound(changelog, cursor), force=True)
    removed = sorted(known - set(changelog.consumers()))
    stats = changelog.stats()
    log.warning("feed %s: forced trim before %s by an admin dropped %d transaction(s)%s", feed, cursor,
                dropped, f"; consumer(s) removed: {', '.join(removed)}" if removed else "",
                extra={"feed": feed, "event": "forced_trim", "before": str(cursor), "dropped": dropped,
                       "removed_consumers": removed})
    return TrimOut(dropped=dropped, removed_consumers=removed, oldest_lsn=format_lsn(stats.oldest_lsn),
                   trimmed_lsn=format_lsn(stats.trimmed_lsn), forced_trims=stats.forced_trims)
