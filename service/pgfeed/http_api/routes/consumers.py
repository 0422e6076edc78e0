"""Named consumers: acknowledged cursors that retention waits for, up to the feed's idle bound.

Who may create one: any token that may read. A Spark job or service creates its consumer by
acknowledging, with the token it reads with; but never below the oldest position the log still
holds (410), so a new consumer never holds more than retention already kept, and every consumer
expires once it has not acknowledged for the feed's ``consumer_max_idle_hours``. Deleting one
is administration (admin token).
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Path, status
from starlette.responses import Response

from pgfeed.changelog.base import ConsumerState, format_pg_time, idle_expiry
from pgfeed.http_api.deps import AdminScope, ReadScope, SupervisorDep
from pgfeed.http_api.errors import ApiError
from pgfeed.http_api.paging import parse_cursor_param, within_head
from pgfeed.http_api.routes.changes import FeedName
from pgfeed.http_api.schemas import ConsumerAck, ConsumerOut, ConsumersOut, ErrorBody

log = logging.getLogger("pgfeed.http")

router = APIRouter(prefix="/v1/feeds", tags=["consumers"], dependencies=[ReadScope])

ConsumerName = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$",
                                   description="Letters, digits, `_`, `.` and `-`")]


def consumer_out(name: str, state: ConsumerState, head: int, max_idle_hours: float | None) -> ConsumerOut:
    """A consumer as status shows it: its cursor, lag, last acknowledgement and expiry time."""
    expires = idle_expiry(state.acked_us, max_idle_hours)
    return ConsumerOut(name=name, cursor=str(state.cursor), acked_at=format_pg_time(state.acked_us),
                       expires_at=None if expires is None else format_pg_time(expires),
                       lag_bytes=max(0, head - state.cursor.lsn))


def consumers_of(supervisor: SupervisorDep, feed: str) -> list[ConsumerOut]:
    changelog = supervisor.changelog(feed)
    bound = supervisor.spec(feed).options.retention.consumer_max_idle_hours
    head = changelog.head()
    return [consumer_out(n, s, head, bound) for n, s in changelog.consumer_states().items()]


@router.get("/{feed}/consumers", response_model=ConsumersOut, summary="Every named consumer")
def list_consumers(feed: FeedName, supervisor: SupervisorDep) -> ConsumersOut:
    return ConsumersOut(consumers=consumers_of(supervisor, feed))


@router.get("/{feed}/consumers/{name}", response_model=ConsumerOut, summary="A consumer's cursor")
def get_consumer(feed: FeedName, name: ConsumerName, supervisor: SupervisorDep) -> ConsumerOut:
    for consumer in consumers_of(supervisor, feed):
        if consumer.name == name:
            return consumer
    raise ApiError(404, "consumer_not_found",
                   f"consumer {name!r} of feed {feed!r} has never acknowledged a cursor (or was "
                   "deleted, or expired)")


@router.put("/{feed}/consumers/{name}", response_model=ConsumerOut, summary="Acknowledge a cursor")
def put_consumer(feed: FeedName, name: ConsumerName, body: ConsumerAck,
                 supervisor: SupervisorDep) -> ConsumerOut:
    """Record that the consumer has everything up to `cursor`, and that it is active now (its
    expiry starts again). A cursor never moves backward: an older one is ignored and the answer
    is the cursor kept. Retention never drops what the slowest consumer has not acknowledged.

    The first acknowledgement creates the consumer, with a read or admin token, at a cursor no
    older than the oldest position the log still holds (else 410, naming it): a new consumer
    can hold what retention kept, never bring back or claim what it dropped. A consumer that
    does not acknowledge within the feed's `retention.consumer_max_idle_hours` expires."""
    parsed = parse_cursor_param("cursor", body.cursor, where="body field")
    changelog = supervisor.changelog(feed)
    cursor = within_head(parsed, changelog.head(),
                         why=": a consumer can only acknowledge what the feed holds")
    changelog.set_consumer(name, cursor)
    return get_consumer(feed, name, supervisor)


@router.delete("/{feed}/consumers/{name}", dependencies=[AdminScope],
               status_code=status.HTTP_204_NO_CONTENT, response_class=Response,
               summary="Delete a consumer (admin)", responses={
                   403: {"model": ErrorBody, "description": "A read token"}})
def delete_consumer(feed: FeedName, name: ConsumerName, supervisor: SupervisorDep) -> Response:
    """Forget the consumer: retention stops waiting for it from its next check. Its reader may
    go on reading while its cursor is retained, and acknowledging creates it again."""
    if not supervisor.changelog(feed).delete_consumer(name):
        raise ApiError(404, "consumer_not_found", f"feed {feed!r} has no consumer {name!r}")
    log.warning("feed %s: consumer %s deleted by an admin", feed, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
