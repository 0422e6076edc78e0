"""Fan-out benchmark: many subscribers on one feed, against a bare server pushing the same bytes.

One run starts a throwaway PostgreSQL cluster and a ``pgfeed serve`` subprocess with a feed over
``public.ticks``. For each N in ``--subscribers`` (1, 10, 50, 100) it runs three phases: N gRPC
subscribers alone, N HTTP long-pollers alone (for the server CPU a delivered row of each
surface), then N + N together (for latency). Every subscriber starts at ``latest`` before
``pgbench --rate`` commits one-row INSERTs at ``--rate`` (500/s) for ``--seconds``; each row
carries ``clock_timestamp()`` from inside its INSERT, so latency = receive time minus a moment
before the commit. Subscribers run in two client processes (one per surface, on uvloop: grpc.aio
raw stubs, and long-polls with ``wait=30`` over one keep-alive HTTP/1.1 connection each, spoken
directly), so that no client shares the server's GIL. Clients keep what they receive as bytes
with its arrival time and decode it after the phase: on a 2-core machine a client that spends
CPU on each message (httpx took ~0.2 ms a request) competes with the server it measures. The
pgfeed server and the bare server are measured with the same clients.

Each subscriber must receive every committed row exactly once, in order (``missing`` and
``duplicated`` are reported). The same phases then run against a bare server (``fanout.py
bare``: grpc.aio and a raw ASGI app in one process) that generates ticks at the same rate and
pushes to every subscriber the same kind of bytes (one-row ``pgfeed.v1.Transaction`` frames,
JSON change events), encoded once a tick: its server CPU a delivered row is the reference.

Run: .venv/bin/python bench/fanout.py [--subscribers 1,10,50,100] [--seconds 8] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import _checkout  # noqa: F401  (this checkout's packages first: sys.path, PYTHONPATH)
import orjson
import psycopg
from _serve_cpu import Cpu, load_text
from _serve_phases import TICKS, WARMUP_SECONDS, pgbench
from _serve_servers import _die_with_parent, pgfeed_serve

from pgfeed.localpg import LocalCluster, free_port
from pgfeed_client._cursor import format_lsn, parse_lsn

FEED = "fan"
CPU_TARGET = 1.5  # pgfeed's server CPU a delivered row / the bare server's, on each surface
P99_TARGET_MS = 50.0  # with 10 + 10 subscribers
ENV = dict(os.environ)


# -- subscribers (``fanout.py client``): one process per surface ------------------------------------


async def _grpc_subscriber(target: str, cursor: str, rows: list[tuple[bytes, float]],
                           ready: list[int], done: asyncio.Event) -> None:
    """Frames are kept as received (bytes, time) and decoded once the phase is over."""
    import grpc

    from pgfeed_proto.v1 import feed_pb2

    async with grpc.aio.insecure_channel(target, options=[("grpc.max_receive_message_length", -1)]) as ch:
        call = ch.unary_stream("/pgfeed.v1.ChangeFeed/Subscribe",
                               request_serializer=feed_pb2.SubscribeRequest.SerializeToString,
                               response_deserializer=None)(
            feed_pb2.SubscribeRequest(feed=FEED, cursor=cursor))
        ready.append(1)
        now = time.time
        append = rows.append
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            async for frame in call:
                append((frame, now()))
        call.cancel()
    done.set()


def _grpc_rows(frames: list[tuple[bytes, float]]) -> list[tuple[int, float, float]]:
    from pgfeed_proto.v1 import feed_pb2

    rows = []
    for frame, t in frames:
        for change in feed_pb2.Transaction.FromString(frame).changes:
            after = change.after
            rows.append((after["id"].int_value, after["sent"].double_value, t))
    return rows


async def _http_subscriber(url: str, cursor: str, rows: list[tuple[bytes, float]],
                           ready: list[int], done: asyncio.Event) -> None:
    """Long-polls on one keep-alive HTTP/1.1 connection, spoken directly: httpx spends ~0.2 ms of
    CPU a request, which on this 2-core machine competes with the server it measures. Pages are
    kept as received (bytes, time) and decoded once the phase is over (only ``next`` now)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    now = time.time
    append = rows.append
    head = f"GET /v1/feeds/{FEED}/changes?after=%s&wait=30&limit=1000 HTTP/1.1\r\nhost: {host}\r\n\r\n"
    ready.append(1)
    with contextlib.suppress(asyncio.CancelledError):
        while True:
            writer.write((head % cursor).encode())
            status = await reader.readuntil(b"\r\n\r\n")
            length = None
            for line in status.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if not status.startswith(b"HTTP/1.1 200 ") or length is None:
                raise RuntimeError(f"unexpected answer: {status!r}")
            body = await reader.readexactly(length)
            append((body, now()))  # the whole answer is in
            cursor = orjson.loads(body)["next"]
    writer.close()
    done.set()


def _http_rows(pages: list[tuple[bytes, float]]) -> list[tuple[int, float, float]]:
    rows = []
    for body, t in pages:
        for change in orjson.loads(body)["changes"]:
            after = change["after"]
            rows.append((after["id"], after["sent"], t))
    return rows


def run_clients(surface: str, target: str, cursor: str, n: int, out: Path) -> None:
    """N subscribers from ``cursor`` (the head before the phase's first commit); prints ``ready``
    once all have started, then reads a line from stdin (the last committed id) and stops once
    every subscriber has it (or after 30 s)."""

    async def main() -> None:
        got: list[list[tuple[bytes, float]]] = [[] for _ in range(n)]
        ready: list[int] = []
        done = [asyncio.Event() for _ in range(n)]
        run, decode = (_grpc_subscriber, _grpc_rows) if surface == "grpc" else (_http_subscriber, _http_rows)
        tasks = [asyncio.create_task(run(target, cursor, got[i], ready, done[i])) for i in range(n)]
        while len(ready) < n:
            await asyncio.sleep(0.01)
        print("ready", flush=True)
        last = int(await asyncio.to_thread(sys.stdin.readline))

        def has_last(received: list[tuple[bytes, float]]) -> bool:
            for i in range(len(received) - 1, -1, -1):  # the newest page with a row in it
                newest = decode(received[i:i + 1])
                if newest:
                    return newest[-1][0] >= last
            return False

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(has_last(r) for r in got):
            await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        out.write_bytes(orjson.dumps([decode(r) for r in got]))

    import uvloop

    uvloop.run(main())


@contextlib.contextmanager
def clients(surface: str, target: str, cursor: str, n: int,
            work: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    out = work / f"{surface}.json"
    proc = subprocess.Popen([sys.executable, __file__, "client", surface, target, cursor, str(n), str(out)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV,
                            preexec_fn=_die_with_parent)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"{surface} clients did not start: {line!r}")
        yield proc, out
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


# -- the bare server (``fanout.py bare``) --------------------------------------------------------------


def run_bare(grpc_port: int, http_port: int) -> None:
    """Ticks on ``POST /tick?rate=&seconds=``; each tick is encoded once (a one-row
    Transaction frame and a JSON change event) and pushed to every subscriber."""
    import grpc
    import uvicorn

    from pgfeed_proto.v1 import feed_pb2

    frames: list[bytes] = []
    events: list[bytes] = []
    changed = asyncio.Event()

    def tick(i: int) -> None:
        nonlocal changed
        sent = time.time()
        lsn = format_lsn(i + 1)
        txn = feed_pb2.Transaction(xid=i, commit_lsn=i + 1, end_lsn=i + 1, cursor=lsn, final=True)
        change = txn.changes.add(lsn=i + 1, seq=0, op=feed_pb2.OP_INSERT, schema="public", table="ticks")
        change.key["id"].int_value = i + 1
        change.after["id"].int_value = i + 1
        change.after["sent"].double_value = sent
        frames.append(txn.SerializeToString())
        events.append(orjson.dumps({"lsn": lsn, "seq": 0, "commit_lsn": lsn, "xid": i,
                                    "commit_ts": "2026-11-24T10:00:00.000000+00:00", "op": "insert",
                                    "schema": "public", "table": "ticks", "key": {"id": i + 1},
                                    "after": {"id": i + 1, "sent": sent}, "unchanged_toast": [],
                                    "origin": None}))
        changed.set()
        changed = asyncio.Event()

    async def ticking(rate: float, seconds: float) -> None:
        # On a schedule, like ``pgbench --rate``: a tick that comes late does not push the later
        # ones back (sleeping an interval after each tick fell ~25% short of the rate under load).
        loop = asyncio.get_running_loop()
        due = loop.time()
        end = due + seconds
        rng = random.Random(0)
        while True:
            due += rng.expovariate(rate)
            if due >= end:
                break
            await asyncio.sleep(max(0.0, due - loop.time()))
            tick(len(frames))

    async def subscribe(request: bytes, context: Any) -> Any:
        pos = len(frames)
        while True:
            while pos < len(frames):
                yield frames[pos]
                pos += 1
            await changed.wait()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
        if scope["method"] == "POST":
            asyncio.get_running_loop().create_task(
                ticking(float(query["rate"]), float(query["seconds"])))
            body = b"{}"
        else:
            after = query.get("after", "latest")
            pos = len(events) if after == "latest" else parse_lsn(after)
            if pos >= len(events) and float(query.get("wait", 0)) > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), float(query["wait"]))
            limit = int(query.get("limit", 1000))
            part = events[pos:pos + limit]
            nxt = format_lsn(pos + len(part))
            body = (b'{"changes":[' + b",".join(part) + b'],"next":"' + nxt.encode() + b'","head":"'
                    + format_lsn(len(events)).encode() + b'","has_more":false}')
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def main() -> None:
        server = grpc.aio.server()
        handler = grpc.unary_stream_rpc_method_handler(subscribe)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("pgfeed.v1.ChangeFeed", {"Subscribe": handler}),))
        server.add_insecure_port(f"127.0.0.1:{grpc_port}")
        await server.start()
        http = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=http_port,
                                             log_level="warning", access_log=False))
        await http.serve()

    import uvloop

    uvloop.run(main())


# -- phases -----------------------------------------------------------------------------------------------


@dataclass
class Phase:
    server: str  # "pgfeed" or "bare"
    grpc: int
    http: int
    group: int = 0  # the N of the phases it was measured with (a capture-only phase's)
    seconds: float = 0.0
    cpu: Cpu | None = None
    delivered: dict[str, int] = field(default_factory=dict)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    missing: dict[str, int] = field(default_factory=dict)
    duplicated: dict[str, int] = field(default_factory=dict)
    commits: int = 0

    def server_us(self) -> float:
        rows = sum(self.delivered.values())
        return self.cpu.server / rows * 1e6 if self.cpu and rows else float("nan")

    def serving_us(self, capture: Phase | None) -> float:
        """Server CPU a delivered row net of capturing the commits: ``capture`` is a phase with no
        subscribers, whose CPU a commit (receiving, assembling, the durable append and its fsync)
        the bare server, which makes up its ticks, has no counterpart for."""
        rows = sum(self.delivered.values())
        if not (self.cpu and rows and capture and capture.cpu and capture.commits):
            return float("nan")
        captured = capture.cpu.server / capture.commits * self.commits
        return (self.cpu.server - captured) / rows * 1e6

    def pct(self, surface: str, p: float) -> float:
        data = sorted(self.latency_ms.get(surface) or [])
        return data[min(len(data) - 1, max(0, round(p / 100 * len(data)) - 1))] if data else float("nan")


def _score(phase: Phase, surface: str, out: Path, ids: list[int], start: float) -> None:
    rows: list[list[list[float]]] = orjson.loads(out.read_bytes())
    expected = set(ids)
    missing = duplicated = delivered = 0
    samples: list[float] = []
    for sub in rows:
        got = [int(r[0]) for r in sub]
        delivered += len(got)
        duplicated += len(got) - len(set(got))
        missing += len(expected - set(got))
        samples.extend((r[2] - r[1]) * 1000 for r in sub if r[1] >= start + WARMUP_SECONDS)
    phase.delivered[surface] = delivered
    phase.latency_ms[surface] = samples
    phase.missing[surface] = missing
    phase.duplicated[surface] = duplicated


def run_phase(phase: Phase, targets: dict[str, str], tick: Any, work: Path, pid: int,
              postmaster: int) -> Phase:
    import httpx

    head = httpx.get(f"{targets['http']}/v1/feeds/{FEED}/changes",
                     params={"after": "latest", "limit": 1}).json()["head"]
    with contextlib.ExitStack() as stack:
        procs = {s: stack.enter_context(clients(s, targets[s], head, n, work))
                 for s, n in (("grpc", phase.grpc), ("http", phase.http)) if n}
        start = time.time()
        with Cpu.measure(pid, postmaster) as cpu:
            ids = tick()
            for proc, _ in procs.values():
                assert proc.stdin is not None
                proc.stdin.write(f"{ids[-1] if ids else 0}\n")
                proc.stdin.flush()
            for proc, _ in procs.values():
                proc.wait(60)
        phase.cpu, phase.seconds, phase.commits = cpu, cpu.seconds, len(ids)
        for surface, (_, out) in procs.items():
            _score(phase, surface, out, ids, start)
    return phase


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("client")
    c.add_argument("surface")
    c.add_argument("target")
    c.add_argument("cursor")
    c.add_argument("n", type=int)
    c.add_argument("out", type=Path)
    b = sub.add_parser("bare")
    b.add_argument("grpc_port", type=int)
    b.add_argument("http_port", type=int)
    ap.add_argument("--subscribers", default="1,10,50,100")
    ap.add_argument("--rate", type=float, default=500)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--pg-version", default="18")
    ap.add_argument("--write", action="store_true", help="update bench/RESULTS.md (fanout section)")
    args = ap.parse_args()
    if args.cmd == "client":
        run_clients(args.surface, args.target, args.cursor, args.n, args.out)
        return
    if args.cmd == "bare":
        run_bare(args.grpc_port, args.http_port)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ns = [int(x) for x in args.subscribers.split(",")]
    load_before = os.getloadavg()
    t0 = time.monotonic()
    phases: list[Phase] = []
    work = Path(tempfile.mkdtemp(prefix="pgfeed-bench-fanout-"))
    with LocalCluster.start(args.pg_version) as cluster:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE fan")
        dsn = cluster.dsn("fan")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(TICKS)
        postmaster = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
        with pgfeed_serve(work / "data") as server:
            r = server.http.post("/v1/feeds", json={"name": FEED, "dsn": dsn, "tables": ["public.ticks"],
                                                    "options": {"snapshot": "never"}})
            if r.status_code != 201:
                raise RuntimeError(f"POST /v1/feeds: {r.status_code} {r.text}")
            while server.http.get(f"/v1/feeds/{FEED}").json()["state"] != "running":
                time.sleep(0.1)

            def pg_tick() -> list[int]:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    first = int(conn.execute("SELECT coalesce(max(id), 0) + 1 FROM ticks").fetchone()[0])  # type: ignore[index]
                pgbench(cluster.bindir, dsn, args.rate, int(args.seconds + WARMUP_SECONDS), 4, work)
                with psycopg.connect(dsn, autocommit=True) as conn:
                    return [int(i) for (i,) in conn.execute(
                        "SELECT id FROM ticks WHERE id >= %s ORDER BY id", (first,))]

            targets = {"grpc": server.grpc_target, "http": str(server.http.base_url).rstrip("/")}
            for n in ns:
                # 0 + 0: the capture alone, whatever the subscribers (see Phase.serving_us)
                for g, h in ((0, 0), (n, 0), (0, n), (n, n)):
                    phases.append(run_phase(Phase("pgfeed", g, h, group=n), targets, pg_tick, work,
                                            server.proc.pid, postmaster))
                    _print(phases[-1])
        with _bare() as (proc, targets):
            import httpx

            def bare_tick() -> list[int]:
                before = httpx.get(f"{targets['http']}/v1/feeds/{FEED}/changes?after=latest").json()
                first = parse_lsn(before["head"]) + 1
                httpx.post(f"{targets['http']}/tick?rate={args.rate}&seconds={args.seconds + WARMUP_SECONDS}")
                time.sleep(args.seconds + WARMUP_SECONDS + 0.2)
                head = parse_lsn(httpx.get(f"{targets['http']}/v1/feeds/{FEED}/changes?after=latest").json()["head"])
                return list(range(first, head + 1))

            for n in ns:
                for g, h in ((n, 0), (0, n), (n, n)):
                    phases.append(run_phase(Phase("bare", g, h), targets, bare_tick, work, proc.pid,
                                            postmaster))
                    _print(phases[-1])
    result = {"phases": phases, "load": (load_before, os.getloadavg()), "wall": time.monotonic() - t0,
              "args": args}
    text = _section(result)
    print(text)
    if args.write:
        from _results import write_section

        write_section("fanout", text)


@contextlib.contextmanager
def _bare() -> Iterator[tuple[subprocess.Popen[bytes], dict[str, str]]]:
    grpc_port, http_port = free_port(), free_port()
    proc = subprocess.Popen([sys.executable, __file__, "bare", str(grpc_port), str(http_port)],
                            env=ENV, preexec_fn=_die_with_parent)
    try:
        import httpx

        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.TransportError):
                httpx.get(f"http://127.0.0.1:{http_port}/v1/feeds/{FEED}/changes?after=latest")
                break
            if time.monotonic() > deadline:
                raise RuntimeError("bare server did not start")
            time.sleep(0.1)
        yield proc, {"grpc": f"127.0.0.1:{grpc_port}", "http": f"http://127.0.0.1:{http_port}"}
    finally:
        proc.kill()
        proc.wait(10)


def _print(p: Phase) -> None:
    assert p.cpu is not None
    if not (p.grpc or p.http):
        print(f"{p.server:6s} capture alone: {p.commits:,} commits, server "
              f"{p.cpu.server / max(1, p.commits) * 1e6:.0f} µs CPU a commit; {p.cpu.text()}", flush=True)
        return
    parts = [(f"{p.server:6s} {p.grpc:3d} gRPC + {p.http:3d} HTTP: {p.commits:,} commits, "
             f"server {p.server_us():.1f} µs CPU a delivered row")]
    for s in ("grpc", "http"):
        if s in p.delivered:
            parts.append(f"{s} p50 {p.pct(s, 50):.1f} / p99 {p.pct(s, 99):.1f} ms, missing "
                         f"{p.missing[s]}, duplicated {p.duplicated[s]}")
    print("; ".join(parts) + f"; {p.cpu.text()}", flush=True)


def _section(result: dict[str, Any]) -> str:
    phases: list[Phase] = result["phases"]
    args = result["args"]
    by = {(p.server, p.grpc, p.http): p for p in phases if p.grpc or p.http}
    capture = {p.group: p for p in phases if not (p.grpc or p.http)}
    ns = sorted({p.grpc or p.http for p in phases if p.grpc or p.http})
    lines = [
        "## Fan-out: many subscribers on one feed (bench/fanout.py)", "",
        (f"{args.rate:g} one-row commits/s (`pgbench --rate`) for {args.seconds:g} s after "
        f"{WARMUP_SECONDS:g} s of warm-up; every subscriber starts at the head before the first commit. Server CPU a "
        "delivered row from the single-surface phases; latency (INSERT -> subscriber) from the "
        "N + N phase. The bare server (`fanout.py bare`) pushes one-row frames and JSON events it "
        "encodes once a tick, from the same two Python stacks (grpc.aio, uvicorn). It makes its "
        "ticks up, so it has nothing like pgfeed's capture of each commit (receive, assemble, the "
        "durable append and its fsync): a phase with no subscriber measures that before each N, "
        "and *net* is pgfeed's server CPU a delivered row less it."), "",
        ("| N | capture µs a commit | gRPC µs/row: all, net (bare) | ratio: all, net | "
        "HTTP µs/row: all, net (bare) | ratio: all, net | gRPC p50 / p99 ms | "
        "HTTP p50 / p99 ms | missing | duplicated | CPU in N+N: server, postgres, clients, other |"),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n in ns:
        g, h, both = by.get(("pgfeed", n, 0)), by.get(("pgfeed", 0, n)), by.get(("pgfeed", n, n))
        bg, bh, cap = by.get(("bare", n, 0)), by.get(("bare", 0, n)), capture.get(n)
        if not (g and h and both and bg and bh and both.cpu and cap and cap.cpu):
            continue
        ng, nh = g.serving_us(cap), h.serving_us(cap)
        cpu = both.cpu
        lines.append(
            f"| {n} | {cap.cpu.server / max(1, cap.commits) * 1e6:.0f} | "
            f"{g.server_us():.1f}, {ng:.1f} ({bg.server_us():.1f}) | "
            f"{g.server_us() / bg.server_us():.2f}x, **{ng / bg.server_us():.2f}x** | "
            f"{h.server_us():.1f}, {nh:.1f} ({bh.server_us():.1f}) | "
            f"{h.server_us() / bh.server_us():.2f}x, **{nh / bh.server_us():.2f}x** | "
            f"{both.pct('grpc', 50):.1f} / {both.pct('grpc', 99):.1f} | "
            f"{both.pct('http', 50):.1f} / {both.pct('http', 99):.1f} | "
            f"{sum(both.missing.values()) + g.missing['grpc'] + h.missing['http']} | "
            f"{sum(both.duplicated.values()) + g.duplicated['grpc'] + h.duplicated['http']} | "
            f"{cpu.share(cpu.server)}, {cpu.share(cpu.postgres)}, {cpu.share(cpu.clients)}, "
            f"{cpu.share(cpu.other)} |")
    ten = by.get(("pgfeed", 10, 10))
    if ten:
        worst = max(ten.pct("grpc", 99), ten.pct("http", 99))
        lines += ["", (f"Targets: server CPU a delivered row within {CPU_TARGET}x the bare server's "
                  f"on each surface; p99 <= {P99_TARGET_MS:g} ms with 10 + 10 subscribers "
                  f"(this run: {worst:.1f} ms).")]
    before, after = result["load"]
    lines += ["", (f"Whole run {result['wall']:.0f} s; load average before {load_text(before)}, after "
              f"{load_text(after)}. Medians of all phases' latencies: "
              f"{statistics.median([p.pct('grpc', 50) for p in phases if p.grpc] or [0]):.1f} ms gRPC.")]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
