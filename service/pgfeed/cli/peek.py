"""``pgfeed peek``: what a pgoutput slot holds, decoded like a feed serves it, without consuming it.

Reads with ``pg_logical_slot_peek_binary_changes`` (the slot does not move) in a session with the
feed's settings and pgoutput options (``replication.session``), then runs the bytes through the
same assembler, relation catalog, decoder and JSON encoding as a feed.
"""

from __future__ import annotations

import argparse
import base64
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from pgfeed.assembler.transactions import TransactionAssembler
from pgfeed.decoding.changes import TransactionDecoder
from pgfeed.decoding.model import Change, Op, Transaction
from pgfeed.decoding.relations import RelationCatalog
from pgfeed.dsn import mask_dsn, scrub
from pgfeed.encoding.to_json import change_to_dict, dumps
from pgfeed.errors import PgfeedError, SourceError
from pgfeed.replication import session
from pgfeed.replication.connect import conninfo
from pgfeed_client._cursor import format_lsn

__all__ = [
    "PeekError",
    "SlotInfo",
    "add_parser",
    "decode_rows",
    "fetch_rows",
    "format_change",
    "peek_options",
    "run",
    "slot_info",
]

_FETCH_SIZE = 2000

Row = tuple[int, int, bytes]  # (lsn, xid, pgoutput message)


class PeekError(PgfeedError):
    """The source cannot be peeked as asked (no such slot, wrong plugin, bad publication...)."""

    code = "peek_error"


@dataclass(frozen=True, slots=True)
class SlotInfo:
    name: str
    plugin: str | None
    slot_type: str
    database: str | None
    two_phase: bool
    active_pid: int | None
    confirmed_flush_lsn: int | None


def peek_options(*, proto: int, publications: Sequence[str], two_phase: bool = False,
                 streaming: bool = False) -> list[str]:
    """The arguments after the slot name of ``pg_logical_slot_peek_binary_changes``: the options
    a feed's stream sends (``session.pgoutput_options``) with messages on where the protocol has
    them, ``two_phase`` as the slot was created. ``pgfeed peek`` shows messages, so it reads whole
    transactions (``session.streaming_mode``: a streamed message can outlive its rolled-back
    subtransaction); ``streaming`` asks for streamed ones anyway (tests of the decoder)."""
    try:
        pairs = session.pgoutput_options(
            proto_version=proto, publications=publications,
            streaming="on" if streaming and proto >= 2 else "off", messages=proto >= 2,
            two_phase=two_phase and proto >= 3)
    except ValueError as exc:
        raise PeekError(str(exc)) from None
    return [item for pair in pairs for item in pair]


def slot_info(conn: psycopg.Connection[Any], slot: str) -> SlotInfo | None:
    """The slot as pg_replication_slots shows it, or None if there is no such slot."""
    row = conn.execute(
        "SELECT slot_name, plugin, slot_type, database, two_phase, active_pid, "
        "confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots WHERE slot_name = %s",
        (slot,)).fetchone()
    if row is None:
        return None
    name, plugin, slot_type, database, two_phase, active_pid, confirmed = row
    return SlotInfo(name, plugin, slot_type, database, bool(two_phase), active_pid,
                    None if confirmed is None else int(confirmed))


def fetch_rows(conn: psycopg.Connection[Any], slot: str, options: Sequence[str], *,
               upto_nchanges: int | None = None) -> Iterator[Row]:
    """Peek a pgoutput slot: ``(lsn, xid, message)`` rows, fetched in batches through a cursor.

    Settings made on ``conn`` (e.g. ``logical_decoding_work_mem``) apply to the decoding. Runs in
    a transaction of its own; ``conn`` must be idle.
    """
    args = ", ".join(["%s"] * len(options))
    query = ("SELECT lsn - '0/0'::pg_lsn, xid::text::bigint, data "
             f"FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s, {args})")
    with conn.transaction(), conn.cursor(name="pgfeed_peek", binary=True) as cur:
        cur.itersize = _FETCH_SIZE
        cur.execute(query, (slot, upto_nchanges, *options))
        for lsn, xid, data in cur:
            yield int(lsn), int(xid), data


def decode_rows(rows: Iterable[Row], *, toast: str = "omit") -> Iterator[Transaction[Change]]:
    """Committed transactions (and non-transactional messages) in the order a feed would log them.

    Relation frames go into the catalog in arrival order, before their transaction is decoded.
    Aborted, rolled-back and still-open (or still-prepared) transactions yield nothing.
    """
    assembler = TransactionAssembler()
    catalog = RelationCatalog()
    decoder = TransactionDecoder(catalog, toast=toast)  # type: ignore[arg-type]
    for lsn, _xid, data in rows:
        for stored in assembler.feed(lsn, data):
            for frame in stored.schema_frames:
                catalog.add(stored.commit_lsn, frame)
            if stored.change_count:
                yield decoder.load(stored)


def format_change(change: Change, txn: Transaction[object]) -> str:
    """One readable line: ``0/16B1A20 xid=749 insert public.orders key={...} after={...}``."""
    head = f"{format_lsn(change.lsn)} xid={txn.xid}"
    event = change_to_dict(change, txn)
    if change.op is Op.MESSAGE:
        content = change.content or b""
        try:
            shown = dumps(content.decode("utf-8")).decode()
        except UnicodeDecodeError:
            shown = "base64:" + base64.b64encode(content).decode()
        kind = "transactional" if change.transactional else "non-transactional"
        return f"{head} message {kind} prefix={dumps(change.prefix).decode()} content={shown}"
    if change.op is Op.TRUNCATE:
        flags = [name for name, on in (change.options or {}).items() if on]
        return f"{head} truncate {', '.join(change.tables or [])}" + (
            f" ({', '.join(flags)})" if flags else "")
    parts = [head, f"{change.op.value} {change.schema}.{change.table}"]
    for name in ("key", "before", "after"):
        if name in event:
            parts.append(f"{name}={dumps(event[name]).decode()}")
    if change.unchanged_toast:
        parts.append(f"unchanged_toast={','.join(change.unchanged_toast)}")
    if txn.origin:
        parts.append(f"origin={txn.origin}")
    return " ".join(parts)


# -- the command -------------------------------------------------------------------------------------

def add_parser(subparsers: Any) -> None:
    """Register ``pgfeed peek`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "peek", help="show the changes pending in a pgoutput slot, without consuming them",
        description="Decode what a pgoutput replication slot holds (committed transactions "
                    "since its confirmed position), the way a feed would serve it. The slot "
                    "does not move.")
    p.add_argument("--dsn", required=True, help="source database (where the slot lives)")
    p.add_argument("--slot", required=True, help="pgoutput logical replication slot")
    p.add_argument("--publication", required=True, help="publication name(s), comma-separated")
    p.add_argument("--proto", type=int, choices=[1, 2, 3, 4],
                   help="pgoutput proto_version (default: the highest the server speaks)")
    p.add_argument("--limit", type=int, default=None,
                   help="show at most this many changes (default: everything pending)")
    p.add_argument("--json", action="store_true", help="one contract change event (JSON) per line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``pgfeed peek``; returns the exit code (2: the slot cannot be read as asked)."""
    publications = [n.strip() for n in args.publication.split(",") if n.strip()]
    if args.limit is not None and args.limit < 0:
        return _fail("--limit must be >= 0")
    try:
        conn = _connect(args.dsn)
    except (psycopg.Error, SourceError) as exc:
        return _fail(f"cannot connect to {mask_dsn(args.dsn)}: {scrub(str(exc).strip(), args.dsn)}")
    out = sys.stdout
    shown = 0
    try:
        with conn:
            proto, options = _prepare(conn, args.slot, publications, args.proto)
            for txn, change in _changes(conn, args.slot, options, args.limit):
                line = (dumps(change_to_dict(change, txn)).decode() if args.json
                        else format_change(change, txn))
                out.write(line + "\n")
                shown += 1
    except PeekError as exc:
        return _fail(str(exc))
    except psycopg.Error as exc:
        return _fail(f"peek on slot {args.slot!r} failed: {scrub(str(exc).strip(), args.dsn)}")
    except PgfeedError as exc:
        return _fail(f"cannot decode slot {args.slot!r}: {exc}", code=1)
    out.flush()
    if not args.json:
        print(f"-- {shown} change(s) pending in slot {args.slot} (pgoutput proto {proto}); "
              "nothing consumed", file=sys.stderr)
    return 0


def _fail(message: str, code: int = 2) -> int:
    print(f"pgfeed peek: {message}", file=sys.stderr)
    return code


def _connect(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(conninfo(dsn, "pgfeed-peek"), autocommit=True)


def _prepare(conn: psycopg.Connection[Any], slot: str, publications: list[str],
             proto: int | None) -> tuple[int, list[str]]:
    """Check the slot and publications; return the protocol and the pgoutput options to use."""
    info = slot_info(conn, slot)
    if info is None:
        raise PeekError(f"replication slot \"{slot}\" does not exist")
    dbname = conn.info.dbname
    if info.slot_type != "logical":
        raise PeekError(f"replication slot {slot!r} is a physical slot, not a logical one")
    if info.plugin != "pgoutput":
        raise PeekError(f"replication slot {slot!r} uses output plugin {info.plugin!r}, "
                        "not pgoutput")
    if info.database != dbname:
        raise PeekError(f"replication slot {slot!r} belongs to database {info.database!r}; "
                        f"connect to it, not to {dbname!r}")
    if info.active_pid is not None:
        raise PeekError(f"replication slot {slot!r} is in use by process {info.active_pid} "
                        "(a running feed?); pause it to peek")
    found = {r[0] for r in conn.execute("SELECT pubname FROM pg_publication WHERE pubname = ANY(%s)",
                                        (publications,))}
    missing = [p for p in publications if p not in found]
    if missing:
        raise PeekError(f"publication(s) {', '.join(map(repr, missing))} do not exist in "
                        f"database {dbname!r}")
    highest = session.max_proto_version(conn.info.server_version)
    if proto is None:
        proto = highest
    elif proto > highest:
        raise PeekError(f"the server (version {conn.info.server_version}) speaks pgoutput "
                        f"protocol up to {highest}, not {proto}")
    return proto, peek_options(proto=proto, publications=publications, two_phase=info.two_phase)


def _changes(conn: psycopg.Connection[Any], slot: str, options: list[str],
             limit: int | None) -> Iterator[tuple[Transaction[Change], Change]]:
    """Every pending change, or the first ``limit``. With a limit, the server decodes only about
    as much WAL as needed: a bounded read, widened (from the start again) until it holds enough."""
    if limit is None:
        for txn in decode_rows(fetch_rows(conn, slot, options)):
            for change in txn.changes:
                yield txn, change
        return
    if limit == 0:
        return
    budget = max(4 * limit + 64, 1024)
    while True:
        rows = list(fetch_rows(conn, slot, options, upto_nchanges=budget))
        found: list[tuple[Transaction[Change], Change]] = []
        for txn in decode_rows(rows):
            found.extend((txn, change) for change in txn.changes)
            if len(found) >= limit:
                break
        if len(found) >= limit or len(rows) < budget:  # enough, or the WAL ran out
            yield from found[:limit]
            return
        budget *= 4
