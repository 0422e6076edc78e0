"""bench/serve.py's servers: ``pgfeed serve`` subprocesses (started, stopped with the bench,
profiled with py-spy) and the feed they serve."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
import _checkout  # noqa: F401  (this checkout's packages first: sys.path, PYTHONPATH)

sys.path.insert(0, str(BENCH))

import httpx
from _serve_cpu import Cpu

from pgfeed.localpg import free_port
from pgfeed_client._cursor import parse_lsn

FEED = "bench"


# -- the server --------------------------------------------------------------------------------------


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    http: httpx.Client
    grpc_target: str
    log: Path
    postmaster: int = 0

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"pgfeed serve exited ({self.proc.returncode}): {self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def cpu(self) -> contextlib.AbstractContextManager[Cpu]:
        return Cpu.measure(self.proc.pid, self.postmaster)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when this script dies, however it dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


@contextlib.contextmanager
def pgfeed_serve(data_dir: Path) -> Iterator[Server]:
    """``python -m pgfeed serve`` over ``data_dir`` on free loopback ports."""
    with run_server(data_dir.parent / "serve.log", "--data-dir", str(data_dir)) as server:
        yield server


@contextlib.contextmanager
def run_server(log: Path, *args: str) -> Iterator[Server]:
    """``python -m pgfeed serve`` with ``args`` on free loopback ports, its output appended to
    ``log``; SIGTERM (then SIGKILL) on exit."""
    http_port, grpc_port = free_port(), free_port()
    with open(log, "ab") as out:
        # preexec_fn is safe here: the script has started no thread yet.
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgfeed", "serve", *args,
             "--http-port", str(http_port), "--grpc-port", str(grpc_port)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
            env={**os.environ, "PGFEED_LOG_LEVEL": "WARNING"})
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=120) as http:
            server = Server(proc, http, f"127.0.0.1:{grpc_port}", log)
            deadline = time.monotonic() + 60
            while True:
                server.check()
                with contextlib.suppress(httpx.TransportError):
                    if http.get("/readyz").status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pgfeed serve not ready after 60 s: {server.tail()}")
                time.sleep(0.05)
            yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


class Service:
    """The ``pgfeed serve`` subprocess of a run, restartable on the same data dir (a fresh process
    for each read, so nothing an earlier read left in its read-ahead cache is reused)."""

    def __init__(self, data_dir: Path, postmaster: int) -> None:
        self.data_dir, self.postmaster = data_dir, postmaster
        self._stack = contextlib.ExitStack()
        self.server = self._start()

    def _start(self) -> Server:
        server = self._stack.enter_context(pgfeed_serve(self.data_dir))
        server.postmaster = self.postmaster
        return server

    def restart(self) -> Server:
        self._stack.close()
        self.server = self._start()
        deadline = time.monotonic() + 30
        while feed_status(self.server)["state"] != "running":  # capture resumed from its slot
            if time.monotonic() > deadline:
                raise RuntimeError(f"feed not running after a restart: {feed_status(self.server)}")
            time.sleep(0.05)
        return self.server

    def close(self) -> None:
        self._stack.close()


def create_feed(server: Server, dsn: str) -> None:
    body = {"name": FEED, "dsn": dsn, "tables": ["public.orders", "public.ticks"],
            "options": {"snapshot": "never"}}
    r = server.http.post("/v1/feeds", json=body)
    if r.status_code != 201:
        raise RuntimeError(f"POST /v1/feeds: {r.status_code} {r.text}")
    deadline = time.monotonic() + 30
    while feed_status(server)["state"] != "running":
        if time.monotonic() > deadline:
            raise RuntimeError(f"feed not running after 30 s: {feed_status(server)}")
        time.sleep(0.1)


def feed_status(server: Server) -> dict[str, Any]:
    r = server.http.get(f"/v1/feeds/{FEED}")
    r.raise_for_status()
    status: dict[str, Any] = r.json()
    return status


def wait_captured(server: Server, changes: int, last_commit_after: int, timeout: float) -> float:
    """Wait until the feed's log holds ``changes`` changes and its head is past
    ``last_commit_after`` (an LSN inside the last transaction); returns the seconds waited."""
    t0 = time.monotonic()
    while True:
        server.check()
        status = feed_status(server)
        if status["state"] == "failed":
            raise RuntimeError(f"feed failed: {status['last_error']}")
        if (status["log"] and status["log"]["change_count"] >= changes
                and parse_lsn(status["head_lsn"]) >= last_commit_after):
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"the feed did not capture the workload in {timeout:.0f} s: {status}")
        time.sleep(0.1)


# -- profiling (--py-spy) ----------------------------------------------------------------------------


class Profiler:
    """Records the server with py-spy during a phase (collapsed stacks in DIR/<phase>.txt; py-spy
    flags from $PY_SPY_ARGS, default ``--nonblocking``: e.g. ``--gil --native``) and prints where
    the samples went."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.exe = os.environ.get("PY_SPY") or shutil.which("py-spy") or "py-spy"
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def phase(self, server: Server, name: str) -> Iterator[None]:
        if self.directory is None:
            yield
            return
        out = self.directory / f"{name}.txt"
        proc = subprocess.Popen([self.exe, "record", "--pid", str(server.proc.pid), "--format", "raw",
                                 "--rate", "250", "--output", str(out),
                                 *os.environ.get("PY_SPY_ARGS", "--nonblocking").split()],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)  # attached
        try:
            yield
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
            if out.exists():
                print(summarize_profile(out, name), flush=True)
            else:
                print(f"py-spy wrote nothing for {name}: {err.strip()[-500:]}", flush=True)


def summarize_profile(path: Path, name: str, top: int = 14) -> str:
    """Self and inclusive sample shares per function, from py-spy's collapsed stacks
    (``func (path/file.py:line);... count``)."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = []
        for frame in stack.split(";"):
            func, _, where = frame.rpartition(" (")
            frames.append(f"{func} ({where.rsplit(':', 1)[0].rsplit('/', 1)[-1]})" if func else frame)
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + count
    if not total:
        return f"profile {name}: no samples"

    def table(counts: dict[str, int]) -> str:
        return "\n".join(f"  {n / total:6.1%}  {f}" for f, n in
                         sorted(counts.items(), key=lambda kv: -kv[1])[:top])

    return (f"profile {name} ({total} samples, {path}):\n self:\n{table(own)}\n inclusive:\n"
            f"{table(inclusive)}")


