"""Serving benchmark: the real ``pgfeed serve`` over one captured workload, read three ways.

One run starts a throwaway PostgreSQL cluster and a ``pgfeed serve`` subprocess with its own data
dir (so no client shares its GIL), creates a feed over ``public.orders`` and ``public.ticks``
(``POST /v1/feeds``), loads bench/capture.py's workload (1,000,000 changes by default: 400k
insert, 400k update, 200k delete, 10,000 rows a transaction) and waits until the feed's log holds
all of it. Then, each read best of ``--runs``, one client at a time, each read (and the latency
phase) against a freshly started server process on the same data dir, so that nothing the HTTP
read-ahead kept from an earlier read is reused:

1. HTTP read: one httpx client pages ``/v1/feeds/bench/changes`` from ``earliest`` to the end:
   JSON at ``limit=10000`` (the page size of the target), each page parsed as pgfeed's client
   library parses it (``clients._http_base.decode``: ``orjson``, the cyclic GC paused meanwhile);
   and Arrow (``format=arrow``, typed: ``tables=public.orders``) at ``limit=100000``, each page
   read with ``pyarrow``.
2. gRPC read: one client ``Subscribe``s from ``earliest`` with the raw ``pgfeed.v1`` stubs (each
   frame parsed into a ``Transaction``) until it has counted every change.
3. Live latency: a gRPC subscriber tails from ``latest`` (``tables=public.ticks``) while
   ``pgbench --rate`` (PostgreSQL's own load generator in C: Poisson arrivals, little CPU)
   commits one-row INSERT transactions at ``--rate`` (2,000/s) over ``--connections``
   connections for ``--seconds``, after 1 s of warm-up; each row carries ``clock_timestamp()``
   taken inside its INSERT, so latency = the subscriber's receive time (``time.time``, the same
   clock) minus a moment before the commit: the commit itself counts. ``--sweep`` measures lower
   rates first. Afterwards a gRPC replay of those one-row transactions (from the log, nothing
   live) gives the Subscribe path's rate in transactions/s.

CPU seconds of the server, of the cluster, of this script's processes and of everything else on
the machine are recorded for every measurement (shared machines are noisy). ``--py-spy DIR``
records the server with py-spy during each phase and prints where the samples went.

Run: .venv/bin/python bench/serve.py [--changes N] [--runs 3] [--pg-version 18] [--write]
``--write`` replaces bench/RESULTS.md between the serve markers; without it, results are printed.
Everything it starts (cluster, server, pgbench) is stopped on exit, on errors and on SIGTERM too.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import math
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "protos"))
sys.path.insert(0, str(BENCH))

import httpx
import orjson
import psycopg
from _results import write_section

from clients._cursor import format_lsn, parse_lsn
from clients._http_base import decode
from service.localpg import LocalCluster, free_port

RESULTS = BENCH / "RESULTS.md"
FEED = "bench"
HTTP_TARGET = 200_000  # changes/s, one JSON client
GRPC_TARGET = 300_000  # changes/s, one gRPC stream
P50_TARGET_MS, P99_TARGET_MS = 5.0, 25.0
TICKS = ("CREATE TABLE ticks (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
         "sent double precision NOT NULL)")
# The row carries the time of its own INSERT (the transaction's commit comes after it).
TICK_SQL = "INSERT INTO ticks (sent) VALUES (extract(epoch FROM clock_timestamp()))"
WARMUP_SECONDS = 1.0  # pgbench's commits before the measured window (not counted)
_TICK = os.sysconf("SC_CLK_TCK")


# -- CPU accounting ----------------------------------------------------------------------------------


def tree_cpu(root: int) -> float:
    """CPU seconds of a process and its children: the process, its live children, and its reaped
    children (``cutime``/``cstime``): a PostgreSQL cluster (backends that exited, such as the
    pgbench's), or a pgfeed server (capture processes)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat.parent.name) == root:
            total += sum(int(f) for f in fields[11:15]) / _TICK
        elif int(fields[1]) == root:
            total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def machine_cpu() -> float:
    """Busy CPU seconds of the whole machine since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / _TICK


def client_cpu() -> float:
    """CPU seconds of this process and of its children waited for (pgbench)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass
class Cpu:
    """CPU seconds used during one measured interval, by whom."""

    server: float = 0.0
    postgres: float = 0.0
    clients: float = 0.0
    machine: float = 0.0
    seconds: float = 0.0

    @classmethod
    @contextlib.contextmanager
    def measure(cls, server_pid: int, postmaster: int) -> Iterator[Cpu]:
        cpu = cls()
        s0, p0, c0 = tree_cpu(server_pid), tree_cpu(postmaster), client_cpu()
        m0, t0 = machine_cpu(), time.monotonic()
        try:
            yield cpu
        finally:
            cpu.server = tree_cpu(server_pid) - s0
            cpu.postgres = tree_cpu(postmaster) - p0
            cpu.clients = client_cpu() - c0
            cpu.machine = machine_cpu() - m0
            cpu.seconds = time.monotonic() - t0

    @property
    def other(self) -> float:
        """CPU the machine spent on processes this benchmark did not start."""
        return max(0.0, self.machine - self.server - self.postgres - self.clients)

    def share(self, value: float) -> str:
        return f"{value / (self.seconds or 1.0):.0%}"

    def text(self) -> str:
        return (f"CPU: server {self.share(self.server)}, postgres {self.share(self.postgres)}, "
                f"clients {self.share(self.clients)}, other {self.share(self.other)} (of a core)")


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of a process, by thread id."""
    out = {}
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / _TICK
    return out


def thread_names(pid: int, exe: str) -> dict[int, str]:
    """Python thread names by thread id, from ``py-spy dump`` (empty without py-spy); threads that
    run no Python (grpc's pollers) are not named."""
    try:
        text = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, text=True,
                              timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    names = {}
    for line in text.splitlines():
        m = re.match(r'Thread (0x[0-9a-fA-F]+|\d+) \(\w+\): "(.*)"', line)
        if m:
            names[int(m.group(1), 0)] = m.group(2)
    return names


# -- results -----------------------------------------------------------------------------------------


@dataclass
class Rate:
    """One read measured ``runs`` times over the same changes."""

    label: str
    changes: int
    unit: str = "changes/s"
    name: str = ""
    seconds: list[float] = field(default_factory=list)
    cpu: list[Cpu] = field(default_factory=list)

    @property
    def best(self) -> float:
        return self.changes / min(self.seconds)

    def best_cpu(self) -> Cpu:
        return self.cpu[self.seconds.index(min(self.seconds))]

    def server_us(self) -> float:
        """Server CPU microseconds per item in the best run."""
        return self.best_cpu().server / self.changes * 1e6


@dataclass
class Latency:
    target_rate: float
    connections: int
    samples_ms: list[float]  # the row's INSERT -> subscriber receive, in insert order
    commit_ms: list[float]  # pgbench's commit round trips
    committed: int  # commits in the measured window
    total_commits: int  # commits during the CPU measurement (warm-up included)
    seconds: float
    missing: int  # committed, never received
    cpu: Cpu
    threads: list[tuple[str, float]] = field(default_factory=list)  # server CPU s by thread

    def thread_text(self) -> str:
        """Server CPU µs a transaction by thread, busiest first."""
        n = max(self.total_commits, 1)
        return ", ".join(f"{name} {seconds / n * 1e6:.0f}" for name, seconds in self.threads)

    @property
    def rate(self) -> float:
        return self.committed / self.seconds if self.seconds else 0.0

    def pct(self, p: float, values: list[float] | None = None) -> float:
        data = sorted(self.samples_ms if values is None else values)
        if not data:
            return float("nan")
        return data[min(len(data) - 1, max(0, round(p / 100 * len(data)) - 1))]

    @property
    def worst(self) -> float:
        return max(self.samples_ms, default=float("nan"))

    def drift(self) -> tuple[float, float]:
        """Median latency of the first and of the last tenth of the window (send order): a
        backlog that keeps growing shows as a much larger second figure."""
        tenth = max(1, len(self.samples_ms) // 10)
        return (statistics.median(self.samples_ms[:tenth] or [float("nan")]),
                statistics.median(self.samples_ms[-tenth:] or [float("nan")]))


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
    """``python -m service serve`` over ``data_dir`` on free loopback ports."""
    with run_server(data_dir.parent / "serve.log", "--data-dir", str(data_dir)) as server:
        yield server


@contextlib.contextmanager
def run_server(log: Path, *args: str) -> Iterator[Server]:
    """``python -m service serve`` with ``args`` on free loopback ports, its output appended to
    ``log``; SIGTERM (then SIGKILL) on exit."""
    http_port, grpc_port = free_port(), free_port()
    with open(log, "ab") as out:
        # preexec_fn is safe here: the script has started no thread yet.
        proc = subprocess.Popen(
            [sys.executable, "-m", "service", "serve", *args,
             "--http-port", str(http_port), "--grpc-port", str(grpc_port)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,  # noqa: PLW1509
            env={**os.environ, "PGFEED_LOG_LEVEL": "WARNING",
                 "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "protos")])})
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


# -- 1. HTTP read ------------------------------------------------------------------------------------


def http_read(http: httpx.Client, params: dict[str, Any], arrow: bool) -> tuple[int, float]:
    """Page from ``earliest`` until ``has_more`` is false, parsing every page; (changes, seconds)."""
    import pyarrow as pa

    cursor, rows = "earliest", 0
    path = f"/v1/feeds/{FEED}/changes"
    t0 = time.perf_counter()
    while True:
        r = http.get(path, params={**params, "after": cursor})
        r.raise_for_status()
        if arrow:
            rows += pa.ipc.open_stream(r.content).read_all().num_rows
            cursor, more = r.headers["PgFeed-Next"], r.headers["PgFeed-Has-More"] == "true"
        else:
            body = decode(r.content)
            rows += len(body["changes"])
            cursor, more = body["next"], body["has_more"]
        if not more:
            return rows, time.perf_counter() - t0


# -- 2. gRPC read ------------------------------------------------------------------------------------


def _stub(target: str) -> tuple[Any, Any]:
    import grpc
    from pgfeed.v1 import feed_pb2_grpc

    channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", -1)])
    grpc.channel_ready_future(channel).result(timeout=30)
    return channel, feed_pb2_grpc.ChangeFeedStub(channel)


def grpc_read(target: str, cursor: str, until: Callable[[int, int, Any], bool],
              ) -> tuple[int, int, float]:
    """Subscribe from ``cursor`` until ``until(changes, frames, last frame)``; returns (changes,
    frames, seconds)."""
    from pgfeed.v1 import feed_pb2

    channel, stub = _stub(target)
    try:
        t0 = time.perf_counter()
        call = stub.Subscribe(feed_pb2.SubscribeRequest(feed=FEED, cursor=cursor))
        rows = frames = 0
        for txn in call:
            rows += len(txn.changes)
            frames += 1
            if until(rows, frames, txn):
                break
        seconds = time.perf_counter() - t0
        call.cancel()
        return rows, frames, seconds
    finally:
        channel.close()


# -- reference: the same clients against servers doing no work (bench/ceiling.py) -------------------


@contextlib.contextmanager
def reference_server(kind: str, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(BENCH / "ceiling.py"), kind, str(port), *args],
                            cwd=ROOT, preexec_fn=_die_with_parent,  # noqa: PLW1509
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                                             str(ROOT / "protos")])})
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"bench/ceiling.py {kind} did not start")
            time.sleep(0.05)
        yield proc, port
    finally:
        proc.terminate()
        proc.wait(10)


def sample_payloads(server: Server, limit: int, work: Path) -> tuple[Path, int, Path, int]:
    """pgfeed's first JSON page (``limit`` changes) and the gRPC frames of about as many changes,
    saved for bench/ceiling.py; returns (page file, its changes, frames file, their changes)."""
    import grpc
    from ceiling import write_frames
    from pgfeed.v1 import feed_pb2

    r = server.http.get(f"/v1/feeds/{FEED}/changes", params={"after": "earliest", "limit": limit})
    r.raise_for_status()
    page = work / "page.json"
    page.write_bytes(r.content)
    page_changes = len(orjson.loads(r.content)["changes"])
    frames: list[bytes] = []
    frame_changes = 0
    with grpc.insecure_channel(server.grpc_target) as channel:
        call = channel.unary_stream("/pgfeed.v1.ChangeFeed/Subscribe",
                                    request_serializer=feed_pb2.SubscribeRequest.SerializeToString,
                                    response_deserializer=None)(
            feed_pb2.SubscribeRequest(feed=FEED, cursor="earliest"))
        for raw in call:
            frames.append(raw)
            frame_changes += len(feed_pb2.Transaction.FromString(raw).changes)
            if frame_changes >= limit:
                call.cancel()
                break
    path = work / "frames.bin"
    write_frames(path, frames)
    return page, page_changes, path, frame_changes


def reference_reads(rates: dict[str, Rate], args: argparse.Namespace, server: Server,
                    work: Path, postmaster: int) -> None:
    """The JSON and gRPC reads again, against bench/ceiling.py serving pgfeed's own bytes."""
    page, page_changes, frames, frame_changes = sample_payloads(server, args.json_limit, work)
    changes = rates["http_json"].changes
    pages = -(-changes // page_changes)
    repeat = -(-changes // frame_changes)
    json_ref = rates["ref_json"] = Rate(
        f"reference: the same JSON page ({page_changes:,} changes) from a bare uvicorn app, "
        "each parsed the same way", pages * page_changes, name="reference JSON")
    grpc_ref = rates["ref_grpc"] = Rate(
        "reference: the same gRPC frames from a bare grpc.aio server, raw stubs",
        repeat * frame_changes, name="reference gRPC")
    for _ in range(args.runs):
        with reference_server("http", str(page)) as (proc, port), \
                httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http, \
                Cpu.measure(proc.pid, postmaster) as cpu:
            t = time.perf_counter()
            rows = sum(len(decode(http.get("/").content)["changes"]) for _ in range(pages))
            json_ref.seconds.append(time.perf_counter() - t)
            json_ref.cpu.append(cpu)
        assert rows == json_ref.changes
        with reference_server("grpc", str(frames), str(repeat)) as (proc, port), \
                Cpu.measure(proc.pid, postmaster) as cpu:
            rows, _, seconds = grpc_read(f"127.0.0.1:{port}", "earliest",
                                         lambda n, _f, _t: n >= grpc_ref.changes)
            grpc_ref.seconds.append(seconds)
            grpc_ref.cpu.append(cpu)
        assert rows == grpc_ref.changes
        print(f"reference JSON {json_ref.changes / json_ref.seconds[-1]:10,.0f} changes/s, "
              f"gRPC {grpc_ref.changes / grpc_ref.seconds[-1]:10,.0f} changes/s", flush=True)


# -- 3. live latency ---------------------------------------------------------------------------------


def settle(dsn: str) -> str:
    """Vacuum the loaded table, checkpoint PostgreSQL and sync(2), so that what the bulk load left
    to do (autovacuum, a checkpoint, ~300 MB of dirty pages for the kernel to write back) is done
    before the latency phases instead of landing on the same disk in the middle of one."""
    dirty = _meminfo_mb("Dirty")
    t = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) orders")
        conn.execute("CHECKPOINT")
    os.sync()
    return f"{dirty:,.0f} MB dirty before, {_meminfo_mb('Dirty'):,.0f} MB after, {time.monotonic() - t:.1f} s"


def _meminfo_mb(field: str) -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Subscriber:
    """Tails the feed from ``latest`` (ticks only) on a thread; records when each row arrived
    (``time.time``: the clock of the rows' ``clock_timestamp()``) and the insert time it carries."""

    def __init__(self, target: str) -> None:
        from pgfeed.v1 import feed_pb2

        self.channel, stub = _stub(target)
        self.received: dict[int, float] = {}
        self.sent: dict[int, float] = {}
        self.error: BaseException | None = None
        self.call = stub.Subscribe(feed_pb2.SubscribeRequest(feed=FEED, cursor="latest",
                                                             tables=["public.ticks"]))
        self.thread = threading.Thread(target=self._run, name="subscriber", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import grpc

        now = time.time
        received, sent = self.received, self.sent
        try:
            for txn in self.call:
                t = now()
                for change in txn.changes:
                    row = change.after
                    i = row["id"].int_value
                    received[i] = t
                    sent[i] = row["sent"].double_value
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                self.error = exc

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(10)
        self.channel.close()


def pgbench(bindir: Path, dsn: str, rate: float, seconds: int, connections: int,
            work: Path) -> list[float]:
    """``pgbench -R rate`` committing TICK_SQL for ``seconds`` on ``connections`` connections
    (Poisson arrivals, prepared statements, one thread); returns each commit's round trip in ms
    (from its per-transaction log: elapsed time minus schedule lag)."""
    script, prefix = work / "tick.sql", work / "pgbench"
    script.write_text(TICK_SQL + ";\n")
    for old in work.glob("pgbench.*"):
        old.unlink()
    done = subprocess.run(
        [str(bindir / "pgbench"), "--no-vacuum", "--rate", f"{rate:g}", "--client", str(connections),
         "--jobs", "1", "--time", str(seconds), "--protocol", "prepared", "--file", str(script),
         "--log", "--log-prefix", str(prefix), dsn],
        capture_output=True, text=True, timeout=seconds + 120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pgbench failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    # client_id transaction_no time_us script_no epoch epoch_us schedule_lag_us
    return [(int(f[2]) - int(f[6])) / 1000 for log in work.glob("pgbench.*")
            for f in (line.split() for line in log.read_text().splitlines()) if len(f) >= 7]


def latency(server: Server, bindir: Path, dsn: str, rate: float, seconds: float,
            connections: int, work: Path) -> Latency:
    with psycopg.connect(dsn, autocommit=True) as conn:  # ids go on from earlier phases
        first_id = int(conn.execute("SELECT coalesce(max(id), 0) + 1 FROM ticks")
                       .fetchone()[0])  # type: ignore[index]
    subscriber = Subscriber(server.grpc_target)
    try:
        time.sleep(0.5)  # the subscription has resolved ``latest`` before the first commit
        before = thread_cpu(server.proc.pid)
        start = time.time()
        with server.cpu() as cpu:
            commit_ms = pgbench(bindir, dsn, rate, math.ceil(seconds + WARMUP_SECONDS),
                                connections, work)
        threads = _by_thread(server.proc.pid, before)
        with psycopg.connect(dsn, autocommit=True) as conn:
            every = conn.execute("SELECT id, sent FROM ticks WHERE id >= %s ORDER BY sent",
                                 (first_id,)).fetchall()
        rows = [(i, sent) for i, sent in every if sent >= start + WARMUP_SECONDS]
        deadline = time.monotonic() + 30
        while any(i not in subscriber.received for i, _ in rows[-50:]):
            if subscriber.error is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        time.sleep(0.2)
    finally:
        subscriber.close()
    if subscriber.error is not None:
        raise RuntimeError(f"subscriber failed: {subscriber.error}")
    received = subscriber.received
    got = [(i, sent) for i, sent in rows if i in received]
    return Latency(target_rate=rate, connections=connections,
                   samples_ms=[(received[i] - sent) * 1000 for i, sent in got],
                   commit_ms=commit_ms, committed=len(rows), total_commits=len(every),
                   seconds=rows[-1][1] - rows[0][1] if rows else 0.0,
                   missing=len(rows) - len(got), cpu=cpu, threads=threads)


def _by_thread(pid: int, before: dict[int, float]) -> list[tuple[str, float]]:
    """Server CPU seconds since ``before`` per thread (named by py-spy where it can), busiest
    first; threads that ran no Python are summed as grpc's (its pollers and event engine)."""
    exe = os.environ.get("PY_SPY") or shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    names = thread_names(pid, exe)
    totals: dict[str, float] = {}
    for tid, seconds in thread_cpu(pid).items():
        name = names.get(tid, "grpc/native threads" if names else f"thread {tid}")
        if name == "MainThread":
            name = "event loop"
        totals[name] = totals.get(name, 0.0) + seconds - before.get(tid, 0.0)
    return sorted(((k, v) for k, v in totals.items() if v > 0), key=lambda kv: -kv[1])


# -- main --------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--changes", type=int, default=1_000_000, help="size of the workload")
    ap.add_argument("--runs", type=int, default=3, help="runs of each read (the best is reported)")
    ap.add_argument("--pg-version", default="18", help="PostgreSQL major (18 or 15)")
    ap.add_argument("--json-limit", type=int, default=10_000, help="changes a JSON page")
    ap.add_argument("--arrow-limit", type=int, default=100_000, help="changes an Arrow page")
    ap.add_argument("--rate", type=float, default=2000, help="transactions/s pgbench commits in the latency phase")
    ap.add_argument("--seconds", type=float, default=10, help="measured seconds at --rate")
    ap.add_argument("--sweep", type=lambda t: [float(x) for x in t.split(",") if x],
                    default=[500.0, 1000.0], metavar="RATES",
                    help="measure latency at these rates first (default 500,1000; '' for none)")
    ap.add_argument("--sweep-seconds", type=float, default=5, help="measured seconds per sweep rate")
    ap.add_argument("--connections", type=int, default=4, help="pgbench connections")
    ap.add_argument("--py-spy", type=Path, metavar="DIR",
                    help="record the server with py-spy ($PY_SPY or on PATH) during each phase's "
                         "first run into DIR and print where the samples went")
    ap.add_argument("--write", action="store_true", help="update bench/RESULTS.md (serve section)")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    # SIGTERM unwinds like Ctrl-C, so the server, pgbench and the cluster are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    t0 = time.monotonic()
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="pgfeed-bench-serve-"))
    try:
        with LocalCluster.start(args.pg_version) as cluster:
            result = _bench(cluster, args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["wall"] = time.monotonic() - t0
    result["load"] = (load_before, os.getloadavg())
    print(f"whole run {result['wall']:.0f} s; load average (1/5/15 min) before "
          f"{_load(load_before)}, after {_load(os.getloadavg())}")
    if args.write:
        write_section("serve", _section(args, result))
        print(f"wrote {RESULTS.relative_to(ROOT)}")


def _load(values: tuple[float, float, float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def _bench(cluster: LocalCluster, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from capture import SCHEMA, run_workload  # bench/capture.py: the same 1M-change workload

    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench")
    dsn = cluster.dsn("bench")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA.split("CREATE PUBLICATION")[0])  # pgfeed makes its own publication
        conn.execute(TICKS)
        server_text = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    profiler = Profiler(args.py_spy)
    postmaster = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
    service = Service(work / "data", postmaster)
    try:
        server = service.server
        create_feed(server, dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            t0 = time.perf_counter()
            changes, before_last, end = run_workload(conn, args.changes / 1_000_000)
            load_seconds = time.perf_counter() - t0
        per_txn = max(1, int(10_000 * min(args.changes / 1_000_000, 1.0)))  # as run_workload
        waited = wait_captured(server, changes, before_last, timeout=600)
        print(f"PostgreSQL {server_text}: workload of {changes:,} changes in {load_seconds:.1f} s, "
              f"all in the feed's log {waited:.1f} s later (WAL end {format_lsn(end)})", flush=True)

        rates = {
            "http_json": Rate(f"HTTP JSON `/changes`, `limit={args.json_limit}`, each page "
                              "parsed (orjson, GC paused)", changes),
            "http_arrow": Rate(f"HTTP Arrow `/changes?format=arrow` (typed, "
                               f"`tables=public.orders`), `limit={args.arrow_limit}`", changes),
            "grpc": Rate("gRPC `Subscribe` from `earliest`, raw stubs (each frame parsed)", changes),
        }
        readers: dict[str, Callable[[Server], int]] = {
            "http_json": lambda srv: http_read(srv.http, {"limit": args.json_limit}, False)[0],
            "http_arrow": lambda srv: http_read(srv.http, {"limit": args.arrow_limit, "format": "arrow",
                                                           "tables": "public.orders"}, True)[0],
            "grpc": lambda srv: grpc_read(srv.grpc_target, "earliest",
                                          lambda n, _f, _t: n >= changes)[0],
        }
        for run in range(args.runs):
            for name, rate in rates.items():
                rate.name = name.replace("_", " ").replace("http", "HTTP").replace("grpc", "gRPC read")
                if rate.seconds or name != "http_json":
                    server = service.restart()  # a fresh server process for every read
                with (profiler.phase(server, name) if run == 0 else contextlib.nullcontext(),
                      server.cpu() as cpu):
                    t = time.perf_counter()
                    rows = readers[name](server)
                    seconds = time.perf_counter() - t
                server.check()
                if rows != changes:
                    raise RuntimeError(f"{rate.label}: read {rows:,} changes, expected {changes:,}")
                rate.seconds.append(seconds)
                rate.cpu.append(cpu)
                print(f"run {run + 1} {name:10s} {seconds:6.2f} s {changes / seconds:10,.0f} "
                      f"changes/s  {cpu.text()}", flush=True)

        reference_reads(rates, args, server, work, postmaster)
        settled = settle(dsn)
        print(f"settled the source before the latency phases: {settled}", flush=True)
        server = service.restart()
        ticks_from = feed_status(server)["head_lsn"]
        latencies = []
        for i, tx_rate in enumerate([*args.sweep, args.rate]):
            last = i == len(args.sweep)
            with profiler.phase(server, "latency") if last else contextlib.nullcontext():
                latencies.append(latency(server, cluster.bindir, dsn, tx_rate, args.seconds if last else
                                         args.sweep_seconds, args.connections, work))
            server.check()
            _print_latency(latencies[-1])

        # The Subscribe path's rate for one-row transactions, replayed from the log.
        ticks_to = parse_lsn(feed_status(server)["head_lsn"])
        with psycopg.connect(dsn, autocommit=True) as conn:
            ticks = int(conn.execute("SELECT count(*) FROM ticks").fetchone()[0])  # type: ignore[index]
        replay = Rate("gRPC `Subscribe` replay of the latency phases' one-row transactions "
                      "(from the log)", ticks, "transactions/s", "gRPC replay")
        for _ in range(args.runs):
            with server.cpu() as cpu:
                rows, frames, seconds = grpc_read(
                    server.grpc_target, ticks_from,
                    lambda _n, _f, txn: txn.commit_lsn >= ticks_to and txn.final)
            if rows != ticks or frames != ticks:
                raise RuntimeError(f"replay: {rows:,} changes in {frames:,} frames, expected {ticks:,}")
            replay.seconds.append(seconds)
            replay.cpu.append(cpu)
        print(f"replay of {ticks:,} one-row transactions: best {replay.best:,.0f} transactions/s "
              f"({replay.best_cpu().text()})", flush=True)
        server.check()
    finally:
        service.close()
    for rate in rates.values():
        print(f"{rate.label}: best {rate.best:,.0f} changes/s, {rate.server_us():.1f} µs of server "
              f"CPU a change")
    return {"server": server_text, "changes": changes, "per_txn": per_txn,
            "load_seconds": load_seconds,
            "capture_wait": waited, "rates": rates, "latencies": latencies, "replay": replay,
            "settled": settled}


def _print_latency(lat: Latency) -> None:
    first, last = lat.drift()
    print(f"latency at {lat.target_rate:,.0f} tx/s: {lat.committed:,} commits at {lat.rate:,.0f} tx/s "
          f"on {lat.connections} connections: p50 {lat.pct(50):.2f} ms, p90 {lat.pct(90):.2f} ms, "
          f"p99 {lat.pct(99):.2f} ms, max {lat.worst:.2f} ms; median first/last tenth {first:.1f}/"
          f"{last:.1f} ms; missing {lat.missing}; commit round trip p50 "
          f"{lat.pct(50, lat.commit_ms):.2f} ms; {lat.cpu.text()}; server CPU µs a transaction "
          f"by thread: {lat.thread_text()}", flush=True)


def _section(args: argparse.Namespace, r: dict[str, Any]) -> str:
    rates: dict[str, Rate] = r["rates"]
    latencies: list[Latency] = r["latencies"]
    replay: Rate = r["replay"]
    lat = latencies[-1]
    before, after = r["load"]
    json_rate, arrow_rate, grpc_rate = rates["http_json"], rates["http_arrow"], rates["grpc"]
    json_ref, grpc_ref = rates["ref_json"], rates["ref_grpc"]

    def runs(rate: Rate) -> str:
        return ", ".join(f"{s:.2f}" for s in rate.seconds)

    def cpu_cells(cpu: Cpu) -> str:
        return (f"{cpu.share(cpu.server)} | {cpu.share(cpu.clients)} | {cpu.share(cpu.postgres)} "
                f"| {cpu.share(cpu.other)}")

    def verdict(ok: bool) -> str:
        return "meets" if ok else "**misses**"

    read_rows = "\n".join(
        f"| {rate.label} | **{rate.best:,.0f}** {rate.unit} | {target} | {runs(rate)} | "
        f"{cpu_cells(rate.best_cpu())} |"
        for rate, target in ((json_rate, f">= {HTTP_TARGET:,}"), (json_ref, "(ceiling)"),
                             (arrow_rate, ""), (grpc_rate, f">= {GRPC_TARGET:,}"),
                             (grpc_ref, "(ceiling)"), (replay, "")))
    lat_rows = "\n".join(
        f"| {x.target_rate:,.0f}/s{' (target rate)' if x is lat else ''} | {x.rate:,.0f} | "
        f"{'**' if x is lat else ''}{x.pct(50):.1f}{'**' if x is lat else ''} | {x.pct(90):.1f} | "
        f"{'**' if x is lat else ''}{x.pct(99):.1f}{'**' if x is lat else ''} | {x.worst:.1f} | "
        f"{x.drift()[0]:.1f} / {x.drift()[1]:.1f} | {x.pct(50, x.commit_ms):.2f} | "
        f"{cpu_cells(x.cpu)} |"
        for x in latencies)
    missing = sum(x.missing for x in latencies)
    p50, p99 = lat.pct(50), lat.pct(99)
    return f"""## Serving: HTTP and gRPC read rates, commit -> subscriber latency (`bench/serve.py`)

Command: `.venv/bin/python bench/serve.py {' '.join(sys.argv[1:])}` ({r['wall']:.0f} s in all). Measured
{time.strftime('%Y-%m-%d')} on {platform.python_implementation()} {platform.python_version()},
psycopg {psycopg.__version__}, PostgreSQL {r['server']} (throwaway local cluster, `fsync=off`,
unix socket), {platform.machine()}, {os.cpu_count()} shared cores; load average (1/5/15 min)
{_load(before)} before the run, {_load(after)} after. One `pgfeed serve` subprocess (SQLite change
log, `synchronous=FULL`) captured bench/capture.py's workload, {r['changes']:,} changes (40%
insert, 40% update, 20% delete, {r['per_txn']:,} rows a transaction) into `orders`
({r['load_seconds']:.1f} s to load; all in the log {r['capture_wait']:.1f} s after the last
commit). Then one client at a time, in this script's process, read all of it from `earliest`,
best of {args.runs}, each read against a freshly started server process on the same data dir (so
nothing read ahead for an earlier read is reused, as in bench/http_read.py); pgfeed decodes on
read, so every read decodes and encodes every change again. CPU columns: shares of one core during the best run, for the server process, the client
(this script and pgbench), the PostgreSQL cluster, and everything else on the machine (other
people's jobs: the cores are shared).

| read | rate (best) | target | runs (s) | server CPU | client CPU | PostgreSQL CPU | other CPU |
| --- | --- | --- | --- | --- | --- | --- | --- |
{read_rows}

Server CPU a change in the best run: {json_rate.server_us():.1f} µs (JSON),
{arrow_rate.server_us():.1f} µs (Arrow), {grpc_rate.server_us():.1f} µs (gRPC).

Commit -> gRPC subscriber latency: a subscriber (raw stubs, `tables=public.ticks`) tails from
`latest` while `pgbench --rate` commits one-row INSERT transactions on {lat.connections}
connections, Poisson arrivals ({args.sweep_seconds:.0f} s at each lower rate,
{args.seconds:.0f} s at {args.rate:,.0f}/s, each after {WARMUP_SECONDS:.0f} s of warm-up not
counted); latency = receive time in the subscriber minus the row's `clock_timestamp()`, taken
inside its INSERT (so the commit itself counts; one clock, CLOCK_REALTIME, for both), every
commit of the window a sample ({'none' if not missing else missing} missing). pgbench is
PostgreSQL's C load generator: the psycopg writer this script used before (four threads on a
fixed schedule) took ~20% of a core more at 2,000/s (clients 57-63% against 35-39%), which the
server then did not have. Before the first latency phase the script settles the source
(`VACUUM orders`, `CHECKPOINT`, sync(2): {r['settled']}): the bulk load otherwise left ~300 MB
for PostgreSQL and the kernel to write out later, and that write-back landed in a latency
window (p99 61 and 136 ms at 500/s in two runs, 3.5 ms once settled). Targets at 2,000 transactions/s: p50 <=
{P50_TARGET_MS:.0f} ms, p99 <= {P99_TARGET_MS:.0f} ms; published: Electric 6 ms, Sequin 55 ms avg /
253 ms p99.

| offered rate | achieved tx/s | p50 ms | p90 ms | p99 ms | max ms | median, first / last tenth (ms) | commit round trip p50 (ms) | server CPU | client CPU | PostgreSQL CPU | other CPU |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
{lat_rows}

HTTP JSON {verdict(json_rate.best >= HTTP_TARGET)} its target at {json_rate.best / HTTP_TARGET:.2f}x,
gRPC {verdict(grpc_rate.best >= GRPC_TARGET)} its target at {grpc_rate.best / GRPC_TARGET:.2f}x; at
{args.rate:,.0f} transactions/s ({lat.rate:,.0f} achieved) the latency p50 {verdict(p50 <= P50_TARGET_MS)}
its target ({p50:.1f} ms) and p99 {verdict(p99 <= P99_TARGET_MS)} its target ({p99:.1f} ms).
{_disturbed(rates, latencies, replay)}
**What it means: reads.** The server process ran at
{_cores(json_rate)}, {_cores(arrow_rate)} and {_cores(grpc_rate)} of a core in the best JSON, Arrow
and gRPC runs: {json_rate.server_us():.1f}, {arrow_rate.server_us():.1f} and {grpc_rate.server_us():.1f} µs of
server CPU a change. The reference rows are the same clients reading pgfeed's own bytes (its first
JSON page, its first frames) from servers that do no work (bench/ceiling.py): they are what this
machine, these Python HTTP and gRPC stacks and these clients allow.

- JSON: the reference reaches {json_ref.best:,.0f} changes/s (runs: {_rates(json_ref)}) with the
  client at {_client_share(json_ref)} of a core ({json_ref.best_cpu().clients / json_ref.changes * 1e6:.1f} µs
  a change, nearly all of it parsing): {_json_ceiling(json_ref)}. pgfeed reaches
  {json_rate.best / json_ref.best:.2f}x of that reference; the client needs
  {json_rate.best_cpu().clients / json_rate.changes * 1e6:.1f} µs a change against pgfeed, and
  the server {json_rate.server_us():.1f} µs ({_cores(json_rate)} of a core). The client parses as pgfeed's client library does, with CPython's cyclic GC paused: a page is
  ~150,000 new containers, and with the collector running, a full collection every two or three
  pages rescanned the page being built; the same client then read the reference at ~200k/s
  instead of ~300k/s.
- gRPC: the reference reaches {grpc_ref.best:,.0f} changes/s, so the gap to {GRPC_TARGET:,}/s is
  pgfeed's own work a change ({grpc_rate.server_us():.1f} µs; {1e6 / GRPC_TARGET:.1f} µs would do).

Decode happens on read. Row changes go straight from their pgoutput bytes to JSON or protobuf
(`encoding/transcode.py`: per relation version, the column texts are converted inline and no
Python value is built), compiled in `encoding/_transcode.c` (~0.5 µs a change in process, the
generated Python ~5-7 µs). What remains on the read path is the decoder's frame scan (~1.5 µs a
change, Python), SQLite and the transports; run to run this machine varies by up to a third
(compare the reference rows of earlier runs). Arrow ({arrow_rate.best:,.0f}/s) still loads
values through psycopg (typed columns need them).

**What it means: latency.** p50 {_p50s(latencies)}; {_trend(lat)}; pgbench's own commit
round trip is {lat.pct(50, lat.commit_ms):.2f} ms. At {args.rate:,.0f}/s the server used
{lat.cpu.share(lat.cpu.server)} of a core, {lat.cpu.server / max(lat.total_commits, 1) * 1e6:.0f} µs
of server CPU a transaction, while PostgreSQL, pgbench and the subscriber took
{lat.cpu.share(lat.cpu.postgres + lat.cpu.clients)} of a core. Server CPU a transaction by thread
(from /proc): {lat.thread_text()} µs.

- The capture thread receives and assembles each transaction and, while the writer thread is
  idle, appends it itself (`replication/writer.py`, `inline_bytes`); commits that arrive during
  an append share the next one. One fsync'd one-row append: ~0.3 ms of CPU (two thirds in the
  kernel), ~0.8 ms of wall time at the p50 under this load, p99 ~5 ms, the worst ~90 ms (this
  virtual disk). SQLite's checkpoints run on a thread of their own (`changelog/sqlite.py`):
  inside an append they put p99 at 93-126 ms. An fsync'd one-row append writes ~53 KiB: three
  16 KiB pages (state, `txn`, `chunk`) and their WAL frame headers (69 KiB with the index on
  `cum_changes` that logs had before); the machine wrote 30-70 MB/s in these phases
  (/proc/diskstats, PostgreSQL included).
- A per-hop trace at 2,000/s (instrumented build, not kept) found capture keeping up (the
  median transaction was durable ~2 ms after its INSERT) and the queue, when there was one,
  between the append and the gRPC send. The event loop (uvloop) reads new transactions from
  the log's in-memory tail (no SQLite read) and sends each as one gRPC message, awaiting each
  send before the next: ~0.25 ms of wall time a message under this load (~0.1 ms idle),
  55-70% of the loop's time at 2,000/s. A slow fsync leaves a burst that drains at that pace,
  which is most of the p99.
- The Subscribe path alone, replaying the same one-row transactions from the log, reaches
  {replay.best:,.0f} transactions/s at {replay.server_us():.0f} µs of server CPU each.
- Before pgbench, with the psycopg writer taking ~20% of a core more, the same code gave p50 ~3
  to ~80 ms at 2,000/s depending on the run: the figure depends on how busy the two cores are.
  {_lower_rates(latencies[:-1]).capitalize()}.

What is left at 2,000/s is the fsync before a transaction may be served (the contract serves
durable transactions only) and one gRPC message a transaction.
"""


def _cores(rate: Rate) -> str:
    cpu = rate.best_cpu()
    return cpu.share(cpu.server)


def _client_share(rate: Rate) -> str:
    cpu = rate.best_cpu()
    return cpu.share(cpu.clients)


def _lower_rates(latencies: list[Latency]) -> str:
    """How the sweep's lower rates fared against the targets."""
    if not latencies:
        return "no lower rate was measured"
    return "; ".join(
        f"at {x.target_rate:,.0f}/s the targets were "
        f"{'met' if x.pct(50) <= P50_TARGET_MS and x.pct(99) <= P99_TARGET_MS else 'missed'} "
        f"(p50 {x.pct(50):.1f} ms, p99 {x.pct(99):.1f} ms)" for x in latencies)


def _rates(rate: Rate) -> str:
    return ", ".join(f"{rate.changes / s:,.0f}" for s in rate.seconds)


def _json_ceiling(ref: Rate) -> str:
    if ref.best < HTTP_TARGET:
        return (f"a client that parses each page cannot read {HTTP_TARGET:,}/s here, whatever the "
                "server does")
    return (f"with the server doing nothing, this client reads {ref.best / HTTP_TARGET:.1f}x "
            f"the {HTTP_TARGET:,}/s target here")


def _p50s(latencies: list[Latency]) -> str:
    return ", ".join(f"{x.pct(50):.1f} ms at {x.target_rate:,.0f}/s" for x in latencies)


def _trend(lat: Latency) -> str:
    first, last = lat.drift()
    if last < 1.5 * first or last - first < P50_TARGET_MS:  # a few ms either way is noise
        return (f"at {lat.target_rate:,.0f}/s the median is steady over the window ({first:.0f} ms "
                f"in its first tenth, {last:.0f} ms in its last: the server keeps up, with a queue)")
    return (f"at {lat.target_rate:,.0f}/s the median grows over the window ({first:.0f} ms in its "
            f"first tenth, {last:.0f} ms in its last: a backlog builds, the server falls behind)")


def _disturbed(rates: dict[str, Rate], latencies: list[Latency], replay: Rate) -> str:
    """A sentence when other jobs took a noticeable share of the machine during a measurement."""
    shares = [(r.best_cpu().other / (r.best_cpu().seconds or 1.0), r.name)
              for r in [*rates.values(), replay]]
    shares += [(x.cpu.other / (x.cpu.seconds or 1.0), f"latency at {x.target_rate:,.0f}/s")
               for x in latencies]
    worst, label = max(shares)
    if worst < 0.15:
        return ("Other jobs on the machine took under 15% of a core during every measurement "
                "(the CPU columns), so these figures are not disturbed much.\n")
    return (f"Other jobs on the shared machine took up to {worst:.0%} of a core during the "
            f"measurements ({label}; see the CPU columns): those figures are disturbed, "
            f"the others less so.\n")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
