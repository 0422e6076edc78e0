"""Issue 26, items 6-8, through ``pgfeed serve`` processes: one owner per data directory, gRPC
port and replica id (a second process exits non-zero with one line, the first keeps serving, a
SIGKILLed owner never blocks a restart); every startup error is one line without a traceback or
a secret; ``/metrics`` behind the read tokens when ``metrics_auth = "read"``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import httpx
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pgfeed.localpg import LocalCluster
from tests.checkout import PYTHONPATH
from tests.fixtures.fix_pgstore import store_dsn
from tests.fixtures.fix_service import run_service, wait_until

ROOT = Path(__file__).resolve().parents[2]
SECRET = "Sup3r-S3cret-value"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Serve:
    """A ``pgfeed serve`` process on free ports (or the ones given), its stderr in a file."""

    def __init__(self, tmp: Path, *args: str, http_port: int | None = None,
                 grpc_port: int | None = None, env: dict[str, str] | None = None) -> None:
        self.http_port = http_port or free_port()
        self.grpc_port = grpc_port or free_port()
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.log = tmp / f"serve-{self.http_port}.log"
        with self.log.open("wb") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pgfeed", "serve", "--http-port", str(self.http_port),
                 "--grpc-port", str(self.grpc_port), *args],
                cwd=ROOT, env={**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})},
                stdout=subprocess.DEVNULL, stderr=sink)

    def ready(self, timeout: float = 30) -> Serve:
        def up() -> bool:
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            try:
                return httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(up, timeout, "pgfeed serve to be ready")
        return self

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(60)


@pytest.fixture
def servers() -> Iterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for serve in started:
        serve.stop(signal.SIGKILL)


def refused(*args: str, env: dict[str, str] | None = None, http_port: int = 0,
            grpc_port: int = 0) -> tuple[int, list[str]]:
    """Run a ``pgfeed serve`` expected to refuse: (exit code, its stderr lines)."""
    done = subprocess.run([sys.executable, "-m", "pgfeed", "serve", "--http-port", str(http_port),
                           "--grpc-port", str(grpc_port), *args], cwd=ROOT, timeout=60,
                          env={**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})},
                          capture_output=True, text=True, check=False)
    return done.returncode, done.stderr.splitlines()


def one_line(code: int, lines: list[str], *expected: str) -> str:
    """The refusal is exactly one line, with each of ``expected``, no traceback, no secret."""
    assert code != 0
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("pgfeed serve: ") and "Traceback" not in line and SECRET not in line
    for part in expected:
        assert part in line, (part, line)
    return line


def changes_of(url: str) -> list[int]:
    page = httpx.get(f"{url}/v1/feeds/f/changes", params={"after": "earliest"}, timeout=10).json()
    return [c["after"]["id"] for c in page["changes"] if c["op"] == "insert"]


# -- one owner per resource ------------------------------------------------------------------------


@pytest.mark.pg
def test_a_second_server_on_the_data_dir_is_refused_and_a_sigkill_leaves_no_stale_lock(
        pg_dsn: str, tmp_path: Path, servers: list[Serve]) -> None:
    data = tmp_path / "data"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    first = Serve(tmp_path, "--data-dir", str(data))
    servers.append(first.ready())
    created = httpx.post(f"{first.url}/v1/feeds", timeout=60, json={
        "name": "f", "dsn": pg_dsn, "tables": ["public.t"]})
    assert created.status_code == 201, created.text
    wait_until(lambda: httpx.get(f"{first.url}/v1/feeds/f").json()["state"] == "running", 30, "running")

    code, lines = refused("--data-dir", str(data))
    one_line(code, lines, f"data directory {data} is in use", f"pid {first.proc.pid}", "--data-dir")
    # The first keeps its slot and serves what is committed after the refusal.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (1)")
    wait_until(lambda: changes_of(first.url) == [1], 30, "the first server to serve the insert")
    assert httpx.get(f"{first.url}/v1/feeds/f").json()["state"] == "running"

    # SIGKILL: the kernel drops the lock; a restart on the same directory starts and captures.
    first.stop(signal.SIGKILL)
    again = Serve(tmp_path, "--data-dir", str(data))
    servers.append(again.ready())
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (2)")
    wait_until(lambda: changes_of(again.url) == [1, 2], 30, "the restarted server to capture")
    assert again.stop() == 0


def test_a_second_server_on_the_grpc_port_is_refused(tmp_path: Path, servers: list[Serve]) -> None:
    first = Serve(tmp_path, "--data-dir", str(tmp_path / "a"))
    servers.append(first.ready())
    code, lines = refused("--data-dir", str(tmp_path / "b"), grpc_port=first.grpc_port)
    one_line(code, lines, f"gRPC port {first.grpc_port}", "already in use", "--grpc-port")
    assert not (tmp_path / "b" / "feeds").exists()  # refused before anything started
    # Every fresh connection to the port reaches the first server, which still serves.
    for _ in range(8):
        with grpc.insecure_channel(f"127.0.0.1:{first.grpc_port}") as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="pgfeed.v1.ChangeFeed"), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
    assert httpx.get(f"{first.url}/v1/feeds", timeout=10).status_code == 200
    # Nor does any other process share it: a grpcio server with its defaults (SO_REUSEPORT on)
    # could bind next to a listener that set it too; pgfeed's does not.
    intruder = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    with pytest.raises(RuntimeError, match="Failed to bind"):
        intruder.add_insecure_port(f"127.0.0.1:{first.grpc_port}")
    intruder.stop(None)


@pytest.mark.pg
@pytest.mark.slow  # the refusal waits out CLAIM_WAIT (a SIGKILLed predecessor's session ending)
def test_one_live_process_per_replica_id_on_a_store(pg_cluster: LocalCluster, tmp_path: Path,
                                                     servers: list[Serve]) -> None:
    store = store_dsn(pg_cluster)
    env = {"PGFEED_STORE": store}
    first = Serve(tmp_path, "--replica-id", "r1", env=env)
    servers.append(first.ready())
    # The claim lives on a session of its own; cut, it is taken again at the next heartbeat.
    cut = claim_sessions(store)
    assert len(cut) == 1
    with psycopg.connect(store, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (cut[0],))
    wait_until(lambda: claim_sessions(store) not in ([], cut), 15, "the claim taken again")
    code, lines = refused("--replica-id", "r1", env=env)
    line = one_line(code, lines, "replica id 'r1' is in use by another live pgfeed serve",
                    "last heartbeat", "--replica-id")
    print(line)
    assert httpx.get(f"{first.url}/v1/replicas", timeout=10).status_code == 200
    other = Serve(tmp_path, "--replica-id", "r2", env=env)  # another id is welcome
    servers.append(other.ready())

    assert first.stop() == 0  # stopped: its id is free again
    second = Serve(tmp_path, "--replica-id", "r1", env=env)
    servers.append(second.ready())
    second.stop(signal.SIGKILL)  # killed: the store ends its session, the id is free at once
    third = Serve(tmp_path, "--replica-id", "r1", env=env)
    servers.append(third.ready())
    ids = {r["id"] for r in httpx.get(f"{third.url}/v1/replicas", timeout=10).json()["replicas"]}
    assert {"r1", "r2"} <= ids


def claim_sessions(store: str) -> list[int]:
    """Backends of replica r1's claim holding their advisory lock."""
    with psycopg.connect(store, autocommit=True) as conn:
        return [pid for (pid,) in conn.execute(
            "SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
            "WHERE a.application_name = 'pgfeed r1 claim' AND l.locktype = 'advisory' AND l.granted")]


def test_changelog_memory_is_not_offered_and_warns_when_used(tmp_path: Path,
                                                             servers: list[Serve]) -> None:
    shown = subprocess.run([sys.executable, "-m", "pgfeed", "serve", "--help"], cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": PYTHONPATH}, capture_output=True,
                           text=True, check=True).stdout
    assert "memory" not in shown and "--changelog" not in shown
    serve = Serve(tmp_path, "--data-dir", str(tmp_path / "d"), "--changelog", "memory")
    servers.append(serve.ready())
    warning = [line for line in serve.log.read_text().splitlines() if "changelog = memory" in line]
    assert len(warning) == 1 and "WARNING" in warning[0] and "LOST when it stops" in warning[0]


# -- startup errors: one line each ---------------------------------------------------------------


@pytest.mark.parametrize(("env", "expected"), [
    ({"PGFEED_ADMIN_TOKENS": f"{SECRET},other"}, ("PGFEED_ADMIN_TOKENS is not valid JSON",
                                                  "JSON list of strings")),
    ({"PGFEED_READ_TOKENS": json.dumps({"token": SECRET})}, ("invalid read_tokens",
                                                             "PGFEED_READ_TOKENS", "valid list")),
    ({"PGFEED_READ_TOKENS": json.dumps([SECRET, 7])}, ("invalid read_tokens", "valid string")),
    ({"PGFEED_LOG_FORMAT": "xml"}, ("invalid log_format", "--log-format, PGFEED_LOG_FORMAT")),
], ids=["tokens-not-json", "tokens-an-object", "tokens-a-number", "unknown-log-format"])
def test_bad_settings_are_one_line(tmp_path: Path, env: dict[str, str],
                                   expected: tuple[str, ...]) -> None:
    code, lines = refused("--data-dir", str(tmp_path / "d"), env=env)
    one_line(code, lines, *expected)
    assert not (tmp_path / "d").exists()  # refused before the data dir is touched


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        one_line(*refused("--data-dir", str(tmp_path / "d"), http_port=port),
                 f"HTTP port {port} on 127.0.0.1 is already in use", "--http-port")
        one_line(*refused("--data-dir", str(tmp_path / "d"), grpc_port=port),
                 f"gRPC port {port} on 127.0.0.1 is already in use", "--grpc-port")
    # Both refused before the data dir held anything but the lock file.
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["pgfeed.lock"]


def test_a_data_dir_that_cannot_be_created_or_written_is_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    one_line(*refused("--data-dir", str(a_file / "data")),
             f"cannot create the data directory {a_file / 'data'}", "--data-dir")
    one_line(*refused("--data-dir", str(a_file)), f"cannot create the data directory {a_file}")
    read_only = tmp_path / "ro"
    read_only.mkdir()
    (read_only / "pgfeed.lock").mkdir()  # the lock file cannot be written, even as root
    one_line(*refused("--data-dir", str(read_only)),
             f"cannot write to the data directory {read_only}")


def test_a_bad_config_file_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    one_line(*refused("--config", str(missing)), f"config file {missing} not found")
    broken = tmp_path / "broken.toml"
    broken.write_text(f'admin_tokens = ["{SECRET}"\n')
    one_line(*refused("--config", str(broken)), f"config file {broken} is not valid TOML")
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(f'admin_token = ["{SECRET}"]\nlog_format = "xml"\n')
    one_line(*refused("--config", str(unknown)), "unknown setting 'admin_token'",
             f"invalid log_format (--log-format, PGFEED_LOG_FORMAT or log_format in {unknown})")
    unreadable = tmp_path / "dir.toml"
    unreadable.mkdir()
    one_line(*refused("--config", str(unreadable)), f"config file {unreadable} cannot be read")


def test_an_unreachable_store_is_one_line_without_its_password(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    for store in (f"postgresql://pgfeed:{SECRET}@127.0.0.1:{port}/store",
                  f"host=127.0.0.1 port={port} dbname=store user=pgfeed password={SECRET}"):
        line = one_line(*refused(env={"PGFEED_STORE": store}), "cannot reach the pgfeed store",
                        "Connection refused", "PGFEED_STORE")
        assert "password=***" in line


# -- /metrics behind the read tokens -------------------------------------------------------------


def test_metrics_behind_the_read_tokens(tmp_path: Path, servers: list[Serve]) -> None:
    tokens = {"PGFEED_READ_TOKENS": json.dumps(["reader"]), "PGFEED_ADMIN_TOKENS": json.dumps(["boss"])}
    serve = Serve(tmp_path, "--data-dir", str(tmp_path / "d"), "--metrics-auth", "read", env=tokens)
    servers.append(serve.ready())
    url = f"{serve.url}/metrics"
    missing = httpx.get(url, timeout=10)
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "unauthorized"
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert httpx.get(url, headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
    for token in ("reader", "boss"):
        answer = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert answer.status_code == 200 and "pgfeed_request_duration_seconds" in answer.text
    assert httpx.get(f"{serve.url}/healthz", timeout=10).status_code == 200  # liveness stays open


def test_metrics_stay_open_by_default_with_tokens(tmp_path: Path) -> None:
    from pydantic import SecretStr

    with run_service(tmp_path / "d", read_tokens=[SecretStr("reader")]) as service:
        answer = httpx.get(f"{service.http_url}/metrics", timeout=10)
        assert answer.status_code == 200 and "pgfeed_request_duration_seconds" in answer.text
        assert httpx.get(f"{service.http_url}/v1/feeds", timeout=10).status_code == 401
