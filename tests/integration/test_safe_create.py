"""Issue 26 (1-3): a feed is checked before anything is created, never breaks the application's
writes on a key-less table, and a failed create leaves the source and the catalogue as they were.
Through the public surface (HTTP, CLI subprocesses) on real PostgreSQL 15 and 18."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgfeed.localpg import LocalCluster
from pgfeed_proto.v1 import feed_pb2, feed_pb2_grpc
from tests.fixtures.fix_service import Service, current_lsn, wait_until

pytestmark = pytest.mark.pg

ROOT = Path(__file__).resolve().parents[2]


def _db(dsn: str) -> str:
    return str(conninfo_to_dict(dsn)["dbname"])


def _source(dsn: str) -> dict[str, Any]:
    """What a create could leave behind: publications, this database's slots, event triggers,
    functions in public, and every table's replica identity."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        def q(query: str) -> list[tuple[Any, ...]]:
            return conn.execute(query).fetchall()  # type: ignore[arg-type]
        return {
            "publications": q("SELECT pubname, puballtables FROM pg_publication ORDER BY 1"),
            "slots": q("SELECT slot_name, plugin FROM pg_replication_slots "
                       "WHERE database = current_database() ORDER BY 1"),
            "event_triggers": q("SELECT evtname FROM pg_event_trigger ORDER BY 1"),
            "functions": q("SELECT proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace "
                           "ORDER BY 1"),
            "identity": q("SELECT relname, relreplident FROM pg_class WHERE relkind = 'r' "
                          "AND relnamespace = 'public'::regnamespace ORDER BY 1"),
        }


def _post(service: Service, body: dict[str, Any], **params: str) -> httpx.Response:
    with httpx.Client(base_url=service.http_url, timeout=60) as client:
        return client.post("/v1/feeds", json=body, params=params)


def _get(service: Service, name: str) -> httpx.Response:
    with httpx.Client(base_url=service.http_url, timeout=30) as client:
        return client.get(f"/v1/feeds/{name}")


def _delete(service: Service, name: str) -> None:
    with httpx.Client(base_url=service.http_url, timeout=60) as client:
        assert client.delete(f"/v1/feeds/{name}").status_code == 204


def _app_writes(dsn: str, table: str, a: int = 1) -> None:
    """The application's INSERT, UPDATE and DELETE on ``table`` (columns a int, b text): rows
    ``a`` and ``a + 1`` inserted, ``a`` updated, ``a + 1`` deleted."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        t = sql.Identifier(table)
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, 'one'), (%s, 'two')").format(t), (a, a + 1))
        conn.execute(sql.SQL("UPDATE {} SET b = 'uno' WHERE a = %s").format(t), (a,))
        conn.execute(sql.SQL("DELETE FROM {} WHERE a = %s").format(t), (a + 1,))


def _changes(service: Service, name: str, dsn: str) -> list[dict[str, Any]]:
    target = current_lsn(dsn)
    wait_until(lambda: _lsn(_get(service, name).json()["confirmed_lsn"]) >= target, 60,
               f"{name} caught up")
    with httpx.Client(base_url=service.http_url, timeout=30) as client:
        page = client.get(f"/v1/feeds/{name}/changes", params={"after": "earliest", "limit": 1000})
    return list(page.json()["changes"])


def _lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def _running(service: Service, name: str) -> None:
    wait_until(lambda: _get(service, name).json()["state"] == "running", 30, f"{name} running")


def test_a_keyless_table_is_refused_or_given_full_identity_with_consent(
        pgfeed_service: Service, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE nopk (a int, b text); CREATE TABLE keyed (id int PRIMARY KEY)")
    name = f"nk_{_db(pg_dsn)}"
    body = {"name": name, "dsn": pg_dsn, "tables": ["public.nopk", "public.keyed"],
            "options": {"heartbeat_seconds": 1}}
    before = _source(pg_dsn)
    refused = _post(pgfeed_service, body)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["code"] == "table_without_replica_identity"
    assert "public.nopk" in error["message"] and "ALTER TABLE public.nopk REPLICA IDENTITY FULL" \
        in error["message"], error
    assert "public.keyed" not in error["message"]
    assert [f["check"] for f in error["findings"]] == ["replica_identity"], error
    assert _source(pg_dsn) == before
    assert _get(pgfeed_service, name).status_code == 404
    _app_writes(pg_dsn, "nopk")  # the application's writes still work

    created = _post(pgfeed_service, {**body, "options": {"heartbeat_seconds": 1,
                                                         "keyless": "identity_full"}})
    assert created.status_code == 201, created.text
    feed = created.json()
    assert feed["identity_full"] == ["public.nopk"] and feed["options"]["keyless"] == "identity_full"
    assert feed["keyless_guard"] is False  # a feed of named tables needs no event trigger
    try:
        _running(pgfeed_service, name)
        _app_writes(pg_dsn, "nopk", 10)  # UPDATE and DELETE still succeed while published
        changes = [c for c in _changes(pgfeed_service, name, pg_dsn) if c["table"] == "nopk"]
        assert [c["op"] for c in changes] == ["insert", "insert", "update", "delete"]
        update, delete = changes[2], changes[3]
        assert update["before"] == {"a": 10, "b": "one"} and update["after"] == {"a": 10, "b": "uno"}
        assert delete["before"] == {"a": 11, "b": "two"}
        assert _get(pgfeed_service, name).json()["unprotected_tables"] == []
    finally:
        _delete(pgfeed_service, name)
    after = _source(pg_dsn)
    assert after["publications"] == before["publications"] and after["slots"] == before["slots"]
    assert ("nopk", "f") in after["identity"]  # consented identity changes stay (docs/design.md)
    _app_writes(pg_dsn, "nopk", 20)


def test_a_feed_of_all_tables_protects_tables_created_later_with_consent(
        pgfeed_service: Service, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE keyed (id int PRIMARY KEY)")
    plain = f"all_{_db(pg_dsn)}"
    created = _post(pgfeed_service, {"name": plain, "dsn": pg_dsn, "all_tables": True})
    assert created.status_code == 201, created.text
    try:
        # Without consent a table created later is published unprotected: status says so.
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE late (a int, b text)")
        assert _get(pgfeed_service, plain).json()["unprotected_tables"] == ["public.late"]
        with grpc.insecure_channel(pgfeed_service.grpc_target) as channel:  # gRPC says the same
            assert list(feed_pb2_grpc.ChangeFeedStub(channel).GetFeed(
                feed_pb2.GetFeedRequest(name=plain), timeout=10).unprotected_tables) == ["public.late"]
        before = _source(pg_dsn)
        refused = _post(pgfeed_service, {"name": f"{plain}_2", "dsn": pg_dsn, "all_tables": True})
        assert refused.status_code == 422 and "public.late" in refused.json()["error"]["message"]
        assert _source(pg_dsn) == before
    finally:
        _delete(pgfeed_service, plain)

    guarded = f"guard_{_db(pg_dsn)}"
    created = _post(pgfeed_service, {"name": guarded, "dsn": pg_dsn, "all_tables": True,
                                     "options": {"heartbeat_seconds": 1, "keyless": "identity_full"}})
    assert created.status_code == 201, created.text
    assert created.json()["identity_full"] == ["public.late"] and created.json()["keyless_guard"]
    try:
        _running(pgfeed_service, guarded)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE later (a int, b text)")  # the event trigger gives it FULL
            conn.execute("CREATE TABLE dropped_key (a int PRIMARY KEY, b text)")
            conn.execute("ALTER TABLE dropped_key DROP CONSTRAINT dropped_key_pkey")
            conn.execute("CREATE TABLE chosen (a int, b text)")
            conn.execute("ALTER TABLE chosen REPLICA IDENTITY NOTHING")  # deliberate: kept
        _app_writes(pg_dsn, "later")
        _app_writes(pg_dsn, "dropped_key")
        identities = dict(_source(pg_dsn)["identity"])
        assert (identities["later"], identities["dropped_key"], identities["chosen"]) == ("f", "f", "n")
        assert _get(pgfeed_service, guarded).json()["unprotected_tables"] == ["public.chosen"]
        ops = [(c["table"], c["op"]) for c in _changes(pgfeed_service, guarded, pg_dsn)]
        assert ops == [("later", "insert"), ("later", "insert"), ("later", "update"),
                       ("later", "delete"), ("dropped_key", "insert"), ("dropped_key", "insert"),
                       ("dropped_key", "update"), ("dropped_key", "delete")]
    finally:
        _delete(pgfeed_service, guarded)
    assert _source(pg_dsn)["event_triggers"] == [] and _source(pg_dsn)["functions"] == []


@contextlib.contextmanager
def _role(dsn: str, *, replication: bool) -> Iterator[str]:
    """A login role owning public.t, allowed to create publications; a DSN as that role."""
    role = f"r_{_db(dsn)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN {}").format(
            sql.Identifier(role), sql.SQL("REPLICATION" if replication else "NOREPLICATION")))
        conn.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
            sql.Identifier(_db(dsn)), sql.Identifier(role)))
        conn.execute(sql.SQL("ALTER TABLE t OWNER TO {}").format(sql.Identifier(role)))
    try:
        yield make_conninfo(dsn, user=role)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE t OWNER TO postgres")
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _create_cut_at_the_slot(service: Service, dsn: str, body: dict[str, Any]) -> httpx.Response:
    """POST the feed while a transaction holds back the slot's consistent point, and terminate
    the walsender creating the slot: the create fails after its publication was made."""
    answer: list[httpx.Response] = []
    with psycopg.connect(dsn) as blocker:
        blocker.execute("SELECT txid_current()")  # an xid: CREATE_REPLICATION_SLOT waits for it
        thread = threading.Thread(target=lambda: answer.append(_post(service, body)))
        thread.start()
        with psycopg.connect(dsn, autocommit=True) as conn:
            def walsender() -> Any:
                row = conn.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'walsender' "
                                   "AND datname = current_database()").fetchone()
                return row[0] if row else None
            pid = wait_until(walsender, 30, "the walsender creating the slot")
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        thread.join(60)
        blocker.rollback()
    return answer[0]


def test_a_failed_create_leaves_the_source_and_the_catalogue_as_they_were(
        pgfeed_service: Service, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    name = f"fail_{_db(pg_dsn)}"
    body = {"name": name, "dsn": pg_dsn, "tables": ["public.t"]}
    before = _source(pg_dsn)

    def refused(body: dict[str, Any], *words: str) -> dict[str, Any]:
        answer = _post(pgfeed_service, body)
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert all(w in error["message"] for w in words), error
        assert _get(pgfeed_service, name).status_code == 404
        with httpx.Client(base_url=pgfeed_service.http_url, timeout=30) as client:
            assert name not in [f["name"] for f in client.get("/v1/feeds").json()["feeds"]]
        return dict(error)

    refused({**body, "tables": ["public.t", "public.nope"]}, "unknown table on the source: public.nope")
    assert _source(pg_dsn) == before

    with _role(pg_dsn, replication=False) as dsn:
        before = _source(pg_dsn)
        error = refused({**body, "dsn": dsn}, "lacks REPLICATION", "ALTER ROLE")
        assert [f["check"] for f in error["findings"]] == ["replication"]
        assert _source(pg_dsn) == before

    before = _source(pg_dsn)
    cut = _create_cut_at_the_slot(pgfeed_service, pg_dsn, body)
    assert cut.status_code == 422, cut.text
    message = cut.json()["error"]["message"]
    assert f"creating replication slot 'pgfeed_{name}' failed" in message and "was dropped" in message
    assert _get(pgfeed_service, name).status_code == 404
    assert _source(pg_dsn) == before  # the publication it had made is gone

    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # someone else's slot of that name
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (f"pgfeed_{name}",))
    before = _source(pg_dsn)
    refused(body, f"replication slot pgfeed_{name} already exists", "will not take over")
    assert _source(pg_dsn) == before  # the slot is still there, nothing else was made


def test_a_dry_run_reports_and_creates_nothing(pgfeed_service: Service, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE nopk (a int, b text); CREATE TABLE keyed (id int PRIMARY KEY)")
    name = f"dry_{_db(pg_dsn)}"
    before = _source(pg_dsn)
    answer = _post(pgfeed_service, {"name": name, "dsn": pg_dsn, "tables": ["public.nopk"]},
                   dry_run="true")
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["ok"] is False
    errors = [f for f in report["findings"] if f["level"] == "error"]
    assert [(f["check"], f["fix"].split(";")[0]) for f in errors] == [
        ("replica_identity", "ALTER TABLE public.nopk REPLICA IDENTITY FULL")]
    checks = {f["check"] for f in report["findings"]}
    assert {"wal_level", "replication", "replication_slots", "wal_senders",
            "max_slot_wal_keep_size", "slot", "publication"} <= checks
    ok = _post(pgfeed_service, {"name": name, "dsn": pg_dsn, "tables": ["public.keyed"]}, dry_run="true")
    assert ok.status_code == 200 and ok.json()["ok"] is True, ok.text
    cli = _cli("feeds", "create", name, "--dsn", pg_dsn, "--tables", "public.nopk", "--dry-run",
               "--url", pgfeed_service.http_url)
    assert cli.returncode == 1 and "ALTER TABLE public.nopk REPLICA IDENTITY FULL" in cli.stdout, cli
    cli = _cli("feeds", "create", name, "--dsn", pg_dsn, "--tables", "public.nopk", "--dry-run",
               "--keyless", "identity_full", "--url", pgfeed_service.http_url)
    assert cli.returncode == 0 and "pgfeed will set REPLICA IDENTITY FULL" in cli.stdout, cli
    assert _source(pg_dsn) == before
    assert _get(pgfeed_service, name).status_code == 404


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pgfeed", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)


def test_check_reports_findings_with_fixes_and_exit_codes(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text); CREATE TABLE nopk (a int)")
        conn.execute("CREATE TABLE parts (id int, v text) PARTITION BY RANGE (id)")
        conn.execute("CREATE TABLE parts_1 PARTITION OF parts FOR VALUES FROM (0) TO (10)")
    good = _cli("check", "--dsn", pg_dsn, "--tables", "public.t")
    assert good.returncode == 0, good
    assert "wal_level = logical" in good.stdout and "0 error(s)" in good.stdout

    bad = _cli("check", "--dsn", pg_dsn, "--tables", "public.t,public.nopk,public.parts", "--json")
    assert bad.returncode == 1, bad
    report = json.loads(bad.stdout)
    errors = {(f["check"], f["fix"]) for f in report["findings"] if f["level"] == "error"}
    assert report["ok"] is False and errors == {
        ("replica_identity", f"ALTER TABLE public.{t} REPLICA IDENTITY FULL; or add a primary key; "
                             + "or option keyless: identity_full")
        for t in ("nopk", "parts_1")}  # parts_1: a leaf partition of the table named

    with _role(pg_dsn, replication=False) as dsn:
        plain = _cli("check", "--dsn", dsn, "--tables", "public.t")
    assert plain.returncode == 1, plain
    role = f"r_{_db(pg_dsn)}"
    assert "lacks REPLICATION" in plain.stdout and f"fix: ALTER ROLE {role} REPLICATION;" in plain.stdout

    everything = _cli("check", "--dsn", pg_dsn, "--all-tables", "--keyless", "identity_full", "--json")
    assert everything.returncode == 0, everything
    findings = json.loads(everything.stdout)["findings"]
    assert {f["message"].split(":")[0] for f in findings if f["check"] == "replica_identity"
            and f["level"] == "warning"} == {"public.nopk", "public.parts_1"}

    down = _cli("check", "--dsn", make_conninfo(pg_dsn, port="1", password="s3cret"))
    assert down.returncode == 1 and "connection" in down.stdout and "s3cret" not in down.stdout


def test_checks_of_a_source_at_wal_level_replica() -> None:
    """wal_level cannot be changed on the shared clusters: a cluster of its own (~1-2 s)."""
    with LocalCluster.start("15", settings={"wal_level": "replica", "max_wal_senders": "2"}) as cluster:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        out = _cli("check", "--dsn", dsn, "--tables", "public.t", "--json")
    assert out.returncode == 1, out
    errors = [(f["check"], f["fix"]) for f in json.loads(out.stdout)["findings"] if f["level"] == "error"]
    assert errors == [("wal_level", "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL")]


def test_adding_a_keyless_table_to_a_feed_is_refused_too(pgfeed_service: Service, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE keyed (id int PRIMARY KEY); CREATE TABLE nopk (a int, b text)")
    name = f"patch_{_db(pg_dsn)}"
    created = _post(pgfeed_service, {"name": name, "dsn": pg_dsn, "tables": ["public.keyed"]})
    assert created.status_code == 201, created.text
    try:
        before = _source(pg_dsn)
        with httpx.Client(base_url=pgfeed_service.http_url, timeout=30) as client:
            answer = client.patch(f"/v1/feeds/{name}", json={"tables": ["public.keyed", "public.nopk"]})
            assert answer.status_code == 422, answer.text
            error = answer.json()["error"]
            assert error["code"] == "table_without_replica_identity"
            assert "ALTER TABLE public.nopk REPLICA IDENTITY FULL" in error["message"], error
            assert client.get(f"/v1/feeds/{name}").json()["tables"] == ["public.keyed"]
        assert _source(pg_dsn) == before
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            published = conn.execute("SELECT tablename FROM pg_publication_tables WHERE pubname = %s",
                                     (f"pgfeed_{name}",)).fetchall()
        assert published == [("keyed",)]
        _app_writes(pg_dsn, "nopk")
    finally:
        _delete(pgfeed_service, name)
