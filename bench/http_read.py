"""HTTP read rate: one client paging a feed from ``earliest`` over loopback, JSON and Arrow.

A feed's SQLite change log is filled with synthetic wire-form transactions (the mix of
FIELD-NOTES' reference table: 40% insert, 40% update, 20% delete, 10,000 changes a transaction,
table ``public.orders`` of 6 columns); the pgfeed HTTP app serves it from a separate process
(uvicorn, capture off) so client and server do not share a GIL. The client pages with httpx:

- JSON ``/changes`` at ``limit=10000``: bytes only, and bytes + ``orjson.loads`` of each page;
- Arrow ``/changes?format=arrow`` generic and typed (``tables=public.orders``) at ``limit=100000``.

Run: ``.venv/bin/python bench/http_read.py [--changes N] [--repeat R] [--record]``; ``--record``
writes bench/RESULTS.md between the http markers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
import _checkout  # noqa: F401  (this checkout's packages first: sys.path, PYTHONPATH)

sys.path.insert(0, str(BENCH))
RESULTS = BENCH / "RESULTS.md"
START, END = "<!-- http:start -->", "<!-- http:end -->"
FEED = "bench"
DSN = "host=/nonexistent port=1 dbname=bench"  # never connected: capture is off


def fill(data_dir: Path, changes: int) -> None:
    from read_decode import RELID, build, relation

    from pgfeed.assembler.framing import frame
    from pgfeed.changelog.sqlite import SqliteChangeLog
    from pgfeed.feeds.catalogue import Catalogue
    from pgfeed.feeds.model import FeedSpec

    data_dir.mkdir(parents=True, exist_ok=True)
    Catalogue(data_dir / "catalogue.json").put(FeedSpec(name=FEED, dsn=DSN, tables=("public.orders",)))
    (data_dir / "feeds" / FEED).mkdir(parents=True, exist_ok=True)
    log = SqliteChangeLog(data_dir / "feeds" / FEED / "changelog.db")
    txns = build(changes)
    rel = frame(txns[0].commit_lsn - 1, relation())
    first = txns[0]
    txns[0] = type(first)(first.xid, first.commit_lsn, first.end_lsn, first.commit_ts, first.origin,
                          first.change_count, rel + bytes(first.payload), (rel,))
    for i in range(0, len(txns), 10):
        log.append(txns[i:i + 10], confirmed_lsn=txns[min(i + 9, len(txns) - 1)].end_lsn)
    log.close()


def serve(data_dir: Path, port: int, read_ahead: bool = True) -> None:
    import uvicorn

    from pgfeed.config import Settings
    from pgfeed.feeds.supervisor import Supervisor
    from pgfeed.http_api.app import create_app
    from pgfeed.runtime import tune_interpreter

    tune_interpreter()
    supervisor = Supervisor(data_dir, capture=False)
    supervisor.start()
    app = create_app(supervisor, Settings(data_dir=data_dir))
    if not read_ahead:
        app.state.read_ahead = None
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _server(data_dir: Path, read_ahead: bool) -> Iterator[httpx.Client]:
    port = _free_port()
    flags = [] if read_ahead else ["--no-read-ahead"]
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(data_dir), str(port), *flags],
                              env=dict(os.environ))
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    client.get("/healthz")
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            yield client
    finally:
        server.terminate()
        server.wait(10)


def page_all(client: httpx.Client, params: dict[str, object], parse: str) -> tuple[int, float]:
    """Page from earliest to the end; returns (rows, seconds)."""
    import orjson
    import pyarrow as pa

    cursor, rows = "earliest", 0
    t0 = time.perf_counter()
    while True:
        r = client.get(f"/v1/feeds/{FEED}/changes", params={**params, "after": cursor})
        r.raise_for_status()
        if parse == "arrow":
            rows += pa.ipc.open_stream(r.content).read_all().num_rows
            cursor, more = r.headers["PgFeed-Next"], r.headers["PgFeed-Has-More"] == "true"
        elif parse == "json":
            body = orjson.loads(r.content)
            rows += len(body["changes"])
            cursor, more = body["next"], body["has_more"]
        else:  # bytes only: the cursor from the headers; the caller knows the row count
            cursor, more = r.headers["PgFeed-Next"], r.headers["PgFeed-Has-More"] == "true"
        if not more:
            return rows, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--changes", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--no-read-ahead", action="store_true",
                    help="serve without reading the next page ahead")
    ap.add_argument("--serve", nargs=2, metavar=("DIR", "PORT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(Path(args.serve[0]), int(args.serve[1]), not args.no_read_ahead)
        return

    with tempfile.TemporaryDirectory(prefix="pgfeed-bench-http-") as tmp:
        data_dir = Path(tmp) / "data"
        fill(data_dir, args.changes)
        results = []
        cases = [
            ("JSON, limit=10000, body bytes only", {"limit": 10_000}, "bytes"),
            ("JSON, limit=10000, + orjson.loads", {"limit": 10_000}, "json"),
            ("Arrow generic, limit=100000", {"limit": 100_000, "format": "arrow"}, "arrow"),
            ("Arrow typed (tables=public.orders), limit=100000",
             {"limit": 100_000, "format": "arrow", "tables": "public.orders"}, "arrow"),
        ]
        for label, params, parse in cases:
            runs = []
            for _ in range(args.repeat):
                # A fresh server per run: nothing read ahead by an earlier run is reused.
                with _server(data_dir, not args.no_read_ahead) as client:
                    rows, seconds = page_all(client, params, parse)
                rows = rows or args.changes
                runs.append(rows / seconds)
            results.append((label, max(runs), statistics.median(runs), runs))
            print(f"{label:55s} best {max(runs) / 1000:7.1f}k/s  median "
                  f"{statistics.median(runs) / 1000:7.1f}k/s")
    if args.record:
        record(args.changes, results)


def record(changes: int, results: list[tuple[str, float, float, list[float]]]) -> None:
    rows = "\n".join(f"| {label} | {best:,.0f} | {median:,.0f} | "
                     f"{', '.join(f'{r / 1000:.0f}k' for r in runs)} |"
                     for label, best, median, runs in results)
    section = f"""{START}
## HTTP read (`bench/http_read.py`)

Measured {time.strftime('%Y-%m-%d')} on CPython {platform.python_version()} ({platform.machine()},
{os.cpu_count()} shared cores), one httpx client paging {changes:,} changes (40% insert, 40% update,
20% delete, 10,000 a transaction, 6 columns) from `earliest` to the end over loopback; the server
(pgfeed's FastAPI app under uvicorn, SQLite change log, capture off) runs in its own process.
Decode happens on read, so every page is read from SQLite, decoded and encoded per request.

| client path | changes/s (best) | median | runs |
| --- | --- | --- | --- |
{rows}

Target: one JSON client at `limit=10000` >= 200,000 changes/s.
{END}"""
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    if START in text and END in text:
        text = text[:text.index(START)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
