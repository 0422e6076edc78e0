"""Source failover: a feed with option ``failover`` goes on from a promoted standby.

The main scenario (PostgreSQL 18, slow): a dedicated primary and a physical standby with slot
synchronization (docs/failover.md has the settings), a feed created over HTTP with
``failover: true`` and a DSN naming both hosts (``target_session_attrs=read-write``), a workload
inserting a sequence of keys one transaction each. Once the standby holds a persisted,
synchronized copy of the slot, the primary is stopped (immediate) and the standby promoted; the
workload goes on there. The feed must serve every committed key exactly once, in order: what the
old primary sent but pgfeed had not confirmed comes again from the new one and is skipped by
position. The time from the primary's stop to the first key committed on the new primary
reaching the feed is printed (``-s``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from pgfeed.localpg import LocalCluster, find_bindir
from tests.fixtures.fix_pg import create_database
from tests.fixtures.fix_service import run_service, wait_until

pytestmark = [pytest.mark.pg]

STANDBY_SLOT = "standby1"


def _standby_of(primary: LocalCluster, settings: dict[str, str]) -> LocalCluster:
    """A physical standby made by ``pg_basebackup -R -S`` (PostgreSQL 17+ writes the ``dbname``
    of ``-d`` into ``primary_conninfo``, which slot synchronization needs)."""
    base = Path(tempfile.mkdtemp(prefix="pgfeed-standby-"))
    (base / "sock").mkdir()
    if os.geteuid() == 0:
        base.chmod(0o755)
        shutil.chown(base, "postgres", "postgres")
        shutil.chown(base / "sock", "postgres", "postgres")
    primary._run("pg_basebackup", "-D", str(base / "data"), "-h", str(primary.sockdir), "-p",
                 str(primary.port), "-U", "postgres", "-R", "-S", STANDBY_SLOT, "-X", "stream", "-c", "fast",
                 "-d", "dbname=postgres")
    auto = (base / "data" / "postgresql.auto.conf").read_text()
    assert "dbname=postgres" in auto and STANDBY_SLOT in auto, auto
    return LocalCluster.create(primary.version, settings=settings, basedir=base)


@contextlib.contextmanager
def primary_and_standby() -> Iterator[tuple[LocalCluster, LocalCluster, str]]:
    """(primary, standby, source database) on PostgreSQL 18: the standby streams synchronously
    from the physical slot the primary's ``synchronized_standby_slots`` names.

    Both settings go to the primary with ALTER SYSTEM after the base backup, so the standby's
    copy of the configuration never names a standby slot (a promoted node would wait for it)."""
    find_bindir("18")  # fails loudly when PostgreSQL 18 is missing
    with contextlib.ExitStack() as stack:
        primary = stack.enter_context(LocalCluster.start("18"))
        primary.psql(f"SELECT pg_create_physical_replication_slot('{STANDBY_SLOT}', true)")
        source = create_database(primary, prefix="failover")
        with psycopg.connect(source, autocommit=True) as conn:
            conn.execute("CREATE TABLE k (id int PRIMARY KEY)")
        standby = _standby_of(primary, {"sync_replication_slots": "on", "hot_standby_feedback": "on"})
        stack.callback(standby.destroy)
        standby.boot()
        primary.psql(f"ALTER SYSTEM SET synchronized_standby_slots = '{STANDBY_SLOT}'")
        primary.psql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        primary.psql("SELECT pg_reload_conf()")
        wait_until(lambda: primary.psql("SELECT sync_state FROM pg_stat_replication").strip() == "sync",
                   30, "the standby to stream synchronously")
        yield primary, standby, psycopg.conninfo.conninfo_to_dict(source)["dbname"]


class Workload:
    """Inserts keys 1, 2, 3, ... one transaction each through the multi-host DSN; reconnects
    (to whichever host is read-write) when the connection breaks. ``acked``: keys whose COMMIT
    returned; ``unsure``: keys whose COMMIT was cut off (committed or not)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.acked: list[int] = []
        self.unsure: list[int] = []
        self.promoted_first: int | None = None  # first key sent after mark_promoted()
        self._promoted = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="failover-workload", daemon=True)
        self._thread.start()

    def mark_promoted(self) -> None:
        self._promoted = True

    def _run(self) -> None:
        key, conn = 1, None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=2)
                if self._promoted and self.promoted_first is None:
                    self.promoted_first = key
                conn.execute("INSERT INTO k VALUES (%s)", (key,))
                self.acked.append(key)
                key += 1
                time.sleep(0.004)
            except psycopg.Error:
                if conn is not None:
                    self.unsure.append(key)  # the INSERT may have committed before the break
                    key += 1
                    with contextlib.suppress(psycopg.Error):
                        conn.close()
                conn = None
                self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def feed_keys(client: httpx.Client) -> list[int]:
    """Every key inserted into ``k`` as the feed serves it, in order."""
    keys, after = [], "earliest"
    while True:
        page = client.get("/v1/feeds/f/changes", params={"after": after, "limit": 10_000}).json()
        keys += [c["after"]["id"] for c in page["changes"] if c["op"] == "insert"]
        after = page["next"]
        if not page["has_more"]:
            return keys


@pytest.mark.slow
def test_feed_goes_on_from_a_promoted_standby_losing_and_duplicating_nothing(tmp_path):
    with primary_and_standby() as (primary, standby, dbname), \
            run_service(tmp_path / "svc") as svc, httpx.Client(base_url=svc.http_url, timeout=30) as client:
        dsn = (f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} dbname={dbname} "
               "user=postgres target_session_attrs=read-write connect_timeout=2")
        created = client.post("/v1/feeds", json={"name": "f", "dsn": dsn, "tables": ["public.k"],
                                                 "options": {"failover": True, "heartbeat_seconds": 1}})
        assert created.status_code == 201, created.text
        assert created.json()["options"]["failover"] is True
        workload = Workload(dsn)
        try:
            # The standby must hold the slot as a synchronized, persisted (not temporary) copy:
            # an unpersisted one is dropped at promotion.
            wait_until(lambda: standby.psql(
                "SELECT synced AND NOT temporary FROM pg_replication_slots WHERE slot_name = 'pgfeed_f'",
                dbname).strip() == "t", 60, "the standby to persist its synchronized copy of the slot")
            status = wait_until(lambda: (s := client.get("/v1/feeds/f").json())["failover"]["ready"] and s,
                                30, "the feed's failover to be ready")
            assert status["failover"]["enabled"] is True
            assert [(s["name"], s["active"], s["caught_up"]) for s in status["failover"]["standby_slots"]] \
                == [(STANDBY_SLOT, True, True)]
            wait_until(lambda: len(feed_keys(client)) >= 300, 30, "300 keys in the feed")

            primary.stop("immediate")
            stopped = time.monotonic()
            standby._run("pg_ctl", "promote", "-w", "-t", "60", "-D", str(standby.datadir))
            workload.mark_promoted()
            first = wait_until(lambda: workload.promoted_first, 30, "a key sent to the new primary")
            wait_until(lambda: first in feed_keys(client), 60, "the new primary's first key in the feed")
            failover_seconds = time.monotonic() - stopped
            wait_until(lambda: len(workload.acked) >= first + 300, 30, "300 keys on the new primary")
        finally:
            workload.stop()

        with psycopg.connect(standby.dsn(dbname), autocommit=True) as conn:
            table = [r[0] for r in conn.execute("SELECT id FROM k ORDER BY id")]
        assert set(workload.acked) <= set(table), "the source lost acknowledged commits"
        assert set(table) <= set(workload.acked) | set(workload.unsure)
        keys = wait_until(lambda: (got := feed_keys(client)) and len(got) >= len(table) and got,
                          60, "the feed to catch up")
        assert keys == table, (f"{len(keys)} keys served, {len(set(keys))} distinct; "
                               f"{len(table)} committed")
        status = client.get("/v1/feeds/f").json()
        assert status["state"] == "running" and status["failover"]["enabled"] is True
        print(f"\nsource failover: {failover_seconds:.1f} s from the primary's stop to the new "
              f"primary's first key in the feed; {len(table)} keys, {first - 1} before the failover")


def test_failover_option_needs_postgresql_17(pg_cluster, pg_dsn, tmp_path):
    """On 15 a clear 422 and nothing created on the source; on 18 the slot has FAILOVER and the
    status says what the source still lacks (no standby slot is waited for)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    with run_service(tmp_path / "svc") as svc, httpx.Client(base_url=svc.http_url, timeout=30) as client:
        answer = client.post("/v1/feeds", json={"name": "fo", "dsn": pg_dsn, "tables": ["t"],
                                                "options": {"failover": True}})
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            slots = conn.execute("SELECT slot_name FROM pg_replication_slots WHERE slot_name = 'pgfeed_fo'").fetchall()
        if int(pg_cluster.version) < 17:
            assert answer.status_code == 422, answer.text
            assert "failover needs PostgreSQL 17 or later" in answer.json()["error"]["message"]
            assert slots == []
            return
        assert answer.status_code == 201, answer.text
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert conn.execute("SELECT failover FROM pg_replication_slots WHERE slot_name = 'pgfeed_fo'").fetchone() == (True,)
        failover = client.get("/v1/feeds/fo").json()["failover"]
        assert failover["enabled"] is True and failover["ready"] is False
        assert failover["standby_slots"] == [] and "synchronized_standby_slots is empty" in failover["note"]
        plain = client.post("/v1/feeds", json={"name": "plain", "dsn": pg_dsn, "tables": ["t"]})
        assert plain.status_code == 201
        assert plain.json()["options"]["failover"] is False
        failover = client.get("/v1/feeds/plain").json()["failover"]
        assert failover["enabled"] is False and "not created with FAILOVER" in failover["note"]
        for name in ("fo", "plain"):
            assert client.delete(f"/v1/feeds/{name}").status_code in (200, 204)
