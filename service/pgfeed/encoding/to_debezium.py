"""Native change events -> Debezium-shaped envelopes (``format=debezium``).

Pure: a native event (the dict ``to_json.change_to_dict`` builds) in, a list of envelopes out, so
consumers written for Debezium's PostgreSQL connector can read a feed without a rewrite. Where
Debezium's shape cannot say what pgfeed knows, the envelope follows Debezium and docs/debezium.md
states the difference:

- an update that changes the key becomes a delete of the old key and a create of the new row
  (Debezium's own rule; the Kafka tombstone between them is not sent), except under REPLICA
  IDENTITY FULL, where it stays one update with the whole old row in ``before``;
- a truncate of several tables becomes one ``t`` event per table;
- an unchanged TOAST column not filled by the feed holds Debezium's placeholder
  ``__debezium_unavailable_value`` (pgfeed's placeholder, or the column omitted, in the native shape);
- ``source.table_version`` names the table's schema version the row was decoded with (pgfeed's
  own field), and ``source.json_null`` (only when some) the json/jsonb columns of ``before`` /
  ``after`` holding the JSON document ``null``, whose value is ``null`` like SQL NULL's;
- a captured DDL command (feed option ``ddl: "capture"``) is an envelope of pgfeed's own,
  ``op: "ddl"`` with the native event's ``ddl`` block (Debezium's PostgreSQL connector emits
  no schema changes);
- ``ts_ms`` (top level) is the commit time, not the time of reading: a log re-read gives the same
  envelopes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pgfeed_client._cursor import parse_lsn

__all__ = ["CONNECTOR", "UNAVAILABLE", "DebeziumSource", "envelopes", "op_code"]

CONNECTOR = "pgfeed"
UNAVAILABLE = "__debezium_unavailable_value"  # Debezium's unavailable.value.placeholder
_OPS = {"insert": "c", "update": "u", "delete": "d", "read": "r", "truncate": "t", "message": "m",
        "ddl": "ddl"}
_EPOCH = datetime.fromisoformat("1970-01-01T00:00:00+00:00")


@dataclass(frozen=True, slots=True)
class DebeziumSource:
    """What the envelope's ``source`` block says about where events come from."""

    name: str  # the feed (Debezium: the logical server name, topic prefix)
    db: str | None  # the source database
    version: str


def op_code(op: str) -> str:
    """Native op -> Debezium's one-letter op (``c u d r t m``)."""
    try:
        return _OPS[op]
    except KeyError:
        raise ValueError(f"no Debezium op for {op!r}") from None


def _micros(commit_ts: str) -> int:
    delta = datetime.fromisoformat(commit_ts) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _source(event: dict[str, Any], src: DebeziumSource, *, snapshot: bool,
            schema: str | None, table: str | None, ts_us: int) -> dict[str, Any]:
    return {"version": src.version, "connector": CONNECTOR, "name": src.name, "ts_ms": ts_us // 1000,
            "ts_us": ts_us, "snapshot": "true" if snapshot else "false", "db": src.db,
            "schema": schema, "table": table, "txId": event["xid"], "lsn": parse_lsn(event["lsn"]),
            "xmin": None,
            # pgfeed's own position of the change: resume a native read right after it
            "commit_lsn": event["commit_lsn"], "seq": event["seq"], "origin": event.get("origin"),
            "table_version": event.get("table_version")}


def _json_null(event: dict[str, Any], before_from: str | None, with_after: bool,
               ) -> dict[str, list[str]] | None:
    """The native ``json_null`` for an envelope whose ``before`` is the native image
    ``before_from`` ("before" or "key", None: no before) and which has an ``after`` or not."""
    nulls = event.get("json_null")
    if not nulls:
        return None
    out = {}
    if before_from is not None and nulls.get(before_from):
        out["before"] = nulls[before_from]
    if with_after and nulls.get("after"):
        out["after"] = nulls["after"]
    return out or None


def _after(event: dict[str, Any]) -> dict[str, Any] | None:
    after: dict[str, Any] | None = event.get("after")
    if after is None:
        return None
    unchanged = set(event.get("unchanged_toast") or ()) - set(event.get("toast_filled") or ())
    if not unchanged:
        return after
    return {**after, **{column: UNAVAILABLE for column in sorted(unchanged)}}


def envelopes(event: dict[str, Any], src: DebeziumSource) -> list[dict[str, Any]]:
    """The Debezium envelopes of one native event (one, except a key-changing update and a
    truncate of several tables)."""
    op = event["op"]
    code = op_code(op)
    ts_us = _micros(event["commit_ts"])
    schema, table = event.get("schema"), event.get("table")

    def one(code: str, before: Any, after: Any, *, schema: str | None = schema,
            table: str | None = table, **extra: Any) -> dict[str, Any]:
        source = _source(event, src, snapshot=op == "read", schema=schema, table=table,
                         ts_us=ts_us)
        nulls = _json_null(event, None if before is None else
                           "before" if before is event.get("before") else "key", after is not None)
        if nulls is not None:
            source["json_null"] = nulls
        return {"before": before, "after": after, "source": source,
                "op": code, "ts_ms": ts_us // 1000, "ts_us": ts_us, "transaction": None, **extra}

    if code == "t":
        out = []
        for name in event.get("tables") or [f"{schema}.{table}"]:
            t_schema, _, t_table = name.rpartition(".")
            out.append(one("t", None, None, schema=t_schema or None, table=t_table))
        return out
    if code == "m":
        return [one("m", None, None, schema=None, table=None,
                    message={"prefix": event.get("prefix"), "content": event.get("content")})]
    if code == "ddl":  # Debezium's PostgreSQL connector has none: pgfeed's own op and block
        return [one("ddl", None, None, ddl=event.get("ddl"))]
    key = event.get("key")
    before = event.get("before")
    after = _after(event)
    if code == "d":
        return [one("d", before if before is not None else key, None)]
    if code == "u":
        # With REPLICA IDENTITY FULL the native key is the whole old row and the primary key is
        # not known here: such an update stays one `u` with its before and after.
        full = before is not None
        if key and not full and after is not None \
                and any(after.get(k, UNAVAILABLE) != v for k, v in key.items()):
            return [one("d", before if before is not None else key, None), one("c", None, after)]
        return [one("u", before, after)]
    return [one(code, None, after)]  # c, r
