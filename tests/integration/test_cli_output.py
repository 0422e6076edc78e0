"""The admin commands print for people by default and the API's JSON with ``--json`` (issue
30.3): ``pgfeed`` run as a subprocess against the session's service and a real PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import psycopg

from tests.checkout import PYTHONPATH
from tests.fixtures.fix_service import Service, wait_until

ROOT = Path(__file__).resolve().parents[2]


def _cli(service: Service | str, *args: str) -> subprocess.CompletedProcess[str]:
    url = service if isinstance(service, str) else service.http_url
    return subprocess.run([sys.executable, "-m", "pgfeed", *args, "--url", url], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": PYTHONPATH}, capture_output=True,
                          text=True, timeout=60, check=False)


def _ok(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 0 and not run.stderr, run
    return run.stdout


def _ok_with_note(run: subprocess.CompletedProcess[str]) -> str:
    """stdout of a command that also tells stderr what it started."""
    assert run.returncode == 0, run
    return run.stdout


def _one_line(run: subprocess.CompletedProcess[str]) -> str:
    [line] = _ok(run).splitlines()
    return line


def _same_as_api(client: httpx.Client, path: str, service: Service, *args: str) -> Any:
    """The CLI's ``--json`` answer, asserted equal to the API's taken around it (retried while
    the API's own answer moves between the two reads: positions of a live cluster)."""
    for _ in range(10):
        before = client.get(path).json()
        printed = json.loads(_ok(_cli(service, *args, "--json")))
        if before == client.get(path).json():
            assert printed == before
            return printed
    raise AssertionError(f"{path} never held still")


def test_feeds_print_for_people_and_json_for_scripts(pgfeed_service: Service, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE cli_out (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO cli_out VALUES (1, 'a')")
    name = "cli_out"
    with httpx.Client(base_url=pgfeed_service.http_url, timeout=30) as client:
        try:
            created = _one_line(_cli(pgfeed_service, "feeds", "create", name, "--dsn", pg_dsn,
                                     "--tables", "public.cli_out", "--heartbeat-seconds", "1"))
            assert created.startswith(f"created feed {name}: slot pgfeed_{name}, publication "
                                      f"pgfeed_{name}, tables public.cli_out; state "), created
            wait_until(lambda: client.get(f"/v1/feeds/{name}").json()["state"] == "running", 30,
                       "the feed running")
            client.put(f"/v1/feeds/{name}/consumers/app", json={"cursor": "0/0"})
            paused = _one_line(_cli(pgfeed_service, "feeds", "pause", name))
            assert paused.startswith(f"paused feed {name}: state paused, confirmed "), paused

            # list: a table, one row per feed, with the name, state and positions
            listed = _ok(_cli(pgfeed_service, "feeds", "list"))
            header, *rows = listed.splitlines()
            assert header.split()[:5] == ["NAME", "STATE", "CONFIRMED", "HEAD", "LAG"]
            feed = client.get(f"/v1/feeds/{name}").json()
            [row] = [r for r in rows if r.split()[0] == name]
            assert row.split()[1:4] == ["paused", feed["confirmed_lsn"], feed["head_lsn"]], row
            everything = _same_as_api(client, "/v1/feeds", pgfeed_service, "feeds", "list")
            assert name in [f["name"] for f in everything["feeds"]]

            # show: a block a person reads
            shown = _ok(_cli(pgfeed_service, "feeds", "show", name))
            assert shown.startswith(f"feed {name}\n"), shown
            assert "state        paused" in shown and f"confirmed {feed['confirmed_lsn']}" in shown
            assert f"head {feed['head_lsn']}" in shown and "slot risk" in shown
            assert "app at 0/0" in shown and "backfills    none running" in shown
            assert "  gaps         none" in shown
            assert "{" not in shown  # not JSON
            as_json = _same_as_api(client, f"/v1/feeds/{name}", pgfeed_service, "feeds", "show", name)
            assert as_json["name"] == name and as_json["state"] == "paused"

            consumers = _ok(_cli(pgfeed_service, "consumers", "list", name)).splitlines()
            assert consumers[0].split()[:3] == ["NAME", "CURSOR", "LAG"] and consumers[1].split()[:2] == [
                "app", "0/0"]
            assert _one_line(_cli(pgfeed_service, "consumers", "delete", name, "app")) == \
                f"deleted consumer app of feed {name}"
            resumed = _one_line(_cli(pgfeed_service, "feeds", "resume", name))
            assert resumed.startswith(f"resumed feed {name}: state "), resumed
            started = _cli(pgfeed_service, "backfill", name, "--tables", "public.cli_out")
            [line] = _ok_with_note(started).splitlines()
            backfill_id = line.split()[0]
            assert backfill_id.startswith("bf_") and "public.cli_out" in line and " rows " in line, line
            listed_backfills = json.loads(_ok(_cli(pgfeed_service, "backfill", name, "--status", "--json")))
            assert backfill_id in [b["id"] for b in listed_backfills["backfills"]]
            trimmed = _one_line(_cli(pgfeed_service, "feeds", "trim", name, "--before", "latest"))
            assert trimmed.startswith(f"trimmed feed {name}: dropped ") and \
                "removed consumers none" in trimmed, trimmed
        finally:
            deleted = _cli(pgfeed_service, "feeds", "delete", name)
        assert _one_line(deleted) == f"deleted feed {name}"
        assert client.get(f"/v1/feeds/{name}").status_code == 404


def test_an_error_is_one_line_on_stderr_with_a_nonzero_exit(pgfeed_service: Service) -> None:
    for args in (("feeds", "show", "no_such_feed"), ("feeds", "show", "no_such_feed", "--json"),
                 ("feeds", "pause", "no_such_feed"), ("consumers", "delete", "no_such_feed", "x"),
                 ("backfill", "no_such_feed", "--tables", "public.t")):
        run = _cli(pgfeed_service, *args)
        assert run.returncode == 1 and run.stdout == "", (args, run)
        [line] = run.stderr.splitlines()
        assert line.startswith("pgfeed: feed_not_found: ") and "no_such_feed" in line, (args, line)
    # A service that is not there: one line too, exit 2.
    run = _cli("http://127.0.0.1:9", "feeds", "list")
    assert run.returncode == 2 and run.stdout == "" and "Traceback" not in run.stderr, run
    [line] = run.stderr.splitlines()
    assert line.startswith("pgfeed: unreachable: cannot reach the service at http://127.0.0.1:9"), line
