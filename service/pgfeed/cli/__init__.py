"""Command line: ``pgfeed serve | feeds … | backfill | demo | peek | tail``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from pgfeed.cli.output import (
    Render,
    action_line,
    add_json_flag,
    consumers_table,
    describe_defaults,
    emit,
    error_line,
    feed_block,
    feeds_table,
    sequences_table,
)
from pgfeed.cli.remote import add_service_flags, bearer_headers


def _serve(args: argparse.Namespace) -> int:
    """Run the service; a startup problem (settings, a port or data dir another process owns, a
    store out of reach) is one line on stderr and exit code 2, never a traceback."""
    from pgfeed.config import InvalidSettings
    from pgfeed.errors import StartupError

    try:
        return _run_service(args)
    except (InvalidSettings, StartupError) as exc:
        line = " ".join(str(exc).split())  # one line, whatever a driver's message held (hints)
        print(f"pgfeed serve: {line}", file=sys.stderr)
        return 2


def _run_service(args: argparse.Namespace) -> int:
    from pgfeed.allocator import keep_freed_memory
    from pgfeed.config import Settings
    from pgfeed.runtime import Runtime, new_event_loop

    keep_freed_memory()  # before the runtime allocates anything large

    settings = Settings.load(args.config, data_dir=args.data_dir, http_host=args.http_host,
                             http_port=args.http_port, grpc_host=args.grpc_host, grpc_port=args.grpc_port,
                             changelog=args.changelog, store=args.store, store_schema=args.store_schema,
                             replica_id=args.replica_id, log_format=args.log_format,
                             tls_cert_file=args.tls_cert, tls_key_file=args.tls_key,
                             tls_client_ca_file=args.tls_client_ca, metrics_auth=args.metrics_auth)
    from pgfeed.logs import configure_logging, known_secrets

    runtime = Runtime(settings)
    configure_logging(settings.log_level, settings.log_format,
                      secrets=lambda: known_secrets(settings, runtime.supervisor))
    with asyncio.Runner(loop_factory=lambda: new_event_loop(settings.event_loop)) as runner:
        runner.run(runtime.serve())
    return 0


def _admin(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None = None,
           render: Render | None = None) -> int:
    """One admin API call: ``render(answer)`` for people, the answer's JSON with ``--json``; an
    error is one line ``pgfeed: <code>: <message>`` on stderr and exit 1 (2: unreachable)."""
    headers = bearer_headers(args)
    try:
        from pgfeed_client._tls import http_verify

        response = httpx.request(method, args.url.rstrip("/") + path, json=body, headers=headers,
                                 timeout=30, verify=http_verify(args.ca_bundle, None))
    except httpx.HTTPError as exc:
        error_line("unreachable", f"cannot reach the service at {args.url}: {exc}")
        return 2
    if response.status_code >= 400:
        return _admin_error(response)
    emit(response.json() if response.content else None, render, as_json=getattr(args, "json", False))
    return 0


def _table_entries(tables: str | None, where: list[str] | None,
                   columns: list[str] | None) -> list[str | dict[str, Any]]:
    """``--tables`` names, with ``--where TABLE=EXPR`` and ``--columns TABLE=a,b`` turning a
    table into a ``{table, where, columns}`` entry (a table named only there is added)."""
    entries: dict[str, dict[str, Any]] = {}
    for name in (t.strip() for t in (tables or "").split(",")):
        if name:
            entries.setdefault(name, {"table": name})
    for flag, values in (("--where", where), ("--columns", columns)):
        for value in values or ():
            name, eq, rest = value.partition("=")
            if not eq or not name.strip() or not rest.strip():
                raise SystemExit(f"pgfeed: {flag} expects TABLE=..., got {value!r}")
            entry = entries.setdefault(name.strip(), {"table": name.strip()})
            if flag == "--where":
                entry["where"] = rest.strip()
            else:
                entry["columns"] = [c.strip() for c in rest.split(",") if c.strip()]
    return [e if len(e) > 1 else e["table"] for e in entries.values()]


def add_filter_flags(parser: argparse.ArgumentParser) -> None:
    """``--where``/``--columns``: a table's row filter and column list (PostgreSQL 15+)."""
    parser.add_argument("--where", action="append", metavar="TABLE=EXPR",
                        help="row filter of a table (repeatable), e.g. \"public.orders=region = 'eu'\"")
    parser.add_argument("--columns", action="append", metavar="TABLE=COL,COL",
                        help="column list of a table (repeatable), e.g. public.orders=id,region,total")


def _feeds_create(args: argparse.Namespace) -> int:
    from pgfeed.cli.options import options_from_args

    body: dict[str, Any] = {"name": args.name, "dsn": args.dsn, "options": {}}
    if args.all_tables:
        body["all_tables"] = True
    elif args.tables or args.where or args.columns:
        body["tables"] = _table_entries(args.tables, args.where, args.columns)
    if args.publication:
        body["publication"] = args.publication
    if args.slot:
        body["slot"] = args.slot
    body["options"] = options_from_args(args)
    if args.dry_run:
        return _dry_run(args, body)
    return _admin(args, "POST", "/v1/feeds", body, render=action_line(
        "created feed {name}: slot {slot}, publication {publication}, tables {tables_text}; "
        "state {state}"))


def _dry_run(args: argparse.Namespace, body: dict[str, Any]) -> int:
    """``feeds create --dry-run``: the service's findings as ``pgfeed check`` prints them; exit
    1 when one is an error."""
    from pgfeed.replication.preflight import Finding, render
    from pgfeed_client._tls import http_verify

    try:
        response = httpx.post(args.url.rstrip("/") + "/v1/feeds", params={"dry_run": "true"},
                              json=body, headers=bearer_headers(args), timeout=30,
                              verify=http_verify(args.ca_bundle, None))
    except httpx.HTTPError as exc:
        error_line("unreachable", f"cannot reach the service at {args.url}: {exc}")
        return 2
    if response.status_code != 200:
        return _admin_error(response)
    answer = response.json()
    emit(answer, lambda a: render([Finding(**f) for f in a["findings"]]), as_json=args.json)
    return 0 if answer["ok"] else 1


def _admin_error(response: httpx.Response) -> int:
    try:
        error = response.json()["error"]
        error_line(error["code"], error["message"])
    except (ValueError, KeyError, TypeError):
        error_line(f"HTTP {response.status_code}", response.text[:500])
    return 1


def _check(args: argparse.Namespace) -> int:
    """``pgfeed check``: the preflight against the source itself (no service needed)."""
    from dataclasses import asdict

    from pgfeed.errors import SourceError
    from pgfeed.replication.connect import admin_connection
    from pgfeed.replication.preflight import Finding, Request, render, run
    from pgfeed.replication.slots import PublishedTable

    entries = _table_entries(args.tables, args.where, args.columns)
    tables = tuple(e if isinstance(e, str) else e["table"] for e in entries)
    filters = tuple(PublishedTable(e["table"], e.get("where"), None if e.get("columns") is None
                                   else tuple(e["columns"])) for e in entries if isinstance(e, dict))
    request = Request(name=args.name, tables=tables, all_tables=args.all_tables,
                      publication=args.publication, slot=args.slot, two_phase=args.two_phase,
                      failover=args.failover, keyless=args.keyless, filters=filters,
                      generated_columns=args.publish_generated_columns,
                      ddl=args.ddl == "capture")
    try:
        with admin_connection(args.dsn, "cannot check the source", "pgfeed-check") as conn:
            findings = run(conn, request)
    except SourceError as exc:  # the password is already scrubbed
        findings = [Finding("connection", "error", str(exc), "check the DSN, the server and pg_hba.conf")]
    failed = any(f.level == "error" for f in findings)
    if args.json:
        print(json.dumps({"ok": not failed, "findings": [asdict(f) for f in findings]}, indent=2))
    else:
        print(render(findings))
    return 1 if failed else 0


def _demo(args: argparse.Namespace) -> int:
    from pgfeed.cli.demo import run_demo

    return run_demo(pg_version=args.pg, seconds=args.seconds, http_port=args.http_port,
                    grpc_port=args.grpc_port)


def _setting_flag(parser: argparse.ArgumentParser, flag: str, field: str, kind: type) -> None:
    """A ``serve`` flag for a setting: help, choices and default from config.Settings (one
    definition); the flag's own default stays None so Settings.load applies the usual order."""
    import typing

    from pgfeed.config import Settings

    info = Settings.model_fields[field]
    choices = list(typing.get_args(info.annotation)) if typing.get_origin(info.annotation) \
        is typing.Literal else None
    default = "" if info.default is None else f"; default: {info.default}"
    help_text = f"{info.description} (or PGFEED_{field.upper()}{default})"
    parser.add_argument(flag, type=kind, choices=choices, help=help_text.replace("%", "%%"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgfeed", description="Change data capture for PostgreSQL")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run captures, the HTTP API and the gRPC API",
                           description="Settings come from these flags, over PGFEED_* environment "
                                       "variables, over the --config file.")
    serve.add_argument("--config", type=Path, help="TOML settings file (keys as the settings' "
                                                   "names: http_port = 8000); default: none")
    for flag, field, kind in (("--data-dir", "data_dir", Path), ("--http-host", "http_host", str),
                              ("--http-port", "http_port", int), ("--grpc-host", "grpc_host", str),
                              ("--grpc-port", "grpc_port", int), ("--tls-cert", "tls_cert_file", Path),
                              ("--tls-key", "tls_key_file", Path),
                              ("--tls-client-ca", "tls_client_ca_file", Path),
                              ("--log-format", "log_format", str), ("--store", "store", str),
                              ("--store-schema", "store_schema", str), ("--replica-id", "replica_id", str),
                              ("--metrics-auth", "metrics_auth", str)):
        _setting_flag(serve, flag, field, kind)
    # "memory" loses every change at exit: kept for tests, not offered (runtime warns when used).
    serve.add_argument("--changelog", choices=["sqlite", "memory"], help=argparse.SUPPRESS)
    serve.set_defaults(func=_serve)

    feeds = sub.add_parser("feeds", help="manage feeds of a running service (admin API)")
    feeds_sub = feeds.add_subparsers(dest="feeds_command", required=True)

    def admin_parser(name: str, help_text: str) -> argparse.ArgumentParser:
        return add_json_flag(add_service_flags(feeds_sub.add_parser(name, help=help_text)))

    create = admin_parser("create", "create a feed (same as POST /v1/feeds)")
    from pgfeed.cli.options import add_option_flags

    create.add_argument("name", help="the feed's name (lowercase letters, digits, underscores)")
    create.add_argument("--dsn", required=True, help="the source (libpq DSN or URI; the password "
                                                     "is never shown back)")
    group = create.add_mutually_exclusive_group()
    group.add_argument("--tables", help="comma-separated schema.table list")
    group.add_argument("--all-tables", action="store_true",
                       help="capture every table of the database (FOR ALL TABLES)")
    add_filter_flags(create)
    create.add_argument("--publication", help="adopt an existing publication")
    create.add_argument("--slot", help="adopt an existing slot")
    create.add_argument("--dry-run", action="store_true",
                        help="check the source and print what creating would find; create nothing")
    add_option_flags(create)
    create.set_defaults(func=_feeds_create)
    admin_parser("list", "list feeds: name, state, positions, lag, rate, last error").set_defaults(
        func=lambda a: _admin(a, "GET", "/v1/feeds", render=feeds_table))
    for verb, method, suffix, render in (
            ("show", "GET", "", feed_block),
            ("pause", "POST", "/pause", action_line("paused feed {name}: state {state}, confirmed "
                                                    "{confirmed_lsn}")),
            ("resume", "POST", "/resume", action_line("resumed feed {name}: state {state}, "
                                                      "confirmed {confirmed_lsn}"))):
        p = admin_parser(verb, f"{verb} a feed")
        p.add_argument("name", help="the feed")
        p.set_defaults(func=lambda a, m=method, s=suffix, r=render: _admin(
            a, m, f"/v1/feeds/{a.name}{s}", render=r))
    set_tables = admin_parser("set-tables", "replace a feed's table list (same as PATCH /v1/feeds/NAME)")
    set_tables.add_argument("name", help="the feed")
    set_tables.add_argument("--tables", help="comma-separated schema.table list")
    add_filter_flags(set_tables)
    set_tables.add_argument("--backfill", action="store_true", help="backfill the tables this adds")
    set_tables.set_defaults(func=lambda a: _admin(
        a, "PATCH", f"/v1/feeds/{a.name}", {"tables": _table_entries(a.tables, a.where, a.columns),
                                            **({"backfill": True} if a.backfill else {})},
        render=action_line("feed {name} now captures {tables_text}")))
    delete = admin_parser("delete", "delete a feed, dropping the slot and publication it owns")
    delete.add_argument("name", help="the feed")
    delete.add_argument("--force", action="store_true",
                        help="delete even when the source cannot drop them (they are left behind)")
    delete.set_defaults(func=lambda a: _admin(
        a, "DELETE", f"/v1/feeds/{a.name}" + ("?force=true" if a.force else ""),
        render=lambda _: f"deleted feed {a.name}"))

    seqs = admin_parser("sequences", "the feed's tables' sequences with the position they cover, "
                        "for a cutover to a mirror (GET /v1/feeds/NAME/sequences)")
    seqs.add_argument("name", help="the feed")
    seqs.add_argument("--emit", action="store_true",
                      help="also write them into the feed as a pgfeed.sequences message")
    seqs.set_defaults(func=lambda a: _admin(a, "POST" if a.emit else "GET",
                                            f"/v1/feeds/{a.name}/sequences", render=sequences_table))
    resync = admin_parser("resync", "recover a feed whose slot was lost: a new slot, a gap marker "
                          "in the feed, a backfill of its tables (same as POST /v1/feeds/NAME/resync)")
    resync.add_argument("name", help="the feed")
    resync.add_argument("--force", action="store_true",
                        help="resync even though the slot is not lost (drops a working slot)")
    resync.set_defaults(func=lambda a: _admin(
        a, "POST", f"/v1/feeds/{a.name}/resync" + ("?force=true" if a.force else ""),
        render=action_line("resynced feed {feed}: {message}")))

    trim = admin_parser("trim", "drop what a reader at a cursor has consumed, even what consumers "
                        "still hold (same as POST /v1/feeds/NAME/trim)")
    trim.add_argument("name", help="the feed")
    trim.add_argument("--before", required=True, help="cursor: drop everything a reader there has "
                                                      "consumed ('latest': everything)")
    trim.set_defaults(func=lambda a: _admin(
        a, "POST", f"/v1/feeds/{a.name}/trim", {"before": a.before}, render=action_line(
            f"trimmed feed {a.name}: " + "dropped {dropped} transactions; oldest {oldest_lsn}, "
            "trimmed to {trimmed_lsn}; forced trims {forced_trims}; removed consumers "
            "{removed_consumers}")))

    consumers = sub.add_parser("consumers", help="named consumers of a feed (their cursors hold "
                                                 "retention)")
    consumers_sub = consumers.add_subparsers(dest="consumers_command", required=True)
    listed = add_json_flag(add_service_flags(consumers_sub.add_parser(
        "list", help="every consumer with its cursor, lag, last ack and expiry"),
        token="read or admin bearer token"))
    listed.add_argument("feed", help="the feed")
    listed.set_defaults(func=lambda a: _admin(a, "GET", f"/v1/feeds/{a.feed}/consumers",
                                              render=consumers_table))
    dropped = add_json_flag(add_service_flags(consumers_sub.add_parser(
        "delete", help="delete a consumer: retention stops waiting for it (admin token)")))
    dropped.add_argument("feed", help="the feed")
    dropped.add_argument("name", help="the consumer")
    dropped.set_defaults(func=lambda a: _admin(a, "DELETE", f"/v1/feeds/{a.feed}/consumers/{a.name}",
                                               render=lambda _: f"deleted consumer {a.name} of feed {a.feed}"))

    check = sub.add_parser("check", help="check a source before creating a feed on it (talks to "
                                         "it directly; exit 1 when a finding is an error)")
    check.add_argument("--dsn", required=True, help="the source (libpq DSN or URI)")
    what = check.add_mutually_exclusive_group()
    what.add_argument("--tables", help="comma-separated schema.table list")
    what.add_argument("--all-tables", action="store_true", help="a feed of every table")
    what.add_argument("--publication", help="an existing publication to adopt")
    check.add_argument("--name", help="the feed's name: also check that its slot and publication "
                                      "names (pgfeed_NAME) are free")
    check.add_argument("--slot", help="an existing slot to adopt")
    check.add_argument("--two-phase", action="store_true", help="option two_phase")
    check.add_argument("--failover", action="store_true", help="option failover")
    check.add_argument("--keyless", choices=["refuse", "identity_full"], default="refuse",
                       help="option keyless (default refuse)")
    check.add_argument("--publish-generated-columns", action="store_true",
                       help="option publish_generated_columns (PostgreSQL 18+)")
    check.add_argument("--ddl", choices=["off", "capture"], default="off",
                       help="option ddl (capture: an event trigger, superuser only)")
    add_filter_flags(check)
    check.add_argument("--json", action="store_true", help="findings as JSON")
    check.set_defaults(func=_check)

    demo = sub.add_parser("demo", help="start a local PostgreSQL, a feed and a workload; watch changes flow")
    demo.add_argument("--pg", default=None, help="PostgreSQL major version (default: 18 if available, else 15)")
    demo.add_argument("--seconds", type=float, default=0, help="stop after this long (default: until Ctrl-C)")
    demo.add_argument("--http-port", type=int, default=8000, help="port of the demo's HTTP API")
    demo.add_argument("--grpc-port", type=int, default=50051, help="port of the demo's gRPC API")
    demo.set_defaults(func=_demo)

    from pgfeed.cli import backfill as backfill_cli
    from pgfeed.cli import peek
    from pgfeed.cli import tail as tail_cli

    peek.add_parser(sub)
    tail_cli.add_parser(sub)
    backfill_cli.add_parser(sub)
    describe_defaults(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
