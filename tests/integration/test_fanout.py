"""Many subscribers on one feed (issue 19): gRPC streams and HTTP long-polls at different cursors,
replaying and caught up, all receive exactly the committed transactions in order while the
caught-up ones are served from the feed's shared tail."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from pgfeed.http_api.routes.changes import CHANGES_PATH
from pgfeed_client import FeedClient, GrpcFeedClient
from tests.fixtures.fix_service import FeedFactory, Service, run_service, wait_until

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
        except BaseException as exc:
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


READ_TOKEN = "fan-read-token"


def test_caught_up_long_polls_answered_ahead_of_routing_equal_the_route(
        tmp_path: Path, pg_dsn: str) -> None:
    """``http_api.fastpath`` answers a caught-up long-poll from the shared tail before FastAPI
    routes it: the same body and headers as the route gives for the same page, tokens enforced
    the same way, and anything it does not take (a filter, an unknown feed, a bad cursor) left to
    the route's answer."""
    with run_service(tmp_path / "svc", read_tokens=[READ_TOKEN]) as service, \
            psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS fast; CREATE TABLE fast (id int PRIMARY KEY)")
        feeds = FeedFactory(service)
        try:
            _check_fast_path(service, feeds(pg_dsn, tables=("public.fast",)), conn)
        finally:
            feeds.delete_all()


def _check_fast_path(service: Service, name: str, conn: psycopg.Connection[Any]) -> None:
    auth = {"Authorization": f"Bearer {READ_TOKEN}"}
    answered = service.runtime.metrics.tail_answers.labels(feed=name)
    with httpx.Client(base_url=service.http_url, headers=auth, timeout=30) as client:
        conn.execute("INSERT INTO fast VALUES (0)")
        first = wait_until(lambda: (r := client.get(f"/v1/feeds/{name}/changes")).json()["changes"]
                           and r, 30, "the first row")
        head = first.headers["PgFeed-Next"]
        url = f"/v1/feeds/{name}/changes?after={head}&limit=100"
        client.get(url + "&wait=0.2")  # caught up: the route starts the shared tail at the head

        def poll(query: str, headers: dict[str, str] | None = None) -> httpx.Response:
            return client.get(url + query, headers=headers)

        pending: list[httpx.Response] = []
        waiter = threading.Thread(target=lambda: pending.append(poll("&wait=20")))
        before = answered._value.get()
        timed = _changes_latency_count(client)
        waiter.start()
        time.sleep(0.5)  # parked on the head
        conn.execute("INSERT INTO fast VALUES (1)")
        waiter.join(30)
        fast = pending[0]
        assert fast.status_code == 200, fast.text
        assert [c["after"] for c in fast.json()["changes"]] == [{"id": 1}]
        assert answered._value.get() > before, "the fast path did not answer"
        # measured like the route's answers, under its template
        assert _changes_latency_count(client) == timed + 1
        # The same page through the route (a filter that keeps everything: not the fast path's).
        counted = answered._value.get()
        routed = poll("&wait=0&ops=insert,update,delete,truncate,message")
        again = poll("&wait=0")
        assert answered._value.get() == counted + 1  # only `again` was the fast path's
        assert routed.content == fast.content == again.content
        for header in ("PgFeed-Next", "PgFeed-Head", "PgFeed-Has-More", "content-type"):
            assert routed.headers[header] == fast.headers[header] == again.headers[header], header
        # Tokens: the route's 401 without one or with a wrong one, whatever the shape.
        for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}):
            refused = poll("&wait=0", headers)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
        # What the fast path does not take gets the route's answer.
        unknown = client.get(f"/v1/feeds/nope/changes?after={head}&wait=0")
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "feed_not_found"
        bad = client.get(f"/v1/feeds/{name}/changes?after=zz/1&wait=0")
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_cursor"
        big = client.get(url + "&wait=0&limit=0")
        assert big.status_code == 400
        assert answered._value.get() == counted + 1


def _changes_latency_count(client: httpx.Client) -> float:
    """How many /changes answers the request latency histogram has counted."""
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("pgfeed_request_duration_seconds_count{") and 'surface="http"' in line \
                and f'endpoint="{CHANGES_PATH}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_replaying_readers_share_each_page(make_served_feed: FeedFactory, pg_dsn: str) -> None:
    """Readers replaying the log from the same cursor with the same page size get every change
    once, in order, from one read and encoding of each page (not one each)."""
    readers, rows, limit = 8, 2_000, 100
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS replay; CREATE TABLE replay (id int PRIMARY KEY)")
        name = make_served_feed(pg_dsn, tables=("public.replay",))
        conn.execute("INSERT INTO replay SELECT g FROM generate_series(0, %s) g", (rows - 1,))
    make_served_feed.caught_up(name, pg_dsn)
    service = make_served_feed.service
    reader = service.supervisor.reader(name)  # every request's (one a feed): count its reads
    page, calls = reader.page, []
    reader.page = lambda *a, **kw: calls.append(a) or page(*a, **kw)  # type: ignore[method-assign]
    got: list[list[int]] = [[] for _ in range(readers)]
    start = threading.Barrier(readers)

    def replay(ids: list[int]) -> None:
        with FeedClient(service.http_url) as client:
            start.wait()
            ids.extend(c.after["id"] for c in client.iter_changes(name, limit=limit))

    threads = [threading.Thread(target=replay, args=(ids,)) for ids in got]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert all(ids == list(range(rows)) for ids in got)
    # One read a page (the first one too: the readers ask for it at the same moment), and at most
    # one read-ahead past the last.
    del reader.page
    assert len(calls) <= rows // limit + 1, len(calls)
