"""pgfeed's decoding (assembler + decoder + values + JSON) against test_decoding on the same WAL.

One database per PostgreSQL version: a test_decoding slot and one pgoutput slot per protocol version
are created before the shared workloads run; each protocol version is then compared unit by unit.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from pgfeed.cli.peek import decode_rows, fetch_rows, peek_options
from pgfeed.decoding.model import Transaction
from pgfeed.encoding.to_json import change_to_dict, dumps
from pgfeed.localpg import LocalCluster
from pgfeed.replication.session import connection_options, max_proto_version
from tests.fixtures.fix_pg import ALL_PG_VERSIONS, create_database
from tests.fixtures.fix_testdecoding import (
    IntervalIso,
    TableInfo,
    TdUnit,
    comparable_event,
    exact_json_loads,
    expected_change,
    group_units,
    peek_test_decoding,
    table_info,
)
from tests.integration import workloads
from tests.integration.workloads import EVOLVING, NOT_PUBLISHED, PUBLICATIONS, STREAM_ROWS

pytestmark = pytest.mark.pg

TD_SLOT = "conf_td"


@dataclass
class Source:
    dsn: str
    highest_proto: int
    td_units: list[TdUnit]
    tables: dict[str, TableInfo]
    expected: list[dict[str, Any]]


def _session(dsn: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True, options=connection_options())
    # Read by the backend that decodes: small enough that the big transactions stream.
    conn.execute("SET logical_decoding_work_mem = '64kB'")
    return conn


@pytest.fixture(scope="module")
def source(any_pg_cluster: LocalCluster) -> Iterator[Source]:
    dsn = create_database(any_pg_cluster, "conf")
    with psycopg.connect(dsn, autocommit=True) as conn:
        workloads.create_schema(conn)
        highest = max_proto_version(conn.info.server_version)
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (TD_SLOT,))
        for proto in range(1, highest + 1):
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)",
                         (f"conf_v{proto}", proto >= 3))
        tables = table_info(conn)
    try:
        workloads.run_all(dsn)
        with _session(dsn) as conn:
            units = group_units(peek_test_decoding(conn, TD_SLOT))
            conn.execute("SET intervalstyle = iso_8601")

            @functools.cache
            def interval_iso(text: str) -> str:  # PostgreSQL itself is the oracle
                row = conn.execute("SELECT %s::interval::text", (text,)).fetchone()
                assert row is not None
                return str(row[0])

            expected = expected_units(units, tables, interval_iso)
        yield Source(dsn, highest, units, tables, expected)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE database = current_database()")


# -- both sides as comparable units ---------------------------------------------------------------

def expected_units(units: list[TdUnit], tables: dict[str, TableInfo],
                   interval_iso: IntervalIso | None = None) -> list[dict[str, Any]]:
    """test_decoding's units, minus what the publications do not carry and pgoutput never sends
    (a DELETE without an old tuple)."""
    out = []
    for unit in units:
        changes = []
        for change in unit.changes:
            if change.table is not None and change.op in NOT_PUBLISHED.get(change.table, ()):
                continue
            if change.op == "delete" and change.old is None:
                continue
            changes.append(expected_change(change, tables, interval_iso))
        if changes:
            out.append({"xid": unit.xid, "end_lsn": unit.end_lsn, "changes": changes})
    return out


def pgfeed_units(txns: list[Transaction], tables: dict[str, TableInfo]) -> tuple[list[dict[str, Any]], list[str]]:
    """pgfeed's transactions as contract JSON, reduced to what test_decoding can show; plus
    structural problems test_decoding cannot reveal (missing columns, NULLs in old rows)."""
    units: list[dict[str, Any]] = []
    problems: list[str] = []
    for txn in txns:
        changes = []
        for change in txn.changes:
            event = exact_json_loads(dumps(change_to_dict(change, txn)))
            changes.append(_comparable(event, change.lsn, tables, problems))
        units.append({"xid": txn.xid, "end_lsn": txn.end_lsn, "changes": changes})
    return units, problems


def _comparable(event: dict[str, Any], lsn: int, tables: dict[str, TableInfo],
                problems: list[str]) -> dict[str, Any]:
    """``comparable_event``, plus the structural checks test_decoding cannot make (recorded in
    ``problems``)."""
    op = event["op"]
    if op in ("message", "truncate"):
        return comparable_event(event, lsn, tables)
    name = f"{event['schema']}.{event['table']}"
    info = tables[name]
    where = f"{op} {name} at {lsn:X}"
    if name in EVOLVING:  # its shape changes during the workloads: types from test_decoding only
        info = TableInfo({}, frozenset(), info.identity, info.key)
    elif "after" in event and set(event["after"]) | set(event["unchanged_toast"]) != set(info.columns):
        problems.append(f"{where}: after + unchanged_toast {sorted(event['after'])} + "
                        f"{event['unchanged_toast']} != columns {list(info.columns)}")
    if "before" in event and info.columns and set(event["before"]) != set(info.columns):
        problems.append(f"{where}: before has {sorted(event['before'])}, not {list(info.columns)}")
    if "before" in event and info.identity != "f":
        problems.append(f"{where}: before present under replica identity {info.identity!r}")
    if event["key"] is not None and set(event["key"]) != set(info.key) and not event["unchanged_toast"]:
        problems.append(f"{where}: key columns {sorted(event['key'])}, identity is {info.key}")
    return comparable_event(event, lsn, {**tables, name: info})


def diff_units(got: list[dict[str, Any]], want: list[dict[str, Any]], limit: int = 15) -> list[str]:
    """Readable differences, unit by unit and change by change."""
    out = []
    if len(got) != len(want):
        out.append(f"{len(got)} units from pgfeed, {len(want)} from test_decoding: "
                   f"xids {[u['xid'] for u in got]} vs {[u['xid'] for u in want]}")
    for n, (g, w) in enumerate(zip(got, want)):
        if g["xid"] != w["xid"]:
            out.append(f"unit {n}: xid {g['xid']} (pgfeed) vs {w['xid']} (test_decoding)")
            break
        if w["end_lsn"] is not None and g["end_lsn"] != w["end_lsn"]:
            out.append(f"unit {n} xid {g['xid']}: end_lsn {g['end_lsn']:X} vs {w['end_lsn']:X}")
        if len(g["changes"]) != len(w["changes"]):
            out.append(f"unit {n} xid {g['xid']}: {len(g['changes'])} changes vs {len(w['changes'])}")
        for i, (gc, wc) in enumerate(zip(g["changes"], w["changes"])):
            if gc != wc:
                keys = [k for k in wc if gc.get(k) != wc[k]] or sorted(set(gc) ^ set(wc))
                detail = "; ".join(f"{k}: pgfeed={gc.get(k)!r} test_decoding={wc.get(k)!r}" for k in keys)
                out.append(f"unit {n} xid {g['xid']} change {i} ({wc['op']} {wc.get('table', '')}): {detail}")
                if len(out) >= limit:
                    return out
    return out


# -- the tests ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def expected(source: Source) -> list[dict[str, Any]]:
    return source.expected


def _peek(source: Source, proto: int) -> tuple[list[bytes], list[Transaction]]:
    options = peek_options(proto=proto, publications=PUBLICATIONS, two_phase=proto >= 3,
                           streaming=True)
    with _session(source.dsn) as conn:
        rows = list(fetch_rows(conn, f"conf_v{proto}", options))
    return [data for _, _, data in rows], list(decode_rows(rows))


# every protocol version each server speaks (14: 1-2, 15: 1-3, 16+: 1-4), none it does not
PROTO_CASES = [pytest.param(version, proto, id=f"pg{version}-v{proto}")
               for version in ALL_PG_VERSIONS
               for proto in range(1, max_proto_version(int(version) * 10000) + 1)]


@pytest.mark.parametrize(("any_pg_cluster", "proto"), PROTO_CASES, indirect=["any_pg_cluster"])
def test_matches_test_decoding(source: Source, expected: list[dict[str, Any]], proto: int) -> None:
    assert proto <= source.highest_proto
    messages, txns = _peek(source, proto)

    tags = {m[:1].decode() for m in messages}
    streamed = {"S", "E", "c", "A"}
    two_phase = {"b", "P", "K", "r", "p"}
    if proto >= 2:
        assert streamed <= tags, f"streaming not exercised on v{proto}: tags {sorted(tags)}"
    else:
        assert not (streamed | two_phase) & tags
    if proto >= 3:
        assert two_phase <= tags, f"two-phase not exercised on v{proto}: tags {sorted(tags)}"

    got, problems = pgfeed_units(txns, source.tables)
    assert not problems, "\n".join(problems[:20])
    if proto < 2:  # pgoutput is asked for messages from v2, as the feed's stream does
        expected = [unit for unit in ({**u, "changes": [c for c in u["changes"]
                                                         if c["op"] != "message"]}
                                      for u in expected) if unit["changes"]]
    mismatches = diff_units(got, expected)
    assert not mismatches, "\n".join(mismatches)


def test_reference_saw_every_workload(source: Source, expected: list[dict[str, Any]]) -> None:
    """Guards against a vacuous comparison: the reference side holds what the workloads did."""
    changes = [c for u in expected for c in u["changes"]]
    ops = {c["op"] for c in changes}
    assert ops == {"insert", "update", "delete", "truncate", "message"}
    assert any(c["unchanged_toast"] for c in changes if c.get("table") == "public.toasty")
    assert any(c["unchanged_toast"] and c["before"] for c in changes if c.get("table") == "public.toasty_full")
    assert any(c["op"] == "truncate" and c["cascade"] and c["restart_identity"] for c in changes)
    prefixes = {c["prefix"] for c in changes if c["op"] == "message"}
    assert prefixes == {"conf.tx", "conf.only", "conf.nontx", "conf.survivor", "conf.in_stream"}
    big = [c for c in changes if c.get("table") == "public.big"]
    ids = {c["after"]["id"] if c["after"] else c["key"]["id"] for c in big}
    assert max(ids) == 20000 + STREAM_ROWS and not any(5000 < i <= 20000 for i in ids)  # aborts left no trace
    assert not any(c.get("after") and c["after"].get("name") == "rolled back" for c in changes)
    key_change = [c for c in changes if c["op"] == "update" and c.get("table") == "public.rid_default"
                  and c["key"] == {"id": 2}]
    assert key_change and key_change[0]["after"]["id"] == 100
