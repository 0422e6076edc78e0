"""Positions are unique and ordered for every unit the log stores, whatever PostgreSQL reports.

PostgreSQL reports a non-transactional logical message at the end of its WAL record. When another
session's COMMIT record comes right after it, that transaction's commit LSN is the same value
(issue 13, item 1): the two must still get distinct positions, the message first, and every cursor
must name exactly one of them — through HTTP and gRPC, on every PostgreSQL version.
"""

from __future__ import annotations

import random

import psycopg
import pytest

from pgfeed_client import Change, FeedClient, GrpcFeedClient, parse_lsn
from tests.fixtures.fix_service import FeedFactory

pytestmark = pytest.mark.pg

PREFIX = "test.nt"
QUIET = {"heartbeat_seconds": 3600.0}  # no heartbeat message may land between the two records


def _served(factory: FeedFactory, name: str, dsn: str) -> tuple[list[Change], list[Change]]:
    """Every change of the feed over HTTP (small pages, so cursors are exercised) and gRPC."""
    factory.caught_up(name, dsn)
    service = factory.service
    with FeedClient(service.http_url) as client:
        http = list(client.iter_changes(name, limit=3))
        head = client.head(name)
    grpc_changes: list[Change] = []
    with GrpcFeedClient(service.grpc_target) as client:
        for txn in client.subscribe(name):
            grpc_changes.extend(txn.changes)
            if txn.cursor == head:
                break
    return http, grpc_changes


def _position(c: Change) -> tuple[int, int]:
    return parse_lsn(c.commit_lsn), c.seq


def _message_then_commit(dsn: str, tag: str) -> tuple[int, int]:
    """One session holds an insert open, a second emits a non-transactional message, the first
    commits: the commit record directly follows the message's. Returns (message end, commit LSN)."""
    with psycopg.connect(dsn) as writer, psycopg.connect(dsn, autocommit=True) as emitter:
        writer.execute("INSERT INTO pos (tag) VALUES (%s)", (tag,))
        row = emitter.execute("SELECT pg_logical_emit_message(false, %s, %s) - '0/0'::pg_lsn",
                              (PREFIX, tag)).fetchone()
        writer.commit()
        commit = writer.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
    assert row is not None and commit is not None
    return int(row[0]), int(commit[0])


def test_a_message_and_the_commit_right_after_it_are_both_served_in_order(
        make_served_feed: FeedFactory, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE pos (id serial PRIMARY KEY, tag text)")
    name = make_served_feed(pg_dsn, tables=("public.pos",), messages=True, **QUIET)
    tags = [f"t{i}" for i in range(5)]
    for tag in tags:
        _message_then_commit(pg_dsn, tag)

    for changes in _served(make_served_feed, name, pg_dsn):
        got = [(c.op, c.prefix or "", (c.content or b"").decode() or (c.after or {}).get("tag"))
               for c in changes]
        assert got == [x for tag in tags for x in (("message", PREFIX, tag), ("insert", "", tag))]
        positions = [_position(c) for c in changes]
        assert positions == sorted(set(positions)), "positions must be unique and ascending"
        messages = [c for c in changes if c.op == "message"]
        inserts = [c for c in changes if c.op == "insert"]
        # The collision really happened: PostgreSQL reported each message at the LSN that is the
        # next transaction's commit LSN; the message sits one byte before it.
        assert [m.lsn for m in messages] == [i.commit_lsn for i in inserts]
        assert [parse_lsn(m.commit_lsn) for m in messages] == \
            [parse_lsn(i.commit_lsn) - 1 for i in inserts]

    # Every cursor names exactly one unit: resuming from a message's cursor yields its transaction.
    with FeedClient(make_served_feed.service.http_url) as client:
        first = client.page(name, "earliest", limit=1)
        assert [c.op for c in first.changes] == ["message"]
        after_message = client.page(name, first.next, limit=1)
        assert [c.op for c in after_message.changes] == ["insert"]
        assert parse_lsn(after_message.changes[0].commit_lsn) == parse_lsn(first.next.split(":")[0]) + 1
    # The feed stayed healthy and every read from earliest decodes (no lost Relation message).
    status = make_served_feed.service.supervisor.status(name, probe_source=False)
    assert status.state == "running" and status.last_error is None


def test_random_interleavings_of_messages_and_commits(make_served_feed: FeedFactory,
                                                      pg_dsn: str) -> None:
    """Several sessions with open transactions, non-transactional and transactional messages and
    commits in a random order: everything committed arrives once, in commit order, at unique
    positions; nothing rolled back arrives."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE pos (id serial PRIMARY KEY, tag text)")
    name = make_served_feed(pg_dsn, tables=("public.pos",), messages=True, **QUIET)
    rng = random.Random(13)
    sessions = [psycopg.connect(pg_dsn) for _ in range(4)]
    emitter = psycopg.connect(pg_dsn, autocommit=True)
    committed: list[str] = []  # tags of rows and transactional messages, in commit order
    pending: dict[int, list[str]] = {i: [] for i in range(len(sessions))}
    nontx: list[str] = []
    try:
        for step in range(300):
            i = rng.randrange(len(sessions))
            action = rng.random()
            tag = f"s{step}"
            if action < 0.35:
                sessions[i].execute("INSERT INTO pos (tag) VALUES (%s)", (tag,))
                pending[i].append(tag)
            elif action < 0.45:
                sessions[i].execute("SELECT pg_logical_emit_message(true, %s, %s)", (PREFIX, tag))
                pending[i].append(tag)
            elif action < 0.7:
                emitter.execute("SELECT pg_logical_emit_message(false, %s, %s)", (PREFIX, tag))
                nontx.append(tag)
            elif action < 0.93:
                sessions[i].commit()
                committed.extend(pending[i])
                pending[i] = []
            else:
                sessions[i].rollback()
                pending[i] = []
        for i, session in enumerate(sessions):
            session.commit()
            committed.extend(pending[i])
    finally:
        for session in sessions:
            session.close()
        emitter.close()

    for changes in _served(make_served_feed, name, pg_dsn):
        positions = [_position(c) for c in changes]
        assert positions == sorted(set(positions))
        def tag_of(c: Change) -> str:
            return (c.content or b"").decode() if c.op == "message" else (c.after or {})["tag"]
        transactional = [tag_of(c) for c in changes if c.op != "message" or c.transactional]
        assert transactional == committed
        assert sorted(tag_of(c) for c in changes if c.op == "message" and not c.transactional) == \
            sorted(nontx)
        # A non-transactional message sits at an odd position inside its own record, never
        # at a commit LSN.
        commits = {c.commit_lsn for c in changes if c.op != "message" or c.transactional}
        assert all(c.commit_lsn not in commits and parse_lsn(c.lsn) - 1 == parse_lsn(c.commit_lsn)
                   for c in changes if c.op == "message" and not c.transactional)
