"""bench/serve.py's phases: the HTTP and gRPC reads, the same against servers doing no work,
and commit -> subscriber latency under pgbench; ``Rate``/``Latency`` hold what each measured."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
import _checkout  # noqa: F401  (this checkout's packages first: sys.path, PYTHONPATH)

sys.path.insert(0, str(BENCH))

import _serve_servers as servers
import httpx
import orjson
import psycopg
from _serve_cpu import Cpu, thread_cpu, thread_names
from _serve_servers import Server, _die_with_parent

from pgfeed.localpg import free_port
from pgfeed_client._http_base import decode

TICKS = ("CREATE TABLE ticks (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
         "sent double precision NOT NULL)")
# The row carries the time of its own INSERT (the transaction's commit comes after it).
TICK_SQL = "INSERT INTO ticks (sent) VALUES (extract(epoch FROM clock_timestamp()))"
WARMUP_SECONDS = 1.0  # pgbench's commits before the measured window (not counted)


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



# -- 1. HTTP read ------------------------------------------------------------------------------------


def http_read(http: httpx.Client, params: dict[str, Any], arrow: bool) -> tuple[int, float]:
    """Page from ``earliest`` until ``has_more`` is false, parsing every page; (changes, seconds)."""
    import pyarrow as pa

    cursor, rows = "earliest", 0
    path = f"/v1/feeds/{servers.FEED}/changes"
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

    from pgfeed_proto.v1 import feed_pb2_grpc

    channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", -1)])
    grpc.channel_ready_future(channel).result(timeout=30)
    return channel, feed_pb2_grpc.ChangeFeedStub(channel)


def grpc_read(target: str, cursor: str, until: Callable[[int, int, Any], bool],
              ) -> tuple[int, int, float]:
    """Subscribe from ``cursor`` until ``until(changes, frames, last frame)``; returns (changes,
    frames, seconds)."""
    from pgfeed_proto.v1 import feed_pb2

    channel, stub = _stub(target)
    try:
        t0 = time.perf_counter()
        call = stub.Subscribe(feed_pb2.SubscribeRequest(feed=servers.FEED, cursor=cursor))
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
                            cwd=ROOT, preexec_fn=_die_with_parent,
                            env=dict(os.environ))
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

    from pgfeed_proto.v1 import feed_pb2

    r = server.http.get(f"/v1/feeds/{servers.FEED}/changes", params={"after": "earliest", "limit": limit})
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
            feed_pb2.SubscribeRequest(feed=servers.FEED, cursor="earliest"))
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
        from pgfeed_proto.v1 import feed_pb2

        self.channel, stub = _stub(target)
        self.received: dict[int, float] = {}
        self.sent: dict[int, float] = {}
        self.error: BaseException | None = None
        self.call = stub.Subscribe(feed_pb2.SubscribeRequest(feed=servers.FEED, cursor="latest",
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


