"""A big transaction is read a chunk of the change log at a time (issue 29.2): paged over HTTP
(JSON, typed Arrow) or streamed over gRPC, it is what reading its payload whole gives, byte for byte, whatever the page cuts and
wherever a reader resumes; a chunk retention drops under a reader is a ``410``, never other bytes.

The feed's SQLite log is told to store payloads in 4 KiB chunks (``chunk_bytes``, 4 MiB by
default), so a transaction of a few thousand rows spans a hundred chunks, rows with values larger
than a chunk are cut inside their frames, and a mid-transaction ALTER TABLE puts a Relation frame
among them.
"""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pyarrow as pa
import pytest

from pgfeed.assembler.chunked import ChunkedPayload
from pgfeed_client._cursor import Cursor
from tests.fixtures.fix_service import FeedFactory, Service, grpc_changes

pg = pytest.mark.pg
ROWS = 4000  # ~450 KB of payload: more than the log's in-memory tail keeps (256 KiB)


def _pages(client: httpx.Client, feed: str, cursor: str, **params: Any) -> list[bytes]:
    """Every page body from ``cursor`` until the log has no more."""
    bodies = []
    for _ in range(10_000):
        response = client.get(f"/v1/feeds/{feed}/changes", params={"after": cursor, **params})
        assert response.status_code == 200, response.text
        bodies.append(response.content)
        cursor = response.headers["PgFeed-Next"]
        if response.headers["PgFeed-Has-More"] == "false":
            return bodies
    raise AssertionError("paging never ended")


def _changes(bodies: list[bytes]) -> list[Any]:
    out: list[Any] = []
    for body in bodies:
        out.extend(httpx.Response(200, content=body).json()["changes"])
    return out


def _changes_bytes(bodies: list[bytes]) -> bytes:
    """The pages' change objects as the server wrote them: the bytes between ``"changes":[`` and
    the envelope's tail, joined (page cuts differ; the changes' bytes must not)."""
    parts = []
    for body in bodies:
        start = body.index(b'"changes":[') + len(b'"changes":[')
        end = body.rindex(b'],"next":')
        if end > start:
            parts.append(body[start:end])
    return b",".join(parts)


def _arrow(bodies: list[bytes]) -> pa.Table:
    tables = [pa.ipc.open_stream(body).read_all() for body in bodies]
    return pa.concat_tables([t for t in tables if t.num_rows])


@pg
def test_a_big_transaction_pages_a_chunk_at_a_time_as_if_read_whole(
        pg_dsn: str, make_served_feed: FeedFactory, pgfeed_service: Service) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id int PRIMARY KEY, v text, doc jsonb)")
    name = make_served_feed(pg_dsn, tables=("public.big",), toast="placeholder")
    supervisor = pgfeed_service.supervisor
    log = supervisor.changelog(name)
    log.chunk_bytes = 4096  # type: ignore[attr-defined]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("INSERT INTO big SELECT g, 'value ' || g || repeat('x', g %% 50), "
                         "jsonb_build_object('g', g) FROM generate_series(1, %s::int) g", (ROWS,))
            conn.execute("UPDATE big SET v = repeat(md5(id::text), 300) WHERE id % 700 = 0")  # >4 KiB
            conn.execute("SELECT pg_logical_emit_message(true, 'app', 'in the middle')")
            conn.execute("ALTER TABLE big ADD COLUMN extra int")
            conn.execute("INSERT INTO big SELECT g, 'late', NULL, g FROM generate_series(%s::int, %s::int) g",
                         (ROWS + 1, ROWS + 300))
            conn.execute("DELETE FROM big WHERE id % 97 = 0")
        conn.execute("INSERT INTO big VALUES (0, 'after', NULL, 0)")
    make_served_feed.caught_up(name, pg_dsn)

    (stored,) = log.read(Cursor(0), 1, lazy_chunks=1)
    assert isinstance(stored.payload, ChunkedPayload) and stored.payload.chunks > 100
    commit = stored.commit_lsn
    total = stored.change_count
    assert total > ROWS + 300

    reader = supervisor.reader(name)
    with httpx.Client(base_url=pgfeed_service.http_url, timeout=60) as client:
        # The reference: the payload read whole (the reader told not to chunk it), big pages.
        reader.lazy_chunks = None
        try:
            whole = _pages(client, name, "earliest", limit=5000)
            whole_arrow = _pages(client, name, "earliest", limit=5000, format="arrow",
                                 tables="public.big")
            whole_grpc = [c.SerializeToString() for c in
                          grpc_changes(pgfeed_service.grpc_target, name, total + 1)]
        finally:
            reader.lazy_chunks = 1
        # gRPC's frames, read a chunk at a time, are the whole read's.
        assert [c.SerializeToString() for c in
                grpc_changes(pgfeed_service.grpc_target, name, total + 1)] == whole_grpc
        # Read a chunk at a time, in pages cut mid-transaction (smaller than half the reference's
        # limit: no page read ahead for the reference can answer them).
        paged = _pages(client, name, "earliest", limit=137)
        assert len(paged) > total // 137
        assert _changes_bytes(paged) == _changes_bytes(whole)
        changes = _changes(whole)
        assert len(changes) == total + 1 and changes[-1]["after"]["v"] == "after"
        assert {c["op"] for c in changes} == {"insert", "update", "message", "delete"}
        # The typed Arrow read of the table, page by page, is the whole read's table.
        paged_arrow = _pages(client, name, "earliest", limit=211, format="arrow", tables="public.big")
        assert _arrow(paged_arrow).equals(_arrow(whole_arrow))
        # A reader resuming mid-transaction (a cursor no page of this reader stopped at).
        resumed = _pages(client, name, f"{Cursor(commit, 1234)}", limit=101)
        assert _changes(resumed) == changes[1235:]

        # Retention drops the transaction while a reader is inside it: a clear 410, never the
        # bytes of something else.
        first = client.get(f"/v1/feeds/{name}/changes", params={"after": "earliest", "limit": 50})
        assert first.status_code == 200
        assert log.trim(commit + 1, force=True) == 1
        gone = client.get(f"/v1/feeds/{name}/changes",
                          params={"after": first.headers["PgFeed-Next"], "limit": 50})
        assert gone.status_code == 410, gone.text
        assert gone.json()["error"]["code"] == "cursor_expired"
