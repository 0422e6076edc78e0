"""The sequences of a feed's tables, read with the position they cover: what a cutover from the
source to a mirror needs (pgoutput carries no sequence values)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter

from pgfeed.feeds.supervisor import Supervisor
from pgfeed.http_api.deps import AdminScope, StatusScope, SupervisorDep
from pgfeed.http_api.errors import ApiError
from pgfeed.http_api.routes.changes import FeedName
from pgfeed.http_api.schemas import ErrorBody, SequenceOut, SequencesOut
from pgfeed_client._cursor import format_lsn

router = APIRouter(prefix="/v1/feeds", tags=["admin"])

_SOURCE: dict[int | str, dict[str, Any]] = {422: {"model": ErrorBody, "description": "The source cannot answer (unreachable, "
                                                   "refused)"}}


def _answer(supervisor: Supervisor, feed: str, *, emit: bool) -> SequencesOut:
    try:
        snapshot, message_lsn = supervisor.sequences(feed, emit=emit)
    except ValueError as exc:
        raise ApiError(409, "messages_off", str(exc)) from None
    return SequencesOut(read_at=format_lsn(snapshot.read_at),
                        sequences=[SequenceOut.model_validate(asdict(s)) for s in snapshot.sequences],
                        message_lsn=None if message_lsn is None else format_lsn(message_lsn))


@router.get("/{feed}/sequences", dependencies=[StatusScope], response_model=SequencesOut,
            summary="The feed's sequences, for a cutover", responses=_SOURCE)
def get_sequences(feed: FeedName, supervisor: SupervisorDep) -> SequencesOut:
    """Every sequence owned by a column of a table the feed publishes (serial and identity),
    read from the source with `read_at`, the position the values cover. For a cutover: stop the
    application's writes, call this, let the mirror apply the feed until the feed's
    `confirmed_lsn` has passed `read_at` and the mirror holds its head, then set each target
    sequence to `next_value`. Reads only; nothing is written to the source."""
    return _answer(supervisor, feed, emit=False)


@router.post("/{feed}/sequences", dependencies=[AdminScope], response_model=SequencesOut,
             summary="Write the feed's sequences into the feed", responses={
                 **_SOURCE, 409: {"model": ErrorBody, "description": "The feed's option "
                                                                    "`messages` is off"}})
def emit_sequences(feed: FeedName, supervisor: SupervisorDep) -> SequencesOut:
    """What `GET` answers, also written into the source's WAL as a transactional logical message
    (prefix `pgfeed.sequences`, content the snapshot's JSON), so it reaches every reader of the
    feed as a `message` event at its position. 409 for a feed with option `messages` off."""
    return _answer(supervisor, feed, emit=True)
