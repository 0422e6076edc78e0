"""Issue 26, items 4 and 5: a lost slot is loud (``failed`` within seconds, with the reason, in
status, ``/metrics``, the logs; persisted across a restart), a source that is down reads
``reconnecting`` and capture resumes within 2 s of it answering again, and the way back
(``resync``): a new slot, a gap marker (a truncate with origin ``pgfeed.resync``) and a backfill,
so that a reader applying the feed from the start ends equal to the source table."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import psycopg
import pytest
from psycopg import sql

from pgfeed.localpg import LocalCluster
from pgfeed.replication import slots
from pgfeed_client import format_lsn
from pgfeed_proto.v1 import feed_pb2, feed_pb2_grpc
from tests.checkout import PYTHONPATH
from tests.fixtures.fix_pg import PG_VERSIONS
from tests.fixtures.fix_service import FeedFactory, Service, run_service, wait_until

pytestmark = pytest.mark.pg

ROOT = Path(__file__).resolve().parents[2]


def _feed(client: httpx.Client, name: str) -> dict[str, Any]:
    answer = client.get(f"/v1/feeds/{name}")
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def _metric(client: httpx.Client, line_start: str) -> float | None:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    return None


def _grpc_feed(service: Service, name: str) -> Any:
    with grpc.insecure_channel(service.grpc_target) as channel:
        return feed_pb2_grpc.ChangeFeedStub(channel).GetFeed(feed_pb2.GetFeedRequest(name=name),
                                                             timeout=10)


def _slot_count(dsn: str, slot: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                           (slot,)).fetchone()
    assert row is not None
    return int(row[0])


def _assert_lost(client: httpx.Client, name: str, reason: str) -> dict[str, Any]:
    feed = _feed(client, name)
    assert feed["state"] == "failed"
    assert feed["slot_lost"] is not None and reason in feed["slot_lost"]["reason"]
    assert feed["slot_lost"]["slot"] == feed["slot"]
    message = feed["last_error"]
    assert "changes were lost" in message and feed["slot"] in message
    assert f"pgfeed feeds resync {name}" in message and feed["slot_lost"]["last_lsn"] in message
    assert _metric(client, f'pgfeed_feed_state{{feed="{name}",state="failed"}}') == 1.0
    assert _metric(client, f'pgfeed_feed_slot_lost{{feed="{name}"}}') == 1.0
    return feed


# -- a slot dropped under a running feed, then the way back ------------------------------------------


def _changes(client: httpx.Client, name: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    after = "earliest"
    while True:
        page = client.get(f"/v1/feeds/{name}/changes", params={"after": after, "limit": 500}).json()
        out += page["changes"]
        after = page["next"]
        if not page["has_more"]:
            return out


def _apply(changes: list[dict[str, Any]], table: str) -> dict[int, tuple[int, str]]:
    """What a mirror of ``table`` holds after applying ``changes`` in order (a read upserts, a
    truncate naming the table empties it)."""
    rows: dict[int, tuple[int, str]] = {}
    for c in changes:
        if c["op"] == "truncate":
            if table in c["tables"]:
                rows.clear()
        elif f"{c.get('schema')}.{c.get('table')}" != table:
            continue
        elif c["op"] in ("insert", "update", "read"):
            if c["key"] and c["key"]["id"] != c["after"]["id"]:
                rows.pop(c["key"]["id"], None)
            rows[c["after"]["id"]] = (c["after"]["id"], c["after"]["v"])
        elif c["op"] == "delete":
            rows.pop(c["key"]["id"], None)
    return rows


def _table(dsn: str) -> dict[int, tuple[int, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {r[0]: (r[0], r[1]) for r in conn.execute("SELECT id, v FROM lost_t").fetchall()}


def lose_and_resync(client: httpx.Client, factory: FeedFactory, dsn: str) -> tuple[str, dict[str, Any]]:
    """A feed of ``lost_t`` whose slot is dropped under it while it runs, changes made during the
    gap, then resynced (and its backfill done). Returns the feed and the resync's answer."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE lost_t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO lost_t SELECT g, 'v' || g FROM generate_series(1, 20) g")
    name = factory(dsn, tables=("public.lost_t",))
    factory.caught_up(name, dsn)
    slot = _feed(client, name)["slot"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE lost_t SET v = 'before' WHERE id = 20")
        factory.caught_up(name, dsn)
        dropped_at = time.monotonic()
        assert slots.drop_slot(conn, slot, wait=10)  # its walsender terminated, then dropped
    wait_until(lambda: _feed(client, name)["state"] == "failed", 10, "the feed to fail")
    print(f"slot dropped -> feed failed in {time.monotonic() - dropped_at:.2f} s")
    assert time.monotonic() - dropped_at < 5
    lost = _assert_lost(client, name, "dropped")
    # never retried, never re-created behind the operator's back
    resumed = client.post(f"/v1/feeds/{name}/resume")
    assert resumed.status_code == 409 and "resync" in resumed.json()["error"]["message"]
    time.sleep(1.5)
    assert _slot_count(dsn, slot) == 0 and _feed(client, name)["state"] == "failed"
    with psycopg.connect(dsn, autocommit=True) as conn:  # the gap: none of this is streamed
        conn.execute("INSERT INTO lost_t SELECT g, 'gap' || g FROM generate_series(21, 25) g")
        conn.execute("UPDATE lost_t SET v = 'gap update' WHERE id <= 5")
        conn.execute("DELETE FROM lost_t WHERE id BETWEEN 6 AND 10")
    answer = client.post(f"/v1/feeds/{name}/resync")
    assert answer.status_code == 200, answer.text
    done = answer.json()
    assert done["dropped_slot"] is False and done["created_slot"] is True
    assert done["tables"] == ['"public"."lost_t"'] and done["backfill"]
    assert done["gap"]["lost_after"] == lost["slot_lost"]["last_lsn"]
    assert "truncate" in done["message"] and done["backfill"] in done["message"]
    assert _slot_count(dsn, slot) == 1
    wait_until(lambda: client.get(f"/v1/feeds/{name}/backfills/{done['backfill']}").json()["state"]
               == "done", 60, "the resync's backfill")
    with psycopg.connect(dsn, autocommit=True) as conn:  # live again after it
        conn.execute("INSERT INTO lost_t VALUES (26, 'after')")
        conn.execute("UPDATE lost_t SET v = 'after update' WHERE id = 11")
        conn.execute("DELETE FROM lost_t WHERE id = 12")
    factory.caught_up(name, dsn)
    return name, done


def test_a_slot_dropped_under_a_running_feed_fails_it_and_resync_marks_the_gap(
        pgfeed_service: Service, make_served_feed: FeedFactory, pg_dsn: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pgfeed")
    with httpx.Client(base_url=pgfeed_service.http_url, timeout=60) as client:
        name, done = lose_and_resync(client, make_served_feed, pg_dsn)
        errors = [r for r in caplog.records if r.levelno == logging.ERROR and r.name == "pgfeed.feeds"
                  and f"feed {name}:" in r.getMessage()]
        assert len(errors) == 1 and "changes were lost" in errors[0].getMessage()
        feed = _feed(client, name)
        assert feed["state"] == "running" and feed["slot_lost"] is None
        assert [g["marker"] for g in feed["gaps"]] == [done["gap"]["marker"]]
        over_grpc = _grpc_feed(pgfeed_service, name)
        assert not over_grpc.HasField("slot_lost")
        assert [(format_lsn(g.lost_after), format_lsn(g.marker_lsn)) for g in over_grpc.gaps] == \
            [(done["gap"]["lost_after"], done["gap"]["marker"])]
        assert _metric(client, f'pgfeed_feed_slot_lost{{feed="{name}"}}') == 0.0
        assert _metric(client, f'pgfeed_feed_gaps{{feed="{name}"}}') == 1.0
        changes = _changes(client, name)
        markers = [c for c in changes if c["origin"] == "pgfeed.resync"]
        assert len(markers) == 1 and markers[0]["op"] == "truncate"
        assert markers[0]["tables"] == ["public.lost_t"]
        assert markers[0]["commit_lsn"] == done["gap"]["marker"]
        at = changes.index(markers[0])
        # before the marker: what was captured before the loss, none of the gap's changes
        assert not [c for c in changes[:at] if (c.get("after") or {}).get("v", "").startswith("gap")]
        reads = [c for c in changes[at:] if c["op"] == "read"]
        assert {c["after"]["id"] for c in reads} >= set(range(11, 26)) - {12}
        assert _apply(changes, "public.lost_t") == _table(pg_dsn)
        # a feed whose slot is fine is not resynced unless forced
        again = client.post(f"/v1/feeds/{name}/resync")
        assert again.status_code == 409 and "force" in again.json()["error"]["message"]
    cli = subprocess.run([sys.executable, "-m", "pgfeed", "feeds", "resync", name, "--url",
                          pgfeed_service.http_url], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": PYTHONPATH}, check=False)
    assert cli.returncode == 1 and "feed_state_conflict" in cli.stderr and "force" in cli.stderr


# -- a dedicated cluster: settings changed, and stopped --------------------------------------------


@pytest.fixture(scope="module", params=PG_VERSIONS, ids=[f"pg{v}" for v in PG_VERSIONS])
def own_cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """A small cluster of this module's own: its settings change and it is stopped."""
    with LocalCluster.start(request.param) as cluster:
        yield cluster


@pytest.fixture
def own_service(tmp_path: Path) -> Iterator[tuple[Service, FeedFactory]]:
    with run_service(tmp_path / "data") as service:
        factory = FeedFactory(service)
        try:
            yield service, factory
        finally:
            factory.delete_all()


def _database(cluster: LocalCluster, name: str) -> str:
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = cluster.dsn(name, tcp=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE w (id int PRIMARY KEY, v text)")
    return dsn


def test_a_slot_invalidated_under_a_paused_feed_fails_it_and_stays_failed_after_a_restart(
        own_cluster: LocalCluster, tmp_path: Path) -> None:
    dsn = _database(own_cluster, "invalidated")
    data = tmp_path / "data"
    with run_service(data) as service, httpx.Client(base_url=service.http_url, timeout=60) as client:
        name = FeedFactory(service)(dsn, tables=("public.w",))
        client.post(f"/v1/feeds/{name}/pause").raise_for_status()
        slot = _feed(client, name)["slot"]
        with psycopg.connect(own_cluster.dsn(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
            conn.execute("SELECT pg_reload_conf()")
            try:
                with psycopg.connect(dsn, autocommit=True) as src:
                    for i in range(20):
                        src.execute("INSERT INTO w SELECT g, repeat('x', 1000) FROM "
                                    "generate_series(%s::int, %s::int) g", (i * 2000, i * 2000 + 1999))
                        src.execute("SELECT pg_switch_wal()")
                        src.execute("CHECKPOINT")
                        row = src.execute("SELECT wal_status FROM pg_replication_slots "
                                          "WHERE slot_name = %s", (slot,)).fetchone()
                        if row is not None and row[0] == "lost":
                            break
                    assert row == ("lost",)
                invalidated_at = time.monotonic()
            finally:
                conn.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
                conn.execute("SELECT pg_reload_conf()")
        wait_until(lambda: _feed(client, name)["state"] == "failed", 15, "the paused feed to fail")
        print(f"slot invalidated -> paused feed failed in {time.monotonic() - invalidated_at:.2f} s")
        assert time.monotonic() - invalidated_at < 10
        lost = _assert_lost(client, name, "invalidated")
        assert "max_slot_wal_keep_size" in lost["last_error"]
    with run_service(data) as service, httpx.Client(base_url=service.http_url, timeout=60) as client:
        again = _feed(client, name)  # found before the restart: still failed, same reason
        assert again["state"] == "failed" and again["slot_lost"] == lost["slot_lost"]
        over_grpc = _grpc_feed(service, name)  # gRPC's status says the same
        assert over_grpc.state == "failed" and over_grpc.HasField("slot_lost")
        assert (over_grpc.slot_lost.slot, over_grpc.slot_lost.reason, format_lsn(over_grpc.slot_lost.last_lsn)) \
            == (lost["slot_lost"]["slot"], lost["slot_lost"]["reason"], lost["slot_lost"]["last_lsn"])
        assert _metric(client, f'pgfeed_feed_slot_lost{{feed="{name}"}}') == 1.0
        done = client.post(f"/v1/feeds/{name}/resync")
        assert done.status_code == 200 and done.json()["dropped_slot"] is True  # the dead one
        wait_until(lambda: _feed(client, name)["state"] == "running", 15, "capture resumed")
        client.delete(f"/v1/feeds/{name}").raise_for_status()


def test_a_source_that_is_down_reads_reconnecting_and_capture_resumes_within_2_s(
        own_cluster: LocalCluster, own_service: tuple[Service, FeedFactory]) -> None:
    service, factory = own_service
    dsn = _database(own_cluster, "reconnecting")
    name = factory(dsn, tables=("public.w",))
    supervisor = service.supervisor
    with httpx.Client(base_url=service.http_url, timeout=60) as client:
        own_cluster.stop()
        try:
            wait_until(lambda: _feed(client, name)["state"] == "reconnecting", 15, "reconnecting")
            feed = _feed(client, name)
            assert feed["last_error"] and feed["next_attempt_at"]
            assert _metric(client, f'pgfeed_feed_state{{feed="{name}",state="reconnecting"}}') == 1.0
            time.sleep(3)  # several attempts: still reconnecting, the delay stays short
            assert _feed(client, name)["state"] == "reconnecting"
        finally:
            own_cluster.boot()
        answered_at = time.monotonic()
        wait_until(lambda: supervisor.state(name)[0] == "running", 10, "capture resumed")
        resumed = time.monotonic() - answered_at
        print(f"source answering -> capture running in {resumed:.2f} s")
        assert resumed < 2.0, f"capture resumed {resumed:.2f} s after the source answered"
        feed = _feed(client, name)
        assert feed["last_error"] is None and feed["next_attempt_at"] is None
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO w VALUES (1, 'after')")
        factory.caught_up(name, dsn, timeout=15)


# -- a Spark streaming mirror across a resync ------------------------------------------------------


@pytest.mark.spark
@pytest.mark.slow
def test_a_streaming_mirror_equals_the_table_after_a_resync(
        pgfeed_service: Service, make_served_feed: FeedFactory, newest_pg_dsn: str,
        spark_session: Any, tmp_path: Path) -> None:
    from pgfeed_spark import mirror_writer, read_mirror

    dsn = newest_pg_dsn
    out, checkpoint = str(tmp_path / "mirror"), str(tmp_path / "checkpoint")

    def mirror_run(name: str) -> dict[int, tuple[int, str]]:
        """One availableNow run of the streaming mirror (from its checkpoint): the mirror."""
        stream = (spark_session.readStream.format("pgfeed").option("url", pgfeed_service.http_url)
                  .option("feed", name).option("table", "public.lost_t").option("partitions", 2)
                  .load())
        query = (stream.writeStream.foreachBatch(mirror_writer(out, ["id"], buckets=2))
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        return {r["id"]: (r["id"], r["v"]) for r in read_mirror(spark_session, out).collect()}

    with httpx.Client(base_url=pgfeed_service.http_url, timeout=60) as client:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE lost_t (id int PRIMARY KEY, v text)")
        name = make_served_feed(dsn, tables=("public.lost_t",))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO lost_t SELECT g, 'v' || g FROM generate_series(1, 20) g")
        make_served_feed.caught_up(name, dsn)
        assert mirror_run(name) == _table(dsn)  # the mirror before the loss
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert slots.drop_slot(conn, _feed(client, name)["slot"], wait=10)
        wait_until(lambda: _feed(client, name)["state"] == "failed", 10, "the feed to fail")
        with psycopg.connect(dsn, autocommit=True) as conn:  # the gap
            conn.execute("INSERT INTO lost_t SELECT g, 'gap' || g FROM generate_series(21, 25) g")
            conn.execute("UPDATE lost_t SET v = 'gap update' WHERE id <= 5")
            conn.execute("DELETE FROM lost_t WHERE id BETWEEN 6 AND 10")
        done = client.post(f"/v1/feeds/{name}/resync").json()
        wait_until(lambda: client.get(f"/v1/feeds/{name}/backfills/{done['backfill']}").json()
                   ["state"] == "done", 60, "the resync's backfill")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO lost_t VALUES (26, 'after')")
            conn.execute("DELETE FROM lost_t WHERE id = 12")
        make_served_feed.caught_up(name, dsn)
        assert mirror_run(name) == _table(dsn)  # rows deleted in the gap are gone too
