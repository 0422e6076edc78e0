"""Named consumers: acknowledged cursors that retention waits for."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from clients._cursor import Cursor
from service.http_api.deps import ReadScope, SupervisorDep
from service.http_api.errors import ApiError
from service.http_api.paging import parse_cursor_param
from service.http_api.routes.changes import FeedName
from service.http_api.schemas import ConsumerAck, ConsumerOut, ConsumersOut

router = APIRouter(prefix="/v1/feeds", tags=["consumers"], dependencies=[ReadScope])

ConsumerName = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$",
                                   description="Letters, digits, `_`, `.` and `-`")]


@router.get("/{feed}/consumers", response_model=ConsumersOut, summary="Every named consumer")
def list_consumers(feed: FeedName, supervisor: SupervisorDep) -> ConsumersOut:
    known = supervisor.changelog(feed).consumers()
    return ConsumersOut(consumers=[ConsumerOut(name=n, cursor=str(c)) for n, c in sorted(known.items())])


@router.get("/{feed}/consumers/{name}", response_model=ConsumerOut, summary="A consumer's cursor")
def get_consumer(feed: FeedName, name: ConsumerName, supervisor: SupervisorDep) -> ConsumerOut:
    cursor = supervisor.changelog(feed).get_consumer(name)
    if cursor is None:
        raise ApiError(404, "consumer_not_found",
                       f"consumer {name!r} of feed {feed!r} has never acknowledged a cursor")
    return ConsumerOut(name=name, cursor=str(cursor))


@router.put("/{feed}/consumers/{name}", response_model=ConsumerOut, summary="Acknowledge a cursor")
def put_consumer(feed: FeedName, name: ConsumerName, body: ConsumerAck,
                 supervisor: SupervisorDep) -> ConsumerOut:
    """Record that the consumer has everything up to `cursor`. A cursor never moves backward:
    an older one is ignored and the answer is the cursor kept. Retention never drops what the
    slowest consumer has not acknowledged."""
    parsed = parse_cursor_param("cursor", body.cursor, where="body field")
    changelog = supervisor.changelog(feed)
    head = changelog.head()
    cursor = Cursor(head) if parsed == "latest" else parsed
    if cursor.lsn > head:
        raise ApiError(400, "cursor_ahead", f"cursor {cursor} is past the feed's head "
                       f"{Cursor(head)}: a consumer can only acknowledge what the feed holds")
    changelog.set_consumer(name, cursor)
    stored = changelog.get_consumer(name)
    return ConsumerOut(name=name, cursor=str(stored or cursor))
