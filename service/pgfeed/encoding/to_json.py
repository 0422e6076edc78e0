"""Change and Transaction -> the contract's JSON (orjson): exact numerics, base64 bytes, ISO 8601 times.

Values come from ``decoding.values``; what orjson cannot write natively goes through ``_default``.
"""

from __future__ import annotations

import base64
from datetime import timedelta
from functools import lru_cache
from typing import Any

import orjson

from pgfeed.decoding.model import Change, Op, Transaction
from pgfeed.decoding.runs import Read, RowRun
from pgfeed.encoding.transcode import run_bodies
from pgfeed.pgoutput.messages import PG_EPOCH
from pgfeed.types.registry import json_writers as value_writers
from pgfeed_client._cursor import format_lsn
from pgfeed_client._json import MAX_EMBEDDED_DEPTH

__all__ = ["MAX_EMBEDDED_DEPTH", "change_events", "change_to_dict", "commit_ts_iso", "dumps",
           "transaction_json", "transaction_to_dict"]

_b64 = base64.b64encode


def commit_ts_iso(commit_ts: int) -> str:
    """Microseconds since 2000-01-01 UTC (PostgreSQL's epoch) -> ``2026-11-22T10:00:00.123456+00:00``."""
    return (PG_EPOCH + timedelta(microseconds=commit_ts)).isoformat(timespec="microseconds")


@lru_cache(maxsize=4096)
def _header_of(commit_lsn: int, xid: int, commit_ts: int) -> tuple[str, int, str]:
    return format_lsn(commit_lsn), xid, commit_ts_iso(commit_ts)


# The last transaction's header, as one tuple so that threads read it atomically; it holds the
# Transaction itself, so the identity test cannot match a different object at a reused address.
_last: tuple[object, tuple[str, int, str]] = (None, ("", 0, ""))


def _header(txn: Transaction[object]) -> tuple[str, int, str]:
    global _last
    last = _last
    if last[0] is txn:
        return last[1]
    header = _header_of(txn.commit_lsn, txn.xid, txn.commit_ts)
    _last = (txn, header)
    return header


_INSERT, _UPDATE, _DELETE, _TRUNCATE, _READ = Op.INSERT, Op.UPDATE, Op.DELETE, Op.TRUNCATE, Op.READ
_DDL = Op.DDL


def change_to_dict(change: Change, txn: Transaction[object]) -> dict[str, Any]:
    """One change event, keyed as the contract's "Change event (JSON)".

    Changes of a backfill chunk (op read) end with ``backfill`` (the id). Every event has lsn, seq, commit_lsn, xid, commit_ts, op, schema, table and origin. Row
    changes add ``table_version`` (the relation version they were decoded with), ``key`` (null
    without a replica identity) and ``unchanged_toast`` always, ``json_null`` when a json/jsonb
    column holds the document ``null`` (per image: which columns' ``null`` is not SQL NULL),
    ``before`` only when the old row came whole and ``after`` for inserts and updates, plus
    ``toast_filled`` in toast=reselect mode. Truncates add ``tables`` and ``options``; messages
    ``prefix``, ``content`` (base64) and ``transactional``; DDL events ``ddl``
    (``decoding.changes.ddl_event``). Values stay Python objects here;
    ``dumps`` writes them.
    """
    commit_lsn, xid, commit_ts = _header(txn)
    op = change.op
    if op is _INSERT or op is _UPDATE or op is _DELETE or op is _READ:
        before, after = change.before, change.after
        if before is None and after is not None:  # insert, update without FULL
            out = {"lsn": format_lsn(change.lsn), "seq": change.seq, "commit_lsn": commit_lsn,
                   "xid": xid, "commit_ts": commit_ts, "op": op, "schema": change.schema,
                   "table": change.table, "table_version": change.table_version,
                   "key": change.key, "after": after,
                   "unchanged_toast": change.unchanged_toast, "origin": txn.origin}
        elif before is None:  # delete without FULL
            out = {"lsn": format_lsn(change.lsn), "seq": change.seq, "commit_lsn": commit_lsn,
                   "xid": xid, "commit_ts": commit_ts, "op": op, "schema": change.schema,
                   "table": change.table, "table_version": change.table_version,
                   "key": change.key,
                   "unchanged_toast": change.unchanged_toast, "origin": txn.origin}
        else:
            out = {"lsn": format_lsn(change.lsn), "seq": change.seq, "commit_lsn": commit_lsn,
                   "xid": xid, "commit_ts": commit_ts, "op": op, "schema": change.schema,
                   "table": change.table, "table_version": change.table_version,
                   "key": change.key, "before": before}
            if after is not None:
                out["after"] = after
            out["unchanged_toast"] = change.unchanged_toast
            out["origin"] = txn.origin
        if change.json_null is not None:
            out["json_null"] = change.json_null
            out["origin"] = out.pop("origin")  # keep origin last, as the contract lists it
        if change.toast_filled is not None:
            out["toast_filled"] = change.toast_filled
            out["origin"] = out.pop("origin")  # keep origin last, as the contract lists it
        if txn.backfill is not None:
            out["backfill"] = txn.backfill
        return out
    out = {"lsn": format_lsn(change.lsn), "seq": change.seq, "commit_lsn": commit_lsn, "xid": xid,
           "commit_ts": commit_ts, "op": op, "schema": change.schema, "table": change.table}
    if op is _TRUNCATE:
        out["tables"] = change.tables
        out["options"] = change.options
    elif op is _DDL:
        out["ddl"] = change.ddl
    else:
        out["prefix"] = change.prefix
        out["content"] = None if change.content is None else _b64(change.content).decode()
        out["transactional"] = change.transactional
    out["origin"] = txn.origin
    return out


def transaction_to_dict(txn: Transaction[Change]) -> dict[str, Any]:
    """A whole (or sliced) transaction: its metadata and its change events (each complete)."""
    commit_lsn, xid, commit_ts = _header(txn)
    out = {
        "xid": xid, "commit_lsn": commit_lsn, "end_lsn": format_lsn(txn.end_lsn),
        "commit_ts": commit_ts, "origin": txn.origin, "change_count": txn.change_count,
        "changes": [change_to_dict(c, txn) for c in txn.changes],
    }
    if txn.backfill is not None:
        out["backfill"] = txn.backfill
    return out


def change_events(txn: Transaction[Read]) -> list[bytes]:
    """The JSON bytes of each change event of ``txn``: its runs of row changes written by the
    compiled encoder straight from their frames where it can (``transcode.run_bodies``),
    everything else through ``change_to_dict`` and ``dumps``; both write the same events."""
    commit_lsn, xid, commit_ts = _header(txn)
    middle = b'"commit_lsn":"%s","xid":%d,"commit_ts":"%s",' % (
        commit_lsn.encode(), xid, commit_ts.encode())
    tail = b'"unchanged_toast":[],"origin":' + orjson.dumps(txn.origin) + (
        b"}" if txn.backfill is None else b',"backfill":' + orjson.dumps(txn.backfill) + b"}")
    out: list[bytes] = []
    append = out.append

    def reference(change: Change) -> bytes:
        return dumps(change_to_dict(change, txn))

    for change in txn.changes:
        if type(change) is RowRun:
            out += run_bodies(change, True, middle, tail, reference)
        else:
            append(reference(change))
    return out


def transaction_json(txn: Transaction[Read], cursor: str) -> bytes:
    """``transaction_to_dict`` plus ``cursor``, as JSON bytes (events from ``change_events``)."""
    commit_lsn, xid, commit_ts = _header(txn)
    fields = {"xid": xid, "commit_lsn": commit_lsn, "end_lsn": format_lsn(txn.end_lsn),
              "commit_ts": commit_ts, "origin": txn.origin, "change_count": txn.change_count}
    if txn.backfill is not None:
        fields["backfill"] = txn.backfill
    head = orjson.dumps(fields)
    return (head[:-1] + b',"changes":[' + b",".join(change_events(txn)) + b'],"cursor":'
            + orjson.dumps(cursor) + b"}")


# Python value type -> what orjson writes in its place: the type registry's JSON rules
_WRITERS = value_writers()


def _default(obj: Any) -> Any:
    write = _WRITERS.get(type(obj))
    if write is None:
        raise TypeError(f"cannot write {type(obj).__name__} as JSON")
    return write(obj)


# Interval is a dataclass, and dates and times are written by _default too
_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def dumps(obj: Any) -> bytes:
    """JSON bytes for change/transaction dicts (or pages of them) with pgfeed's value rules."""
    return orjson.dumps(obj, default=_default, option=_OPTIONS)
