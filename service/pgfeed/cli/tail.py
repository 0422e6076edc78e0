"""``pgfeed tail FEED``: follow a feed in the terminal, or as JSON lines for ``jq``.

Reads ``/v1/feeds/{feed}/changes`` with long-polls like any client, from ``--from`` (default: the
head, only what commits from now on) or from the cursor saved in ``--cursor-file``, which is
rewritten after every page so an interrupted tail resumes where it stopped. Every line is flushed
as it is written, so a pipe or a file gets it at once. Transport errors are retried with backoff
(a line on stderr says so); the cursor it stopped at goes to stderr on exit.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

import httpx
import orjson

from pgfeed.cli.remote import add_service_flags, bearer_headers
from pgfeed_client._tls import http_verify

__all__ = ["add_parser", "event_line", "follow", "run"]

_OPS = ("insert", "update", "delete", "truncate", "message", "read", "ddl")
_COLOUR = {"insert": "32", "update": "33", "delete": "31", "truncate": "35", "message": "36",
           "read": "34", "ddl": "1;35"}


class _Number(str):
    """A JSON number kept as its text (a jsonb value may hold more digits than a float or 64
    bits), written back verbatim."""


def _exact(text: str) -> _Number | int:
    return _Number(text)


def _small_int(text: str) -> _Number | int:
    return int(text) if len(text) < 19 else _Number(text)


def _loads(content: bytes) -> Any:
    """A page, with every number exactly as the server wrote it."""
    return json.loads(content, parse_float=_exact, parse_int=_small_int)


def _raw(obj: Any) -> Any:
    if isinstance(obj, _Number):
        return orjson.Fragment(str.__str__(obj))
    raise TypeError(type(obj).__name__)


def _json(value: Any) -> str:
    return orjson.dumps(value, default=_raw, option=orjson.OPT_PASSTHROUGH_SUBCLASS).decode()


def event_line(event: dict[str, Any], *, colour: bool = False) -> str:
    """One readable line: ``0/16B1B00:3 xid=749 update public.orders key={…} after={…}``."""
    op = event["op"]
    shown = f"\x1b[{_COLOUR.get(op, '0')}m{op}\x1b[0m" if colour else op
    parts = [f"{event['commit_lsn']}:{event['seq']}", f"xid={event['xid']}", shown]
    if op == "message":
        parts += [f"prefix={_json(event.get('prefix'))}", f"content={event.get('content')}"]
    elif op == "truncate":
        parts.append(",".join(event.get("tables") or []))
    elif op == "ddl":  # a captured DDL command (option ddl "capture")
        ddl = event.get("ddl") or {}
        parts += [f"{event.get('schema')}.{event.get('table')}", _json(ddl.get("command"))]
        if ddl.get("old_name") is not None:
            parts.append(f"{ddl['old_name']}->{ddl.get('new_name')}")
        parts.append("columns=" + ",".join(f"{c.get('name')} {c.get('type')}"
                                           for c in ddl.get("columns") or ()))
    else:
        parts.append(f"{event.get('schema')}.{event.get('table')}")
        for name in ("key", "before", "after"):
            if event.get(name) is not None:
                parts.append(f"{name}={_json(event[name])}")
        if event.get("unchanged_toast"):
            parts.append(f"unchanged_toast={','.join(event['unchanged_toast'])}")
    if event.get("origin"):
        parts.append(f"origin={event['origin']}")
    return " ".join(parts)


def follow(client: httpx.Client, feed: str, after: str, *, tables: str | None = None,
           ops: str | None = None, wait: float = 10.0,
           on_retry: Callable[[str], None] = lambda _: None,
           ) -> Iterator[tuple[list[dict[str, Any]], str]]:
    """Pages of ``(events, next cursor)`` forever (long-polling ``wait`` seconds a request).
    Transport errors and 502/503/504 are retried with backoff from the last cursor reached; any
    other error answer raises ``httpx.HTTPStatusError``."""
    cursor, delay = after, 0.5
    params: dict[str, Any] = {"wait": f"{wait:g}", "limit": 1000}
    if tables:
        params["tables"] = tables
    if ops:
        params["ops"] = ops
    while True:
        try:
            response = client.get(f"/v1/feeds/{quote(feed, safe='')}/changes", params={**params, "after": cursor},
                                  timeout=wait + 30)
            if response.status_code in (502, 503, 504):
                raise httpx.TransportError(f"HTTP {response.status_code}")
            response.raise_for_status()
        except httpx.TransportError as exc:
            on_retry(f"cannot read from the service ({exc}); retrying in {delay:g} s from {cursor}")
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
            continue
        delay = 0.5
        page = _loads(response.content)
        cursor = page["next"]
        yield page["changes"], cursor


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}: {response.text[:300]}"


def _joined(values: list[str] | None) -> str | None:
    """Repeated and comma-separated option values as one comma-separated list."""
    items = [item.strip() for value in values or () for item in value.split(",")]
    return ",".join(item for item in items if item) or None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop_on_signals() -> None:
    """SIGINT and SIGTERM stop the tail where it is (its cursor saved and printed), even when it
    was started with them ignored or blocked, as a script's background job or a test's child
    process can be: both are inherited across exec, and Python then installs no handler."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupt)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``pgfeed tail``; returns the exit code (1: the service refused, 2: bad arguments)."""
    _stop_on_signals()
    out = out or sys.stdout
    err = sys.stderr
    ops = _joined(args.op)
    if ops and (bad := [o for o in ops.split(",") if o not in _OPS]):
        print(f"pgfeed tail: unknown op {', '.join(bad)} (one of {', '.join(_OPS)})", file=err)
        return 2
    tables = _joined(args.table)
    cursor_file: Path | None = args.cursor_file
    start = args.start
    if start is None and cursor_file is not None and cursor_file.exists():
        start = cursor_file.read_text().strip() or None
    start = start or "latest"
    headers = bearer_headers(args)
    colour = not args.json and out.isatty() and not os.environ.get("NO_COLOR")
    cursor, shown = start, 0
    try:
        with httpx.Client(base_url=args.url.rstrip("/"), headers=headers,
                          verify=http_verify(args.ca_bundle, None)) as client:
            pages = follow(client, args.feed, start, tables=tables, ops=ops, wait=args.wait,
                           on_retry=lambda m: print(f"pgfeed tail: {m}", file=err, flush=True))
            for events, cursor in pages:
                for event in events:
                    out.write((_json(event) if args.json else event_line(event, colour=colour))
                              + "\n")
                    shown += 1
                    if args.count and shown >= args.count:  # stop right after this change
                        cursor = f"{event['commit_lsn']}:{event['seq']}"
                        break
                out.flush()
                if cursor_file is not None:
                    tmp = cursor_file.with_name(cursor_file.name + ".tmp")
                    tmp.write_text(cursor + "\n")
                    tmp.replace(cursor_file)
                if args.count and shown >= args.count:
                    break
    except httpx.HTTPStatusError as exc:
        print(f"pgfeed tail: {_error_text(exc.response)}", file=err)
        return 1
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `pgfeed tail … | head`: the reader went away
        sys.stdout = None  # nothing more to flush at exit
        return 0
    print(f"pgfeed tail: stopped at {cursor} (resume with --from {cursor})", file=err, flush=True)
    return 0


def add_parser(subparsers: Any) -> None:
    """Register ``pgfeed tail`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "tail", help="follow a feed's changes in the terminal (or as JSON lines)",
        description="Follow a feed's changes as they commit: one line per change, flushed at once "
                    "(pipes and files too). --json writes the contract's change events, one per "
                    "line, for jq.")
    p.add_argument("feed", help="the feed to follow")
    p.add_argument("--from", dest="start", metavar="CURSOR",
                   help="start after this cursor: LSN, LSN:seq, earliest or latest (default: latest, "
                        "or the cursor saved in --cursor-file)")
    p.add_argument("--cursor-file", type=Path,
                   help="resume from the cursor saved here, and save the cursor after every page")
    p.add_argument("--table", action="append", help="only this schema.table (repeat or comma-separate)")
    p.add_argument("--op", action="append", help=f"only these ops ({', '.join(_OPS)})")
    p.add_argument("--json", action="store_true", help="one JSON change event per line")
    p.add_argument("--count", type=int, default=0, help="stop after this many changes (default: 0, never stop)")
    p.add_argument("--wait", type=float, default=10.0, help="long-poll seconds per request")
    add_service_flags(p, token="read or admin bearer token")
    p.set_defaults(func=run)
