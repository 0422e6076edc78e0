"""Long-running commands with stdout not a terminal (a file, a pipe): ``pgfeed tail`` and
``pgfeed demo`` print usable lines within seconds, and ``tail`` resumes from its saved cursor."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tests.checkout import PYTHONPATH
from tests.fixtures.fix_service import FeedFactory, Service

pytestmark = pytest.mark.pg

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": PYTHONPATH}


def _pgfeed(*args: str, stdout: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pgfeed", *args], env=ENV, stdout=stdout,
                            stderr=subprocess.PIPE, text=True)


def _lines_within(path: Path, count: int, seconds: float, proc: subprocess.Popen) -> list[str]:
    deadline = time.monotonic() + seconds
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            return lines
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        assert time.monotonic() < deadline, f"{len(lines)} lines after {seconds} s: {lines}"
        time.sleep(0.05)


def test_tail_prints_lines_into_a_file_and_resumes_from_its_cursor(
        pgfeed_service: Service, pg_dsn: str, make_served_feed: FeedFactory,
        tmp_path: Path) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE other (id int PRIMARY KEY)")
    feed = make_served_feed(pg_dsn, tables=("public.t", "public.other"))
    url = pgfeed_service.http_url
    out = tmp_path / "tail.jsonl"
    cursor_file = tmp_path / "cursor"
    with out.open("w") as sink:
        tail = _pgfeed("tail", feed, "--json", "--url", url, "--from", "earliest", "--table",
                       "public.t", "--op", "insert,update", "--wait", "1",
                       "--cursor-file", str(cursor_file), stdout=sink)
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for i in range(1, 4):
                conn.execute("INSERT INTO t VALUES (%s, 'v')", (i,))
                conn.execute("INSERT INTO other VALUES (%s)", (i,))
            conn.execute("UPDATE t SET v = 'w' WHERE id = 1")
            conn.execute("DELETE FROM t WHERE id = 2")
        started = time.monotonic()
        events = [json.loads(line) for line in _lines_within(out, 4, 10, tail)]
        took = time.monotonic() - started
        assert took < 10
        print(f"tail: 4 lines in the file {took:.2f} s after the workload committed")
    finally:
        tail.send_signal(signal.SIGINT)
        _, err = tail.communicate(timeout=20)
    assert tail.returncode == 0, err
    assert [(e["op"], e["table"], (e.get("after") or {}).get("id")) for e in events] == [
        ("insert", "t", 1), ("insert", "t", 2), ("insert", "t", 3), ("update", "t", 1)]
    saved = cursor_file.read_text().strip()
    assert f"stopped at {saved}" in err

    # Resume from the saved cursor (past the update): nothing old again, only what comes next.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (9, 'new')")
    plain = _pgfeed("tail", feed, "--url", url, "--cursor-file", str(cursor_file), "--count", "1",
                    "--wait", "1", stdout=subprocess.PIPE)
    text, err = plain.communicate(timeout=20)
    assert plain.returncode == 0, err
    (line,) = text.splitlines()
    assert " insert public.t " in line and '"id":9' in line and "\x1b[" not in line
    assert line.split()[0] == cursor_file.read_text().strip()  # stopped right after it


def test_tail_refusal_is_a_clear_error(pgfeed_service: Service) -> None:
    bad = subprocess.run([sys.executable, "-m", "pgfeed", "tail", "nosuchfeed", "--url",
                          pgfeed_service.http_url, "--from", "earliest"], env=ENV,
                         capture_output=True, text=True, timeout=30, check=False)
    assert bad.returncode == 1 and "feed_not_found" in bad.stderr, bad.stderr
    op = subprocess.run([sys.executable, "-m", "pgfeed", "tail", "f", "--op", "upsert"], env=ENV,
                        capture_output=True, text=True, timeout=30, check=False)
    assert op.returncode == 2 and "unknown op upsert" in op.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_demo_into_a_file_prints_usable_lines_within_seconds(tmp_path: Path) -> None:
    out = tmp_path / "demo.txt"
    with out.open("w") as sink:
        demo = _pgfeed("demo", "--http-port", str(_free_port()), "--grpc-port", str(_free_port()),
                       stdout=sink)
    started = time.monotonic()
    try:
        lines = _lines_within(out, 1, 5, demo)
        assert lines[0].startswith("starting PostgreSQL")
        deadline = time.monotonic() + 30
        while not any(" insert public.orders " in line for line in lines):
            assert time.monotonic() < deadline, lines
            lines = _lines_within(out, len(lines) + 1, 30, demo)
        took = time.monotonic() - started
    finally:
        demo.send_signal(signal.SIGINT)
        demo.communicate(timeout=60)
    text = out.read_text()
    assert demo.returncode == 0, text[-2000:]
    assert "/docs" in text and "demo stopped:" in text.splitlines()[-1]
    assert int(text.splitlines()[-1].split()[2]) >= 1  # "demo stopped: N changes received"
    assert took < 30, took
    print(f"demo: first change line after {took:.1f} s")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_tail_stops_on_a_signal_even_when_started_with_it_ignored(
        pgfeed_service: Service, pg_dsn: str, make_served_feed: FeedFactory, tmp_path: Path,
        sig: signal.Signals) -> None:
    """A script's background job (or a test's child) can inherit SIGINT and SIGTERM ignored;
    the tail still stops on them, saves its cursor and says where it stopped."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE sig (id int PRIMARY KEY)")
    feed = make_served_feed(pg_dsn, tables=("public.sig",))
    out, cursor_file = tmp_path / "tail.txt", tmp_path / "cursor"
    with out.open("w") as sink:
        tail = subprocess.Popen(
            ["sh", "-c", 'trap "" INT TERM; exec "$@"', "sh", sys.executable, "-m", "pgfeed",
             "tail", feed, "--url", pgfeed_service.http_url, "--from", "earliest", "--wait", "1",
             "--cursor-file", str(cursor_file)],
            env=ENV, stdout=sink, stderr=subprocess.PIPE, text=True)
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO sig VALUES (1)")
        _lines_within(out, 1, 20, tail)
    finally:
        tail.send_signal(sig)
        _, err = tail.communicate(timeout=20)
    assert tail.returncode == 0, err
    assert f"stopped at {cursor_file.read_text().strip()}" in err
