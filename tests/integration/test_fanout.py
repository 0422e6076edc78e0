"""Many subscribers on one feed (issue 19): gRPC streams and HTTP long-polls at different cursors,
replaying and caught up, all receive exactly the committed transactions in order while the
caught-up ones are served from the feed's shared tail."""

from __future__ import annotations

import threading

import psycopg
import pytest

from clients import FeedClient, GrpcFeedClient
from tests.fixtures.fix_service import FeedFactory, wait_until

pytestmark = pytest.mark.pg

BACKLOG = 40
LIVE = 150


def test_subscribers_at_different_cursors_get_every_transaction_once_in_order(
        make_served_feed: FeedFactory, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE fan (id int PRIMARY KEY, v text)")
        name = make_served_feed(pg_dsn, tables=("public.fan",))
        for i in range(BACKLOG):
            conn.execute("INSERT INTO fan VALUES (%s, 'backlog')", (i,))
    make_served_feed.caught_up(name, pg_dsn)
    service = make_served_feed.service
    with FeedClient(service.http_url) as client:
        backlog = list(client.iter_changes(name))
    middle = backlog[BACKLOG // 2].cursor
    # Explicit cursors (not "latest", which would be resolved whenever a subscriber gets to it).
    starts = {"earliest": 0, str(middle): BACKLOG // 2 + 1, str(backlog[-1].cursor): BACKLOG}
    last_id = BACKLOG + LIVE - 1
    got: dict[str, list[int]] = {}
    errors: list[BaseException] = []

    def grpc_subscriber(key: str, cursor: str) -> None:
        ids = got.setdefault(key, [])
        with GrpcFeedClient(service.grpc_target) as grpc_client:
            for txn in grpc_client.subscribe(name, cursor=cursor):
                ids.extend(c.after["id"] for c in txn.changes if c.after)
                if ids and ids[-1] == last_id:
                    return

    def http_subscriber(key: str, cursor: str) -> None:
        ids = got.setdefault(key, [])
        with FeedClient(service.http_url) as http_client:
            for change in http_client.iter_changes(name, cursor, follow=True, wait=5):
                ids.append(change.after["id"])
                if ids[-1] == last_id:
                    return

    def guarded(target: object, *args: str) -> None:
        try:
            target(*args)  # type: ignore[operator]
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = []
    for cursor in starts:
        for surface, target in (("grpc", grpc_subscriber), ("http", http_subscriber)):
            for n in range(3):
                key = f"{surface}-{cursor}-{n}"
                threads.append(threading.Thread(target=guarded, args=(target, key, cursor),
                                                daemon=True))
    for thread in threads:
        thread.start()
    wait_until(lambda: len(got) == len(threads), 30, "every subscriber connected")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for i in range(BACKLOG, BACKLOG + LIVE):
            conn.execute("INSERT INTO fan VALUES (%s, 'live')", (i,))
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    stuck = {k: (len(v), v[-3:]) for k, v in got.items() if not v or v[-1] != last_id}
    assert not stuck, stuck
    for key, ids in got.items():
        cursor = key.split("-", 1)[1].rsplit("-", 1)[0]
        assert ids == list(range(starts[cursor], last_id + 1)), key
    # The caught-up subscribers were served from the shared tail, which ends at the head.
    tail = service.supervisor.tail(name)
    assert tail.slices_served > 0
    assert tail.covered[1] == service.supervisor.changelog(name).head()
