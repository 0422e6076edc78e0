"""(Re)capture the golden pgoutput bytes in tests/data/pgoutput/ from real PostgreSQL 15 and 18.

Run from the repository root (a few seconds; starts one throwaway cluster at a time):

    .venv/bin/python tools/capture_goldens.py            # both majors
    .venv/bin/python tools/capture_goldens.py 18         # only PostgreSQL 18

For each PostgreSQL major (15: protocol versions 1-3, 18: 1-4) it starts a ``LocalCluster``, creates
one pgoutput slot per protocol version (``two_phase`` for versions 3+, the first to accept the
option), runs one workload that makes every message kind appear, then reads each slot with
``pg_logical_slot_peek_binary_changes`` (``logical_decoding_work_mem = 64kB`` in that session, so
large transactions stream). Options per protocol version:

    1: messages                    (no streaming, no two_phase: both need 2+ / 3+)
    2: messages, streaming on
    3: messages, streaming on, two_phase
    4: messages, streaming parallel, two_phase  (PG16+; Stream Abort then carries abort_lsn/ts)

Output: ``tests/data/pgoutput/pg<major>_proto<N>.jsonl``, one message a line::

    {"lsn": "0/1A2B3C", "hex": "42...", "in_stream": false, "tag": "B", "expected": {...}}

``in_stream`` follows Stream Start/Stop. For PG18 a second pass (see IMMEDIATE_PASS) is appended
to each protocol 2+ file, because PG18 does not stream transactions it already knows aborted.
``expected`` is the message as ``dataclasses.asdict(decode(...))`` would give it, with bytes as hex, ``UNCHANGED_TOAST`` as the
string "UNCHANGED_TOAST" and tuples as lists. It is NOT produced by ``pgfeed.pgoutput``: a small
reference parser below, written from the protocol page, makes it, and the script then compares it
with the service decoder and with the xid column of the peek function, printing each disagreement
as a PROBLEM line and exiting 1 (the unit test tests/unit/pgoutput/test_goldens.py then fails). Repeats are dropped
(streamed bulk inserts): at most 3 lines per message variant and about 5 per tag per file.
Timestamps, xids, LSNs and OIDs are kept as captured, so a re-capture rewrites every file.

Every tag (B C O R Y I U D T M S E c A b P K r p) is produced by PG15 proto 3 and PG18 proto 4.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.checkout import SOURCE_ROOTS

sys.path[:0] = [str(path) for path in SOURCE_ROOTS]  # this checkout's packages

from pgfeed.localpg import LocalCluster
from pgfeed.pgoutput import UnchangedToast, decode

OUT_DIR = ROOT / "tests" / "data" / "pgoutput"
PROTOCOLS = {"15": (1, 2, 3), "18": (1, 2, 3, 4)}
ALL_TAGS = "BCORYIUDTMSEcAbPKrp"
# Tags whose message carries the streamed transaction's xid first inside Stream Start..Stop.
STREAMABLE_TAGS = set("RYIUDTM")
# PostgreSQL 18 (not 15) checks the commit log before streaming a transaction and skips one it
# already knows aborted, so a slot read after the workload shows no Stream Abort for a whole
# transaction (only for a rolled-back subtransaction of a committed one), and a rolled-back large
# prepared transaction arrives as Begin Prepare..Prepare instead of Stream Prepare. So for PG18,
# extra slots ("_late", protocol 2+) created just before IMMEDIATE_FROM are read with
# debug_logical_replication_streaming = immediate (PG16+: stream every change at once, skipping
# that check); their lines follow the main pass's in the same file, deduplicated together.
IMMEDIATE_PASS = {"18"}
IMMEDIATE_FROM = "streamed_abort"

SCHEMA = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TYPE pair AS (a int, b text);
CREATE TABLE t_default (id int PRIMARY KEY, name text, m mood, p pair, ts timestamptz,
                        amount numeric, data bytea);
CREATE TABLE t_full (id int, name text);
ALTER TABLE t_full REPLICA IDENTITY FULL;
CREATE TABLE t_nothing (id int, note text);
ALTER TABLE t_nothing REPLICA IDENTITY NOTHING;
CREATE TABLE t_index (id int NOT NULL, code text NOT NULL, v text);
CREATE UNIQUE INDEX t_index_code ON t_index (code);
ALTER TABLE t_index REPLICA IDENTITY USING INDEX t_index_code;
CREATE TABLE t_toast (id int PRIMARY KEY, big text, n int);
ALTER TABLE t_toast ALTER big SET STORAGE EXTERNAL;
CREATE TABLE t_parent (id serial PRIMARY KEY, v text);
CREATE TABLE t_child (id serial PRIMARY KEY, parent_id int REFERENCES t_parent (id), v text);
CREATE TABLE t_bulk (id int PRIMARY KEY, pad text);
CREATE PUBLICATION pub FOR ALL TABLES;
"""

BIG = "(SELECT string_agg(md5(g::text), '') FROM generate_series(1, 80) g)"  # 2.5 kB: toasted


def bulk(first: int, n: int = 1500) -> str:
    return (f"INSERT INTO t_bulk SELECT g, repeat('x', 200) FROM generate_series({first}, "
            f"{first + n - 1}) g")


# Each inner list is run in one session, statement by statement (autocommit; BEGIN/COMMIT explicit).
WORKLOAD: list[tuple[str, list[str]]] = [
    ("origin", [
        "SELECT pg_replication_origin_create('golden_origin')",
        "SELECT pg_replication_origin_session_setup('golden_origin')",
        "BEGIN",
        "SELECT pg_replication_origin_xact_setup('0/ABCDEF0', '2024-01-02 03:04:05+00')",
        ("INSERT INTO t_default VALUES (1, 'alpha', 'happy', '(1,x)',"
         " '2024-01-02 03:04:05.123456+00', 12.50, '\\x00ff')"),
        "COMMIT",
        "SELECT pg_replication_origin_session_reset()",
    ]),
    ("inserts", [
        "BEGIN",
        ("INSERT INTO t_default VALUES (2, 'naïve €', 'sad', NULL, '-infinity', 'NaN', ''),"
         " (3, '', NULL, '(,)', NULL, NULL, NULL)"),
        "INSERT INTO t_full VALUES (1, 'full one'), (2, 'full two')",
        "INSERT INTO t_nothing VALUES (1, 'nothing')",
        "INSERT INTO t_index VALUES (1, 'a', 'v1'), (2, 'b', 'v2')",
        f"INSERT INTO t_toast VALUES (1, {BIG}, 0)",
        "INSERT INTO t_parent (v) VALUES ('p1')",
        "INSERT INTO t_child (parent_id, v) VALUES (1, 'c1')",
        "COMMIT",
    ]),
    ("updates", [
        "BEGIN",
        "UPDATE t_default SET name = 'beta', m = 'ok' WHERE id = 1",  # U N
        "UPDATE t_default SET id = 10 WHERE id = 3",  # U K (key change)
        "UPDATE t_full SET name = 'full changed' WHERE id = 1",  # U O
        "UPDATE t_index SET code = 'c' WHERE id = 2",  # U K via the index
        "UPDATE t_index SET v = 'v1b' WHERE id = 1",  # U N
        "UPDATE t_toast SET n = n + 1 WHERE id = 1",  # 'u' unchanged TOAST
        "COMMIT",
    ]),
    ("deletes", [
        "BEGIN",
        "DELETE FROM t_default WHERE id = 10",  # D K
        "DELETE FROM t_full WHERE id = 2",  # D O
        "DELETE FROM t_index WHERE id = 1",  # D K via the index
        "COMMIT",
    ]),
    ("truncates", [
        "TRUNCATE t_parent RESTART IDENTITY CASCADE",  # options 3, parent + child
        "TRUNCATE t_nothing",  # options 0
    ]),
    ("messages", [
        "SELECT pg_logical_emit_message(false, 'golden.nontx', 'non-transactional')",
        "BEGIN",
        "SELECT pg_logical_emit_message(true, 'golden.tx', '\\x00ff01'::bytea)",
        "INSERT INTO t_nothing VALUES (2, 'with message')",
        "COMMIT",
        "BEGIN",
        "SELECT pg_logical_emit_message(true, 'golden.only', 'message-only transaction')",
        "COMMIT",
        "BEGIN",
        "SELECT pg_logical_emit_message(false, 'golden.rolledback', 'survives the rollback')",
        "ROLLBACK",
    ]),
    ("streamed_commit", [
        "BEGIN",
        bulk(1),
        "UPDATE t_default SET name = 'in stream' WHERE id = 1",
        "UPDATE t_full SET name = 'full in stream' WHERE id = 1",
        "DELETE FROM t_default WHERE id = 2",
        "SELECT pg_logical_emit_message(true, 'golden.stream', 'inside a streamed transaction')",
        "TRUNCATE t_child",
        "INSERT INTO t_nothing VALUES (3, 'after truncate')",
        "COMMIT",
    ]),
    ("two_phase", [
        "BEGIN",
        "INSERT INTO t_default VALUES (20, 'prepared then committed', 'ok', NULL, NULL, 1, NULL)",
        "PREPARE TRANSACTION 'golden_commit'",
        "COMMIT PREPARED 'golden_commit'",
        "BEGIN",
        "INSERT INTO t_default VALUES (21, 'prepared then rolled back', 'sad', NULL, NULL, 2, NULL)",
        "PREPARE TRANSACTION 'golden_rollback'",
        "ROLLBACK PREPARED 'golden_rollback'",
    ]),
    ("streamed_abort", [
        "BEGIN",
        bulk(100001),
        "ROLLBACK",
    ]),
    ("streamed_subxact_abort", [
        "BEGIN",
        "INSERT INTO t_nothing VALUES (4, 'before savepoint')",
        "SAVEPOINT s1",
        bulk(200001),
        "ROLLBACK TO SAVEPOINT s1",
        "INSERT INTO t_nothing VALUES (5, 'after rollback to savepoint')",
        "COMMIT",
    ]),
    ("stream_prepare", [
        "BEGIN",
        bulk(300001),
        "PREPARE TRANSACTION 'golden_stream_commit'",
        "COMMIT PREPARED 'golden_stream_commit'",
        "BEGIN",
        bulk(400001),
        "PREPARE TRANSACTION 'golden_stream_rollback'",
        "ROLLBACK PREPARED 'golden_stream_rollback'",
    ]),
]


# --- Reference parser: the protocol page, field by field, independent of pgfeed.pgoutput. -----


class _Ref:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 1

    def take(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from(">" + fmt, self.data, self.pos)
        self.pos += struct.calcsize(">" + fmt)
        return values

    def one(self, fmt: str) -> Any:
        return self.take(fmt)[0]

    def cstr(self) -> str:
        end = self.data.index(b"\0", self.pos)
        text = self.data[self.pos:end].decode()
        self.pos = end + 1
        return text

    def tuple_data(self) -> dict[str, Any]:
        values: list[Any] = []
        for _ in range(self.one("H")):
            kind = chr(self.one("B"))
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append("UNCHANGED_TOAST")
            elif kind in "tb":
                n = self.one("i")
                raw = self.data[self.pos:self.pos + n]
                assert len(raw) == n, "short column value"
                self.pos += n
                values.append(raw.decode() if kind == "t" else raw.hex())
            else:
                raise ValueError(f"unknown tuple kind {kind!r}")
        return {"values": values}


def reference_parse(data: bytes, in_stream: bool, parallel: bool) -> dict[str, Any]:
    """The message as a plain dict (field names of pgfeed.pgoutput.messages)."""
    r = _Ref(data)
    tag = chr(data[0])
    out: dict[str, Any] = {}
    if tag in STREAMABLE_TAGS:
        out["xid"] = r.one("I") if in_stream else None
    if tag == "B":
        out.update(zip(("final_lsn", "commit_ts", "xid"), r.take("QqI")))
    elif tag == "C":
        out.update(zip(("flags", "commit_lsn", "end_lsn", "commit_ts"), r.take("BQQq")))
    elif tag == "O":
        out["commit_lsn"] = r.one("Q")
        out["name"] = r.cstr()
    elif tag == "R":
        out["relation_id"] = r.one("I")
        out["namespace"] = r.cstr()
        out["relation_name"] = r.cstr()
        out["replica_identity"] = r.one("B")
        columns = []
        for _ in range(r.one("H")):
            flags = r.one("B")
            name = r.cstr()
            type_oid, type_modifier = r.take("Ii")
            columns.append({"flags": flags, "name": name, "type_oid": type_oid,
                            "type_modifier": type_modifier})
        out["columns"] = columns
    elif tag == "Y":
        out["type_oid"] = r.one("I")
        out["namespace"] = r.cstr()
        out["name"] = r.cstr()
    elif tag == "I":
        out["relation_id"] = r.one("I")
        assert r.one("B") == ord("N")
        out["new_tuple"] = r.tuple_data()
    elif tag == "U":
        out["relation_id"] = r.one("I")
        marker = r.one("B")
        out["old_kind"] = out["old_tuple"] = None
        if marker in (ord("K"), ord("O")):
            out["old_kind"] = marker
            out["old_tuple"] = r.tuple_data()
            marker = r.one("B")
        assert marker == ord("N")
        out["new_tuple"] = r.tuple_data()
    elif tag == "D":
        out["relation_id"] = r.one("I")
        out["old_kind"] = r.one("B")
        assert out["old_kind"] in (ord("K"), ord("O"))
        out["old_tuple"] = r.tuple_data()
    elif tag == "T":
        nrelids, out["options"] = r.take("IB")
        out["relation_ids"] = [r.one("I") for _ in range(nrelids)]
    elif tag == "M":
        out["flags"], out["lsn"] = r.take("BQ")
        out["prefix"] = r.cstr()
        n = r.one("I")
        out["content"] = data[r.pos:r.pos + n].hex()
        r.pos += n
    elif tag == "S":
        xid, first = r.take("IB")
        out.update(xid=xid, first_segment=first == 1)
    elif tag == "E":
        pass
    elif tag == "c":
        out.update(zip(("xid", "flags", "commit_lsn", "end_lsn", "commit_ts"), r.take("IBQQq")))
    elif tag == "A":
        out.update(zip(("xid", "subxid"), r.take("II")))
        out["abort_lsn"], out["abort_ts"] = r.take("Qq") if parallel else (None, None)
    elif tag == "b":
        out.update(zip(("prepare_lsn", "end_lsn", "prepare_ts", "xid"), r.take("QQqI")))
        out["gid"] = r.cstr()
    elif tag in "Pp":
        out.update(zip(("flags", "prepare_lsn", "end_lsn", "prepare_ts", "xid"), r.take("BQQqI")))
        out["gid"] = r.cstr()
    elif tag == "K":
        out.update(zip(("flags", "commit_lsn", "end_lsn", "commit_ts", "xid"), r.take("BQQqI")))
        out["gid"] = r.cstr()
    elif tag == "r":
        out.update(zip(("flags", "prepare_end_lsn", "rollback_end_lsn", "prepare_ts",
                        "rollback_ts", "xid"), r.take("BQQqqI")))
        out["gid"] = r.cstr()
    else:
        raise ValueError(f"unknown tag {tag!r}")
    if r.pos != len(data):
        raise ValueError(f"{tag}: {len(data) - r.pos} trailing bytes")
    return out


def plain(value: Any) -> Any:
    """asdict() output made JSON-plain: bytes as hex, UNCHANGED_TOAST as a string, lists."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, UnchangedToast):
        return "UNCHANGED_TOAST"
    return value


def service_decode(data: bytes, in_stream: bool) -> Any:
    try:
        return plain(dataclasses.asdict(decode(data, in_stream=in_stream)))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


# --- Capture -----------------------------------------------------------------------------------


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def peek_options(proto: int) -> list[str]:
    opts = ["proto_version", str(proto), "publication_names", "pub", "messages", "true"]
    if proto >= 2:
        opts += ["streaming", "parallel" if proto >= 4 else "on"]
    if proto >= 3:
        opts += ["two_phase", "true"]
    return opts


def variant(tag: str, in_stream: bool, msg: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two messages of one tag worth keeping both (for deduplication)."""
    key: tuple[Any, ...] = (tag, in_stream)
    if tag == "R":
        key += (msg["relation_name"], msg["replica_identity"])
    elif tag == "I":
        key += (msg["relation_id"],)
    elif tag == "U":
        key += (msg["relation_id"], msg["old_kind"], "UNCHANGED_TOAST" in msg["new_tuple"]["values"])
    elif tag == "D":
        key += (msg["relation_id"], msg["old_kind"])
    elif tag == "T":
        key += (msg["options"], len(msg["relation_ids"]))
    elif tag == "M":
        key += (msg["flags"], msg["prefix"])
    elif tag == "S":
        key += (msg["first_segment"],)
    elif tag == "A":
        key += (msg["xid"] == msg["subxid"],)
    elif tag in "bPKrp":
        key += (msg["gid"],)
    return key


def capture_slot(conn: psycopg.Connection[Any], slot: str, proto: int, problems: list[str],
                 per_variant: Counter[tuple[Any, ...]], per_tag: Counter[str]
                 ) -> list[dict[str, Any]]:
    args = ", ".join(f"'{o}'" for o in peek_options(proto))
    rows = conn.execute(
        f"SELECT lsn::text, xid::text::bigint, data FROM "
        f"pg_logical_slot_peek_binary_changes('{slot}', NULL, NULL, {args})").fetchall()
    lines: list[dict[str, Any]] = []
    kept: Counter[str] = Counter()
    in_stream = False
    for lsn, row_xid, data in rows:
        data = bytes(data)
        tag = chr(data[0])
        line_in_stream = in_stream and tag not in "SE"
        where = f"{slot} {lsn} {tag}"
        try:
            expected = reference_parse(data, line_in_stream, parallel=proto >= 4)
        except Exception as exc:
            problems.append(f"{where}: reference parser failed: {exc!r} hex={data.hex()}")
            continue
        got = service_decode(data, line_in_stream)
        if got != expected:
            problems.append(f"{where}: decoder disagrees\n  hex      {data.hex()}\n"
                            f"  expected {expected}\n  got      {got}")
        # The peek row's xid is the top-level one, except for a subtransaction's Stream Abort
        # (the row names the subtransaction); in-stream changes of a subtransaction carry the
        # subtransaction's xid (assigned later, so larger).
        field = "subxid" if tag == "A" else "xid"
        xid = expected.get(field)
        if xid is not None and (xid < row_xid if line_in_stream else xid != row_xid):
            problems.append(f"{where}: {field} {xid} but the peek row says {row_xid}")
        if tag == "S":
            in_stream = True
        elif tag == "E":
            in_stream = False
        key = variant(tag, line_in_stream, expected)
        if per_variant[key] == 0 or (per_variant[key] < 3 and per_tag[tag] < 5):
            lines.append({"lsn": lsn, "hex": data.hex(), "in_stream": line_in_stream, "tag": tag,
                          "expected": expected})
            per_tag[tag] += 1
            kept[tag] += 1
        per_variant[key] += 1
    print(f"  {slot}: {len(rows)} messages, kept {len(lines)}; tags "
          + " ".join(f"{t}:{kept[t]}" for t in ALL_TAGS if kept[t]))
    return lines


def create_slots(conn: psycopg.Connection[Any], version: str, suffix: str = "",
                 min_proto: int = 1) -> None:
    for proto in PROTOCOLS[version]:
        if proto >= min_proto:
            two_phase = "true" if proto >= 3 else "false"
            conn.execute(f"SELECT pg_create_logical_replication_slot('golden_v{proto}{suffix}', "
                         f"'pgoutput', false, {two_phase})")


def capture_version(version: str, problems: list[str]) -> None:
    print(f"PostgreSQL {version}")
    late = version in IMMEDIATE_PASS
    with LocalCluster.start(version) as pg, psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute(SCHEMA)
        create_slots(conn, version)
        for name, statements in WORKLOAD:
            if late and name == IMMEDIATE_FROM:
                create_slots(conn, version, "_late", min_proto=2)
            with psycopg.connect(pg.dsn(), autocommit=True) as session:
                for statement in statements:
                    try:
                        session.execute(statement)
                    except psycopg.Error as exc:
                        raise SystemExit(f"step {name!r}: {statement!r}: {exc}") from exc
        conn.execute("SET logical_decoding_work_mem = '64kB'")
        conn.execute("SET timezone = 'UTC'")
        conn.execute("SET datestyle = 'ISO'")
        conn.execute("SET extra_float_digits = 3")
        for proto in PROTOCOLS[version]:
            per_variant: Counter[tuple[Any, ...]] = Counter()
            per_tag: Counter[str] = Counter()
            lines = capture_slot(conn, f"golden_v{proto}", proto, problems, per_variant,
                                 per_tag)
            if late and proto >= 2:
                conn.execute("SET debug_logical_replication_streaming = 'immediate'")
                lines += capture_slot(conn, f"golden_v{proto}_late", proto, problems,
                                      per_variant, per_tag)
                conn.execute("RESET debug_logical_replication_streaming")
            path = OUT_DIR / f"pg{version}_proto{proto}.jsonl"
            with path.open("w") as f:
                for line in lines:
                    f.write(json.dumps(line, ensure_ascii=False) + "\n")
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots")


def main(argv: list[str]) -> int:
    versions = argv or list(PROTOCOLS)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    for version in versions:
        capture_version(version, problems)
    for problem in problems:
        print("PROBLEM", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
