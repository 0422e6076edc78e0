"""What the admin commands print (issue 30.3): a person reads a table, a block or one line; a
script passes ``--json`` and gets the API's answer as it is. One function per kind of answer, all
plain text (no colour, stable widths) so output diffs and greps the same on a terminal or a pipe.

Also the help every flag carries: ``describe_defaults`` appends each option's default to its help
so ``--help`` and behaviour cannot disagree."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["ERROR_WIDTH", "Render", "action_line", "add_json_flag", "backfill_lines", "consumers_table",
           "describe_defaults", "emit", "error_line", "feed_block", "feeds_table", "sequences_table",
           "walk_parsers"]

Render = Callable[[Any], str]
ERROR_WIDTH = 60  # characters of a last error a table shows (`feeds show` has all of it)


# -- help -----------------------------------------------------------------------------------------


def walk_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("pgfeed",),
                 ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser of the tree with its command path (``pgfeed feeds list``), root first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from walk_parsers(child, (*path, name))


def _shown(value: Any) -> str | None:
    """How a default reads in help; None: nothing worth saying (absent, or a flag that is off)."""
    if value is None or value is argparse.SUPPRESS or value is False:
        return None
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or None
    return str(value)


def describe_defaults(parser: argparse.ArgumentParser) -> None:
    """Append ``(default: X)`` to the help of every option of the tree whose default is a value
    and whose help does not say it yet (options whose help is suppressed stay hidden)."""
    for _, p in walk_parsers(parser):
        for action in p._actions:
            if action.help is argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
                continue
            shown = _shown(action.default)
            if shown is not None and action.help and "default" not in action.help:
                action.help += f" (default: {shown.replace('%', '%%')})"


# -- output ---------------------------------------------------------------------------------------


def add_json_flag(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--json``: the API's answer as it is, for scripts (the human form may change)."""
    p.add_argument("--json", action="store_true",
                   help="print the API's JSON answer unchanged, for scripts (default: text for people)")
    return p


def emit(answer: Any, render: Render | None, *, as_json: bool) -> None:
    """Print the API's ``answer``: its JSON with ``--json`` (or when there is no human form),
    else ``render(answer)``."""
    if as_json or render is None:
        if answer is not None:
            print(json.dumps(answer, indent=2))
        return
    text = render(answer)
    if text:
        print(text)


def error_line(code: str, message: str) -> None:
    """``pgfeed: <code>: <message>`` on stderr, one line whatever the message held."""
    print(f"pgfeed: {code}: {' '.join(str(message).split())}", file=sys.stderr)


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"  # pragma: no cover - the loop returns


def _seconds(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def _when(stamp: str | None) -> str:
    """An ISO 8601 UTC time to the second (``2026-01-02 03:04:05Z``); as given when not one."""
    if not stamp:
        return "-"
    from datetime import UTC, datetime

    try:
        return datetime.fromisoformat(stamp).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except ValueError:
        return stamp


def _lag(feed: dict[str, Any]) -> str:
    if feed.get("lag_bytes") is None and feed.get("lag_seconds") is None:
        return "-"
    return f"{_size(feed.get('lag_bytes'))} / {_seconds(feed.get('lag_seconds'))}"


def _short(text: str | None, width: int = ERROR_WIDTH) -> str:
    if not text:
        return "-"
    line = " ".join(text.split())
    return line if len(line) <= width else line[:width - 1] + "…"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart; the last column is not padded."""
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in (header, *rows)]
    return "\n".join(lines)


def _state(feed: dict[str, Any]) -> str:
    """The state with why, when it is not plainly working."""
    state = str(feed["state"])
    lost = feed.get("slot_lost")
    if lost:
        return f"{state} (slot {lost['slot']} lost: {lost['reason']}; changes after {lost['last_lsn']} "\
               "are missing: pgfeed feeds resync)"
    if state == "reconnecting" and feed.get("next_attempt_at"):
        return f"{state} (next attempt {feed['next_attempt_at']}): {_short(feed.get('last_error'), 200)}"
    if state in ("failed", "reconnecting") and feed.get("last_error"):
        return f"{state}: {_short(feed['last_error'], 200)}"
    return state


def feeds_table(answer: dict[str, Any]) -> str:
    """``feeds list``: one row a feed."""
    feeds = answer.get("feeds", [])
    if not feeds:
        return "no feeds"
    rows = [(f["name"], f["state"], f["confirmed_lsn"], f["head_lsn"], _lag(f),
             f"{f.get('changes_per_second', 0.0):.1f}/s", _short(f.get("last_error")))
            for f in feeds]
    return _table(("NAME", "STATE", "CONFIRMED", "HEAD", "LAG", "RATE", "LAST ERROR"), rows)


def _owned(name: str, owned: bool) -> str:
    return f"{name} ({'owned by pgfeed' if owned else 'adopted'})"


def _consumer(c: dict[str, Any]) -> str:
    expires = f", expires {_when(c['expires_at'])}" if c.get("expires_at") else ""
    acked = f", acked {_when(c['acked_at'])}" if c.get("acked_at") else ""
    return f"{c['name']} at {c['cursor']}, lag {_size(c.get('lag_bytes'))}{acked}{expires}"


def _backfill(b: dict[str, Any]) -> str:
    tables = ", ".join(t["table"] for t in b.get("tables", []))
    eta = f", eta {_seconds(b['eta_seconds'])}" if b.get("eta_seconds") is not None else ""
    error = f": {_short(b['last_error'], 200)}" if b.get("last_error") else ""
    return f"{b['id']} {b['state']} {tables}: {b['rows']} rows (~{b['estimate_left']} left){eta}{error}"


def _gap(g: dict[str, Any]) -> str:
    return (f"changes after {g['lost_after']} up to {g['resumed_at']} lost ({g['reason']}; "
            f"marker {g['marker']}, {_when(g['at'])})")


def feed_block(feed: dict[str, Any]) -> str:
    """``feeds show`` (and the feed an action answers with): what an operator reads first."""
    tables = "all tables" if feed.get("all_tables") else ", ".join(feed.get("tables", [])) or "-"
    risk = feed.get("slot_risk") or {}
    safe = risk.get("safe_wal_size")  # null with a wal_status: max_slot_wal_keep_size = -1
    safe_text = _size(safe) if safe is not None else "unlimited" if risk.get("wal_status") else "unknown"
    lines = [
        ("state", _state(feed)),
        ("source", feed.get("source", "-")),
        ("slot", _owned(feed["slot"], feed.get("owns_slot", False))),
        ("publication", _owned(feed["publication"], feed.get("owns_publication", False))),
        ("tables", tables),
        ("positions", f"confirmed {feed['confirmed_lsn']}  head {feed['head_lsn']}  server "
                      + (feed.get("server_lsn") or "-")),
        ("lag", _lag(feed)),
        ("throughput", f"{feed.get('changes_per_second', 0.0):.1f} changes/s; "
                       + f"{feed.get('changes_captured', 0)} changes, "
                       + f"{_size(feed.get('bytes_captured'))} captured"),
        ("slot risk", f"wal_status {risk.get('wal_status') or '-'}, retained "
                      + f"{_size(risk.get('retained_bytes'))}, safe WAL {safe_text}"),
    ]
    log = feed.get("log")
    if log:
        lines.append(("log", f"{log['transaction_count']} transactions, {log['change_count']} "
                             + f"changes, {_size(log['payload_bytes'])}; oldest {log['oldest_lsn']}"))
    if feed.get("last_error") and feed["state"] not in ("failed", "reconnecting"):
        lines.append(("last error", _short(feed["last_error"], 500)))
    if feed.get("leader"):
        leader = feed["leader"]
        lines.append(("leader", f"{leader['replica']} (epoch {leader['epoch']}, since "
                                + f"{_when(leader['since'])})"))
    if feed.get("unprotected_tables"):
        lines.append(("unprotected", ", ".join(feed["unprotected_tables"]) +
                      " (no key, no replica identity: UPDATE and DELETE fail)"))
    consumers = feed.get("consumers") or []
    lines += [("consumers" if i == 0 else "", _consumer(c)) for i, c in enumerate(consumers)] \
        or [("consumers", "none")]
    backfills = feed.get("backfills") or []
    lines += [("backfills" if i == 0 else "", _backfill(b)) for i, b in enumerate(backfills)] \
        or [("backfills", "none running")]
    gaps = feed.get("gaps") or []
    lines += [("gaps" if i == 0 else "", _gap(g)) for i, g in enumerate(gaps)] or [("gaps", "none")]
    width = max(len(label) for label, _ in lines)
    return "\n".join([f"feed {feed['name']}"] + [f"  {label.ljust(width)}  {value}" for label, value in lines])


def consumers_table(answer: dict[str, Any]) -> str:
    """``consumers list``: one row a named consumer."""
    consumers = answer.get("consumers", [])
    if not consumers:
        return "no consumers"
    rows = [(c["name"], c["cursor"], _size(c.get("lag_bytes")), _when(c.get("acked_at")),
             _when(c["expires_at"]) if c.get("expires_at") else "never") for c in consumers]
    return _table(("NAME", "CURSOR", "LAG", "ACKED", "EXPIRES"), rows)


def sequences_table(answer: dict[str, Any]) -> str:
    """``feeds sequences``: where a mirror's sequences should continue."""
    rows = [(s["sequence"], f"{s['table']}.{s['column']}", s["kind"],
             "-" if s.get("last_value") is None else str(s["last_value"]),
             "-" if s.get("next_value") is None else str(s["next_value"]),
             "" if s.get("readable", True) else "not readable by the feed's role")
            for s in answer.get("sequences", [])]
    head = f"read at {answer['read_at']}"
    if answer.get("message_lsn"):
        head += f"; written into the feed as a pgfeed.sequences message at {answer['message_lsn']}"
    if not rows:
        return head + "\nno sequences"
    return head + "\n" + _table(("SEQUENCE", "COLUMN", "KIND", "LAST", "NEXT", ""), rows)


def backfill_lines(answer: dict[str, Any]) -> str:
    """A backfill (or ``{"backfills": [...]}``) as one line a backfill."""
    backfills = answer.get("backfills", [answer])
    return "\n".join(_backfill(b) for b in backfills) or "no backfills"


def action_line(template: str) -> Render:
    """One line saying what happened: ``template`` formatted with the answer's fields (and
    ``tables_text``: its tables comma-separated)."""
    def render(answer: Any) -> str:
        fields = {k: ", ".join(map(str, v)) or "none" if isinstance(v, list) else v
                  for k, v in dict(answer or {}).items()}
        fields["tables_text"] = "all tables" if fields.get("all_tables") else fields.get("tables") or "-"
        return template.format_map(_Missing(fields))
    return render


class _Missing(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "-"
