"""Issue 28.5: rows that arrive by ``ATTACH PARTITION`` reach the feed. Attaching writes no
change, so the feed backfills an attached partition that holds rows (option
``backfill_attached``, on by default), served as the root's rows when the publication publishes
via the root; applying the feed over HTTP then gives the partitioned table. DETACH sends
nothing: the detached rows stay in a mirror."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from pgfeed_client import FeedClient
from tests.fixtures.fix_service import FeedFactory, Service, wait_until

pytestmark = pytest.mark.pg


def mirror(changes: list[Any], table: str) -> dict[int, str]:
    rows: dict[int, str] = {}
    for c in changes:
        if c.table != table:
            continue
        if c.op == "delete":
            rows.pop(c.key["id"], None)
        elif c.op in ("insert", "update", "read"):
            if c.op == "update" and c.key and c.key["id"] != c.after["id"]:
                rows.pop(c.key["id"], None)
            rows[c.after["id"]] = c.after["v"]
    return rows


def test_a_partition_attached_with_rows_is_backfilled_as_the_root(
        pg_dsn: str, pgfeed_service: Service, make_served_feed: FeedFactory) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE pt (id bigint PRIMARY KEY, v text) PARTITION BY RANGE (id)")
        conn.execute("CREATE TABLE pt_0 PARTITION OF pt FOR VALUES FROM (0) TO (1000)")
        conn.execute("CREATE TABLE pt_empty PARTITION OF pt FOR VALUES FROM (5000) TO (6000)")
        conn.execute("INSERT INTO pt SELECT g, 'old' || g FROM generate_series(1, 300) g")
    feed = make_served_feed(pg_dsn, tables=("public.pt",), snapshot="backfill")
    off = make_served_feed(pg_dsn, tables=("public.pt",), backfill_attached=False)
    with FeedClient(pgfeed_service.http_url) as client:
        wait_until(lambda: all(b["state"] == "done" for b in client.backfills(feed)), 60,
                   "the initial snapshot")
        (initial,) = client.backfills(feed)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO pt SELECT g, 'live' || g FROM generate_series(400, 420) g")
            # filled outside the tree (nothing of it published), then attached: no change
            conn.execute("CREATE TABLE pt_1 (id bigint PRIMARY KEY, v text)")
            conn.execute("INSERT INTO pt_1 SELECT g, 'attached' || g FROM generate_series(1000, 2499) g")
            conn.execute("ALTER TABLE pt ATTACH PARTITION pt_1 FOR VALUES FROM (1000) TO (3000)")
            # a partition created later, then written to, is not backfilled: its rows streamed
            conn.execute("CREATE TABLE pt_late PARTITION OF pt FOR VALUES FROM (6000) TO (7000)")
            conn.execute("INSERT INTO pt SELECT g, 'late' || g FROM generate_series(6000, 6009) g")

        def attached() -> dict[str, Any] | None:
            found = [b for b in client.backfills(feed) if b["id"] != initial["id"]]
            return found[0] if found and found[0]["state"] != "running" else None
        backfill = wait_until(attached, 60, "the attached partition's backfill")
        assert backfill["state"] == "done", backfill
        assert [t["table"] for t in backfill["tables"]] == ["public.pt_1"]
        assert backfill["rows"] == 1500
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # streamed as the root's rows
            conn.execute("UPDATE pt SET v = 'changed' WHERE id % 7 = 0 AND id >= 1000")
            conn.execute("DELETE FROM pt WHERE id % 11 = 0 AND id >= 1000")
            conn.execute("UPDATE pt SET id = id + 1500 WHERE id BETWEEN 1001 AND 1010")  # p1 to p1
        make_served_feed.caught_up(feed, pg_dsn)
        changes = list(client.iter_changes(feed, "earliest", limit=5000))
        assert not [c for c in changes if c.table in ("pt_1", "pt_late", "pt_empty")]
        assert not [c for c in changes if c.op == "read" and c.after["id"] >= 6000]
        reads = [c for c in changes if c.op == "read" and c.after["id"] >= 1000]
        assert len(reads) == 1500 and {c.table for c in reads} == {"pt"}
        with psycopg.connect(pg_dsn) as conn:
            table = dict(conn.execute("SELECT id, v FROM pt").fetchall())
        assert mirror(changes, "pt") == table
        # the feed with the option off (checked in the same passes) started nothing
        assert client.backfills(off) == []
        unattached = mirror(list(client.iter_changes(off, "earliest", limit=5000)), "pt")
        p1 = {i: v for i, v in unattached.items() if 1000 <= i < 3000}
        assert 0 < len(p1) < 300  # only the rows updated after the attach (moved: 2501-2510)
        assert all(v == "changed" or i > 2500 for i, v in p1.items())

        # DETACH writes no change: the detached rows stay in the mirror
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE pt DETACH PARTITION pt_1")
            conn.execute("INSERT INTO pt VALUES (999, 'after detach')")
        make_served_feed.caught_up(feed, pg_dsn)
        after = list(client.iter_changes(feed, "earliest", limit=5000))
        assert mirror(after, "pt") == {**table, 999: "after detach"}
        assert len(client.backfills(feed)) == 2


def test_without_partition_root_the_attached_partition_is_backfilled_as_itself(
        pg_dsn: str, pgfeed_service: Service, make_served_feed: FeedFactory) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE pl (id bigint PRIMARY KEY, v text) PARTITION BY LIST (id)")
        conn.execute("CREATE TABLE pl_0 PARTITION OF pl FOR VALUES IN (1, 2, 3)")
    feed = make_served_feed(pg_dsn, tables=("public.pl",), partition_root=False)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pl VALUES (1, 'a')")
        conn.execute("CREATE TABLE pl_1 (id bigint PRIMARY KEY, v text)")
        conn.execute("INSERT INTO pl_1 VALUES (10, 'b'), (11, 'c')")
        conn.execute("ALTER TABLE pl ATTACH PARTITION pl_1 FOR VALUES IN (10, 11, 12)")
    with FeedClient(pgfeed_service.http_url) as client:
        (backfill,) = wait_until(lambda: [b for b in client.backfills(feed) if b["state"] == "done"],
                                 60, "the attached partition's backfill")
        assert [t["table"] for t in backfill["tables"]] == ["public.pl_1"]
        make_served_feed.caught_up(feed, pg_dsn)
        changes = [c for c in client.iter_changes(feed, "earliest") if c.table in ("pl_0", "pl_1")]
    assert {(c.table, c.op, c.after["id"]) for c in changes} == {
        ("pl_0", "insert", 1), ("pl_1", "read", 10), ("pl_1", "read", 11)}


@pytest.mark.spark
@pytest.mark.slow
def test_a_spark_mirror_of_the_root_gets_the_attached_rows(
        live_feed: tuple[str, str, str], pgfeed_service: Service, spark_session: Any) -> None:
    """The session's feed of every table (newest PostgreSQL, via the root): a partition attached
    with rows reaches a Spark mirror of the root (``latest_rows`` over the typed read)."""
    from pgfeed_spark import latest_rows
    from tests.integration.test_spark_mirror import _captured, _read

    base_url, feed, dsn = live_feed
    root = f"pa_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {root} (id int PRIMARY KEY, v text) PARTITION BY RANGE (id)")
        conn.execute(f"CREATE TABLE {root}_0 PARTITION OF {root} FOR VALUES FROM (0) TO (100)")
        conn.execute(f"INSERT INTO {root} SELECT g, 'live' || g FROM generate_series(1, 50) g")
        conn.execute(f"CREATE TABLE {root}_1 (id int PRIMARY KEY, v text)")
        conn.execute(f"INSERT INTO {root}_1 SELECT g, 'attached' || g FROM generate_series(100, 399) g")
        before = {b.id for b in pgfeed_service.supervisor.backfills(feed).records()}
        conn.execute(f"ALTER TABLE {root} ATTACH PARTITION {root}_1 FOR VALUES FROM (100) TO (400)")
    manager = pgfeed_service.supervisor.backfills(feed)
    (record,) = wait_until(lambda: [r for r in manager.records() if r.id not in before
                                    and r.state != "running"], 60, "the attached partition's backfill")
    assert record.state == "done" and record.tables == (f"public.{root}_1",)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE {root} SET v = 'changed' WHERE id % 10 = 0")
        source = sorted(conn.execute(f"SELECT * FROM {root}").fetchall())
    _captured(pgfeed_service, feed, dsn)
    df = _read(spark_session, base_url, feed, f"public.{root}")
    assert df.where("_op = 'read'").count() == 300
    assert sorted(tuple(r) for r in latest_rows(df, ["id"]).collect()) == source
