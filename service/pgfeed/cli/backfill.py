"""``pgfeed backfill FEED --tables … [--follow]``: start, watch or cancel a feed's backfills (or one
table of one: ``--cancel-table``, ``--retry-table``) through
the admin API, with a progress bar per table (rows, chunks, rate, ETA) on a terminal and plain
lines otherwise."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from pgfeed.cli.output import add_json_flag, backfill_lines, emit, error_line
from pgfeed.cli.remote import add_service_flags, bearer_token
from pgfeed_client import ClientError, FeedClient

POLL_SECONDS = 0.5
PLAIN_EVERY = 2.0  # seconds between plain progress lines


def add_parser(sub: Any) -> None:
    p = sub.add_parser("backfill", help="read tables' current rows into a feed (admin API)",
                       description="Start a backfill of TABLES into FEED (POST /v1/feeds/FEED/"
                                   "backfills), or watch (--status) or cancel (--cancel) one, or "
                                   "cancel or retry one table of one (--cancel-table, "
                                   "--retry-table).")
    p.add_argument("feed", help="the feed")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--tables", help="comma-separated schema.table list to backfill")
    action.add_argument("--status", nargs="?", const="", metavar="ID",
                        help="show a backfill (or all of the feed's without ID)")
    action.add_argument("--cancel", metavar="ID", help="cancel a running backfill")
    action.add_argument("--cancel-table", nargs=2, metavar=("ID", "TABLE"),
                        help="cancel one table of a backfill (its other tables go on)")
    action.add_argument("--retry-table", nargs=2, metavar=("ID", "TABLE"),
                        help="read a failed or cancelled table of a backfill again, from its last "
                             "stored key (with --follow: until the backfill ends)")
    p.add_argument("--chunk-rows", type=int, help="rows per chunk (default 10000)")
    p.add_argument("--parallel", type=int, help="source connections reading at once (default 2)")
    p.add_argument("--follow", action="store_true", help="show progress until the backfill ends")
    add_json_flag(add_service_flags(p))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        with FeedClient(args.url, token=bearer_token(args), ca_bundle=args.ca_bundle) as client:
            if args.cancel:
                return _print(client.cancel_backfill(args.feed, args.cancel), args)
            if args.cancel_table:
                return _print(client.cancel_backfill_table(args.feed, *args.cancel_table), args)
            if args.retry_table:
                backfill = client.retry_backfill_table(args.feed, *args.retry_table)
                print(f"backfill {backfill['id']}: {args.retry_table[1]} retried", file=sys.stderr)
            if args.tables is not None:
                tables = [t.strip() for t in args.tables.split(",") if t.strip()]
                backfill = client.start_backfill(args.feed, tables, chunk_rows=args.chunk_rows,
                                                 parallel=args.parallel)
                print(f"backfill {backfill['id']} started: {', '.join(tables)}", file=sys.stderr)
            elif args.status:
                backfill = client.backfill(args.feed, args.status)
            elif not args.retry_table:
                return _print({"backfills": client.backfills(args.feed)}, args)
            if not args.follow:
                return _print(backfill, args)
            return follow(client, args.feed, backfill["id"], tty=sys.stdout.isatty())
    except ClientError as exc:
        error_line(exc.code, exc.message)
        return 1


def follow(client: FeedClient, feed: str, backfill_id: str, *, tty: bool) -> int:
    """Poll until the backfill ends; 0 when done, 1 when it failed or was cancelled."""
    if tty:
        backfill = _bars(client, feed, backfill_id)
    else:
        last = 0.0
        while True:
            backfill = client.backfill(feed, backfill_id)
            if backfill["state"] != "running" or time.monotonic() - last >= PLAIN_EVERY:
                _plain(backfill)
                last = time.monotonic()
            if backfill["state"] != "running":
                break
            time.sleep(POLL_SECONDS)
    if backfill["state"] != "done":
        print(f"backfill {backfill_id} {backfill['state']}: {backfill.get('last_error')}", file=sys.stderr)
        for t in backfill["tables"]:
            if t.get("state") not in (None, "done"):
                print(f"  {t['table']} {t['state']}{': ' + t['error'] if t.get('error') else ''}",
                      file=sys.stderr)
        return 1
    return 0


def _bars(client: FeedClient, feed: str, backfill_id: str) -> dict[str, Any]:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("rows  {task.fields[chunks]} chunks  {task.fields[rate]:,.0f} rows/s"),
               TimeRemainingColumn())
    with Progress(*columns) as progress:
        tasks: dict[str, Any] = {}
        while True:
            backfill = client.backfill(feed, backfill_id)
            for t in backfill["tables"]:
                total = t["rows"] + t["estimate_left"]
                fields = {"chunks": t["chunks"], "rate": backfill["rows_per_second"]}
                if t["table"] not in tasks:
                    tasks[t["table"]] = progress.add_task(t["table"], total=total, **fields)
                progress.update(tasks[t["table"]], completed=t["rows"],
                                total=t["rows"] if t["done"] else max(total, t["rows"]), **fields)
            if backfill["state"] != "running":
                return backfill
            time.sleep(POLL_SECONDS)


def _plain(b: dict[str, Any]) -> None:
    eta = f"{b['eta_seconds']:.0f}s" if b.get("eta_seconds") is not None else "?"
    for t in b["tables"]:
        state = f" [{t['state']}]" if t.get("state", "running") not in ("running", "done") else ""
        print(f"{b['id']} {b['state']} {t['table']}{state}: rows {t['rows']} (~{t['estimate_left']} "
              f"left) chunks {t['chunks']} rate {b['rows_per_second']:.0f}/s eta {eta}", flush=True)


def _print(answer: dict[str, Any], args: argparse.Namespace) -> int:
    """One line a backfill; ``--json``: the API's answer."""
    emit(answer, backfill_lines, as_json=args.json)
    return 0
